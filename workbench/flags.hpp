// workbench/flags.hpp -- what the command line fills in and what a flag is made of: the caps on every size,
// Options (everything a run is asked to do), reading a flag's value (Args), and a row of the flag table with a
// builder for each kind of row. The table itself and --help are flag_table.hpp's, which includes this; parse_options
// is options.hpp's.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "beam.hpp"
#include "demos.hpp"  // Demo, the --demo choice
#include "settings.hpp"  // the one check of the settings
#include "text.hpp"

// Caps on every size, so that no flag and no checkpoint can ask for a huge model; a training step, which grows with
// --batch and --seq-len too, is counted whole before it starts (workbench/memory.hpp, MAX_STEP_BYTES). The
// largest model they allow has about 15 million parameters (about 250 MB with the gradients; Adam's
// two running means add as much again); what a step at batch 16 and an evaluation of it peak at, at --seq-len 32, is
// measured in docs/performance.md ("Memory"). --seq-len goes to 512 (a decoder-only sequence of 1024) so that a class
// can see why attention is computed in tiles (--attention flash): there plain attention's weights grow as T x T, and
// a step's peak, plain and in tiles, is measured in docs/performance.md ("Attention in tiles").
constexpr long MAX_D_MODEL = 256, MAX_HEADS = 64, MAX_D_FF = 1024, MAX_LAYERS = 8, MAX_SEQ_LEN = 512, MAX_DIGIT = 99;
constexpr int RANDOM_POSITION_SPAN = 4;  // --pos random draws each input's rows from 4 x the longest input's
constexpr long MAX_STEPS = 1000000, MAX_BATCH = 1024, MAX_SEED = 2147483647, MAX_TRAIN_LINES = 1000000;
constexpr double MAX_LR = 10.0;
constexpr double MAX_FRACTION = 0.9, MAX_CLIP = 1000, MAX_WEIGHT_DECAY = 10.0;  // label smoothing and dropout
constexpr long MAX_BEAM = 64, MAX_THREADS = 256;
constexpr long MAX_EXPERTS = 64, MAX_SHARED_EXPERTS = 8;  // --experts, --shared-experts (chapter 11)
constexpr double MAX_BALANCE = 10.0;                       // --balance
constexpr double MAX_LENGTH_PENALTY = 5.0;
constexpr long MAX_LORA_RANK = 256;          // --lora (chapter 12): and at most the smaller side of a matrix
constexpr double MAX_LORA_ALPHA = 1000.0;    // --lora-alpha

// Everything a run is asked to do. The defaults here are the defaults of the program.
struct Options {
    ModelConfig model;
    DataConfig data;
    TrainConfig train;   // a checkpoint keeps all of it but the steps, so that --load FILE --steps N goes on
    DecodeConfig decode;  // how evaluation and --sort decode: a choice of each run, not kept in the checkpoint
    int test_len = 0;    // --test-len: lengths 1 .. test_len evaluated after training
    uint64_t seed = 1;
    bool seed_unknown = false;  // --load of a checkpoint from before version 4, which did not keep its seed
    long eval_every = 500;
    std::string dump_step_path;  // --dump-step: the first step, for reference/torch_sorter.py
    bool help = false, bench = false, speed = false, step_cost = false;
    bool show_attention = false, numbers = false, show_pe = false, trace_shapes = false, params = false;
    bool inspect = false;
    std::string svg_dir, report_path, save_path, load_path, train_data_path;
    long save_every = 0;  // --save-every: the checkpoint every N steps of training too (0: as training ends)
    bool finish = false;  // --finish: train the steps the --load file's run had left
    bool llama = false;   // --llama: today's blocks, as the Llama family has them
    std::vector<std::string> sort_words;  // the words after --sort, checked once the data is known
    std::optional<Demo> demo;             // --demo: one of DEMO_NAMES (none: no demonstration)
    int quantize_bits = 0;  // --quantize: the loaded model's matrices to this many bits (0: none)
    int lora_rank = 0;        // --lora R: fine-tune the --load model with adapters of rank R (chapter 12; 0: none)
    double lora_alpha = 0.0;  // --lora-alpha: their scale's alpha, s = alpha / R (0: R, so s = 1)
    LoraOn lora_on = LoraOn::qv;  // --lora-on: which matrices take them
    std::string adapters_path, save_adapters_path;  // --adapters FILE onto the --load base; --save-adapters FILE
    // --task, --seq-len, --min-len with --load: fine-tune (or score) the loaded model on other data (0: its own)
    int tune_task = -1, tune_seq_len = 0, tune_min_len = 0;
    double tune_lr = 0.0;  // --lr with --load: a fine-tuning run's rate (0: the checkpoint's)
    int thread_count = 0;  // --threads: the threads of the products, attention and decoding (0: the cores available)
};
const Options DEFAULTS;
const std::string ATTENTION_SVG = "attention.svg", POSITIONS_SVG = "pe.svg", TRAINING_SVG = "training.svg";  // --svg
const std::string EXPERTS_SVG = "experts.svg";  // --svg, with --experts (chapter 11)

// The command line, read one flag at a time; each reader takes the flag's value and checks it.
struct Args {
    int argc;
    char** argv;
    int i = 0;
    std::string flag;  // the flag being read
    bool has_value() const { return i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0; }
    std::string value(const std::string& allowed) {
        if (!has_value() || !*argv[i + 1]) fail(flag + " needs a value: " + allowed);
        return argv[++i];
    }
    long whole(long lo, long hi) { return whole_or_fail(flag, value(range_text(lo, hi)), lo, hi); }
    int choice(const std::vector<std::string>& names) {
        return choice_or_fail(flag, value("one of " + join(names, ", ")), names);
    }
    double between(double lo, double hi) {  // lo <= X <= hi
        std::string allowed = fmt("a number from %g to %g", lo, hi), text = value(allowed);
        double v = 0;
        if (!parse_finite(text, v) || v < lo || v > hi) fail(flag + " " + text + ": expected " + allowed);
        return v;
    }
    double above_zero(double hi) {
        std::string allowed = fmt("a number above 0 and at most %g, such as 0.05", hi), text = value(allowed);
        double v = 0;
        if (!parse_finite(text, v) || v <= 0.0 || v > hi) fail(flag + " " + text + ": expected " + allowed);
        return v;
    }
};

// One row of the table of options: a new flag is one row here, plus its use.
struct Flag {
    std::string name, value, help;  // "--d-model", "N", the --help text (the row's builder adds the default)
    bool fixed_by_checkpoint;       // the file given to --load decides it: the two cannot be combined (but see
                                    // checked_by_checkpoint)
    std::function<void(Options&, Args&)> apply;           // reads the value into the options
    std::function<std::string(const Options&)> as_given;  // "--d-model 32", or "" for a switch left off
    bool checked_by_checkpoint = false;  // the checkpoint checks that it names the model's own (--train-data)
    bool scores = false;                 // the flag scores the model on the held-out set, which --train-data changes
    bool fine_tunes = false;             // with --load: the data the loaded model trains (or is scored) on now
};
// The two marks a row may carry besides its builder's, said where the row is.
inline Flag checked_by_checkpoint(Flag f) { return f.checked_by_checkpoint = true, f; }
inline Flag scoring(Flag f) { return f.scores = true, f; }
inline Flag fine_tuning(Flag f) { return f.fine_tunes = true, f; }  // --task, --seq-len, --min-len (chapter 12)
struct FlagGroup {
    std::string title, example;
    bool variant;  // its settings are listed on the "variant:" line of a run when not the defaults
    std::vector<Flag> flags;
};

// The member a flag sets, by member pointer: &Options::steps is o.train.steps, &ModelConfig::d_model o.model.d_model.
template <typename O, typename T> auto& member(O& o, T Options::*m) { return o.*m; }
template <typename O, typename T, typename C, typename = std::enable_if_t<std::is_base_of_v<C, ModelConfig>>>
auto& member(O& o, T C::*m) { return o.model.*m; }  // ModelConfig's, or a later chapter's choice (a base of it)
template <typename O, typename T> auto& member(O& o, T DataConfig::*m) { return o.data.*m; }
template <typename O, typename T> auto& member(O& o, T TrainConfig::*m) { return o.train.*m; }
template <typename O, typename T> auto& member(O& o, T DecodeConfig::*m) { return o.decode.*m; }

// Row builders, one for each kind of flag; the help text gets the default from DEFAULTS.
template <typename Member>
Flag whole_flag(const std::string& name, const std::string& help, long lo, long hi, bool fixed, Member m) {
    return {name, "N", fmt("%s (default %ld, at most %ld)", help.c_str(), long(member(DEFAULTS, m)), hi), fixed,
            [=](Options& o, Args& a) { member(o, m) = a.whole(lo, hi); },
            [=](const Options& o) { return name + " " + std::to_string(member(o, m)); }};
}
template <typename Member>
Flag choice_flag(const std::string& name, const std::string& help, const std::vector<std::string>& names, bool fixed,
                 Member m) {
    using Enum = std::decay_t<decltype(member(DEFAULTS, m))>;
    return {name, join(names, "|"), help + " (default " + names[int(member(DEFAULTS, m))] + ")", fixed,
            [=](Options& o, Args& a) { member(o, m) = Enum(a.choice(names)); },
            [=](const Options& o) { return name + " " + names[int(member(o, m))]; }};
}
template <typename Member>
Flag switch_flag(const std::string& name, const std::string& help, bool fixed, bool on, Member m) {
    return {name, "", help, fixed, [=](Options& o, Args&) { member(o, m) = on; },
            [=](const Options& o) { return member(o, m) == on ? name : ""; }};
}
template <typename Member>
Flag number_flag(const std::string& name, const std::string& help, double lo, double hi, bool fixed, Member m) {
    return {name, "X", fmt("%s (default %g, from %g to %g)", help.c_str(), member(DEFAULTS, m), lo, hi), fixed,
            [=](Options& o, Args& a) { member(o, m) = a.between(lo, hi); },
            [=](const Options& o) { return fmt("%s %g", name.c_str(), member(o, m)); }};
}
template <typename Member>
Flag path_flag(const std::string& name, const std::string& value, const std::string& help, bool fixed, Member m) {
    return {name, value, help, fixed, [=](Options& o, Args& a) { member(o, m) = a.value(help); },
            [=](const Options& o) { return member(o, m).empty() ? "" : name + " " + member(o, m); }};
}
