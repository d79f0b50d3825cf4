// workbench/exercises.hpp -- "Write it yourself" (docs/course.md): a student writes a backward, and a check grades it.
// Exercise-only, and not part of ./sorter: the Makefile builds it alone, as ./exercise-check at -Og, in seconds.
//   make exercises                  the list
//   make exercise NAME=... DIR=...  a student's copy of the repository: that answer cut out, a gap in its place
//   make check                      in the copy: the exercise's gradient check, then the blocks built on it, then a
//                                   short training run, each in every configuration the student's code runs in;
//                                   every tensor right, or wrong with what the pattern of the error suggests
//                                   (diagnose). The last line is the grade.
// The answers live once, in the tutorial, between `// exercise NAME: begin` and `// exercise NAME: end` (matrix.hpp
// says how). The check holds none: it compares each backward with central differences of its forward, as tests.cpp
// does, and the Adam update, which has no forward to differentiate, with numbers computed once.
//
// Four headers, and their tests beside them: this one, the exercises and the hand-out; exercise_check.hpp, the
// diagnosis, the gradient check, the time of a backward and the blocks' checks; exercise_model.hpp, the whole model's
// checks and the training run; exercise_grade.hpp, the grade, a copy's gaps (EXERCISE.md, make regrade) and main.
// (exercise_mistakes_test.cpp: typical mistakes planted into copies, make mistakes; workbench/exercise_blank.sh: make
// blank; exercise_std.hpp: the C++ headers the check's build precompiles.)
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../train.hpp"
#include "text.hpp"

namespace exercises {  // its names (Tensor, jitter, ...) are tests.cpp's too, which is linked beside it

// ---------------------------------------------------------------------------------------------
// The exercises, from the small to the whole. Each names what the student writes, the checks to run in order (the
// names of BLOCK_CHECKS, exercise_check.hpp: its own block first, then the time of its backward, then the blocks built
// on it; and "model", the whole model's gradient), and the choices of the model and the training it runs under (its
// variants): every check that reads them runs once for each, so that each configuration the student's code runs in
// is checked (dropout on and off, learned and fixed positions, ...). The first variant's choices train.
// (Words as const char*, not std::string: this list is made at the start of the check, whose build a student waits
// for.)
struct Variant {
    const char* label;  // added to the names of the checks it runs: " [dropout 0.05]"
    void (*choose)(ModelConfig&, TrainConfig&);
};
struct Exercise {
    std::string name, writes;
    std::vector<const char*> checks;
    std::vector<Variant> variants;
};
inline void as_default(ModelConfig&, TrainConfig&) {}
const std::vector<Exercise> EXERCISES = {
    {"softmax", "softmax_rows_backward (matrix.hpp)",
     {"softmax_rows", "time softmax_rows", "attention", "MultiHeadAttention", "model"}, {{"", as_default}}},
    {"layernorm", "LayerNorm::backward (model.hpp)",
     {"LayerNorm", "time LayerNorm", "EncoderBlock", "DecoderBlock", "model"}, {{"", as_default}}},
    {"rmsnorm", "RMSNorm::backward (model.hpp)", {"RMSNorm", "time RMSNorm", "EncoderBlock", "model"},
     {{" [rmsnorm]", [](ModelConfig& m, TrainConfig&) { m.rms_norm = true; }}}},
    {"embedding", "Embedding::backward, the scatter-add (model.hpp)", {"Embedding", "time Embedding", "model"},
     {{" [learned positions]", [](ModelConfig& m, TrainConfig&) { m.positions = Positions::learned; }},
      {" [sinusoidal]", as_default},
      {" [learned, no embed scale]",
       [](ModelConfig& m, TrainConfig&) { m.positions = Positions::learned, m.embed_scale = false; }}}},
    {"cross-entropy", "cross_entropy's gradient, with label smoothing (train.hpp)", {"cross_entropy", "model"},
     {{" [smoothing 0.1]", [](ModelConfig&, TrainConfig& t) { t.label_smoothing = 0.1; }},
      {" [no smoothing]", as_default}}},
    {"dropout", "dropout_backward (model.hpp)", {"dropout", "attention", "EncoderBlock", "DecoderBlock", "model"},
     {{" [dropout 0.05]", [](ModelConfig& m, TrainConfig&) { m.dropout = m.attn_dropout = 0.05; }},
      {" [no dropout]", as_default}}},
    {"attention", "attention_backward (model.hpp)", {"attention", "time attention", "MultiHeadAttention", "model"},
     {{"", as_default}, {" [attention dropout 0.1]", [](ModelConfig& m, TrainConfig&) { m.attn_dropout = 0.1; }}}},
    {"heads", "MultiHeadAttention::backward: the heads split and joined, grouped-query's sum (model.hpp)",
     {"MultiHeadAttention", "time MultiHeadAttention", "DecoderBlock", "model"},
     {{" [4 heads on 2]", [](ModelConfig& m, TrainConfig&) { m.n_heads = 4, m.kv_heads_asked = 2; }},
      {" [2 heads]", as_default},
      {" [4 on 2, in tiles]",
       [](ModelConfig& m, TrainConfig&) { m.n_heads = 4, m.kv_heads_asked = 2, m.attention = Attention::flash; }}}},
    {"rotary", "MultiHeadAttention::backward: rotary positions turned back (model.hpp)",
     {"rotary", "MultiHeadAttention", "time MultiHeadAttention", "model"},
     {{" [rope]", [](ModelConfig& m, TrainConfig&) { m.positions = Positions::rope; }},
      {" [rope, decoder-only]",
       [](ModelConfig& m, TrainConfig&) { m.positions = Positions::rope, m.arch = Arch::decoder_only; }}}},
    {"swiglu", "SwiGLU::backward (model.hpp)", {"SwiGLU", "time SwiGLU", "EncoderBlock", "model"},
     {{" [swiglu]", [](ModelConfig& m, TrainConfig&) { m.activation = Activation::swiglu; }},
      {" [swiglu, no bias]",
       [](ModelConfig& m, TrainConfig&) { m.activation = Activation::swiglu, m.no_bias = true; }}}},
    {"adam", "the Adam update in Optimizer::update (train.hpp)", {"Adam"},
     {{"", [](ModelConfig&, TrainConfig& t) { t.optimizer = OptimizerKind::adam, t.lr = 0.01; }}}},
    {"decoder-block", "DecoderBlock::backward (model.hpp)", {"DecoderBlock", "time DecoderBlock", "model"},
     {{"", as_default}, {" [decoder-only]", [](ModelConfig& m, TrainConfig&) { m.arch = Arch::decoder_only; }}}},
};
inline const Exercise& exercise_named(const std::string& name) {
    for (const Exercise& e : EXERCISES)
        if (e.name == name) return e;
    std::vector<std::string> names;
    for (const Exercise& e : EXERCISES) names.push_back(e.name);
    fail("no exercise named '" + name + "': one of " + join(names, ", ") + " (make exercises lists them)");
}

// ---------------------------------------------------------------------------------------------
// The hand-out. cut() takes exercise `name` out of a file's text: a region of comments goes (the derivation is the
// student's to find), a region of code becomes the gap, which compiles, names what the region's `uses` lists (so
// no warning says it is unused) and throws. The other exercises' regions stay as they are.
const std::string TUTORIAL_FILES[] = {"matrix.hpp", "model.hpp", "train.hpp"};
inline std::string trimmed(const std::string& line) {
    std::size_t first = line.find_first_not_of(' ');
    return first == std::string::npos ? "" : line.substr(first);
}
inline bool starts_with(const std::string& s, const std::string& prefix) {
    return s.compare(0, prefix.size(), prefix) == 0;
}

inline std::string cut(const std::string& text, const std::string& name) {
    const std::string begin = "// exercise " + name + ": begin", end = "// exercise " + name + ": end";
    std::istringstream in(text);
    std::string out, line, indent, uses;
    bool inside = false, only_comments = true;
    while (std::getline(in, line)) {
        const std::string words = trimmed(line);
        if (!inside && starts_with(words, begin)) {
            inside = true, only_comments = true;
            indent = line.substr(0, line.size() - words.size());
            std::size_t open = words.find("(uses ");
            uses = open == std::string::npos ? "" : words.substr(open + 6, words.find(')') - open - 6);
        } else if (inside && starts_with(words, end)) {
            inside = false;
            if (only_comments) {
                out += indent + "// (exercise " + name + ": the derivation is yours to find)\n";
                continue;
            }
            out += indent + "// exercise " + name + ": your code from here (docs/course.md, \"Write it yourself\")\n";
            std::string voids;
            for (const std::string& used : split_words(uses)) voids += "(void)" + used + "; ";
            if (!voids.empty()) out += indent + voids.substr(0, voids.size() - 1) + "\n";
            out += indent + "throw std::logic_error(\"not written yet: exercise " + name + "\");\n";
            out += indent + "// exercise " + name + ": to here\n";
        } else if (inside) {
            only_comments = only_comments && (words.empty() || starts_with(words, "//"));
        } else {
            out += line + "\n";
        }
    }
    if (inside) fail("exercise " + name + ": a '" + begin + "' without its '" + end + "'");
    return out;
}

// A student's copy in dir (new, or empty) of `files` (the repository's: git ls-files) with the exercises `names`
// cut out (one, or several: "layernorm rmsnorm", whose answers are alike). No history goes with it, nor the
// exercises' tests (workbench/exercise*_test.cpp: exercise_check_test.cpp plants bugs into copies of the answers).
inline void hand_out(const std::string& names, const std::string& dir, const std::vector<std::string>& files) {
    namespace fs = std::filesystem;
    if (split_words(names).empty()) fail("make exercise: name one: make exercise NAME=softmax DIR=path");
    for (const std::string& name : split_words(names)) exercise_named(name);
    if (dir.empty()) fail("make exercise: name the student's copy: DIR=path (a new or empty directory)");
    if (fs::exists(dir) && !(fs::is_directory(dir) && fs::is_empty(dir)))
        fail("make exercise: DIR=" + dir + " is not empty: name a new directory");
    auto exercise_test = [](const std::string& file) {  // workbench/exercise*_test.cpp
        return starts_with(file, "workbench/exercise") && file.find("_test.cpp") == file.size() - 9;
    };
    int gaps = 0;
    for (const std::string& file : files) {
        if (exercise_test(file) || !fs::is_regular_file(file)) continue;
        std::string copy = read_all(file);
        for (const std::string& name : split_words(names)) {
            const std::string before = copy;
            copy = cut(before, name);
            gaps += copy != before;
        }
        const fs::path to = fs::path(dir) / file;
        fs::create_directories(to.parent_path());
        std::ofstream(to, std::ios::binary) << copy;
        fs::permissions(to, fs::status(file).permissions());  // the scripts stay executable
    }
    if (gaps < int(split_words(names).size())) fail("make exercise: the files given hold no answer to cut out");
    std::printf("wrote %s: exercise %s cut out. The student runs make && ./sorter, then make check\n", dir.c_str(),
                names.c_str());
}
}  // namespace exercises
