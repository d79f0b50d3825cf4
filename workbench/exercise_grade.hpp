// workbench/exercise_grade.hpp -- the grade of "Write it yourself" (exercises.hpp says how the parts fit): one
// exercise's checks (the whole model's in exercise_model.hpp), the grade line, the student's copy's first page
// (EXERCISE.md), a teacher's regrade in a clean hand-out, and ./exercise-check's main. Exercise-only, as exercises.hpp.
//
// Sections: the check of one exercise and its grade; the gaps of a copy; main.
#pragma once

#include <unistd.h>

#include <csignal>
#include <thread>

#include "exercise_blocks.hpp"
#include "exercise_model.hpp"

namespace exercises {

// ---------------------------------------------------------------------------------------------
// One exercise's check: its checks in order, each in every variant that changes it, the training run, and the grade,
// one line a teacher can collect (make check | tail -n 1).
struct Grade {
    int right = 0, checked = 0;
    std::string first_wrong, not_written;  // not_written: what the gap (or the student's code) threw
    Training training;
    bool pass() const { return not_written.empty() && right == checked && training.exact >= TRAINING_PASSES; }
};
inline const BlockCheck& block_check_named(const std::string& name) {
    for (const BlockCheck& b : BLOCK_CHECKS)
        if (b.name == name) return b;
    fail("exercise-check: no check named " + name);
}
inline void run_checks(Checker& c, const Exercise& e) {
    for (const std::string name : e.checks)
        for (std::size_t k = 0; k < e.variants.size(); k++) {
            ModelConfig config;
            TrainConfig train;
            e.variants[k].choose(config, train);
            c.variant = e.variants[k].label;
            if (name == "model") {
                check_whole_model(c, config, train.label_smoothing);
                continue;
            }
            const bool adam = name == "Adam", reads_choices = !adam && block_check_named(name).reads_choices;
            if (!reads_choices) c.variant = "";
            if (adam) check_adam(c, config);
            else block_check_named(name).run(c, config);
            if (!reads_choices) break;  // once, in the first variant's choices
        }
    c.variant = "";
}
// What the check prints first: the exercise, the shapes its numbers are read at, what a row compares, what to read.
inline std::string header_text(const Exercise& e) {
    std::string text = "exercise " + e.name + ": " + e.writes + "\n";
    if (e.name == "adam")
        return text + fmt("each row: one parameter, every entry after 3 updates (lr 0.01, beta1 %g, beta2 %g, eps "
                          "%g),\n  against numbers stored in the check: Adam has no forward, so no central "
                          "differences; right within %.0e\nread the first WRONG row, then the last line: the grade\n",
                          Optimizer::beta1, Optimizer::beta2, Optimizer::eps, TOLERANCE);
    ModelConfig m;
    TrainConfig t;
    e.variants[0].choose(m, t);
    m = small_config(m);
    const int d_k = m.d_model / m.n_heads, kv = m.key_value_heads();
    return text + fmt("the shapes: d_model %d, %d heads of d_k %d%s (so sqrt(d_k) = %.4g), d_ff %d, vocab %d; each "
                      "check names its own\neach row: yours against central differences of the forward (h %.0e), "
                      "every entry of each input and\n  parameter; right within %.0e; a WRONG row says where, and what "
                      "its pattern suggests\nread the first WRONG row, then the last line: the grade\n",
                      m.d_model, m.n_heads, d_k, kv == m.n_heads ? "" : fmt(" on %d key-value heads", kv).c_str(),
                      std::sqrt(double(d_k)), m.d_ff, m.vocab, H, TOLERANCE);
}
// The training run goes on a thread of its own, beside the checks (a second core): the two take about as long.
inline thread_local bool training_thread = false;  // this thread runs the training (a crash's grade line says so)
struct TrainingOnItsOwn {
    Training result;
    std::string error;  // what the student's code threw there ("" if nothing)
    std::thread thread;
    explicit TrainingOnItsOwn(const Exercise& e) : thread([this, &e] {
        training_thread = true;
        try {
            result = train_briefly(e);
        } catch (const std::exception& what) {
            error = what.what();
        }
    }) {}
    ~TrainingOnItsOwn() { wait(); }
    void wait() {
        if (thread.joinable()) thread.join();
    }
};
inline Grade check_exercise(const Exercise& e, bool quiet = false) {
    TrainingOnItsOwn training(e);
    Checker c;
    c.quiet = quiet;
    Grade g;
    try {
        run_checks(c, e);
    } catch (const std::exception& error) {  // the gap, or an error in the student's code (the training's too)
        g.not_written = error.what();
        if (!quiet) std::printf("  %s\n", error.what());
        return g;
    }
    for (const Row& r : c.rows) {
        g.checked++, g.right += r.verdict.is_right();
        if (g.first_wrong.empty() && !r.verdict.is_right()) g.first_wrong = row_text(r);
    }
    if (!quiet) std::printf("training: %ld steps of the default run%s ...\n", TRAINING_STEPS,
                            e.variants[0].choose == as_default ? "" : " with this exercise's choices");
    training.wait();
    if (!training.error.empty()) {
        g.not_written = training.error;
        if (!quiet) std::printf("  %s\n", training.error.c_str());
        return g;
    }
    g.training = training.result;
    if (!quiet) std::printf("  loss %.4f, exact-match %.1f%% of %d held-out: %s\n", g.training.loss,
                            100 * g.training.exact, HELD_OUT_CHECKED, training_text(g.training).c_str());
    return g;
}
inline std::string grade_text(const Exercise& e, const Grade& g) {
    if (!g.not_written.empty()) return "grade: " + e.name + ": fail: " + g.not_written;
    std::string text = fmt("grade: %s: %s: %d of %d rows right, training %.1f%% exact-match", e.name.c_str(),
                           g.pass() ? "pass" : "fail", g.right, g.checked, 100 * g.training.exact);
    return g.first_wrong.empty() ? text : text + " (first wrong: " + g.first_wrong + ")";
}

// ---------------------------------------------------------------------------------------------
// The gaps of a student's copy: in each tutorial file, the lines from `// exercise NAME: your code from here` to
// `// exercise NAME: to here`, both kept. make check finds the exercises there; EXERCISE.md, written at the hand-out,
// keeps the blank gaps for make blank (workbench/exercise_blank.sh); make regrade copies them into a clean hand-out.
struct Gap {
    std::string name;
    std::size_t from, to;  // the gap's text: text.substr(from, to - from), whole lines
};
inline std::vector<Gap> gaps_in(const std::string& text) {
    std::vector<Gap> gaps;
    std::string open;
    std::size_t open_at = 0;
    for (std::size_t at = 0; at < text.size();) {
        std::size_t end = text.find('\n', at);
        end = end == std::string::npos ? text.size() : end + 1;
        const std::string words = trimmed(text.substr(at, end - at - (text[end - 1] == '\n')));
        const std::size_t mark = words.find(": your code from here");
        if (starts_with(words, "// exercise ") && mark != std::string::npos)
            open = words.substr(12, mark - 12), open_at = at;
        else if (!open.empty() && words == "// exercise " + open + ": to here")
            gaps.push_back({open, open_at, end}), open.clear();
        at = end;
    }
    return gaps;
}
inline std::string path_in(const std::string& dir, const std::string& file) {
    return dir.empty() ? file : dir + "/" + file;
}
// The exercises whose gaps a copy holds, in the order of the tutorial.
inline std::vector<std::string> handed_out_exercises(const std::string& dir = "") {
    std::vector<std::string> names;
    for (const std::string& file : TUTORIAL_FILES)
        for (const Gap& gap : gaps_in(read_all(path_in(dir, file))))
            if (std::find(names.begin(), names.end(), gap.name) == names.end()) names.push_back(gap.name);
    if (names.empty() && dir.empty())
        fail("make check: this is not a student's copy (no '// exercise NAME: your code from here' in the tutorial): "
             "name the exercise, as in make check NAME=softmax");
    if (names.empty())  // (make regrade's COPY; a hand-out's own page always has its gaps)
        fail("make regrade: COPY=" + dir + " is not a student's copy (no '// exercise NAME: your code from here' in "
             "its tutorial): name the directory make exercise wrote");
    return names;
}
// text with its gaps' regions replaced by `regions`, one a gap, in order.
inline std::string with_regions(const std::string& text, const std::vector<std::string>& regions) {
    const std::vector<Gap> gaps = gaps_in(text);
    std::string out;
    std::size_t at = 0;
    for (std::size_t k = 0; k < gaps.size(); k++)
        out += text.substr(at, gaps[k].from - at) + regions[k], at = gaps[k].to;
    return out + text.substr(at);
}
inline std::vector<std::string> regions_of(const std::string& text) {
    std::vector<std::string> regions;
    for (const Gap& gap : gaps_in(text)) regions.push_back(text.substr(gap.from, gap.to - gap.from));
    return regions;
}
inline void write_whole(const std::string& path, const std::string& text) {  // to a file beside it, then renamed
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary) << text;
    if (read_all(tmp) != text || std::rename(tmp.c_str(), path.c_str()) != 0)
        std::remove(tmp.c_str()), fail("cannot write " + path);
}
// EXERCISE.md, the student's first page: what to write, what to run and what to read, and the blank gaps (make blank
// reads them back, each in a ```cpp FILE block).
const std::string EXERCISE_PAGE = "EXERCISE.md";
inline std::string wrapped(const std::string& paragraph, const std::string& indent = "") {  // at 100 columns
    std::string out, line;
    for (const std::string& word : split_words(paragraph)) {
        if (!line.empty() && line.size() + 1 + word.size() > 100) out += line + "\n", line = indent + word;
        else line += (line.empty() ? "" : " ") + word;
    }
    return out + line + "\n";
}
inline std::string exercise_page(const std::string& dir) {
    const std::vector<std::string> names = handed_out_exercises(dir);
    std::string page = "# Write it yourself: " + join(names, " and ") + "\n\n";
    for (const std::string& name : names) {
        const Exercise& e = exercise_named(name);
        std::size_t number = &e - &EXERCISES[0] + 1;
        std::vector<std::string> files;
        for (const std::string& file : TUTORIAL_FILES)
            for (const Gap& gap : gaps_in(read_all(path_in(dir, file))))
                if (gap.name == name && (files.empty() || files.back() != file)) files.push_back(file);
        page += wrapped(fmt("Write %s in the gap of %s: the lines from `// exercise %s: your code from here` to `// "
                            "exercise %s: to here`. docs/course.md, \"Write it yourself\", W%zu, says what it must do "
                            "and has a hint.", e.writes.c_str(), join(files, " and ").c_str(), name.c_str(),
                            name.c_str(), number)) + "\n";
    }
    page += wrapped("Then run `make check` here, and read two things in what it prints:") + "\n" +
            wrapped("- the first row that says WRONG: the smallest block that shows the mistake, where its error is "
                    "worst, and what the pattern of the error suggests;", "  ") +
            wrapped("- the last line: the grade.", "  ") + "\n" +
            wrapped("The first `make check` builds the check, and precompiles the C++ library's headers for the next "
                    "ones: 11 s on a quiet 2-core machine, 22 s on a busy one. After an edit it rebuilds and runs in "
                    "7 to 9 s on a quiet machine, 11 to 19 s while other programs run. You need neither `make` "
                    "nor ./sorter for it (`make` builds ./sorter with -O3, a minute and a half or more: the program "
                    "then runs your code).") + "\n" +
            wrapped("`make blank` puts the blank gap back, as below; what the gap held goes to exercise-yours.txt "
                    "first.") + "\n" +
            "## The blank gaps, as handed out\n\n";
    for (const std::string& file : TUTORIAL_FILES)
        for (const std::string& region : regions_of(read_all(path_in(dir, file))))
            page += "```cpp " + file + "\n" + region + "```\n\n";
    return page;
}
// make regrade: the gaps of the copy `from` into the clean hand-out `to` of the same exercises.
inline void transplant(const std::string& from, const std::string& to) {
    for (const std::string& file : TUTORIAL_FILES) {
        const std::string theirs = read_all(path_in(from, file)), clean = read_all(path_in(to, file));
        std::vector<std::string> names_theirs, names_clean;
        for (const Gap& g : gaps_in(theirs)) names_theirs.push_back(g.name);
        for (const Gap& g : gaps_in(clean)) names_clean.push_back(g.name);
        if (names_theirs != names_clean)
            fail("make regrade: " + path_in(from, file) + " has the gaps of " + join(names_theirs, ", ") +
                 ", a clean hand-out " + join(names_clean, ", ") + ": are the marker lines intact?");
        if (names_clean.empty()) continue;
        write_whole(path_in(to, file), with_regions(clean, regions_of(theirs)));
        std::printf("regrade: %s's gap (%s) in a clean hand-out\n", path_in(from, file).c_str(),
                    join(names_clean, ", ").c_str());
    }
}

// ---------------------------------------------------------------------------------------------
// main: --list; --hand-out NAME DIR FILE...; --page DIR (EXERCISE.md); --gaps DIR; --transplant FROM TO; or
// the check of NAME (in a student's copy: the ones it holds). A student's code that crashes (an index past the end,
// say: the bounds checks stop it there) or never ends still ends with a grade line, which names the check it was in.
inline std::string crash_grade, crash_first_wrong, crash_training;  // "\ngrade: NAME: fail: crashed in CHECK: ", the
    // signal's words, " (first wrong before it: ...)"; crash_training in CHECK's place: "the training run"
inline const std::string crash_newline = "\n";  // (strings made before any signal: the handler only writes them)
constexpr long TIME_LIMIT = 300;  // seconds; the check takes a few
inline void grade_crash(int signal) {
    const char* why = signal == SIGABRT ? "an index out of range (a bounds check failed: the line above names it)\n"
                      : signal == SIGSEGV || signal == SIGBUS ? "an index out of range (a segmentation fault)\n"
                      : signal == SIGFPE ? "an integer division by zero (SIGFPE: a count of 0?)\n"
                      : signal == SIGALRM ? "still running after 300 s (an endless loop?)\n"
                                          : "an illegal instruction\n";
    const std::string& head = training_thread ? crash_training : crash_grade;
    const std::string& tail = training_thread ? crash_newline : crash_first_wrong;
    if (write(STDOUT_FILENO, head.data(), head.size()) < 0 || write(STDOUT_FILENO, why, std::strlen(why) - 1) < 0 ||
        write(STDOUT_FILENO, tail.data(), tail.size()) < 0)
        _exit(1);
    _exit(1);
}
inline std::string running_exercise;
inline void started(const std::string& check, const std::string& first_wrong) {
    crash_grade = "\ngrade: " + running_exercise + ": fail: crashed in " + check + ": ";
    crash_first_wrong = (first_wrong.empty() ? "" : " (first wrong before it: " + first_wrong + ")") + "\n";
}
inline int run(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 1 << 16);
    const std::vector<std::string> args(argv + 1, argv + argc);
    try {
        if (!args.empty() && args[0] == "--list") {
            for (std::size_t k = 0; k < EXERCISES.size(); k++)
                std::printf("%2zu. %-14s %s\n", k + 1, EXERCISES[k].name.c_str(), EXERCISES[k].writes.c_str());
            std::printf("A student's copy: make exercise NAME=softmax DIR=../softmax; in it: EXERCISE.md, then make "
                        "check\n");
            return 0;
        }
        if (!args.empty() && args[0] == "--hand-out") {
            if (args.size() < 3) fail("make exercise: name one and a directory: make exercise NAME=softmax DIR=path");
            hand_out(args[1], args[2], std::vector<std::string>(args.begin() + 3, args.end()));
            return 0;
        }
        if (args.size() == 2 && args[0] == "--page") {
            write_whole(path_in(args[1], EXERCISE_PAGE), exercise_page(args[1]));
            std::printf("%s: what the student runs and reads first\n", path_in(args[1], EXERCISE_PAGE).c_str());
            return 0;
        }
        if (args.size() == 2 && args[0] == "--gaps")
            return std::printf("%s\n", join(handed_out_exercises(args[1]), " ").c_str()), 0;
        if (args.size() == 3 && args[0] == "--transplant") return transplant(args[1], args[2]), 0;
        if (!args.empty() && starts_with(args[0], "--")) fail("unknown option " + args[0]);
        const std::vector<std::string> names =
            args.empty() || split_words(args[0]).empty() ? handed_out_exercises() : split_words(args[0]);
        for (const std::string& name : names) exercise_named(name);
        for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) std::signal(signal, grade_crash);
        check_started = started;
        bool all = true;
        std::vector<std::string> grades;
        for (const std::string& name : names) {
            const Exercise& e = exercise_named(name);
            running_exercise = e.name;
            started("its first check", "");
            crash_training = "\ngrade: " + e.name + ": fail: crashed in the training run: ";
            alarm(TIME_LIMIT);
            std::printf("%s", header_text(e).c_str());
            const Grade g = check_exercise(e);
            grades.push_back(grade_text(e, g));
            if (names.size() > 1) std::printf("%s\n\n", grades.back().c_str());
            all = all && g.pass();
        }
        if (names.size() > 1)  // the last line: every exercise's grade
            std::printf("grade: %s: %s\n", join(names, " and ").c_str(), all ? "pass" : "fail");
        else
            std::printf("%s\n", grades[0].c_str());
        return all ? 0 : 1;
    } catch (const UsageError& error) {
        std::fprintf(stderr, "exercise-check: %s\n", error.message.c_str());
        return 2;
    }
}
}  // namespace exercises
