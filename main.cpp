// main.cpp -- the sorter program: the learner's workbench around the tutorial.
//
// The tutorial is in matrix.hpp, model.hpp and train.hpp; this file is the program around it:
// flags, what is printed, terminal pictures, SVG files and checkpoints. Sections, in the order a
// run uses them:
//   1. Errors and options     one table of every flag; a bad value is one line on stderr and exit 2
//   2. Input files            --train-data sequences and --sort digits, checked against the data
//   3. Checkpoints            --save and --load, a plain-text format described below
//   4. Terminal pictures      attention heatmaps, the positional table, the loss curve
//   5. Looking inside         --trace-shapes and --params
//   6. SVG pictures           --svg DIR: the same pictures as files for a browser
//   7. Demonstrations         --demo scale, softmax and gradcheck, for three of the exercises
//   8. The training run       and --dump-step, the first step for reference/torch_sorter.py
//   9. The run                what the options ask for, in order
//  10. Speed                  --speed and --bench (make bench)
//
// Legend: T target length, S source length, d_model token width, n_heads heads,
//         d_k = d_model / n_heads, d_ff feed-forward width, V vocabulary size.
#include <fcntl.h>         // open with O_EXCL | O_NOFOLLOW (POSIX): the temporary file of an atomic write
#include <sys/resource.h>  // getrusage (POSIX): peak memory for the benchmark
#include <sys/stat.h>      // lstat, fchmod (POSIX): only a regular file is replaced, and it keeps its mode
#include <unistd.h>        // fsync, getpid, access (POSIX): a checkpoint reaches the disk before it is renamed

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "train.hpp"

// Everything in this file but main() lives in one namespace, so that tests.cpp can include the
// file beside its own helpers without two functions of the same name meeting.
namespace sorter_program {

// =============================================================================================
// 1. Errors and options
// =============================================================================================
// Every check in this file throws a UsageError carrying one line that names the flag (or file
// and line), the value, and what is allowed. main() prints it and exits with status 2. Nothing
// deep inside calls exit(), so the tests can call these functions and read the message.
struct UsageError { std::string message; };
[[noreturn]] inline void fail(const std::string& message) { throw UsageError{message}; }

// Caps on every size, so that no flag and no checkpoint can ask for a huge allocation. The
// largest model they allow has about 15 million parameters (about 250 MB with the gradients; Adam's
// two running means add as much again).
constexpr long MAX_D_MODEL = 256, MAX_HEADS = 64, MAX_D_FF = 1024, MAX_LAYERS = 8, MAX_SEQ_LEN = 32, MAX_DIGIT = 99;
constexpr int RANDOM_POSITION_SPAN = 4;  // --pos random draws each input's rows from 4 x the longest input's
constexpr long MAX_STEPS = 1000000, MAX_BATCH = 1024, MAX_SEED = 2147483647, MAX_TRAIN_LINES = 1000000;
constexpr double MAX_LR = 10.0;

// How a run trains. A checkpoint keeps all of it but the steps, so that --load FILE --steps N goes on.
// The defaults were chosen by measurement over seeds 1-10 (README.md, "Why these defaults"): every seed
// reaches 100% held-out and stays there at every evaluation; a constant rate, or a higher one, wobbles.
struct TrainConfig {
    long steps = 5000;
    int batch = 16;
    double lr = 0.2;  // with --optimizer momentum or adam and no --lr, that optimizer's own default
    OptimizerKind optimizer = OptimizerKind::sgd;
    Schedule schedule = Schedule::linear;
    long warmup = 1000;  // steps of --schedule warmup
};

// Everything a run is asked to do. The defaults here are the defaults of the program.
struct Options {
    ModelConfig model;
    DataConfig data;
    TrainConfig train;
    int test_len = 0;    // --test-len: lengths 1 .. test_len evaluated after training
    uint64_t seed = 1;
    long eval_every = 500;
    std::string dump_step_path;  // --dump-step: the first step, for reference/torch_sorter.py
    bool help = false, bench = false, speed = false;
    bool show_attention = false, numbers = false, show_pe = false, trace_shapes = false, params = false;
    bool inspect = false;
    std::string svg_dir, report_path, save_path, load_path, train_data_path;
    std::vector<std::string> sort_words;  // the words after --sort, checked once the data is known
    std::string demo;                     // "scale", "softmax" or "gradcheck"
};
const Options DEFAULTS;

// Names of the choices, shared by the flags and the checkpoint header.
const std::vector<std::string> TASK_NAMES = {"sort", "copy", "reverse"};
const std::vector<std::string> NORM_NAMES = {"pre", "post"};
const std::vector<std::string> POSITION_NAMES = {"sinusoidal", "learned", "none", "random"};
const std::vector<std::string> ACTIVATION_NAMES = {"relu", "gelu"};
const std::vector<std::string> DEMO_NAMES = {"scale", "softmax", "gradcheck"};
const std::vector<std::string> OPTIMIZER_NAMES = {"sgd", "momentum", "adam"};
const std::vector<std::string> SCHEDULE_NAMES = {"constant", "linear", "warmup"};
// The learning rate of each optimizer when --lr is not given: momentum's steps are about 1 / (1 - mu)
// = 10 times SGD's for the same rate, and Adam's are about lr in every entry whatever the gradient's size.
const double DEFAULT_LR[] = {0.2, 0.02, 0.001};

// Text helpers for the whole file: join words, split a line at whitespace, format as printf does.
inline std::string join(const std::vector<std::string>& words, const std::string& between) {
    std::string s;
    for (std::size_t i = 0; i < words.size(); i++) s += (i ? between : "") + words[i];
    return s;
}
inline std::vector<std::string> split_words(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    return words;
}
template <typename... Values>
std::string fmt(const char* format, Values... values) {  // fmt("%d of %d", 3, 5) is "3 of 5"
    std::vector<char> text(std::snprintf(nullptr, 0, format, values...) + 1);
    std::snprintf(text.data(), text.size(), format, values...);
    return text.data();
}
inline std::string printable(const std::string& text) {  // control bytes and non-ASCII shown as \xNN
    std::string out;
    for (unsigned char ch : text) out += ch >= 0x20 && ch < 0x7f ? std::string(1, char(ch)) : fmt("\\x%02x", ch);
    return out;
}
inline std::string shape_text(int rows, int cols) { return fmt("(%d, %d)", rows, cols); }  // "(5, 16)"
inline std::string shape_text(const Matrix& m) { return shape_text(m.rows, m.cols); }

// What a number is, in every flag, input file and checkpoint: decimal digits, and for a real number
// an optional '-', fraction and exponent ("5", "0.1", "-2.5e-3", "1e+300"). Not "+5", " 5", "0x1p-3",
// "inf" or "nan", which strtol and strtod would also take; and not "1e-400", which would become 0.
inline bool number_syntax(const std::string& s, bool whole) {
    std::size_t i = 0;
    auto digits = [&] {  // one or more digits from i
        std::size_t from = i;
        while (i < s.size() && std::isdigit((unsigned char)s[i])) i++;
        return i > from;
    };
    auto skip = [&](const char* chars) {  // one of chars at i: step over it
        bool there = i < s.size() && s[i] != '\0' && std::strchr(chars, s[i]);
        i += there;
        return there;
    };
    if (whole) return digits() && i == s.size();
    skip("-");
    if (!digits() || (skip(".") && !digits())) return false;
    if (skip("eE")) {
        skip("+-");
        if (!digits()) return false;
    }
    return i == s.size();
}
inline bool parse_whole(const std::string& text, long lo, long hi, long& out) {  // a whole number in [lo, hi]
    errno = 0;
    long v = number_syntax(text, true) ? std::strtol(text.c_str(), nullptr, 10) : 0;
    if (!number_syntax(text, true) || errno == ERANGE || v < lo || v > hi) return false;
    out = v;
    return true;
}
inline bool parse_finite(const std::string& text, double& out) {  // a finite number that does not underflow to 0
    double v = number_syntax(text, false) ? std::strtod(text.c_str(), nullptr) : 0.0;
    bool nonzero_digits = text.substr(0, text.find_first_of("eE")).find_first_of("123456789") != std::string::npos;
    if (!number_syntax(text, false) || !std::isfinite(v) || (v == 0.0 && nonzero_digits)) return false;
    out = v;
    return true;
}
inline std::string range_text(long lo, long hi) { return fmt("a whole number from %ld to %ld", lo, hi); }  // allowed
// A flag's value or a header value, checked: "WHAT TEXT: expected ALLOWED", what = "--heads" or file, line, key.
inline long whole_or_fail(const std::string& what, const std::string& text, long lo, long hi) {
    long v = 0;
    if (!parse_whole(text, lo, hi, v)) fail(what + " " + text + ": expected " + range_text(lo, hi));
    return v;
}
inline int choice_or_fail(const std::string& what, const std::string& text, const std::vector<std::string>& names) {
    auto it = std::find(names.begin(), names.end(), text);
    if (it == names.end()) fail(what + " " + text + ": expected one of " + join(names, ", "));
    return int(it - names.begin());
}

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
    bool fixed_by_checkpoint;       // the file given to --load decides it: the two cannot be combined
    std::function<void(Options&, Args&)> apply;           // reads the value into the options
    std::function<std::string(const Options&)> as_given;  // "--d-model 32", or "" for a switch left off
};
struct FlagGroup {
    std::string title, example;
    bool variant;  // its settings are listed on the "variant:" line of a run when not the defaults
    std::vector<Flag> flags;
};

// The member a flag sets, by member pointer: &Options::steps is o.train.steps, &ModelConfig::d_model o.model.d_model.
template <typename O, typename T> auto& member(O& o, T Options::*m) { return o.*m; }
template <typename O, typename T> auto& member(O& o, T ModelConfig::*m) { return o.model.*m; }
template <typename O, typename T> auto& member(O& o, T DataConfig::*m) { return o.data.*m; }
template <typename O, typename T> auto& member(O& o, T TrainConfig::*m) { return o.train.*m; }

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
Flag path_flag(const std::string& name, const std::string& value, const std::string& help, bool fixed, Member m) {
    return {name, value, help, fixed, [=](Options& o, Args& a) { member(o, m) = a.value(help); },
            [=](const Options& o) { return member(o, m).empty() ? "" : name + " " + member(o, m); }};
}
inline const std::vector<FlagGroup>& flag_table() {  // every flag, in the groups of --help
    using O = Options; using M = ModelConfig; using D = DataConfig; using T = TrainConfig;  // short: rows fit
    static const std::vector<FlagGroup> table = {
        {"Model", "./sorter --d-model 32 --heads 4 --d-ff 64 --enc-layers 2 --dec-layers 2", false, {
            whole_flag("--d-model", "width of every token vector", 1, MAX_D_MODEL, true, &M::d_model),
            whole_flag("--heads", "attention heads; must divide d_model", 1, MAX_HEADS, true, &M::n_heads),
            whole_flag("--d-ff", "hidden width of the feed-forward layers", 1, MAX_D_FF, true, &M::d_ff),
            whole_flag("--enc-layers", "encoder blocks", 1, MAX_LAYERS, true, &M::enc_layers),
            whole_flag("--dec-layers", "decoder blocks", 1, MAX_LAYERS, true, &M::dec_layers)}},
        {"Data", "./sorter --task reverse --seq-len 6 --min-len 3", true, {
            choice_flag("--task", "what the output is", TASK_NAMES, true, &D::task),
            whole_flag("--seq-len", "longest input, S = T", 1, MAX_SEQ_LEN, true, &D::seq_len),
            {"--min-len", "N", "shortest input (default: seq-len); below seq-len inputs vary in length, padded "
             "with PAD, which the source padding mask hides from attention", true,
             [](O& o, Args& a) { o.data.min_len = int(a.whole(1, MAX_SEQ_LEN)); },
             [](const O& o) { return o.data.min_len == o.data.seq_len ? "" : fmt("--min-len %d", o.data.min_len); }},
            whole_flag("--max-digit", "digits are 1..N, so V = N + 2", 1, MAX_DIGIT, true, &D::max_digit),
            path_flag("--train-data", "FILE", "train on the sequences in FILE (one a line, digits separated by "
                      "spaces; blank lines and lines starting with # are skipped)", true, &O::train_data_path)}},
        {"Training", "./sorter --steps 3000 --batch 16 --optimizer adam --schedule warmup --warmup 200", false, {
            whole_flag("--steps", "training steps; 0 trains nothing; with --load, that many more from where the "
                       "checkpoint stopped", 0, MAX_STEPS, false, &T::steps),
            whole_flag("--batch", "examples per step", 1, MAX_BATCH, true, &T::batch),
            {"--lr", "X", fmt("learning rate, above 0 and at most %g (default %g; %g with momentum, %g with adam)",
                              MAX_LR, DEFAULT_LR[0], DEFAULT_LR[1], DEFAULT_LR[2]), true,
             [](O& o, Args& a) { o.train.lr = a.above_zero(MAX_LR); },
             [](const O& o) { return fmt("--lr %g", o.train.lr); }},
            choice_flag("--optimizer", "how a step moves the weights, as train.hpp writes out", OPTIMIZER_NAMES, true,
                        &T::optimizer),
            choice_flag("--schedule", "the learning rate over the steps: constant; linear decay towards 0; warmup: up "
                        "for --warmup steps, then down as 1/sqrt(step)", SCHEDULE_NAMES, true, &T::schedule),
            whole_flag("--warmup", "steps of the warmup schedule's rise", 1, MAX_STEPS, true, &T::warmup),
            whole_flag("--seed", "seed for the weights and the training draws", 0, MAX_SEED, true, &O::seed),
            whole_flag("--eval-every", "steps between held-out evaluations", 1, MAX_STEPS, false, &O::eval_every),
            whole_flag("--test-len", "after training, held-out exact-match for every length from 1 to N; N may "
                       "pass --seq-len (the position table is made that long); 0: none", 0, MAX_SEQ_LEN, true,
                       &O::test_len),
            path_flag("--dump-step", "FILE", "write the first step (weights, batch, logits, loss) to FILE, for "
                      "make reference", true, &O::dump_step_path)}},
        {"Variants for the exercises", "./sorter --norm post --pos learned --act gelu", true, {
            choice_flag("--norm", "LayerNorm before each sublayer, or after the residual sum", NORM_NAMES, true,
                        &M::norm),
            choice_flag("--pos", "positional encoding; random: sinusoidal rows drawn in order from 4 x the "
                        "longest input (Ruoss et al. 2023)", POSITION_NAMES, true, &M::positions),
            choice_flag("--act", "feed-forward activation", ACTIVATION_NAMES, true, &M::activation),
            switch_flag("--no-embed-scale", "do not multiply embeddings by sqrt(d_model)", true, false,
                        &M::embed_scale),
            {"--demo", join(DEMO_NAMES, "|"), "scale: why attention divides its scores by sqrt(d_k); softmax: why "
             "softmax subtracts the row max before exp; gradcheck: the central difference's error against its "
             "step h (no training)", false,
             [](O& o, Args& a) { o.demo = DEMO_NAMES[a.choice(DEMO_NAMES)]; }, [](const O& o) { return o.demo; }}}},
        {"Seeing inside", "./sorter --steps 1500 --show-attention --svg /tmp", false, {
            switch_flag("--show-attention", "after training (or with --load), every head of every attention layer "
                        "as a terminal heatmap: rows = queries, columns = keys", false, true, &O::show_attention),
            switch_flag("--numbers", "print the numbers below each terminal heatmap", false, true, &O::numbers),
            switch_flag("--inspect", "after training (or with --load): held-out exact-match with each head switched "
                        "off, and how often cross-attention points at the digit being written", false, true,
                        &O::inspect),
            switch_flag("--show-pe", "the positional-encoding table as a heatmap, then stop (no training)", false,
                        true, &O::show_pe),
            switch_flag("--trace-shapes", "the shape of every tensor on one forward pass, then stop", false, true,
                        &O::trace_shapes),
            switch_flag("--params", "parameter count per block and in total, then stop", false, true, &O::params),
            path_flag("--svg", "DIR", "write attention.svg, pe.svg and training.svg into DIR", false, &O::svg_dir),
            path_flag("--report", "FILE", "after training (or with --load), write one HTML page of the run to FILE: "
                      "curves, gradient flow, attention, a decoding replay, the positions, the mistakes", false,
                      &O::report_path)}},
        {"Keeping and using a model", "./sorter --save model.txt, then ./sorter --load model.txt --sort 5 3 9 1 1",
         false, {
            path_flag("--save", "FILE", "after training, write the model to FILE (plain text)", false, &O::save_path),
            path_flag("--load", "FILE", "read a model saved with --save instead of training one; with --steps N, "
                      "train it N steps more; model, data and other training flags cannot be combined with it", false,
                      &O::load_path),
            {"--sort", "D D ...", "print the model's output for these digits (with --load, or after training)", false,
             [](O& o, Args& a) {
                 o.sort_words.clear();
                 while (a.has_value()) o.sort_words.push_back(a.argv[++a.i]);
                 if (o.sort_words.empty()) fail("--sort needs digits, e.g. --sort 5 3 9 1 1");
             },
             [](const O& o) { return join(o.sort_words, " "); }}}},
        {"Speed", "", false, {
            switch_flag("--bench", "print the speed table instead of training (make bench runs it)", false, true,
                        &O::bench),
            switch_flag("--speed", "measure training examples/s of the model and batch the other flags give, then "
                        "time one held-out evaluation (make compare runs it)", false, true, &O::speed),
            switch_flag("--help", "this text", false, true, &O::help)}},
    };
    return table;
}
inline const Flag* find_flag(const std::string& name) {  // nullptr for a flag not in the table
    for (const FlagGroup& g : flag_table())
        for (const Flag& f : g.flags)
            if (f.name == name || (name == "-h" && f.name == "--help")) return &f;
    return nullptr;
}

// --help, generated from the table: each flag and its value, then its help wrapped at 100 columns.
inline void print_help() {
    std::printf("sorter: a from-scratch Transformer that learns to sort digits.\n\n"
                "usage: ./sorter [flags]      with no flags: train the default model and report\n");
    const std::size_t left = 21;  // the column every help text starts in
    for (const FlagGroup& g : flag_table()) {
        std::printf("\n%s\n", g.title.c_str());
        for (const Flag& f : g.flags) {
            std::string text = "  " + f.name + (f.value.empty() ? "" : " " + f.value);
            text += text.size() < left ? std::string(left - text.size(), ' ') : "\n" + std::string(left, ' ');
            std::size_t column = left;  // where the next word would start, after a space
            for (const std::string& word : split_words(f.help)) {
                if (column + word.size() > 100) {  // wrap at 100 columns, under the help of the line above
                    text += "\n" + std::string(left, ' ');
                    column = left;
                }
                text += (column > left ? " " : "") + word;
                column += word.size() + 1;
            }
            std::printf("%s\n", text.c_str());
        }
        if (!g.example.empty()) std::printf("  example: %s\n", g.example.c_str());
    }
}

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
    if (!was_given("--min-len"))
        d.min_len = d.seq_len;  // fixed length unless asked otherwise
    if (d.min_len > d.seq_len)
        fail(fmt("--min-len %d: must be at most the sequence length %d (--seq-len)", d.min_len, d.seq_len));
    if (m.d_model % m.n_heads != 0)
        fail(fmt("--heads %d with --d-model %d: d_model must be a multiple of the number of heads", m.n_heads,
                 m.d_model));
    if (!was_given("--lr"))
        o.train.lr = DEFAULT_LR[int(o.train.optimizer)];
    if (!o.dump_step_path.empty() && m.positions == Positions::random)
        fail("--dump-step records a step for make reference, whose twin has no random positions; it cannot be "
             "combined with --pos random");
    if (!o.dump_step_path.empty() && o.train.optimizer != OptimizerKind::sgd)
        fail("--dump-step records an SGD step for make reference; it cannot be combined with --optimizer " +
             OPTIMIZER_NAMES[int(o.train.optimizer)]);
    if (!o.load_path.empty())
        for (const Flag* f : given)
            if (f->fixed_by_checkpoint)
                fail(f->name + " cannot be combined with --load " + o.load_path +
                     ": the checkpoint fixes the model, its data and its training");
    if (!o.load_path.empty() && !was_given("--steps")) o.train.steps = 0;  // --load trains only when asked to
    m = fit_to_data(m, d);
    m.max_len = std::max(m.max_len, o.test_len);  // positions up to the longest test input
    if (m.positions == Positions::random) m.max_len *= RANDOM_POSITION_SPAN;
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

// =============================================================================================
// 2. Input files: --train-data and --sort
// =============================================================================================
// One sequence from words: each a digit from 1 to max_digit, between min_len and seq_len of them.
// `where` begins every message ("--sort 5 3 12", "--train-data data.txt line 3").
inline std::vector<int> parse_sequence(const std::vector<std::string>& words, const DataConfig& d,
                                       const std::string& where) {
    std::vector<int> digits;
    for (const std::string& w : words) {
        long v = 0;
        if (!parse_whole(w, 1, d.max_digit, v))
            fail(where + ": '" + w + "' is not a digit from 1 to " + std::to_string(d.max_digit) + " (--max-digit)");
        digits.push_back(int(v));
    }
    int n = int(digits.size());
    if (n < d.min_len || n > d.seq_len)
        fail(where + fmt(": %d digits; expected ", n) +
             (d.min_len == d.seq_len ? fmt("exactly %d", d.seq_len) : fmt("from %d to %d", d.min_len, d.seq_len)) +
             " (set by --min-len and --seq-len, or by the checkpoint given to --load)");
    return digits;
}

// One line into `line`, keeping at most max_chars characters (too_long says more were there).
// Returns false at the end of the file. Reading by characters keeps a huge line from a huge string.
inline bool read_line(std::istream& in, std::string& line, std::size_t max_chars, bool& too_long) {
    line.clear();
    too_long = false;
    int c = in.get();
    if (c == EOF) return false;
    for (; c != EOF && c != '\n'; c = in.get()) {
        if (line.size() == max_chars) {  // stop at once: a file with no newline (/dev/zero) is not read to its end
            too_long = true;
            break;
        }
        line += char(c);
    }
    return true;
}

// The sequences of a --train-data file: one a line; blank lines and lines starting with # skipped.
inline std::vector<std::vector<int>> read_train_data(std::istream& in, const DataConfig& d, const std::string& where) {
    std::vector<std::vector<int>> sequences;
    std::string line;
    bool too_long = false;
    for (long line_no = 1; read_line(in, line, 4096, too_long); line_no++) {
        std::string at = where + " line " + std::to_string(line_no);
        if (too_long) fail(at + ": longer than 4096 characters");
        std::vector<std::string> words = split_words(line);
        if (words.empty() || words[0][0] == '#') continue;
        if (long(sequences.size()) == MAX_TRAIN_LINES) fail(at + fmt(": more than %ld sequences", MAX_TRAIN_LINES));
        sequences.push_back(parse_sequence(words, d, at));
    }
    if (sequences.empty()) fail(where + ": no sequences (one a line, digits separated by spaces)");
    return sequences;
}

// Opens a file the user named, or fails with one line that starts with `where` ("--load FILE").
inline std::ifstream open_input(const std::string& path, const std::string& where) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) fail(where + ": is a directory, not a file");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(where + ": cannot open the file (" + std::strerror(errno) + ")");
    return in;
}
inline std::vector<std::vector<int>> load_train_data(const std::string& path, const DataConfig& d) {  // --train-data
    std::ifstream in = open_input(path, "--train-data " + path);
    return read_train_data(in, d, "--train-data " + path);
}

// =============================================================================================
// 3. Checkpoints: --save and --load
// =============================================================================================
// The format, version 2, is plain text; README.md ("Checkpoints") shows a whole file. Values are
// written with "%.17g", so every double reads back to the same bits. The sinusoidal table is not
// stored: it is computed from max_len and d_model. Version 2 adds a training section after the tensors
// (version 1 files, without it, still load): --load FILE --steps N goes on where the run stopped.
struct Saved {  // what a checkpoint keeps besides the model
    DataConfig data;
    TrainConfig train;    // its steps are not kept: the optimizer counts the updates made
    Optimizer optimizer;  // that count and, for momentum and Adam, the running means of every tensor
    Rng draws;            // the training draws, where they stopped (random positions' draws: in the model)
    explicit Saved(const DataConfig& d = DataConfig(), const TrainConfig& t = TrainConfig(), uint64_t seed = 1)
        : data(d), train(t), optimizer(t.optimizer), draws(training_rng(seed)) {}  // a fresh run's start
};
inline void write_matrix(FILE* f, const Matrix& m) {  // one line per row
    for (int r = 0; r < m.rows; r++)
        for (int c = 0; c < m.cols; c++) std::fprintf(f, "%.17g%c", m.at(r, c), c + 1 == m.cols ? '\n' : ' ');
}
inline void write_checkpoint(FILE* f, Transformer& model, const Saved& saved) {  // the whole file
    const ModelConfig& c = model.config;
    const DataConfig& d = saved.data;
    const TrainConfig& t = saved.train;
    std::fprintf(f, "sorter-checkpoint 2\nvocab %d\nmax_len %d\nd_model %d\nn_heads %d\nd_ff %d\nenc_layers %d\n"
                 "dec_layers %d\n", c.vocab, c.max_len, c.d_model, c.n_heads, c.d_ff, c.enc_layers, c.dec_layers);
    std::fprintf(f, "norm %s\npositions %s\nactivation %s\nembed_scale %d\n", NORM_NAMES[int(c.norm)].c_str(),
                 POSITION_NAMES[int(c.positions)].c_str(), ACTIVATION_NAMES[int(c.activation)].c_str(),
                 c.embed_scale ? 1 : 0);
    std::fprintf(f, "task %s\nseq_len %d\nmin_len %d\nmax_digit %d\n", TASK_NAMES[int(d.task)].c_str(), d.seq_len,
                 d.min_len, d.max_digit);
    auto params = model.parameters();
    std::fprintf(f, "tensors %zu\n", params.size());
    for (auto& [name, p] : params) {
        std::fprintf(f, "tensor %s %d %d\n", name.c_str(), p->value.rows, p->value.cols);
        write_matrix(f, p->value);
    }
    const Optimizer& o = saved.optimizer;
    std::fprintf(f, "training\noptimizer %s\nlr %.17g\nschedule %s\nwarmup %ld\nbatch %d\nupdates %ld\ndraws %llu\n"
                 "position_draws %llu\n", OPTIMIZER_NAMES[int(o.kind)].c_str(), t.lr,
                 SCHEDULE_NAMES[int(t.schedule)].c_str(), t.warmup, t.batch, o.t, (unsigned long long)saved.draws.state,
                 (unsigned long long)model.position_draws.state);
    for (std::size_t k = 0; k < o.m.size() && o.kind != OptimizerKind::sgd; k++) {  // none before the first update
        std::fprintf(f, "m %s\n", params[k].first.c_str());
        write_matrix(f, o.m[k]);
        if (o.kind != OptimizerKind::adam) continue;
        std::fprintf(f, "s %s\n", params[k].first.c_str());
        write_matrix(f, o.s[k]);
    }
    std::fprintf(f, "end\n");
}

// Write a file atomically: to a temporary file beside it, flushed to the disk, then renamed over PATH
// in one step. A reader sees the old file or the whole new one; a failed write leaves PATH as it was.
// Only a regular file is replaced, and it keeps its mode (a device, a pipe or a link is refused:
// as root, --save /dev/null would otherwise replace /dev/null). The temporary is created with
// O_EXCL | O_NOFOLLOW, so a file or link planted at its name is never followed or overwritten, and
// SIGINT or SIGTERM during the write remove it (on_signal, installed by main()).
inline char pending_tmp[4096] = "";  // the temporary being written, for on_signal
inline void on_signal(int sig) {
    if (pending_tmp[0]) unlink(pending_tmp);  // unlink, signal and raise may be called from a handler
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}
template <typename WriteFn>
void write_atomically(const std::string& path, const std::string& flag, WriteFn write) {
    struct stat old{};
    bool replacing = lstat(path.c_str(), &old) == 0;
    if (replacing && !S_ISREG(old.st_mode))
        fail(flag + " " + path + ": not a regular file (a directory, device, pipe or link); choose another name");
    std::string tmp = path + ".tmp-" + std::to_string(long(getpid()));
    if (tmp.size() >= sizeof pending_tmp) fail(flag + " " + path + ": the path is too long");
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) fail(flag + " " + path + ": cannot write " + tmp + " (" + std::strerror(errno) + ")");
    std::snprintf(pending_tmp, sizeof pending_tmp, "%s", tmp.c_str());
    FILE* f = fdopen(fd, "wb");
    bool ok = f && (!replacing || fchmod(fd, old.st_mode & 07777) == 0);
    if (ok) write(f);
    ok = ok && !std::ferror(f) && std::fflush(f) == 0 && fsync(fd) == 0;
    int err = errno;
    ok = (f ? std::fclose(f) : close(fd)) == 0 && ok && std::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok) {
        std::string reason = std::strerror(err ? err : errno);
        std::remove(tmp.c_str());
        pending_tmp[0] = '\0';
        fail(flag + " " + path + ": cannot write (" + reason + ")");
    }
    pending_tmp[0] = '\0';
}
inline void save_checkpoint(const std::string& path, Transformer& model, const Saved& saved) {  // --save FILE
    // --load rejects nan and inf, so a diverged model is refused here rather than written unreadable.
    for (auto& [name, p] : model.parameters())
        for (double v : p->value.data)
            if (!std::isfinite(v))
                fail("--save " + path + ": tensor '" + name + "' holds nan or inf (training diverged); not saved");
    write_atomically(path, "--save", [&](FILE* f) { write_checkpoint(f, model, saved); });
}

// How many values the parameters of a model of config c hold, known before the model is built (a
// test checks it against Transformer::parameters(), which builds the names and shapes).
inline long parameter_count(const ModelConfig& c) {
    long d = c.d_model, ff = c.d_ff, V = c.vocab, norm = 2 * d, attention = 4 * d * d, ffn = 2 * d * ff + ff + d;
    long embed = V * d + (c.positions == Positions::learned ? c.max_len * d : 0);
    return embed + c.enc_layers * (2 * norm + attention + ffn) + c.dec_layers * (3 * norm + 2 * attention + ffn) +
           norm + d * V + V;
}

// Reads a checkpoint word by word; a word over 64 characters is an error, so no file can make a huge string.
struct WordReader {
    std::istream& in;
    std::string where;  // "--load FILE", the start of every message
    long long line = 1;  // 64 bits: a file of 2^31 newlines must not overflow it
    std::string at() const { return where + " line " + std::to_string(line); }  // the place, for a message
    [[noreturn]] void error(const std::string& what) const { fail(at() + ": " + what); }
    std::string next() {  // "" at the end of the file
        int c;
        while ((c = in.peek()) != EOF && std::isspace(c))
            if (in.get() == '\n') line++;
        std::string w;
        while ((c = in.peek()) != EOF && !std::isspace(c)) {
            if (w.size() == 64) error("a word longer than 64 characters");
            w += char(in.get());
        }
        return w;
    }
    std::string expect(const std::string& what) {  // the next word, which must be there
        std::string w = next();
        if (w.empty()) error("the file ends early (truncated): expected " + what);
        return w;
    }
    std::string value_of(const std::string& key) {  // the value after "key"
        std::string w = expect("'" + key + "'");
        if (w != key) error("expected '" + key + "', found '" + w + "'");
        return expect("the value of " + key);
    }
    long whole(const std::string& key, long lo, long hi) {
        std::string w = value_of(key);
        return whole_or_fail(at() + ": " + key, w, lo, hi);
    }
    int choice(const std::string& key, const std::vector<std::string>& names) {
        std::string w = value_of(key);
        return choice_or_fail(at() + ": " + key, w, names);
    }
};

// The m.data.size() values of `what` (a tensor, or an optimizer's running mean of one), into m.
inline void read_values(WordReader& r, const std::string& what, Matrix& m) {
    for (std::size_t i = 0; i < m.data.size(); i++) {
        std::string v = r.next();
        if (v.empty())
            r.error("the file ends early (truncated): " + what + " has " + std::to_string(i) + " of its " +
                    std::to_string(m.data.size()) + " values");
        if (parse_finite(v, m.data[i])) continue;
        if (r.in.peek() == EOF) r.error("the file ends early (truncated) inside " + what);
        r.error(what + fmt(" value %zu: '", i) + v + "' is not a finite number");
    }
}

// Version 2's training section, after the tensors: the settings, the optimizer's update count and
// running means (none for SGD, none before the first update), and the training draws.
inline void read_training(WordReader& r, Transformer& model, Saved& saved) {
    TrainConfig& t = saved.train;
    Optimizer& o = saved.optimizer = Optimizer(OptimizerKind(r.choice("optimizer", OPTIMIZER_NAMES)));
    std::string lr = r.value_of("lr");
    if (!parse_finite(lr, t.lr) || t.lr <= 0 || t.lr > MAX_LR)
        r.error("lr " + lr + fmt(": expected above 0 and at most %g", MAX_LR));
    t.optimizer = o.kind;
    t.schedule = Schedule(r.choice("schedule", SCHEDULE_NAMES));
    t.warmup = r.whole("warmup", 1, MAX_STEPS);
    t.batch = int(r.whole("batch", 1, MAX_BATCH));
    o.t = r.whole("updates", 0, MAX_STEPS * 1000);
    for (auto [key, state] :
         {std::pair{"draws", &saved.draws.state}, std::pair{"position_draws", &model.position_draws.state}}) {
        std::string value = r.value_of(key);  // a generator's state: a whole number below 2^64
        errno = 0;
        *state = number_syntax(value, true) ? std::strtoull(value.c_str(), nullptr, 10) : 0;
        if (!number_syntax(value, true) || errno == ERANGE)
            r.error(key + (" " + value) + ": expected a whole number below 2^64");
    }
    if (o.t == 0 || o.kind == OptimizerKind::sgd) return;
    for (auto& [name, p] : model.parameters()) {
        o.m.emplace_back(p->value.rows, p->value.cols);
        if (o.kind == OptimizerKind::adam) o.s.emplace_back(p->value.rows, p->value.cols);
        for (const char* which : {"m", "s"}) {
            if (which[0] == 's' && o.kind != OptimizerKind::adam) continue;
            std::string w = r.expect(std::string(which) + " of '" + name + "'");
            std::string got = r.expect("a tensor name");
            if (w != which || got != name)
                r.error("expected '" + std::string(which) + " " + name + "', found '" + w + " " + got + "'");
            read_values(r, std::string(which) + " of '" + name + "'", which[0] == 'm' ? o.m.back() : o.s.back());
        }
    }
}

// The model a checkpoint holds; its data settings and training into `saved`. `where` begins every message.
inline Transformer read_checkpoint(std::istream& in, const std::string& where, Saved& saved) {
    WordReader r{in, where};
    std::string magic = r.next();
    if (magic != "sorter-checkpoint")
        r.error("not a sorter checkpoint (the first word should be 'sorter-checkpoint', found '" + magic + "')");
    std::string version = r.expect("the format version");
    if (version != "1" && version != "2")
        r.error("format version " + version + " is not supported (this program reads versions 1 and 2)");
    ModelConfig c;
    DataConfig d;
    // The header, in the order write_checkpoint writes it.
    c.vocab = r.whole("vocab", 3, MAX_DIGIT + 2);
    c.max_len = r.whole("max_len", 1, RANDOM_POSITION_SPAN * MAX_SEQ_LEN);
    c.d_model = r.whole("d_model", 1, MAX_D_MODEL);
    c.n_heads = r.whole("n_heads", 1, MAX_HEADS);
    c.d_ff = r.whole("d_ff", 1, MAX_D_FF);
    c.enc_layers = r.whole("enc_layers", 1, MAX_LAYERS);
    c.dec_layers = r.whole("dec_layers", 1, MAX_LAYERS);
    c.norm = Norm(r.choice("norm", NORM_NAMES));
    c.positions = Positions(r.choice("positions", POSITION_NAMES));
    c.activation = Activation(r.choice("activation", ACTIVATION_NAMES));
    c.embed_scale = r.whole("embed_scale", 0, 1) == 1;
    d.task = Task(r.choice("task", TASK_NAMES));
    d.seq_len = r.whole("seq_len", 1, MAX_SEQ_LEN);
    d.min_len = r.whole("min_len", 1, MAX_SEQ_LEN);
    d.max_digit = r.whole("max_digit", 1, MAX_DIGIT);
    std::string header = where + " header: ";  // two header values that disagree
    if (c.d_model % c.n_heads != 0)
        fail(header + fmt("d_model %d is not a multiple of n_heads %d", c.d_model, c.n_heads));
    if (d.min_len > d.seq_len) fail(header + fmt("min_len %d is above seq_len %d", d.min_len, d.seq_len));
    if (c.vocab != vocab_size(d))
        fail(header + fmt("vocab %d does not match max_digit %d (vocab = max_digit + 2)", c.vocab, d.max_digit));
    if (c.max_len < d.seq_len) fail(header + fmt("max_len %d is below seq_len %d", c.max_len, d.seq_len));
    long count = r.whole("tensors", 1, 1000);
    // Every value takes at least two bytes (a digit and a space or newline), so a file too short for
    // the model its header describes is refused before that model is allocated. (A pipe, which
    // cannot tell its length, skips this; the caps on every size still bound the allocation.)
    std::streampos here = in.tellg();
    in.seekg(0, std::ios::end);
    std::streamoff left = in.tellg() - here;
    in.clear();
    in.seekg(here);
    if (here >= 0 && left >= 0 && left < 2 * parameter_count(c))
        r.error(fmt("the file ends early (truncated): this header describes %ld values, and only %lld bytes follow",
                    parameter_count(c), (long long)left));
    // The tensors in the file must now match the model this header describes, name by name and shape by shape.
    Transformer model(c, 0);
    auto params = model.parameters();
    if (count != long(params.size()))
        r.error(fmt("the header lists %ld tensors; this configuration has %zu", count, params.size()));
    for (auto& [name, p] : params) {
        Matrix& m = p->value;
        std::string w = r.next(), tensor = "tensor '" + name + "'";
        if (w.empty()) r.error("the file ends early (truncated): " + tensor + " is missing");
        if (w != "tensor") r.error(tensor + " is missing (found '" + w + "' where it should start)");
        std::string got = r.expect("a tensor name");
        if (got != name && std::any_of(params.begin(), params.end(), [&](auto& q) { return q.first == got; }))
            r.error(tensor + " is missing (found '" + got + "' in its place)");
        if (got != name) r.error("unknown tensor '" + got + "'");
        long rows = 0, cols = 0;
        std::string rw = r.expect("the rows of " + name), cw = r.expect("the columns of " + name);
        if (!parse_whole(rw, 0, 1000000000, rows) || !parse_whole(cw, 0, 1000000000, cols) || rows != m.rows ||
            cols != m.cols)
            r.error(tensor + " has shape (" + rw + ", " + cw + "); this configuration needs " + shape_text(m));
        read_values(r, tensor, m);
    }
    saved = Saved(d);  // version 1: no training kept, so --steps starts afresh with the training flags' defaults
    std::string w = r.next(), last = version == "1" ? "'end'" : "'training'";
    if (w.empty()) r.error("the file ends early (truncated): expected " + last);
    if (w == "tensor") r.error("unknown tensor '" + r.next() + "' after the last one this configuration has");
    if (version == "2" && w != "training") r.error("expected 'training' after the last tensor, found '" + w + "'");
    if (version == "2") read_training(r, model, saved);
    if (version == "2") w = r.expect("'end'");
    if (w != "end") r.error("expected 'end', found '" + w + "'");
    w = r.next();
    if (!w.empty()) r.error("unexpected '" + w + "' after 'end'");
    return model;
}
inline Transformer load_checkpoint(const std::string& path, Saved& saved) {  // --load FILE
    std::ifstream in = open_input(path, "--load " + path);
    return read_checkpoint(in, "--load " + path, saved);
}

// =============================================================================================
// 4. Terminal pictures
// =============================================================================================
// Labels for the pictures: tokens (S = START, _ = PAD), and rows or columns by number (every `every`-th).
inline std::vector<std::string> token_names(const std::vector<int>& tokens, const ModelConfig& c) {
    std::vector<std::string> names;
    for (int t : tokens) names.push_back(t == PAD ? "_" : t == start_token(c.vocab) ? "S" : std::to_string(t));
    return names;
}
inline std::string digits_text(const std::vector<int>& tokens, const ModelConfig& c) {  // "[3, 1, _]"
    return "[" + join(token_names(tokens, c), ", ") + "]";
}
inline std::vector<std::string> index_labels(int n, int every = 1) {
    std::vector<std::string> labels;
    for (int i = 0; i < n; i++) labels.push_back(i % every ? "" : std::to_string(i));
    return labels;
}
inline double max_abs(const Matrix& m, double floor = 0.0) {  // the bound of a table centred on 0
    for (double v : m.data) floor = std::max(floor, std::fabs(v));
    return floor;
}

// Ten shades from empty to full. A cell shows where its value sits between lo and hi.
constexpr char SHADES[] = " .:-=+*#%@";
inline char shade(double v, double lo, double hi) {  // '?' for a value, or a range, that is nan or inf
    double t = hi > lo ? (v / 2 - lo / 2) / (hi / 2 - lo / 2) : 0.0;  // halves: 1e308 - -1e308 would overflow
    return std::isfinite(t) ? SHADES[std::lround(std::clamp(t, 0.0, 1.0) * 9.0)] : '?';
}

// A matrix as a grid of shades, then (with numbers) the same grid as numbers.
inline void print_heatmap(const std::string& title, const Matrix& m, const std::vector<std::string>& rows,
                          const std::vector<std::string>& cols, double lo, double hi, bool numbers) {
    auto grid = [&](int width, auto print_cell) {  // the column labels, then a labelled line per row
        std::printf("%5s", "");
        for (const std::string& c : cols) std::printf("%*s", width, c.c_str());
        for (int r = 0; r < m.rows; r++) {
            std::printf("\n%5s", rows[r].c_str());
            for (int c = 0; c < m.cols; c++) print_cell(m.at(r, c));
        }
        std::printf("\n");
    };
    std::printf("%s\n", title.c_str());
    grid(3, [&](double v) { std::printf(" %c%c", shade(v, lo, hi), shade(v, lo, hi)); });
    if (numbers) grid(6, [](double v) { std::printf(" %5.2f", v); });
}

// One attention map: the weights P of one head of one layer, with the tokens on each side.
struct AttentionMap {
    std::string layer;  // e.g. "decoder.0 cross-attention"
    int head = 0;
    Matrix P;           // (queries, keys)
    std::vector<std::string> queries, keys;
    std::vector<std::string> predicts;  // for each query row, what it predicts: the next output token on the
                                        // decoder side, its own token on the encoder side (the SVG's row labels)
};

// Run one forward pass and collect every head's map from the caches it saved.
// Every attention layer of the model with its name, in the order of the forward pass.
struct AttentionLayer {
    std::string name;          // "decoder.0 cross-attention"
    MultiHeadAttention* attn;
    bool queries_from_decoder, keys_from_decoder;
};
inline std::vector<AttentionLayer> attention_layers(Transformer& model) {
    std::vector<AttentionLayer> layers;
    for (std::size_t i = 0; i < model.encoder.size(); i++) {
        std::string block = "encoder." + std::to_string(i);
        layers.push_back({block + " self-attention", &model.encoder[i].self_attn, false, false});
    }
    for (std::size_t i = 0; i < model.decoder.size(); i++) {
        std::string block = "decoder." + std::to_string(i);
        layers.push_back({block + " causal self-attention", &model.decoder[i].self_attn, true, true});
        layers.push_back({block + " cross-attention", &model.decoder[i].cross_attn, true, false});
    }
    return layers;
}
// The decoder reads START and the output so far (teacher forcing over `output`).
inline std::vector<AttentionMap> attention_maps(Transformer& model, const std::vector<int>& source,
                                                const std::vector<int>& output) {
    std::vector<int> dec_in = shifted_right(output, model.config.vocab);
    model.forward({source}, {dec_in});
    std::vector<std::string> src = token_names(source, model.config), dec = token_names(dec_in, model.config),
                             out = token_names(output, model.config);
    std::vector<AttentionMap> maps;
    for (const AttentionLayer& l : attention_layers(model))
        for (int h = 0; h < l.attn->n_heads; h++)
            maps.push_back({l.name, h, l.attn->heads[h].P, l.queries_from_decoder ? dec : src,
                            l.keys_from_decoder ? dec : src, l.queries_from_decoder ? out : src});
    return maps;
}
inline void print_attention(const std::vector<AttentionMap>& maps, bool numbers) {  // --show-attention
    std::printf("shades '%s' run from weight 0 to 1 ('?' is nan or inf); rows are queries, columns are keys; "
                "S = START, _ = PAD\n", SHADES);
    for (const AttentionMap& m : maps)  // each after a blank line
        print_heatmap("\n" + m.layer + ", head " + std::to_string(m.head), m.P, m.queries, m.keys, 0.0, 1.0, numbers);
}

// The position table the model adds to its embeddings (nothing to show for --pos none).
inline void print_positions(Transformer& model, bool numbers) {
    const Matrix* table = model.embed.position_table();
    std::printf("--- positional encoding (%s) ---\n", POSITION_NAMES[int(model.config.positions)].c_str());
    if (!table) {
        std::printf("none: with --pos none the model adds nothing, so it sees its input as a bag of tokens\n");
        return;
    }
    double bound = max_abs(*table);
    std::printf("rows: positions 0..%d, columns: the d_model = %d dimensions; shades '%s' run from %.2f to %.2f "
                "('?' is nan or inf)\n\n",
                table->rows - 1, table->cols, SHADES, -bound, bound);
    print_heatmap("position x dimension", *table, index_labels(table->rows), index_labels(table->cols), -bound, bound,
                  numbers);
}

// The loss curve squeezed to `points` values, each the log10 of the mean loss over its stretch of
// steps, clamped to [-12, 6]. A stretch holding a nan or inf loss (training diverged) gives nan.
inline std::vector<double> log_loss_points(const std::vector<double>& losses, int points) {
    std::vector<double> out(points, 0.0);
    for (int i = 0; i < points; i++) {
        std::size_t from = losses.size() * i / points, to = losses.size() * (i + 1) / points;
        double mean = 0.0;
        for (std::size_t s = from; s < to; s++) mean += losses[s] / double(to - from);
        out[i] = std::isfinite(mean) ? std::clamp(std::log10(std::max(mean, 1e-12)), -12.0, 6.0) : std::nan("");
    }
    return out;
}

// The smallest and largest finite values; false when there are none.
inline bool finite_range(const std::vector<double>& values, double& lo, double& hi) {
    bool any = false;
    for (double v : values)
        if (std::isfinite(v)) {
            lo = any ? std::min(lo, v) : v, hi = any ? std::max(hi, v) : v;
            any = true;
        }
    return any;
}

// The training loss, one point a column, on a log scale: it falls by orders of magnitude.
inline void print_loss_plot(const std::vector<double>& losses, long first_step = 1) {
    if (losses.empty()) return;
    const int height = 10, width = std::min<int>(60, int(losses.size()));
    std::vector<double> column = log_loss_points(losses, width);
    double lo = 0.0, hi = 0.0;
    if (!finite_range(column, lo, hi)) {
        std::printf("--- training loss: not a finite number (training diverged; try a smaller --lr) ---\n");
        return;
    }
    if (hi - lo < 1e-9) hi = lo + 1.0;
    std::size_t per_column = (losses.size() + width - 1) / width;
    std::printf("--- training loss (log scale; each column is the mean of %zu step%s) ---\n", per_column,
                per_column == 1 ? "" : "s");
    for (int row = 0; row < height; row++) {
        std::string points(width, ' ');
        for (int c = 0; c < width; c++)  // a nan column (diverged) stays empty
            if (std::isfinite(column[c]) && std::lround((hi - column[c]) / (hi - lo) * (height - 1)) == row)
                points[c] = '*';
        points.erase(points.find_last_not_of(' ') + 1);
        double level = hi - (hi - lo) * row / (height - 1);  // this row's value, in log10
        bool labelled = row == 0 || row == height / 2 || row == height - 1;
        std::string label = labelled ? fmt("%9.4f", std::pow(10.0, level)) : "";
        std::printf("%9s |%s\n", label.c_str(), points.c_str());
    }
    std::string first = std::to_string(first_step), last = std::to_string(first_step - 1 + long(losses.size()));
    if (losses.size() == 1) last = "";
    std::printf("%9s +%s\n%9s  %s%*s   (step)\n", "", std::string(width, '-').c_str(), "", first.c_str(),
                std::max(1, width - int(first.size())), last.c_str());
}

// =============================================================================================
// 5. Looking inside: --trace-shapes and --params
// =============================================================================================
// One forward pass, then a walk through the activations every block saved for its backward, in order.
// No line of the forward is repeated: each shape is read from a saved matrix (or the two that made it).
inline void trace_shapes(Transformer& model, const Example& e) {
    const ModelConfig& c = model.config;
    Matrix logits = model.forward({e.source}, {e.target_in});
    std::printf("--- shapes on one forward pass ---\n");
    std::printf("S = %zu, T = %zu, d_model = %d, n_heads = %d, d_k = %d, d_ff = %d, V = %d\n\n", e.source.size(),
                e.target_in.size(), c.d_model, c.n_heads, c.d_model / c.n_heads, c.d_ff, c.vocab);
    auto line = [](const std::string& what, const std::string& legend, const std::string& numbers) {
        std::printf("  %-50s %-30s %s\n", what.c_str(), legend.c_str(), numbers.c_str());
    };
    auto product = [](const Linear& l) { return shape_text(l.x.rows, l.W.value.cols); };  // x W, not saved
    auto weights = [](const Linear& l) { return shape_text(l.W.value) + ", " + shape_text(l.b.value); };
    bool pre = c.norm == Norm::pre;
    const std::string x_in = pre ? "LN(x)" : "x", y_in = pre ? "LN(y)" : "y";  // what a sublayer reads
    auto attention = [&](const MultiHeadAttention& m, const std::string& Q, const std::string& K,
                         const std::string& q_in, const std::string& kv) {  // what the queries, keys, values read
        const AttentionCache& h = m.heads[0];
        line("queries read " + q_in, "(" + Q + ", d_model)", shape_text(m.W_q.x));
        line("keys and values read " + kv, "(" + K + ", d_model)", shape_text(m.W_k.x));
        line("W_q, W_k, W_v (each)", "(d_model, d_model)", shape_text(m.W_q.W.value));
        line("Q = " + q_in + " W_q", "(" + Q + ", d_model)", product(m.W_q));
        line("K = " + kv + " W_k, V = " + kv + " W_v", "(" + K + ", d_model)", product(m.W_k));
        line("one head's Q_h (columns h*d_k ..)", "(" + Q + ", d_k)", shape_text(h.Q));
        line("one head's K_h, V_h", "(" + K + ", d_k)", shape_text(h.K));
        line("P_h = softmax(masked(Q_h K_h^T / sqrt(d_k)))", "(" + Q + ", " + K + ")", shape_text(h.P));
        line("P_h V_h", "(" + Q + ", d_k)", shape_text(h.P.rows, h.V.cols));
        line("n_heads heads joined side by side", "(" + Q + ", d_model)", shape_text(m.W_o.x));
        line("joined W_o, added to the residual", "(" + Q + ", d_model)", product(m.W_o));
    };
    auto feed_forward = [&](const FeedForward& f, const std::string& N, const std::string& in) {
        line("reads " + in, "(" + N + ", d_model)", shape_text(f.layer1.x));
        line("W_1, b_1", "(d_model, d_ff), (1, d_ff)", weights(f.layer1));
        line("hidden = " + in + " W_1 + b_1", "(" + N + ", d_ff)", shape_text(f.hidden));
        line(std::string(c.activation == Activation::relu ? "relu" : "gelu") + "(hidden)", "(" + N + ", d_ff)",
             shape_text(f.layer2.x));
        line("W_2, b_2", "(d_ff, d_model), (1, d_model)", weights(f.layer2));
        line("out = act(hidden) W_2 + b_2, added to the residual", "(" + N + ", d_model)", product(f.layer2));
    };
    std::printf("  %-50s %-30s %s\n", "tensor", "legend", "this run");
    std::printf("encoder input\n");
    line("source tokens", "(S)", fmt("(%zu)", e.source.size()));
    line("embedding table", "(V, d_model)", shape_text(model.embed.table.value));
    if (const Matrix* table = model.embed.position_table())
        line("position table", "(max_len, d_model)", shape_text(*table));
    line("x = table[source] * scale + positions", "(S, d_model)", shape_text(model.encoder[0].self_attn.W_k.x));
    for (std::size_t i = 0; i < model.encoder.size(); i++) {
        std::printf("encoder.%zu self-attention (padding mask (S, S))\n", i);
        attention(model.encoder[i].self_attn, "S", "S", x_in, x_in);
        std::printf("encoder.%zu feed-forward\n", i);
        feed_forward(model.encoder[i].ffn, "S", x_in);
    }
    std::printf("decoder input\n");
    line("memory = the last encoder block's output", "(S, d_model)", shape_text(model.decoder[0].cross_attn.W_k.x));
    line("decoder input tokens: START, target[0 .. T-2]", "(T)", fmt("(%zu)", e.target_in.size()));
    line("y = table[decoder input] * scale + positions", "(T, d_model)", shape_text(model.decoder[0].self_attn.W_k.x));
    for (std::size_t i = 0; i < model.decoder.size(); i++) {
        std::printf("decoder.%zu causal self-attention (causal mask (T, T))\n", i);
        attention(model.decoder[i].self_attn, "T", "T", y_in, y_in);
        std::printf("decoder.%zu cross-attention (queries from the decoder, keys and values from the memory)\n", i);
        attention(model.decoder[i].cross_attn, "T", "S", y_in, "memory");
        std::printf("decoder.%zu feed-forward\n", i);
        feed_forward(model.decoder[i].ffn, "T", y_in);
    }
    std::printf("output\n");
    line("final LayerNorm", "(T, d_model)", shape_text(model.final_norm.x_hat));
    line("W_out, b_out", "(d_model, V), (1, V)", weights(model.out));
    line("logits = LN(y) W_out + b_out", "(T, V)", shape_text(logits));
}

// Parameter counts by block: "encoder.0.self_attn.W_q" counts for encoder.0, and inside it for self_attn.
inline void print_params(Transformer& model) {
    const ModelConfig& c = model.config;
    struct Group { std::string block; long total = 0; std::vector<std::pair<std::string, long>> parts; };
    std::vector<Group> groups;
    long total = 0;
    for (auto& [name, p] : model.parameters()) {
        bool layered = name.rfind("encoder.", 0) == 0 || name.rfind("decoder.", 0) == 0;
        std::size_t end = name.find('.', layered ? name.find('.') + 1 : 0);
        std::string block = name.substr(0, end), rest = name.substr(end + 1);
        std::string part = !layered ? rest : rest.rfind("norm", 0) == 0 ? "LayerNorms" : rest.substr(0, rest.find('.'));
        long n = long(p->value.data.size());
        if (groups.empty() || groups.back().block != block) groups.push_back({block, 0, {}});
        Group& g = groups.back();
        g.total += n, total += n;
        auto it = std::find_if(g.parts.begin(), g.parts.end(), [&](auto& q) { return q.first == part; });
        if (it == g.parts.end()) g.parts.push_back({part, n});
        else it->second += n;
    }
    std::printf("--- parameters (d_model %d, n_heads %d, d_ff %d, V %d, layers %d+%d) ---\n", c.d_model, c.n_heads,
                c.d_ff, c.vocab, c.enc_layers, c.dec_layers);
    for (const Group& g : groups) {
        std::string parts;
        for (auto& [part, n] : g.parts) parts += (parts.empty() ? "" : ", ") + part + " " + std::to_string(n);
        std::printf("  %-12s %9ld   %s\n", g.block.c_str(), g.total, parts.c_str());
    }
    std::printf("  %-12s %9ld\n", "total", total);
}

// --inspect: what a trained model relies on, measured on the held-out set.
// (a) Exact-match with one head switched off at a time (its output left out of the join): a head the
//     model needs costs accuracy when it is silenced; a head it does not need costs nothing.
// (b) The pointer check. Sorting as a program (the RASP view) reads: at output step t, find the
//     source position holding the t-th smallest digit and copy it. If a cross-attention head does
//     that, its strongest weight at each step falls on a source position that holds the digit being
//     emitted. The share of steps (emitting a digit, not PAD) where it does, per layer and head.
inline void inspect(Transformer& model, const std::vector<Example>& held_out) {
    std::printf("\n--- inspect: held-out exact-match with one head switched off (none off: %.1f%%) ---\n",
                100 * evaluate(model, held_out).exact);
    for (const AttentionLayer& l : attention_layers(model))
        for (int h = 0; h < l.attn->n_heads; h++) {
            l.attn->silenced = h;
            double exact = evaluate(model, held_out).exact;
            l.attn->silenced = -1;
            std::printf("  %-36s head %d off: %5.1f%%\n", l.name.c_str(), h, 100 * exact);
        }
    const int n_heads = model.config.n_heads, layers = int(model.decoder.size());
    std::vector<long> hits(std::size_t(layers) * n_heads, 0);
    long steps = 0;
    for (std::size_t first = 0; first < held_out.size(); first += 100) {
        Transformer::Batch sources;
        for (std::size_t i = first; i < std::min(first + 100, held_out.size()); i++)
            sources.push_back(held_out[i].source);
        greedy_decode(model, sources, int(held_out[first].target.size()), [&](int, const std::vector<int>& chosen) {
            for (std::size_t e = 0; e < chosen.size(); e++) {
                if (chosen[e] == PAD || chosen[e] == start_token(model.config.vocab)) continue;
                steps++;
                for (int l = 0; l < layers; l++)
                    for (int h = 0; h < n_heads; h++) {
                        const Matrix& P = model.decoder[l].cross_attn.heads[e * n_heads + h].P;  // (1, S)
                        int strongest = int(std::max_element(P.data.begin(), P.data.end()) - P.data.begin());
                        hits[std::size_t(l) * n_heads + h] += sources[e][strongest] == chosen[e];
                    }
            }
        });
    }
    std::printf("\n--- inspect: the pointer check, over %ld decoding steps that emit a digit ---\n"
                "share of steps whose strongest cross-attention falls on a source position holding that digit\n",
                steps);
    for (int l = 0; l < layers; l++)
        for (int h = 0; h < n_heads; h++)
            std::printf("  decoder.%d cross-attention head %d: %5.1f%%\n", l, h,
                        steps ? 100.0 * hits[std::size_t(l) * n_heads + h] / steps : 0.0);
}

// --test-len N: held-out exact-match for every input length from 1 to N, on inputs training never drew.
// A length training drew from (--min-len to --seq-len) uses the run's own held-out sequences of that
// length; any other length is unseen whatever its digits, so 200 are drawn fresh (fewer where fewer
// exist). Shorter inputs are padded to --seq-len, as in training. Lengths past --seq-len use positions
// training never reached: sinusoidal ones are defined there, learned ones are rows of the table that
// training never moved (still their random start), and --pos none has no positions to leave behind.
inline void length_report(Transformer& model, const Dataset& data, int test_len) {
    const DataConfig& trained = data.config;
    std::printf("\n--- held-out exact-match by input length (trained on lengths %d to %d) ---\n", trained.min_len,
                trained.seq_len);
    for (int len = 1; len <= test_len; len++) {
        std::vector<Example> tests;
        if (len >= trained.min_len && len <= trained.seq_len) {
            for (const Example& e : data.held_out)
                if (std::count(e.source.begin(), e.source.end(), PAD) == trained.seq_len - len) tests.push_back(e);
        } else {
            DataConfig d = trained;
            d.seq_len = d.min_len = len;
            for (const Example& e : Dataset(d, {}, 200, HELD_OUT_SEED + uint64_t(len)).held_out)
                tests.push_back(len < trained.seq_len ? make_example(e.source, trained) : e);
        }
        Accuracy a = evaluate(model, tests);
        std::printf("  length %2d: %5.1f%% (%d/%d)%s\n", len, 100 * a.exact, a.exact_count, a.total,
                    len > trained.seq_len ? "   longer than any training input"
                                          : len < trained.min_len ? "   shorter than any training input" : "");
    }
}

// =============================================================================================
// 6. SVG pictures
// =============================================================================================
// SVG is text: a <svg> element holding rectangles, lines and text at pixel coordinates.
inline std::string svg_escape(const std::string& s) {  // text as SVG shows it: <, >, & and " escaped
    std::string out;
    for (char ch : s)
        out += ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&quot;" : std::string{ch};
    return out;
}
inline std::string svg_rect(double x, double y, double w, double h, const std::string& fill,
                            const std::string& tip = "") {
    std::string rect =
        fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"", x, y, w, h, fill.c_str());
    return tip.empty() ? rect + "/>\n" : rect + "><title>" + svg_escape(tip) + "</title></rect>\n";  // tip: on hover
}
inline std::string svg_text(double x, double y, const std::string& text, double size = 12,
                            const std::string& anchor = "middle", const std::string& fill = "#222") {
    return fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" text-anchor=\"%s\" fill=\"%s\">", x, y, size,
               anchor.c_str(), fill.c_str()) + svg_escape(text) + "</text>\n";
}
inline std::string svg_line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1) {
    return fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"/>\n", x1, y1,
               x2, y2, stroke.c_str(), width);
}
inline std::string svg_polyline(const std::string& points, const std::string& style) {  // points: "x,y x,y ..."
    return "<polyline fill=\"none\" " + style + " points=\"" + points + "\"/>\n";
}
inline std::string svg_document(double width, double height, const std::string& body) {  // a whole picture
    return fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\">\n", width, height, width, height) +
           svg_rect(0, 0, width, height, "white") + body + "</svg>\n";
}

// t in [0, 1]: white to dark blue. t in [-1, 1] (diverging): blue, white at 0, red. Each channel
// runs in a straight line from white (255) at t = 0 to the full colour at |t| = 1.
inline std::string color_for(double t, bool diverging) {
    if (!std::isfinite(t)) return "rgb(255,0,255)";  // nan or inf: magenta, a colour no finite value gets
    t = std::clamp(t, diverging ? -1.0 : 0.0, 1.0);
    const double dark_blue[3] = {8, 48, 107}, red[3] = {178, 24, 43}, blue[3] = {33, 102, 172};
    const double* full = !diverging ? dark_blue : t >= 0 ? red : blue;
    auto channel = [&](int k) { return int(std::lround(255 - std::fabs(t) * (255 - full[k]))); };
    return fmt("rgb(%d,%d,%d)", channel(0), channel(1), channel(2));
}

// The key to a heatmap's colours: a bar h pixels tall at (x, y), from `bound` (or 1) at the top down
// to 0 (or -bound when diverging), its ends and middle labelled.
inline std::string svg_colour_bar(double x, double y, double h, double bound, bool diverging) {
    std::string s;
    const int bands = 40;
    for (int i = 0; i < bands; i++) {  // band i from the top, coloured by the value at its middle
        double t = 1.0 - (i + 0.5) / bands * (diverging ? 2.0 : 1.0);
        s += svg_rect(x, y + h * i / bands, 14, h / bands + 0.5, color_for(t, diverging));
    }
    for (int k = 0; k <= 2; k++) {
        double t = 1.0 - k / 2.0 * (diverging ? 2.0 : 1.0);
        s += svg_line(x + 14, y + h * k / 2, x + 18, y + h * k / 2, "#444") +
             svg_text(x + 21, y + h * k / 2 + 4, fmt("%.2f", t * bound), 11, "start");
    }
    return s;
}

// One heatmap with its title and labels, top-left at (x, y), coloured by value / bound; every cell tells
// its value on hover. The cells shrink with the map, so that it is at most `side` pixels across (4 to
// `largest` a cell), and small cells get a label every few rows or columns, so that labels never overlap.
struct SvgHeatmap {
    double cell, label = 34, row_label = 34, title = 20;  // label: the column labels' height
    SvgHeatmap(int rows, int cols, double side, double largest = 30)
        : cell(std::clamp(std::floor(side / std::max(rows, cols)), 4.0, largest)) {}
    int every() const { return int(std::ceil(13.0 / cell)); }  // labels at least 13 pixels apart
    double width(const Matrix& m) const { return row_label + m.cols * cell; }
    double height(const Matrix& m) const { return title + label + m.rows * cell; }
    std::string draw(double x, double y, const std::string& name, const Matrix& m, const std::vector<std::string>& rows,
                     const std::vector<std::string>& cols, double bound, bool diverging, bool numbers) const {
        std::string s = svg_text(x, y + 14, name, 13, "start");
        double top = y + title + label, left = x + row_label, font = std::min(11.0, cell * every() - 2);
        for (int c = 0; c < m.cols; c += every()) s += svg_text(left + (c + 0.5) * cell, top - 8, cols[c], font);
        for (int r = 0; r < m.rows; r += every())
            s += svg_text(left - 6, top + (r + 0.5) * cell + 4, rows[r], font, "end");
        for (int r = 0; r < m.rows; r++)
            for (int c = 0; c < m.cols; c++) {
                double t = m.at(r, c) / bound;
                s += svg_rect(left + c * cell, top + r * cell, cell, cell, color_for(t, diverging),
                              fmt("%s, %s: %.4f", rows[r].c_str(), cols[c].c_str(), m.at(r, c)));
                if (numbers && cell >= 26)
                    s += svg_text(left + (c + 0.5) * cell, top + (r + 0.5) * cell + 3, fmt("%.2f", m.at(r, c)), 9,
                                  "middle", std::fabs(t) > 0.55 ? "white" : "#222");
            }
        return s;
    }
};

// Every attention map: a heading for each layer, then its heads side by side (in even lines of at
// most 5, so that the picture stays about 1,100 pixels wide), one colour bar for all. A decoder row is
// labelled by the token it predicts. At most 48 maps are drawn (the large variant of make check-report
// has 48), the first heads of every layer, so that no size the flags allow makes a picture too big to
// open; the subtitle says when heads are left out.
constexpr int MOST_MAPS = 48;
inline std::string attention_svg(const std::vector<AttentionMap>& maps, int n_heads, const std::string& caption) {
    const Matrix& first = maps.front().P;
    int layers = int(maps.size()) / n_heads, heads = std::clamp(MOST_MAPS / layers, 1, n_heads);  // heads drawn
    SvgHeatmap hm(first.rows, first.cols, std::clamp(1000.0 / heads - 74, 120.0, 320.0));
    double gap = 40, panel_w = std::max(hm.width(first) + gap, 120.0), panel_h = hm.height(first) + gap, heading = 26;
    int lines = (heads + 4) / 5, per_line = (heads + lines - 1) / lines;  // 8 heads: 2 lines of 4
    double layer_h = heading + lines * panel_h;
    std::string left_out = heads < n_heads ? fmt("; heads %d to %d of each layer are left out here (--show-attention "
                                                 "prints them all)", heads, n_heads - 1) : "";
    std::string body = svg_text(20, 24, caption, 15, "start") +
                       svg_text(20, 44, "rows: queries (a decoder row is labelled by the token it predicts), columns: "
                                        "keys; darker blue = more weight; S = START, _ = PAD" + left_out, 12, "start",
                                "#555");
    for (std::size_t i = 0; i < maps.size(); i++) {
        const AttentionMap& m = maps[i];
        double top = 64 + (int(i) / n_heads) * layer_h;
        if (m.head == 0) body += svg_text(20, top + 16, m.layer, 14, "start");
        if (m.head >= heads) continue;
        body += hm.draw(20 + (m.head % per_line) * panel_w, top + heading + (m.head / per_line) * panel_h,
                        "head " + std::to_string(m.head), m.P, m.predicts, m.keys, 1.0, false, true);
    }
    double right = 20 + per_line * panel_w;
    body += svg_text(right, 70, "weight", 11, "start") + svg_colour_bar(right, 80, 160, 1.0, false);
    return svg_document(std::max(right + 70, 760.0), 74 + layers * layer_h, body);
}

// The position table, blue below 0 and red above.
inline std::string positions_svg(const Matrix& P, const std::string& kind) {
    SvgHeatmap hm(P.rows, P.cols, 1000, 22);
    double bound = max_abs(P, 1e-12);
    std::string body =
        svg_text(20, 24, "Positional encoding (" + kind + "): rows = positions, columns = dimensions", 15, "start") +
        svg_text(20, 44, fmt("blue = %.2f, white = 0, red = +%.2f", -bound, bound), 12, "start", "#555") +
        hm.draw(20, 56, "position x dimension", P, index_labels(P.rows), index_labels(P.cols), bound, true, false);
    double right = 40 + hm.width(P);
    body += svg_text(right, 86, "value", 11, "start") + svg_colour_bar(right, 96, 160, bound, true);
    return svg_document(std::max(right + 70, 660.0), 80 + std::max(hm.height(P), 200.0), body);
}

// What a training run records, for training.svg and the report.
struct EvalPoint {
    long step;
    double loss, exact, token;  // mean training loss since the last evaluation; held-out shares
    double held_out_loss;       // teacher-forced, on the held-out set
};
struct History {
    std::string header, final_line;  // the run's first lines and its final: line, as printed
    std::vector<std::pair<std::string, std::string>> predictions;  // the watched inputs: a title, the lines
    long first_step = 1;           // above 1 when training went on from a checkpoint
    std::vector<double> losses;    // every step's mini-batch loss, from first_step on
    std::vector<EvalPoint> evals;  // every --eval-every steps, and the last step
    // With --report: the size of each block's gradient at every step (gradient_norms[step - first_step][block]).
    std::vector<std::string> blocks;  // "embed", "encoder.0", ..., "final_norm", "out"
    std::vector<std::vector<double>> gradient_norms;
    std::vector<std::pair<std::size_t, const Param*>> tensors;  // (block, parameter) for each one, found once
};

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

// Round steps to mark on an axis from first to last: multiples of 1, 2 or 5 times a power of ten,
// about 5 of them.
inline std::vector<long> step_ticks(long first, long last) {
    long unit = 1;  // 1, 2, 5, 10, 20, 50, ... until at most 5 units fit between first and last
    for (int k = 1; (last - first) / unit > 5; k++)
        unit = long(std::pow(10, k / 3)) * (k % 3 == 0 ? 1 : k % 3 == 1 ? 2 : 5);
    std::vector<long> ticks;
    for (long t = (first + unit - 1) / unit * unit; t <= last; t += unit) ticks.push_back(t);
    return ticks;
}

// A chart: a plot area w x h pixels at (left, top), steps first..last across, lo..hi up. On a log
// chart lo and hi are decades (lo = -3 is 0.001) and y() is given log10 of a value (log_points takes
// it); otherwise the values are shares, drawn as percentages. frame() draws the axes, grid, ticks, labels.
struct Chart {
    double left, top, w, h;
    long first, last;
    double lo, hi;
    bool log_scale;
    double x(double step) const {
        return left + w * (last > first ? (step - double(first)) / double(last - first) : 0.5);
    }
    double y(double v) const { return top + h * (hi - v) / (hi - lo); }  // v: a share, or log10 of the value
    std::string grid_line(double v, const std::string& label) const {
        return svg_line(left, y(v), left + w, y(v), "#ddd") + svg_text(left - 6, y(v) + 4, label, 11, "end");
    }
    std::string frame(const std::string& title, const std::string& y_label) const {
        std::string s = svg_text(left + w / 2, top - 12, title, 12);
        if (log_scale)
            for (double d = lo; d <= hi; d++) s += grid_line(d, fmt("%g", std::pow(10.0, d)));
        else
            for (int p = 0; p <= 100; p += 25) s += grid_line(p / 100.0, fmt("%d%%", p));
        for (long t : step_ticks(first, last))
            s += svg_line(x(double(t)), top + h, x(double(t)), top + h + 5, "#444") +
                 svg_text(x(double(t)), top + h + 18, std::to_string(t), 11);
        return s + svg_line(left, top, left, top + h, "#444") + svg_line(left, top + h, left + w, top + h, "#444") +
               svg_text(left + w / 2, top + h + 36, "step", 12) +
               fmt("<text transform=\"rotate(-90 %.1f %.1f)\" x=\"%.1f\" y=\"%.1f\" font-size=\"12\" "
                   "text-anchor=\"middle\" fill=\"#222\">", left - 48, top + h / 2, left - 48, top + h / 2) +
               svg_escape(y_label) + "</text>\n";
    }
    // A line through (step, value) points; a point whose value is not finite is left out.
    std::string series(const std::vector<std::pair<double, double>>& points, const std::string& style,
                       bool dots = false) const {
        std::string line, marks;
        for (auto [step, v] : points)
            if (std::isfinite(v)) {
                line += fmt("%.1f,%.1f ", x(step), y(v));
                if (dots) marks += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#555\"/>\n", x(step), y(v));
            }
        return svg_polyline(line, style) + marks;
    }
};

// A long series as at most `points` (step, log10 value) pairs: each the mean over its stretch of steps.
inline std::vector<std::pair<double, double>> log_points(const std::vector<double>& values, long first_step,
                                                        int points) {
    std::vector<double> ys = log_loss_points(values, points);
    std::vector<std::pair<double, double>> out;
    for (int i = 0; i < points; i++) {  // at the middle step of stretch i
        std::size_t from = values.size() * i / points, to = values.size() * (i + 1) / points;
        out.push_back({double(from + to - 1) / 2.0 + double(first_step), ys[i]});
    }
    return out;
}
// The decades a log chart needs to hold every finite value of these series.
inline void decades_of(const std::vector<std::pair<double, double>>& points, double& lo, double& hi, bool& any) {
    for (auto [step, v] : points)
        if (std::isfinite(v)) {
            lo = any ? std::min(lo, std::floor(v)) : std::floor(v);
            hi = any ? std::max(hi, std::ceil(v)) : std::ceil(v);
            any = true;
        }
}

// Two charts side by side: the training and held-out loss (log scale), and the held-out accuracy.
inline std::string training_svg(const History& h) {
    long last = h.first_step + long(h.losses.size()) - 1;
    std::vector<std::pair<double, double>> held_out, exact, token,
        train = log_points(h.losses, h.first_step, std::min<int>(400, int(h.losses.size())));
    for (const EvalPoint& e : h.evals) {
        held_out.push_back({double(e.step), std::log10(std::max(e.held_out_loss, 1e-12))});
        exact.push_back({double(e.step), e.exact});
        token.push_back({double(e.step), e.token});
    }
    double lo = 0, hi = 0;
    bool any = false;
    decades_of(train, lo, hi, any);
    decades_of(held_out, lo, hi, any);
    if (hi <= lo) hi = lo + 1;
    Chart loss{80, 60, 400, 240, h.first_step, last, lo, hi, true};
    Chart acc{600, 60, 400, 240, h.first_step, last, 0, 1, false};
    std::string body = svg_text(20, 24, "Training: the loss (left, log scale) and the held-out accuracy (right)", 15,
                                "start");
    if (!any) body += svg_text(loss.left + loss.w / 2, loss.top + loss.h / 2, "loss not finite (diverged)", 12);
    body += loss.frame("training loss (red), held-out loss (grey, dots)", "cross-entropy") +
            loss.series(train, "stroke=\"rgb(178,24,43)\" stroke-width=\"1.5\"") +
            loss.series(held_out, "stroke=\"#555\" stroke-width=\"1.5\" stroke-dasharray=\"4,3\"", true) +
            acc.frame("held-out: exact-match (solid), token-accuracy (dashed)", "held-out accuracy") +
            acc.series(exact, "stroke=\"rgb(8,48,107)\" stroke-width=\"2\"", true) +
            acc.series(token, "stroke=\"rgb(107,174,214)\" stroke-width=\"2\" stroke-dasharray=\"5,3\"");
    return svg_document(1030, 360, body);
}

// The gradient flow: each block's gradient size over the steps, one line a block, on a log scale.
inline std::string gradient_svg(const History& h) {
    const char* colours[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"};
    long last = h.first_step + long(h.gradient_norms.size()) - 1;
    int points = std::min<int>(300, int(h.gradient_norms.size()));
    std::vector<std::vector<std::pair<double, double>>> lines;
    double lo = 0, hi = 0;
    bool any = false;
    for (std::size_t b = 0; b < h.blocks.size(); b++) {
        std::vector<double> norms;
        for (const std::vector<double>& step : h.gradient_norms) norms.push_back(step[b]);
        lines.push_back(log_points(norms, h.first_step, points));
        decades_of(lines.back(), lo, hi, any);
    }
    if (hi <= lo) hi = lo + 1;
    Chart chart{80, 60, 560, 280, h.first_step, last, lo, hi, true};
    std::string body = svg_text(20, 24, "Gradient flow: the size of each block's gradient, step by step (log scale)",
                                15, "start") +
                       chart.frame("|gradient| of each block (mean over each stretch of steps)", "gradient norm");
    for (std::size_t b = 0; b < lines.size(); b++) {
        std::string colour = colours[b % 8];
        std::string dashes = b < 8 ? "" : " stroke-dasharray=\"4,2\"";  // past 8 blocks a colour comes again, dashed
        body += chart.series(lines[b], "stroke=\"" + colour + "\" stroke-width=\"1.5\"" + dashes) +
                fmt("<line x1=\"670\" y1=\"%.1f\" x2=\"690\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"%s/>\n",
                    70 + 18.0 * b, 70 + 18.0 * b, colour.c_str(), dashes.c_str()) +
                svg_text(696, 74 + 18.0 * b, h.blocks[b], 12, "start");
    }
    return svg_document(820, std::max(400.0, 90 + 18.0 * lines.size()), body);
}
inline void write_svg(const std::string& dir, const std::string& name, const std::string& svg) {  // DIR/name
    std::string path = (std::filesystem::path(dir) / name).string();
    write_atomically(path, "--svg", [&](FILE* f) { std::fputs(svg.c_str(), f); });
    std::printf("wrote %s\n", path.c_str());
}

// Every picture that applies: one example's attention, the position table, the training curves.
inline void write_pictures(const std::string& dir, Transformer& model, const std::vector<int>& source,
                           const History* history) {
    const ModelConfig& c = model.config;
    std::vector<int> output = greedy_decode(model, {source}, int(source.size()))[0];
    std::string caption = "Attention maps: input " + digits_text(source, c) + ", output " + digits_text(output, c);
    write_svg(dir, "attention.svg",
              attention_svg(attention_maps(model, source, output), c.n_heads, caption));
    if (const Matrix* table = model.embed.position_table())
        write_svg(dir, "pe.svg", positions_svg(*table, POSITION_NAMES[int(c.positions)]));
    if (history && !history->losses.empty()) write_svg(dir, "training.svg", training_svg(*history));
}

// ---------------------------------------------------------------------------------------------
// --report FILE: one HTML page of the run, whole in itself (inline SVG, CSS and a few lines of
// JavaScript; nothing fetched), that any browser opens from the disk. It is well-formed XML too, so
// a strict parser accepts it (make check-report checks that, and renders it in a headless browser).
// ---------------------------------------------------------------------------------------------
// The step-by-step replay of greedy decoding: at step t the decoder has read START and the first t
// output tokens; each cross-attention head's row t says where in the source it looked, and the
// softmax of the logits' row t gives the next token's probabilities. One teacher-forced pass over
// the output gives every step at once, the same bits as the decoding steps (a test checks that). The page
// numbers the steps from 1: row t is step t + 1.
inline std::string replay_html(Transformer& model, const std::vector<int>& source, const std::vector<int>& output) {
    const ModelConfig& c = model.config;
    std::vector<int> dec_in = shifted_right(output, c.vocab);
    Matrix probs = softmax_rows(model.forward({source}, {dec_in}));  // (T, V)
    std::vector<AttentionLayer> cross;
    for (const AttentionLayer& l : attention_layers(model))
        if (l.queries_from_decoder && !l.keys_from_decoder) cross.push_back(l);
    std::vector<std::string> src = token_names(source, c), read = token_names(dec_in, c), head_labels;
    int shown = std::clamp(16 / int(cross.size()), 1, c.n_heads);  // at most 16 rows: the first heads of each layer
    std::string which = shown < c.n_heads ? fmt(" (heads 0 to %d of %d in each layer)", shown - 1, c.n_heads) : "";
    for (const AttentionLayer& l : cross)
        for (int h = 0; h < shown; h++)  // "decoder.0 h1"
            head_labels.push_back(fmt("%s h%d", l.name.substr(0, l.name.find(' ')).c_str(), h));
    std::string html;
    for (int t = 0; t < int(output.size()); t++) {
        // (dec_layers x shown, S): row t of the P of each head shown, from each cross-attention layer
        Matrix cross_rows(int(head_labels.size()), int(source.size()));
        for (std::size_t l = 0, r = 0; l < cross.size(); l++)
            for (int h = 0; h < shown; h++, r++)
                for (int s = 0; s < cross_rows.cols; s++) cross_rows.at(int(r), s) = cross[l].attn->heads[h].P.at(t, s);
        std::vector<int> order(c.vocab);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                          [&](int a, int b) { return probs.at(t, a) > probs.at(t, b); });
        std::vector<std::string> so_far(read.begin(), read.begin() + t + 1);
        // Cells of 13 pixels at least, so that every head's row has its label.
        SvgHeatmap hm(cross_rows.rows, cross_rows.cols, std::max(320.0, 13.0 * cross_rows.cols), 26);
        hm.row_label = 90;
        hm.title = 0;
        std::string top3;
        for (int k = 0; k < 3; k++)
            top3 += fmt("<tr><td>%s</td><td><span class=\"bar\" style=\"width:%.0fpx\"></span> %.4f</td></tr>",
                        svg_escape(token_names({order[k]}, c)[0]).c_str(), 120 * probs.at(t, order[k]),
                        probs.at(t, order[k]));
        html += fmt("<div class=\"step\"><h3>step %d: the decoder has read %s and writes %s</h3>\n<div class=\"row\">"
                    "<div>cross-attention over the source, one row a head%s:<br/>", t + 1,
                    svg_escape(join(so_far, " ")).c_str(), svg_escape(token_names({output[t]}, c)[0]).c_str(),
                    which.c_str()) +
                svg_document(hm.width(cross_rows) + 20, hm.height(cross_rows) + 10,
                             hm.draw(0, 0, "", cross_rows, head_labels, src, 1.0, false, true)) +
                "</div><div>the three likeliest next tokens:<table class=\"top\">"
                "<tr><th>token</th><th>probability</th></tr>" +
                top3 + "</table></div></div></div>\n";
    }
    return html;
}

inline std::string html_escape(const std::string& s) { return svg_escape(s); }  // the same four characters

// The page: the run as `h` recorded it (no curves when nothing was trained), the attention and the decoding of
// `source`, the position table, and the held-out sequences the model gets wrong.
inline std::string report_html(Transformer& model, const History& h, const std::vector<int>& source,
                               const std::vector<Example>& held_out) {
    const ModelConfig& c = model.config;
    std::vector<int> output = greedy_decode(model, {source}, int(source.size()))[0];
    std::string page = "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
                       "<meta charset=\"utf-8\"/>\n<title>sorter: a report of one run</title>\n<style>/*<![CDATA[*/\n"
                       "body { font-family: sans-serif; margin: 2em auto; max-width: 1250px; padding: 0 1em; "
                       "color: #222; }\n"
                       "pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }\n"
                       "section { margin-bottom: 2.5em; } svg { max-width: 100%; height: auto; }\n"
                       ".row { display: flex; flex-wrap: wrap; gap: 2em; align-items: flex-start; }\n"
                       ".bar { display: inline-block; height: 0.8em; background: rgb(8,48,107); }\n"
                       "table.top td { padding: 0.1em 0.6em; }\n"
                       "table.mistakes td { padding: 0.1em 1em; font-family: monospace; }\n"
                       "nav a { margin-right: 1em; } .controls button { margin-right: 0.5em; }\n"
                       "/*]]>*/</style>\n</head>\n<body>\n<h1>sorter: a report of one run</h1>\n"
                       "<nav><a href=\"#run\">the run</a><a href=\"#curves\">loss and accuracy</a>"
                       "<a href=\"#gradients\">gradient flow</a><a href=\"#attention\">attention</a>"
                       "<a href=\"#replay\">decoding step by step</a><a href=\"#positions\">positions</a>"
                       "<a href=\"#mistakes\">mistakes</a></nav>\n";
    page += "<section id=\"run\"><h2>The run</h2>\n<pre>" + html_escape(h.header) + html_escape(h.final_line) +
            "</pre>\n";
    for (const auto& [title, text] : h.predictions)
        page += "<h3>" + html_escape(title) + "</h3>\n<pre>" + html_escape(text) + "</pre>\n";
    page += "</section>\n";
    if (!h.losses.empty())
        page += "<section id=\"curves\"><h2>Loss and accuracy</h2>\n" + training_svg(h) + "</section>\n"
                "<section id=\"gradients\"><h2>Gradient flow: the backward pass made visible</h2>\n<p>After every "
                "step's backward pass, the size of each block's gradient (the square root of the sum of its squared "
                "entries). A line falling towards 0 would be a vanishing gradient; one shooting up, an exploding "
                "one.</p>\n" + gradient_svg(h) + "</section>\n";
    else
        page += "<section id=\"curves\"><h2>Loss, accuracy and gradient flow</h2><p>Not trained in this run "
                "(a model loaded with --load): no curves.</p></section>\n";
    std::string example = "input " + digits_text(source, c) + ", output " + digits_text(output, c);
    page += "<section id=\"attention\"><h2>Attention</h2>\n<p>Every head of every layer for " + html_escape(example) +
            ". Hold the pointer on a cell to read its weight.</p>\n" +
            attention_svg(attention_maps(model, source, output), c.n_heads, "Attention maps: " + example) +
            "</section>\n";
    page += "<section id=\"replay\"><h2>Decoding, step by step</h2>\n<p class=\"controls\"><button id=\"previous\" "
            "type=\"button\">previous</button><button id=\"next\" type=\"button\">next</button><button id=\"all\" "
            "type=\"button\">all steps</button> <span id=\"shown\"></span></p>\n" + replay_html(model, source, output) +
            "</section>\n";
    page += "<section id=\"positions\"><h2>The positional encoding</h2>\n";
    if (const Matrix* table = model.embed.position_table())
        page += positions_svg(*table, POSITION_NAMES[int(c.positions)]);
    else
        page += "<p>--pos none: the model adds no positions.</p>\n";
    page += "</section>\n<section id=\"mistakes\"><h2>Held-out mistakes</h2>\n";
    std::vector<std::string> wrong;
    long wrong_count = 0;
    std::vector<std::vector<int>> guesses = greedy_decode_all(model, held_out);
    for (std::size_t k = 0; k < held_out.size(); k++) {
        const Example& e = held_out[k];
        if (guesses[k] == e.target) continue;
        if (++wrong_count <= 20)
            wrong.push_back("<tr><td>" + html_escape(digits_text(e.source, c)) + "</td><td>" +
                            html_escape(digits_text(guesses[k], c)) + "</td><td>" +
                            html_escape(digits_text(e.target, c)) + "</td></tr>\n");
    }
    page += fmt("<p>%ld of the %zu held-out sequences are wrong%s.</p>\n", wrong_count, held_out.size(),
                wrong_count > 20 ? "; the first 20" : "");
    if (!wrong.empty())
        page += "<table class=\"mistakes\"><tr><th>input</th><th>prediction</th><th>truth</th></tr>\n" +
                join(wrong, "") + "</table>\n";
    page += "</section>\n<script>//<![CDATA[\n"
            "(function () {  // the replay: one step at a time, or all of them\n"
            "  var steps = document.querySelectorAll('#replay .step'), at = 0, all = false;\n"
            "  function show() {\n"
            "    for (var i = 0; i != steps.length; i++) steps[i].style.display = (all || i === at) ? '' : 'none';\n"
            "    document.getElementById('shown').textContent =\n"
            "      all ? 'all steps' : 'step ' + (at + 1) + ' of ' + steps.length;\n"
            "  }\n"
            "  function go(to) { all = false; at = Math.max(0, Math.min(steps.length - 1, to)); show(); }\n"
            "  document.getElementById('previous').onclick = function () { go(at - 1); };\n"
            "  document.getElementById('next').onclick = function () { go(at + 1); };\n"
            "  document.getElementById('all').onclick = function () { all = true; show(); };\n"
            "  show();\n"
            "  document.body.setAttribute('data-ready', 'yes');  // make check-report looks for this\n"
            "})();\n//]]></script>\n</body>\n</html>\n";
    return page;
}

// =============================================================================================
// 7. Demonstrations for the exercises: the sqrt(d_k) scale and the max subtraction in softmax
// =============================================================================================
// Scores q.k of random unit-variance vectors have variance d_k. Without the 1/sqrt(d_k) scale,
// large d_k pushes softmax to one-hot: the top weight nears 1 and the gradient through softmax
// (its Jacobian-vector product, as in matrix.hpp) nears 0, so attention stops learning.
inline void demo_scale() {
    const int keys = 8, draws = 2000;
    std::printf("--- why attention divides its scores by sqrt(d_k) ---\n"
                "one query against %d keys, entries drawn with mean 0 and variance 1, %d draws per row;\n"
                "'top weight' is the largest softmax weight, 'grad' the size of the gradient that softmax\n"
                "passes back for a random upstream gradient (both are means over the draws)\n\n"
                "%6s  %9s  %12s  %12s  %12s  %12s\n",
                keys, draws, "d_k", "std(q.k)", "top, scaled", "top, raw", "grad, scaled", "grad, raw");
    Rng rng(7);
    const double a = std::sqrt(3.0);  // U(-a, a) has variance 1
    for (int d_k : {1, 4, 16, 64, 256, 1024}) {
        double sum_sq = 0, top[2] = {0, 0}, grad[2] = {0, 0};  // [0] scaled, [1] raw
        for (int n = 0; n < draws; n++) {
            Matrix q(1, d_k), K(keys, d_k), G(1, keys);
            for (Matrix* m : {&q, &K, &G})
                for (double& v : m->data) v = rng.uniform(-a, a);
            Matrix raw = matmul_bt(q, K);  // (1, keys) = q K^T
            for (double v : raw.data) sum_sq += v * v / keys;
            for (int which = 0; which < 2; which++) {
                Matrix P = softmax_rows(which == 0 ? scale(raw, 1.0 / std::sqrt(double(d_k))) : raw), dS(1, keys);
                softmax_rows_backward(G, P, dS);
                double norm = 0;
                for (double v : dS.data) norm += v * v;
                top[which] += *std::max_element(P.data.begin(), P.data.end()) / draws;
                grad[which] += std::sqrt(norm) / draws;
            }
        }
        std::printf("%6d  %9.2f  %12.3f  %12.3f  %12.4f  %12.6f\n", d_k, std::sqrt(sum_sq / draws), top[0], top[1],
                    grad[0], grad[1]);
    }
}
inline std::string number_text(double v) {  // "nan" and "inf" spelled the same on every library
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return fmt("%.4f", v);
}

// softmax as written in a textbook, exp(s) / sum exp(s), with no max subtracted.
inline std::vector<double> naive_softmax(const std::vector<double>& s) {
    std::vector<double> p(s.size());
    double sum = 0;
    for (std::size_t i = 0; i < s.size(); i++) sum += p[i] = std::exp(s[i]);
    for (double& v : p) v /= sum;
    return p;
}

// Four rows of scores through both softmaxes: the textbook one overflows or divides 0 by 0.
inline void demo_softmax() {
    std::printf("--- why softmax subtracts the row max before exp ---\n"
                "exp overflows to inf above about 709.78 and underflows to 0 below about -745\n\n");
    const std::pair<const char*, std::vector<double>> rows[] = {
        {"small scores", {1, 2, 3}},
        {"large scores (an unscaled dot product)", {1000, 999, 998}},
        {"very negative scores", {-1000, -1001, -1002}},
        {"every key masked with -1e9", {MASKED, MASKED, MASKED}}};
    for (const auto& [what, scores] : rows) {
        Matrix S(1, int(scores.size()));
        S.data = scores;
        std::vector<double> naive = naive_softmax(scores), stable = softmax_rows(S).data;
        std::vector<std::string> s, a, b;
        for (std::size_t i = 0; i < scores.size(); i++) {
            s.push_back(std::to_string(long(scores[i])));
            a.push_back(number_text(naive[i]));
            b.push_back(number_text(stable[i]));
        }
        std::printf("%s: scores [%s]\n  exp(s) / sum exp(s)         [%s]\n  after subtracting the max   [%s]\n\n", what,
                    join(s, ", ").c_str(), join(a, ", ").c_str(), join(b, ", ").c_str());
    }
    std::printf("one nan weight makes its head's output nan, then every logit, the loss, every gradient,\n"
                "and after one SGD step every parameter: the whole model is lost.\n");
}

// The gradient check's step h (tests.cpp): the central difference (L(w + h) - L(w - h)) / 2h against
// the backward's dL/dw for one weight, h from 1e-1 to 1e-13. Its error has two parts: truncation,
// about h^2 L''' / 6, which shrinks with h, and round-off, about eps |L| / h (L(w + h) and L(w - h)
// share most of their digits, and eps = 2.2e-16 of |L| is lost in each), which grows as h shrinks.
// On a log scale the sum is a V, lowest near h = 1e-5.
inline void demo_gradcheck() {
    DataConfig d;
    Dataset data(d, {}, 0);
    ModelConfig c = fit_to_data(ModelConfig{}, d);
    c.activation = Activation::gelu;  // smooth: with ReLU, a unit that switches within h bends the large-h side
    Transformer model(c, 1);
    Rng rng = training_rng(1);
    std::vector<Example> batch = data.draw_batch(rng, 8);
    Optimizer sgd;
    auto loss = [&] { return train_step(model, batch, 0.0, sgd); };  // lr 0: the loss and the grads, no step
    loss();
    Param& p = model.decoder[0].self_attn.W_q.W;
    double& w = p.value.at(3, 5);
    const double analytic = p.grad.at(3, 5), saved = w;
    std::printf("--- how big a step h for the central difference? ---\n"
                "weight decoder.0.self_attn.W_q[3][5] of the default model with GELU (seed 1); "
                "L = the mean loss of 8 examples\n"
                "backward: dL/dw = %.15f\n\n%8s  %24s  %9s  %s\n", analytic, "h", "(L(w+h) - L(w-h)) / 2h", "|error|",
                "log10 |error|, one # per half decade");
    for (int k = 1; k <= 13; k++) {
        double h = std::pow(10.0, -k);
        w = saved + h;
        double up = loss();
        w = saved - h;
        double down = loss();
        w = saved;
        double numeric = (up - down) / (2 * h), error = std::fabs(numeric - analytic);
        double decades = error > 0 ? std::log10(error) : -17.0;
        std::printf("%8.0e  %24.15f  %9.1e  %6.1f %s\n", h, numeric, error, decades,
                    std::string(std::size_t(std::max(0.0, 2 * (decades + 16))), '#').c_str());
    }
    std::printf("\nlarge h: truncation, the error falls as h^2 (two decades per decade of h);\n"
                "small h: round-off, the error grows as 1/h; tests.cpp uses h = 3e-5, near the bottom of the V.\n");
}

// =============================================================================================
// 8. The training run
// =============================================================================================
using Clock = std::chrono::steady_clock;  // a clock that never jumps, for timing
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
inline std::string size_text(const ModelConfig& m, const DataConfig& d) {  // the sizes, for a header line
    return fmt("d_model %d, heads %d, d_ff %d, layers %d+%d, seq_len %d", m.d_model, m.n_heads, m.d_ff, m.enc_layers,
               m.dec_layers, d.seq_len);
}

// The model's answer to each example beside the true one, after a blank line.
// The watched inputs decoded now, printed under a title and kept in the history for --report.
inline void show_examples(const std::string& title, Transformer& model, const std::vector<Example>& shown,
                          History& history) {
    std::string lines;
    for (const Example& e : shown) {
        std::vector<int> guess = greedy_decode(model, {e.source}, int(e.target.size()))[0];
        lines += fmt("  input %s   pred %s   true %s%s\n", digits_text(e.source, model.config).c_str(),
                     digits_text(guess, model.config).c_str(), digits_text(e.target, model.config).c_str(),
                     guess == e.target ? "   ok" : "");
    }
    std::printf("\n--- %s ---\n%s", title.c_str(), lines.c_str());
    history.predictions.push_back({title, lines});
}

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

// printf writes a NaN whose sign bit is set as "-nan"; a diverged loss should read "nan" every time.
inline double plain_nan(double v) { return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v; }

// The final loss is the mean of the last FINAL_LOSS_WINDOW steps (or all), so --eval-every cannot change it.
constexpr long FINAL_LOSS_WINDOW = 1000;

// --dump-step FILE: the first step before its update, for reference/torch_sorter.py: lr, each example and
// its logits, the loss (summed in train_step's order, so the same to the last bit), the model as a checkpoint.
inline std::string ids_text(const std::vector<int>& tokens) {  // {3, 1, 0} -> "3 1 0"
    std::vector<std::string> words;
    for (int t : tokens) words.push_back(std::to_string(t));
    return join(words, " ");
}
inline void dump_step(const std::string& path, Transformer& model, const std::vector<Example>& batch, double lr,
                      const Saved& saved) {
    write_atomically(path, "--dump-step", [&](FILE* f) {
        std::fprintf(f, "sorter-step 1\nlr %.17g\nexamples %zu\n", lr, batch.size());
        double loss = 0.0, weight = 1.0 / double(batch.size());
        for (std::size_t i = 0; i < batch.size(); i++) {
            const Example& e = batch[i];
            Matrix logits = model.forward({e.source}, {e.target_in}), unused(logits.rows, logits.cols);
            loss += weight * cross_entropy(logits, e.target, weight, unused);
            std::fprintf(f, "example %zu\nsource %s\ntarget_in %s\ntarget %s\nlogits %d %d\n", i, ids_text(e.source).c_str(),
                         ids_text(e.target_in).c_str(), ids_text(e.target).c_str(), logits.rows, logits.cols);
            write_matrix(f, logits);
        }
        std::fprintf(f, "loss %.17g\ncheckpoint\n", loss);
        write_checkpoint(f, model, saved);
    });
}

// "SGD lr 0.2, schedule linear", "Adam lr 0.001, schedule warmup 1000": the optimizer, its rate, the schedule.
inline std::string optimizer_text(const Options& o) {
    const char* names[] = {"SGD", "momentum", "Adam"};
    std::string text = fmt("%s lr %g, schedule %s", names[int(o.train.optimizer)], o.train.lr,
                           SCHEDULE_NAMES[int(o.train.schedule)].c_str());
    return o.train.schedule == Schedule::warmup ? text + fmt(" %ld", o.train.warmup) : text;
}

// Train o.train.steps steps on from where `saved` stands (a fresh run: no update yet, the seed's draws),
// printing the held-out accuracy as it goes and the examples it watches. Steps are numbered on from the
// updates already made, and the schedule sees the run as that much longer. `saved` ends where training stops.
inline History train_and_report(const Options& o, Dataset& data, Transformer& model, Saved& saved) {
    Optimizer& optimizer = saved.optimizer;
    Rng& rng = saved.draws;
    const long first = optimizer.t + 1, last = optimizer.t + o.train.steps;
    std::vector<Example> shown = watched_examples(data);
    History history;
    history.first_step = first;
    std::string steps = first == 1 ? fmt("steps %ld", last) : fmt("steps %ld to %ld", first, last);
    std::string& header = history.header;
    header += fmt("sorter: %s | %s, batch %d, %s, seed %llu\n", size_text(o.model, o.data).c_str(),
                  optimizer_text(o).c_str(), o.train.batch, steps.c_str(), (unsigned long long)o.seed);
    std::string variant = variant_text(o);
    if (!variant.empty()) header += "variant: " + variant + "\n";
    if (!data.train_pool.empty()) header += fmt("training data: %zu sequences\n", data.train_pool.size());
    header += fmt("held-out: %zu sequences that training never draws\n", data.held_out.size());
    std::printf("%s", header.c_str());
    show_examples(first == 1 ? "before training" : fmt("after step %ld", first - 1), model, shown, history);
    std::printf("\n%8s  %8s  %13s  %12s  %14s\n", "step", "loss", "held-out loss", "exact-match", "token-accuracy");
    double train_seconds = 0.0, recent_loss = 0.0;
    long loss_count = 0;
    for (long step = first; step <= last; step++) {
        auto t0 = Clock::now();
        std::vector<Example> batch = data.draw_batch(rng, o.train.batch);
        double lr = scheduled_lr(o.train.schedule, o.train.lr, step, last, o.train.warmup);
        if (step == 1 && !o.dump_step_path.empty()) dump_step(o.dump_step_path, model, batch, lr, saved);
        double loss = train_step(model, batch, lr, optimizer);
        train_seconds += seconds_since(t0);
        if (!o.report_path.empty()) record_gradient_norms(model, history);
        if (!std::isfinite(loss))  // the logits were already nan or inf, so the weights are too: stop here
            fail(fmt("training diverged at step %ld (loss %s); try a smaller --lr than %g. Nothing was saved or drawn",
                     step, std::isnan(loss) ? "nan" : "inf", o.train.lr));
        history.losses.push_back(loss);
        recent_loss += loss;
        loss_count++;
        if (step % o.eval_every == 0 || step == last) {
            Accuracy a = evaluate(model, data.held_out);
            double held_out_loss = teacher_forced_loss(model, data.held_out);
            history.evals.push_back({step, recent_loss / loss_count, a.exact, a.token, held_out_loss});
            std::printf("%8ld  %8.4f  %13.4f  %11.1f%%  %13.1f%%\n", step, plain_nan(recent_loss / loss_count),
                        plain_nan(held_out_loss), 100 * a.exact, 100 * a.token);
            recent_loss = 0.0;
            loss_count = 0;
        }
        if (step == first - 1 + o.train.steps / 2) {
            show_examples("step " + std::to_string(step), model, shown, history);
            std::printf("\n");
        }
    }
    if (!history.losses.empty()) std::printf("\n");
    print_loss_plot(history.losses, first);  // nothing without training
    std::size_t window = std::min<std::size_t>(FINAL_LOSS_WINDOW, history.losses.size());
    std::string loss = "loss - (no training)";
    if (window)
        loss = fmt("loss %.4f (mean of the last %zu steps)",
                   plain_nan(std::accumulate(history.losses.end() - window, history.losses.end(), 0.0) / double(window)),
                   window);
    Accuracy a = evaluate(model, data.held_out);
    show_examples("after training", model, shown, history);
    history.final_line = fmt("final: exact-match %.1f%% (%d/%d), token-accuracy %.1f%%, %s, train-time %.1f s\n",
                             100 * a.exact, a.exact_count, a.total, 100 * a.token, loss.c_str(), train_seconds);
    std::printf("\n%s", history.final_line.c_str());
    return history;
}

// =============================================================================================
// 9. The run: what the options ask for, in order
// =============================================================================================
inline void check_output_paths(const Options& o) {  // before training, so a typo costs no time
    std::error_code ec;
    if (!o.svg_dir.empty() && !std::filesystem::exists(o.svg_dir, ec))
        fail("--svg " + o.svg_dir + ": no such directory (create it first, e.g. mkdir -p " + o.svg_dir + ")");
    if (!o.svg_dir.empty() && !std::filesystem::is_directory(o.svg_dir, ec))
        fail("--svg " + o.svg_dir + ": not a directory");
    if (!o.svg_dir.empty() && access(o.svg_dir.c_str(), W_OK) != 0)
        fail("--svg " + o.svg_dir + ": cannot write into this directory (" + std::strerror(errno) + ")");
    for (const auto& [flag, path] : {std::pair{"--save", o.save_path}, std::pair{"--dump-step", o.dump_step_path},
                                     std::pair{"--report", o.report_path}}) {
        if (path.empty()) continue;
        std::filesystem::path dir = std::filesystem::path(path).parent_path();
        if (dir.empty()) dir = ".";
        if (!std::filesystem::is_directory(dir, ec))
            fail(std::string(flag) + " " + path + ": the directory " + dir.string() + " does not exist");
        if (std::filesystem::is_directory(path, ec)) fail(std::string(flag) + " " + path + ": is a directory");
        struct stat existing{};
        if (lstat(path.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode))
            fail(std::string(flag) + " " + path + ": not a regular file (a device, pipe or link); choose another name");
        if (access(dir.c_str(), W_OK) != 0)
            fail(std::string(flag) + " " + path + ": cannot write into " + dir.string() + " (" + std::strerror(errno) + ")");
        // write_atomically writes NAME.tmp-PID first: it too must fit the usual 255-byte limit of a file name
        if (std::filesystem::path(path).filename().string().size() + 16 > 255)
            fail(std::string(flag) + " " + path + ": the file name is too long (at most 239 bytes)");
    }
}
void run_bench(const Options& o);  // section 10
void run_speed(const Options& o);

// Everything a command line asks for; returns the exit status.
inline int run(const Options& options) {
    Options o = options;
    if (o.help || o.bench || o.speed || !o.demo.empty()) {  // each of these does only that
        if (o.help) print_help();
        else if (o.bench) run_bench(o);
        else if (o.speed) run_speed(o);
        else if (o.demo == "scale") demo_scale();
        else if (o.demo == "softmax") demo_softmax();
        else demo_gradcheck();
        return 0;
    }
    check_output_paths(o);
    Saved saved(o.data, o.train, o.seed);
    Transformer model = o.load_path.empty() ? Transformer(o.model, o.seed) : load_checkpoint(o.load_path, saved);
    o.model = model.config;
    o.data = saved.data;
    long steps = o.train.steps;  // with --load: the steps asked for, on from the checkpoint's
    o.train = saved.train;
    o.train.steps = steps;
    std::vector<std::vector<int>> pool;
    if (!o.train_data_path.empty()) pool = load_train_data(o.train_data_path, o.data);
    std::vector<int> digits;
    if (!o.sort_words.empty()) digits = parse_sequence(o.sort_words, o.data, "--sort " + join(o.sort_words, " "));
    // The example every picture uses: the --sort digits, or one fixed made-up input.
    Rng example_rng(o.seed);
    Example example = make_example(digits.empty() ? random_digits(example_rng, o.data) : digits, o.data);
    const ModelConfig& c = model.config;
    if (o.params || o.show_pe || o.trace_shapes) {  // the model as built (or loaded), without training
        if (o.params) print_params(model);
        if (o.show_pe) {
            if (o.params) std::printf("\n");  // a blank line between two pictures
            print_positions(model, o.numbers);
        }
        if (o.trace_shapes) {
            if (o.params || o.show_pe) std::printf("\n");
            trace_shapes(model, example);
        }
        if (!o.svg_dir.empty()) write_pictures(o.svg_dir, model, example.source, nullptr);
        return 0;
    }
    History history;
    if (!o.load_path.empty()) {
        history.header = fmt("loaded %s: d_model %d, heads %d, d_ff %d, layers %d+%d, task %s, seq_len %d, min_len %d, "
                             "max_digit %d; %ld updates made\n", o.load_path.c_str(), c.d_model, c.n_heads, c.d_ff,
                             c.enc_layers, c.dec_layers, TASK_NAMES[int(o.data.task)].c_str(), o.data.seq_len,
                             o.data.min_len, o.data.max_digit, saved.optimizer.t);
        std::printf("%s", history.header.c_str());
    }
    if (o.load_path.empty() || o.train.steps > 0) {
        Dataset data(o.data, pool);
        if (data.held_out.empty())  // half of all sources at most are held out, and half of 1 is none
            fail(fmt("no held-out set is possible: --seq-len %d --min-len %d --max-digit %d allow only %.0f different "
                     "input%s%s; raise --seq-len or --max-digit", o.data.seq_len, o.data.min_len, o.data.max_digit,
                     count_sources(o.data), count_sources(o.data) == 1 ? "" : "s",
                     pool.empty() ? "" : ", and --train-data uses them"));
        std::string loaded = history.header;  // "loaded FILE ..." when training goes on from a checkpoint
        history = train_and_report(o, data, model, saved);
        history.header = loaded + history.header;
    } else if (digits.empty() || !o.report_path.empty()) {
        Accuracy a = evaluate(model, Dataset(o.data).held_out);
        history.final_line = fmt("held-out: exact-match %.1f%% (%d/%d), token-accuracy %.1f%%\n", 100 * a.exact,
                                 a.exact_count, a.total, 100 * a.token);
        if (digits.empty()) std::printf("%s", history.final_line.c_str());
    }
    std::vector<int> guess = greedy_decode(model, {example.source}, o.data.seq_len)[0];
    std::string input = digits_text(example.source, c), output = digits_text(guess, c);
    if (!digits.empty())
        std::printf("\ninput  %s\noutput %s   (%s: %s%s)\n", input.c_str(), output.c_str(),
                    TASK_NAMES[int(o.data.task)].c_str(), digits_text(example.target, c).c_str(),
                    guess == example.target ? ", ok" : ", wrong");
    if (o.show_attention) {
        std::printf("\n--- attention for input %s, output %s ---\n", input.c_str(), output.c_str());
        print_attention(attention_maps(model, example.source, guess), o.numbers);
    }
    if (o.inspect) inspect(model, Dataset(o.data).held_out);
    if (o.test_len > 0) length_report(model, Dataset(o.data, pool), o.test_len);
    if (!o.save_path.empty()) {  // the model first: a picture that fails to write must not lose it
        save_checkpoint(o.save_path, model, saved);
        std::printf("saved %s\n", o.save_path.c_str());
    }
    if (!o.svg_dir.empty())
        write_pictures(o.svg_dir, model, example.source, history.losses.empty() ? nullptr : &history);
    if (!o.report_path.empty()) {  // on the first watched input, or the --sort digits
        Dataset data(o.data, pool);
        std::vector<Example> watched = watched_examples(data);
        if (history.predictions.empty()) show_examples("the loaded model", model, watched, history);
        std::vector<int> source = digits.empty() && !watched.empty() ? watched.front().source : example.source;
        std::string page = report_html(model, history, source, data.held_out);
        write_atomically(o.report_path, "--report", [&](FILE* f) { std::fputs(page.c_str(), f); });
        std::printf("wrote %s\n", o.report_path.c_str());
    }
    return 0;
}

// =============================================================================================
// 10. Speed: --speed (one configuration; make compare sets it beside PyTorch) and --bench
// =============================================================================================
// Training examples per second: steps (draw, forward, backward, SGD) for `seconds`, after a 10% warm-up.
inline double examples_per_second(const Options& o, double seconds) {
    Dataset data(o.data, {}, 0);
    Transformer model(o.model, 1);
    Rng rng = training_rng(1);
    Optimizer optimizer(o.train.optimizer);
    auto step = [&] { train_step(model, data.draw_batch(rng, o.train.batch), o.train.lr, optimizer); };
    for (auto t0 = Clock::now(); seconds_since(t0) < 0.1 * seconds;) step();
    long steps = 0;
    auto t0 = Clock::now();
    double elapsed = 0.0;
    for (; (elapsed = seconds_since(t0)) < seconds; steps++) step();
    return double(steps) * o.train.batch / elapsed;
}

// Matmul FLOPs (2 m n k for an (m, k) by (k, n) product) of one teacher-forced forward pass of one
// example. A training step costs about 3x this: the backward of every product is two products.
inline double matmul_flops_forward(const ModelConfig& c, const DataConfig& d) {
    double S = d.seq_len, T = d.seq_len, d_model = c.d_model, h = c.n_heads, d_k = d_model / h;
    auto attention = [&](double Lq, double Lk) {
        return 2 * (Lq + Lk) * d_model * d_model * 2  // W_q, W_o on Lq rows; W_k, W_v on Lk rows
               + h * 2 * Lq * Lk * d_k * 2;           // Q K^T and P V in every head
    };
    double ffn = 2 * T * d_model * c.d_ff * 2;
    return c.enc_layers * (attention(S, S) + ffn) + c.dec_layers * (attention(T, T) + attention(T, S) + ffn) +
           2 * T * d_model * c.vocab;
}
void run_speed(const Options& o) {  // --speed: two lines for make compare
    double rate = examples_per_second(o, 1.0);
    std::printf("sorter --speed: %.1f training examples/s (%s, batch %d; %.2f GFLOP/s)\n", rate,
                size_text(o.model, o.data).c_str(), o.train.batch,
                3 * matmul_flops_forward(o.model, o.data) * rate * 1e-9);
    Dataset data(o.data);  // one evaluation costs the same, trained or not: every output has seq_len tokens
    Transformer model(o.model, o.seed);
    auto t0 = Clock::now();
    evaluate(model, data.held_out);
    std::printf("sorter --speed: one held-out evaluation (%zu sequences, greedy) in %.2f s\n", data.held_out.size(),
                seconds_since(t0));
}
#ifndef SORTER_CXXFLAGS  // the Makefile passes the compiler and flags it builds with
#define SORTER_CXXFLAGS "(not recorded)"
#endif
// The speed table of README.md's Performance section, every figure measured in this run. Each row
// is a command line, as a user would type it after ./sorter --speed.
void run_bench(const Options& o) {
    std::string cpu = "unknown CPU";
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
        if (line.rfind("model name", 0) == 0) cpu = line.substr(line.find(':') + 2);
    std::printf("sorter --bench: %ld processors online, %s; one thread\ncompiler: %s, flags: %s\n",
                sysconf(_SC_NPROCESSORS_ONLN), cpu.c_str(), __VERSION__, SORTER_CXXFLAGS);
    const std::string mid = "--d-model 64 --heads 4 --d-ff 256 --enc-layers 2 --dec-layers 2 --seq-len 10";
    struct Row { std::string what, flags; bool vs_above; };  // vs_above: print examples/s over the row above's
    std::vector<Row> rows = {{"default, batch 1", "--batch 1", false}, {"default, batch 32", "--batch 32", false},
                             {"mid, batch 1", mid + " --batch 1", false}, {"mid, batch 32", mid + " --batch 32", false}};
    for (int k = 0; k < 4; k++)
        rows.push_back({fmt("seq_len %d, batch 32", 4 << k), fmt("--seq-len %d --batch 32", 4 << k), k > 0});
    for (int k = 0, n = 16; k < 4; k++, n *= 2)
        rows.push_back({fmt("d_model %d, d_ff %d, batch 32", n, 2 * n), fmt("--d-model %d --d-ff %d --batch 32", n, 2 * n),
                        k > 0});
    std::printf("\n  %-34s %10s %14s %9s %6s\n", "training, 1 s a row", "examples/s", "FLOPs/example", "GFLOP/s",
                "x prev");
    double previous = 0;
    for (const Row& row : rows) {
        Options r = parse_options(split_words(row.flags));
        double rate = examples_per_second(r, 1.0);
        double flops = 3 * matmul_flops_forward(r.model, r.data);
        std::string ratio = row.vs_above ? fmt(" %6.2f", rate / previous) : "";
        std::printf("  %-34s %10.0f %14.0f %9.2f%s\n", row.what.c_str(), rate, flops, flops * rate * 1e-9,
                    ratio.c_str());
        previous = rate;
    }
    Options m = parse_options(split_words(mid));
    std::printf("  (default: %s; mid: %s)\n", size_text(DEFAULTS.model, DEFAULTS.data).c_str(),
                size_text(m.model, m.data).c_str());
    // Time to accuracy with this run's settings (the defaults unless flags say otherwise): evaluate
    // every 100 steps, evaluation time not counted; note the first step at 99% and at 100%.
    Dataset data(o.data);
    Transformer model(o.model, o.seed);
    Rng rng = training_rng(o.seed);
    Optimizer optimizer(o.train.optimizer);
    double train_seconds = 0.0, decode_seconds = 0.0, targets[] = {0.99, 1.0};
    long decoded = 0;
    int reached = 0;  // how many of the targets
    std::printf("time to exact match on the %zu held-out sequences (batch %d, %s, seed %llu)\n",
                data.held_out.size(), o.train.batch, optimizer_text(o).c_str(), (unsigned long long)o.seed);
    for (long step = 1; step <= o.train.steps && reached < 2; step++) {
        auto t0 = Clock::now();
        double lr = scheduled_lr(o.train.schedule, o.train.lr, step, o.train.steps, o.train.warmup);
        train_step(model, data.draw_batch(rng, o.train.batch), lr, optimizer);
        train_seconds += seconds_since(t0);
        if (step % 100 != 0) continue;
        auto t1 = Clock::now();
        double exact = evaluate(model, data.held_out).exact;
        decode_seconds += seconds_since(t1);
        decoded += long(data.held_out.size());
        for (; reached < 2 && exact >= targets[reached]; reached++)
            std::printf("  %s: %.2f s of training, step %ld, %ld examples\n", reached ? "100%" : "99%", train_seconds,
                        step, step * o.train.batch);
    }
    if (decoded)
        std::printf("greedy decoding: %.1f us per sequence (100 together, keys and values kept)\n",
                    1e6 * decode_seconds / decoded);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("peak memory (resident set): %ld kB\n", usage.ru_maxrss);
}

// The last word on the output: a full disk or a closed file shows only when the buffer is flushed,
// so flush it and say so, rather than exit 0 with the output lost (./sorter > /dev/full).
inline int finish_output(std::FILE* out, int status) {
    if (std::fflush(out) == 0 && !std::ferror(out)) return status;
    std::fprintf(stderr, "sorter: cannot write the output (is the disk full, or the file closed?)\n");
    return 1;
}

}  // namespace sorter_program

#ifndef SORTER_NO_MAIN
int main(int argc, char** argv) {  // a bad flag or file: one line on stderr, exit status 2
    using namespace sorter_program;
    std::setvbuf(stdout, nullptr, _IOLBF, 1 << 16);
    std::signal(SIGINT, on_signal);  // Ctrl-C during --save removes the temporary file
    std::signal(SIGTERM, on_signal);  // line by line: ./sorter | tee log shows each line as it comes
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
