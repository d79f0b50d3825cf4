// workbench/exercises_test.cpp -- tests of "Write it yourself"'s list and hand-out (exercises.hpp): cut() takes every
// exercise's answer out of the tutorial and leaves a gap that compiles and says "not written yet". The check's tests
// are beside its headers (exercise_diagnosis.hpp, exercise_check.hpp, exercise_blocks.hpp, exercise_grade.hpp).
#include "test_helpers.hpp"
#include "exercises.hpp"

#include <sys/resource.h>  // setrlimit: a file size limit stands for a full disk

namespace ex = exercises;

// cut(): every exercise's regions leave its file; a region of code becomes a gap that throws, a region of comments
// a line saying so; the other exercises' markers stay. A marker left open is an error.
TEST_CASE("exercises: cut() takes the answer out and leaves the gap") {
    for (const ex::Exercise& e : ex::EXERCISES) {
        int gaps = 0;
        for (const std::string& file : ex::TUTORIAL_FILES) {
            const std::string text = read_all(file), copy = ex::cut(text, e.name);
            const std::string begin = "// exercise " + e.name + ": begin";
            INFO(e.name, " in ", file);
            CHECK(!contains(copy, begin));
            CHECK(!contains(copy, "// exercise " + e.name + ": end"));
            bool shows = false;  // a region elsewhere that writes the answer out (chapter 07): cut to a throw
            std::istringstream lines(text);
            for (std::string line; std::getline(lines, line);)
                shows = shows || ex::shows_answer_of(ex::trimmed(line), e.name);
            if (shows)
                CHECK(contains(copy, "throw std::logic_error(\"cut from this copy: it shows exercise " + e.name));
            if (!contains(text, begin)) {
                if (!shows) CHECK(copy == text);
                continue;
            }
            gaps++;
            CHECK(contains(copy, "throw std::logic_error(\"not written yet: exercise " + e.name + "\");"));
            CHECK(contains(copy, "// exercise " + e.name + ": your code from here"));
            for (std::size_t at = text.find(begin); at != std::string::npos; at = text.find(begin, at + 1)) {
                std::size_t line = text.find('\n', at) + 1, end = text.find("// exercise " + e.name + ": end", at);
                const std::string answer = text.substr(line, text.rfind('\n', end) + 1 - line);
                CHECK(!contains(copy, answer));  // the region, whole, is gone
            }
            for (const ex::Exercise& other : ex::EXERCISES)
                if (other.name != e.name && contains(text, "// exercise " + other.name + ": begin"))
                    CHECK(contains(copy, "// exercise " + other.name + ": begin"));
        }
        CHECK(gaps >= 1);
    }
    // The Llama layer writes out RMSNorm's backward, attention's, the heads' and the rotation back: a copy of any of
    // those exercises holds none of it; a copy of another keeps the chapter whole.
    const std::string llama = read_all("chapters/07_llama_layer.hpp");
    for (const std::string name : {"rmsnorm", "layernorm"}) CHECK(!contains(ex::cut(llama, name), "mean_d_xhat"));
    for (const std::string name : {"rmsnorm", "swiglu", "attention", "heads", "rotary", "decoder-block"})
        CHECK(!contains(ex::cut(llama, name), "rotate_pairs(std::move(dQ), L, 0, d_k, -1.0)"));
    CHECK(ex::cut(llama, "adam") == llama);
    CHECK(usage_error_of([] { ex::cut("a\n// exercise softmax: begin\nb\n", "softmax"); }) ==
          "exercise softmax: a '// exercise softmax: begin' without its '// exercise softmax: end'");
}

// The hand-out: a new directory gets the files with the answer cut out, scripts still executable, and nothing else
// beside it; a DIR that cannot take it is one line naming why (before, a path under a file, a dangling link or /proc
// crashed with an uncaught filesystem_error, and a file or /dev/null "is not empty"); a write that fails (a full disk,
// here a file size limit) leaves DIR absent and no folder beside it (before, model.hpp was written as 0 bytes and the
// run said "wrote"); and with no files (a student's copy, which has no git) it says where to run it.
TEST_CASE("exercises: the hand-out is written whole or not at all, and a DIR that cannot take it says why") {
    TempDir dir("hand-out");
    const std::vector<std::string> files = {"matrix.hpp", "model.hpp", "train.hpp", "chapters/04_todays_blocks.hpp",
                                            "Makefile", "docs/check-course", "workbench/exercise_check_test.cpp"};
    const std::string copy = dir.file("copy");
    CHECK(printed_by([&] { ex::hand_out("softmax", copy + "/", files); }) ==
          "wrote " + copy + "/: exercise softmax cut out. The student reads EXERCISE.md there, then runs make check "
          "(neither make nor ./sorter first)\n");
    CHECK(contains(read_all(copy + "/matrix.hpp"), "not written yet: exercise softmax"));
    CHECK(read_all(copy + "/train.hpp") == read_all("train.hpp"));
    CHECK((std::filesystem::status(copy + "/docs/check-course").permissions() & std::filesystem::perms::owner_exec) !=
          std::filesystem::perms::none);
    CHECK(!std::filesystem::exists(copy + "/workbench"));  // the exercises' tests stay behind
    CHECK(dir.listing() == std::vector<std::string>{"copy"});  // no folder left beside it
    std::filesystem::create_directory(dir.file("empty"));
    printed_by([&] { ex::hand_out("layernorm rmsnorm", dir.file("empty"), files); });  // an empty directory: filled
    CHECK(contains(read_all(dir.file("empty/model.hpp")), "not written yet: exercise layernorm"));
    CHECK(contains(read_all(dir.file("empty/chapters/04_todays_blocks.hpp")), "not written yet: exercise rmsnorm"));

    std::ofstream(dir.file("a-file")) << "x";
    std::filesystem::create_symlink(dir.file("nowhere"), dir.file("dangling"));
    const std::string at = "make exercise: DIR=";
    // (the reason is the C++ library's words: libstdc++ says "Not a directory", libc++ "File exists")
    const std::string under_a_file = usage_error_of([&] { ex::hand_out("softmax", dir.file("a-file/x"), files); });
    const std::string cannot = at + dir.file("a-file/x") + ": cannot make its folder " + dir.file("a-file") + " (";
    CHECK((under_a_file == cannot + "Not a directory): name a directory where one can be made" ||
           under_a_file == cannot + "File exists): name a directory where one can be made"));
    CHECK(usage_error_of([&] { ex::hand_out("softmax", dir.file("dangling"), files); }) ==
          at + dir.file("dangling") + " is a link to " + dir.file("nowhere") +
              ", which does not exist: name a new directory");
    CHECK(usage_error_of([&] { ex::hand_out("softmax", dir.file("a-file"), files); }) ==
          at + dir.file("a-file") + " is a file, not a directory: name a new directory");
    CHECK(usage_error_of([&] { ex::hand_out("softmax", "/dev/null", files); }) ==
          at + "/dev/null is not a directory (a device, a pipe or a socket): name a new directory");
    CHECK(usage_error_of([&] { ex::hand_out("softmax", copy, files); }) == at + copy + " is not empty: name a new "
                                                                                       "directory");
    if (std::filesystem::is_directory("/proc/self"))
        CHECK(contains(usage_error_of([&] { ex::hand_out("softmax", "/proc/sorter-copy", files); }),
                       at + "/proc/sorter-copy: cannot make a folder in /proc ("));
    CHECK(usage_error_of([&] { ex::hand_out("softmax", dir.file("x"), {}); }) ==
          "make exercise: git lists no files here: run it in the repository, a git clone (the copy takes the files "
          "git tracks; a student's copy has no git, and hands out nothing)");
    CHECK(contains(read_all("Makefile"), "$$(git ls-files 2>/dev/null)"));  // (git's "fatal: not a git repository")

    // A full disk: each file is refused past 4 kB, as by a disk that filled. (SIGXFSZ ignored: the write fails.)
    rlimit was{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &was) == 0);
    rlimit small = was;
    small.rlim_cur = 4096;
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    const std::string full = usage_error_of([&] { ex::hand_out("softmax", dir.file("full"), files); });
    setrlimit(RLIMIT_FSIZE, &was);
    std::signal(SIGXFSZ, old_handler);
    CHECK(full == "make exercise: cannot write " + dir.file("full") + "/matrix.hpp (File too large); nothing was "
                  "written to " + dir.file("full"));
    CHECK(dir.listing() == std::vector<std::string>{"a-file", "copy", "dangling", "empty"});  // no DIR, no folder
}
