// workbench/exercise_blocks.hpp -- the blocks' checks of "Write it yourself" (exercises.hpp says how the parts fit):
// each block a student writes, and the blocks built on it, in every configuration it runs in, and the list of checks
// by name that the exercises run (BLOCK_CHECKS). Exercise-only, as exercises.hpp.
//
// Sections: the blocks' checks; the list of checks. The gradient check they run is exercise_check.hpp's.
#pragma once

#include "exercise_check.hpp"

namespace exercises {

// ---------------------------------------------------------------------------------------------
// The blocks' checks, each at tests.cpp's small shapes (d_model 8, 2 heads of d_k 4, d_ff 12), in each configuration
// the block runs in (masks, dropout on and off, lengths and widths that differ), from random inputs and jittered
// parameters (check_block, exercise_check.hpp). Each check's name says its shapes.
const std::vector<int> PADDED_SOURCE = {4, 2, 5, PAD, PAD};  // S = 5, the last two hidden by the padding mask
inline Clues attention_clues(int d_k, double p) {
    Clues clues;
    clues.constants = {{std::sqrt(double(d_k)), fmt("sqrt(d_k), d_k %d: 1/sqrt(d_k) left out?", d_k)},
                       {1.0 / std::sqrt(double(d_k)), fmt("1/sqrt(d_k), d_k %d: put in twice?", d_k)},
                       {1.0 / d_k, fmt("1/d_k, d_k %d: d_k where sqrt(d_k) belongs?", d_k)}};
    if (p > 0)
        clues.constants.insert(clues.constants.end(), {{1.0 - p, fmt("1 - p, p %g: dropout's 1/(1 - p) left out?", p)},
                                                       {1.0 / (1.0 - p), fmt("1/(1 - p), p %g: put in twice?", p)}});
    return clues;
}

inline void check_softmax_rows(Checker& c, const ModelConfig&) {
    Rng rng(1);
    for (auto [rows, cols] : {std::pair{4, 5}, {6, 3}}) {  // rows neither flat nor one-hot; more columns, then rows
        Matrix X = scale(random_matrix(rows, cols, rng), 3.0), dX(rows, cols);
        check_block(c, "softmax_rows X " + shape_text(rows, cols), {{"X", &X, &dX}}, [&] { return softmax_rows(X); },
                    [&](const Matrix& G) { softmax_rows_backward(G, softmax_rows(X), dX); });
    }
}
inline void time_softmax_rows(Checker& c) {
    Rng rng(1);
    Matrix X = scale(random_matrix(16, 32, rng), 3.0), dX(16, 32), P;
    time_block(c, "time of softmax_rows_backward, X (16, 32)", {{"X", &X, &dX}},
               [&] { return P = softmax_rows(X); }, [&](const Matrix& G) { softmax_rows_backward(G, P, dX); });
}
// Attention without a mask (T 3 queries, S 5 keys), causal (4, 4) and with padding (3, 5), each with its weights'
// dropout off and on.
inline void check_attention(Checker& c, const ModelConfig&) {
    Rng rng(2);
    for (double p : {0.0, 0.3})
        for (int how = 0; how < 3; how++) {
            const int T = how == 1 ? 4 : 3, S = how == 1 ? 4 : 5;
            Matrix mask = how == 0 ? Matrix() : how == 1 ? causal_mask(4) : padding_mask(3, {PADDED_SOURCE});
            Matrix Q = random_matrix(T, 4, rng), K = random_matrix(S, 4, rng), V = random_matrix(S, 4, rng);
            Matrix dQ(T, 4), dK(S, 4), dV(S, 4);
            SavedAttention saved;
            const std::string name[] = {"no mask", "causal", "padding"};
            check_block(c, fmt("attention (%s, T %d, S %d, d_k 4%s)", name[how].c_str(), T, S,
                               p > 0 ? ", dropout 0.3" : ""),
                        {{"Q", &Q, &dQ}, {"K", &K, &dK}, {"V", &V, &dV}},
                        [&] {
                            Rng draws(6);  // the same masks at every pass
                            return attention(Q, K, V, mask, saved, p, &draws);
                        },
                        [&](const Matrix& G) { attention_backward(G, saved, dQ, dK, dV); }, attention_clues(4, p));
        }
}
inline void time_attention(Checker& c) {
    Rng rng(2), draws(6);
    Matrix Q = random_matrix(16, 8, rng), K = random_matrix(16, 8, rng), V = random_matrix(16, 8, rng);
    Matrix dQ(16, 8), dK(16, 8), dV(16, 8), mask = causal_mask(16);
    SavedAttention saved;
    time_block(c, "time of attention_backward, T = S = 16, d_k 8", {{"Q", &Q, &dQ}, {"K", &K, &dK}, {"V", &V, &dV}},
               [&] { return attention(Q, K, V, mask, saved); },
               [&](const Matrix& G) { attention_backward(G, saved, dQ, dK, dV); });
}
// Multi-head attention with the exercise's heads (grouped-query: 4 query heads on 2 key-value heads), positions
// (rotary) and attention (in tiles): cross-attention of 3 queries on 5 keys (padding), self-attention over two
// sequences of 4 (causal).
inline void check_multi_head(Checker& c, const ModelConfig& config) {
    ModelConfig self = small_config(config);
    self.attn_dropout = 0.0;
    const bool tiled = attends_in_tiles(config.attention);  // (the heads and the tiles: the exercise's variant says)
    Rng rng(3), stream(5);
    MultiHeadAttention mha(self, rng, true), cross(self, rng);
    mha.dropout_draws = cross.dropout_draws = tiled ? &stream : nullptr;  // in tiles with it, as in training
    jitter(params_of(mha, "self_attn"), rng);
    // Cross-attention first: its inputs are two (the queries' y, the keys' and values' memory), so that `=` where the
    // memory's second path needs `+=` shows as one (in self-attention both paths meet in one x, inside the backward).
    Matrix y = random_matrix(3, 8, rng), dy(3, 8), memory = random_matrix(5, 8, rng), d_memory(5, 8);
    Matrix mask = padding_mask(3, {PADDED_SOURCE});
    check_block(c, "MultiHeadAttention cross (3 on 5 rows)",
                tensors_of(params_of(cross, "cross_attn"), {{"y", &y, &dy}, {"memory", &memory, &d_memory}}),
                [&] { return cross.forward(y, memory, mask); },
                [&](const Matrix& G) { cross.backward(G, dy, d_memory); });
    Clues clues;
    clues.sequence_rows = 4;
    Matrix x = random_matrix(8, 8, rng), dx(8, 8), causal = stack_rows({causal_mask(4), causal_mask(4)});
    check_block(c, "MultiHeadAttention self (2 x 4 rows)",
                tensors_of(params_of(mha, "self_attn"), {{"x", &x, &dx}}),
                [&] { return mha.forward(x, x, causal, 2); },  // two sequences of 4, causal
                [&](const Matrix& G) { accumulate(dx, mha.backward_self(G)); }, clues);
}
inline MultiHeadAttention timed_heads(const ModelConfig& config, Rng& rng) {
    ModelConfig c = config;
    c.d_model = 16, c.n_heads = 4, c.kv_heads_asked = c.kv_heads_asked > 0 ? 2 : 0;
    return MultiHeadAttention(c, rng, true);
}
inline void time_multi_head(Checker& c, const ModelConfig& config) {
    Rng rng(3);
    MultiHeadAttention mha = timed_heads(config, rng);
    Matrix x = random_matrix(16, 16, rng), dx(16, 16), causal = stack_rows({causal_mask(8), causal_mask(8)});
    time_block(c, "time of MultiHeadAttention::backward, 2 x 8 rows", tensors_of(params_of(mha, "a"), {{"x", &x, &dx}}),
               [&] { return mha.forward(x, x, causal, 2); },
               [&](const Matrix& G) { accumulate(dx, mha.backward_self(G)); });
}
// Rotary positions alone: self-attention's queries from x_q and keys and values from x_kv (two sequences of 4), W_q
// and W_k the identity, so that x_q's gradient is the gradient of the turned queries turned back. A turn the wrong way
// gives the true gradient turned by twice the angle; positions counted from 1, turned back by one position's angle.
// (check_rotary runs it with the tutorial's backward; the test beside this file, with planted ones.)
template <typename Backward>
void rotary_check(Checker& c, const ModelConfig& config, Backward backward) {
    ModelConfig rope = small_config(config);
    rope.positions = Positions::rope, rope.kv_heads_asked = 0, rope.n_heads = 2, rope.attn_dropout = 0.0;
    Rng rng(12);
    MultiHeadAttention mha(rope, rng, true);
    for (Linear* W : {&mha.W_q, &mha.W_k})
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 8; j++) W->W.value.at(i, j) = i == j;
    jitter({{"W_v", &mha.W_v.W}, {"W_o", &mha.W_o.W}}, rng);
    constexpr int L = 4;  // rows a sequence (a constant: the lambdas below read it uncaptured)
    const int d_k = mha.d_k;
    Clues clues;
    clues.sequence_rows = L;
    auto turn = [d_k](int rows_a_turn, int first, double sign) {
        return [=](const Matrix& truth) {
            return rotate_pairs(truth, rows_a_turn == 0 ? L : rows_a_turn, first, d_k, sign);
        };
    };
    clues.suspects = {
        {"x_q", "turned the wrong way: yours turns by +angle where the backward turns back (-angle, R^T)",
         turn(0, 0, 2.0)},
        {"x_q", "not turned back: the rotation of the forward is not undone", turn(0, 0, 1.0)},
        {"x_q", "turned back twice", turn(0, 0, -1.0)},
        {"x_q", "turned back from position 1, not 0: the positions counted from 1", turn(1, 1, -1.0)},
        {"x_q", "turned back from position -1, not 0: a position offset by one", turn(1, 1, 1.0)}};
    Matrix x_q = random_matrix(8, 8, rng), dx_q(8, 8), x_kv = random_matrix(8, 8, rng), dx_kv(8, 8);
    Matrix causal = stack_rows({causal_mask(4), causal_mask(4)});
    check_block(c, "rotary (2 x 4 rows, d_k 4; W_q = W_k = I)",
                tensors_of(params_of(mha, "attn"), {{"x_q", &x_q, &dx_q}, {"x_kv", &x_kv, &dx_kv}}),
                [&] { return mha.forward(x_q, x_kv, causal, 2); },
                [&](const Matrix& G) { backward(mha, G, dx_q, dx_kv); }, clues);
}
inline void check_rotary(Checker& c, const ModelConfig& config) {
    rotary_check(c, config, [](MultiHeadAttention& m, const Matrix& G, Matrix& dx_q, Matrix& dx_kv) {
        m.backward(G, dx_q, dx_kv);
    });
}
// A norm alone, rows of different offsets and spreads, so the mean and the variance matter: 4 rows of 8, 3 of 5.
template <typename Norm>
void check_norm(Checker& c, const std::string& check) {
    Rng rng(4);
    for (auto [rows, d] : {std::pair{4, 8}, {3, 5}}) {
        Norm norm(d);
        jitter(params_of(norm, "norm"), rng, 0.3);
        Matrix x = random_matrix(rows, d, rng), dx(rows, d);
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < d; j++) x.at(i, j) = x.at(i, j) * (i + 1) + i;
        check_block(c, check + " x " + shape_text(rows, d), tensors_of(params_of(norm, "norm"), {{"x", &x, &dx}}),
                    [&] { return norm.forward(x); }, [&](const Matrix& G) { accumulate(dx, norm.backward(G)); });
    }
}
template <typename Norm>
void time_norm(Checker& c, const std::string& check) {
    Rng rng(4);
    Norm norm(32);
    Matrix x = random_matrix(16, 32, rng, 3.0), dx(16, 32);
    time_block(c, "time of " + check + "::backward, x (16, 32)", tensors_of(params_of(norm, "n"), {{"x", &x, &dx}}),
               [&] { return norm.forward(x); }, [&](const Matrix& G) { accumulate(dx, norm.backward(G)); });
}
// The embedding with the exercise's positions: a sequence with tokens twice (their rows add up), its rows in order,
// and (learned positions) in another order.
inline void check_embedding(Checker& c, const ModelConfig& config) {
    Rng rng(5);
    const ModelConfig small = small_config(config);
    Embedding embed(small, rng);
    const std::vector<int> tokens = {3, 1, 3, 6, 1};  // 3 and 1 twice: rows add up
    Clues clues;
    clues.constants = {{std::sqrt(8.0), "sqrt(d_model), d_model 8: the multiplier put in twice?"},
                       {1.0 / std::sqrt(8.0), "1/sqrt(d_model), d_model 8: the multiplier left out?"}};
    for (const std::vector<int>& rows : {std::vector<int>{0, 1, 2, 3, 4}, {4, 0, 3, 1, 2}}) {
        const std::string& positions = POSITION_NAMES[int(small.positions)];
        check_block(c, fmt("Embedding (5 tokens, d_model 8, %s positions%s)", positions.c_str(),
                           rows[0] == 0 ? "" : ", rows out of order"),
                    tensors_of(params_of(embed, "embed")), [&] { return embed.forward(tokens, rows); },
                    [&](const Matrix& G) { embed.backward(tokens, rows, G); }, clues);
        if (embed.learned.value.empty()) break;  // other rows change nothing
    }
}
inline void time_embedding(Checker& c) {
    ModelConfig m;
    m.vocab = 32, m.d_model = 32, m.max_len = 16, m.positions = Positions::learned;
    Rng rng(5);
    Embedding embed(m, rng);
    std::vector<int> tokens, rows;
    for (int t = 0; t < 16; t++) tokens.push_back(int(rng.uniform(0, 31.99))), rows.push_back(t);
    time_block(c, "time of Embedding::backward, 16 tokens, d_model 32", tensors_of(params_of(embed, "e")),
               [&] { return embed.forward(tokens, rows); }, [&](const Matrix& G) { embed.backward(tokens, rows, G); });
}
// Cross-entropy (T 4, vocab 7) without smoothing and weight 1, then with smoothing 0.1 and weight 0.5 (a batch of 2).
inline void check_cross_entropy(Checker& c, const ModelConfig&) {
    Rng rng(7);
    Matrix logits = random_matrix(4, 7, rng, 4.0), d_logits(4, 7);
    const std::vector<int> target = {0, 6, 3, 3};
    for (auto [smoothing, weight] : {std::pair{0.0, 1.0}, {0.1, 0.5}}) {
        Matrix unused(4, 7);
        Clues clues;
        clues.constants = {{4.0, "T, T 4: the mean's 1/T left out?"}, {0.25, "1/T, T 4: put in twice?"}};
        if (weight != 1.0)
            clues.constants.push_back({1.0 / weight, fmt("1/weight, weight %g: weight left out?", weight)});
        c.gradients(smoothing > 0 ? "cross_entropy (T 4, vocab 7, smoothing 0.1, weight 0.5)"
                                  : "cross_entropy (T 4, vocab 7)",
                    {{"logits", &logits, &d_logits}},
                    [&, smoothing = smoothing, weight = weight] {
                        return weight * cross_entropy(logits, target, weight, unused, smoothing);
                    },
                    [&, smoothing = smoothing, weight = weight] {
                        cross_entropy(logits, target, weight, d_logits, smoothing);
                    },
                    clues);
    }
}
// Dropout on (p 0.3), and off: outside training, or p 0, keep is empty and the backward hands dy back.
inline void check_dropout(Checker& c, const ModelConfig&) {
    Rng rng(8);
    Clues clues;
    clues.constants = {{0.7, "1 - p, p 0.3: the kept entries' 1/(1 - p) left out?"},
                       {1.0 / 0.7, "1/(1 - p), p 0.3: put in twice?"}};
    for (bool on : {true, false}) {
        Matrix x = random_matrix(4, 6, rng), dx(4, 6), keep;
        check_block(c, on ? "dropout (p 0.3, x (4, 6))" : "dropout (off: keep empty, x (4, 6))", {{"x", &x, &dx}},
                    [&] {
                        Rng draws(6);
                        return dropout(x, 0.3, on ? &draws : nullptr, keep);
                    },
                    [&](const Matrix& G) { accumulate(dx, dropout_backward(G, keep)); }, clues);
    }
}
// SwiGLU with biases and without (--no-bias).
inline void check_swiglu(Checker& c, const ModelConfig& config) {
    Rng rng(9);
    for (bool bias : {true, false}) {
        SwiGLU ffn(8, small_config(config).d_ff, bias, rng);
        jitter(params_of(ffn, "ffn"), rng);
        Matrix x = random_matrix(4, 8, rng), dx(4, 8);
        check_block(c, fmt("SwiGLU (4 rows, d_model 8, hidden %d%s)", SwiGLU::width(12), bias ? "" : ", no biases"),
                    tensors_of(params_of(ffn, "ffn"), {{"x", &x, &dx}}), [&] { return ffn.forward(x); },
                    [&](const Matrix& G) { accumulate(dx, ffn.backward(G)); });
    }
}
inline void time_swiglu(Checker& c) {
    Rng rng(9);
    SwiGLU ffn(16, 24, true, rng);
    Matrix x = random_matrix(8, 16, rng), dx(8, 16);
    time_block(c, "time of SwiGLU::backward, x (8, 16)", tensors_of(params_of(ffn, "f"), {{"x", &x, &dx}}),
               [&] { return ffn.forward(x); }, [&](const Matrix& G) { accumulate(dx, ffn.backward(G)); });
}
// The encoder's and the decoder's blocks, each in pre- and post-norm, with the exercise's choices (its norm, its
// feed-forward, its dropout): the encoder's input x (S = 5, the padding mask); the decoder's y (T = 4, causal) and
// the memory (S = 5, two PADs masked).
template <typename Block>
void check_stack_block(Checker& c, const ModelConfig& config, const std::string& check, uint64_t seed) {
    constexpr bool decoder = std::is_same_v<Block, DecoderBlock>;
    const int rows = decoder ? 4 : 5;
    for (NormPlace where : {NormPlace::pre, NormPlace::post}) {
        ModelConfig small = small_config(config);
        small.norm_place = where;
        Rng rng(seed), draws(6);
        Block block(small, rng);
        jitter(params_of(block, "block"), rng);
        Matrix x = random_matrix(rows, 8, rng), dx(rows, 8), memory, d_memory(5, 8);
        std::vector<Tensor> inputs = {{decoder ? "y" : "x", &x, &dx}};
        memory = random_matrix(5, 8, rng);
        if (decoder) inputs.push_back({"memory", &memory, &d_memory});
        const Matrix causal = causal_mask(4), mask = padding_mask(rows, {PADDED_SOURCE});
        const std::string place = NORM_PLACE_NAMES[int(where)] + "-norm";
        check_block(c, check + " (" + place + ")",
                    tensors_of(params_of(block, "block"), inputs),
                    [&] {
                        draws = Rng(6);  // dropout: the same masks at every pass
                        block.set_dropout_draws(&draws);
                        if constexpr (decoder) return block.forward(x, memory, causal, mask);
                        else return block.forward(x, mask);
                    },
                    [&](const Matrix& G) {
                        if constexpr (decoder) accumulate(dx, block.backward(G, d_memory));
                        else accumulate(dx, block.backward(G));
                    });
    }
}
inline void time_decoder_block(Checker& c, const ModelConfig& config) {
    ModelConfig m = config;
    m.d_model = 16, m.d_ff = 32, m.n_heads = 2;
    Rng rng(11);
    DecoderBlock block(m, rng);
    Matrix y = random_matrix(6, 16, rng), dy(6, 16), memory = random_matrix(7, 16, rng), d_memory(7, 16);
    const Matrix causal = causal_mask(6), mask(6, 7, 1.0);
    time_block(c, "time of DecoderBlock::backward, y (6, 16)",
               tensors_of(params_of(block, "b"), {{"y", &y, &dy}, {"memory", &memory, &d_memory}}),
               [&] { return block.forward(y, memory, causal, mask); },
               [&](const Matrix& G) { accumulate(dy, block.backward(G, d_memory)); });
}
// ---------------------------------------------------------------------------------------------
// The checks by name, as the exercises list them (exercises.hpp): those that read the model's choices run once for
// each of the exercise's choices (its variants), the others once. ("model" and "Adam", the whole model's, are
// exercise_model.hpp's.)
struct BlockCheck {
    const char* name;
    bool reads_choices;
    void (*run)(Checker&, const ModelConfig&);
};
const std::vector<BlockCheck> BLOCK_CHECKS = {
    {"softmax_rows", false, check_softmax_rows},
    {"attention", false, check_attention},
    {"MultiHeadAttention", true, check_multi_head},
    {"rotary", false, check_rotary},
    {"LayerNorm", false, [](Checker& c, const ModelConfig&) { check_norm<LayerNorm>(c, "LayerNorm"); }},
    {"RMSNorm", false, [](Checker& c, const ModelConfig&) { check_norm<RMSNorm>(c, "RMSNorm"); }},
    {"Embedding", true, check_embedding},
    {"cross_entropy", false, check_cross_entropy},
    {"dropout", false, check_dropout},
    {"SwiGLU", false, check_swiglu},
    {"EncoderBlock", true,
     [](Checker& c, const ModelConfig& m) { check_stack_block<EncoderBlock>(c, m, "EncoderBlock", 10); }},
    {"DecoderBlock", true,
     [](Checker& c, const ModelConfig& m) { check_stack_block<DecoderBlock>(c, m, "DecoderBlock", 11); }},
    // The time of a backward (its section, above), one a block.
    {"time softmax_rows", false, [](Checker& c, const ModelConfig&) { time_softmax_rows(c); }},
    {"time attention", false, [](Checker& c, const ModelConfig&) { time_attention(c); }},
    {"time MultiHeadAttention", false, time_multi_head},
    {"time LayerNorm", false, [](Checker& c, const ModelConfig&) { time_norm<LayerNorm>(c, "LayerNorm"); }},
    {"time RMSNorm", false, [](Checker& c, const ModelConfig&) { time_norm<RMSNorm>(c, "RMSNorm"); }},
    {"time Embedding", false, [](Checker& c, const ModelConfig&) { time_embedding(c); }},
    {"time SwiGLU", false, [](Checker& c, const ModelConfig&) { time_swiglu(c); }},
    {"time DecoderBlock", false, time_decoder_block},
};
}  // namespace exercises
