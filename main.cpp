// main.cpp -- the sorter program, read top to bottom: what one run of ./sorter does, in order.
//
// Read after the tutorial (matrix.hpp, model.hpp, train.hpp). The program's parts live in workbench/, one header a
// concern, and this file calls them in the order a run needs them:
//   1. the runs that do one thing and stop: --help, --bench, --speed, --demo
//   2. the model, built from the flags or loaded with --load, and the run's one Dataset
//   3. the training loop: train_step (train.hpp: draw, rate, zero, forward, loss, backward, update), a
//      held-out evaluation every N steps, and the checkpoint every --save-every steps and as training ends
//   4. the run: a look without training (--params, --show-pe, --trace-shapes), or training (or a loaded model's
//      score), then what comes after it, in order: the --sort output, --inspect, --test-len, then the checkpoint
//      (unless training wrote it; first, so that a picture that fails cannot lose it), SVG, the report
//      (workbench/outputs.hpp)
//   5. main(): a bad flag or file is one line on stderr and exit status 2
//
// Legend: T target length, S source length, d_model token width, n_heads heads,
//         d_k = d_model / n_heads, d_ff feed-forward width, vocab the vocabulary size.
#include <cstdio>

#include "workbench/checkpoint.hpp"  // --save, --load
#include "workbench/demos.hpp"       // --demo NAME: the demonstrations, and the switch that runs one
#include "workbench/files.hpp"       // --train-data, --sort, atomic writes, output paths
#include "workbench/history.hpp"     // what a run prints and records as it goes
#include "workbench/lora.hpp"        // --lora: fine-tuning with low-rank adapters (chapter 12)
#include "workbench/options.hpp"     // the flags and --help
#include "workbench/outputs.hpp"     // what a run shows and writes besides training
#include "workbench/speed.hpp"       // --speed, --bench
#include "workbench/step_dump.hpp"   // --dump-step

// =============================================================================================
// 1. The runs that do one thing and stop
// =============================================================================================
inline void time_model(Options o);  // --speed, --step-cost: section 2, once the model is built or loaded
inline bool run_alone(const Options& o) {  // false: none was asked for
    if (o.help) print_help();
    else if (o.bench) run_bench(o);
    else if (o.speed || o.step_cost) time_model(o);
    else if (o.demo) run_demo(*o.demo);
    else return false;
    return true;
}

// =============================================================================================
// 2. The model and the data
// =============================================================================================
// A new model from the flags, or the one --load names. With --load, the options then say what the checkpoint
// holds (--steps stays: how many steps more, and a file that did not keep its seed leaves it unknown), and
// `state` and `origin` where its training stood and what it was made from. A model that will train (--steps, --finish,
// --speed, --step-cost) has its step's memory checked before the step allocates anything (workbench/memory.hpp): a new
// one's by parse_options, a loaded one's here, with the batch and attention its checkpoint keeps.
inline Transformer build_or_load(Options& o, TrainState& state, Origin& origin) {
    origin.seed = long(o.seed);
    if (o.load_path.empty()) return Transformer(o.model, o.seed);
    const bool trains = o.train.steps > 0 || o.finish || o.speed || o.step_cost;
    long steps = o.train.steps;
    Transformer model = load_checkpoint(o.load_path, o.data, o.train, state, origin);
    if (o.finish) steps = steps_left(o.load_path, origin, state.updates);  // (workbench/files.hpp)
    check_run_under_way(o, model, state, origin);  // a LoRA run's file before its end holds adapters (lora.hpp)
    const bool other_data = tune_data(o, origin, model);  // --task, --seq-len, --min-len (workbench/lora.hpp)
    const bool adapted = !adapters_of(model).empty() || has_adapters(o);  // adapters train over a quantized base
    if (model.config.bits > 0 && trains && !adapted)  // (--quantize with training: parse_options refuses)
        fail("--load " + cannot_train_text(o.load_path, model.config.bits));  // workbench/quantize.hpp
    if (trains)
        if (std::string problem = step_memory_problem(model.config, o.data, o.train, threads.count(), o.load_path);
            !problem.empty())
            fail(problem);
    if (o.quantize_bits > 0 && model.config.bits > 0)
        fail(fmt("--quantize %d: --load %s is quantized already (%d bits); quantize the float model it came from",
                 o.quantize_bits, o.load_path.c_str(), model.config.bits));
    if (o.quantize_bits > 0) quantize_model(model, o.quantize_bits);  // workbench/quantize.hpp
    reach_length(model, o.test_len, o.load_path);  // the length lab goes past the trained lengths
    o.train.steps = steps;
    fine_tune_loaded(o, model, state, origin, other_data);  // its settings, its adapters (workbench/lora.hpp)
    return model;
}

// --speed and --step-cost: the model the flags give, or the one --load names (with its own batch and data), timed.
inline void time_model(Options o) {
    TrainState state(o.train, o.seed);
    Origin origin;
    Transformer model = build_or_load(o, state, origin);
    if (o.speed) run_speed(o, model);
    else run_step_cost(o, model);
}

// The line a loaded model starts with.
inline std::string loaded_text(const Options& o, long updates) {
    const ModelConfig& c = o.model;
    return fmt("loaded %s: d_model %d, heads %d, d_ff %d, layers %s, task %s, seq_len %d, min_len %d, max_digit %d; "
               "seed %s, %ld updates made\n", o.load_path.c_str(), c.d_model, c.n_heads, c.d_ff, layers_text(c).c_str(),
               TASK_NAMES[int(o.data.task)].c_str(), o.data.seq_len, o.data.min_len, o.data.max_digit,
               seed_text(o).c_str(), updates);
}

// Training needs a held-out set: half of all sources at most are held out, and half of 1 is none.
inline void check_held_out(const Options& o, const Dataset& data) {
    if (!data.held_out.empty()) return;
    fail(fmt("no held-out set is possible: --seq-len %d --min-len %d --max-digit %d allow only %.0f different "
             "input%s%s; raise --seq-len or --max-digit", o.data.seq_len, o.data.min_len, o.data.max_digit,
             count_sources(o.data), count_sources(o.data) == 1 ? "" : "s",
             data.train_pool.empty() ? "" : ", and --train-data uses them"));
}

// =============================================================================================
// 3. The training loop
// =============================================================================================
// Train o.train.steps steps on from where `state` stands, printing the held-out accuracy as it goes and the
// inputs it watches. Steps are numbered on from the updates already made, and the schedule sees the run as
// that much longer. The step itself, draw to update, is train_step in train.hpp.
inline History train_run(const Options& o, const Dataset& data, Transformer& model, TrainState& state,
                         Origin& origin) {
    const long first = state.updates + 1, last = state.updates + o.train.steps;
    History history = begin_run(o, data, model, first, last, origin.planned_steps);
    origin.planned_steps = last;  // the checkpoint keeps the plan, for --finish
    if (last >= first && !o.dump_step_path.empty())  // the run's first step as it is about to run, for the twin
        dump_first_step(o.dump_step_path, model, data, o.train, state, origin, first, last);
    double train_seconds = 0.0;
    enter_phase(Phase::training);  // a signal now stops the loop after the current step (workbench/signals.hpp)
    for (long step = first; step <= last; step++) {
        auto t0 = Clock::now();
        double loss = train_step(model, data, o.train, state, last);
        train_seconds += seconds_since(t0);
        if (!o.report_path.empty()) record_gradient_norms(model, history);
        record_loss(o, history, loss, step);  // a loss that is not finite ends the run here, before this step's save
        history.recent_balance += balance_loss_of(model);  // the experts' balance loss, reported apart (chapter 11)
        const bool stopping = training_stopped(), ending = stopping || step == last;
        const bool saving = (!o.save_path.empty() || !o.save_adapters_path.empty()) &&  // (--save-adapters: lora.hpp)
                            (ending || (o.save_every > 0 && step % o.save_every == 0));
        if (saving) {  // before the evaluation; and never weights that a checkpoint cannot hold
            std::string what = unstorable(model);
            if (!what.empty()) diverged(o, history, step, "after its update, " + what);
            if (!adapters_of(model).empty()) save_fine_tuned(o, model, state, origin);  // merged once done (lora.hpp)
            else save_checkpoint(o.save_path, model, o.data, o.train, state, origin);
            history.saved_at = step;
        }
        history.checkpoint_kept = saving && ending;  // below: a signal during it cannot lose the model
        if (ending) enter_phase(Phase::after_training);  // a signal now cuts the evaluation under way short
        if (step % o.eval_every == 0 || ending) print_evaluation(model, data, step, history);
        if (stopping) {
            stop_at(o, history, step, last);
            break;
        }
        if (step == first - 1 + o.train.steps / 2) {
            show_examples("step " + std::to_string(step), model, history);
            std::printf("\n");
        }
    }
    enter_phase(Phase::after_training);
    end_run(model, data, history, train_seconds);
    return history;
}

// =============================================================================================
// 4. The run, in order (its outputs: workbench/outputs.hpp)
// =============================================================================================
// Everything a command line asks for, in order; returns the exit status.
inline int run(Options o) {
    with_signals_blocked([&] { threads.set_count(o.thread_count); });  // engine/threads.hpp; same bits on any count
    if (run_alone(o)) return 0;
    enter_phase(Phase::before_training);  // a signal ends the run at once: nothing learned yet
    check_output_paths(o);
    TrainState state(o.train, o.seed);  // a new run: no update yet, the seed's training draws
    Origin origin;                      // the seed, and the --train-data file (none: generated data)
    Transformer model = build_or_load(o, state, origin);
    std::vector<std::vector<int>> pool;
    if (!o.load_path.empty()) refuse_new_train_data(o.load_path, o.train_data_path, origin);
    if (!o.train_data_path.empty()) pool = load_train_data(o.train_data_path, o.data);
    if (!o.load_path.empty())  // the file a model trained on, or none: its held-out set stays the same
        check_train_data(o.load_path, o.train_data_path, origin, pool, reads_held_out(o));
    if (!pool.empty())  // (a loaded model keeps its own: a file of it saved again without --train-data keeps the line)
        origin.train_lines = long(pool.size()), origin.train_fingerprint = pool_fingerprint(pool);
    const Dataset data = dataset_of(o, origin, pool);  // the one held-out set of the run: every score below uses it
    bool sort_asked = !o.sort_words.empty();
    std::vector<int> digits;
    if (sort_asked) digits = parse_sequence(o.sort_words, o.data, "--sort " + join(o.sort_words, " "));
    Rng example_rng(o.seed);  // the example every picture uses: the --sort digits, or one fixed made-up input
    Example example = make_example(sort_asked ? digits : random_digits(example_rng, o.data), o.data);
    if (o.params || o.show_pe || o.trace_shapes) {
        look_without_training(o, model, data, state, example);
        return 0;
    }
    const long updates = origin.loaded_updates < 0 ? state.updates : origin.loaded_updates;  // the file's
    std::string loaded = o.load_path.empty() ? "" : loaded_text(o, updates) + first_task_text(origin) +
                                                   lora_text(model);  // fine-tuning (workbench/lora.hpp)
    const bool trains = o.load_path.empty() || o.train.steps > 0;
    if (!trains) enter_phase(Phase::after_training);  // a loaded model, scored from here on: a signal cuts it short
    std::printf("%s", loaded.c_str());
    History history;
    history.decoding = o.decode;
    if (trains) {
        check_held_out(o, data);
        history = train_run(o, data, model, state, origin);
        print_first_task(model, origin, o.decode);  // fine-tuned on other data: what is left of the first task
    } else if (!sort_asked || !o.report_path.empty()) {
        loaded += decoding_text(o.decode);  // (a run that trains says it in its header)
        std::printf("%s", decoding_text(o.decode).c_str());
        score_loaded(model, data, history, !sort_asked);
    }
    history.header = loaded + history.header;  // the report shows the "loaded FILE ..." line too
    show_after_training(o, model, data, example, sort_asked);
    write_outputs(o, model, data, state, origin, example, sort_asked, history);
    if (evaluation_stopped())
        std::printf("(%s came %s: the figures marked as cut short are partial)\n", signal_text(stop_signal).c_str(),
                    trains ? "after training" : "as the loaded model was scored");
    return stopped_status();  // 0, or 128 + the signal's number, as a shell reports a run a signal cut short
}

// =============================================================================================
// 5. main()
// =============================================================================================
// The last word on the output: a full disk or a closed file shows only when the buffer is flushed,
// so flush it and say so, rather than exit 0 with the output lost (./sorter > /dev/full).
inline int finish_output(std::FILE* out, int status) {
    if ((std::fflush(out) == 0 && !std::ferror(out)) || stop_signal) return status;  // (a hang-up closed the terminal)
    std::fprintf(stderr, "sorter: cannot write the output (is the disk full, or the file closed?)\n");
    return 1;
}

#ifndef SORTER_NO_MAIN
int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 1 << 16);  // line by line: ./sorter | tee log shows each line as it comes
    keep_freed_blocks();  // workbench/speed.hpp
    install_signal_handlers();  // no signal loses a trained model or leaves half a file (workbench/signals.hpp)
    try {
        return finish_output(stdout, run(parse_options(argc, argv)));
    } catch (const UsageError& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "sorter: %s\n", printable(e.message).c_str());  // a binary file's bytes, escaped
        return 2;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "sorter: error: %s\n", e.what());
        return 1;
    }
}
#endif
