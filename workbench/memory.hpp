// workbench/memory.hpp -- what a training step holds at its peak, counted from the settings alone, before anything is
// allocated, and the one check of it: a run whose step would need more than MAX_STEP_BYTES is refused in one line that
// names the size and the flag that lowers it, whether the model is new (parse_options) or loaded (main.cpp's
// build_or_load: a checkpoint keeps its batch and its attention). docs/performance.md ("Memory") sets the count
// beside the peak measured. Tests: memory_test.cpp.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "settings.hpp"  // the feed-forward's shape, learned positions
#include "text.hpp"

// A training step may take this much: beyond it a run is refused before it starts, rather than stopped by the system
// (std::bad_alloc, or a machine out of memory) after minutes.
constexpr double MAX_STEP_BYTES = 4e9;
// What a run holds besides its model and its step: the program, its data, and a held-out evaluation's chunk of at
// most about 48 MB (workbench/evaluate.hpp), which runs beside what the step's blocks still keep.
constexpr double BASE_BYTES = 96e6;
// The allocator's slack on what a step allocates and frees: blocks each thread's arena keeps after they are freed.
// The same step measured 3.88 and 3.98 GB in two runs (docs/performance.md, "Memory"): 5% covers it.
constexpr double ALLOCATOR_SLACK = 1.05;

// The values a model of these settings learns: Transformer::parameters' tensors, counted (memory_test.cpp checks the
// count against a model built).
inline double parameter_values(const ModelConfig& c) {
    const double d = c.d_model, d_kv = double(c.key_value_heads()) * (c.d_model / c.n_heads), bias = !c.no_bias;
    const FeedForwardShape ff = feed_forward_shape(c);
    const Owned<Layer> one_norm = norm_of(c);  // gamma (and LayerNorm's beta): read off a norm of the model's kind
    ParamList norm_params;
    one_norm->list_parameters("norm", norm_params);
    double norm = 0.0;
    for (auto& [name, p] : norm_params) norm += double(p->value.data.size());
    const double attention = 2 * d * d + 2 * d * d_kv;                           // W_q, W_o; W_k, W_v
    const double one_feed_forward = ff.matrices * d * ff.width + bias * ((ff.matrices - 1) * ff.width + d);
    const double feed_forward = c.experts == 0 ? one_feed_forward  // experts (chapter 11): E + N of them, the router
                                               : (c.experts + c.shared_experts) * one_feed_forward + d * c.experts;
    const double encoder_block = 2 * norm + attention + feed_forward;
    const double decoder_block = encoder_block + (has_encoder(c.arch) ? norm + attention : 0.0);  // + cross-attention
    return c.vocab * d + (learns_positions(c.positions) ? c.max_len * d : 0.0) + c.enc_layers * encoder_block +
           c.dec_layers * decoder_block + norm + (c.tie_embeddings ? 0.0 : d * c.vocab) + bias * c.vocab;
}

// A training step's peak, in bytes, by what holds it.
struct StepMemory {
    double weights = 0.0;      // the parameters, their gradients and the optimizer's running means (and the sinusoids)
    double activations = 0.0;  // what the blocks keep from their forward for the backward, and a backward at work
    double attention = 0.0;    // plain: every head's weights (T, S), kept for the backward, and each thread's (T, S)
                               // matrices at work; in tiles: what each thread's tiles hold
    double total() const { return weights + ALLOCATOR_SLACK * (activations + attention) + BASE_BYTES; }
};

// Counted from the blocks' own fields (model.hpp): for n rows of width d, a sublayer's norm keeps x_hat; each Linear
// keeps its input; attention keeps each head's Q, K and V (in tiles, chapter 08's SavedTiles too: its output O and a
// number a row); the feed-forward its hidden matrices; dropout its factors. A backward at work holds about twelve (n, d) gradients and
// four of the feed-forward's width. Plain attention keeps every head's weights P, batch x heads x T x S values a layer
// (three times that with attention dropout), and each thread attending a sequence makes four (T, S) matrices at a
// time (the scores, the mask; in the backward dP and d_scores); in tiles, a thread holds a head's K and V turned, its
// slices of Q, K, V and their gradients, and three tiles. The decoder-only model reads source and answer as one
// sequence of 2 seq_len rows.
inline StepMemory step_memory(const ModelConfig& c, const DataConfig& data, const TrainConfig& t, int threads) {
    const double B = t.batch, d = c.d_model, h = c.n_heads, d_k = d / h;
    const bool encoder = has_encoder(c.arch), tiles = attends_in_tiles(c.attention);
    const double S = data.seq_len, T = data.seq_len, L = positions_read(c, data.seq_len);  // L: the decoder's rows
    const double rows = B * L, source_rows = encoder ? B * S : 0.0, answer_rows = B * T;  // a sequence's, times B
    const FeedForwardShape ff = feed_forward_shape(c);
    const double dropped = c.dropout > 0.0, copies = c.attn_dropout > 0.0 ? 3.0 : 1.0;  // P, dropout(P), its factors
    StepMemory m;
    m.weights = 8 * (parameter_values(c) * (2 + Optimizer(t.optimizer, 0, 0).running_means()) + c.max_len * d);
    auto self_attention = [&](double n) { return (8 + tiles + dropped) * n * d + tiles * h * n; };
    // Experts (chapter 11): the K + N experts a row goes through keep what a feed-forward keeps, for K + N copies of
    // it; the router its input, the scores and the probabilities (n, E); the experts' outputs (n K, d_model).
    const double passes = c.experts == 0 ? 1.0 : c.top_k() + c.shared_experts;
    auto feed_forward = [&](double n) {
        if (c.experts == 0) return (ff.matrices + dropped) * n * d + ff.matrices * n * ff.width;
        const double router = n * d + 2 * n * c.experts + n * c.top_k() * d;
        return dropped * n * d + passes * (ff.matrices * n * d + ff.matrices * n * ff.width) + router;
    };
    double kept = dropped * (rows + source_rows) * d;  // the embeddings' dropout
    kept += c.enc_layers * (self_attention(source_rows) + feed_forward(source_rows));
    kept += c.dec_layers * (self_attention(rows) + feed_forward(rows));
    if (encoder)  // cross-attention: its queries' norm, input, Q and output; the memory's K and V, and their inputs
        kept += c.dec_layers * ((4 + tiles + dropped) * answer_rows * d + 4 * source_rows * d +
                                tiles * h * answer_rows);
    kept += 2 * answer_rows * d + 3 * answer_rows * c.vocab;  // the final norm, the output's input; logits, their grad
    if (!encoder) kept += 2 * answer_rows * d;  // decoder-only: the answer's rows, gathered from the whole sequences
    const double widest = std::max(rows, source_rows);
    kept += 12 * widest * d + 4 * widest * ff.width + 2 * source_rows * d;  // a backward at work; the memory, its grad
    m.activations = 8 * kept;
    const double busy = std::min(double(std::max(threads, 1)), B);  // the threads attending a sequence each
    if (tiles) {
        m.attention = 8 * busy * (12 * L * d_k + 3 * 32 * 32);
    } else {
        const double weights = c.enc_layers * S * S + c.dec_layers * (L * L + (encoder ? T * S : 0.0));  // a head's
        m.attention = 8 * (copies * B * h * weights + busy * 4 * L * L);
    }
    return m;
}

inline std::string gigabytes(double bytes) {  // "4.02 GB", "18.0 GB": a size near the limit to two decimals
    return fmt(bytes < 10e9 ? "%.2f GB" : "%.1f GB", bytes / 1e9);
}
// The one check, for a new model (parse_options) and a loaded one (`load_path`): "" when a step fits in
// MAX_STEP_BYTES, else the line that refuses the run, with the size it would need, what holds most of it, and the way
// out: the largest --batch that fits, --attention flash (first when plain attention's weights are the most), or a
// shorter --seq-len when not even one sequence fits. A checkpoint fixes its batch and its attention: a loaded model
// too large to train is still scored and sorts, and the way out is a new model.
inline std::string step_memory_problem(const ModelConfig& c, const DataConfig& d, const TrainConfig& t, int threads,
                                       const std::string& load_path = "") {
    const StepMemory need = step_memory(c, d, t, threads);
    if (need.total() <= MAX_STEP_BYTES) return "";
    auto fits = [&](const ModelConfig& model, long batch) {
        TrainConfig smaller = t;
        smaller.batch = int(batch);
        return step_memory(model, d, smaller, threads).total() <= MAX_STEP_BYTES;
    };
    auto largest_batch = [&](const ModelConfig& model) {  // 0: not even one sequence fits
        if (fits(model, t.batch)) return long(t.batch);
        long lo = 0, hi = t.batch;  // lo fits (or is 0), hi does not
        while (hi - lo > 1) (fits(model, (lo + hi) / 2) ? lo : hi) = (lo + hi) / 2;
        return lo;
    };
    ModelConfig in_tiles = c;
    in_tiles.attention = Attention::flash;
    const bool plain = !attends_in_tiles(c.attention);
    const bool attention_most = need.attention > need.activations + need.weights;
    const long batch = largest_batch(c), tiled_batch = largest_batch(in_tiles);
    const std::string held = attention_most && plain ? gigabytes(need.attention) + " of it every head's attention "
                                                                                   "weights, kept for the backward"
                             : gigabytes(need.activations) + " of it the activations the blocks keep for the backward";
    const std::string size = "would need about " + gigabytes(need.total()) + " (" + held + "), above the " +
                             fmt("%.0f GB", MAX_STEP_BYTES / 1e9) + " a run may take";
    std::vector<std::string> ways;  // the flags that lower it, the one that frees the most first
    const std::string tiles = tiled_batch == t.batch ? "--attention flash (in tiles: about " +
                                                           gigabytes(step_memory(in_tiles, d, t, threads).total()) + ")"
                                                     : fmt("--attention flash and --batch %ld", tiled_batch);
    if (plain && attention_most && tiled_batch > 0) ways.push_back(tiles);
    if (batch > 0) ways.push_back(fmt("--batch %ld (the largest that fits)", batch));
    if (plain && !attention_most && tiled_batch > batch) ways.push_back(tiles);
    if (batch == 0 && tiled_batch == 0) ways.push_back("a shorter --seq-len (or a smaller model)");
    if (!load_path.empty())
        return fmt("--load %s: a training step of this model (batch %d, seq_len %d, attention %s) ", load_path.c_str(),
                   t.batch, d.seq_len, ATTENTION_NAMES[int(c.attention)].c_str()) + size +
               "; its checkpoint fixes the batch and the attention, so it cannot train here: without --steps it is "
               "still scored and sorts; or train a new model with " + join(ways, ", or with ");
    return fmt("--seq-len %d with --batch %d: a training step ", d.seq_len, t.batch) + size + "; train with " +
           join(ways, ", or with ");
}
