// workbench/test_helpers.hpp -- what the workbench's tests share: a command line parsed, a scratch
// directory, a small trained model, a checkpoint's text and its load error (a file read whole: text.hpp's read_all).
// Each *_test.cpp beside a header tests that header; `make test` links them with tests.cpp into one
// binary, so doctest prints one summary for all.
#pragma once

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "options.hpp"

// Helpers for this part: a command line parsed, a scratch directory.

// Parse a command line; returns the error message, or "" when it parsed.
inline std::string parse_error(const std::vector<std::string>& args, Options* out = nullptr) {
    try {
        Options o = parse_options(args);
        if (out) *out = o;
        return "";
    } catch (const UsageError& e) {
        return e.message;
    }
}

// The message of the UsageError that f throws ("" if none).
template <typename F>
std::string usage_error_of(F f) {
    try {
        f();
    } catch (const UsageError& e) {
        return e.message;
    }
    return "";
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

// What f prints with printf, caught in a temporary file (the program writes to stdout with printf).
template <typename F>
std::string printed_by(F f) {
    std::FILE* file = std::tmpfile();
    REQUIRE(file != nullptr);
    std::FILE* saved_stdout = stdout;
    stdout = file;
    try {
        f();
    } catch (...) {
        stdout = saved_stdout;
        std::fclose(file);
        throw;
    }
    stdout = saved_stdout;
    std::rewind(file);
    std::string text;
    for (int ch; (ch = std::fgetc(file)) != EOF;) text += char(ch);
    std::fclose(file);
    return text;
}

// A small model with every optional tensor (learned positions), trained a few steps so its
// parameters are not the initial ones.
inline Transformer small_trained_model(ModelConfig& c, DataConfig& d) {
    d.task = Task::reverse;
    d.seq_len = 4;
    d.min_len = 2;
    d.max_digit = 6;
    c = fit_to_data(c, d);
    c.d_model = 8;
    c.n_heads = 2;
    c.d_ff = 12;
    c.enc_layers = 2;
    c.dec_layers = 1;
    c.norm_place = NormPlace::post;
    c.positions = Positions::learned;
    c.activation = Activation::gelu;
    c.embed_scale = false;
    Transformer model(c, 3);
    Dataset data(d, {}, 20, 5);
    TrainConfig t;
    t.batch = 4, t.lr = 0.1, t.schedule = Schedule::constant;
    TrainState state(t, 9);
    for (int step = 0; step < 3; step++) train_step(model, data, t, state, 3);
    return model;
}

// What a checkpoint keeps besides the model, in one value for the tests (main.cpp holds the parts apart): a new
// run's, by default.
struct Kept {
    DataConfig data;
    TrainConfig train;
    TrainState state;
    Origin origin;
    explicit Kept(const DataConfig& d = DataConfig(), const TrainConfig& t = TrainConfig(), uint64_t seed = 1)
        : data(d), train(t), state(t, seed) {}
};
inline void save_kept(const std::string& path, Transformer& model, const Kept& k) {
    save_checkpoint(path, model, k.data, k.train, k.state, k.origin);
}
inline Transformer read_kept(std::istream& in, const std::string& where, Kept& k) {
    return read_checkpoint(in, where, k.data, k.train, k.state, k.origin);
}
inline Transformer load_kept(const std::string& path, Kept& k) {
    return load_checkpoint(path, k.data, k.train, k.state, k.origin);
}
inline std::string checkpoint_text(Transformer& model, const Kept& k) {
    TempDir dir("ckpt-text");
    std::string path = dir.file("model.txt");
    save_kept(path, model, k);
    return read_all(path);
}

// Load checkpoint text; returns the error message, or "" when it loaded.
inline std::string load_error(const std::string& text) {
    std::istringstream in(text);
    Kept kept;
    try {
        read_kept(in, "--load model.txt", kept);
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

// A checkpoint as an older version wrote it (2 or 3, and for 3 with a regulariser on): the version line, and
// without the lines whose first version is later (the tables' rows say which).
inline std::string as_version(const std::string& text, int version) {
    const int written = std::atoi(text.c_str() + std::strlen("sorter-checkpoint "));
    std::string older = replace_once(text, fmt("sorter-checkpoint %d\n", written),
                                     fmt("sorter-checkpoint %d\n", version));
    for (const auto* table : {&header_table(), &training_table()})
        for (const SettingRow& row : *table)
            if (row.version > version && row.version <= written) {
                std::size_t at = older.find("\n" + row.name + " ");
                REQUIRE(at != std::string::npos);
                older.erase(at + 1, older.find('\n', at + 1) - at);
            }
    return older;
}


// A strict parser's first checks, by hand: every tag that opens closes, in order (<x/> closes itself),
// outside <![CDATA[ ... ]]>, comments and the doctype; and every & starts an entity.
inline std::string markup_problem(const std::string& page) {
    std::vector<std::string> open;
    for (std::size_t i = 0; i < page.size(); i++) {
        if (page[i] == '&') {
            std::size_t end = page.find(';', i);
            std::string entity = page.substr(i, end == std::string::npos ? 8 : end - i + 1);
            if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;")
                return "bad entity " + entity;
        }
        if (page[i] != '<') continue;
        for (const char* skip : {"<![CDATA[", "<!--", "<!DOCTYPE"}) {
            const char* until = skip[2] == '[' ? "]]>" : skip[2] == '-' ? "-->" : ">";
            if (page.compare(i, std::strlen(skip), skip) == 0) i = page.find(until, i) + std::strlen(until) - 1;
        }
        if (page[i] != '<') continue;
        std::size_t end = page.find('>', i);
        if (end == std::string::npos) return "a tag never ends";
        std::string tag = page.substr(i + 1, end - i - 1);
        std::string name = tag.substr(tag[0] == '/', tag.find_first_of(" />", 1) - (tag[0] == '/'));
        if (tag[0] == '/') {
            if (open.empty() || open.back() != name)
                return "</" + name + "> closes <" + (open.empty() ? "" : open.back()) + ">";
            open.pop_back();
        } else if (tag.back() != '/') {
            open.push_back(name);
        }
        i = end;
    }
    return open.empty() ? "" : "<" + open.back() + "> never closes";
}


// The small data and model of the checkpoint tests: digits 1..5 (vocab 7), seq_len 4, sources of 2 to 4
// digits, so some end in PAD; d_model 8, 2 heads, d_ff 12 (tests.cpp's whole-model checks use the same).
inline DataConfig few_digits() {
    DataConfig d;
    d.seq_len = 4;
    d.min_len = 2;
    d.max_digit = 5;
    return d;
}
inline ModelConfig small_model(const DataConfig& d) {
    ModelConfig c = fit_to_data(ModelConfig(), d);
    c.d_model = 8;
    c.n_heads = 2;
    c.d_ff = 12;
    return c;
}
// n training examples of data d, drawn from `draw_seed` beside a held-out set of `held_out` from `eval_seed`.
inline std::vector<Example> batch_of(const DataConfig& d, int held_out, uint64_t eval_seed, uint64_t draw_seed, int n) {
    Dataset data(d, {}, held_out, eval_seed);
    Rng batch_draws(draw_seed);
    return data.draw_batch(batch_draws, n);
}
