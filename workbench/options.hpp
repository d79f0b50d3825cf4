// workbench/options.hpp -- the command line read: parse_options, whose checks make a bad value one line on stderr and
// exit status 2, and what the options say of a run.
//
// Sections: a model's setting said as its flag; the checks between --lora's flags; parse_options and the checks
// between two flags; the flags that differ from the defaults (variant_text), and whether a run reads the held-out set.
// The flag table and --help are flag_table.hpp's, which this includes; the lines a run prints about its settings are
// settings.hpp's (the sizes) and history.hpp's.
#pragma once

#ifdef __linux__
#include <sched.h>  // sched_getaffinity: the cores this process may use
#endif

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "flag_table.hpp"
#include "memory.hpp"  // a training step's memory, checked before it starts

// The cores this process may run on: Linux's affinity mask (taskset, a container's cpuset), else what the C++ library
// says, else 1.
inline int cores_available() {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    return std::max(1u, std::thread::hardware_concurrency());
}

// A model's setting as the flags say it ("--heads 3"), for settings_problem's messages: each setting it names, by
// the flag that sets it.
inline std::string as_flag(const Options& o, const std::string& setting) {
    static const std::vector<std::pair<std::string, std::string>> flags = {
        {"d_model", "--d-model"}, {"n_heads", "--heads"}, {"kv_heads", "--kv-heads"}, {"positions", "--pos"},
        {"enc_layers", "--enc-layers"}, {"arch", "--arch"}, {"experts", "--experts"}, {"top_k", "--top-k"}};
    for (const auto& [name, flag] : flags)
        if (name == setting) return find_flag(flag)->as_given(o);
    return setting;  // a setting no flag sets: its own name
}

// --lora and its flags (chapter 12, workbench/lora.hpp): "" when the adapters' flags make sense together.
inline std::string lora_flags_problem(const Options& o, bool alpha_given, bool on_given) {
    if (o.lora_rank > 0 && o.load_path.empty())
        return fmt("--lora %d fine-tunes a trained model: add --load FILE (a checkpoint saved with --save)",
                   o.lora_rank);
    if (!o.adapters_path.empty() && o.load_path.empty())
        return "--adapters " + o.adapters_path + " holds adapters for a trained model: add --load FILE, the model "
               "they were trained on";
    if (!o.adapters_path.empty() && o.lora_rank > 0)
        return "--adapters " + o.adapters_path + " brings its own rank: give --lora R or --adapters FILE, not both";
    if (o.finish) {  // the run's adapters, data and rate are its file's (a LoRA run under way keeps its adapters there)
        const char* flag = o.lora_rank > 0 ? "--lora" : !o.adapters_path.empty() ? "--adapters" : alpha_given ?
                           "--lora-alpha" : on_given ? "--lora-on" : o.tune_task >= 0 ? "--task" : o.tune_seq_len > 0 ?
                           "--seq-len" : o.tune_min_len > 0 ? "--min-len" : o.tune_lr > 0 ? "--lr" : nullptr;
        if (flag)
            return "--finish trains the rest of the run saved in " + o.load_path + " with the adapters, data and rate "
                   "it keeps: drop " + flag;
    }
    if (o.lora_rank == 0 && o.adapters_path.empty()) {
        if (alpha_given) return "--lora-alpha sets the adapters' scale: add --lora R";
        if (on_given) return "--lora-on chooses where the adapters go: add --lora R";
        if (!o.save_adapters_path.empty() && o.load_path.empty())  // (with --load: main.cpp, once the file is read:
            return "--save-adapters writes the adapters: add --lora R";  // a LoRA run under way holds adapters)
    }
    if (!o.save_adapters_path.empty() && o.save_adapters_path == o.load_path)
        return "--save-adapters " + o.save_adapters_path + " names the --load file: choose another name";
    if (o.quantize_bits > 0 && (o.lora_rank > 0 || !o.adapters_path.empty()))
        return "--quantize with --lora: quantize the model first (--load F --quantize B --save Q), then "
               "--load Q --lora R";
    return "";
}
inline bool has_adapters(const Options& o) { return o.lora_rank > 0 || !o.adapters_path.empty(); }

// The options of a command line; every value is checked here, the --sort digits once the data is known.
inline Options parse_options(int argc, char** argv) {
    Options o;
    Args args{argc, argv, 0, ""};
    std::vector<const Flag*> given;
    for (args.i = 1; args.i < argc; args.i++) {
        args.flag = argv[args.i];
        const Flag* f = find_flag(args.flag);
        if (!f) fail("unknown flag '" + args.flag + "'; run ./sorter --help for the flags");
        f->apply(o, args);
        given.push_back(f);
    }
    // Checks that involve two flags.
    DataConfig& d = o.data;
    ModelConfig& m = o.model;
    auto was_given = [&](const std::string& name) {
        return std::any_of(given.begin(), given.end(), [&](const Flag* f) { return f->name == name; });
    };
    if (!was_given("--min-len")) d.min_len = d.seq_len;  // fixed length unless asked otherwise
    if (d.min_len > d.seq_len)
        fail(fmt("--min-len %d: must be at most the sequence length %d (--seq-len)", d.min_len, d.seq_len));
    if (o.llama && !was_given("--kv-heads") && m.n_heads % 2 == 0) m.kv_heads_asked = m.n_heads / 2;
    if (!has_encoder(m.arch)) m.enc_layers = 0;  // (--enc-layers given is refused below)
    SettingsProblem problem = settings_problem(m);  // said with the flags: "--heads 3 with --d-model 16: ..."
    std::string named;
    for (std::size_t k = 0; k < problem.settings.size(); k++)
        named += (k == 0 ? "" : k == 1 ? " with " : ", ") + as_flag(o, problem.settings[k]);
    if (!problem.settings.empty()) fail(named + ": " + problem.why);
    if (m.kv_heads_asked == m.n_heads) m.kv_heads_asked = 0;  // multi-head attention, as without the flag
    if (!was_given("--lr")) o.train.lr = OPTIMIZERS[int(o.train.optimizer)].default_lr;
    if (o.train.lr * o.train.weight_decay >= 1.0)
        fail(fmt("--weight-decay %g with --lr %g: each step multiplies the matrices by 1 - lr x weight decay, which "
                 "must stay above 0; lower one of them", o.train.weight_decay, o.train.lr));
    if (!o.dump_step_path.empty() && draws_position_ids(m.positions))
        fail("--dump-step records a step for make reference, whose twin has no random positions; it cannot be "
             "combined with --pos random");
    // --dump-step with --load records a fine-tuning run's first step, adapters and all (chapter 12), for the twin.
    const bool adapting = has_adapters(o);
    if (!o.load_path.empty())
        for (const Flag* f : given)
            if (f->fixed_by_checkpoint && !f->checked_by_checkpoint && !f->fine_tunes &&
                !(adapting && f->name == "--dump-step"))
                fail(f->name + " cannot be combined with --load " + o.load_path +
                     ": the checkpoint fixes the model, its data and its training (--task, --seq-len and --min-len "
                     "excepted: fine-tuning)");
    if (!o.load_path.empty()) {  // the data asked for, applied once the checkpoint's is read (main.cpp)
        if (was_given("--task")) o.tune_task = int(d.task);
        if (was_given("--seq-len")) o.tune_seq_len = d.seq_len;
        if (was_given("--min-len") || was_given("--seq-len")) o.tune_min_len = d.min_len;
        if (was_given("--lr")) o.tune_lr = o.train.lr;
    }
    if (m.experts == 0 && o.load_path.empty())  // (with --load, the checkpoint's: every one of them is refused above)
        for (std::string flag : {"--top-k", "--shared-experts", "--balance"})
            if (was_given(flag)) fail(flag + " sets the mixture of experts: add --experts E (E from 1 to 64)");
    if (was_given("--length-penalty") && o.decode.beam == 1)
        fail("--length-penalty ranks the hypotheses of beam search; add --beam K with K above 1");
    if (o.inspect && o.decode.beam > 1)
        fail("--inspect measures greedy decoding step by step; it cannot be combined with --beam " +
             std::to_string(o.decode.beam));
    if (o.save_every > 0 && o.save_path.empty())
        fail(fmt("--save-every %ld writes the checkpoint to the --save file; add --save FILE", o.save_every));
    if (o.quantize_bits > 0 && o.load_path.empty())
        fail(fmt("--quantize %d quantizes a trained model: add --load FILE (and --save FILE to keep it)", o.quantize_bits));
    if (o.quantize_bits > 0 && (was_given("--steps") || o.finish))
        fail(fmt("--quantize %d: a quantized model cannot train; train the float model first, then quantize it",
                 o.quantize_bits));
    if (std::string problem = lora_flags_problem(o, was_given("--lora-alpha"), was_given("--lora-on"));
        !problem.empty())
        fail(problem);
    if (o.finish && o.load_path.empty())
        fail("--finish trains on the run a checkpoint was saved from; add --load FILE");
    if (o.finish && was_given("--steps"))
        fail("--finish trains the steps the loaded run has left; give --finish or --steps N, not both");
    if (o.finish && o.save_path.empty())
        fail("--finish trains the rest of a run: add --save FILE to keep it (the --load file, to finish in place)");
    if (!has_encoder(m.arch) && was_given("--enc-layers"))
        fail("--enc-layers with --arch " + ARCH_NAMES[int(m.arch)] + ": a decoder-only model has no encoder; "
             "--dec-layers N sets its blocks");
    if (o.thread_count == 0) o.thread_count = std::min(cores_available(), int(MAX_THREADS));
    if (!o.load_path.empty() && !was_given("--steps")) o.train.steps = 0;  // --load trains only when asked to
                                                                             // (--finish: main.cpp's build_or_load)
    m = fit_to_data(m, d);
    m.max_len = std::max(m.max_len, positions_read(m, o.test_len));  // positions up to the longest test input
    if (draws_position_ids(m.positions)) m.max_len *= RANDOM_POSITION_SPAN;
    if (o.load_path.empty() && (o.train.steps > 0 || o.speed || o.step_cost))  // (loaded: main.cpp's build_or_load)
        if (std::string problem = step_memory_problem(m, d, o.train, o.thread_count); !problem.empty()) fail(problem);
    return o;
}

inline Options parse_options(std::vector<std::string> words) {  // {"--heads", "4"}, as after ./sorter
    words.insert(words.begin(), "./sorter");
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    return parse_options(int(argv.size()), argv.data());
}

// The Data and Variants settings that differ from the defaults, as flags ("--task reverse --norm post").
inline std::string variant_text(const Options& o) {
    std::vector<std::string> v;  // (--min-len gives "" when it equals --seq-len: its default follows it)
    for (const FlagGroup& g : flag_table())
        for (const Flag& f : g.flags)
            if (g.variant && f.fixed_by_checkpoint && !f.as_given(o).empty() && f.as_given(o) != f.as_given(DEFAULTS))
                v.push_back(f.as_given(o));
    return join(v, " ");
}
// Whether a run reads the held-out set, so that a model trained on a --train-data file needs that file: it
// trains, or scores the model (a run without --sort prints the held-out score; so do the flags marked `scoring`).
inline bool reads_held_out(const Options& o) {
    if (o.train.steps > 0 || o.sort_words.empty()) return true;
    for (const FlagGroup& g : flag_table())
        for (const Flag& f : g.flags)
            if (f.scores && f.as_given(o) != f.as_given(DEFAULTS)) return true;
    return false;
}
