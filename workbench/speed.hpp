// workbench/speed.hpp -- --speed (one configuration; make compare sets it beside PyTorch) and --bench
// (the speed table of docs/performance.md; make bench runs it).
//
// Sections: keeping freed memory; training examples per second; the FLOPs of a forward pass; --speed; --bench.
#pragma once

#include <sys/resource.h>  // getrusage (POSIX): peak memory for the benchmark
#include <unistd.h>        // sysconf (POSIX): the processors online
#ifdef __GLIBC__
#include <malloc.h>  // mallopt
#endif
#ifdef __APPLE__
#include <sys/sysctl.h>  // sysctlbyname: the CPU's name on macOS, which has no /proc/cpuinfo
#endif

#include <fstream>

#include "history.hpp"

// glibc hands freed blocks from 128 kB up back to the system, which gives them again as fresh pages to be zeroed,
// and every step frees matrices and asks again for the same sizes: main() asks glibc to keep them (the gain, and
// peak memory unchanged: docs/performance.md).
inline void keep_freed_blocks() {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

// Training examples per second of `model`, which trains: steps (draw, forward, backward, SGD) for `seconds`, after a
// 10% warm-up.
inline double examples_per_second(const Options& o, Transformer& model, double seconds) {
    Dataset data(o.data, {}, 0);
    TrainState state(o.train, 1);
    TrainConfig constant = o.train;  // one rate throughout: the steps go on for as long as the clock says
    constant.schedule = Schedule::constant;
    auto step = [&] { train_step(model, data, constant, state, MAX_STEPS); };
    for (auto t0 = Clock::now(); seconds_since(t0) < 0.1 * seconds;) step();
    long steps = 0;
    auto t0 = Clock::now();
    double elapsed = 0.0;
    for (; (elapsed = seconds_since(t0)) < seconds; steps++) step();
    return double(steps) * o.train.batch / elapsed;
}

// Matmul FLOPs (2 m n k for an (m, k) by (k, n) product) of one teacher-forced forward pass of one
// example, read from the built model: each weight matrix W (d_in, d_out) of its parameter list times the rows that
// pass through it, plus every attention layer's Q K^T and P V, and the output projection. A training step costs
// about 3x this: the backward of every product is two products.
inline double matmul_flops_forward(const ModelConfig& c, const DataConfig& d) {
    Transformer model(c, 1);
    // S source rows, T answer rows; without an encoder the decoder reads source and answer as one sequence.
    const double S = d.seq_len, T = d.seq_len, L = has_encoder(c.arch) ? T : S + T, d_k = c.d_model / c.n_heads;
    double flops = 2 * T * c.d_model * c.vocab;  // logits (T, vocab) = h (T, d_model) W_out, tied or not
    for (auto& [name, p] : model.parameters()) {  // the blocks' weights W_q .. W_o, W_1 .. W_3 (not biases, norms)
        const std::string tensor = name.substr(name.rfind('.') + 1);  // "W_q", "W_1", "b_1", "gamma", "table"
        if (tensor.rfind("W_", 0) != 0) continue;
        const bool encoder = name.rfind("encoder.", 0) == 0, cross = name.find(".cross_attn.") != std::string::npos;
        const double Lq = encoder ? S : cross ? T : L;  // the rows of the block's queries, W_o and feed-forward
        const double Lk = encoder ? S : cross ? S : L;  // the rows its keys and values read (cross: the memory's)
        flops += 2 * (tensor == "W_k" || tensor == "W_v" ? Lk : Lq) * p->value.rows * p->value.cols;
        if (tensor == "W_q") flops += c.n_heads * 2 * (2 * Lq * Lk * d_k);  // every head's Q K^T and P V, once a layer
    }
    return flops;
}
inline std::string threads_text() {  // "1 thread", "2 threads": the pool's count (--threads)
    return fmt("%d thread%s", threads.count(), threads.count() == 1 ? "" : "s");
}
// --speed: two lines for make compare, of the model the flags give or the one --load names (main.cpp's time_model),
// which trains for the first and is evaluated for the second.
inline void run_speed(const Options& o, Transformer& model) {
    double rate = examples_per_second(o, model, 1.0);
    std::printf("sorter --speed: %.1f training examples/s (%s, batch %d, %s; %.2f GFLOP/s)\n", rate,
                size_text(o.model, o.data).c_str(), o.train.batch, threads_text().c_str(),
                3 * matmul_flops_forward(o.model, o.data) * rate * 1e-9);
    Dataset data(o.data);  // one evaluation costs the same, trained or not: every output has seq_len tokens
    auto t0 = Clock::now();
    evaluate(model, data.held_out, o.decode);
    std::string how = o.decode.beam == 1 ? "greedy" : fmt("beam %d", o.decode.beam);
    std::printf("sorter --speed: one held-out evaluation (%zu sequences, %s, %s) in %.3f s\n", data.held_out.size(),
                how.c_str(), threads_text().c_str(), seconds_since(t0));
}
#ifndef SORTER_CXXFLAGS  // the Makefile passes the compiler and flags it builds with
#define SORTER_CXXFLAGS "(not recorded)"
#endif
// Time to accuracy with this run's settings (the defaults unless flags say otherwise): evaluate every 100
// steps, evaluation time not counted; note the first step at 99% and at 100%.
inline void time_to_accuracy(const Options& o) {
    Dataset data(o.data);
    Transformer model(o.model, o.seed);
    TrainState state(o.train, o.seed);
    double train_seconds = 0.0, decode_seconds = 0.0, targets[] = {0.99, 1.0};
    long decoded = 0;
    int reached = 0;  // how many of the targets
    std::printf("time to exact match on the %zu held-out sequences (batch %d, %s, seed %llu)\n",
                data.held_out.size(), o.train.batch, optimizer_text(o).c_str(), (unsigned long long)o.seed);
    for (long step = 1; step <= o.train.steps && reached < 2; step++) {
        auto t0 = Clock::now();
        train_step(model, data, o.train, state, o.train.steps);
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
        std::printf("greedy decoding: %.1f us per sequence (%zu together, keys and values kept)\n",
                    1e6 * decode_seconds / decoded, chunk_size(o.model, o.data.seq_len));
}

// The CPU's name where the system says it: Linux's /proc/cpuinfo (x86's "model name"; ARM's has none),
// macOS's sysctl. Elsewhere "unknown CPU".
inline std::string cpu_name() {
#ifdef __APPLE__
    char name[256] = {};
    std::size_t size = sizeof name - 1;
    if (sysctlbyname("machdep.cpu.brand_string", name, &size, nullptr, 0) == 0 && name[0]) return name;
#endif
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
        if (line.rfind("model name", 0) == 0 && line.find(": ") != std::string::npos)
            return line.substr(line.find(": ") + 2);
    return "unknown CPU";
}

// Peak resident memory in kB: getrusage's ru_maxrss is in kilobytes on Linux, in bytes on macOS.
inline long peak_memory_kb() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
#ifdef __APPLE__
    return long(usage.ru_maxrss / 1024);
#else
    return long(usage.ru_maxrss);
#endif
}

// --step-cost: what one training step costs at the size the other flags give, evaluation left out (at --seq-len 512
// one held-out evaluation takes minutes): one step to warm up, then at least STEP_COST_STEPS steps and 2 seconds of
// them, the median's seconds (a shared machine's slow moments fall to either side), and
// the process's peak resident memory, which the steps set (docs/performance.md, "Attention in tiles", compares
// --attention plain and flash with it).
constexpr int STEP_COST_STEPS = 5;
inline void run_step_cost(const Options& o, Transformer& model) {  // the model the flags give, or --load's; it trains
    Dataset data(o.data, {}, 0);
    TrainState state(o.train, o.seed);
    train_step(model, data, o.train, state, MAX_STEPS);
    std::vector<double> seconds;
    for (auto start = Clock::now(); int(seconds.size()) < STEP_COST_STEPS || seconds_since(start) < 2.0;) {
        auto t0 = Clock::now();
        train_step(model, data, o.train, state, MAX_STEPS);
        seconds.push_back(seconds_since(t0));
    }
    std::sort(seconds.begin(), seconds.end());
    std::printf("sorter --step-cost: attention %s, %s, batch %d, %s: a step in %.4f s (median of %d), peak memory "
                "%.1f MB\n", ATTENTION_NAMES[int(o.model.attention)].c_str(), size_text(o.model, o.data).c_str(),
                o.train.batch, threads_text().c_str(), seconds[seconds.size() / 2], int(seconds.size()),
                peak_memory_kb() / 1024.0);
}

// The speed table of docs/performance.md, every figure measured in this run. Each row
// is a command line, as a user would type it after ./sorter --speed.
inline void run_bench(const Options& o) {
    std::string cpu = cpu_name();
    std::printf("sorter --bench: %ld processors online, %s; %s\ncompiler: %s, flags: %s\n",
                sysconf(_SC_NPROCESSORS_ONLN), cpu.c_str(), threads_text().c_str(), __VERSION__, SORTER_CXXFLAGS);
    const std::string mid = "--d-model 64 --heads 4 --d-ff 256 --enc-layers 2 --dec-layers 2 --seq-len 10";
    struct Row { std::string what, flags; bool vs_above; };  // vs_above: print examples/s over the row above's
    std::vector<Row> rows = {{"default, batch 1", "--batch 1", false}, {"default, batch 32", "--batch 32", false},
                             {"mid, batch 1", mid + " --batch 1", false},
                             {"mid, batch 32", mid + " --batch 32", false}};
    for (int k = 0; k < 4; k++)
        rows.push_back({fmt("seq_len %d, batch 32", 4 << k), fmt("--seq-len %d --batch 32", 4 << k), k > 0});
    for (int k = 0, n = 16; k < 4; k++, n *= 2)
        rows.push_back({fmt("d_model %d, d_ff %d, batch 32", n, 2 * n),
                        fmt("--d-model %d --d-ff %d --batch 32", n, 2 * n), k > 0});
    std::printf("\n  %-34s %10s %14s %9s %6s\n", "training, 1 s a row", "examples/s", "FLOPs/example", "GFLOP/s",
                "x prev");
    double previous = 0;
    for (const Row& row : rows) {
        Options r = parse_options(split_words(row.flags));
        Transformer model(r.model, 1);
        double rate = examples_per_second(r, model, 1.0);
        double flops = 3 * matmul_flops_forward(r.model, r.data);
        std::string ratio = row.vs_above ? fmt(" %6.2f", rate / previous) : "";
        std::printf("  %-34s %10.0f %14.0f %9.2f%s\n", row.what.c_str(), rate, flops, flops * rate * 1e-9,
                    ratio.c_str());
        previous = rate;
    }
    Options m = parse_options(split_words(mid));
    std::printf("  (default: %s; mid: %s)\n", size_text(DEFAULTS.model, DEFAULTS.data).c_str(),
                size_text(m.model, m.data).c_str());
    time_to_accuracy(o);
    std::printf("peak memory (resident set): %ld kB\n", peak_memory_kb());
}
