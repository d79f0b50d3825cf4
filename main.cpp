// main.cpp -- the sorter program: read the flags, train, show the model learning, report.
//
// The tutorial is in matrix.hpp, model.hpp and train.hpp; this file is the program around it.
// Sections, in the order a run uses them: options, printing helpers, training run, main(); then
// the benchmark (--bench), last and on its own.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <string>
#include <vector>

#include "train.hpp"

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------
struct Options {
    ModelConfig model;
    DataConfig data;
    long steps = 12000;  // 12,000 steps of 8 = 96,000 examples
    int batch = 8;       // batch 8, lr 0.1 reaches 100% held-out exact match in fewer examples than
    double lr = 0.1;     // batch 32, lr 0.3, and ends there more reliably (README, Performance)
    uint64_t seed = 1;
    long eval_every = 2000;
    bool bench = false;  // --bench: print the speed table instead of training (see the end of this file)
};

[[noreturn]] inline void usage_error(const std::string& message) {
    std::fprintf(stderr, "sorter: %s\nRun './sorter --help' for the flags.\n", message.c_str());
    std::exit(2);
}

// A whole number in [lo, hi], or a clear error naming the flag.
inline long parse_integer(const std::string& flag, const char* text, long lo, long hi) {
    if (!text) usage_error(flag + " needs a value (a whole number from " + std::to_string(lo) + " to " +
                           std::to_string(hi) + ")");
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi)
        usage_error(flag + " " + text + ": expected a whole number from " + std::to_string(lo) + " to " +
                    std::to_string(hi));
    return v;
}

inline void print_help() {
    std::printf(
        "sorter: a from-scratch Transformer that learns to sort digits.\n"
        "\n"
        "usage: ./sorter [--steps N] [--seed N]\n"
        "\n"
        "  --steps N   training steps (default 12000), each a mini-batch of 8 examples\n"
        "  --seed N    seed for the weights and the training draws (default 1)\n"
        "  --bench     print the speed table instead of training (make bench)\n"
        "  --help      this text\n"
        "\n"
        "example: ./sorter --steps 1000 --seed 7\n");
}

inline Options parse_options(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string flag = argv[i];
        const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
        if (flag == "--help" || flag == "-h") {
            print_help();
            std::exit(0);
        } else if (flag == "--steps") {
            o.steps = parse_integer(flag, value, 0, 100000000), i++;
        } else if (flag == "--bench") {
            o.bench = true;
        } else if (flag == "--seed") {
            o.seed = uint64_t(parse_integer(flag, value, 0, 2147483647)), i++;
        } else {
            usage_error("unknown flag '" + flag + "'");
        }
    }
    o.model.vocab = vocab_size(o.data);
    o.model.max_len = o.data.seq_len;
    return o;
}

// ---------------------------------------------------------------------------------------------
// Printing helpers
// ---------------------------------------------------------------------------------------------
inline std::string digits_text(const std::vector<int>& tokens) {
    std::string s = "[";
    for (std::size_t i = 0; i < tokens.size(); i++) {
        if (i) s += ", ";
        s += tokens[i] == PAD ? std::string("_") : std::to_string(tokens[i]);
    }
    return s + "]";
}

inline void show_examples(const char* title, Transformer& model, const std::vector<Example>& shown) {
    std::printf("--- %s ---\n", title);
    for (const Example& e : shown) {
        std::vector<int> guess = greedy_decode(model, e.source, int(e.target.size()));
        std::printf("  input %s   pred %s   true %s%s\n", digits_text(e.source).c_str(),
                    digits_text(guess).c_str(), digits_text(e.target).c_str(),
                    guess == e.target ? "   ok" : "");
    }
}

// ---------------------------------------------------------------------------------------------
// The training run
// ---------------------------------------------------------------------------------------------
inline int run(const Options& o) {
    Dataset data(o.data, 1000, /*eval_seed=*/12345);
    Transformer model(o.model, o.seed);
    Rng rng(o.seed ^ 0x5eedULL);

    // Three held-out inputs to watch, the first with repeated digits.
    std::vector<Example> shown;
    for (const Example& e : data.held_out) {
        std::vector<int> s = e.source;
        std::sort(s.begin(), s.end());
        bool repeats = std::adjacent_find(s.begin(), s.end()) != s.end();
        if (shown.empty() ? repeats : true) shown.push_back(e);
        if (shown.size() == 3) break;
    }

    std::printf("sorter: d_model %d, heads %d, d_ff %d, layers %d+%d, seq_len %d | "
                "SGD lr %g, batch %d, steps %ld, seed %llu\n",
                o.model.d_model, o.model.n_heads, o.model.d_ff, o.model.enc_layers, o.model.dec_layers,
                o.data.seq_len, o.lr, o.batch, o.steps, (unsigned long long)o.seed);
    std::printf("held-out: %zu sequences that training never draws\n\n", data.held_out.size());
    show_examples("before training", model, shown);
    std::printf("\n%8s  %8s  %12s  %14s\n", "step", "loss", "exact-match", "token-accuracy");

    double train_seconds = 0.0, recent_loss = 0.0;
    long loss_count = 0;
    double last_loss = 0.0;
    std::vector<Example> batch(o.batch);
    for (long step = 1; step <= o.steps; step++) {
        auto t0 = std::chrono::steady_clock::now();
        for (Example& e : batch) e = data.sample(rng);
        recent_loss += train_step(model, batch, o.lr);
        loss_count++;
        train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

        if (step % o.eval_every == 0 || step == o.steps) {
            last_loss = recent_loss / loss_count;
            recent_loss = 0.0, loss_count = 0;
            Accuracy a = evaluate(model, data.held_out);
            std::printf("%8ld  %8.4f  %11.1f%%  %13.1f%%\n", step, last_loss, 100 * a.exact, 100 * a.token);
        }
        if (step == o.steps / 2) {
            std::printf("\n");
            show_examples(("step " + std::to_string(step)).c_str(), model, shown);
            std::printf("\n");
        }
    }
    Accuracy a = evaluate(model, data.held_out);
    std::printf("\n");
    show_examples("after training", model, shown);
    std::printf("\nfinal: exact-match %.1f%% (%d/%d), token-accuracy %.1f%%, loss %.4f, train-time %.1f s\n",
                100 * a.exact, a.exact_count, a.total, 100 * a.token, last_loss, train_seconds);
    return 0;
}

int run_bench(const Options& o);  // the last section of this file

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv);
    return o.bench ? run_bench(o) : run(o);
}

// ---------------------------------------------------------------------------------------------
// Benchmark (./sorter --bench, or make bench): the speed table of README.md's Performance section.
// Every figure is measured in this run. When Debian's PyTorch is installed, the PyTorch peer
// (../shared/peers/torch_sorter.py) is run for the same rows, alternating with ours, so that the
// machine's drift hits both programs alike.
// ---------------------------------------------------------------------------------------------
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

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
