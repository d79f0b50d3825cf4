// main.cpp -- the sorter program: read the flags, train, show the model learning, report.
//
// The tutorial is in matrix.hpp, model.hpp and train.hpp; this file is the program around it.
// Sections, in the order a run uses them: options, printing helpers, training run, main().
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "train.hpp"

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------
struct Options {
    ModelConfig model;
    DataConfig data;
    long steps = 3000;
    int batch = 32;
    double lr = 0.3;
    uint64_t seed = 1;
    long eval_every = 500;
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
        "  --steps N   training steps (default 3000), each a mini-batch of 32 examples\n"
        "  --seed N    seed for the weights and the training draws (default 1)\n"
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

int main(int argc, char** argv) { return run(parse_options(argc, argv)); }
