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
// Six headers, and their tests beside them: this one, the exercises and the hand-out; exercise_diagnosis.hpp, what
// the pattern of a wrong gradient suggests; exercise_check.hpp, the gradient check and the time of a backward;
// exercise_blocks.hpp, the blocks' checks and their list; exercise_model.hpp, the whole model's checks and the
// training run; exercise_grade.hpp, the grade, a copy's gaps (EXERCISE.md, make regrade) and main.
// (fuzz/exercise_mistakes.cpp: typical mistakes planted into copies, make mistakes; workbench/exercise_blank.sh: make
// blank; exercise_std.hpp: the C++ headers the check's build precompiles.)
#pragma once

#include <fcntl.h>     // open with O_EXCL (POSIX): each file of the hand-out is new
#include <sys/stat.h>  // fchmod: a file keeps its mode (the scripts stay executable)
#include <unistd.h>    // write, fsync, getpid

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../chapters/10_decoding.hpp"  // the tutorial, and the masks written out (causal_mask, padding_mask)
#include "text.hpp"

namespace exercises {  // its names (Tensor, jitter, ...) are tests.cpp's too, which is linked beside it

// ---------------------------------------------------------------------------------------------
// The exercises, from the small to the whole. Each names what the student writes, the checks to run in order (the
// names of BLOCK_CHECKS, exercise_blocks.hpp: its own block first, then the time of its backward, then the blocks
// built on it; and "model", the whole model's gradient), and the choices of the model and the training it runs under
// (its variants): every check that reads them runs once for each, so that each configuration the student's code runs
// in is checked (dropout on and off, learned and fixed positions, ...). The first variant's choices train.
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
    {"rmsnorm", "RMSNorm::backward (chapters/04_todays_blocks.hpp)",
     {"RMSNorm", "time RMSNorm", "EncoderBlock", "model"},
     {{" [rmsnorm]", [](ModelConfig& m, TrainConfig&) { m.rms_norm = true; }}}},
    {"embedding", "Embedding::backward, the scatter-add (model.hpp)", {"Embedding", "time Embedding", "model"},
     {{" [learned positions]", [](ModelConfig& m, TrainConfig&) { m.positions = Positions::learned; }},
      {" [sinusoidal]", as_default},
      {" [learned, no embed scale]",
       [](ModelConfig& m, TrainConfig&) { m.positions = Positions::learned, m.embed_scale = false; }}}},
    {"cross-entropy", "cross_entropy's gradient, with label smoothing (train.hpp)", {"cross_entropy", "model"},
     {{" [smoothing 0.1]", [](ModelConfig&, TrainConfig& t) { t.label_smoothing = 0.1; }},
      {" [no smoothing]", as_default}}},
    {"dropout", "dropout_backward (chapters/02_dropout.hpp)",
     {"dropout", "attention", "EncoderBlock", "DecoderBlock", "model"},
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
    {"rotary", "PositionsInAttention::ready_backward: rotary positions turned back (chapters/05_positions.hpp)",
     {"rotary", "MultiHeadAttention", "time MultiHeadAttention", "model"},
     {{" [rope]", [](ModelConfig& m, TrainConfig&) { m.positions = Positions::rope; }},
      {" [rope, decoder-only]",
       [](ModelConfig& m, TrainConfig&) { m.positions = Positions::rope, m.arch = Arch::decoder_only; }}}},
    {"swiglu", "SwiGLU::backward (chapters/04_todays_blocks.hpp)", {"SwiGLU", "time SwiGLU", "EncoderBlock", "model"},
     {{" [swiglu]", [](ModelConfig& m, TrainConfig&) { m.activation = Activation::swiglu; }},
      {" [swiglu, no bias]",
       [](ModelConfig& m, TrainConfig&) { m.activation = Activation::swiglu, m.no_bias = true; }}}},
    {"adam", "the Adam update in Optimizer::update (chapters/03_optimizers.hpp)", {"Adam"},
     {{"", [](ModelConfig&, TrainConfig& t) { t.optimizer = OptimizerKind::adam, t.lr = 0.01; }}}},
    {"decoder-block", "DecoderBlock::backward (model.hpp)", {"DecoderBlock", "time DecoderBlock", "model"},
     {{"", as_default}}},
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
// The tutorial's files: the first part, then every chapter (chapters/*.hpp), in the book's order.
inline std::vector<std::string> tutorial_files() {
    std::vector<std::string> files = {"matrix.hpp", "model.hpp", "train.hpp"}, chapters;
    std::error_code no_folder;
    for (const auto& entry : std::filesystem::directory_iterator("chapters", no_folder))
        if (entry.path().extension() == ".hpp") chapters.push_back("chapters/" + entry.path().filename().string());
    std::sort(chapters.begin(), chapters.end());
    files.insert(files.end(), chapters.begin(), chapters.end());
    return files;
}
const std::vector<std::string> TUTORIAL_FILES = tutorial_files();
inline std::string trimmed(const std::string& line) {
    std::size_t first = line.find_first_not_of(' ');
    return first == std::string::npos ? "" : line.substr(first);
}
inline bool starts_with(const std::string& s, const std::string& prefix) {
    return s.compare(0, prefix.size(), prefix) == 0;
}

// A region that writes out answers of other code (chapter 07's Llama layer spells out RMSNorm's, attention's and the
// heads' backwards as one function) is marked "// shows the answers of NAME NAME ...: begin (uses ...)" and
// "// shows the answers: end": handing out any of those exercises cuts it too, to a line that throws, so the copy
// does not hold the answer in a second place.
inline bool shows_answer_of(const std::string& words, const std::string& name) {
    const std::string marker = "// shows the answers of ";
    if (!starts_with(words, marker)) return false;
    const std::vector<std::string> names = split_words(words.substr(marker.size(), words.find(':') - marker.size()));
    return std::find(names.begin(), names.end(), name) != names.end();
}
inline std::string cut(const std::string& text, const std::string& name) {
    const std::string begin = "// exercise " + name + ": begin", end = "// exercise " + name + ": end";
    std::istringstream in(text);
    std::string out, line, indent, uses;
    bool inside = false, only_comments = true, showing = false;
    while (std::getline(in, line)) {
        const std::string words = trimmed(line);
        if (!inside && !showing && shows_answer_of(words, name)) {
            showing = true;
            indent = line.substr(0, line.size() - words.size());
            std::size_t open = words.find("(uses ");
            uses = open == std::string::npos ? "" : words.substr(open + 6, words.find(')', open) - open - 6);
        } else if (showing && starts_with(words, "// shows the answers: end")) {
            showing = false;
            out += indent + "// (cut from this copy: these lines show exercise " + name + "'s answer)\n";
            std::string voids;
            for (const std::string& used : split_words(uses)) voids += "(void)" + used + "; ";
            if (!voids.empty()) out += indent + voids.substr(0, voids.size() - 1) + "\n";
            out += indent + "throw std::logic_error(\"cut from this copy: it shows exercise " + name + "'s answer\");"
                   "\n";
        } else if (showing) {
            continue;
        } else if (!inside && starts_with(words, begin)) {
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
    if (showing) fail("exercise " + name + ": a '// shows the answers of' without its '// shows the answers: end'");
    return out;
}

// What stands at DIR, for the hand-out (nothing, a directory, a dangling link, a file, a device), said as one line
// that names the way out; "" when DIR is new or an empty directory (a link to one: the directory it names). `to`
// becomes the path the copy is renamed to.
inline std::string where_copy_cannot_go(const std::string& dir, std::string& to) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const std::string at = "make exercise: DIR=" + dir + " ";
    to = dir;
    while (to.size() > 1 && to.back() == '/') to.pop_back();  // "copy/" is the folder copy
    const fs::file_status link = fs::symlink_status(to, ec);
    if (fs::is_symlink(link)) {
        const fs::path target = fs::read_symlink(to, ec);
        if (!fs::exists(fs::status(to, ec)))
            return at + "is a link to " + target.string() + ", which does not exist: name a new directory";
        if (!fs::is_directory(fs::status(to, ec)))
            return at + "is a link to " + target.string() + ", which is not a directory: name a new directory";
        to = fs::canonical(to, ec).string();
        if (ec) return at + "is a link that cannot be followed (" + ec.message() + "): name a new directory";
    }
    const fs::file_status there = fs::status(to, ec);
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
        return at + "cannot be looked at (" + ec.message() + "): name a new directory";
    if (!fs::exists(there)) return "";
    if (fs::is_regular_file(there)) return at + "is a file, not a directory: name a new directory";
    if (!fs::is_directory(there))
        return at + "is not a directory (a device, a pipe or a socket): name a new directory";
    if (!fs::is_empty(to, ec) || ec) return at + "is not empty: name a new directory";
    return "";
}
// `text` into the new file `path`, with `mode`; every write checked, the file on the disk before it returns. Returns
// "" or what went wrong ("No space left on device").
inline std::string write_new_file(const std::string& path, const std::string& text, mode_t mode) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 07777);
    if (fd < 0) return std::strerror(errno);
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += std::size_t(n);
    }
    int error = done < text.size() ? (errno ? errno : EIO) : 0;
    if (!error && (fchmod(fd, mode & 07777) != 0 || fsync(fd) != 0)) error = errno;  // (open's mode meets the umask)
    if (close(fd) != 0 && !error) error = errno;
    return error ? std::strerror(error) : "";
}
// A file of the repository, whole; fails when it cannot be read (an unreadable file must not be handed out empty).
inline std::string read_source(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in || in.bad()) fail("make exercise: cannot read " + file + " (" + std::strerror(errno) + ")");
    return text.str();
}

// A student's copy in dir (new, or empty) of `files` (the repository's: git ls-files) with the exercises `names`
// cut out (one, or several: "layernorm rmsnorm", whose answers are alike). No history goes with it, nor the
// exercises' tests (workbench/exercise*_test.cpp, fuzz/exercise_mistakes.cpp: they plant bugs in the answers).
// The copy is whole or absent: it is written into a new folder beside dir (.NAME.hand-out-PID), every write checked
// and each file on the disk, then renamed to dir in one step; on any failure the folder is removed and dir is as it
// was, so the next call is not refused.
inline void hand_out(const std::string& names, const std::string& dir, const std::vector<std::string>& files) {
    namespace fs = std::filesystem;
    if (split_words(names).empty()) fail("make exercise: name one: make exercise NAME=softmax DIR=path");
    for (const std::string& name : split_words(names)) exercise_named(name);
    if (dir.empty()) fail("make exercise: name the student's copy: DIR=path (a new or empty directory)");
    if (files.empty())
        fail("make exercise: git lists no files here: run it in the repository, a git clone (the copy takes the "
             "files git tracks; a student's copy has no git, and hands out nothing)");
    std::string to;
    if (std::string problem = where_copy_cannot_go(dir, to); !problem.empty()) fail(problem);
    std::error_code ec;
    const fs::path parent = fs::path(to).parent_path().empty() ? fs::path(".") : fs::path(to).parent_path();
    fs::create_directories(parent, ec);  // as mkdir -p: the folders above DIR
    if (ec || !fs::is_directory(parent, ec))
        fail("make exercise: DIR=" + dir + ": cannot make its folder " + parent.string() + " (" +
             (ec ? ec.message() : std::string("not a directory")) + "): name a directory where one can be made");
    const fs::path temporary = parent / ("." + fs::path(to).filename().string() + ".hand-out-" +
                                         std::to_string(long(getpid())));
    if (!fs::create_directory(temporary, ec) || ec)
        fail("make exercise: DIR=" + dir + ": cannot make a folder in " + parent.string() + " (" +
             (ec ? ec.message() : std::string("it exists")) + "): name a directory where one can be made");
    auto give_up = [&](const std::string& why) {  // the folder goes, DIR stays as it was
        std::error_code ignored;
        fs::remove_all(temporary, ignored);
        fail(why);
    };
    auto exercise_test = [](const std::string& file) {  // workbench/exercise*_test.cpp, fuzz/exercise_mistakes.cpp
        return (starts_with(file, "workbench/exercise") && file.find("_test.cpp") == file.size() - 9) ||
               file == "fuzz/exercise_mistakes.cpp";  // (its edits quote the answers' lines)
    };
    int gaps = 0;
    try {
        for (const std::string& file : files) {
            if (exercise_test(file) || !fs::is_regular_file(file, ec)) continue;
            std::string copy = read_source(file);
            for (const std::string& name : split_words(names)) {
                const std::string before = copy;
                copy = cut(before, name);
                gaps += copy != before;
            }
            const fs::path path = temporary / file;
            fs::create_directories(path.parent_path(), ec);
            const std::string error = ec ? ec.message()
                                         : write_new_file(path.string(), copy, mode_t(fs::status(file).permissions()));
            if (!error.empty())
                give_up("make exercise: cannot write " + (fs::path(dir) / file).string() + " (" + error +
                        "); nothing was written to " + dir);
        }
    } catch (const fs::filesystem_error& e) {
        give_up("make exercise: " + std::string(e.what()) + "; nothing was written to " + dir);
    } catch (const UsageError& e) {  // a file that cannot be read, a marker left open, a write refused (give_up's)
        give_up(e.message);
    }
    if (gaps < int(split_words(names).size())) give_up("make exercise: the files given hold no answer to cut out");
    if (std::rename(temporary.c_str(), to.c_str()) != 0)  // in one step (an empty directory at DIR is replaced)
        give_up("make exercise: DIR=" + dir + ": cannot rename the copy into place (" + std::strerror(errno) + ")");
    std::printf("wrote %s: exercise %s cut out. The student reads EXERCISE.md there, then runs make check (neither "
                "make nor ./sorter first)\n", dir.c_str(), names.c_str());
}
}  // namespace exercises
