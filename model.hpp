// model.hpp -- the blocks of an encoder-decoder Transformer, each forward beside its backward.
//
// Read after matrix.hpp. A block owns its parameters (Param), lists them by name and keeps what its forward saved;
// backward(d_out) reads that, adds (+=) into its parameters' grads and returns its input's gradient. n_seq sequences
// run as one stack of rows: sequence e owns rows e*S .. of the encoder's matrices, e*T .. of the decoder's.
// The model, stated once: PRE-NORM blocks (x + f(LayerNorm(x))), LayerNorm with the biased variance and eps inside the
// square root, a final LayerNorm before the output projection. Later chapters plug in where this file includes them.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/kernels.hpp"  // matmul_fast and the rest: matrix.hpp's products, faster (beneath the tutorial)
#include "matrix.hpp"
#include "chapters/02_dropout.hpp"  // dropout(x), off by default: a first reading takes it as x

#include "chapters/00_choices.hpp"  // the choices, their names, the questions the blocks ask of them; Owned

struct ModelConfig : LaterChoices<ModelConfig> {  // and each later chapter's choices, off by default (chapter 00)
    int vocab = 11;       // PAD 0, digits 1..9, START 10: the default data's (train.hpp's vocab_size)
    int max_len = 5;      // positions a sequence may take: seq_len, or more (--test-len; chapters 05, 06)
    int d_model = 16;
    int n_heads = 2;
    int d_ff = 32;
    int enc_layers = 1;
    int dec_layers = 1;
    NormPlace norm_place = NormPlace::pre;        // post: the paper's own blocks
    Positions positions = Positions::sinusoidal;  // learned (the paper's other), none; chapter 05's random, rope, alibi
    Activation activation = Activation::relu;     // chapter 04's gelu, swiglu
    bool embed_scale = true;      // multiply embeddings by sqrt(d_model), as in the paper
    bool tie_embeddings = false;  // the output projection is the embedding table, transposed (paper, 3.4)
    double dropout = 0.0;         // P_drop: in training, on the embeddings and every sublayer's output (paper: 0.1)
    double attn_dropout = 0.0;    // P_drop: in training, on the attention weights (the tutorials' place)
};

// ---------------------------------------------------------------------------------------------
constexpr int PAD = 0;  // the padding token; attention never looks at a PAD source position
// Every learned tensor with its name ("encoder.0.self_attn.W_q"), in a fixed order: training, the checkpoint file
// and the tests all walk this one list (chapter 12's adapters come after it).
using ParamList = std::vector<std::pair<std::string, Param*>>;

// ---------------------------------------------------------------------------------------------
// How a Linear multiplies its input x (n, d_in) by W (d_in, d_out), and back: the paper's is matmul in float64; a later
// chapter's, given when the model is built or loaded (09: W's integers; 12: an adapter beside a frozen W).
struct Product {
    virtual ~Product() = default;
    virtual std::unique_ptr<Product> copy() const { return std::make_unique<Product>(*this); }
    virtual Matrix forward(const Matrix& x, const Param& W) { return matmul_fast(x, W.value); }  // x W (n, d_out)
    virtual void backward(const Matrix& dy, const Matrix& x, Param& W, Matrix& dx) {
        matmul_backward_fast(dy, x, W.value, dx, W.grad);  // matmul_backward: dx += dy W^T, dW += x^T dy
    }
};
// Tied embeddings (the paper, 3.4): the output projection multiplies by the embedding table, transposed (vocab rows).
struct TransposedProduct : Product {
    std::unique_ptr<Product> copy() const override { return std::make_unique<TransposedProduct>(*this); }
    Matrix forward(const Matrix& x, const Param& table) override { return matmul_bt_fast(x, table.value); }
    void backward(const Matrix& dy, const Matrix& x, Param& table, Matrix& dx) override {
        matmul_bt_backward_fast(dy, x, table.value, dx, table.grad);  // dx += dy table, table.grad += dy^T x
    }
};

// Linear  y = x W + b.   x (n, d_in), W (d_in, d_out), b (1, d_out), y (n, d_out).
struct Linear {
    Param W, b;  // b is empty (0 x 0) for a layer without bias, like W_q W_k W_v W_o
    Matrix x;    // saved input (n, d_in)
    Owned<Product> product;  // x W: the paper's, unless the model was built or loaded otherwise
    Linear() = default;
    Linear(int d_in, int d_out, bool bias, Rng& rng) : W(d_in, d_out) {
        xavier_init(W.value, rng);
        if (bias) b = Param(1, d_out);  // biases start at zero
    }
    void list_parameters(const std::string& w_name, const std::string& b_name, ParamList& list) {
        list.push_back({w_name, &W});
        if (!b.value.empty()) list.push_back({b_name, &b});
    }
    // (weights: W, or another's: the tied output projection's are the embedding table, Transformer::output.)
    Matrix forward(const Matrix& in) { return forward(in, W); }
    Matrix forward(const Matrix& in, const Param& weights) {
        x = in;  // saved for the backward
        Matrix y = product->forward(in, weights);
        return b.value.empty() ? y : add_row(std::move(y), b.value);
    }
    Matrix backward(const Matrix& dy) { return backward(dy, W); }
    Matrix backward(const Matrix& dy, Param& weights) {  // dy (n, d_out) -> dx (n, d_in)
        // forward: y = add_row(xW, b): b collects dy summed over rows; the gradient of xW is dy
        if (!b.value.empty()) add_row_backward(dy, b.grad);
        Matrix dx(x.rows, x.cols);
        product->backward(dy, x, weights, dx);  // forward: xW = product->forward(x, weights)
        return dx;
    }
};

// ---------------------------------------------------------------------------------------------
// Embedding + positions:  X[t] = table[token_t] * multiplier + pos[row_t].   X (n_seq L, d_model), n_seq sequences of
// L tokens; one table for source and target. PE(pos, 2i) = sin(pos / 10000^(2i / d_model)), PE(pos, 2i + 1) = cos(..):
// each pair of columns is a clock of its own speed, so every position gets a distinct pattern.
inline Matrix sinusoidal_table(int max_len, int d_model) {  // (max_len, d_model)
    Matrix pe(max_len, d_model);
    for (int pos = 0; pos < max_len; pos++)
        for (int c = 0; c < d_model; c++) {
            int two_i = c - c % 2;  // columns 2i and 2i+1 share one frequency
            double angle = pos / maths::pow(10000.0, double(two_i) / d_model);
            pe.at(pos, c) = c % 2 == 0 ? maths::sin(angle) : maths::cos(angle);
        }
    return pe;
}

// Why multiply by sqrt(d_model): position entries are sines and cosines up to 1 in size, a Xavier table's entries of
// spread sqrt(2 / (vocab + d_model)), about 0.27 here: the factor brings the token's part up to the position's size.
struct Embedding {
    Param table;      // (vocab, d_model), one row per token id
    Param learned;    // (max_len, d_model), the learned position table: empty unless positions are learned
    Matrix fixed;     // (max_len, d_model), the sinusoidal table, never trained: empty unless it is the one added
    double multiplier = 1.0;  // sqrt(d_model), the embedding scale; 1 with --no-embed-scale
    Embedding() = default;
    Embedding(const ModelConfig& c, Rng& rng)
        : table(c.vocab, c.d_model), multiplier(c.embed_scale ? std::sqrt(double(c.d_model)) : 1.0) {
        xavier_init(table.value, rng);
        switch (position_table_of(c.positions)) {
        case PositionTable::fixed: fixed = sinusoidal_table(c.max_len, c.d_model); break;
        case PositionTable::learned:  // a table of their own, drawn here
            learned = Param(c.max_len, c.d_model);
            xavier_init(learned.value, rng);
            break;
        case PositionTable::none: break;  // the model sees a bag of tokens (or positions in attention: chapter 05)
        }
    }
    void list_parameters(const std::string& name, ParamList& list) {
        list.push_back({name + ".table", &table});
        if (!learned.value.empty()) list.push_back({name + ".positions", &learned});
    }
    const Matrix* position_table() const {  // (max_len, d_model), or nullptr
        if (!learned.value.empty()) return &learned.value;
        return fixed.empty() ? nullptr : &fixed;
    }
    // tokens, position_ids: (n_seq L); token t reads row position_ids[t] of the position table pos (max_len, d_model).
    Matrix forward(const std::vector<int>& tokens, const std::vector<int>& position_ids) const {
        Matrix X(int(tokens.size()), table.value.cols);
        const Matrix* pos = position_table();
        for (int t = 0; t < X.rows; t++)
            for (int c = 0; c < X.cols; c++)
                X.at(t, c) = table.value.at(tokens[t], c) * multiplier + (pos ? pos->at(position_ids[t], c) : 0.0);
        return X;
    }
    // forward: X[t] = table[tokens[t]] * multiplier + pos[position_ids[t]]
    // exercise embedding: begin
    // so       table.grad[tokens[t]] += multiplier * dX[t]   (a scatter-add: a token seen twice adds twice)
    //          learned.grad[position_ids[t]] += dX[t]           (only when positions are learned)
    // exercise embedding: end
    // Returns nothing: the input is token ids, which have no gradient.
    void backward(const std::vector<int>& tokens, const std::vector<int>& position_ids, const Matrix& dX) {
        // exercise embedding: begin (uses tokens position_ids dX)
        for (int t = 0; t < dX.rows; t++)
            for (int c = 0; c < dX.cols; c++) {
                table.grad.at(tokens[t], c) += multiplier * dX.at(t, c);
                if (!learned.value.empty()) learned.grad.at(position_ids[t], c) += dX.at(t, c);
            }
        // exercise embedding: end
    }
};

// ---------------------------------------------------------------------------------------------
// Scaled dot-product attention  O = softmax(masked(Q K^T / sqrt(d_k))) V, one head of one sequence.
//   Q (T, d_k), K (S, d_k), V (S, d_k), scores and weights P (T, S), O (T, d_k). mask (T, S): 1 = may attend.
// The model's masks as a rule, for n_seq sequences of T queries and S keys: query i may not see key j when the rule
// is causal and j > i (so a decoder trained with teacher forcing cannot peek at the token it must predict), nor when
// j is a PAD of its sequence's source (the encoder's keys; decoder-only's first keys). A written-out mask is one too.
// attention() gets one sequence's (T, S) written out (of_sequence); attention in tiles (chapter 08) asks the rule.
struct Mask {
    Matrix given;                               // (n_seq T, S), or empty: the rule decides
    bool causal = false;                        // the rule: a query sees no key after its own position
    std::vector<std::vector<int>> pad_sources;  // the rule: each sequence's source, whose PADs are hidden (or none)
    Mask() = default;
    Mask(Matrix written) : given(std::move(written)) {}  // implicit: a matrix is a mask
    Mask(bool causal, std::vector<std::vector<int>> pad_sources) : causal(causal), pad_sources(std::move(pad_sources)) {}
    bool sees(int e, int T, int i, int j) const {  // may query i of sequence e (of T) see key j
        if (!given.empty()) return given.at(e * T + i, j) != 0.0;
        return !(causal && j > i) && !pad_key(e, j);
    }
    bool pad_key(int e, int j) const {  // by the rule, key j of sequence e is one of its source's PADs
        return !pad_sources.empty() && j < int(pad_sources[e].size()) && pad_sources[e][j] == PAD;
    }
    Matrix of_sequence(int e, int T, int S) const {  // sequence e's mask (T, S); empty when no rule applies
        if (!given.empty()) return take_block(given, e * T, T, 0, S);
        if (!causal && pad_sources.empty()) return Matrix();
        Matrix m(T, S);
        for (int i = 0; i < T; i++)
            for (int j = 0; j < S; j++) m.at(i, j) = sees(e, T, i, j) ? 1.0 : 0.0;
        return m;
    }
};

struct SavedAttention {  // what one head of one sequence saved for its backward
    Matrix Q, K, V;          // the inputs: (T, d_k), (S, d_k), (S, d_k)
    Matrix P;                // the attention weights (T, S); row i says where query i looked
    Matrix P_dropped, keep;  // attention dropout only: dropout(P) (T, S), which meets V, and its factors
};

// A blocked score is REPLACED by -1e9 (the paper sets it to -inf), never -inf or NaN: after the row max is
// subtracted, exp(-1e9) is exactly 0.0 in double, so the blocked position gets zero weight.
constexpr double MASKED = -1e9;

// attention() in its three steps: the scores (T, S) = Q K^T / sqrt(d_k) (matmul_bt, faster), made weights P (T, S) by
// the mask and the softmax, and O = P V. It moves Q, K, V into `saved` for backward (no copy); attention dropout (in
// training) gives O = dropout(P) V, and `saved` keeps P as it was: the maps show it before dropout.
inline Matrix attention_scores(const Matrix& Q, const Matrix& K) {
    return scale(matmul_bt_fast(Q, K), 1.0 / std::sqrt(double(Q.cols)));
}
inline Matrix attention_weights(Matrix scores, const Matrix& mask) {
    if (!mask.empty())
        for (std::size_t i = 0; i < scores.data.size(); i++)
            if (mask.data[i] == 0.0) scores.data[i] = MASKED;
    return softmax_rows(scores);
}
inline Matrix attention_output(Matrix P, Matrix Q, Matrix K, Matrix V, SavedAttention& saved, double p, Rng* draws) {
    saved = {std::move(Q), std::move(K), std::move(V), std::move(P), Matrix(), Matrix()};
    if (draws && p > 0.0) saved.P_dropped = dropout(saved.P, p, draws, saved.keep);
    return matmul_fast(saved.keep.empty() ? saved.P : saved.P_dropped, saved.V);  // (T, d_k)
}
inline Matrix attention(Matrix Q, Matrix K, Matrix V, const Matrix& mask, SavedAttention& saved, double p = 0.0,
                        Rng* dropout_draws = nullptr) {
    Matrix P = attention_weights(attention_scores(Q, K), mask);  // (T, S)
    return attention_output(std::move(P), std::move(Q), std::move(K), std::move(V), saved, p, dropout_draws);
}
// Undo attention() line by line, last line first. Adds into dQ (T, d_k), dK, dV (S, d_k).
inline void attention_backward(const Matrix& dO, const SavedAttention& c, Matrix& dQ, Matrix& dK,
                               Matrix& dV) {
    // exercise attention: begin (uses dO c dQ dK dV)
    const double inv_sqrt_dk = 1.0 / std::sqrt(double(c.Q.cols));
    // forward: O = P V, or with attention dropout O = P_dropped V, P_dropped = dropout(P)
    Matrix dP_dropped(c.P.rows, c.P.cols);
    matmul_backward_fast(dO, c.keep.empty() ? c.P : c.P_dropped, c.V, dP_dropped, dV);
    Matrix dP = dropout_backward(std::move(dP_dropped), c.keep);
    // forward: P = softmax_rows(scores). A masked score was replaced by a constant, so it gets no
    // gradient; softmax_rows_backward gives it exactly 0 anyway, because its P is exactly 0 (not so in a row that
    // sees no key, whose weights are equal; the model's masks make none: a query sees its source's first token).
    Matrix d_scores(c.P.rows, c.P.cols);
    softmax_rows_backward(dP, c.P, d_scores);
    // forward: scores = (Q K^T) / sqrt(d_k)
    Matrix d_QKt(c.P.rows, c.P.cols);
    scale_backward(d_scores, inv_sqrt_dk, d_QKt);
    // forward: Q K^T = matmul_bt(Q, K)
    matmul_bt_backward_fast(d_QKt, c.Q, c.K, dQ, dK);
    // exercise attention: end
}

// ---------------------------------------------------------------------------------------------
// How each head attends: the paper's way is attention() above (attend, below, writes its two lines with a hook on the
// weights), on Q and K as projected, each query head reading its own K and V head. A later chapter derives a way of
// its own (04: shared K and V heads; 05: rotary, ALiBi; 08: tiles), and a model is built with one
// (head_attention_of), so MultiHeadAttention writes its loop over heads once.
//   q (T, d_k), k and v (S, d_k): head h of sequence e; mask_e (T, S) that sequence's mask written out.
struct HeadAttention {
    virtual ~HeadAttention() = default;
    virtual std::unique_ptr<HeadAttention> copy() const { return std::make_unique<HeadAttention>(*this); }
    // Q or K (n_seq L, heads d_k) before the heads read it, each sequence's rows at positions first ..; and back.
    virtual Matrix ready(Matrix X, int /*L*/, int /*first*/) const { return X; }
    virtual Matrix ready_backward(Matrix dX, int /*L*/, int /*first*/) const { return dX; }
    // Before n_seq sequences' heads attend: whether they must run in turn (attention dropout draws in order); then
    // sequence e's mask written out, and its scores (T, S) made weights (queries from first_query on: decoding's).
    virtual bool start(const Mask& /*mask*/, int /*n_seq*/, double p, Rng* draws) { return draws && p > 0.0; }
    virtual Matrix sequence_mask(const Mask& mask, int e, int T, int S) const { return mask.of_sequence(e, T, S); }
    virtual Matrix weights(Matrix scores, const Matrix& mask_e, int /*h*/, int /*first_query*/) const {
        return attention_weights(std::move(scores), mask_e);
    }
    virtual Matrix attend(Matrix q, Matrix k, Matrix v, const Matrix& mask_e, int /*e*/, int h, SavedAttention& kept,
                          double p, Rng* draws) {  // attention(), with this way's weights
        Matrix P = weights(attention_scores(q, k), mask_e, h, 0);
        return attention_output(std::move(P), std::move(q), std::move(k), std::move(v), kept, p, draws);
    }
    virtual void attend_backward(const Matrix& dO, const SavedAttention& kept, int /*e*/, int /*h*/, Matrix& dQ,
                                 Matrix& dK, Matrix& dV) const {
        attention_backward(dO, kept, dQ, dK, dV);
    }
    virtual int key_head(int h) const { return h; }  // the head of K and V that query head h reads: its own
};
// How a model's heads attend, chosen once as it is built: the paper's (HeadAttention), or a later chapter's (chapter 08
// defines it: included below, after chapters 04 and 05, whose ways it also picks).
std::unique_ptr<HeadAttention> head_attention_of(const ModelConfig& c, bool self_attention);

// ---------------------------------------------------------------------------------------------
// Multi-head attention: project x_q to Q and x_kv to K and V, attend in n_heads slices of d_k columns, join the slices,
// project with W_o. x_q (n_seq T, d_model), x_kv (n_seq S, d_model), mask (n_seq T, S), output (n_seq T, d_model).
// Self-attention: x_q = x_kv; cross-attention: x_q from the decoder, x_kv the encoder's output (the "memory").
struct MultiHeadAttention {
    int n_heads = 1, d_k = 1;
    double attn_dropout = 0.0;          // P_drop of the attention weights' dropout, in training
    Rng* dropout_draws = nullptr;       // in training the model's dropout stream (Transformer::train), else nullptr
    Linear W_q, W_k, W_v, W_o;          // (d_model, d_model) each, no bias (W_k, W_v narrower: chapter 04's GQA)
    std::vector<SavedAttention> saved;  // sequence e's head h at [e * n_heads + h]; its P is the map
    Owned<HeadAttention> heads;         // how each head attends: the paper's, unless the model was built otherwise
    MultiHeadAttention() = default;
    MultiHeadAttention(const ModelConfig& c, Rng& rng, bool self_attention = false)
        : n_heads(c.n_heads), d_k(c.d_model / c.n_heads), attn_dropout(c.attn_dropout),
          W_q(c.d_model, c.d_model, false, rng), W_k(c.d_model, key_value_width(c), false, rng),
          W_v(c.d_model, key_value_width(c), false, rng), W_o(c.d_model, c.d_model, false, rng),
          heads(head_attention_of(c, self_attention)) {}
    void list_parameters(const std::string& name, ParamList& list) {  // the four have no bias
        for (auto [linear, suffix] : {std::pair{&W_q, ".W_q"}, {&W_k, ".W_k"}, {&W_v, ".W_v"}, {&W_o, ".W_o"}})
            linear->list_parameters(name + suffix, "", list);
    }
    // The projections see every row of the batch at once; each sequence attends only to its own rows.
    Matrix forward(const Matrix& x_q, const Matrix& x_kv, const Mask& mask, int n_seq = 1) {
        return attend(heads->ready(W_q.forward(x_q), x_q.rows / n_seq, 0),
                      heads->ready(W_k.forward(x_kv), x_kv.rows / n_seq, 0), W_v.forward(x_kv), mask, n_seq);
    }
    // Q (n_seq T, d_model), K and V (n_seq S, d_model; narrower: chapter 04) -> every head, joined, projected by W_o.
    Matrix attend(const Matrix& Q, const Matrix& K, const Matrix& V, const Mask& mask, int n_seq) {
        Matrix joined(Q.rows, Q.cols);  // (n_seq T, d_model)
        int T = Q.rows / n_seq, S = K.rows / n_seq;
        saved.assign(std::size_t(n_seq) * n_heads, SavedAttention{});
        // Each sequence attends to its own rows, so sequences may run at once (--threads, engine/kernels.hpp); under
        // attention dropout in turn (work 0: in order, on this thread), since its masks are drawn in order.
        const bool in_turn = heads->start(mask, n_seq, attn_dropout, dropout_draws);
        parallel_each(n_seq, in_turn ? 0.0 : attention_work(n_seq * n_heads, T, S, d_k), [&](int e) {
            Matrix mask_e = heads->sequence_mask(mask, e, T, S);  // (T, S)
            for (int h = 0; h < n_heads; h++) {
                int col = h * d_k, kv_col = heads->key_head(h) * d_k;  // head h owns columns col ..; its K, V kv_col ..
                Matrix q = take_block(Q, e * T, T, col, d_k), k = take_block(K, e * S, S, kv_col, d_k),
                       v = take_block(V, e * S, S, kv_col, d_k);
                Matrix O_h = heads->attend(std::move(q), std::move(k), std::move(v), mask_e, e, h,
                                           saved[e * n_heads + h], attn_dropout, dropout_draws);
                add_into_block(O_h, e * T, col, joined);  // (T, d_k)
            }
        });
        return W_o.forward(joined);
    }
    // Undoes forward and the attend it calls; adds into d_xq (n_seq T, d_model) and d_xkv (n_seq S, d_model).
    void backward(const Matrix& d_out, Matrix& d_xq, Matrix& d_xkv) {
        Matrix d_joined = W_o.backward(d_out);  // attend: return W_o.forward(joined)
        int n_seq = int(saved.size()) / n_heads, T = d_joined.rows / n_seq, S = saved[0].K.rows;
        Matrix dQ(n_seq * T, n_heads * d_k), dK(n_seq * S, W_k.W.value.cols), dV(n_seq * S, W_v.W.value.cols);
        // Sequences at once: the backward draws nothing. (Not heads: heads that share a K and V head add into it.)
        // exercise heads: begin (uses d_xq d_xkv)
        parallel_each(n_seq, attention_work(n_seq * n_heads, T, S, d_k), [&](int e) {
            for (int h = 0; h < n_heads; h++) {
                int col = h * d_k, kv_col = heads->key_head(h) * d_k;
                Matrix dQ_h(T, d_k), dK_h(S, d_k), dV_h(S, d_k);
                // attend: O_h = heads->attend(...); add_into_block(O_h, e * T, col, joined)
                heads->attend_backward(take_block(d_joined, e * T, T, col, d_k), saved[std::size_t(e) * n_heads + h],
                                       e, h, dQ_h, dK_h, dV_h);
                // attend: take_block(Q, e * T, T, col, d_k), and the same for K and V at kv_col. Heads that share a
                // K and V head each add their share (+=): the chain rule's sum over uses.
                add_into_block(dQ_h, e * T, col, dQ);
                add_into_block(dK_h, e * S, kv_col, dK);
                add_into_block(dV_h, e * S, kv_col, dV);
            }
        });
        // exercise heads: end
        // forward: Q = heads->ready(W_q.forward(x_q)), K = heads->ready(W_k.forward(x_kv)), V = W_v.forward(x_kv)
        dQ = heads->ready_backward(std::move(dQ), T, 0);
        dK = heads->ready_backward(std::move(dK), S, 0);
        // exercise heads: begin (uses d_xq d_xkv)
        accumulate(d_xq, W_q.backward(dQ));
        accumulate(d_xkv, W_k.backward(dK));
        accumulate(d_xkv, W_v.backward(dV));
        // exercise heads: end
    }
    Matrix backward_self(const Matrix& d_out) {  // self-attention: x feeds Q and K, V; both add into dx
        Matrix dx(d_out.rows, W_q.x.cols);
        backward(d_out, dx, dx);
        return dx;
    }
};

// ---------------------------------------------------------------------------------------------
// A layer with weights: the paper's norm is LayerNorm and its feed-forward FeedForward (below); later chapters add
// kinds (04: RMSNorm, SwiGLU; 11: experts), one of each chosen when a model is built (norm_of, feed_forward_of).
struct Layer {
    virtual ~Layer() = default;
    virtual std::unique_ptr<Layer> copy() const = 0;
    virtual std::string kind(bool short_form) const = 0;  // as the pictures and counts say it: "LayerNorm", "LN"
    virtual void list_parameters(const std::string& name, ParamList& list) = 0;
    virtual Matrix forward(const Matrix& x) = 0;
    virtual Matrix backward(const Matrix& dy) = 0;
};

// LayerNorm over each row:  y = gamma * (x - mean) / sqrt(var + eps) + beta.   x, y (n, d_model). var is the
// biased variance (divide by d_model), as in PyTorch's LayerNorm.
struct LayerNorm : Layer {
    static constexpr double eps = 1e-5;
    Param gamma, beta;          // (1, d_model), start at 1 and 0: the identity after normalising
    Matrix x_hat;               // saved (n, d_model): (x - mean) / sqrt(var + eps)
    std::vector<double> rstd;   // saved (n): 1 / sqrt(var + eps) of each row
    LayerNorm() = default;
    explicit LayerNorm(int d_model) : gamma(1, d_model, 1.0), beta(1, d_model, 0.0) {}
    std::unique_ptr<Layer> copy() const override { return std::make_unique<LayerNorm>(*this); }
    std::string kind(bool short_form) const override { return short_form ? "LN" : "LayerNorm"; }
    void list_parameters(const std::string& name, ParamList& list) override {
        list.push_back({name + ".gamma", &gamma});
        list.push_back({name + ".beta", &beta});
    }
    Matrix forward(const Matrix& x) override {
        int n = x.rows, d = x.cols;
        x_hat = Matrix(n, d);
        rstd.assign(n, 0.0);
        Matrix y(n, d);
        for (int i = 0; i < n; i++) {
            double mean = 0.0, var = 0.0;
            for (int j = 0; j < d; j++) mean += x.at(i, j) / d;
            for (int j = 0; j < d; j++) var += (x.at(i, j) - mean) * (x.at(i, j) - mean) / d;
            rstd[i] = 1.0 / std::sqrt(var + eps);
            for (int j = 0; j < d; j++) {
                x_hat.at(i, j) = (x.at(i, j) - mean) * rstd[i];
                y.at(i, j) = gamma.value.at(0, j) * x_hat.at(i, j) + beta.value.at(0, j);
            }
        }
        return y;
    }
    // exercise layernorm: begin
    // forward: y = gamma * x_hat + beta    so   d_gamma += dy * x_hat,  d_beta += dy,
    //                                           d_x_hat = dy * gamma
    // forward: x_hat = (x - mean) * rstd, where mean and rstd depend on every x of the row, so
    //          dx = rstd * (d_x_hat  -  mean(d_x_hat)  -  x_hat * mean(d_x_hat * x_hat))
    //               term 1: direct path   term 2: through mean   term 3: through the variance
    // Derivation, one row of d entries: d mean/dx_j = 1/d and d var/dx_j = 2 (x_j - mean) / d, so
    // d rstd/dx_j = -rstd^3 (x_j - mean) / d; the chain rule through every x_hat_k = (x_k - mean) rstd:
    //   dx_j = sum_k d_x_hat_k [(delta_jk - 1/d) rstd - (x_k - mean) rstd^3 (x_j - mean) / d]
    //        = rstd (d_x_hat_j - mean(d_x_hat) - x_hat_j mean(d_x_hat * x_hat)).
    // exercise layernorm: end
    Matrix backward(const Matrix& dy) override {
        // exercise layernorm: begin (uses dy)
        int n = dy.rows, d = dy.cols;
        Matrix dx(n, d), d_x_hat(n, d);
        for (int i = 0; i < n; i++) {
            double mean_d = 0.0, mean_d_xhat = 0.0;
            for (int j = 0; j < d; j++) {
                gamma.grad.at(0, j) += dy.at(i, j) * x_hat.at(i, j);
                beta.grad.at(0, j) += dy.at(i, j);
                d_x_hat.at(i, j) = dy.at(i, j) * gamma.value.at(0, j);
                mean_d += d_x_hat.at(i, j) / d;
                mean_d_xhat += d_x_hat.at(i, j) * x_hat.at(i, j) / d;
            }
            for (int j = 0; j < d; j++)
                dx.at(i, j) += rstd[i] * (d_x_hat.at(i, j) - mean_d - x_hat.at(i, j) * mean_d_xhat);
        }
        return dx;
        // exercise layernorm: end
    }
};

// ---------------------------------------------------------------------------------------------
// Position-wise feed-forward  y = act(x W_1 + b_1) W_2 + b_2, the same two layers at every row.
//   x, y (n, d_model), hidden (n, d_ff). act works entry by entry: ReLU (or chapter 04's GELU).
struct Pointwise {  // an activation, entry by entry, and its backward (matrix.hpp)
    std::string name;  // as --act spells it
    Matrix (*forward)(const Matrix& X);
    void (*backward)(const Matrix& dY, const Matrix& X, Matrix& dX);
};
struct FeedForward : Layer {
    Linear W_1, W_2;        // (d_model -> d_ff), (d_ff -> d_model), each with its bias b_1, b_2 (none: --no-bias)
    Pointwise act{"relu", relu, relu_backward};
    Matrix hidden;          // saved (n, d_ff): x W_1 + b_1, the activation's input
    FeedForward() = default;
    FeedForward(int d_model, int d_ff, Pointwise act, bool bias, Rng& rng)
        : W_1(d_model, d_ff, bias, rng), W_2(d_ff, d_model, bias, rng), act(act) {}
    std::unique_ptr<Layer> copy() const override { return std::make_unique<FeedForward>(*this); }
    std::string kind(bool short_form) const override { return short_form ? "FFN" : "FeedForward"; }
    void list_parameters(const std::string& name, ParamList& list) override {
        W_1.list_parameters(name + ".W_1", name + ".b_1", list);
        W_2.list_parameters(name + ".W_2", name + ".b_2", list);
    }
    Matrix forward(const Matrix& x) override {
        hidden = W_1.forward(x);
        return W_2.forward(act.forward(hidden));
    }
    Matrix backward(const Matrix& dy) override {
        Matrix d_act = W_2.backward(dy);  // forward: W_2.forward(act(hidden))
        Matrix d_hidden(hidden.rows, hidden.cols);
        act.backward(d_act, hidden, d_hidden);  // forward: act(hidden)
        return W_1.backward(d_hidden);          // forward: hidden = W_1.forward(x)
    }
};

#include "chapters/04_todays_blocks.hpp"  // RMSNorm, GELU, SwiGLU, shared K and V heads; the choice of each
#include "chapters/05_positions.hpp"      // positions in attention: PositionsInAttention
#include "chapters/08_attention_in_tiles.hpp"  // attention in tiles, InTiles; head_attention_of picks the way

// ---------------------------------------------------------------------------------------------
// Sublayer: the residual connection and its norm (LayerNorm), wrapped around attention or feed-forward.
//   pre-norm (default): x + dropout(f(LN(x)))     post-norm (the 2017 paper's blocks): LN(x + dropout(f(x)))
// (both keep the final LayerNorm before the output projection; the paper's post-norm model has none). The one place
// the residual rule lives: forward(x, f) runs the inner f, backward(d_out, f_backward) its backward (d of f's output
// in, d of f's input out), so a block's backward reads as its forward reversed.
struct Sublayer {
    Owned<Layer> norm;
    NormPlace where = NormPlace::pre;
    double p = 0.0;                // dropout on f's output, in training
    Rng* dropout_draws = nullptr;  // in training the model's dropout stream (Transformer::train), else nullptr
    Matrix keep;                   // saved: the dropout's factors, empty when nothing was dropped
    Sublayer() = default;
    explicit Sublayer(const ModelConfig& c) : norm(norm_of(c)), where(c.norm_place), p(c.dropout) {}
    template <typename F>  // f: Matrix(const Matrix& f_in)
    Matrix forward(const Matrix& x, F f) {
        switch (where) {
        case NormPlace::pre: return add(x, dropout(f(norm->forward(x)), p, dropout_draws, keep));   // x + f(LN(x))
        case NormPlace::post: return norm->forward(add(x, dropout(f(x), p, dropout_draws, keep)));  // LN(x + f(x))
        }
        return Matrix();  // not reached
    }
    template <typename B>  // f_backward: Matrix(const Matrix& d_f_out), returns d_f_in
    Matrix backward(const Matrix& d_out, B f_backward) {
        Matrix d_sum;
        switch (where) {  // forward: out = sum (pre-norm) or LN(sum) (post-norm)
        case NormPlace::pre: d_sum = d_out; break;
        case NormPlace::post: d_sum = norm->backward(d_out); break;
        }
        // forward: sum = add(x, dropped): both terms get d_sum
        Matrix dx(d_sum.rows, d_sum.cols), d_dropped(d_sum.rows, d_sum.cols);
        add_backward(d_sum, dx, d_dropped);
        // forward: dropped = dropout(f_out), f_out itself when nothing is dropped
        Matrix d_f_out = dropout_backward(std::move(d_dropped), keep);
        Matrix d_f_in = f_backward(d_f_out);  // forward: f_out = f(f_in)
        switch (where) {  // forward: f_in = LN(x) (pre-norm) or x (post-norm): the second path to x
        case NormPlace::pre: accumulate(dx, norm->backward(d_f_in)); break;
        case NormPlace::post: accumulate(dx, d_f_in); break;
        }
        return dx;
    }
};

// ---------------------------------------------------------------------------------------------
// Encoder block: self-attention, then feed-forward, each inside a Sublayer.   x, out (n_seq S, d_model)
struct EncoderBlock {
    Sublayer attn_sub, ffn_sub;
    MultiHeadAttention self_attn;
    Owned<Layer> ffn;
    EncoderBlock() = default;
    EncoderBlock(const ModelConfig& c, Rng& rng)
        : attn_sub(c), ffn_sub(c), self_attn(c, rng, true), ffn(feed_forward_of(c, rng)) {}
    void list_parameters(const std::string& name, ParamList& list) {
        attn_sub.norm->list_parameters(name + ".norm1", list);
        self_attn.list_parameters(name + ".self_attn", list);
        ffn_sub.norm->list_parameters(name + ".norm2", list);
        ffn->list_parameters(name + ".ffn", list);
    }
    void set_dropout_draws(Rng* stream) {  // Transformer::train
        attn_sub.dropout_draws = ffn_sub.dropout_draws = self_attn.dropout_draws = stream;
    }
    Matrix forward(const Matrix& x, const Mask& src_mask, int n_seq = 1) {  // n_seq sequences stacked
        Matrix x1 = attn_sub.forward(x, [&](const Matrix& a) { return self_attn.forward(a, a, src_mask, n_seq); });
        return ffn_sub.forward(x1, [&](const Matrix& a) { return ffn->forward(a); });
    }
    Matrix backward(const Matrix& d_out) {
        // forward: out = ffn_sub.forward(x1, ffn)
        Matrix dx1 = ffn_sub.backward(d_out, [&](const Matrix& d) { return ffn->backward(d); });
        // forward: x1 = attn_sub.forward(x, self-attention)
        return attn_sub.backward(dx1, [&](const Matrix& d) { return self_attn.backward_self(d); });
    }
};

// ---------------------------------------------------------------------------------------------
// Decoder block: causal self-attention, cross-attention to the encoder memory, feed-forward. (Chapter 06 builds one
// without cross-attention, which its own forward and backward run: decoder_only_forward.)
//   y, out (n_seq T, d_model), memory (n_seq S, d_model).
struct DecoderBlock {
    Sublayer self_sub, cross_sub, ffn_sub;
    MultiHeadAttention self_attn, cross_attn;
    Owned<Layer> ffn;
    DecoderBlock() = default;
    DecoderBlock(const ModelConfig& c, Rng& rng)
        : self_sub(c), cross_sub(c), ffn_sub(c), self_attn(c, rng, true), cross_attn(c, rng),
          ffn(feed_forward_of(c, rng)) {}
    void list_parameters(const std::string& name, ParamList& list) {
        self_sub.norm->list_parameters(name + ".norm1", list);
        self_attn.list_parameters(name + ".self_attn", list);
        cross_sub.norm->list_parameters(name + ".norm2", list);
        cross_attn.list_parameters(name + ".cross_attn", list);
        ffn_sub.norm->list_parameters(name + ".norm3", list);
        ffn->list_parameters(name + ".ffn", list);
    }
    void set_dropout_draws(Rng* stream) {  // Transformer::train
        self_sub.dropout_draws = cross_sub.dropout_draws = ffn_sub.dropout_draws = stream;
        self_attn.dropout_draws = cross_attn.dropout_draws = stream;
    }
    // (Decoding runs this block on the newest rows alone, with its cache: decoder_block_next, chapter 10.)
    Matrix forward(const Matrix& y, const Matrix& memory, const Mask& causal, const Mask& memory_mask,
                   int n_seq = 1) {
        Matrix y1 = self_sub.forward(y, [&](const Matrix& a) { return self_attn.forward(a, a, causal, n_seq); });
        Matrix y2 = cross_sub.forward(y1, [&](const Matrix& a) {
            return cross_attn.forward(a, memory, memory_mask, n_seq);
        });
        return ffn_sub.forward(y2, [&](const Matrix& a) { return ffn->forward(a); });
    }
    // Returns dy and adds the memory's gradient into d_memory (n_seq S, d_model).
    Matrix backward(const Matrix& d_out, Matrix& d_memory) {
        // exercise decoder-block: begin (uses d_out d_memory)
        // forward: out = ffn_sub.forward(y2, ffn)
        Matrix dy2 = ffn_sub.backward(d_out, [&](const Matrix& d) { return ffn->backward(d); });
        // forward: y2 = cross_sub.forward(y1, cross-attention to the memory)
        Matrix dy1 = cross_sub.backward(dy2, [&](const Matrix& d) {
            Matrix d_queries(d.rows, d.cols);
            cross_attn.backward(d, d_queries, d_memory);  // the keys' and values' share goes to the memory
            return d_queries;
        });
        // forward: y1 = self_sub.forward(y, causal self-attention)
        return self_sub.backward(dy1, [&](const Matrix& d) { return self_attn.backward_self(d); });
        // exercise decoder-block: end
    }
};

#include "chapters/09_eight_bits.hpp"  // a quantized model's integers (QuantizedParts), a Linear's IntegerProduct
#include "chapters/12_lora.hpp"        // fine-tuning: a Linear's adapter beside its frozen W (Adapted)

// A later chapter's way to build, list and run the model's blocks, in place of the encoder then the decoder (06: one
// causal stack, decoder-only), chosen once as the model is built (architecture_of); the paper's model holds none.
struct Transformer;
struct Architecture {
    virtual ~Architecture() = default;
    virtual std::unique_ptr<Architecture> copy() const = 0;
    virtual DecoderBlock decoder_block(const ModelConfig& c, Rng& rng) const = 0;  // its kind of decoder block
    virtual void list_parameters(Transformer& model, ParamList& list) const = 0;  // its decoder blocks', by name
    virtual Matrix forward(Transformer& model, const std::vector<std::vector<int>>& srcs,
                           const std::vector<std::vector<int>>& tgts_in) = 0;  // -> logits (n_seq T, vocab)
    virtual void backward(Transformer& model, const Matrix& d_logits) = 0;
};
std::unique_ptr<Architecture> architecture_of(const ModelConfig& c);  // (chapter 06 defines it)

// ---------------------------------------------------------------------------------------------
// The Transformer: embed the source, run the encoder blocks to get the memory; embed the decoder
// input, run the decoder blocks against the memory; final LayerNorm; project to vocab logits.
//   sources n_seq x (S), targets_in n_seq x (T), memory (n_seq S, d_model), logits (n_seq T, vocab)
struct Transformer : QuantizedParts {  // (a quantized model's integers, chapter 09; none in float64)
    ModelConfig config;
    Embedding embed;  // shared by source and target
    std::vector<EncoderBlock> encoder;
    std::vector<DecoderBlock> decoder;
    Owned<Layer> final_norm;
    Linear out;       // (d_model -> vocab), with bias (none: --no-bias); tied embeddings: W empty (the table's)
    Owned<Architecture> architecture;  // none: the paper's encoder-decoder, which forward and backward run here
    using Batch = std::vector<std::vector<int>>;  // n_seq sequences of tokens, all of one length
    Batch sources, targets_in;  // n_seq x (S), n_seq x (T): saved by forward (encode, next_token_logits) for backward
    Batch source_position_ids, target_position_ids;  // saved: each token's position row, n_seq x (S), (T or S + T)
    Matrix source_keep, target_keep;  // saved: dropout's factors (n_seq S or T, d_model); decoder-only's T: S + T
    // Training mode (PyTorch's model.train(); gradient_of turns it on for its forward pass) reads two streams:
    // dropout's masks, in the order forward runs, and random positions' rows. Outside it no stream moves.
    Rng position_draws{1};
    Rng dropout_draws{1};
    bool training = false;
    void train(bool on) {
        training = on;
        for (EncoderBlock& block : encoder) block.set_dropout_draws(on ? &dropout_draws : nullptr);
        for (DecoderBlock& block : decoder) block.set_dropout_draws(on ? &dropout_draws : nullptr);
    }
    Rng* embedding_dropout_draws() { return training ? &dropout_draws : nullptr; }
    Transformer() = default;
    Transformer(const ModelConfig& c, uint64_t seed)
        : config(c), final_norm(norm_of(c)), architecture(architecture_of(c)) {
        Rng rng(seed);
        embed = Embedding(c, rng);
        for (int i = 0; i < c.enc_layers; i++) encoder.emplace_back(c, rng);  // (decoder-only: the caller's 0)
        for (int i = 0; i < c.dec_layers; i++)  // (a later chapter's architecture builds its own kind)
            decoder.push_back(architecture ? architecture->decoder_block(c, rng) : DecoderBlock(c, rng));
        out = Linear(c.d_model, c.vocab, !c.no_bias, rng);  // (a bias draws nothing: the weights stay the same)
        if (c.tie_embeddings) out.W = Param(), out.product = std::make_unique<TransposedProduct>();  // W drawn and
                                                 // dropped, so the weights drawn after it stay the same
        position_draws = Rng(rng.next());
        dropout_draws = Rng(rng.next());
    }
    // Each source's L position ids, the rows of the position table it reads: 0 .. L-1 (chapter 05's random positions:
    // drawn, from the model's stream in training, else from one seeded by the source: an input always reads the same).
    Batch position_ids_for(const Batch& srcs, int L) {
        Batch ids;
        for (const std::vector<int>& src : srcs) {
            Rng own(hash_of(src));
            ids.push_back(position_ids_of(L, config.max_len, draws_position_ids(config.positions),
                                          training ? position_draws : own));
        }
        return ids;
    }
    Matrix encode(const Batch& srcs) {  // -> memory (n_seq S, d_model)
        sources = srcs;
        int S = int(srcs[0].size());
        source_position_ids = position_ids_for(srcs, S);
        Mask src_mask(false, srcs);  // no query sees a PAD of its source (chapter 10's padding_mask writes it out)
        Matrix x = embed.forward(concatenated(srcs), concatenated(source_position_ids));
        x = dropout(std::move(x), config.dropout, embedding_dropout_draws(), source_keep);
        for (EncoderBlock& block : encoder) x = block.forward(x, src_mask, int(srcs.size()));
        return x;
    }
    // Decoder token t reads row t; with random positions, the row its source's token t read (every task's output is
    // as long as its input), so both sides share one draw. (Decoder-only: t counts from the sequence's start.)
    int target_position_id(const std::vector<int>& of_source, int t) const {
        return draws_position_ids(config.positions) ? of_source.at(t) : t;
    }
    // The logits for the next token at every position of the targets (teacher forcing); the sources' PADs hidden.
    Matrix next_token_logits(const Batch& tgts_in, const Matrix& memory, const Batch& srcs) {
        targets_in = tgts_in;
        int T = int(tgts_in[0].size()), n_seq = int(tgts_in.size());
        target_position_ids.assign(n_seq, {});
        for (int e = 0; e < n_seq; e++)
            for (int t = 0; t < T; t++)
                target_position_ids[e].push_back(target_position_id(source_position_ids[e], t));
        Mask memory_mask(false, srcs);  // no PAD of the source (padding_mask, written out: (n_seq T, S))
        Mask causal(true, {});          // nothing after the query (chapter 10's causal_mask: (T, T) a sequence)
        Matrix y = embed.forward(concatenated(tgts_in), concatenated(target_position_ids));
        y = dropout(std::move(y), config.dropout, embedding_dropout_draws(), target_keep);
        for (DecoderBlock& block : decoder) y = block.forward(y, memory, causal, memory_mask, n_seq);
        return output(final_norm->forward(y));  // -> logits (n_seq T, vocab)
    }
    // The output projection: logits = h W + b, h (n_seq T, d_model) -> (n_seq T, vocab), and back: dh. With tied
    // embeddings (the paper, 3.4) W is the embedding table transposed (out's TransposedProduct): one matrix reads a
    // token in and scores it out, and its gradient is the sum of three uses'.
    Matrix output(const Matrix& h) { return config.tie_embeddings ? out.forward(h, embed.table) : out.forward(h); }
    Matrix output_backward(const Matrix& d_logits) {
        return config.tie_embeddings ? out.backward(d_logits, embed.table) : out.backward(d_logits);
    }
    Matrix forward(const Batch& srcs, const Batch& tgts_in) {
        if (architecture) return architecture->forward(*this, srcs, tgts_in);  // a later chapter's
        return next_token_logits(tgts_in, encode(srcs), srcs);
    }
    static std::vector<int> concatenated(const Batch& seqs) {  // the tokens of every sequence, one after another
        std::vector<int> all;
        for (const std::vector<int>& s : seqs) all.insert(all.end(), s.begin(), s.end());
        return all;
    }
    // Undo forward(), last step first. Adds into every parameter's grad.
    void backward(const Matrix& d_logits) {
        if (architecture) return architecture->backward(*this, d_logits);  // a later chapter's
        // forward: logits = output(final_norm->forward(y))
        Matrix dy = final_norm->backward(output_backward(d_logits));
        // forward: y = block.forward(y, memory, ...) for each decoder block; memory feeds them all
        int S = int(sources[0].size()), T = int(targets_in[0].size()), n_seq = int(sources.size());
        Matrix d_memory(n_seq * S, config.d_model);
        for (int i = int(decoder.size()) - 1; i >= 0; i--) dy = decoder[i].backward(dy, d_memory);
        // forward: x = block.forward(x, src_mask) for each encoder block; memory = x
        Matrix dx = d_memory;
        for (int i = int(encoder.size()) - 1; i >= 0; i--) dx = encoder[i].backward(dx);
        // forward: y = dropout(embed.forward(tgts_in)), x = dropout(embed.forward(srcs))
        dy = dropout_backward(std::move(dy), target_keep);
        dx = dropout_backward(std::move(dx), source_keep);
        // The table is shared: sequence by sequence, decoder side first, as one sequence at a time would add.
        for (int e = 0; e < n_seq; e++) {
            embed.backward(targets_in[e], target_position_ids[e], take_block(dy, e * T, T, 0, config.d_model));
            embed.backward(sources[e], source_position_ids[e], take_block(dx, e * S, S, 0, config.d_model));
        }
    }
    // Every learned tensor with its name, in a fixed order (the checkpoint's order too).
    ParamList parameters() {
        ParamList list;
        embed.list_parameters("embed", list);
        for (size_t i = 0; i < encoder.size(); i++) encoder[i].list_parameters("encoder." + std::to_string(i), list);
        if (architecture) architecture->list_parameters(*this, list);  // a later chapter's decoder blocks, of its kind
        else
            for (size_t i = 0; i < decoder.size(); i++)
                decoder[i].list_parameters("decoder." + std::to_string(i), list);
        final_norm->list_parameters("final_norm", list);
        if (!config.tie_embeddings) list.push_back({"out.W", &out.W});  // tied: the table, listed once above
        if (!out.b.value.empty()) list.push_back({"out.b", &out.b});
        return list;
    }
    void zero_grad() { for (auto& [name, param] : parameters_and_adapters(*this)) param->grad.zero(); }
};

#include "chapters/06_decoder_only.hpp"  // DecoderOnly, an Architecture: one causal stack
#include "chapters/07_llama_layer.hpp"   // a Llama layer in one place, tested equal to DecoderBlock
