// train.hpp -- data, loss, optimizers, the training step, and greedy decoding for the digit sorter.
//
// Read after model.hpp. An example is a source sequence of digits and the target the task asks for (sorted by
// default). The decoder is trained with teacher forcing: it reads START and the true target shifted right by one, and
// at every position predicts the next true token. At test time greedy decoding feeds back its own argmax.
// Legend: matrix.hpp's; here T = S = seq_len.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "model.hpp"

// ---------------------------------------------------------------------------------------------
// The settings of a run, each choice with its names as the flags and the checkpoint file spell them.
enum class Task { sort, copy, reverse };
const std::vector<std::string> TASK_NAMES = {"sort", "copy", "reverse"};

struct DataConfig {
    Task task = Task::sort;
    int seq_len = 5;    // S = T: every source and target is padded with PAD to this length
    int min_len = 5;    // shortest source; below seq_len, sources have varying lengths
    int max_digit = 9;  // digits are 1 .. max_digit
};

#include "chapters/03_optimizers.hpp"  // OptimizerKind: SGD by default; momentum and Adam, a later chapter
enum class Schedule { constant, linear, warmup };
const std::vector<std::string> SCHEDULE_NAMES = {"constant", "linear", "warmup"};

// How a run trains. The defaults were chosen over seeds 1-10: docs/flags.md, "Why these defaults", says how each holds.
struct TrainConfig {
    long steps = 4000;
    int batch = 16;
    double lr = OPTIMIZERS[0].default_lr;  // with momentum or adam and no --lr, that optimizer's own default
    OptimizerKind optimizer = OptimizerKind::sgd;
    Schedule schedule = Schedule::linear;
    long warmup = 1000;  // steps of Schedule::warmup's rise
    // Regularisers, each off at 0: the paper's label smoothing (0.1 there), minGPT's and nanoGPT's the others.
    double label_smoothing = 0.0;  // eps_ls: cross_entropy's target row is (1 - eps_ls) one_hot + eps_ls / vocab
    double clip = 0.0;             // the gradients' global norm is scaled down to at most this (Optimizer)
    double weight_decay = 0.0;     // every matrix shrinks by the factor 1 - lr weight_decay a step (Optimizer)
};

// ---------------------------------------------------------------------------------------------
// The task's wiring, stated once: every other file calls these.
// Token ids: PAD 0, digits 1..max_digit, START = vocab - 1, so vocab = max_digit + 2.
inline int vocab_size(const DataConfig& d) { return d.max_digit + 2; }
inline int start_token(int vocab) { return vocab - 1; }

// The decoder's input under teacher forcing: START, then the target shifted right by one (its last token dropped),
// so that position t reads target[t - 1] and must predict target[t].
inline std::vector<int> shifted_right(const std::vector<int>& target, int vocab) {
    std::vector<int> in = {start_token(vocab)};
    in.insert(in.end(), target.begin(), target.end() - 1);
    return in;
}

constexpr int HELD_OUT_SIZE = 1000;        // the held-out set: its size and its own seed, the same in every run
constexpr uint64_t HELD_OUT_SEED = 12345;  // whatever --seed says

// A run's seed makes the weights (Rng(seed), in Transformer) and, through this, the training draws: a second
// stream, so that changing the model's size does not change which examples it sees.
inline Rng training_rng(uint64_t seed) { return Rng(seed ^ 0x5eedULL); }

struct Example {
    std::vector<int> source;     // (S) digits, then PAD
    std::vector<int> target_in;  // (T) START, target[0 .. T-2]: what the decoder reads
    std::vector<int> target;     // (T) what the decoder must predict, then PAD
};

// Examples from .. from + n - 1 (fewer at the end) as Transformer::forward takes them: n_seq x (S), n_seq x (T).
struct Inputs { Transformer::Batch sources, targets_in; };
inline Inputs inputs_of(const std::vector<Example>& examples, std::size_t from, std::size_t n) {
    Inputs in;
    for (std::size_t i = from; i < std::min(from + n, examples.size()); i++)
        in.sources.push_back(examples[i].source), in.targets_in.push_back(examples[i].target_in);
    return in;
}

// The digits of a source become an example: the target is the task applied to the digits, padded with PAD.
// PAD doubles as "end of output", so a variable-length model learns to stop.
inline Example make_example(const std::vector<int>& digits, const DataConfig& d) {
    std::vector<int> answer = digits;
    switch (d.task) {
    case Task::sort: std::sort(answer.begin(), answer.end()); break;
    case Task::copy: break;
    case Task::reverse: std::reverse(answer.begin(), answer.end()); break;
    }
    Example e;
    e.source = digits;
    e.source.resize(d.seq_len, PAD);
    e.target = answer;
    e.target.resize(d.seq_len, PAD);
    e.target_in = shifted_right(e.target, vocab_size(d));
    return e;
}

inline std::vector<int> random_digits(Rng& rng, const DataConfig& d) {
    int len = d.min_len + rng.below(d.seq_len - d.min_len + 1);
    std::vector<int> digits(len);
    for (int& x : digits) x = 1 + rng.below(d.max_digit);
    return digits;
}

// How many different sources exist: the sum over lengths of max_digit^len (inf past a double's range: Dataset's min).
inline double count_sources(const DataConfig& d) {
    double total = 0.0, power = 1.0;  // power = max_digit^len, multiplied up: exact while below 2^53
    for (int len = 1; len <= d.seq_len; len++) {
        power *= d.max_digit;
        if (len >= d.min_len) total += power;
    }
    return total;
}

// The data: a held-out set that training never sees, and a sampler of training examples. Disjoint by construction:
// the held-out sources are drawn first (distinct, from their own seed); the sampler throws away any draw among them.
struct Dataset {
    DataConfig config;
    std::set<std::vector<int>> held_out_sources;
    std::vector<Example> held_out;
    std::vector<std::vector<int>> train_pool;  // --train-data: when not empty, training draws only from these
    // held_out_size is capped at half of all possible sources, so training keeps the other half.
    explicit Dataset(const DataConfig& d, std::vector<std::vector<int>> pool = {},
                     int held_out_size = HELD_OUT_SIZE, uint64_t eval_seed = HELD_OUT_SEED)
        : config(d), train_pool(std::move(pool)) {
        std::set<std::vector<int>> in_pool(train_pool.begin(), train_pool.end());
        double room = count_sources(d) - double(in_pool.size());
        int n = int(std::min(double(held_out_size), std::floor(room / 2)));
        Rng rng(eval_seed);
        while (int(held_out.size()) < n) {
            std::vector<int> digits = random_digits(rng, d);
            if (in_pool.count(digits) || !held_out_sources.insert(digits).second) continue;
            held_out.push_back(make_example(digits, d));
        }
    }
    Example sample(Rng& rng) const {
        if (!train_pool.empty()) return make_example(train_pool[rng.below(int(train_pool.size()))], config);
        for (;;) {
            std::vector<int> digits = random_digits(rng, config);
            if (!held_out_sources.count(digits)) return make_example(digits, config);
        }
    }
    std::vector<Example> draw_batch(Rng& rng, int size) const {
        std::vector<Example> batch;
        for (int i = 0; i < size; i++) batch.push_back(sample(rng));
        return batch;
    }
};

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy over each row of one example's logits (T, vocab):   loss = -(1/T) sum_t log p_t[target_t]
// exercise cross-entropy: begin
//   dL/dlogits[t] = (p_t - one_hot(target_t)) / T
// Derivation, one row z = logits[t], target y: -log p[y] = -z[y] + log sum_v exp(z[v]), so d/dz[v] = p[v] - [v==y].
// The 1/T is the mean over positions. (Softmax's general backward in matrix.hpp gives the same
// numbers; with the log in front, its row term collapses to this simple form.)
// exercise cross-entropy: end
// weight scales the gradient (1 / batch size, so a batch's gradient is the mean of its examples).
// Every position counts, PAD targets too: PAD is how the model says "the output ends here".
// Label smoothing eps_ls > 0 (paper: 0.1; PyTorch's label_smoothing) aims at q = (1 - eps_ls) one_hot + eps_ls / vocab
// instead of the one-hot, so the model is never pushed to certainty: loss -(1/T) sum_t sum_v q[v] log p_t[v],
// exercise cross-entropy: begin
// gradient (p_t - q) / T, since -sum_v q[v] log p[v] = -sum_v q[v] z[v] + log sum_v exp(z[v]) when sum_v q[v] = 1.
// exercise cross-entropy: end
// (The Annotated Transformer spreads eps_ls over vocab - 2 tokens, none on the target or PAD, and minimises a KL
// divergence, the same gradient up to that spread; we take PyTorch's, so the twin checks us with its own loss.)
inline double cross_entropy(const Matrix& logits, const std::vector<int>& target, double weight,
                            Matrix& d_logits, double smoothing = 0.0) {
    int T = logits.rows;
    double loss = 0.0, spread = smoothing / logits.cols;  // eps_ls / vocab, every token's share of the smoothing
    std::vector<double> exps(logits.cols);                 // one row's exp(logits[t][v] - max)
    for (int t = 0; t < T; t++) {
        // log p_t[k] = logits[t][k] - max - log(sum_v exp(logits[t][v] - max)), the max trick again:
        // log(p) would be -inf once a confident wrong guess makes p underflow to 0.
        double max = logits.at(t, 0), sum = 0.0;
        for (int v = 1; v < logits.cols; v++) max = std::max(max, logits.at(t, v));
        for (int v = 0; v < logits.cols; v++) exps[v] = maths::exp(logits.at(t, v) - max);
        for (int v = 0; v < logits.cols; v++) sum += exps[v];
        const double log_sum = maths::log(sum);
        loss -= (1.0 - smoothing) * (logits.at(t, target[t]) - max - log_sum) / T;
        for (int v = 0; v < logits.cols; v++) {
            if (smoothing > 0) loss -= spread * (logits.at(t, v) - max - log_sum) / T;
            // exercise cross-entropy: begin (uses weight d_logits)
            double q = (v == target[t] ? 1.0 - smoothing : 0.0) + spread;  // the target row
            d_logits.at(t, v) += weight * (exps[v] / sum - q) / T;  // p_t[v] - q[v]
            // exercise cross-entropy: end
        }
    }
    return loss;
}

// ---------------------------------------------------------------------------------------------
// An optimizer moves every parameter w by its gradient g (the batch mean) at the rate lr. SGD:   w -= lr g
// (Optimizer::update, chapters/03_optimizers.hpp, runs that line, or momentum or Adam.) The rate of step t (1 ..
// total) for the base rate lr follows a schedule:
//   constant   lr
//   linear     lr (1 - (t - 1) / total): from lr at the first step down towards 0 at the last
//   warmup     lr min(t / warmup, sqrt(warmup / t)): a straight line up for `warmup` steps, then down
//              as 1 / sqrt(t). The paper's d_model^-0.5 min(t^-0.5, t warmup^-1.5), scaled to peak at lr.
inline double scheduled_lr(Schedule schedule, double lr, long t, long total, long warmup) {
    switch (schedule) {
    case Schedule::constant: return lr;
    case Schedule::linear: return lr * (1.0 - double(t - 1) / double(total));
    case Schedule::warmup: return lr * std::min(double(t) / warmup, std::sqrt(double(warmup) / t));
    }
    return lr;  // not reached: the switch names every schedule
}

// ---------------------------------------------------------------------------------------------
// A batch's loss: the mean over its n_seq examples of cross_entropy, example e owning rows e*T .. of the logits
// (n_seq T, vocab); d_logits (caller-zeroed) gets its gradient. `plain` is the cross-entropy the table prints; with
// label smoothing, `followed` is the smoothed loss whose gradient training follows (without, the two are one).
struct Loss { double plain = 0.0, followed = 0.0; };
inline Loss batch_loss(const Matrix& logits, const std::vector<Example>& batch, double label_smoothing,
                       Matrix& d_logits) {
    Loss loss;
    const double weight = 1.0 / double(batch.size());  // the batch's gradient is the mean of its examples'
    const int T = logits.rows / int(batch.size());
    for (int e = 0; e < int(batch.size()); e++) {
        Matrix logits_e = take_block(logits, e * T, T, 0, logits.cols), d_e(T, logits.cols);  // e's share
        double followed = cross_entropy(logits_e, batch[e].target, weight, d_e, label_smoothing), plain = followed;
        if (label_smoothing > 0) {  // the plain loss of the same logits, its gradient not kept
            Matrix unused(T, logits.cols);
            plain = cross_entropy(logits_e, batch[e].target, 0.0, unused);
        }
        loss.plain += weight * plain, loss.followed += weight * followed;
        add_into_block(d_e, e * T, 0, d_logits);
    }
    return loss;
}

// What training carries from one step to the next. A checkpoint saves it (workbench/checkpoint.hpp), so that
// --load FILE --steps N trains on as if the run had never stopped.
struct TrainState {
    Optimizer optimizer;  // the rule and, for momentum and Adam, its running means
    Rng batch_draws;      // the training examples' stream: which batch comes next
    long updates = 0;     // steps taken so far; the next is step updates + 1
    TrainState(const TrainConfig& c, uint64_t seed)  // a new run: no update yet, the seed's draws
        : optimizer(c.optimizer, c.weight_decay, c.clip), batch_draws(training_rng(seed)) {}
};

// The gradient of a batch's mean loss: zero every grad, run the batch forward in training mode (one stack of rows;
// dropout on), score it, run backward. Returns the loss; every parameter's grad holds its part.
inline Loss gradient_of(Transformer& model, const std::vector<Example>& batch, double label_smoothing) {
    model.zero_grad();
    Inputs in = inputs_of(batch, 0, batch.size());
    model.train(true);
    Matrix logits = model.forward(in.sources, in.targets_in);  // (n_seq T, vocab), n_seq = batch.size()
    model.train(false);
    Matrix d_logits(logits.rows, logits.cols);
    Loss loss = batch_loss(logits, batch, label_smoothing, d_logits);
    model.backward(d_logits);  // += into every grad
    return loss;
}

// One training step: draw a mini-batch, find this step's rate, take the gradient, move every parameter. `last` is the
// step the schedule decays towards (main.cpp's loop calls this for steps first .. last). Returns the plain loss.
inline double train_step(Transformer& model, const Dataset& data, const TrainConfig& c, TrainState& state,
                         long last) {
    const long step = state.updates + 1;
    std::vector<Example> batch = data.draw_batch(state.batch_draws, c.batch);  // n_seq = c.batch examples
    const double lr = scheduled_lr(c.schedule, c.lr, step, last, c.warmup);
    const Loss loss = gradient_of(model, batch, c.label_smoothing);
    state.optimizer.update(model, lr, step);
    state.updates = step;
    return loss.plain;
}

// ---------------------------------------------------------------------------------------------
// Greedy decoding: from START, grow each output by the argmax of its newest position's logits (greedy_choice: over PAD
// and the digits; START is an input, never an output) until its first PAD, after which it is all PAD, as every target.
// Each step runs the model on training's decoder input, START and the output so far filled out with PAD: the causal
// mask hides later positions. (Chapter 10 runs only the newest token, against kept keys and values: the same bits.)
inline int greedy_choice(const Matrix& logits, int row) {  // the argmax of logits (.., vocab) row `row`, never START
    int best = PAD;
    for (int v = 1; v < logits.cols; v++)
        if (v != start_token(logits.cols) && logits.at(row, v) > logits.at(row, best)) best = v;
    return best;
}
inline std::vector<std::vector<int>> greedy_decode(Transformer& model, const Transformer::Batch& sources, int length) {
    Transformer::Batch in(sources.size(), shifted_right(std::vector<int>(length, PAD), model.config.vocab));
    std::vector<std::vector<int>> decoded(sources.size());
    for (int t = 0; t < length; t++) {
        const Matrix logits = model.forward(sources, in);  // (n_seq length, vocab): row e * length + t is new
        for (std::size_t e = 0; e < in.size(); e++) {
            const bool ended = t > 0 && decoded[e].back() == PAD;  // an ended output: PAD again
            decoded[e].push_back(ended ? PAD : greedy_choice(logits, int(e) * length + t));
            if (t + 1 < length) in[e][t + 1] = decoded[e].back();
        }
    }
    return decoded;
}
