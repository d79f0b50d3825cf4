// workbench/exercise_grade.hpp -- the grade of "Write it yourself" (exercises.hpp says how the three parts fit): one
// exercise's checks, a short training run, the grade line, and ./exercise-check's main. Exercise-only, as
// exercises.hpp.
//
// Sections: the training run; the check of one exercise and its grade; main.
#pragma once

#include <unistd.h>

#include <csignal>

#include "exercise_check.hpp"

namespace exercises {

// ---------------------------------------------------------------------------------------------
// The training run: the default task and model with the exercise's choices, TRAINING_STEPS steps from seed 1 (the
// rate decaying to 0 over them), then greedy decoding of HELD_OUT_CHECKED held-out examples. A backward can pass
// its check and training still fail (a mistake in a forward: exercise 9's bug 7), or fail its check and training
// still succeed (SGD forgives a lot): the check reads both.
constexpr long TRAINING_STEPS = 600;
constexpr int HELD_OUT_CHECKED = 200;
constexpr double TRAINING_PASSES = 0.5;  // exact-match at least this: the answers reach 83% (dropout) to 99.5%,
                                         // exercise 9's bug 7 8.5%
struct Training { double loss = 0.0, exact = 0.0; };
inline Training train_briefly(const Exercise& e) {
    DataConfig d;
    ModelConfig m = fit_to_data(ModelConfig(), d);
    TrainConfig t;
    e.variant(m, t);
    t.steps = TRAINING_STEPS;
    Transformer model(m, 1);
    Dataset data(d, {}, HELD_OUT_CHECKED);
    TrainState state(t, 1);
    Training result;
    for (long step = 1; step <= t.steps && std::isfinite(result.loss); step++)
        result.loss = train_step(model, data, t, state, t.steps);
    const Inputs held_out = inputs_of(data.held_out, 0, data.held_out.size());
    const std::vector<std::vector<int>> outputs = greedy_decode(model, held_out.sources, d.seq_len);
    for (std::size_t k = 0; k < outputs.size(); k++) result.exact += outputs[k] == data.held_out[k].target;
    result.exact /= double(outputs.size());
    return result;
}
inline std::string training_text(const Training& r) {
    if (!std::isfinite(r.loss)) return "diverged (loss nan): a gradient far too large somewhere";
    if (r.exact >= TRAINING_PASSES) return "learns";
    if (r.loss < 0.05)
        return "the loss falls, but decoding fails: the model reads the answer in training (a mask left out of a "
               "forward?)";
    return "does not learn well enough";
}

// ---------------------------------------------------------------------------------------------
// One exercise's check: its checks in order, the whole model, the training run, and the grade, one line a teacher
// can collect (make check | tail -n 1).
struct Grade {
    int right = 0, checked = 0;
    std::string first_wrong, not_written;  // not_written: what the gap (or the student's code) threw
    Training training;
    bool pass() const { return not_written.empty() && right == checked && training.exact >= TRAINING_PASSES; }
};
inline void run_checks(Checker& c, const Exercise& e) {
    ModelConfig config;
    TrainConfig train;
    e.variant(config, train);
    for (const std::string& name : e.checks)
        if (name == "model") check_whole_model(c, config, train.label_smoothing);
        else
            for (const auto& [check, run] : BLOCK_CHECKS)
                if (check == name) run(c, config);
}
inline Grade check_exercise(const Exercise& e, bool quiet = false) {
    Checker c;
    c.quiet = quiet;
    Grade g;
    try {
        run_checks(c, e);
    } catch (const std::exception& error) {  // the gap, or an error in the student's code
        g.not_written = error.what();
        if (!quiet) std::printf("  %s\n", error.what());
        return g;
    }
    for (const Row& r : c.rows) {
        g.checked++, g.right += r.verdict.is_right();
        if (g.first_wrong.empty() && !r.verdict.is_right())
            g.first_wrong = r.check + " " + r.tensor + ": " + kind_text(r.verdict);
    }
    if (!quiet) std::printf("training: %ld steps of the default run%s ...\n", TRAINING_STEPS,
                            e.variant == as_default ? "" : " with this exercise's choices");
    g.training = train_briefly(e);
    if (!quiet) std::printf("  loss %.4f, exact-match %.1f%% of %d held-out: %s\n", g.training.loss,
                            100 * g.training.exact, HELD_OUT_CHECKED, training_text(g.training).c_str());
    return g;
}
inline std::string grade_text(const Exercise& e, const Grade& g) {
    if (!g.not_written.empty()) return "grade: " + e.name + ": fail: " + g.not_written;
    std::string text = fmt("grade: %s: %s: %d of %d tensors right, training %.1f%% exact-match", e.name.c_str(),
                           g.pass() ? "pass" : "fail", g.right, g.checked, 100 * g.training.exact);
    return g.first_wrong.empty() ? text : text + " (first wrong: " + g.first_wrong + ")";
}

// ---------------------------------------------------------------------------------------------
// main: --list; --hand-out NAME DIR FILE...; or the check of NAME (in a student's copy: the one it holds).
// A student's code that crashes (an index past the end, say) still ends with a grade line.
inline std::string crash_grade;
inline void grade_crash(int) {
    if (write(STDOUT_FILENO, crash_grade.data(), crash_grade.size()) < 0) _exit(1);
    _exit(1);
}
inline int run(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 1 << 16);
    const std::vector<std::string> args(argv + 1, argv + argc);
    try {
        if (!args.empty() && args[0] == "--list") {
            for (std::size_t k = 0; k < EXERCISES.size(); k++)
                std::printf("%2zu. %-14s %s\n", k + 1, EXERCISES[k].name.c_str(), EXERCISES[k].writes.c_str());
            std::printf("A student's copy: make exercise NAME=softmax DIR=../softmax; in it: make check\n");
            return 0;
        }
        if (!args.empty() && args[0] == "--hand-out") {
            if (args.size() < 3) fail("make exercise: name one and a directory: make exercise NAME=softmax DIR=path");
            hand_out(args[1], args[2], std::vector<std::string>(args.begin() + 3, args.end()));
            return 0;
        }
        const Exercise& e = exercise_named(args.empty() || args[0].empty() ? handed_out_exercise() : args[0]);
        std::printf("exercise %s: %s\ngradient check: yours against central differences, every entry; a tensor is "
                    "right within %.0e\n", e.name.c_str(), e.writes.c_str(), TOLERANCE);
        crash_grade = "\ngrade: " + e.name + ": fail: crashed (an index out of range?)\n";
        for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(signal, grade_crash);
        const Grade g = check_exercise(e);
        std::printf("%s\n", grade_text(e, g).c_str());
        return g.pass() ? 0 : 1;
    } catch (const UsageError& error) {
        std::fprintf(stderr, "exercise-check: %s\n", error.message.c_str());
        return 2;
    }
}
}  // namespace exercises
