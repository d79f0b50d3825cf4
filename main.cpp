// main.cpp -- the sorter program: the learner's workbench around the tutorial.
//
// The tutorial is in matrix.hpp, model.hpp and train.hpp; this file is the program around it:
// flags, what is printed, terminal pictures, SVG files and checkpoints. Sections, in the order a
// run uses them:
//   1. Errors and options     every flag, checked; a bad value is one line on stderr and exit 2
//   2. Input files            --train-data sequences and --sort digits, checked against the data
//   3. Checkpoints            --save and --load, a plain-text format described in full below
//   4. Terminal pictures      attention heatmaps, the positional table, the loss curve
//   5. Looking inside         --trace-shapes and --params
//   6. SVG pictures           --svg DIR: the same pictures as files for a browser
//   7. Demonstrations         --demo scale and --demo softmax, for two of the exercises
//   8. The training run
//   9. main()
//  10. Benchmark              --bench (make bench): the speed table, with the PyTorch peer beside it
//
// Legend: T target length, S source length, d_model token width, n_heads heads,
//         d_k = d_model / n_heads, d_ff feed-forward width, V vocabulary size.
#include <sys/resource.h>  // getrusage (POSIX): peak memory for the benchmark
#include <unistd.h>        // fsync, getpid (POSIX): a checkpoint reaches the disk before it is renamed

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
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
struct UsageError {
    std::string message;
};
[[noreturn]] inline void fail(const std::string& message) { throw UsageError{message}; }

// Caps on every size, so that no flag and no checkpoint can ask for a huge allocation. The
// largest model they allow has about 15 million parameters (about 250 MB with the gradients).
constexpr long MAX_D_MODEL = 256, MAX_HEADS = 64, MAX_D_FF = 1024, MAX_LAYERS = 8;
constexpr long MAX_SEQ_LEN = 32, MAX_DIGIT = 99;
constexpr long MAX_STEPS = 1000000, MAX_BATCH = 1024, MAX_SEED = 2147483647;
constexpr double MAX_LR = 10.0;
constexpr long MAX_TRAIN_LINES = 1000000;

struct Options {
    ModelConfig model;
    DataConfig data;
    long steps = 12000;
    int batch = 8;
    double lr = 0.1;
    uint64_t seed = 1;
    long eval_every = 2000;
    bool bench = false;  // --bench: print the speed table instead of training (the last section)

    bool help = false;
    bool show_attention = false, numbers = false, show_pe = false, trace_shapes = false, params = false;
    std::string svg_dir, save_path, load_path, train_data_path;
    std::vector<std::string> sort_words;  // the words after --sort, checked once the data is known
    std::string demo;                     // "scale" or "softmax"
};

// Names of the choices, shared by the flags and the checkpoint header.
const std::vector<std::string> TASK_NAMES = {"sort", "copy", "reverse"};
const std::vector<std::string> NORM_NAMES = {"pre", "post"};
const std::vector<std::string> POSITION_NAMES = {"sinusoidal", "learned", "none"};
const std::vector<std::string> ACTIVATION_NAMES = {"relu", "gelu"};
const std::vector<std::string> DEMO_NAMES = {"scale", "softmax"};

inline std::string join(const std::vector<std::string>& words, const std::string& between) {
    std::string s;
    for (std::size_t i = 0; i < words.size(); i++) s += (i ? between : "") + words[i];
    return s;
}
inline int choice_index(const std::string& text, const std::vector<std::string>& names) {
    for (std::size_t i = 0; i < names.size(); i++)
        if (text == names[i]) return int(i);
    return -1;
}
// A whole number in [lo, hi], written in full ("12", not "12x" or ""), into out.
inline bool parse_whole(const std::string& text, long lo, long hi, long& out) {
    if (text.empty() || std::isspace((unsigned char)text[0])) return false;
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0' || errno == ERANGE || v < lo || v > hi) return false;
    out = v;
    return true;
}
// A finite floating-point number written in full ("0.25", "-1e-3"; not "nan", "inf", "1.5x").
inline bool parse_finite(const std::string& text, double& out) {
    if (text.empty() || std::isspace((unsigned char)text[0])) return false;
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !std::isfinite(v)) return false;
    out = v;
    return true;
}
inline std::string range_text(long lo, long hi) {
    return "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
}

inline void print_help() {
    std::printf(
        "sorter: a from-scratch Transformer that learns to sort digits.\n"
        "\n"
        "usage: ./sorter [flags]      with no flags: train the default model and report\n"
        "\n"
        "Model\n"
        "  --d-model N       width of every token vector (default 16, at most %ld)\n"
        "  --heads N         attention heads; must divide d_model (default 2)\n"
        "  --d-ff N          hidden width of the feed-forward layers (default 32, at most %ld)\n"
        "  --enc-layers N    encoder blocks (default 1, at most %ld)\n"
        "  --dec-layers N    decoder blocks (default 1, at most %ld)\n"
        "  example: ./sorter --d-model 32 --heads 4 --d-ff 64 --enc-layers 2 --dec-layers 2\n"
        "\n"
        "Data\n"
        "  --task NAME       sort | copy | reverse (default sort)\n"
        "  --seq-len N       longest input, S = T (default 5, at most %ld)\n"
        "  --min-len N       shortest input (default: seq-len); below seq-len inputs vary in length,\n"
        "                    padded with PAD, which the source padding mask hides from attention\n"
        "  --max-digit N     digits are 1..N, so V = N + 2 (default 9, at most %ld)\n"
        "  --train-data FILE train on the sequences in FILE (one a line, digits separated by spaces;\n"
        "                    blank lines and lines starting with # are skipped)\n"
        "  example: ./sorter --task reverse --seq-len 6 --min-len 3\n"
        "\n"
        "Training (plain SGD)\n"
        "  --steps N         training steps (default 12000, at most %ld; 0 trains nothing)\n"
        "  --batch N         examples per step (default 8, at most %ld)\n"
        "  --lr X            learning rate, above 0 and at most %g (default 0.1)\n"
        "  --seed N          seed for the weights and the training draws (default 1)\n"
        "  --eval-every N    steps between held-out evaluations (default 2000)\n"
        "  example: ./sorter --steps 1000 --batch 16 --lr 0.2 --seed 7\n"
        "\n"
        "Variants for the exercises\n"
        "  --norm pre|post   LayerNorm before each sublayer (default) or after the residual sum\n"
        "  --pos KIND        sinusoidal (default) | learned | none\n"
        "  --act relu|gelu   feed-forward activation (default relu)\n"
        "  --no-embed-scale  do not multiply embeddings by sqrt(d_model)\n"
        "  --demo scale      why attention divides its scores by sqrt(d_k) (no training)\n"
        "  --demo softmax    why softmax subtracts the row max before exp (no training)\n"
        "  example: ./sorter --norm post --pos learned --act gelu\n"
        "\n"
        "Seeing inside\n"
        "  --show-attention  after training (or with --load), every head of every attention layer\n"
        "                    as a terminal heatmap: rows = queries, columns = keys\n"
        "  --numbers         print the numbers below each terminal heatmap\n"
        "  --show-pe         the positional-encoding table as a heatmap, then stop (no training)\n"
        "  --trace-shapes    the shape of every tensor on one forward pass, then stop\n"
        "  --params          parameter count per block and in total, then stop\n"
        "  --svg DIR         write attention.svg, pe.svg and training.svg into DIR\n"
        "  example: ./sorter --steps 1500 --show-attention --svg /tmp\n"
        "\n"
        "Keeping and using a model\n"
        "  --save FILE       after training, write the model to FILE (plain text)\n"
        "  --load FILE       read a model saved with --save instead of training one; model, data\n"
        "                    and training flags cannot be combined with it\n"
        "  --sort D D ...    print the model's output for these digits (with --load, or after training)\n"
        "  example: ./sorter --save model.txt, then ./sorter --load model.txt --sort 5 3 9 1 1\n"
        "\n"
        "Speed\n"
        "  --bench           print the speed table instead of training (make bench runs it)\n"
        "\n"
        "  --help            this text\n",
        MAX_D_MODEL, MAX_D_FF, MAX_LAYERS, MAX_LAYERS, MAX_SEQ_LEN, MAX_DIGIT, MAX_STEPS, MAX_BATCH,
        MAX_LR);
}

// The flags a checkpoint decides: given together with --load, they would be silently ignored.
const std::vector<std::string> FLAGS_FIXED_BY_CHECKPOINT = {
    "--d-model", "--heads", "--d-ff", "--enc-layers", "--dec-layers", "--task", "--seq-len",
    "--min-len", "--max-digit", "--train-data", "--steps", "--batch", "--lr", "--seed",
    "--eval-every", "--norm", "--pos", "--act", "--no-embed-scale"};

inline Options parse_options(int argc, char** argv) {
    Options o;
    std::vector<std::string> given;
    for (int i = 1; i < argc; i++) {
        const std::string flag = argv[i];
        given.push_back(flag);
        auto has_value = [&] { return i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0; };
        auto whole = [&](long lo, long hi) -> long {
            if (!has_value()) fail(flag + " needs a value: " + range_text(lo, hi));
            std::string text = argv[++i];
            long v = 0;
            if (!parse_whole(text, lo, hi, v)) fail(flag + " " + text + ": expected " + range_text(lo, hi));
            return v;
        };
        auto choice = [&](const std::vector<std::string>& names) -> int {
            if (!has_value()) fail(flag + " needs a value: one of " + join(names, ", "));
            std::string text = argv[++i];
            int k = choice_index(text, names);
            if (k < 0) fail(flag + " " + text + ": expected one of " + join(names, ", "));
            return k;
        };
        auto path = [&](const char* what) -> std::string {
            if (!has_value() || !*argv[i + 1]) fail(flag + " needs a value: " + what);
            return argv[++i];
        };

        if (flag == "--help" || flag == "-h") o.help = true;
        else if (flag == "--d-model") o.model.d_model = int(whole(1, MAX_D_MODEL));
        else if (flag == "--heads") o.model.n_heads = int(whole(1, MAX_HEADS));
        else if (flag == "--d-ff") o.model.d_ff = int(whole(1, MAX_D_FF));
        else if (flag == "--enc-layers") o.model.enc_layers = int(whole(1, MAX_LAYERS));
        else if (flag == "--dec-layers") o.model.dec_layers = int(whole(1, MAX_LAYERS));
        else if (flag == "--task") o.data.task = Task(choice(TASK_NAMES));
        else if (flag == "--seq-len") o.data.seq_len = int(whole(1, MAX_SEQ_LEN));
        else if (flag == "--min-len") o.data.min_len = int(whole(1, MAX_SEQ_LEN));
        else if (flag == "--max-digit") o.data.max_digit = int(whole(1, MAX_DIGIT));
        else if (flag == "--train-data") o.train_data_path = path("a file of digit sequences");
        else if (flag == "--steps") o.steps = whole(0, MAX_STEPS);
        else if (flag == "--batch") o.batch = int(whole(1, MAX_BATCH));
        else if (flag == "--seed") o.seed = uint64_t(whole(0, MAX_SEED));
        else if (flag == "--eval-every") o.eval_every = whole(1, MAX_STEPS);
        else if (flag == "--lr") {
            std::string allowed = "a number above 0 and at most " + std::to_string(int(MAX_LR));
            if (!has_value()) fail(flag + " needs a value: " + allowed);
            std::string text = argv[++i];
            if (!parse_finite(text, o.lr) || o.lr <= 0.0 || o.lr > MAX_LR)
                fail(flag + " " + text + ": expected " + allowed);
        }
        else if (flag == "--norm") o.model.norm = Norm(choice(NORM_NAMES));
        else if (flag == "--pos") o.model.positions = Positions(choice(POSITION_NAMES));
        else if (flag == "--act") o.model.activation = Activation(choice(ACTIVATION_NAMES));
        else if (flag == "--no-embed-scale") o.model.embed_scale = false;
        else if (flag == "--demo") o.demo = DEMO_NAMES[choice(DEMO_NAMES)];
        else if (flag == "--show-attention") o.show_attention = true;
        else if (flag == "--numbers") o.numbers = true;
        else if (flag == "--show-pe") o.show_pe = true;
        else if (flag == "--trace-shapes") o.trace_shapes = true;
        else if (flag == "--params") o.params = true;
        else if (flag == "--bench") o.bench = true;
        else if (flag == "--svg") o.svg_dir = path("a directory to write the SVG files into");
        else if (flag == "--save") o.save_path = path("a file to write the model to");
        else if (flag == "--load") o.load_path = path("a file written by --save");
        else if (flag == "--sort") {
            o.sort_words.clear();
            while (has_value()) o.sort_words.push_back(argv[++i]);
            if (o.sort_words.empty()) fail("--sort needs digits, e.g. --sort 5 3 9 1 1");
        } else {
            fail("unknown flag '" + flag + "'; run ./sorter --help for the flags");
        }
    }
    auto was_given = [&](const std::string& f) {
        return std::find(given.begin(), given.end(), f) != given.end();
    };

    // Checks that involve two flags.
    DataConfig& d = o.data;
    if (!was_given("--min-len")) d.min_len = d.seq_len;  // fixed length unless asked otherwise
    if (d.min_len > d.seq_len)
        fail("--min-len " + std::to_string(d.min_len) + ": must be at most the sequence length " +
             std::to_string(d.seq_len) + " (--seq-len)");
    if (o.model.d_model % o.model.n_heads != 0)
        fail("--heads " + std::to_string(o.model.n_heads) + " with --d-model " + std::to_string(o.model.d_model) +
             ": d_model must be a multiple of the number of heads");
    if (!o.load_path.empty())
        for (const std::string& f : FLAGS_FIXED_BY_CHECKPOINT)
            if (was_given(f)) fail(f + " cannot be combined with --load " + o.load_path + ": the checkpoint fixes it");
    o.model.vocab = vocab_size(d);
    o.model.max_len = d.seq_len;
    return o;
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
    if (n < d.min_len || n > d.seq_len) {
        std::string allowed = d.min_len == d.seq_len
                                  ? "exactly " + std::to_string(d.seq_len)
                                  : "from " + std::to_string(d.min_len) + " to " + std::to_string(d.seq_len);
        fail(where + ": " + std::to_string(n) + " digits; expected " + allowed +
             " (set by --min-len and --seq-len, or by the checkpoint given to --load)");
    }
    return digits;
}

inline std::vector<std::string> split_words(const std::string& line) {
    std::vector<std::string> words;
    std::string w;
    for (char ch : line) {
        if (std::isspace((unsigned char)ch)) {
            if (!w.empty()) words.push_back(w), w.clear();
        } else {
            w += ch;
        }
    }
    if (!w.empty()) words.push_back(w);
    return words;
}

// One line into `line`, keeping at most max_chars characters (too_long says more were there).
// Returns false at the end of the file. Reading by characters keeps a huge line from a huge string.
inline bool read_line(std::istream& in, std::string& line, std::size_t max_chars, bool& too_long) {
    line.clear();
    too_long = false;
    int c = in.get();
    if (c == EOF) return false;
    for (; c != EOF && c != '\n'; c = in.get()) {
        if (line.size() < max_chars) line += char(c);
        else too_long = true;
    }
    return true;
}

inline std::vector<std::vector<int>> read_train_data(std::istream& in, const DataConfig& d, const std::string& where) {
    std::vector<std::vector<int>> sequences;
    std::string line;
    bool too_long = false;
    for (long line_no = 1; read_line(in, line, 4096, too_long); line_no++) {
        std::string at = where + " line " + std::to_string(line_no);
        if (too_long) fail(at + ": longer than 4096 characters");
        std::vector<std::string> words = split_words(line);
        if (words.empty() || words[0][0] == '#') continue;
        if (long(sequences.size()) == MAX_TRAIN_LINES)
            fail(at + ": more than " + std::to_string(MAX_TRAIN_LINES) + " sequences");
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

inline std::vector<std::vector<int>> load_train_data(const std::string& path, const DataConfig& d) {
    std::string where = "--train-data " + path;
    std::ifstream in = open_input(path, where);
    return read_train_data(in, d, where);
}

// =============================================================================================
// 3. Checkpoints: --save and --load
// =============================================================================================
// The format, version 1. Plain text; words are separated by spaces and newlines, and a reader
// may treat every run of whitespace alike. First a header, one "key value" a line, every key
// present and in this order:
//
//   sorter-checkpoint 1        the magic word and the format version
//   vocab 11                   V = max_digit + 2 (PAD 0, digits 1..max_digit, START V - 1)
//   max_len 5                  longest sequence the positions cover, = seq_len
//   d_model 16
//   n_heads 2                  divides d_model
//   d_ff 32
//   enc_layers 1
//   dec_layers 1
//   norm pre                   pre | post
//   positions sinusoidal       sinusoidal | learned | none
//   activation relu            relu | gelu
//   embed_scale 1              1: embeddings are multiplied by sqrt(d_model); 0: they are not
//   task sort                  sort | copy | reverse
//   seq_len 5
//   min_len 5
//   max_digit 9
//   tensors 35                 how many tensors follow (35 for the default model)
//
// Then every learned tensor in the order of Transformer::parameters(): a line
//   tensor NAME ROWS COLS
// followed by ROWS lines of COLS values each, row by row, written with printf's "%.17g" so
// that every double reads back to exactly the same bits. The file ends with the word
//   end
// The sinusoidal table is not stored: it is computed from max_len and d_model.
inline void write_checkpoint(FILE* f, Transformer& model, const DataConfig& d) {
    const ModelConfig& c = model.config;
    std::fprintf(f, "sorter-checkpoint 1\n");
    std::fprintf(f, "vocab %d\nmax_len %d\nd_model %d\nn_heads %d\nd_ff %d\nenc_layers %d\ndec_layers %d\n",
                 c.vocab, c.max_len, c.d_model, c.n_heads, c.d_ff, c.enc_layers, c.dec_layers);
    std::fprintf(f, "norm %s\npositions %s\nactivation %s\nembed_scale %d\n", NORM_NAMES[int(c.norm)].c_str(),
                 POSITION_NAMES[int(c.positions)].c_str(), ACTIVATION_NAMES[int(c.activation)].c_str(),
                 c.embed_scale ? 1 : 0);
    std::fprintf(f, "task %s\nseq_len %d\nmin_len %d\nmax_digit %d\n", TASK_NAMES[int(d.task)].c_str(), d.seq_len,
                 d.min_len, d.max_digit);
    auto params = model.parameters();
    std::fprintf(f, "tensors %zu\n", params.size());
    for (auto& [name, p] : params) {
        const Matrix& m = p->value;
        std::fprintf(f, "tensor %s %d %d\n", name.c_str(), m.rows, m.cols);
        for (int r = 0; r < m.rows; r++)
            for (int col = 0; col < m.cols; col++)
                std::fprintf(f, "%.17g%c", m.at(r, col), col + 1 == m.cols ? '\n' : ' ');
    }
    std::fprintf(f, "end\n");
}

// Write a file atomically: everything goes to a temporary file in the same directory, which is
// flushed to the disk and then renamed over PATH. Rename replaces a file in one step, so a reader
// sees the old file or the whole new one; after a failed write the temporary is removed and
// PATH is left as it was.
template <typename WriteFn>
void write_atomically(const std::string& path, const std::string& flag, WriteFn write) {
    std::string tmp = path + ".tmp-" + std::to_string(long(getpid()));
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail(flag + " " + path + ": cannot write (" + std::strerror(errno) + ")");
    write(f);
    bool ok = !std::ferror(f) && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    ok = std::fclose(f) == 0 && ok;
    if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false;
    if (!ok) {
        if (!err) err = errno;
        std::remove(tmp.c_str());
        fail(flag + " " + path + ": cannot write (" + std::strerror(err) + ")");
    }
}

inline void save_checkpoint(const std::string& path, Transformer& model, const DataConfig& d) {
    // --load rejects nan and inf, so a diverged model is refused here rather than written unreadable.
    for (auto& [name, p] : model.parameters())
        for (double v : p->value.data)
            if (!std::isfinite(v))
                fail("--save " + path + ": tensor '" + name + "' holds nan or inf (training diverged); not saved");
    write_atomically(path, "--save", [&](FILE* f) { write_checkpoint(f, model, d); });
}

// Reads a checkpoint word by word. A word longer than 64 characters is an error, so a corrupt
// file cannot make the reader hold a huge string.
struct WordReader {
    std::istream& in;
    std::string where;  // "--load FILE", the start of every message
    int line = 1;

    [[noreturn]] void error(const std::string& what) const {
        fail(where + " line " + std::to_string(line) + ": " + what);
    }
    [[noreturn]] void header_error(const std::string& what) const {  // two header values disagree
        fail(where + " header: " + what);
    }
    std::string next() {  // "" at the end of the file
        int c;
        while ((c = in.peek()) != EOF && std::isspace(c)) {
            if (c == '\n') line++;
            in.get();
        }
        std::string w;
        while ((c = in.peek()) != EOF && !std::isspace(c)) {
            if (w.size() == 64) error("a word longer than 64 characters");
            w += char(in.get());
        }
        return w;
    }
    std::string expect(const std::string& what) {
        std::string w = next();
        if (w.empty()) error("the file ends early (truncated): expected " + what);
        return w;
    }
    void key(const std::string& k) {
        std::string w = expect("'" + k + "'");
        if (w != k) error("expected '" + k + "', found '" + w + "'");
    }
    long whole(const std::string& k, long lo, long hi) {
        key(k);
        std::string w = expect("the value of " + k);
        long v = 0;
        if (!parse_whole(w, lo, hi, v)) error(k + " " + w + ": expected " + range_text(lo, hi));
        return v;
    }
    int choice(const std::string& k, const std::vector<std::string>& names) {
        key(k);
        std::string w = expect("the value of " + k);
        int i = choice_index(w, names);
        if (i < 0) error(k + " " + w + ": expected one of " + join(names, ", "));
        return i;
    }
};

inline Transformer read_checkpoint(std::istream& in, const std::string& where, DataConfig& data) {
    WordReader r{in, where};
    std::string magic = r.next();
    if (magic != "sorter-checkpoint")
        r.error("not a sorter checkpoint (the first word should be 'sorter-checkpoint', found '" + magic + "')");
    std::string version = r.expect("the format version");
    if (version != "1") r.error("format version " + version + " is not supported (this program reads version 1)");

    ModelConfig c;
    DataConfig d;
    c.vocab = int(r.whole("vocab", 3, MAX_DIGIT + 2));
    c.max_len = int(r.whole("max_len", 1, MAX_SEQ_LEN));
    c.d_model = int(r.whole("d_model", 1, MAX_D_MODEL));
    c.n_heads = int(r.whole("n_heads", 1, MAX_HEADS));
    c.d_ff = int(r.whole("d_ff", 1, MAX_D_FF));
    c.enc_layers = int(r.whole("enc_layers", 1, MAX_LAYERS));
    c.dec_layers = int(r.whole("dec_layers", 1, MAX_LAYERS));
    c.norm = Norm(r.choice("norm", NORM_NAMES));
    c.positions = Positions(r.choice("positions", POSITION_NAMES));
    c.activation = Activation(r.choice("activation", ACTIVATION_NAMES));
    c.embed_scale = r.whole("embed_scale", 0, 1) == 1;
    d.task = Task(r.choice("task", TASK_NAMES));
    d.seq_len = int(r.whole("seq_len", 1, MAX_SEQ_LEN));
    d.min_len = int(r.whole("min_len", 1, MAX_SEQ_LEN));
    d.max_digit = int(r.whole("max_digit", 1, MAX_DIGIT));
    if (c.d_model % c.n_heads != 0)
        r.header_error("d_model " + std::to_string(c.d_model) + " is not a multiple of n_heads " + std::to_string(c.n_heads));
    if (d.min_len > d.seq_len)
        r.header_error("min_len " + std::to_string(d.min_len) + " is above seq_len " + std::to_string(d.seq_len));
    if (c.vocab != vocab_size(d))
        r.header_error("vocab " + std::to_string(c.vocab) + " does not match max_digit " + std::to_string(d.max_digit) +
                " (vocab = max_digit + 2)");
    if (c.max_len != d.seq_len)
        r.header_error("max_len " + std::to_string(c.max_len) + " does not match seq_len " + std::to_string(d.seq_len));
    long count = r.whole("tensors", 1, 1000);

    // Every size has passed the caps, so this allocation is bounded; the tensors in the file must
    // now match the model this header describes, name by name and shape by shape.
    Transformer model(c, 0);
    auto params = model.parameters();
    if (count != long(params.size()))
        r.error("the header lists " + std::to_string(count) + " tensors; this configuration has " +
                std::to_string(params.size()));
    auto is_known = [&](const std::string& name) {
        for (auto& p : params)
            if (p.first == name) return true;
        return false;
    };
    for (auto& [name, p] : params) {
        std::string w = r.next();
        if (w.empty()) r.error("the file ends early (truncated): tensor '" + name + "' is missing");
        if (w != "tensor") r.error("tensor '" + name + "' is missing (found '" + w + "' where it should start)");
        std::string got = r.expect("a tensor name");
        if (got != name)
            r.error(is_known(got) ? "tensor '" + name + "' is missing (found '" + got + "' in its place)"
                                  : "unknown tensor '" + got + "'");
        long rows = 0, cols = 0;
        std::string rw = r.expect("the rows of " + name), cw = r.expect("the columns of " + name);
        if (!parse_whole(rw, 0, 1000000000, rows) || !parse_whole(cw, 0, 1000000000, cols) ||
            rows != p->value.rows || cols != p->value.cols)
            r.error("tensor '" + name + "' has shape (" + rw + ", " + cw + "); this configuration needs (" +
                    std::to_string(p->value.rows) + ", " + std::to_string(p->value.cols) + ")");
        std::size_t n = p->value.data.size();
        for (std::size_t i = 0; i < n; i++) {
            std::string v = r.next();
            if (v.empty())
                r.error("the file ends early (truncated): tensor '" + name + "' has " + std::to_string(i) + " of its " +
                        std::to_string(n) + " values");
            bool ok = parse_finite(v, p->value.data[i]);
            if (!ok && in.peek() == EOF) r.error("the file ends early (truncated) inside tensor '" + name + "'");
            if (!ok)
                r.error("tensor '" + name + "' value " + std::to_string(i) + ": '" + v + "' is not a finite number");
        }
    }
    std::string w = r.next();
    if (w.empty()) r.error("the file ends early (truncated): expected 'end'");
    if (w == "tensor") r.error("unknown tensor '" + r.next() + "' after the last one this configuration has");
    if (w != "end") r.error("expected 'end' after the last tensor, found '" + w + "'");
    w = r.next();
    if (!w.empty()) r.error("unexpected '" + w + "' after 'end'");
    data = d;
    return model;
}

inline Transformer load_checkpoint(const std::string& path, DataConfig& data) {
    std::string where = "--load " + path;
    std::ifstream in = open_input(path, where);
    return read_checkpoint(in, where, data);
}

// =============================================================================================
// 4. Terminal pictures
// =============================================================================================
inline std::string token_name(int token, const ModelConfig& c) {
    if (token == PAD) return "_";
    if (token == start_token(c)) return "S";
    return std::to_string(token);
}
inline std::vector<std::string> token_names(const std::vector<int>& tokens, const ModelConfig& c) {
    std::vector<std::string> names;
    for (int t : tokens) names.push_back(token_name(t, c));
    return names;
}
inline std::string digits_text(const std::vector<int>& tokens, const ModelConfig& c) {  // "[3, 1, _]"
    return "[" + join(token_names(tokens, c), ", ") + "]";
}

// Ten shades from empty to full. A cell shows where its value sits between lo and hi.
constexpr char SHADES[] = " .:-=+*#%@";
inline char shade(double v, double lo, double hi) {
    double t = hi > lo ? (v - lo) / (hi - lo) : 0.0;
    return SHADES[std::lround(std::clamp(t, 0.0, 1.0) * 9.0)];
}

inline void print_heatmap(const std::string& title, const Matrix& m, const std::vector<std::string>& rows,
                          const std::vector<std::string>& cols, double lo, double hi, bool numbers) {
    std::printf("%s\n%5s", title.c_str(), "");
    for (const std::string& c : cols) std::printf("%3s", c.c_str());
    std::printf("\n");
    for (int r = 0; r < m.rows; r++) {
        std::printf("%5s", rows[r].c_str());
        for (int c = 0; c < m.cols; c++) {
            char s = shade(m.at(r, c), lo, hi);
            std::printf(" %c%c", s, s);
        }
        std::printf("\n");
    }
    if (!numbers) return;
    std::printf("%5s", "");
    for (const std::string& c : cols) std::printf("%6s", c.c_str());
    std::printf("\n");
    for (int r = 0; r < m.rows; r++) {
        std::printf("%5s", rows[r].c_str());
        for (int c = 0; c < m.cols; c++) std::printf(" %5.2f", m.at(r, c));
        std::printf("\n");
    }
}

// One attention map: the weights P of one head of one layer, with the tokens on each side.
struct AttentionMap {
    std::string layer;  // e.g. "decoder.0 cross-attention"
    int head = 0;
    Matrix P;           // (queries, keys)
    std::vector<std::string> queries, keys;
};

// What the decoder reads while it answers: START, then its own greedy output shifted right.
inline std::vector<int> decoder_input(Transformer& model, const std::vector<int>& guess) {
    std::vector<int> in = {start_token(model.config)};
    in.insert(in.end(), guess.begin(), guess.end() - 1);
    return in;
}

// Run one forward pass and collect every head's map from the caches it saved.
inline std::vector<AttentionMap> attention_maps(Transformer& model, const std::vector<int>& source,
                                                const std::vector<int>& dec_in) {
    model.forward(source, dec_in);
    std::vector<std::string> src = token_names(source, model.config), dec = token_names(dec_in, model.config);
    std::vector<AttentionMap> maps;
    auto add = [&](const std::string& layer, const MultiHeadAttention& m, const std::vector<std::string>& q,
                   const std::vector<std::string>& k) {
        for (int h = 0; h < m.n_heads; h++) maps.push_back({layer, h, m.heads[h].P, q, k});
    };
    for (std::size_t i = 0; i < model.encoder.size(); i++)
        add("encoder." + std::to_string(i) + " self-attention", model.encoder[i].self_attn, src, src);
    for (std::size_t i = 0; i < model.decoder.size(); i++) {
        add("decoder." + std::to_string(i) + " causal self-attention", model.decoder[i].self_attn, dec, dec);
        add("decoder." + std::to_string(i) + " cross-attention", model.decoder[i].cross_attn, dec, src);
    }
    return maps;
}

inline void print_attention(const std::vector<AttentionMap>& maps, bool numbers) {
    std::printf("shades '%s' run from weight 0 to 1; rows are queries, columns are keys; "
                "S = START, _ = PAD\n", SHADES);
    for (const AttentionMap& m : maps) {
        std::printf("\n");
        print_heatmap(m.layer + ", head " + std::to_string(m.head), m.P, m.queries, m.keys, 0.0, 1.0, numbers);
    }
}

// The position table the model adds to its embeddings (nothing to show for --pos none).
inline void print_positions(Transformer& model, bool numbers) {
    const Matrix* P = model.embed.position_rows();
    std::printf("--- positional encoding (%s) ---\n", POSITION_NAMES[int(model.config.positions)].c_str());
    if (!P) {
        std::printf("none: with --pos none the model adds nothing, so it sees its input as a bag of tokens\n");
        return;
    }
    double bound = 0.0;
    for (double v : P->data) bound = std::max(bound, std::fabs(v));
    std::printf("rows: positions 0..%d, columns: the d_model = %d dimensions; shades '%s' run from %.2f to %.2f\n\n",
                P->rows - 1, P->cols, SHADES, -bound, bound);
    std::vector<std::string> rows, cols;
    for (int r = 0; r < P->rows; r++) rows.push_back(std::to_string(r));
    for (int c = 0; c < P->cols; c++) cols.push_back(std::to_string(c));
    print_heatmap("position x dimension", *P, rows, cols, -bound, bound, numbers);
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
            lo = any ? std::min(lo, v) : v;
            hi = any ? std::max(hi, v) : v;
            any = true;
        }
    return any;
}

// The training loss, one point a column, on a log scale: the loss falls by orders of magnitude,
// and a straight scale would flatten everything after the first drop.
inline void print_loss_plot(const std::vector<double>& losses) {
    if (losses.empty()) return;
    const int height = 10;
    int width = std::min<int>(60, int(losses.size()));
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
        double level = hi - (hi - lo) * row / (height - 1);  // this row's value, in log10
        if (row == 0 || row == height / 2 || row == height - 1) std::printf("%9.4f |", std::pow(10.0, level));
        else std::printf("%9s |", "");
        std::string points(width, ' ');
        for (int c = 0; c < width; c++)  // a nan column (diverged) stays empty
            if (std::isfinite(column[c]) && std::lround((hi - column[c]) / (hi - lo) * (height - 1)) == row)
                points[c] = '*';
        points.erase(points.find_last_not_of(' ') + 1);
        std::printf("%s\n", points.c_str());
    }
    std::string last = std::to_string(losses.size());
    std::printf("%9s +%s\n", "", std::string(width, '-').c_str());
    std::printf("%9s  1%*s   (step)\n", "", std::max(1, width - 1), last.c_str());
}

// =============================================================================================
// 5. Looking inside: --trace-shapes and --params
// =============================================================================================
inline std::string shape_text(int rows, int cols) {
    return "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
}
inline std::string shape_text(const Matrix& m) { return shape_text(m.rows, m.cols); }

// One forward pass, then a walk through the activations every block saved for its backward, in
// the order the forward made them. No line of the forward is repeated here: each shape is read
// from a saved matrix (or, for the few products not saved, from the two shapes that made it).
inline void trace_shapes(Transformer& model, const Example& e) {
    const ModelConfig& c = model.config;
    Matrix logits = model.forward(e.source, e.target_in);
    int d_k = c.d_model / c.n_heads;
    std::printf("--- shapes on one forward pass ---\n");
    std::printf("S = %zu, T = %zu, d_model = %d, n_heads = %d, d_k = %d, d_ff = %d, V = %d\n\n", e.source.size(),
                e.target_in.size(), c.d_model, c.n_heads, d_k, c.d_ff, c.vocab);
    auto line = [](const std::string& what, const std::string& legend, const std::string& numbers) {
        std::printf("  %-50s %-30s %s\n", what.c_str(), legend.c_str(), numbers.c_str());
    };
    bool pre = c.norm == Norm::pre;
    auto attention = [&](const MultiHeadAttention& m, const char* q, const char* kv) {
        std::string Q = q, K = kv;
        line(pre ? "queries read LN(x)" : "queries read x", "(" + Q + ", d_model)", shape_text(m.W_q.x));
        line("keys and values read", "(" + K + ", d_model)", shape_text(m.W_k.x));
        line("W_q, W_k, W_v (each)", "(d_model, d_model)", shape_text(m.W_q.W.value));
        line("Q = x W_q", "(" + Q + ", d_model)", shape_text(m.W_q.x.rows, m.W_q.W.value.cols));
        line("K = x W_k, V = x W_v", "(" + K + ", d_model)", shape_text(m.W_k.x.rows, m.W_k.W.value.cols));
        line("one head's Q_h (columns h*d_k ..)", "(" + Q + ", d_k)", shape_text(m.heads[0].Q));
        line("one head's K_h, V_h", "(" + K + ", d_k)", shape_text(m.heads[0].K));
        line("P_h = softmax(Q_h K_h^T / sqrt(d_k) + mask)", "(" + Q + ", " + K + ")", shape_text(m.heads[0].P));
        line("P_h V_h", "(" + Q + ", d_k)", shape_text(m.heads[0].P.rows, m.heads[0].V.cols));
        line("n_heads heads joined side by side", "(" + Q + ", d_model)", shape_text(m.W_o.x));
        line("joined W_o, added to the residual", "(" + Q + ", d_model)", shape_text(m.W_o.x.rows, m.W_o.W.value.cols));
    };
    auto feed_forward = [&](const FeedForward& f, const char* n) {
        std::string N = n;
        line(pre ? "reads LN(x)" : "reads x", "(" + N + ", d_model)", shape_text(f.layer1.x));
        line("W_1, b_1", "(d_model, d_ff), (1, d_ff)", shape_text(f.layer1.W.value) + ", " + shape_text(f.layer1.b.value));
        line("hidden = x W_1 + b_1", "(" + N + ", d_ff)", shape_text(f.hidden));
        line(std::string(c.activation == Activation::relu ? "relu" : "gelu") + "(hidden)", "(" + N + ", d_ff)",
             shape_text(f.layer2.x));
        line("W_2, b_2", "(d_ff, d_model), (1, d_model)", shape_text(f.layer2.W.value) + ", " + shape_text(f.layer2.b.value));
        line("out = act(hidden) W_2 + b_2, added to the residual", "(" + N + ", d_model)",
             shape_text(f.layer2.x.rows, f.layer2.W.value.cols));
    };

    std::printf("  %-50s %-30s %s\n", "tensor", "legend", "this run");
    std::printf("encoder input\n");
    line("source tokens", "(S)", "(" + std::to_string(e.source.size()) + ")");
    line("embedding table", "(V, d_model)", shape_text(model.embed.table.value));
    if (const Matrix* P = model.embed.position_rows()) line("position table", "(max_len, d_model)", shape_text(*P));
    line("x = table[source] * scale + positions", "(S, d_model)", shape_text(model.encoder[0].self_attn.W_k.x));
    for (std::size_t i = 0; i < model.encoder.size(); i++) {
        std::printf("encoder.%zu self-attention (padding mask (S, S))\n", i);
        attention(model.encoder[i].self_attn, "S", "S");
        std::printf("encoder.%zu feed-forward\n", i);
        feed_forward(model.encoder[i].ffn, "S");
    }
    std::printf("decoder input\n");
    line("memory = the last encoder block's output", "(S, d_model)", shape_text(model.decoder[0].cross_attn.W_k.x));
    line("decoder input tokens: START, target[0 .. T-2]", "(T)", "(" + std::to_string(e.target_in.size()) + ")");
    line("y = table[decoder input] * scale + positions", "(T, d_model)",
         shape_text(model.decoder[0].self_attn.W_k.x));
    for (std::size_t i = 0; i < model.decoder.size(); i++) {
        std::printf("decoder.%zu causal self-attention (causal mask (T, T))\n", i);
        attention(model.decoder[i].self_attn, "T", "T");
        std::printf("decoder.%zu cross-attention (queries from the decoder, keys and values from the memory)\n", i);
        attention(model.decoder[i].cross_attn, "T", "S");
        std::printf("decoder.%zu feed-forward\n", i);
        feed_forward(model.decoder[i].ffn, "T");
    }
    std::printf("output\n");
    line("final LayerNorm", "(T, d_model)", shape_text(model.final_norm.x_hat));
    line("W_out, b_out", "(d_model, V), (1, V)", shape_text(model.out.W.value) + ", " + shape_text(model.out.b.value));
    line("logits = LN(y) W_out + b_out", "(T, V)", shape_text(logits));
}

// Parameter counts, grouped by block: "encoder.0.self_attn.W_q" counts for encoder.0, and inside
// it for self_attn. Everything is read from Transformer::parameters().
inline void print_params(Transformer& model) {
    const ModelConfig& c = model.config;
    struct Group {
        std::string block;
        long total = 0;
        std::vector<std::pair<std::string, long>> parts;
    };
    std::vector<Group> groups;
    long total = 0;
    for (auto& [name, p] : model.parameters()) {
        std::size_t dot1 = name.find('.');
        bool layered = name.rfind("encoder.", 0) == 0 || name.rfind("decoder.", 0) == 0;
        std::size_t end = layered ? name.find('.', dot1 + 1) : dot1;
        std::string block = name.substr(0, end), rest = name.substr(end + 1);
        std::string part = rest.substr(0, rest.find('.'));
        if (part.rfind("norm", 0) == 0) part = "LayerNorms";
        if (!layered) part = rest;
        long n = long(p->value.data.size());
        if (groups.empty() || groups.back().block != block) groups.push_back({block, 0, {}});
        Group& g = groups.back();
        g.total += n;
        total += n;
        bool found = false;
        for (auto& pr : g.parts)
            if (pr.first == part) pr.second += n, found = true;
        if (!found) g.parts.push_back({part, n});
    }
    std::printf("--- parameters (d_model %d, n_heads %d, d_ff %d, V %d, layers %d+%d) ---\n", c.d_model, c.n_heads,
                c.d_ff, c.vocab, c.enc_layers, c.dec_layers);
    for (const Group& g : groups) {
        std::string parts;
        for (auto& pr : g.parts) parts += (parts.empty() ? "" : ", ") + pr.first + " " + std::to_string(pr.second);
        std::printf("  %-12s %9ld   %s\n", g.block.c_str(), g.total, parts.c_str());
    }
    std::printf("  %-12s %9ld\n", "total", total);
}

// =============================================================================================
// 6. SVG pictures
// =============================================================================================
// SVG is text: a <svg> element holding rectangles, lines and text at pixel coordinates.
inline std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
}
inline std::string svg_escape(const std::string& s) {
    std::string out;
    for (char ch : s) {
        if (ch == '&') out += "&amp;";
        else if (ch == '<') out += "&lt;";
        else if (ch == '>') out += "&gt;";
        else if (ch == '"') out += "&quot;";
        else out += ch;
    }
    return out;
}
inline std::string svg_rect(double x, double y, double w, double h, const std::string& fill) {
    return "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
           "\" fill=\"" + fill + "\"/>\n";
}
inline std::string svg_text(double x, double y, const std::string& text, int size = 12,
                            const std::string& anchor = "middle", const std::string& fill = "#222") {
    return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + std::to_string(size) +
           "\" text-anchor=\"" + anchor + "\" fill=\"" + fill + "\">" + svg_escape(text) + "</text>\n";
}
inline std::string svg_line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1) {
    return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) +
           "\" stroke=\"" + stroke + "\" stroke-width=\"" + num(width) + "\"/>\n";
}
inline std::string svg_document(double width, double height, const std::string& body) {
    return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
           "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\" font-family=\"sans-serif\">\n" +
           svg_rect(0, 0, width, height, "white") + body + "</svg>\n";
}
inline std::string rgb(double r, double g, double b) {
    return "rgb(" + std::to_string(int(std::lround(r))) + "," + std::to_string(int(std::lround(g))) + "," +
           std::to_string(int(std::lround(b))) + ")";
}
// t in [0, 1]: white to dark blue. t in [-1, 1] (diverging): blue, white at 0, red.
inline std::string color_for(double t, bool diverging) {
    t = std::clamp(t, diverging ? -1.0 : 0.0, 1.0);
    if (!diverging) return rgb(255 - t * (255 - 8), 255 - t * (255 - 48), 255 - t * (255 - 107));
    if (t >= 0) return rgb(255 - t * (255 - 178), 255 - t * (255 - 24), 255 - t * (255 - 43));
    return rgb(255 + t * (255 - 33), 255 + t * (255 - 102), 255 + t * (255 - 172));
}

// One heatmap with its title and labels, its top-left corner at (x, y). Values are divided by
// `bound` to get the colour. Returns the SVG text; size() gives the room it takes.
struct SvgHeatmap {
    double cell = 30, label = 28, title = 20;
    double width(const Matrix& m) const { return label + m.cols * cell; }
    double height(const Matrix& m) const { return title + label + m.rows * cell; }
    std::string draw(double x, double y, const std::string& name, const Matrix& m, const std::vector<std::string>& rows,
                     const std::vector<std::string>& cols, double bound, bool diverging, bool numbers) const {
        std::string s = svg_text(x, y + 14, name, 13, "start");
        double top = y + title + label, left = x + label;
        for (int c = 0; c < m.cols; c++) s += svg_text(left + (c + 0.5) * cell, top - 8, cols[c], 11);
        for (int r = 0; r < m.rows; r++) {
            s += svg_text(left - 6, top + (r + 0.5) * cell + 4, rows[r], 11, "end");
            for (int c = 0; c < m.cols; c++) {
                double t = m.at(r, c) / bound;
                s += svg_rect(left + c * cell, top + r * cell, cell, cell, color_for(t, diverging));
                if (numbers) {
                    char buf[16];
                    std::snprintf(buf, sizeof buf, "%.2f", m.at(r, c));
                    s += svg_text(left + (c + 0.5) * cell, top + (r + 0.5) * cell + 3, buf, 9, "middle",
                                  std::fabs(t) > 0.55 ? "white" : "#222");
                }
            }
        }
        return s;
    }
};

inline std::string attention_svg(const std::vector<AttentionMap>& maps, int n_heads, const std::string& caption) {
    SvgHeatmap hm;
    const Matrix& first = maps.front().P;
    double gap = 30, panel_w = std::max(hm.width(first) + gap, 290.0), panel_h = hm.height(first) + gap;
    int layers = int(maps.size()) / n_heads;
    double width = std::max(40 + n_heads * panel_w, 560.0), height = 70 + layers * panel_h;
    std::string body = svg_text(20, 24, caption, 15, "start") +
                       svg_text(20, 44, "rows: queries, columns: keys; darker blue = more weight (0 to 1); "
                                        "S = START, _ = PAD", 12, "start", "#555");
    for (std::size_t i = 0; i < maps.size(); i++) {
        const AttentionMap& m = maps[i];
        double x = 20 + (i % n_heads) * panel_w, y = 60 + (i / n_heads) * panel_h;
        body += hm.draw(x, y, m.layer + ", head " + std::to_string(m.head), m.P, m.queries, m.keys, 1.0, false,
                        m.P.cols <= 12);
    }
    return svg_document(width, height, body);
}

inline std::string positions_svg(const Matrix& P, const std::string& kind) {
    SvgHeatmap hm;
    hm.cell = P.cols > 32 ? 8 : 22;
    double bound = 1e-12;
    for (double v : P.data) bound = std::max(bound, std::fabs(v));
    std::vector<std::string> rows, cols;
    for (int r = 0; r < P.rows; r++) rows.push_back(std::to_string(r));
    for (int c = 0; c < P.cols; c++) cols.push_back(P.cols > 32 && c % 8 ? "" : std::to_string(c));
    double width = std::max(40 + hm.width(P), 660.0), height = 80 + hm.height(P);
    char range[96];
    std::snprintf(range, sizeof range, "blue = %.2f, white = 0, red = +%.2f", -bound, bound);
    std::string body = svg_text(20, 24, "Positional encoding (" + kind + "): rows = positions, columns = dimensions", 15,
                                "start") +
                       svg_text(20, 44, range, 12, "start", "#555") +
                       hm.draw(20, 56, "position x dimension", P, rows, cols, bound, true, false);
    return svg_document(width, height, body);
}

struct EvalPoint {
    long step;
    double loss, exact, token;  // mean training loss since the last evaluation; held-out shares
};
struct History {
    std::vector<double> losses;    // every step's mini-batch loss
    std::vector<EvalPoint> evals;  // every --eval-every steps, and the last step
};

// Two charts side by side: the training loss (log scale) and the held-out accuracy, over steps.
inline std::string training_svg(const History& h) {
    const double pw = 400, ph = 240, left = 70, top = 60;  // one plot area, and where the first starts
    std::string body = svg_text(20, 24, "Training: loss (left, log scale) and held-out accuracy (right)", 15, "start");
    long steps = long(h.losses.size());
    auto x_of = [&](double step, double x0) { return x0 + pw * (steps > 1 ? (step - 1) / double(steps - 1) : 0.0); };
    // Loss: at most 400 points, each the mean over its stretch of steps; nan stretches are skipped.
    int points = std::min<int>(400, int(h.losses.size()));
    std::vector<double> ys = log_loss_points(h.losses, points);
    double lo = 0.0, hi = 0.0;
    if (!finite_range(ys, lo, hi)) body += svg_text(left + pw / 2, top + ph / 2, "loss not finite (diverged)", 12);
    lo = std::floor(lo);
    hi = std::ceil(hi);
    if (hi <= lo) hi = lo + 1;
    auto y_loss = [&](double v) { return top + ph * (hi - v) / (hi - lo); };
    for (double decade = lo; decade <= hi; decade++) {
        body += svg_line(left, y_loss(decade), left + pw, y_loss(decade), "#ddd");
        char label[32];
        std::snprintf(label, sizeof label, "%g", std::pow(10.0, decade));
        body += svg_text(left - 6, y_loss(decade) + 4, label, 11, "end");
    }
    std::string pts;
    for (int i = 0; i < points; i++) {
        double step = double(h.losses.size() * i / points + h.losses.size() * (i + 1) / points + 1) / 2.0;
        if (std::isfinite(ys[i])) pts += num(x_of(step, left)) + "," + num(y_loss(ys[i])) + " ";
    }
    body += "<polyline fill=\"none\" stroke=\"rgb(178,24,43)\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n";
    body += svg_text(left + pw / 2, top - 10, "training loss (mean per stretch of steps)", 12);

    // Accuracy, in percent, at each evaluation.
    double left2 = left + pw + 90;
    auto y_acc = [&](double share) { return top + ph * (1.0 - share); };
    for (int p = 0; p <= 100; p += 25) {
        body += svg_line(left2, y_acc(p / 100.0), left2 + pw, y_acc(p / 100.0), "#ddd");
        body += svg_text(left2 - 6, y_acc(p / 100.0) + 4, std::to_string(p) + "%", 11, "end");
    }
    std::string exact, token;
    for (const EvalPoint& e : h.evals) {
        exact += num(x_of(double(e.step), left2)) + "," + num(y_acc(e.exact)) + " ";
        token += num(x_of(double(e.step), left2)) + "," + num(y_acc(e.token)) + " ";
        body += "<circle cx=\"" + num(x_of(double(e.step), left2)) + "\" cy=\"" + num(y_acc(e.exact)) +
                "\" r=\"3\" fill=\"rgb(8,48,107)\"/>\n";
    }
    body += "<polyline fill=\"none\" stroke=\"rgb(8,48,107)\" stroke-width=\"2\" points=\"" + exact + "\"/>\n";
    body += "<polyline fill=\"none\" stroke=\"rgb(107,174,214)\" stroke-width=\"2\" stroke-dasharray=\"5,3\" points=\"" +
            token + "\"/>\n";
    body += svg_text(left2 + pw / 2, top - 10, "held-out: exact-match (solid), token-accuracy (dashed)", 12);

    for (double x0 : {left, left2}) {  // axes and step labels under both charts
        body += svg_line(x0, top, x0, top + ph, "#444") + svg_line(x0, top + ph, x0 + pw, top + ph, "#444");
        body += svg_text(x0, top + ph + 18, "1", 11) + svg_text(x0 + pw, top + ph + 18, std::to_string(steps), 11) +
                svg_text(x0 + pw / 2, top + ph + 34, "step", 12);
    }
    return svg_document(left2 + pw + 30, top + ph + 50, body);
}

inline void write_svg(const std::string& dir, const std::string& name, const std::string& svg) {
    std::string path = (std::filesystem::path(dir) / name).string();
    write_atomically(path, "--svg", [&](FILE* f) { std::fputs(svg.c_str(), f); });
    std::printf("wrote %s\n", path.c_str());
}

// Every picture that applies: attention maps for one example, the position table (unless
// --pos none), and the training curves when there was training.
inline void write_pictures(const std::string& dir, Transformer& model, const std::vector<int>& source,
                           const History* history) {
    std::vector<int> output = greedy_decode(model, source, int(source.size()));
    std::vector<int> dec_in = decoder_input(model, output);
    write_svg(dir, "attention.svg",
              attention_svg(attention_maps(model, source, dec_in), model.config.n_heads,
                            "Attention maps: input " + digits_text(source, model.config) + ", output " +
                                digits_text(output, model.config)));
    if (const Matrix* P = model.embed.position_rows())
        write_svg(dir, "pe.svg", positions_svg(*P, POSITION_NAMES[int(model.config.positions)]));
    if (history && !history->losses.empty()) write_svg(dir, "training.svg", training_svg(*history));
}

// =============================================================================================
// 7. Demonstrations for the exercises: the sqrt(d_k) scale and the max subtraction in softmax
// =============================================================================================
// Scores q.k of random unit-variance vectors have variance d_k. Without the 1/sqrt(d_k) scale,
// large d_k pushes softmax to one-hot: the top weight nears 1 and the gradient through softmax
// (its Jacobian-vector product, as in matrix.hpp) nears 0, so attention stops learning.
inline void demo_scale() {
    const int keys = 8, draws = 2000;
    std::printf("--- why attention divides its scores by sqrt(d_k) ---\n");
    std::printf("one query against %d keys, entries drawn with mean 0 and variance 1, %d draws per row;\n", keys, draws);
    std::printf("'top weight' is the largest softmax weight, 'grad' the size of the gradient that softmax\n");
    std::printf("passes back for a random upstream gradient (both are means over the draws)\n\n");
    std::printf("%6s  %9s  %12s  %12s  %12s  %12s\n", "d_k", "std(q.k)", "top, scaled", "top, raw", "grad, scaled",
                "grad, raw");
    Rng rng(7);
    const double a = std::sqrt(3.0);  // U(-a, a) has variance 1
    for (int d_k : {1, 4, 16, 64, 256, 1024}) {
        double sum_sq = 0, top[2] = {0, 0}, grad[2] = {0, 0};
        for (int n = 0; n < draws; n++) {
            Matrix q(1, d_k), K(keys, d_k), G(1, keys);
            for (double& v : q.data) v = rng.uniform(-a, a);
            for (double& v : K.data) v = rng.uniform(-a, a);
            for (double& v : G.data) v = rng.uniform(-a, a);
            Matrix raw = matmul(q, transpose(K));  // (1, keys)
            for (double v : raw.data) sum_sq += v * v / keys;
            for (int which = 0; which < 2; which++) {
                Matrix P = softmax_rows(which == 0 ? scale(raw, 1.0 / std::sqrt(double(d_k))) : raw);
                Matrix dS(1, keys);
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
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
}

// softmax as written in a textbook, exp(s) / sum exp(s), with no max subtracted.
inline std::vector<double> naive_softmax(const std::vector<double>& s) {
    std::vector<double> p(s.size());
    double sum = 0;
    for (std::size_t i = 0; i < s.size(); i++) sum += p[i] = std::exp(s[i]);
    for (double& v : p) v /= sum;
    return p;
}

inline void demo_softmax() {
    std::printf("--- why softmax subtracts the row max before exp ---\n");
    std::printf("exp overflows to inf above about 709.78 and underflows to 0 below about -745\n\n");
    struct Row {
        const char* what;
        std::vector<double> scores;
    };
    std::vector<Row> rows = {{"small scores", {1, 2, 3}},
                             {"large scores (an unscaled dot product)", {1000, 999, 998}},
                             {"very negative scores", {-1000, -1001, -1002}},
                             {"every key masked with -1e9", {MASKED, MASKED, MASKED}}};
    for (const Row& r : rows) {
        Matrix S(1, int(r.scores.size()));
        S.data = r.scores;
        std::vector<double> naive = naive_softmax(r.scores);
        Matrix stable = softmax_rows(S);
        std::string scores, a, b;
        for (std::size_t i = 0; i < r.scores.size(); i++) {
            scores += (i ? ", " : "") + std::to_string(long(r.scores[i]));
            a += (i ? ", " : "") + number_text(naive[i]);
            b += (i ? ", " : "") + number_text(stable.data[i]);
        }
        std::printf("%s: scores [%s]\n", r.what, scores.c_str());
        std::printf("  exp(s) / sum exp(s)         [%s]\n", a.c_str());
        std::printf("  after subtracting the max   [%s]\n\n", b.c_str());
    }
    std::printf("one nan weight makes its head's output nan, then every logit, the loss, every gradient,\n"
                "and after one SGD step every parameter: the whole model is lost.\n");
}

// =============================================================================================
// 8. The training run
// =============================================================================================
inline void show_examples(const char* title, Transformer& model, const std::vector<Example>& shown) {
    std::printf("--- %s ---\n", title);
    for (const Example& e : shown) {
        std::vector<int> guess = greedy_decode(model, e.source, int(e.target.size()));
        std::printf("  input %s   pred %s   true %s%s\n", digits_text(e.source, model.config).c_str(),
                    digits_text(guess, model.config).c_str(), digits_text(e.target, model.config).c_str(),
                    guess == e.target ? "   ok" : "");
    }
}

// Three held-out inputs to watch, the first with repeated digits.
inline std::vector<Example> watched_examples(const Dataset& data) {
    std::vector<Example> shown;
    for (const Example& e : data.held_out) {
        std::vector<int> s;  // the source's digits, PAD left out, sorted so repeats sit side by side
        for (int token : e.source)
            if (token != PAD) s.push_back(token);
        std::sort(s.begin(), s.end());
        bool repeats = std::adjacent_find(s.begin(), s.end()) != s.end();
        if (repeats || !shown.empty()) shown.push_back(e);  // the first one shown has a repeated digit
        if (shown.size() == 3) break;
    }
    return shown;
}

// The settings that differ from the defaults, for one line under the header ("" when none do).
inline std::string variant_text(const Options& o, std::size_t pool_size) {
    std::vector<std::string> v;
    ModelConfig m;
    DataConfig d;
    if (o.data.task != d.task) v.push_back("task " + TASK_NAMES[int(o.data.task)]);
    if (o.data.min_len != o.data.seq_len) v.push_back("min_len " + std::to_string(o.data.min_len));
    if (o.data.max_digit != d.max_digit) v.push_back("max_digit " + std::to_string(o.data.max_digit));
    if (o.model.norm != m.norm) v.push_back("post-norm");
    if (o.model.positions != m.positions) v.push_back(POSITION_NAMES[int(o.model.positions)] + " positions");
    if (o.model.activation != m.activation) v.push_back("gelu");
    if (!o.model.embed_scale) v.push_back("no embedding scale");
    if (pool_size) v.push_back("training data: " + std::to_string(pool_size) + " sequences from " + o.train_data_path);
    return join(v, ", ");
}

// printf writes a NaN whose sign bit is set as "-nan"; a diverged loss should read "nan" every time.
inline double plain_nan(double v) { return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v; }

inline History train_and_report(const Options& o, Dataset& data, Transformer& model) {
    Rng rng(o.seed ^ 0x5eedULL);
    std::vector<Example> shown = watched_examples(data);
    History history;

    std::printf("sorter: d_model %d, heads %d, d_ff %d, layers %d+%d, seq_len %d | "
                "SGD lr %g, batch %d, steps %ld, seed %llu\n",
                o.model.d_model, o.model.n_heads, o.model.d_ff, o.model.enc_layers, o.model.dec_layers,
                o.data.seq_len, o.lr, o.batch, o.steps, (unsigned long long)o.seed);
    std::string variant = variant_text(o, data.train_pool.size());
    if (!variant.empty()) std::printf("variant: %s\n", variant.c_str());
    std::printf("held-out: %zu sequences that training never draws\n\n", data.held_out.size());
    show_examples("before training", model, shown);
    std::printf("\n%8s  %8s  %12s  %14s\n", "step", "loss", "exact-match", "token-accuracy");

    double train_seconds = 0.0, recent_loss = 0.0;
    long loss_count = 0;
    double last_loss = std::numeric_limits<double>::quiet_NaN();  // no loss measured before training
    std::vector<Example> batch(o.batch);
    for (long step = 1; step <= o.steps; step++) {
        auto t0 = std::chrono::steady_clock::now();
        for (Example& e : batch) e = data.sample(rng);
        double loss = train_step(model, batch, o.lr);
        recent_loss += loss;
        loss_count++;
        train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        history.losses.push_back(loss);

        if (step % o.eval_every == 0 || step == o.steps) {
            last_loss = recent_loss / loss_count;
            recent_loss = 0.0, loss_count = 0;
            Accuracy a = evaluate(model, data.held_out);
            history.evals.push_back({step, last_loss, a.exact, a.token});
            std::printf("%8ld  %8.4f  %11.1f%%  %13.1f%%\n", step, plain_nan(last_loss), 100 * a.exact,
                        100 * a.token);
        }
        if (step == o.steps / 2) {
            std::printf("\n");
            show_examples(("step " + std::to_string(step)).c_str(), model, shown);
            std::printf("\n");
        }
    }
    if (!history.losses.empty()) {
        std::printf("\n");
        print_loss_plot(history.losses);
    }
    Accuracy a = evaluate(model, data.held_out);
    std::printf("\n");
    show_examples("after training", model, shown);
    std::printf("\nfinal: exact-match %.1f%% (%d/%d), token-accuracy %.1f%%, loss %.4f, train-time %.1f s\n",
                100 * a.exact, a.exact_count, a.total, 100 * a.token, plain_nan(last_loss), train_seconds);
    return history;
}

// =============================================================================================
// 9. main()
// =============================================================================================
inline void check_output_paths(const Options& o) {  // before training, so a typo costs no time
    std::error_code ec;
    if (!o.svg_dir.empty() && !std::filesystem::exists(o.svg_dir, ec))
        fail("--svg " + o.svg_dir + ": no such directory (create it first, e.g. mkdir -p " + o.svg_dir + ")");
    if (!o.svg_dir.empty() && !std::filesystem::is_directory(o.svg_dir, ec))
        fail("--svg " + o.svg_dir + ": not a directory");
    if (!o.save_path.empty()) {
        std::filesystem::path dir = std::filesystem::path(o.save_path).parent_path();
        if (dir.empty()) dir = ".";
        if (!std::filesystem::is_directory(dir, ec))
            fail("--save " + o.save_path + ": the directory " + dir.string() + " does not exist");
        if (std::filesystem::is_directory(o.save_path, ec)) fail("--save " + o.save_path + ": is a directory");
    }
}

int run_bench(const Options& o);  // the last section of this file

inline int run(const Options& options) {
    Options o = options;
    if (o.help) {
        print_help();
        return 0;
    }
    if (o.bench) return run_bench(o);
    if (!o.demo.empty()) {
        if (o.demo == "scale") demo_scale();
        else demo_softmax();
        return 0;
    }
    check_output_paths(o);

    Transformer model;
    if (!o.load_path.empty()) {
        model = load_checkpoint(o.load_path, o.data);
        o.model = model.config;
    } else {
        model = Transformer(o.model, o.seed);
    }
    std::vector<std::vector<int>> pool;
    if (!o.train_data_path.empty()) pool = load_train_data(o.train_data_path, o.data);
    std::vector<int> digits;
    if (!o.sort_words.empty()) digits = parse_sequence(o.sort_words, o.data, "--sort " + join(o.sort_words, " "));

    // The example every picture uses: the --sort digits, or one fixed made-up input.
    Rng example_rng(o.seed);
    std::vector<int> picture_digits = digits.empty() ? random_digits(example_rng, o.data) : digits;
    Example example = make_example(picture_digits, o.data);

    // Looking at the model as built (or loaded), without training.
    if (o.params || o.show_pe || o.trace_shapes) {
        if (o.params) print_params(model);
        if (o.show_pe) {
            if (o.params) std::printf("\n");
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
    if (o.load_path.empty()) {
        Dataset data(o.data, 1000, /*eval_seed=*/12345, pool);
        history = train_and_report(o, data, model);
    } else {
        std::printf("loaded %s: d_model %d, heads %d, d_ff %d, layers %d+%d, task %s, seq_len %d, min_len %d, "
                    "max_digit %d\n",
                    o.load_path.c_str(), o.model.d_model, o.model.n_heads, o.model.d_ff, o.model.enc_layers,
                    o.model.dec_layers, TASK_NAMES[int(o.data.task)].c_str(), o.data.seq_len, o.data.min_len,
                    o.data.max_digit);
        if (digits.empty()) {
            Dataset data(o.data, 1000, /*eval_seed=*/12345);
            Accuracy a = evaluate(model, data.held_out);
            std::printf("held-out: exact-match %.1f%% (%d/%d), token-accuracy %.1f%%\n", 100 * a.exact,
                        a.exact_count, a.total, 100 * a.token);
        }
    }
    if (!digits.empty()) {
        std::vector<int> guess = greedy_decode(model, example.source, o.data.seq_len);
        std::printf("\ninput  %s\noutput %s   (%s: %s%s)\n", digits_text(example.source, model.config).c_str(),
                    digits_text(guess, model.config).c_str(), TASK_NAMES[int(o.data.task)].c_str(),
                    digits_text(example.target, model.config).c_str(), guess == example.target ? ", ok" : ", wrong");
    }
    if (o.show_attention) {
        std::vector<int> guess = greedy_decode(model, example.source, o.data.seq_len);
        std::vector<int> dec_in = decoder_input(model, guess);
        std::printf("\n--- attention for input %s, output %s ---\n",
                    digits_text(example.source, model.config).c_str(), digits_text(guess, model.config).c_str());
        print_attention(attention_maps(model, example.source, dec_in), o.numbers);
    }
    if (!o.svg_dir.empty()) write_pictures(o.svg_dir, model, example.source, o.load_path.empty() ? &history : nullptr);
    if (!o.save_path.empty()) {
        save_checkpoint(o.save_path, model, o.data);
        std::printf("saved %s\n", o.save_path.c_str());
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Benchmark (./sorter --bench, or make bench): the speed table of README.md's Performance section.
// Every figure is measured in this run. When Debian's PyTorch is installed, the PyTorch peer
// (../shared/peers/torch_sorter.py) is run for the same rows, alternating with ours, so that the
// machine's drift hits both programs alike.
// ---------------------------------------------------------------------------------------------
namespace bench {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One model size to measure: the model, its data, and the matching flags for the peer.
struct Config {
    ModelConfig model;
    DataConfig data;
};
inline Config make_config(int d_model, int n_heads, int d_ff, int layers, int seq_len) {
    Config c;
    c.data.seq_len = c.data.min_len = seq_len;
    c.model.vocab = vocab_size(c.data);
    c.model.max_len = seq_len;
    c.model.d_model = d_model, c.model.n_heads = n_heads, c.model.d_ff = d_ff;
    c.model.enc_layers = c.model.dec_layers = layers;
    return c;
}
inline std::string peer_flags(const Config& c) {
    char s[200];
    std::snprintf(s, sizeof s, "--d-model %d --heads %d --d-ff %d --enc-layers %d --dec-layers %d --seq-len %d",
                  c.model.d_model, c.model.n_heads, c.model.d_ff, c.model.enc_layers, c.model.dec_layers,
                  c.data.seq_len);
    return s;
}

// Matmul FLOPs (2 m n k for an (m, k) by (k, n) product) of one teacher-forced forward pass of one
// example, counted like the peer's matmul_flops_forward. A training step costs about 3x this: the
// backward of every product is two products of the same size.
inline double matmul_flops_forward(const Config& c) {
    double S = c.data.seq_len, T = c.data.seq_len, d = c.model.d_model, h = c.model.n_heads;
    double d_k = d / h, d_ff = c.model.d_ff, V = c.model.vocab;
    auto attention = [&](double Lq, double Lk) {
        double projections = 2 * Lq * d * d * 2 + 2 * Lk * d * d * 2;  // W_q, W_o on Lq rows; W_k, W_v on Lk
        double scores = h * 2 * Lq * Lk * d_k;                          // Q K^T
        double mix = h * 2 * Lq * Lk * d_k;                             // P V
        return projections + scores + mix;
    };
    double ffn = 2 * T * d * d_ff * 2;
    return c.model.enc_layers * (attention(S, S) + ffn) +
           c.model.dec_layers * (attention(T, T) + attention(T, S) + ffn) + 2 * T * d * V;
}

// Training throughput: steps of (draw a batch, forward, backward, SGD) for about `seconds`,
// after a short warm-up. Returns examples per second.
inline double train_examples_per_second(const Config& c, int batch, double lr, double seconds) {
    Dataset data(c.data, 0, 12345);
    Transformer model(c.model, 1);
    Rng rng(1 ^ 0x5eedULL);
    std::vector<Example> examples(batch);
    auto step = [&] {
        for (Example& e : examples) e = data.sample(rng);
        train_step(model, examples, lr);
    };
    for (auto t0 = Clock::now(); seconds_since(t0) < 0.1 * seconds;) step();  // warm-up
    long steps = 0;
    auto t0 = Clock::now();
    double elapsed = 0.0;
    while ((elapsed = seconds_since(t0)) < seconds) step(), steps++;
    return double(steps) * batch / elapsed;
}

// Time to accuracy: train from `seed` with (batch, lr), evaluate every `eval_every` steps on the
// held-out set (evaluation time not counted), note the first step reaching 99% and 100% exact match.
struct Reach {
    long step99 = -1, step100 = -1;   // -1: not reached
    double seconds99 = 0, seconds100 = 0;
    double decode_seconds_per_sequence = 0;
};
inline Reach time_to_accuracy(int batch, double lr, uint64_t seed, long max_steps, long eval_every) {
    DataConfig dc;
    ModelConfig mc;
    mc.vocab = vocab_size(dc), mc.max_len = dc.seq_len;
    Dataset data(dc, 1000, /*eval_seed=*/12345);
    Transformer model(mc, seed);
    Rng rng(seed ^ 0x5eedULL);
    std::vector<Example> examples(batch);
    Reach r;
    double train_seconds = 0.0, decode_seconds = 0.0;
    long decoded = 0;
    for (long step = 1; step <= max_steps && r.step100 < 0; step++) {
        auto t0 = Clock::now();
        for (Example& e : examples) e = data.sample(rng);
        train_step(model, examples, lr);
        train_seconds += seconds_since(t0);
        if (step % eval_every != 0) continue;
        auto t1 = Clock::now();
        double exact = evaluate(model, data.held_out).exact;
        decode_seconds += seconds_since(t1), decoded += long(data.held_out.size());
        if (exact >= 0.99 && r.step99 < 0) r.step99 = step, r.seconds99 = train_seconds;
        if (exact >= 1.00 && r.step100 < 0) r.step100 = step, r.seconds100 = train_seconds;
    }
    r.decode_seconds_per_sequence = decoded ? decode_seconds / decoded : 0.0;
    return r;
}

// ---- the peer ---------------------------------------------------------------------------------
const char* const PEER = "../shared/peers/torch_sorter.py";
const char* const PYTHON = "/usr/bin/python3";

inline bool peer_available() {
    if (access(PEER, R_OK) != 0) return false;
    std::string cmd = std::string(PYTHON) + " -c 'import torch' >/dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
}
// Runs the peer with `flags` (one thread) and returns everything it printed.
inline std::string run_peer(const std::string& flags) {
    std::string cmd = std::string(PYTHON) + " " + PEER + " --threads 1 " + flags + " 2>&1";
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
        char line[1024];
        while (std::fgets(line, sizeof line, p)) out += line;
        pclose(p);
    }
    return out;
}
// The number printed right after `key` in `text`, or -1 when `key` is missing.
inline double number_after(const std::string& text, const std::string& key) {
    std::size_t at = text.find(key);
    return at == std::string::npos ? -1.0 : std::atof(text.c_str() + at + key.size());
}
// The peer's --bench-only runs exactly --steps steps, so a short probe run first sets the number
// of steps that fills about `seconds`. Returns examples/s; `flops`, when given, receives the
// peer's own count of matmul FLOPs per example of one training step (its "train~3x=").
inline double peer_examples_per_second(const Config& c, int batch, double seconds, double* flops = nullptr) {
    std::string out;
    auto rate = [&](long steps) {
        char flags[80];
        std::snprintf(flags, sizeof flags, " --bench-only --batch %d --steps %ld", batch, steps);
        out = run_peer(peer_flags(c) + flags);
        return number_after(out, "train_examples/s=");
    };
    double probe = rate(10);
    double r = probe <= 0 ? probe : rate(std::max(10L, long(probe * seconds / batch)));
    if (flops) *flops = number_after(out, "train~3x=") / batch;
    return r;
}
struct PeerReach {
    long step99 = -1, step100 = -1;
    double seconds99 = 0, seconds100 = 0;
};
inline PeerReach peer_time_to_accuracy(int batch, double lr, long eval_every) {
    char flags[160];
    std::snprintf(flags, sizeof flags, "--stop-at 1.0 --batch %d --lr %g --eval-every %ld --max-train-seconds 60",
                  batch, lr, eval_every);
    std::string out = run_peer(flags);
    PeerReach r;
    for (auto [key, step, sec] : {std::tuple{"exact>=0.99 at step ", &r.step99, &r.seconds99},
                                  std::tuple{"exact>=1.00 at step ", &r.step100, &r.seconds100}}) {
        std::size_t at = out.find(key);
        if (at == std::string::npos) continue;
        *step = long(number_after(out.substr(at), key));
        *sec = number_after(out.substr(at), "train_s=");
    }
    return r;
}

// ---- printing -----------------------------------------------------------------------------------
inline std::string fmt(const char* format, double v) {
    char s[64];
    std::snprintf(s, sizeof s, format, v);
    return s;
}
inline std::string grouped(double v) {  // 12345.6 -> "12,346"
    std::string digits = std::to_string((long long)std::llround(v)), s;
    for (std::size_t i = 0; i < digits.size(); i++) {
        if (i && (digits.size() - i) % 3 == 0) s += ',';
        s += digits[i];
    }
    return s;
}
// One table row: what, sorter's figure, the peer's figure, and sorter / peer.
inline void row(const std::string& what, const std::string& ours, const std::string& peer = "",
                const std::string& ratio = "") {
    std::printf("  %-44s %14s %14s %10s\n", what.c_str(), ours.c_str(), peer.c_str(), ratio.c_str());
    std::fflush(stdout);
}
inline std::string times(double a, double b) { return a > 0 && b > 0 ? fmt("%.1fx", a / b) : ""; }

inline std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown CPU";
}
inline long peak_rss_kb(int who) {
    rusage u{};
    getrusage(who, &u);
    return u.ru_maxrss;  // kilobytes on Linux
}

}  // namespace bench

#ifndef SORTER_CXXFLAGS
#define SORTER_CXXFLAGS "(not recorded)"
#endif

int run_bench(const Options& o) {
    using namespace bench;
    const double seconds = 1.0;  // measuring time per throughput figure, each program
    const long eval_every = 100;
    bool peer = peer_available();
    std::printf("sorter --bench: %ld processors online, %s; one thread\n", sysconf(_SC_NPROCESSORS_ONLN),
                cpu_model().c_str());
    std::printf("compiler: %s, flags: %s\n", __VERSION__, SORTER_CXXFLAGS);
    if (peer)
        std::printf("peer: %s %s, one thread, run in turn with each of our rows\n", PYTHON, PEER);
    else
        std::printf("peer: skipped ('%s -c \"import torch\"' failed or %s is missing)\n", PYTHON, PEER);

    Config def = make_config(16, 2, 32, 1, 5);
    Config mid = make_config(64, 4, 256, 2, 10);
    std::printf("\ndefault: d_model 16, heads 2, d_ff 32, layers 1+1, seq_len 5 | "
                "mid: d_model 64, heads 4, d_ff 256, layers 2+2, seq_len 10\n\n");
    row("", "sorter", peer ? "peer" : "", peer ? "sorter/peer" : "");

    std::printf("training examples/s (draw, forward, backward, SGD; %.0f s each)\n", seconds);
    struct Rate { const char* name; const Config* c; int batch; double ours = 0, theirs = 0, flops = 0; };
    std::vector<Rate> rates = {{"default, batch 1", &def, 1}, {"default, batch 32", &def, 32},
                               {"mid, batch 1", &mid, 1}, {"mid, batch 32", &mid, 32}};
    for (Rate& r : rates) {
        r.ours = train_examples_per_second(*r.c, r.batch, o.lr, seconds);
        if (peer) r.theirs = peer_examples_per_second(*r.c, r.batch, seconds, &r.flops);
        row(r.name, grouped(r.ours), peer ? grouped(r.theirs) : "", times(r.ours, r.theirs));
    }

    std::printf("matmul FLOPs per example of one training step (3x one teacher-forced forward)%s\n",
                peer ? ";\nthe peer column is the peer's own count" : "");
    for (int i : {0, 2})
        row(rates[i].c == &def ? "default" : "mid", grouped(3 * matmul_flops_forward(*rates[i].c)),
            peer ? grouped(rates[i].flops) : "", "");
    std::printf("achieved GFLOP/s (FLOPs per example x examples/s)\n");
    for (const Rate& r : rates) {
        double f = 3 * matmul_flops_forward(*r.c) * 1e-9;
        row(r.name, fmt("%.2f", f * r.ours), peer ? fmt("%.2f", f * r.theirs) : "", times(r.ours, r.theirs));
    }

    std::printf("time to exact match on the 1,000 held-out sequences (training seconds, evaluation\n"
                "every %ld steps not counted; seed %llu)\n", eval_every, (unsigned long long)o.seed);
    struct Run { std::string name; int batch; double lr; };
    std::vector<Run> runs = {{"default run (batch " + std::to_string(o.batch) + ", lr " + fmt("%g", o.lr) + ")",
                              o.batch, o.lr}};
    if (o.batch != 32 || o.lr != 0.3) runs.push_back({"batch 32, lr 0.3 (the peer's best)", 32, 0.3});
    Reach first;
    PeerReach theirs;
    for (std::size_t i = 0; i < runs.size(); i++) {
        Reach r = time_to_accuracy(runs[i].batch, runs[i].lr, o.seed, o.steps, eval_every);
        if (i == 0) first = r;
        if (i == 0 && peer) theirs = peer_time_to_accuracy(32, 0.3, eval_every);
        auto show = [&](const char* what, long step, double sec, long peer_step, double peer_sec) {
            std::string ours = step < 0 ? "not reached" : fmt("%.2f s", sec);
            std::string p = !peer ? "" : peer_step < 0 ? "not reached" : fmt("%.2f s", peer_sec);
            row("  " + runs[i].name + ", " + what, ours, p, step > 0 && peer_step > 0 ? times(peer_sec, sec) : "");
            std::string ex = step < 0 ? "" : grouped(double(step) * runs[i].batch);
            std::string pex = !peer || peer_step < 0 ? "" : grouped(double(peer_step) * 32);
            row("    examples", ex, pex);
        };
        if (i == 0 && peer)
            std::printf("  (peer column: one peer run, batch 32, lr 0.3, seed 1, shown on every row;\n"
                        "   ratio: the peer's seconds over ours)\n");
        show("99%", r.step99, r.seconds99, theirs.step99, theirs.seconds99);
        show("100%", r.step100, r.seconds100, theirs.step100, theirs.seconds100);
    }

    std::printf("greedy decoding (default size, one sequence at a time, no cache)\n");
    row("time per sequence", fmt("%.1f us", 1e6 * first.decode_seconds_per_sequence));
    std::printf("peak memory (resident set, getrusage)\n");
    row("after the default-size rows", grouped(peak_rss_kb(RUSAGE_SELF)) + " kB",
        peer ? grouped(peak_rss_kb(RUSAGE_CHILDREN)) + " kB" : "", "");

    // How the cost grows: each row doubles one size; "x prev" is examples/s over the row above.
    auto scaling = [&](const char* title, std::vector<Config> configs, const char* label, auto value_of) {
        std::printf("%s, batch 32\n(x prev: examples/s over the row above)\n", title);
        row("", "examples/s  x prev", peer ? "examples/s  x prev" : "", "");
        double prev_ours = 0, prev_theirs = 0;
        for (const Config& c : configs) {
            double ours = train_examples_per_second(c, 32, o.lr, seconds);
            double p = peer ? peer_examples_per_second(c, 32, seconds) : 0;
            std::string a = grouped(ours) + (prev_ours > 0 ? fmt("  %5.2f", ours / prev_ours) : "       ");
            std::string b = peer ? grouped(p) + (prev_theirs > 0 ? fmt("  %5.2f", p / prev_theirs) : "       ") : "";
            row(std::string("  ") + label + " " + std::to_string(value_of(c)), a, b, times(ours, p));
            prev_ours = ours, prev_theirs = p;
        }
    };
    scaling("sequence length doubling (d_model 16, heads 2, d_ff 32, layers 1+1)",
            {make_config(16, 2, 32, 1, 5), make_config(16, 2, 32, 1, 10), make_config(16, 2, 32, 1, 20),
             make_config(16, 2, 32, 1, 40)},
            "seq_len", [](const Config& c) { return c.data.seq_len; });
    scaling("d_model doubling (heads 2, d_ff = 2 d_model, layers 1+1, seq_len 5)",
            {make_config(16, 2, 32, 1, 5), make_config(32, 2, 64, 1, 5), make_config(64, 2, 128, 1, 5),
             make_config(128, 2, 256, 1, 5)},
            "d_model", [](const Config& c) { return c.model.d_model; });
    std::printf("peak memory over the whole bench: sorter %s kB%s\n", grouped(peak_rss_kb(RUSAGE_SELF)).c_str(),
                peer ? (", peer " + grouped(peak_rss_kb(RUSAGE_CHILDREN)) + " kB").c_str() : "");
    return 0;
}

}  // namespace sorter_program

#ifndef SORTER_NO_MAIN
int main(int argc, char** argv) {
    using namespace sorter_program;
    try {
        return run(parse_options(argc, argv));
    } catch (const UsageError& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "sorter: %s\n", e.message.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "sorter: error: %s\n", e.what());
        return 1;
    }
}
#endif
