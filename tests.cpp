#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

// ---- Workbench: flags, checkpoints, pictures ----
// main.cpp is included whole, without its main(): every check in it throws a UsageError with a
// one-line message, so these tests call the parsing and loading functions and read that message.
#define SORTER_NO_MAIN
#include "main.cpp"

#include <cstring>
#include <limits>
#include <sstream>

namespace workbench_tests {
// The names this section uses from main.cpp, declared here so that they win over any helper of
// the same name elsewhere in this file.
using sorter_program::Options;
using sorter_program::UsageError;
using sorter_program::parse_options;
using sorter_program::join;
using sorter_program::parse_sequence;
using sorter_program::read_train_data;
using sorter_program::load_train_data;
using sorter_program::save_checkpoint;
using sorter_program::read_checkpoint;
using sorter_program::load_checkpoint;
using sorter_program::run;
using sorter_program::attention_maps;
using sorter_program::AttentionMap;
using sorter_program::History;
using sorter_program::write_pictures;
using sorter_program::svg_text;
using sorter_program::write_svg;
using sorter_program::naive_softmax;
using sorter_program::training_svg;
using sorter_program::print_loss_plot;

// Parse a command line; returns the error message, or "" when it parsed.
inline std::string parse_error(std::vector<std::string> args, Options* out = nullptr) {
    args.insert(args.begin(), "./sorter");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    try {
        Options o = parse_options(int(argv.size()), argv.data());
        if (out) *out = o;
        return "";
    } catch (const UsageError& e) {
        return e.message;
    }
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fresh directory under the system's temporary directory, removed by the destructor.
struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& name) {
        path = std::filesystem::temp_directory_path() / ("sorter-test-" + name + "-" + std::to_string(long(getpid())));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string file(const std::string& name) const { return (path / name).string(); }
    std::vector<std::string> listing() const {
        std::vector<std::string> names;
        for (auto& entry : std::filesystem::directory_iterator(path)) names.push_back(entry.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
};

inline std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A small model with every optional tensor (learned positions), trained a few steps so its
// parameters are not the initial ones.
inline Transformer small_trained_model(ModelConfig& c, DataConfig& d) {
    d.task = Task::reverse;
    d.seq_len = 4;
    d.min_len = 2;
    d.max_digit = 6;
    c.vocab = vocab_size(d);
    c.max_len = d.seq_len;
    c.d_model = 8;
    c.n_heads = 2;
    c.d_ff = 12;
    c.enc_layers = 2;
    c.dec_layers = 1;
    c.norm = Norm::post;
    c.positions = Positions::learned;
    c.activation = Activation::gelu;
    c.embed_scale = false;
    Transformer model(c, 3);
    Dataset data(d, 20, 5);
    Rng rng(9);
    std::vector<Example> batch(4);
    for (int step = 0; step < 3; step++) {
        for (Example& e : batch) e = data.sample(rng);
        train_step(model, batch, 0.1);
    }
    return model;
}

inline std::string checkpoint_text(Transformer& model, const DataConfig& d) {
    TempDir dir("ckpt-text");
    std::string path = dir.file("model.txt");
    save_checkpoint(path, model, d);
    return read_all(path);
}

// Load checkpoint text; returns the error message, or "" when it loaded.
inline std::string load_error(const std::string& text) {
    std::istringstream in(text);
    DataConfig d;
    try {
        read_checkpoint(in, "--load model.txt", d);
        return "";
    } catch (const UsageError& e) {
        return e.message;
    }
}

inline std::string replace_once(std::string text, const std::string& from, const std::string& to) {
    std::size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
}


TEST_CASE("flags: every invalid value gets one line naming the flag and the value") {
    struct Case {
        std::vector<std::string> args;
        std::vector<std::string> must_say;
    };
    std::vector<Case> cases = {
        {{"--bogus"}, {"unknown flag", "--bogus"}},
        {{"--steps"}, {"--steps needs a value", "whole number"}},
        {{"--steps", "abc"}, {"--steps abc", "from 0 to 1000000"}},
        {{"--steps", "12x"}, {"--steps 12x"}},
        {{"--steps", "-5"}, {"--steps -5"}},
        {{"--steps", "99999999999999999999999"}, {"--steps 99999999999999999999999"}},
        {{"--steps", "2000000"}, {"--steps 2000000"}},
        {{"--d-model", "0"}, {"--d-model 0", "from 1 to 256"}},
        {{"--d-model", "100000"}, {"--d-model 100000"}},
        {{"--heads", "0"}, {"--heads 0"}},
        {{"--heads", "3"}, {"--heads 3", "--d-model 16", "multiple"}},
        {{"--d-model", "15"}, {"--d-model 15", "--heads 2"}},
        {{"--d-ff", "-1"}, {"--d-ff -1"}},
        {{"--d-ff", "1000000"}, {"--d-ff 1000000"}},
        {{"--enc-layers", "0"}, {"--enc-layers 0"}},
        {{"--dec-layers", "99"}, {"--dec-layers 99", "from 1 to 8"}},
        {{"--task", "shuffle"}, {"--task shuffle", "sort, copy, reverse"}},
        {{"--task"}, {"--task needs a value"}},
        {{"--seq-len", "0"}, {"--seq-len 0"}},
        {{"--seq-len", "1000"}, {"--seq-len 1000"}},
        {{"--min-len", "7"}, {"--min-len 7", "at most", "5"}},
        {{"--seq-len", "3", "--min-len", "4"}, {"--min-len 4", "3"}},
        {{"--min-len", "0"}, {"--min-len 0"}},
        {{"--max-digit", "0"}, {"--max-digit 0"}},
        {{"--max-digit", "100"}, {"--max-digit 100"}},
        {{"--batch", "0"}, {"--batch 0"}},
        {{"--lr", "0"}, {"--lr 0", "above 0"}},
        {{"--lr", "-1"}, {"--lr -1"}},
        {{"--lr", "abc"}, {"--lr abc"}},
        {{"--lr", "inf"}, {"--lr inf"}},
        {{"--lr", "nan"}, {"--lr nan"}},
        {{"--lr", "11"}, {"--lr 11"}},
        {{"--lr"}, {"--lr needs a value"}},
        {{"--seed", "x"}, {"--seed x"}},
        {{"--seed", "-1"}, {"--seed -1"}},
        {{"--eval-every", "0"}, {"--eval-every 0"}},
        {{"--norm", "mid"}, {"--norm mid", "pre, post"}},
        {{"--pos", "rotary"}, {"--pos rotary", "sinusoidal, learned, none"}},
        {{"--act", "tanh"}, {"--act tanh", "relu, gelu"}},
        {{"--demo", "x"}, {"--demo x", "scale, softmax"}},
        {{"--svg"}, {"--svg needs a value"}},
        {{"--save"}, {"--save needs a value"}},
        {{"--load"}, {"--load needs a value"}},
        {{"--train-data"}, {"--train-data needs a value"}},
        {{"--steps", "--batch", "4"}, {"--steps needs a value"}},
        {{"--sort"}, {"--sort needs digits"}},
        {{"--sort", "--steps", "1"}, {"--sort needs digits"}},
        {{"--load", "m.txt", "--d-model", "8"}, {"--d-model", "--load m.txt"}},
        {{"--load", "m.txt", "--steps", "8"}, {"--steps", "--load m.txt"}},
        {{"--load", "m.txt", "--no-embed-scale"}, {"--no-embed-scale", "--load"}},
    };
    for (const Case& c : cases) {
        std::string message = parse_error(c.args);
        INFO("args: " << join(c.args, " ") << "  message: " << message);
        CHECK(!message.empty());
        CHECK(message.find('\n') == std::string::npos);
        for (const std::string& part : c.must_say) CHECK(contains(message, part));
    }
}

TEST_CASE("flags: valid values parse, and the vocabulary follows --max-digit") {
    Options o;
    REQUIRE(parse_error({"--d-model", "32", "--heads", "4", "--d-ff", "64", "--enc-layers", "2", "--dec-layers", "3",
                         "--task", "reverse", "--seq-len", "7", "--min-len", "3", "--max-digit", "5", "--steps", "10",
                         "--batch", "8", "--lr", "0.05", "--seed", "4", "--eval-every", "5", "--norm", "post", "--pos",
                         "learned", "--act", "gelu", "--no-embed-scale", "--sort", "1", "2", "3", "--show-attention"},
                        &o) == "");
    CHECK(o.model.d_model == 32);
    CHECK(o.model.n_heads == 4);
    CHECK(o.model.d_ff == 64);
    CHECK(o.model.enc_layers == 2);
    CHECK(o.model.dec_layers == 3);
    CHECK(o.data.task == Task::reverse);
    CHECK(o.data.seq_len == 7);
    CHECK(o.data.min_len == 3);
    CHECK(o.model.vocab == 7);
    CHECK(o.model.max_len == 7);
    CHECK(o.steps == 10);
    CHECK(o.batch == 8);
    CHECK(o.lr == 0.05);
    CHECK(o.seed == 4);
    CHECK(o.model.norm == Norm::post);
    CHECK(o.model.positions == Positions::learned);
    CHECK(o.model.activation == Activation::gelu);
    CHECK(!o.model.embed_scale);
    CHECK(o.sort_words == std::vector<std::string>{"1", "2", "3"});
    CHECK(o.show_attention);
    // Without --min-len, inputs keep the full length of --seq-len.
    REQUIRE(parse_error({"--seq-len", "8"}, &o) == "");
    CHECK(o.data.min_len == 8);
}

TEST_CASE("--sort digits are checked against the data settings") {
    DataConfig d;  // seq_len 5, min_len 5, max_digit 9
    auto error = [&](const std::vector<std::string>& words) {
        try {
            parse_sequence(words, d, "--sort " + join(words, " "));
            return std::string();
        } catch (const UsageError& e) {
            return e.message;
        }
    };
    CHECK(error({"5", "3", "9", "1", "1"}) == "");
    CHECK(contains(error({"5", "3", "9", "1", "0"}), "'0' is not a digit from 1 to 9"));
    CHECK(contains(error({"5", "3", "9", "1", "10"}), "'10'"));
    CHECK(contains(error({"5", "3", "x", "1", "1"}), "'x'"));
    CHECK(contains(error({"5", "3", "-2", "1", "1"}), "'-2'"));
    CHECK(contains(error({"5", "3"}), "2 digits; expected exactly 5"));
    CHECK(contains(error({"1", "2", "3", "4", "5", "6"}), "6 digits"));
    d.min_len = 2;
    CHECK(error({"5", "3"}) == "");
    CHECK(contains(error({"5"}), "expected from 2 to 5"));
}

TEST_CASE("--train-data: sequences are read and every bad line is named") {
    DataConfig d;
    d.min_len = 3;
    auto read = [&](const std::string& text, std::vector<std::vector<int>>* out = nullptr) {
        std::istringstream in(text);
        try {
            auto seqs = read_train_data(in, d, "--train-data data.txt");
            if (out) *out = seqs;
            return std::string();
        } catch (const UsageError& e) {
            return e.message;
        }
    };
    std::vector<std::vector<int>> seqs;
    CHECK(read("# a comment\n5 3 9 1 1\n\n  2 2 7\r\n1 2 3 4\n", &seqs) == "");
    REQUIRE(seqs.size() == 3);
    CHECK(seqs[0] == std::vector<int>{5, 3, 9, 1, 1});
    CHECK(seqs[1] == std::vector<int>{2, 2, 7});
    CHECK(contains(read("5 3 9 1 1\n5 3 0 1 1\n"), "--train-data data.txt line 2: '0' is not a digit"));
    CHECK(contains(read("5 3 9 1 1\n5 3 1x 1 1\n"), "line 2: '1x'"));
    CHECK(contains(read("5 3 9 1 1\n\n5 3\n"), "line 3: 2 digits; expected from 3 to 5"));
    CHECK(contains(read("1 2 3 4 5 6\n"), "line 1: 6 digits"));
    CHECK(contains(read(""), "no sequences"));
    CHECK(contains(read("# only a comment\n\n"), "no sequences"));
    CHECK(contains(read(std::string(5000, '1') + "\n"), "line 1: longer than 4096 characters"));
    CHECK_THROWS_AS(load_train_data("/nonexistent/data.txt", d), UsageError);
    TempDir dir("train-data");
    try {
        load_train_data(dir.path.string(), d);
        FAIL("a directory was accepted as --train-data");
    } catch (const UsageError& e) {
        CHECK(contains(e.message, "is a directory"));
    }
}

TEST_CASE("checkpoint: a round trip gives bit-identical parameters and identical predictions") {
    ModelConfig c;
    DataConfig d;
    Transformer model = small_trained_model(c, d);
    TempDir dir("roundtrip");
    std::string path = dir.file("model.txt");
    save_checkpoint(path, model, d);
    CHECK(dir.listing() == std::vector<std::string>{"model.txt"});  // no temporary left behind

    DataConfig d2;
    Transformer loaded = load_checkpoint(path, d2);
    CHECK(d2.task == d.task);
    CHECK(d2.seq_len == d.seq_len);
    CHECK(d2.min_len == d.min_len);
    CHECK(d2.max_digit == d.max_digit);
    CHECK(loaded.config.norm == c.norm);
    CHECK(loaded.config.positions == c.positions);
    CHECK(loaded.config.activation == c.activation);
    CHECK(loaded.config.embed_scale == c.embed_scale);
    auto a = model.parameters(), b = loaded.parameters();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); i++) {
        INFO(a[i].first);
        CHECK(a[i].first == b[i].first);
        REQUIRE(a[i].second->value.data.size() == b[i].second->value.data.size());
        CHECK(std::memcmp(a[i].second->value.data.data(), b[i].second->value.data.data(),
                          a[i].second->value.data.size() * sizeof(double)) == 0);
    }
    Rng rng(11);
    for (int n = 0; n < 20; n++) {
        Example e = make_example(random_digits(rng, d), d);
        CHECK(greedy_decode(model, e.source, d.seq_len) == greedy_decode(loaded, e.source, d.seq_len));
        Matrix la = model.forward(e.source, e.target_in), lb = loaded.forward(e.source, e.target_in);
        CHECK(std::memcmp(la.data.data(), lb.data.data(), la.data.size() * sizeof(double)) == 0);
    }
    // Saving the loaded model writes the same bytes.
    std::string again = dir.file("again.txt");
    save_checkpoint(again, loaded, d2);
    CHECK(read_all(again) == read_all(path));
}

TEST_CASE("checkpoint: every kind of corrupt file is rejected with a clear message") {
    ModelConfig c;
    DataConfig d;
    Transformer model = small_trained_model(c, d);
    const std::string good = checkpoint_text(model, d);
    REQUIRE(load_error(good) == "");

    struct Case {
        const char* what;
        std::string text;
        std::vector<std::string> must_say;
    };
    std::string missing = good;  // drop the whole block of one tensor (its line and its one row)
    {
        std::size_t at = missing.find("tensor encoder.0.norm1.beta");
        std::size_t next = missing.find("tensor ", at + 1);
        missing.erase(at, next - at);
    }
    std::string first_value = good.substr(good.find("tensor embed.table"));
    first_value = first_value.substr(first_value.find('\n') + 1);
    first_value = first_value.substr(0, first_value.find(' '));
    std::vector<Case> cases = {
        {"empty file", "", {"not a sorter checkpoint"}},
        {"bad magic", replace_once(good, "sorter-checkpoint", "sorter-chekpoint"), {"line 1", "not a sorter checkpoint"}},
        {"another format", "P6\n640 480\n255\n", {"not a sorter checkpoint", "'P6'"}},
        {"bad version", replace_once(good, "sorter-checkpoint 1", "sorter-checkpoint 7"), {"version 7"}},
        {"header key out of order", replace_once(good, "d_model 8", "d_models 8"), {"expected 'd_model'", "'d_models'"}},
        {"absurd d_model", replace_once(good, "d_model 8", "d_model 1000000000"), {"d_model 1000000000", "from 1 to 256"}},
        {"absurd layers", replace_once(good, "enc_layers 2", "enc_layers 4000"), {"enc_layers 4000"}},
        {"negative size", replace_once(good, "d_ff 12", "d_ff -12"), {"d_ff -12"}},
        {"bad choice", replace_once(good, "norm post", "norm sideways"), {"norm sideways", "pre, post"}},
        {"heads do not divide", replace_once(good, "n_heads 2", "n_heads 3"), {"not a multiple of n_heads 3"}},
        {"vocab mismatch", replace_once(good, "vocab 8", "vocab 11"), {"vocab 11", "max_digit 6"}},
        {"min_len above seq_len", replace_once(good, "min_len 2", "min_len 5"), {"min_len 5", "seq_len 4"}},
        {"wrong tensor count", replace_once(good, "tensors ", "tensors 1"), {"tensors"}},
        {"unknown tensor", replace_once(good, "tensor out.b ", "tensor out.bias "), {"unknown tensor 'out.bias'"}},
        {"missing tensor", missing, {"tensor 'encoder.0.norm1.beta' is missing"}},
        {"extra tensor", replace_once(good, "end\n", "tensor out.c 1 1\n0\nend\n"), {"unknown tensor 'out.c'"}},
        {"wrong shape", replace_once(good, "tensor out.b 1 8", "tensor out.b 1 9"),
         {"tensor 'out.b' has shape (1, 9)", "needs (1, 8)"}},
        {"absurd shape", replace_once(good, "tensor embed.table 8 8", "tensor embed.table 99999999999999 8"),
         {"tensor 'embed.table' has shape (99999999999999, 8)"}},
        {"truncated in a tensor", good.substr(0, good.size() / 2), {"truncated"}},
        {"truncated inside a number", good.substr(0, good.find("tensor out.b") - 3), {"truncated"}},
        {"truncated before end", good.substr(0, good.size() - 4), {"truncated", "'end'"}},
        {"nan value", replace_once(good, first_value, "nan"), {"tensor 'embed.table' value 0: 'nan' is not a finite number"}},
        {"inf value", replace_once(good, first_value, "-inf"), {"'-inf' is not a finite number"}},
        {"overflowing value", replace_once(good, first_value, "1e999"), {"'1e999' is not a finite number"}},
        {"text value", replace_once(good, first_value, "0.5x"), {"'0.5x'"}},
        {"huge word", replace_once(good, first_value, std::string(100000, '7')), {"longer than 64 characters"}},
        {"words after end", good + "more\n", {"unexpected 'more' after 'end'"}},
    };
    for (const Case& k : cases) {
        std::string message = load_error(k.text);
        INFO(k.what << ": " << message);
        CHECK(!message.empty());
        CHECK(message.find('\n') == std::string::npos);
        CHECK(contains(message, "--load model.txt"));
        for (const std::string& part : k.must_say) CHECK(contains(message, part));
    }
    // The line number points at the problem.
    CHECK(contains(load_error(replace_once(good, "d_model 8", "d_model 0")), "line 4:"));

    DataConfig d2;
    CHECK_THROWS_AS(load_checkpoint("/nonexistent/model.txt", d2), UsageError);
}

TEST_CASE("atomic writes: a failed save leaves no file and no temporary behind") {
    ModelConfig c;
    DataConfig d;
    Transformer model(c, 1);
    TempDir dir("atomic");
    // The target is a directory: the write of the temporary succeeds, the rename fails.
    std::filesystem::create_directory(dir.path / "taken");
    CHECK_THROWS_AS(save_checkpoint(dir.file("taken"), model, d), UsageError);
    CHECK(dir.listing() == std::vector<std::string>{"taken"});
    // The directory does not exist: nothing can be written at all.
    try {
        save_checkpoint(dir.file("missing/model.txt"), model, d);
        FAIL("saved into a missing directory");
    } catch (const UsageError& e) {
        CHECK(contains(e.message, "--save"));
        CHECK(contains(e.message, "cannot write"));
    }
    CHECK(dir.listing() == std::vector<std::string>{"taken"});
    // Overwriting an existing checkpoint replaces it whole.
    save_checkpoint(dir.file("m.txt"), model, d);
    std::string first = read_all(dir.file("m.txt"));
    Transformer other(c, 2);
    save_checkpoint(dir.file("m.txt"), other, d);
    CHECK(read_all(dir.file("m.txt")) != first);
    CHECK(read_all(dir.file("m.txt")) == checkpoint_text(other, d));
}

TEST_CASE("run(): bad output paths and bad --sort digits stop before any work") {
    auto run_error = [](const std::vector<std::string>& args) {
        Options o;
        std::string parse = parse_error(args, &o);
        if (!parse.empty()) return parse;
        try {
            run(o);
            return std::string();
        } catch (const UsageError& e) {
            return e.message;
        }
    };
    CHECK(contains(run_error({"--svg", "/nonexistent/dir", "--params"}), "--svg /nonexistent/dir: not a directory"));
    CHECK(contains(run_error({"--save", "/nonexistent/dir/m.txt", "--steps", "1"}), "--save /nonexistent/dir/m.txt"));
    CHECK(contains(run_error({"--sort", "1", "2", "3", "4", "12", "--params"}), "--sort 1 2 3 4 12: '12'"));
    CHECK(contains(run_error({"--load", "/nonexistent/model.txt"}), "--load /nonexistent/model.txt: cannot open"));
    CHECK(contains(run_error({"--train-data", "/nonexistent/data.txt", "--params"}), "--train-data /nonexistent"));
    TempDir dir("run-paths");
    CHECK(contains(run_error({"--save", dir.path.string(), "--steps", "1"}), "is a directory"));
    std::ofstream(dir.file("plain.txt")) << "not a directory\n";
    CHECK(contains(run_error({"--svg", dir.file("plain.txt"), "--params"}), "not a directory"));
    std::ofstream(dir.file("bad.txt")) << "5 3 9 1 1\n5 3 x 1 1\n";
    CHECK(contains(run_error({"--train-data", dir.file("bad.txt"), "--params"}), "bad.txt line 2: 'x'"));
}

TEST_CASE("the source padding mask gives PAD positions exactly zero attention") {
    ModelConfig c;
    DataConfig d;
    d.min_len = 2;
    Transformer model(c, 1);
    std::vector<int> source = make_example({4, 2, 7}, d).source;  // 4 2 7 _ _
    std::vector<AttentionMap> maps = attention_maps(model, source, {start_token(c), 2, 4, 7, PAD});
    for (const AttentionMap& m : maps) {
        if (contains(m.layer, "causal")) continue;  // keys are decoder tokens there
        for (int r = 0; r < m.P.rows; r++)
            for (int k = 3; k < 5; k++) CHECK(m.P.at(r, k) == 0.0);
    }
}

TEST_CASE("SVG pictures are whole documents, written atomically") {
    ModelConfig c;
    c.positions = Positions::learned;
    DataConfig d;
    Transformer model(c, 1);
    History h;
    for (int s = 1; s <= 30; s++) h.losses.push_back(2.0 / s);
    h.evals = {{10, 0.5, 0.2, 0.6}, {20, 0.1, 0.7, 0.9}, {30, 0.05, 1.0, 1.0}};
    TempDir dir("svg");
    write_pictures(dir.path.string(), model, make_example({5, 3, 9, 1, 1}, d).source, &h);
    CHECK(dir.listing() == std::vector<std::string>{"attention.svg", "pe.svg", "training.svg"});
    for (const std::string& name : dir.listing()) {
        std::string svg = read_all(dir.file(name));
        INFO(name);
        CHECK(svg.rfind("<svg", 0) == 0);
        CHECK(svg.substr(svg.find_last_not_of("\n") - 5, 6) == "</svg>");
        auto count = [&](const std::string& s) {
            std::size_t n = 0;
            for (std::size_t at = svg.find(s); at != std::string::npos; at = svg.find(s, at + 1)) n++;
            return n;
        };
        CHECK(count("<svg") == 1);
        CHECK(count("<text") == count("</text>"));
        CHECK(count("<") == count(">"));
    }
    // Text is escaped: a label with < or & cannot break the document.
    CHECK(svg_text(0, 0, "a<b & c") == "<text x=\"0.0\" y=\"0.0\" font-size=\"12\" text-anchor=\"middle\" "
                                       "fill=\"#222\">a&lt;b &amp; c</text>\n");
    CHECK_THROWS_AS(write_svg(dir.file("missing"), "x.svg", "<svg></svg>"), UsageError);
}

TEST_CASE("the demonstrations: the naive softmax overflows where the stable one does not") {
    std::vector<double> naive = naive_softmax({1000, 999, 998});
    CHECK(std::isnan(naive[0]));
    Matrix S(1, 3);
    S.data = {1000, 999, 998};
    Matrix P = softmax_rows(S);
    CHECK(P.data[0] == doctest::Approx(0.6652).epsilon(1e-3));
}

TEST_CASE("a diverged run (nan or inf loss) still draws, and is not saved") {
    History h;
    h.losses = {2.0, 1.0, std::numeric_limits<double>::infinity(), std::nan("")};
    h.evals = {{4, std::nan(""), 0.0, 0.0}};
    std::string svg = training_svg(h);
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(!contains(svg, "nan"));
    CHECK(!contains(svg, "inf"));
    print_loss_plot(h.losses);  // must return, not loop or crash
    h.losses = {std::nan(""), std::nan("")};
    CHECK(contains(training_svg(h), "not finite"));
    print_loss_plot(h.losses);

    ModelConfig c;
    DataConfig d;
    Transformer model(c, 1);
    model.out.b.value.at(0, 3) = std::nan("");
    TempDir dir("diverged");
    try {
        save_checkpoint(dir.file("m.txt"), model, d);
        FAIL("a model holding nan was saved");
    } catch (const UsageError& e) {
        CHECK(contains(e.message, "tensor 'out.b' holds nan or inf"));
    }
    CHECK(dir.listing().empty());
}

}  // namespace workbench_tests
