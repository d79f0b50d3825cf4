// workbench/history.hpp -- what a training run prints and records as it goes: its header (and the lines about
// its settings that main.cpp and --speed print too), the watched predictions, the table of evaluations, the
// gradient sizes, the loss curve and the final line. The History it fills is what training.svg and the report draw.
//
// Sections: History; the run's header and watched inputs; a step recorded; an evaluation printed; the
// end of the run.
#pragma once

#include <chrono>
#include <cstring>
#include <limits>
#include <numeric>

#include "evaluate.hpp"
#include "options.hpp"
#include "terminal.hpp"

using Clock = std::chrono::steady_clock;  // a clock that never jumps, for timing
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct EvalPoint {
    long step;
    double loss, exact, token;  // mean training loss since the last evaluation; held-out shares
    double held_out_loss;       // teacher-forced, on the held-out set
};
struct History {
    std::string header, final_line;  // the run's first lines and its final: line, as printed
    std::vector<Example> watched;    // three held-out inputs whose predictions the run shows
    std::vector<std::pair<std::string, std::string>> predictions;  // the watched inputs: a title, the lines
    long first_step = 1;           // above 1 when training went on from a checkpoint
    std::vector<double> losses;    // every step's mini-batch loss, from first_step on
    double recent_loss = 0.0;      // the sum of the losses since the last evaluation,
    long recent_steps = 0;         // and how many
    double recent_balance = 0.0;   // the experts' balance losses summed since then (chapter 11; 0 without experts)
    std::vector<EvalPoint> evals;  // every --eval-every steps, and the last step
    long interrupted_at = 0;       // the step after which a signal stopped training, or 0
    bool checkpoint_kept = false;  // --save was written as training ended, before the final evaluation
    long saved_at = 0;             // the step of the last checkpoint training wrote, or 0
    DecodeConfig decoding;         // how the watched inputs and every evaluation are decoded (--beam)
    // With --report: the size of each block's gradient at every step (gradient_norms[step - first_step][block]).
    std::vector<std::string> blocks;  // "embed", "encoder.0", ..., "final_norm", "out"
    std::vector<std::vector<double>> gradient_norms;
    std::vector<std::pair<std::size_t, const Param*>> tensors;  // (block, parameter) for each one, found once
};

// ---------------------------------------------------------------------------------------------
// The run's header and the inputs it watches
// ---------------------------------------------------------------------------------------------
// Three held-out inputs to watch, the first with repeated digits.
inline std::vector<Example> watched_examples(const Dataset& data) {
    std::vector<Example> shown;
    for (const Example& e : data.held_out) {
        std::vector<int> s = e.source;  // the digits, PAD left out, sorted so repeats sit side by side
        s.erase(std::remove(s.begin(), s.end(), PAD), s.end());
        std::sort(s.begin(), s.end());
        if (!shown.empty() || std::adjacent_find(s.begin(), s.end()) != s.end()) shown.push_back(e);
        if (shown.size() == 3) break;
    }
    return shown;
}

// The watched inputs decoded now, each beside its true answer, printed under a title after a blank
// line and kept in the history for --report.
inline void show_examples(const std::string& title, Transformer& model, History& history) {
    std::string lines;
    for (const Example& e : history.watched) {
        std::vector<int> guess = decode_outputs(model, {e.source}, int(e.target.size()), history.decoding)[0];
        lines += fmt("  input %s   pred %s   true %s%s\n", digits_text(e.source, model.config).c_str(),
                     digits_text(guess, model.config).c_str(), digits_text(e.target, model.config).c_str(),
                     guess == e.target ? "   ok" : "");
    }
    std::printf("\n--- %s ---\n%s", title.c_str(), lines.c_str());
    history.predictions.push_back({title, lines});
}

// An evaluation costs about two forward passes of every held-out sequence (greedy decoding and the held-out
// loss); a training step, three of each of its examples (the forward, and the backward's two products per
// product). When the evaluations come often and each outweighs the steps between them, say so: at the
// largest size, --eval-every 1 spends minutes evaluating for every few seconds of training.
inline void warn_if_evaluation_dominates(const Options& o, std::size_t held_out) {
    double evaluation = 2.0 * double(held_out), between = 3.0 * double(o.eval_every) * o.train.batch;
    if (o.train.steps / o.eval_every >= 10 && evaluation > between)
        std::fprintf(stderr, "sorter: note: each evaluation (every %ld step%s) costs about %.0f times the training "
                     "between two; a larger --eval-every trains faster\n", o.eval_every, o.eval_every == 1 ? "" : "s",
                     evaluation / between);
}

// A word as the shell reads it: quoted when it holds anything but letters, digits and _ . / - + , : =
inline std::string shell_word(const std::string& w) {
    bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](unsigned char c) {
        return std::isalnum(c) || std::strchr("_./-+,:=", c);
    });
    std::string quoted = "'";
    for (char c : w) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return plain ? w : quoted + "'";
}
// The command that trains what is left of a run from its --save file, on the schedule it planned (--finish): what
// a run with --save-every says first, and an interrupted one last.
inline std::string finish_command(const Options& o) {
    std::string c = "./sorter --load " + shell_word(o.save_path) + " --finish --save " + shell_word(o.save_path);
    if (o.save_every > 0) c += fmt(" --save-every %ld", o.save_every);
    if (!o.train_data_path.empty()) c += " --train-data " + shell_word(o.train_data_path);
    if (!o.save_adapters_path.empty()) c += " --save-adapters " + shell_word(o.save_adapters_path);
    return c;
}

// A resumed run's linear schedule is recomputed over the whole, longer run (steps 1 .. last), so its first
// step may train faster than the saved run's last did: at lr / (first - 1) when that run's plan (saved_plan; -1
// unknown) ended there. Said on stderr when it rises (docs/checkpoints.md has the figures); warmup and constant
// go on as they were, and so does --finish, which keeps the plan.
inline void note_resumed_rate(const TrainConfig& t, long first, long last, long saved_plan) {
    if (first == 1 || !rate_follows_the_plan(t.schedule)) return;
    const long saved_last = std::max(saved_plan, first - 1);
    const double before = scheduled_lr(t.schedule, t.lr, first - 1, saved_last, t.warmup),
                 now = scheduled_lr(t.schedule, t.lr, first, last, t.warmup);
    if (now > before)
        std::fprintf(stderr, "sorter: note: the linear schedule now runs to step %ld, so step %ld trains at rate %.3g, "
                     "%.2gx the %.3g of step %ld %s\n", last, first, now, now / before, before, first - 1,
                     saved_last == first - 1 ? "if the saved run's schedule ended there"
                                             : fmt("on the saved run's schedule to step %ld", saved_last).c_str());
}

// The lines a run prints about its settings (the sizes' are settings.hpp's, size_text), here and in main.cpp's line
// about a loaded model and --speed's.
inline std::string seed_text(const Options& o) {  // "7", or "unknown" (a model loaded from an older checkpoint)
    return o.seed_unknown ? "unknown" : std::to_string(o.seed);
}
// The header's line about decoding: "" for greedy decoding, the default.
inline std::string decoding_text(const DecodeConfig& d) {
    return d.beam == 1 ? "" : fmt("decoding: beam search, beam %d, length penalty %g\n", d.beam, d.length_penalty);
}
// "SGD lr 0.2, schedule linear", "Adam lr 0.001, schedule warmup 1000": the optimizer, its rate, the schedule.
inline std::string optimizer_text(const Options& o) {
    std::string text = fmt("%s lr %g, schedule %s", OPTIMIZERS[int(o.train.optimizer)].title.c_str(), o.train.lr,
                           SCHEDULE_NAMES[int(o.train.schedule)].c_str());
    return reads_warmup(o.train.schedule) ? text + fmt(" %ld", o.train.warmup) : text;
}

// The lines before training: sizes, optimizer, steps, seed, the variant, the data; then the watched
// inputs before the first step, and the table's head. Steps first .. last; saved_plan is a loaded run's plan.
inline History begin_run(const Options& o, const Dataset& data, Transformer& model, long first, long last,
                         long saved_plan) {
    History history;
    history.first_step = first;
    history.decoding = o.decode;
    history.watched = watched_examples(data);
    std::string steps = first == 1 ? fmt("steps %ld", last) : fmt("steps %ld to %ld", first, last);
    std::string& header = history.header;
    header += fmt("sorter: %s | %s, batch %d, %s, seed %s\n", size_text(o.model, o.data).c_str(),
                  optimizer_text(o).c_str(), o.train.batch, steps.c_str(), seed_text(o).c_str());
    std::string variant = variant_text(o);
    if (!variant.empty()) header += "variant: " + variant + "\n";
    if (o.train.label_smoothing > 0)
        header += "label smoothing: the losses below are the plain cross-entropy; the gradient is the smoothed "
                  "loss's\n";
    header += decoding_text(o.decode);
    if (!data.train_pool.empty()) header += fmt("training data: %zu sequences\n", data.train_pool.size());
    header += fmt("held-out: %zu sequences that training never draws\n", data.held_out.size());
    if (o.save_every > 0)
        header += fmt("checkpoint: %s every %ld steps and at the end; if the run is cut short, finish it with\n  %s\n",
                      o.save_path.c_str(), o.save_every, finish_command(o).c_str());
    std::printf("%s", header.c_str());
    warn_if_evaluation_dominates(o, data.held_out.size());
    note_resumed_rate(o.train, first, last, saved_plan);
    show_examples(first == 1 ? "before training" : fmt("after step %ld", first - 1), model, history);
    std::printf("\n%8s  %8s  %13s  %12s  %14s%s\n", "step", "loss", "held-out loss", "exact-match", "token-accuracy",
                model.config.experts > 0 ? "     balance" : "");  // the experts' balance loss, apart (chapter 11)
    return history;
}

// ---------------------------------------------------------------------------------------------
// A step recorded, an evaluation printed
// ---------------------------------------------------------------------------------------------
// The block a parameter belongs to: its name up to the block's number ("encoder.0.ffn.W_1" ->
// "encoder.0"), or up to the first dot ("embed.table" -> "embed").
inline std::string block_of(const std::string& name) {
    std::size_t dot = name.find('.');
    bool numbered = dot != std::string::npos && dot + 1 < name.size() && std::isdigit((unsigned char)name[dot + 1]);
    return name.substr(0, numbered ? name.find('.', dot + 1) : dot);
}
// After a backward pass, the size of each block's gradient: the square root of the sum of the squares
// of every entry of its tensors' grads. Vanishing or exploding gradients show here first.
inline void record_gradient_norms(Transformer& model, History& h) {
    if (h.tensors.empty())  // the first step: which block each parameter belongs to (they come in order)
        for (auto& [name, p] : model.parameters()) {
            if (h.blocks.empty() || h.blocks.back() != block_of(name)) h.blocks.push_back(block_of(name));
            h.tensors.push_back({h.blocks.size() - 1, p});
        }
    std::vector<double> norms(h.blocks.size(), 0.0);
    for (auto [block, p] : h.tensors)
        for (double g : p->grad.data) norms[block] += g * g;
    for (double& n : norms) n = std::sqrt(n);
    h.gradient_norms.push_back(norms);
}

// What went wrong at `step` (`why`: "loss nan") and what to try: the first sentence of the message below (the page
// ends it with what it kept).
inline std::string divergence_text(const Options& o, long step, const std::string& why) {
    return fmt("training diverged at step %ld (%s); try a smaller --lr than %g.", step, why.c_str(), o.train.lr);
}
inline std::string loss_trouble(double loss) { return std::isnan(loss) ? "loss nan" : "loss inf"; }
// Training diverged at `step` (`why`: "loss nan"): the run ends, saying what its --save file holds, the checkpoint
// --save-every wrote last (every save waits for its step's loss to be finite) or nothing of this run.
[[noreturn]] inline void diverged(const Options& o, const History& history, long step, const std::string& why) {
    const std::string kept = history.saved_at ? fmt("%s holds the checkpoint of step %ld (--save-every %ld), the last "
                                                    "before the loss went wrong; nothing else", o.save_path.c_str(),
                                                    history.saved_at, o.save_every)
                                              : "Nothing";
    fail(divergence_text(o, step, why) + " " + kept + " was saved or drawn");
}
// A step's loss, kept; one that is not finite ends the run.
inline void record_loss(const Options& o, History& history, double loss, long step) {
    if (!std::isfinite(loss)) diverged(o, history, step, loss_trouble(loss));
    history.losses.push_back(loss);
    history.recent_loss += loss;
    history.recent_steps++;
}

// printf writes a NaN whose sign bit is set as "-nan"; a diverged loss should read "nan" every time.
inline double plain_nan(double v) { return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v; }

// One row of the table, as printed (the page shows the same line): the step, the mean training loss since the last
// row, the held-out loss and accuracy.
inline std::string evaluation_line(long step, double recent, double held_out_loss, const Accuracy& a) {
    return fmt("%8ld  %8.4f  %13.4f  %11.1f%%  %13.1f%%%s", step, plain_nan(recent), plain_nan(held_out_loss),
               100 * a.exact, 100 * a.token,
               a.total < a.asked ? fmt("   (%d %s)", a.total, cut_short_text(a).c_str()).c_str() : "");
}
// With experts (chapter 11), the row's last column: their balance loss apart from the task's, its mean over the same
// steps ("" without experts).
inline std::string balance_column(const ModelConfig& c, double balance) {
    return c.experts > 0 ? fmt("  %10.4f", balance) : "";
}
inline void print_evaluation(Transformer& model, const Dataset& data, long step, History& history) {
    Accuracy a = evaluate(model, data.held_out, history.decoding);
    double held_out_loss = teacher_forced_loss(model, data.held_out);
    double recent = history.recent_loss / double(history.recent_steps);
    history.evals.push_back({step, recent, a.exact, a.token, held_out_loss});
    const std::string balance = balance_column(model.config, history.recent_balance / double(history.recent_steps));
    std::printf("%s%s\n", evaluation_line(step, recent, held_out_loss, a).c_str(), balance.c_str());
    history.recent_loss = history.recent_balance = 0.0;
    history.recent_steps = 0;
}

// A signal stopped training after `step`: say so, and how to finish the run; what follows is the run as of that step.
inline void stop_at(const Options& o, History& history, long step, long last) {
    history.interrupted_at = step;
    std::printf("\ninterrupted at step %ld of %ld (%s): training stops here, and everything asked for is written as "
                "of step %ld; %s quits at once\n", step, last, signal_text(stop_signal).c_str(), step,
                stop_signal == SIGINT ? "Ctrl-C again" : "a second signal");
    if (!o.save_path.empty() && step < last)
        std::printf("to finish the run's %ld steps later: %s\n", last, finish_command(o).c_str());
    if (o.save_path.empty())
        std::printf("(no --save: the model is not kept when the run ends; give --save FILE to keep one)\n");
}

// ---------------------------------------------------------------------------------------------
// The end of the run
// ---------------------------------------------------------------------------------------------
// The final loss is the mean of the last FINAL_LOSS_WINDOW steps (or all), so --eval-every cannot change it.
constexpr long FINAL_LOSS_WINDOW = 1000;

// The loss curve, the watched inputs once more, and the final line.
inline void end_run(Transformer& model, const Dataset& data, History& history, double train_seconds) {
    if (!history.losses.empty()) std::printf("\n");
    print_loss_plot(history.losses, history.first_step);  // nothing without training
    std::size_t window = std::min<std::size_t>(FINAL_LOSS_WINDOW, history.losses.size());
    std::string loss_text = "loss - (no training)";
    if (window)
        loss_text = fmt("loss %.4f (mean of the last %zu steps)",
                        plain_nan(std::accumulate(history.losses.end() - window, history.losses.end(), 0.0) /
                                  double(window)), window);
    Accuracy a = evaluate(model, data.held_out, history.decoding);
    show_examples("after training", model, history);
    std::string cut = a.total < a.asked ? fmt(" (both on the first %d held-out sequences %s)", a.total,
                                              cut_short_text(a).c_str()) : "";
    std::string stopped = history.interrupted_at ? fmt(" (stopped at step %ld)", history.interrupted_at) : "";
    history.final_line = fmt("final%s: exact-match %.1f%% (%d/%d), token-accuracy %.1f%%%s, %s, train-time %.1f s\n",
                             stopped.c_str(), 100 * a.exact, a.exact_count, a.total, 100 * a.token, cut.c_str(),
                             loss_text.c_str(), train_seconds);
    std::printf("\n%s", history.final_line.c_str());
}
