// workbench/exercise_grade_test.cpp -- tests of "Write it yourself"'s grade (exercise_grade.hpp): the tutorial's own
// answers pass every check and the training run, the training run's reading tells its failures apart, and a copy's
// gaps are found, put back blank (EXERCISE.md keeps them) and carried into a clean hand-out (make regrade).
#include <fcntl.h>

#include "test_helpers.hpp"
#include "exercise_grade.hpp"

namespace ex = exercises;

// f with its standard output thrown away (the hand-out says what it wrote).
template <typename F>
void quietly(F f) {
    std::fflush(stdout);
    const int saved = dup(1), null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    f();
    std::fflush(stdout);
    dup2(saved, 1), close(null), close(saved);
}

// Every exercise's checks pass on the tutorial's own code (the gradients; the training run of the default once).
TEST_CASE("exercises: the tutorial's own answers pass every check") {
    for (const ex::Exercise& e : ex::EXERCISES) {
        ex::Checker c;
        c.quiet = true;
        ex::run_checks(c, e);
        INFO(e.name);
        CHECK(c.rows.size() >= 1);
        for (const ex::Row& r : c.rows) {
            INFO(r.check, " / ", r.tensor, ": ", ex::kind_text(r.verdict), " ", r.verdict.worst);
            CHECK(r.verdict.kind == ex::Kind::right);
        }
    }
    const ex::Training run = ex::train_briefly(ex::exercise_named("softmax"));
    CHECK(run.exact >= ex::TRAINING_PASSES);
    CHECK(ex::training_text(run) == "learns");
}

// Bug 7, the causal mask left out of the forward: every gradient agrees with that forward, and only training shows
// it. With exercise 9's figures (loss 0.0007, exact-match 1.4%) the training run names it; a diverged run, a run
// that learns, and one that learns too little are told apart.
TEST_CASE("exercises: the training run's reading") {
    CHECK(contains(ex::training_text({0.0007, 0.014}), "reads the answer"));
    CHECK(contains(ex::training_text({std::nan(""), 0.0}), "diverged"));
    CHECK(ex::training_text({0.01, 0.99}) == "learns");
    CHECK(ex::training_text({0.8, 0.3}) == "does not learn well enough");
}

// A copy's gaps: found between their marker lines, replaced in order, kept blank in EXERCISE.md, and carried from a
// student's copy into a clean hand-out of the same exercise (make regrade), the marker lines checked.
TEST_CASE("exercises: a copy's gaps, its first page and the regrade") {
    namespace fs = std::filesystem;
    const std::string text = "a\n  // exercise x: your code from here (docs)\n  (void)y;\n  // exercise x: to here\nb\n"
                             "  // exercise z: your code from here\n  // exercise z: to here\n";
    const std::vector<ex::Gap> gaps = ex::gaps_in(text);
    REQUIRE(gaps.size() == 2);
    CHECK(gaps[0].name == "x");
    CHECK(gaps[1].name == "z");
    CHECK(ex::regions_of(text)[0] ==
          "  // exercise x: your code from here (docs)\n  (void)y;\n  // exercise x: to here\n");
    CHECK(ex::with_regions(text, {"X\n", "Z\n"}) == "a\nX\nb\nZ\n");

    TempDir dir("exercise-copies");
    std::vector<std::string> files(std::begin(ex::TUTORIAL_FILES), std::end(ex::TUTORIAL_FILES));
    const std::string clean = (dir.path / "clean").string(), copy = (dir.path / "copy").string();
    quietly([&] { ex::hand_out("layernorm", clean, files), ex::hand_out("layernorm", copy, files); });
    CHECK(ex::handed_out_exercises(copy) == std::vector<std::string>{"layernorm"});
    const std::string page = ex::exercise_page(copy);
    CHECK(contains(page, "Then run `make check` here"));
    CHECK(contains(page, "the first row that says WRONG"));
    CHECK(contains(page, "the last line: the grade"));
    CHECK(contains(page, "```cpp model.hpp\n        // exercise layernorm: your code from here"));
    // The student writes; the regrade carries it, and only it, into the clean hand-out.
    std::string model = read_all(copy + "/model.hpp");
    const std::string blank = ex::regions_of(model)[0];
    const std::string mine = blank.substr(0, blank.find('\n') + 1) + "        return dy;  // mine\n" +
                             blank.substr(blank.rfind('\n', blank.size() - 2) + 1);
    std::ofstream(copy + "/model.hpp") << ex::with_regions(model, {mine}) + "// an edit outside the gap\n";
    ex::transplant(copy, clean);
    const std::string regraded = read_all(clean + "/model.hpp");
    CHECK(contains(regraded, "return dy;  // mine"));
    CHECK(!contains(regraded, "an edit outside the gap"));
    // A marker line gone: the regrade says so.
    std::ofstream(copy + "/model.hpp") << model.substr(0, model.find("        // exercise layernorm: to here"));
    CHECK(contains(usage_error_of([&] { ex::transplant(copy, clean); }), "are the marker lines intact?"));
    // A COPY that is not one (a typo, the repository itself): the regrade says so, and names make regrade, not make
    // check (before, it said "name the exercise, as in make check NAME=softmax").
    const std::string not_a_copy = usage_error_of([&] { ex::handed_out_exercises(dir.path.string()); });
    CHECK(contains(not_a_copy, "make regrade: COPY=" + dir.path.string() + " is not a student's copy"));
    CHECK(!contains(not_a_copy, "make check"));
}
