// workbench/files.hpp -- the files the program reads and writes: input files checked line by line,
// every output written whole or not at all, and every output path checked before training.
//
// Sections: --sort digits and --train-data files; opening an input; reading a file word by word (a
// checkpoint); the atomic write; the output paths, checked before any work.
#pragma once

#include <fcntl.h>     // open with O_EXCL | O_NOFOLLOW (POSIX): the temporary file of an atomic write
#include <sys/stat.h>  // lstat, fchmod (POSIX): only a regular file is replaced, and it keeps its mode
#include <unistd.h>    // fsync, getpid, access (POSIX): a file reaches the disk before it is renamed

#include <filesystem>
#include <fstream>
#include <utility>

#include "options.hpp"
#include "signals.hpp"  // pending_tmp: the temporary a signal removes

// ---------------------------------------------------------------------------------------------
// Input files: --sort and --train-data
// ---------------------------------------------------------------------------------------------
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

// Reads a plain-text file (a checkpoint) word by word; a word over 64 characters is an error, so no file can
// make a huge string.
struct WordReader {
    std::istream& in;
    std::string where;  // "--load FILE", the start of every message
    long long line = 1;  // 64 bits: a file of 2^31 newlines must not overflow it
    std::string at() const { return where + " line " + std::to_string(line); }  // the place, for a message
    [[noreturn]] void error(const std::string& what) const { fail(at() + ": " + what); }
    std::string pushed;  // a word read ahead and put back
    void put_back(const std::string& w) { pushed = w; }
    std::string next() {  // "" at the end of the file
        if (!pushed.empty()) return std::exchange(pushed, "");
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
    // The word just read ran to the end of the file and begins `whole`, which it is not: the file was cut inside it.
    bool cut_inside(const std::string& w, const std::string& whole) {
        return in.peek() == EOF && w.size() < whole.size() && whole.compare(0, w.size(), w) == 0;
    }
    std::string expect(const std::string& what) {  // the next word, which must be there
        std::string w = next();
        if (w.empty()) error("the file ends early (truncated): expected " + what);
        return w;
    }
    std::string value_of(const std::string& key) {  // the value after "key", on the same line
        std::string w = expect("'" + key + "'");
        if (cut_inside(w, key)) error("the file ends early (truncated) inside '" + key + "'");
        if (w != key) error("expected '" + key + "', found '" + w + "'");
        long long key_line = line;
        w = expect("the value of " + key);
        if (line != key_line) fail(where + " line " + std::to_string(key_line) + ": '" + key + "' has no value");
        return w;
    }
    long whole(const std::string& key, long lo, long hi) {
        std::string w = value_of(key);
        return whole_or_fail(at() + ": " + key, w, lo, hi);
    }
    // A whole number below 2^64 (a generator's state, a fingerprint): after "key", or, with key "", the next
    // word, which must be on line `on_line`.
    uint64_t whole_u64(const std::string& key, long long on_line = 0) {
        std::string w = key.empty() ? expect("a whole number") : value_of(key);
        if (key.empty() && line != on_line) fail(where + " line " + std::to_string(on_line) + ": a value is missing");
        errno = 0;
        uint64_t v = number_syntax(w, true) ? std::strtoull(w.c_str(), nullptr, 10) : 0;
        if (!number_syntax(w, true) || errno == ERANGE)
            error((key.empty() ? "" : key + " ") + w + ": expected a whole number below 2^64");
        return v;
    }
    double number(const std::string& key, double lo, double hi) {  // lo <= X <= hi
        std::string w = value_of(key);
        double v = 0;
        if (!parse_finite(w, v) || v < lo || v > hi)
            error(key + " " + w + fmt(": expected a number from %g to %g", lo, hi));
        return v;
    }
    int choice(const std::string& key, const std::vector<std::string>& names) {
        std::string w = value_of(key);
        return choice_or_fail(at() + ": " + key, w, names);
    }
};

// What a model was made from, as its checkpoint keeps it: the seed of its weights and training draws, the
// --train-data file it trained on (how many sequences, and their fingerprint), and the run it was made for.
struct Origin {
    long seed = -1;                 // -1: unknown (a checkpoint from before version 4 did not keep it)
    long train_lines = 0;           // 0: the model trained on generated data
    uint64_t train_fingerprint = 0;
    long planned_steps = -1;        // the step its run was to end at: --finish trains on to it (-1: unknown,
                                    // a checkpoint from before version 5)
    DataConfig trained_on;          // the data it was first trained on: its own data, unless it was fine-tuned
    bool fine_tuned = false;        // on other data (--load with --task, --seq-len or --min-len; chapter 12)
    long loaded_updates = -1;       // a fine-tuning run's: the updates its --load file had made (-1: not one)
};
// The fingerprint of a --train-data file: its sequences in order (not its comments or spacing), hashed.
inline uint64_t pool_fingerprint(const std::vector<std::vector<int>>& pool) {
    std::vector<int> all;
    for (const std::vector<int>& sequence : pool) {
        all.insert(all.end(), sequence.begin(), sequence.end());
        all.push_back(PAD);  // digits are never PAD: a separator, so that [1 2][3] and [1][2 3] differ
    }
    return hash_of(all);
}
// A model that trained on generated data takes no --train-data file: it would change its held-out set.
// (Checked before the file is read, whose lines may not even fit that model's data settings.)
inline void refuse_new_train_data(const std::string& load_path, const std::string& train_data_path,
                                  const Origin& trained) {
    if (trained.train_lines == 0 && !train_data_path.empty())
        fail("--train-data " + train_data_path + " cannot be combined with --load " + load_path +
             ": that model trained on generated data, and a file would change its held-out set");
}
// The held-out set depends on the training file (no held-out input is one of its lines), so a model that
// trained on one goes on only with the same file, and is scored only against the same held-out set.
// Without a file, --sort, --params, --show-pe and --trace-shapes still work (`needs_data` false).
inline void check_train_data(const std::string& load_path, const std::string& train_data_path,
                             const Origin& trained, const std::vector<std::vector<int>>& pool, bool needs_data) {
    std::string trained_on = fmt("a --train-data file of %ld sequences", trained.train_lines);
    if (trained.train_lines > 0 && !train_data_path.empty() &&
        (long(pool.size()) != trained.train_lines || pool_fingerprint(pool) != trained.train_fingerprint))
        fail("--train-data " + train_data_path + ": not the file the model in " + load_path + " trained on (" +
             trained_on + "); give that file, or train a new model");
    if (trained.train_lines > 0 && train_data_path.empty() && needs_data)
        fail("--load " + load_path + ": this model trained on " + trained_on + "; give the file again (--load " +
             load_path + " --train-data FILE), so that training and scoring use the held-out set it had");
}
// --finish: the steps a loaded run had left, from the plan its checkpoint keeps.
inline long steps_left(const std::string& path, const Origin& origin, long updates) {
    if (origin.planned_steps < 0 && updates == 0)  // (a version 1 file too: it keeps no training)
        fail("--finish: " + path + " holds no run under way (no update made, no steps planned: a fine-tuned model "
             "saved merged starts a count of its own); give --steps N to train it");
    if (origin.planned_steps < 0)
        fail("--finish: " + path + " does not say how many steps its run planned (it comes from a checkpoint older "
             "than version 5); give --steps N to train N steps more");
    if (origin.planned_steps == updates)
        fail(fmt("--finish: the run in %s made all %ld of its planned steps; to train it further, give --steps N",
                 path.c_str(), updates));
    return origin.planned_steps - updates;
}
// ---------------------------------------------------------------------------------------------
// Output files
// ---------------------------------------------------------------------------------------------
// Write a file atomically: to a temporary file beside it, flushed to the disk, then renamed over PATH
// in one step. A reader sees the old file or the whole new one; a failed write leaves PATH as it was.
// Only a regular file is replaced, and it keeps its mode (a device, a pipe or a link is refused:
// as root, --save /dev/null would otherwise replace /dev/null). The temporary is created with
// O_EXCL | O_NOFOLLOW, so a file or link planted at its name is never followed or overwritten, and
// a signal during the write removes it (signals.hpp, on_signal).
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

// Every file the run will write, checked before training, so a typo costs no time and no output can
// take another's place: two outputs naming one file, or an output naming the --load file (except --save,
// which trains on in place), would leave one of them, and perhaps the only copy of a model, lost.
struct Output {
    std::string flag, path;  // "--report", "r.html"; an --svg picture: "--svg", "DIR/attention.svg"
};
inline std::vector<Output> outputs_of(const Options& o) {
    std::vector<Output> out;
    for (const auto& [flag, path] : {std::pair{"--save", o.save_path}, std::pair{"--dump-step", o.dump_step_path},
                                     std::pair{"--report", o.report_path}})
        if (!path.empty()) out.push_back({flag, path});
    if (!o.svg_dir.empty())
        for (const std::string& name : {ATTENTION_SVG, POSITIONS_SVG, TRAINING_SVG})
            out.push_back({"--svg", (std::filesystem::path(o.svg_dir) / name).string()});
    if (!o.svg_dir.empty() && o.model.experts > 0)
        out.push_back({"--svg", (std::filesystem::path(o.svg_dir) / EXPERTS_SVG).string()});
    return out;
}
// Two paths name one file: the same device and inode when both exist, else the same canonical path.
inline bool same_file(const std::string& a, const std::string& b) {
    struct stat sa{}, sb{};
    if (stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    std::error_code ec;
    return std::filesystem::weakly_canonical(std::filesystem::absolute(a, ec), ec) ==
           std::filesystem::weakly_canonical(std::filesystem::absolute(b, ec), ec);
}
// A directory can be written into when a file can be made there: made and removed at once (access()
// says yes to root even where nothing can be made, such as /sys). Returns "" or the reason.
inline std::string cannot_write_into(const std::string& dir) {
    std::string probe = (std::filesystem::path(dir) / (".sorter-probe-" + std::to_string(long(getpid())))).string();
    int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return std::strerror(errno);
    close(fd);
    unlink(probe.c_str());
    return "";
}
inline void check_output(const Output& out) {
    std::error_code ec;
    std::string what = out.flag + " " + out.path;
    std::filesystem::path dir = std::filesystem::path(out.path).parent_path();
    if (dir.empty()) dir = ".";
    if (!std::filesystem::is_directory(dir, ec))
        fail(what + ": the directory " + dir.string() + " does not exist");
    if (std::filesystem::is_directory(out.path, ec)) fail(what + ": is a directory");
    struct stat existing{};
    if (lstat(out.path.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode))
        fail(what + ": not a regular file (a device, pipe or link); choose another name");
    if (std::string reason = cannot_write_into(dir.string()); !reason.empty())
        fail(what + ": cannot write into " + dir.string() + " (" + reason + ")");
    // write_atomically writes NAME.tmp-PID first: it too must fit the usual 255-byte limit of a file name
    if (std::filesystem::path(out.path).filename().string().size() + 16 > 255)
        fail(what + ": the file name is too long (at most 239 bytes)");
}
inline void check_output_paths(const Options& o) {
    std::error_code ec;
    if (!o.svg_dir.empty() && !std::filesystem::exists(o.svg_dir, ec))
        fail("--svg " + o.svg_dir + ": no such directory (create it first, e.g. mkdir -p " + o.svg_dir + ")");
    if (!o.svg_dir.empty() && !std::filesystem::is_directory(o.svg_dir, ec))
        fail("--svg " + o.svg_dir + ": not a directory");
    if (!o.svg_dir.empty())
        if (std::string reason = cannot_write_into(o.svg_dir); !reason.empty())
            fail("--svg " + o.svg_dir + ": cannot write into this directory (" + reason + ")");
    std::vector<Output> outputs = outputs_of(o);
    for (const Output& out : outputs) check_output(out);
    for (std::size_t i = 0; i < outputs.size(); i++) {
        for (std::size_t j = 0; j < i; j++)
            if (same_file(outputs[i].path, outputs[j].path))
                fail(outputs[j].flag + " " + outputs[j].path + " and " + outputs[i].flag + " " + outputs[i].path +
                     " name the same file, so one would overwrite the other; give each output its own name");
        if (!o.load_path.empty() && outputs[i].flag != "--save" && same_file(outputs[i].path, o.load_path))
            fail(outputs[i].flag + " " + outputs[i].path + " is the file given to --load: writing it would replace "
                 "the model; choose another name (only --save may name the --load file, to train on in place)");
    }
}
