// model.hpp -- the blocks of an encoder-decoder Transformer, each forward beside its backward.
//
// Read after matrix.hpp. Every block is a struct that owns its parameters (Param: value + grad), lists them by
// name (list_parameters) and keeps what its forward saved; backward(d_out) reads that, adds (+=) into its
// parameters' grads and returns the gradient for its input (a block with two inputs, attention's queries and
// memory, adds into gradients the caller zeroed; Embedding's input, token ids, has none). n_seq sequences run as
// one stack of rows: sequence e owns rows e*S .. of the encoder's matrices, e*T .. of the decoder's (decoder-only:
// e*(S + T) .., source and answer as one sequence).
//
// The model, stated once: PRE-NORM blocks (x + f(LayerNorm(x))), LayerNorm with the biased variance and eps inside the
// square root, a final LayerNorm before the output projection. Each choice (ModelConfig, all off by default) is decided
// where the block it changes is built, and the code that runs reads only what was decided. Today's blocks stand whole
// beside the ones they replace, under a rule of ~, which a first reading skips, as it skips decoding's cache.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/kernels.hpp"  // matmul_fast and the rest: matrix.hpp's products, faster (beneath the tutorial)
#include "matrix.hpp"

// The exercise switches, each with its names as the flags and the checkpoint file spell them.
enum class NormPlace { pre, post };  // where a sublayer's norm goes
enum class Positions { sinusoidal, learned, none, random, rope, alibi };  // how a token's place is known: a table
                                                                          // the embeddings add, none, or in attention
enum class Activation { relu, gelu, swiglu };
enum class Arch { encoder_decoder, decoder_only };
enum class Attention { plain, flash };  // how training computes attention: the weights whole, or in tiles
const std::vector<std::string> NORM_PLACE_NAMES = {"pre", "post"};
const std::vector<std::string> POSITION_NAMES = {"sinusoidal", "learned", "none", "random", "rope", "alibi"};
const std::vector<std::string> ACTIVATION_NAMES = {"relu", "gelu", "swiglu"};
const std::vector<std::string> ARCH_NAMES = {"encoder-decoder", "decoder-only"};
const std::vector<std::string> ATTENTION_NAMES = {"plain", "flash"};

struct ModelConfig {
    int vocab = 11;       // PAD 0, digits 1..9, START 10
    int max_len = 5;      // positions a sequence may take: seq_len (decoder-only: 2 seq_len), or more (--test-len,
                          // random positions)
    int d_model = 16;
    int n_heads = 2;
    int d_ff = 32;
    int enc_layers = 1;
    int dec_layers = 1;
    NormPlace norm_place = NormPlace::pre;
    Positions positions = Positions::sinusoidal;
    Activation activation = Activation::relu;
    bool embed_scale = true;  // multiply embeddings by sqrt(d_model), as in the paper
    bool no_bias = false;     // no bias in the feed-forward and the output projection (Llama's; attention has none)
    int bits = 0;             // inference only: a quantized model's weight width (--quantize, matrix.hpp); 0: float64
    bool tie_embeddings = false;  // the output projection is the embedding table, transposed (paper, 3.4)
    double dropout = 0.0;         // P: in training, on the embeddings and on every sublayer's output (paper: 0.1)
    double attn_dropout = 0.0;    // P: in training, on the attention weights (the tutorials' place)
    bool rms_norm = false;        // RMSNorm in place of every LayerNorm (Llama's norm)
    int kv_heads_asked = 0;       // --kv-heads: key-value heads dividing n_heads (grouped-query attention); 0: n_heads
    int key_value_heads() const { return kv_heads_asked > 0 ? kv_heads_asked : n_heads; }  // how many there are
    Arch arch = Arch::encoder_decoder;  // decoder-only: one causal stack of dec_layers blocks, no encoder
    Attention attention = Attention::plain;  // flash: training's attention in tiles (the same numbers, less memory)
};

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The questions asked of a choice, each answered here once, by a switch that names every value, so the compiler
// asks each question of a new value (-Wswitch). The blocks ask them where they are built; the program (workbench/)
// asks them too, and those only it asks are in workbench/settings.hpp: nothing else tests a choice.
// Whether the model has an encoder, whose output (the memory) each decoder block reads by cross-attention. Without
// one (decoder-only), the decoder reads the source itself: source, START and answer as one sequence.
inline bool has_encoder(Arch arch) {
    switch (arch) {
    case Arch::encoder_decoder: return true;
    case Arch::decoder_only: return false;
    }
    return true;  // not reached
}
// The positions one input of `length` tokens reads: a decoder-only model reads its source, START and the answer
// as one sequence, twice as long (every task's answer is as long as its input).
inline int positions_read(const ModelConfig& c, int length) {
    switch (c.arch) {
    case Arch::encoder_decoder: return length;
    case Arch::decoder_only: return 2 * length;
    }
    return length;  // not reached
}
// Whether self-attention turns each head's queries and keys by position, in pairs of columns (rotary).
inline bool turns_queries_and_keys(Positions positions) {
    switch (positions) {
    case Positions::rope: return true;
    case Positions::sinusoidal: case Positions::learned: case Positions::none: case Positions::random:
    case Positions::alibi: return false;
    }
    return false;  // not reached
}
// Whether self-attention lowers each score by the distance between query and key (ALiBi).
inline bool lowers_scores_by_distance(Positions positions) {
    switch (positions) {
    case Positions::alibi: return true;
    case Positions::sinusoidal: case Positions::learned: case Positions::none: case Positions::random:
    case Positions::rope: return false;
    }
    return false;  // not reached
}
// Whether training computes attention tile by tile (flash), never holding a (T, S) matrix; outside training, and
// for the maps, attention is plain.
inline bool attends_in_tiles(Attention attention) {
    switch (attention) {
    case Attention::flash: return true;
    case Attention::plain: return false;
    }
    return false;  // not reached
}
// Whether each input's position rows are drawn at random from a longer table (random), not 0, 1, 2, ...
inline bool draws_position_rows(Positions positions) {
    switch (positions) {
    case Positions::random: return true;
    case Positions::sinusoidal: case Positions::learned: case Positions::none: case Positions::rope:
    case Positions::alibi: return false;
    }
    return false;  // not reached
}

// ---------------------------------------------------------------------------------------------
// The tokens and the parameters.
constexpr int PAD = 0;  // the padding token; attention never looks at a PAD source position

// Every learned tensor of a block with its name ("encoder.0.self_attn.W_q"), in a fixed order: the
// optimizer, the checkpoint file and the tests all walk this one list.
using ParamList = std::vector<std::pair<std::string, Param*>>;

// ---------------------------------------------------------------------------------------------
// Linear  y = x W + b.   x (n, d_in), W (d_in, d_out), b (1, d_out), y (n, d_out).
struct Linear {
    Param W, b;  // b is empty (0 x 0) for a layer without bias, like W_q W_k W_v W_o
    Matrix x;    // saved input (n, d_in)

    Linear() = default;
    Linear(int d_in, int d_out, bool bias, Rng& rng) : W(d_in, d_out) {
        xavier_init(W.value, rng);
        if (bias) b = Param(1, d_out);  // biases start at zero
    }
    void list_parameters(const std::string& w_name, const std::string& b_name, ParamList& list) {
        list.push_back({w_name, &W});
        if (!b.value.empty()) list.push_back({b_name, &b});
    }
    Matrix forward(const Matrix& in) {
        if (W.quantized.empty()) x = in;  // saved for the backward (a quantized model never trains: inference only)
        Matrix y = W.quantized.empty() ? matmul_fast(in, W.value) : quantized_product_fast(in, W.quantized[0]);
        return b.value.empty() ? y : add_row(std::move(y), b.value);
    }
    Matrix backward(const Matrix& dy) {  // dy (n, d_out) -> dx (n, d_in)
        // forward: y = add_row(xW, b): b collects dy summed over rows; the gradient of xW is dy
        if (!b.value.empty()) add_row_backward(dy, b.grad);
        Matrix dx(x.rows, x.cols);
        matmul_backward_fast(dy, x, W.value, dx, W.grad);  // matmul_backward: dx += dy W^T, dW += x^T dy
        return dx;
    }
};

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Dropout (--dropout, --attn-dropout; off by default: a first reading may take dropout(x) as x), inverted as
// PyTorch's: in training each entry is zeroed with chance p and the rest are scaled by
// 1 / (1 - p), so every entry keeps its expected value and evaluation needs nothing. keep (n, d) saves each
// factor for backward; off (dropout_draws nullptr, as outside training, or p 0), keep is empty and x comes back.
inline Matrix dropout(Matrix x, double p, Rng* dropout_draws, Matrix& keep) {
    keep = dropout_draws && p > 0.0 ? Matrix(x.rows, x.cols) : Matrix();
    if (keep.empty()) return x;
    for (std::size_t i = 0; i < x.data.size(); i++) {
        keep.data[i] = dropout_draws->uniform() < p ? 0.0 : 1.0 / (1.0 - p);
        x.data[i] *= keep.data[i];
    }
    return x;
}
// exercise dropout: begin
// forward: y = x * keep, entry by entry, so dx = dy * keep: a dropped entry passes no gradient back. dx is
// made in dy's place (callers move dy in: nothing else reads it), so with nothing dropped nothing is copied.
// exercise dropout: end
inline Matrix dropout_backward(Matrix dy, const Matrix& keep) {
    // exercise dropout: begin (uses dy keep)
    if (!keep.empty())
        for (std::size_t i = 0; i < dy.data.size(); i++) dy.data[i] *= keep.data[i];
    return dy;  // now dx
    // exercise dropout: end
}

// ---------------------------------------------------------------------------------------------
// Embedding + positions:  X[t] = table[token_t] * multiplier + pos[row_t].   X (n_seq L, d_model) for n_seq sequences
// of L tokens. One table is shared by the source and the target, so backward takes the tokens it undoes.
// PE(pos, 2i) = sin(pos / 10000^(2i / d_model)),  PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model)).
// Each pair of columns is a clock of its own speed, so every position gets a distinct pattern.
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

// Why multiply by sqrt(d_model): position entries are sines and cosines up to 1 in size, while a Xavier
// table row has entries of spread sqrt(2 / (vocab + d_model)), about 0.27 here. The factor brings the
// token's part up to the position's size, so neither drowns the other when they are added.
struct Embedding {
    Param table;      // (vocab, d_model), one row per token id
    Param learned;    // (max_len, d_model), the learned position table: empty unless positions are learned
    Matrix fixed;     // (max_len, d_model), the sinusoidal table, never trained
    double multiplier = 1.0;  // sqrt(d_model), the embedding scale; 1 with --no-embed-scale
    Positions positions = Positions::sinusoidal;
    bool random_rows = false;  // --pos random: the rows a sequence reads are drawn (position_rows)

    Embedding() = default;
    Embedding(const ModelConfig& c, Rng& rng)
        : table(c.vocab, c.d_model), fixed(sinusoidal_table(c.max_len, c.d_model)),
          multiplier(c.embed_scale ? std::sqrt(double(c.d_model)) : 1.0), positions(c.positions),
          random_rows(draws_position_rows(c.positions)) {
        xavier_init(table.value, rng);
        if (position_table() == &learned.value) {  // learned positions: a table of their own, drawn here
            learned = Param(c.max_len, c.d_model);
            xavier_init(learned.value, rng);
        }
    }
    void list_parameters(const std::string& name, ParamList& list) {
        list.push_back({name + ".table", &table});
        if (!learned.value.empty()) list.push_back({name + ".positions", &learned});
    }
    const Matrix* position_table() const {  // (max_len, d_model), or nullptr
        switch (positions) {
        case Positions::sinusoidal: case Positions::random: return &fixed;  // random: rows of the fixed table
        case Positions::learned: return &learned.value;
        case Positions::none: return nullptr;  // the model sees a bag of tokens
        case Positions::rope: case Positions::alibi: return nullptr;  // in self-attention (MultiHeadAttention)
        }
        return nullptr;  // not reached
    }
    // tokens, rows: (n_seq L), n_seq sequences one after another; token t reads row rows[t] of the position
    // table pos (max_len, d_model). Returns X (n_seq L, d_model).
    Matrix forward(const std::vector<int>& tokens, const std::vector<int>& rows) const {
        Matrix X(int(tokens.size()), table.value.cols);
        const Matrix* pos = position_table();
        for (int t = 0; t < X.rows; t++)
            for (int c = 0; c < X.cols; c++)
                X.at(t, c) = table.value.at(tokens[t], c) * multiplier + (pos ? pos->at(rows[t], c) : 0.0);
        return X;
    }
    // forward: X[t] = table[tokens[t]] * multiplier + pos[rows[t]]
    // exercise embedding: begin
    // so       table.grad[tokens[t]] += multiplier * dX[t]   (a scatter-add: a token seen twice adds twice)
    //          learned.grad[rows[t]] += dX[t]           (only when positions are learned)
    // exercise embedding: end
    // Returns nothing: the input is token ids, which have no gradient.
    void backward(const std::vector<int>& tokens, const std::vector<int>& rows, const Matrix& dX) {
        // exercise embedding: begin (uses tokens rows dX)
        for (int t = 0; t < dX.rows; t++)
            for (int c = 0; c < dX.cols; c++) {
                table.grad.at(tokens[t], c) += multiplier * dX.at(t, c);
                if (!learned.value.empty()) learned.grad.at(rows[t], c) += dX.at(t, c);
            }
        // exercise embedding: end
    }
};

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Which row of the position table each of L tokens reads: 0, 1, ..., L-1. Or, with random positions (--pos random;
// Ruoss et al. 2023), L distinct rows drawn from all max_len and kept in order: the order survives, and
// training at short lengths visits every row, so a longer input at test time meets no unseen row.
inline std::vector<int> position_rows(int L, int max_len, bool random_rows, Rng& rng) {
    std::vector<int> rows;
    for (int row = 0; row < max_len && int(rows.size()) < L; row++)  // take each row with chance
        if (!random_rows || rng.below(max_len - row) < L - int(rows.size()))  // needed / left
            rows.push_back(row);
    return rows;
}
// Outside training a source's rows are drawn from a stream seeded by the source itself, so one input always reads
// the same rows: FNV-1a over its token ids.
inline uint64_t hash_of(const std::vector<int>& tokens) {
    uint64_t h = 14695981039346656037ull;
    for (int t : tokens) h = (h ^ uint64_t(t)) * 1099511628211ull;
    return h;
}

// ---------------------------------------------------------------------------------------------
// Scaled dot-product attention  O = softmax(masked(Q K^T / sqrt(d_k))) V, one head of one sequence.
//   Q (T, d_k), K (S, d_k), V (S, d_k), scores and weights P (T, S), O (T, d_k).
// mask (T, S): 1 = may attend, 0 = may not; an empty mask allows everything. attention() REPLACES
// each blocked score with -1e9 (the paper writes it as adding -inf; the effect is the same).
// Causal mask (T, T): position t sees positions 0..t and nothing after, so a decoder trained with
// teacher forcing cannot peek at the token it is asked to predict.
inline Matrix causal_mask(int T) {
    Matrix m(T, T);
    for (int i = 0; i < T; i++)
        for (int j = 0; j <= i; j++) m.at(i, j) = 1.0;
    return m;
}
// Padding mask (n_seq rows, S), each source's rows stacked: no query looks at a PAD of its own source.
inline Matrix padding_mask(int rows, const std::vector<std::vector<int>>& sources) {
    Matrix m(rows * int(sources.size()), int(sources[0].size()));
    for (int i = 0; i < m.rows; i++)
        for (int j = 0; j < m.cols; j++) m.at(i, j) = sources[i / rows][j] == PAD ? 0.0 : 1.0;
    return m;
}

// The model's masks said as a rule, for n_seq sequences of T queries and S keys: query i of a sequence may not
// see key j when the rule is causal and j > i, nor when j is one of its source's PADs (pad_sources[e], sequence
// e's source, whose keys come first: the encoder's, the memory's, or a decoder-only sequence's first S). A mask
// written out (given, (n_seq T, S): 1 = may attend), as the tests and decoding write them, is a Mask too. Plain
// attention writes one sequence's (T, S) out at a time (of_sequence); attention in tiles asks the rule as it goes.
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
    Matrix of_sequence(int e, int T, int S) const {  // sequence e's mask (T, S); empty when every key is seen
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
    Matrix O;                // attention in tiles only (its section, below): the output (T, d_k) and, a query row
    std::vector<double> L;   // each, L = m + log l (T); no P
};

// A blocked score becomes -1e9, a large negative number, never -inf or NaN: after the row max
// is subtracted, exp(-1e9) is exactly 0.0 in double, so the blocked position gets zero weight.
constexpr double MASKED = -1e9;

// Q, K and V are taken by value and moved into `saved`, which backward reads: a caller's temporaries (multi-head
// attention's slices) are kept there without being copied. Attention dropout (p, dropout_draws; in training only) drops
// weights after the softmax: O = dropout(P) V. `saved` keeps P as it was, so the maps show the weights before dropout.
// The scores (T, S) made weights P (T, S): ALiBi's penalty (alibi_slope above 0; its section, above), the mask, the
// softmax. Query i is at position first_query + i (decoding's attention shares this).
inline Matrix attention_weights(Matrix scores, const Matrix& mask, double alibi_slope, int first_query) {
    if (alibi_slope > 0.0)
        for (int i = 0; i < scores.rows; i++)
            for (int j = 0; j < scores.cols; j++) scores.at(i, j) -= alibi_slope * std::abs(first_query + i - j);
    if (!mask.empty())
        for (std::size_t i = 0; i < scores.data.size(); i++)
            if (mask.data[i] == 0.0) scores.data[i] = MASKED;
    return softmax_rows(scores);
}
inline Matrix attention(Matrix Q, Matrix K, Matrix V, const Matrix& mask, SavedAttention& saved, double p = 0.0,
                        Rng* dropout_draws = nullptr, double alibi_slope = 0.0, int first_query = 0) {
    const double inv_sqrt_dk = 1.0 / std::sqrt(double(Q.cols));
    Matrix scores = scale(matmul_bt_fast(Q, K), inv_sqrt_dk);  // (T, S) = Q K^T / sqrt(d_k); matmul_bt, faster
    Matrix P = attention_weights(std::move(scores), mask, alibi_slope, first_query);  // (T, S)
    saved = {std::move(Q), std::move(K), std::move(V), std::move(P), Matrix(), Matrix(), Matrix(), {}};
    if (dropout_draws && p > 0.0) saved.P_dropped = dropout(saved.P, p, dropout_draws, saved.keep);
    return matmul_fast(saved.keep.empty() ? saved.P : saved.P_dropped, saved.V);  // (T, d_k)
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
    // gradient; softmax_rows_backward gives it exactly 0 anyway, because its P is exactly 0.
    Matrix d_scores(c.P.rows, c.P.cols);
    softmax_rows_backward(dP, c.P, d_scores);
    // forward: scores = (Q K^T) / sqrt(d_k)
    Matrix d_QKt(c.P.rows, c.P.cols);
    scale_backward(d_scores, inv_sqrt_dk, d_QKt);
    // forward: Q K^T = matmul_bt(Q, K)
    matmul_bt_backward_fast(d_QKt, c.Q, c.K, dQ, dK);
    // exercise attention: end
}

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Rotary positions (--pos rope; Su et al. 2021, RoFormer), in self-attention only, as ALiBi: cross-attention relates a
// decoder position to an encoder position, two sequences whose distance means nothing, so it stays without positions,
// as in T5's relative biases. Nothing is added to the embeddings. Each head's query and key columns, taken in pairs
// (2i, 2i+1) as the RoFormer paper and Meta's Llama code pair them, are turned by the angle pos / 10000^(2i / d_k): the
// sinusoidal table's clocks, now turning Q and K. (Much PyTorch code pairs column i with i + d_k / 2 instead: the same
// model, with the columns of W_q and W_k permuted.) A query at position m and a key at n then meet as
// (R_m q) . (R_n k) = q . R_(n-m) k: the score sees only how far apart they are.
//   X (n_seq L, heads d_k): row r of it is at position first + r % L. sign -1 turns back.
inline double rotary_angle(int pos, int i, int d_k) {  // pair i's turn at position pos
    return double(pos) / maths::pow(10000.0, 2.0 * i / d_k);
}
inline Matrix rotate_pairs(Matrix X, int L, int first, int d_k, double sign = 1.0) {
    Matrix cosine(L, d_k / 2), sine(L, d_k / 2);  // each position's turn of each pair, made once for every row
    for (int t = 0; t < L; t++)
        for (int i = 0; i < d_k / 2; i++) {
            double angle = sign * rotary_angle(first + t, i, d_k);
            cosine.at(t, i) = maths::cos(angle), sine.at(t, i) = maths::sin(angle);
        }
    for (int r = 0; r < X.rows; r++)
        for (int col = 0; col + 1 < X.cols; col += 2) {
            int t = r % L, i = (col % d_k) / 2;  // the row's position, the pair's place in its head
            double a = X.at(r, col), b = X.at(r, col + 1), c = cosine.at(t, i), s = sine.at(t, i);
            X.at(r, col) = a * c - b * s;
            X.at(r, col + 1) = a * s + b * c;
        }
    return X;
}
// exercise rotary: begin
// forward: Y = R X, pair by pair, R a rotation   so   dX = R^T dY: the rotation by minus the angle, rotate_pairs
// with sign -1 (a rotation's transpose is the rotation back).
// exercise rotary: end

// ALiBi (--pos alibi; Press et al. 2022), in self-attention only: query i, at position first_query + i, and key j,
// at position j, have their score lowered by slope x |first_query + i - j|, a constant (no gradient), in
// attention_weights. The decoder's causal mask leaves only keys at or before the query, so there it is the paper's
// i - j; the encoder sees both sides, and the distance counts either way (symmetric, as BERT-style uses of ALiBi
// take it: the paper's models are causal).
// The slopes, one a head: for n heads a power of two, m_h = 2^(-8 h / n), h = 1 .. n.
// Otherwise the largest power of two below n, n0, gives its n0 slopes, and the rest are the odd-numbered slopes
// of 2 n0 heads, 2^(-4 h / n0) for h = 1, 3, 5, ..., the rule of the paper's code.
inline std::vector<double> alibi_slopes_of(int n) {
    int n0 = 1;
    while (n0 * 2 <= n) n0 *= 2;
    std::vector<double> m;
    for (int h = 1; h <= n0; h++) m.push_back(maths::pow(2.0, -8.0 * h / n0));
    for (int h = 1; int(m.size()) < n; h += 2) m.push_back(maths::pow(2.0, -4.0 * h / n0));
    return m;
}

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Attention in tiles (--attention flash; FlashAttention-2, Dao 2023), in training: the O attention() gives, within
// rounding, without ever holding a (T, S) matrix. attention() keeps P (T, S) for its backward, as large as T x S for
// every head of every sequence of every layer (at T = S = 1024, 8 sequences, 4 heads, 2 layers: 512 MB). Here the
// queries go a tile of FLASH_QUERIES rows at a time, and each walks the keys a tile of FLASH_KEYS at a time,
// keeping for each query row its running max m, running sum l and output so far, unnormalised (the online
// softmax). Only O and one number a row, L = m + log l, are saved; the backward makes each tile of P again
// from Q, K and L, since exp(score - L) = exp(score - m) / l is the weight itself.
// It lives here, a section a first reading skips: the math is attention()'s, and this is how to compute it in
// less memory; the forward and backward stand side by side, each line of the backward naming the forward's it
// undoes. Masks are asked of the rule tile by tile (Mask::sees); a tile every one of whose keys is hidden from
// every one of its queries is skipped (half the tiles, under the causal mask), unless one of its query rows sees
// no key at all: attention() gives such a row equal weights on every key (all its scores are MASKED), and so
// does this, by walking all of that row's tiles, its keys scored 0 rather than MASKED (the same equal weights,
// and L = log S keeps its digits, where MASKED + log S would round away the last 1e-7 of them).
//
// Tile sizes: a tile's working set is its queries' rows (FLASH_QUERIES x d_k), its keys' and values' rows
// (2 FLASH_KEYS x d_k), and its scores (FLASH_QUERIES x FLASH_KEYS), all doubles; it should fit the core's first
// cache (32 to 48 KiB today) with room for the running output: 32 x 32 at d_k = 16 is 4 + 8 + 8 KiB. Larger d_k:
// halve FLASH_QUERIES; a smaller cache: halve both. Smaller tiles also let the causal mask skip more (at T = 64,
// one tile in four); larger ones pay less a tile. Any sizes give the same numbers within rounding (tests.cpp runs
// tiles that do not divide T, and T smaller than a tile); only speed changes (docs/performance.md).
constexpr int FLASH_QUERIES = 32, FLASH_KEYS = 32;

// Attention dropout, in tiles: the backward must drop the very weights the forward dropped, without a (T, S)
// mask kept. So each weight's draw is numbered by where it sits, counter = first + i S + j, and taken straight
// from the stream: draw number `counter` of Rng(seed) (splitmix64 steps its state by a constant, so the
// counter-th state is seed + counter x that constant, reached without drawing the ones before it). The same entry
// gives the same draw in forward and backward, on any thread. Returns the entry's factor, 0 or 1 / (1 - p).
inline double dropout_factor_at(uint64_t seed, uint64_t counter, double p) {
    Rng stream(seed + counter * 0x9E3779B97F4A7C15ull);  // Rng's constant: next() is draw number `counter`
    return stream.uniform() < p ? 0.0 : 1.0 / (1.0 - p);
}
struct TileDropout {  // one head's: p 0 drops nothing
    double p = 0.0;
    uint64_t seed = 0, first = 0;  // the forward's draw from the model's stream, and this head's first counter
    int S = 0;                     // keys a row
    double factor(int i, int j) const { return p > 0.0 ? dropout_factor_at(seed, first + uint64_t(i) * S + j, p) : 1.0; }
};

// What a tile's queries see of its keys, by the rule: none, all, or some (then key by key).
enum class TileSight { none, all, some };
inline TileSight tile_sight(const Mask& mask, int e, int T, int i0, int i1, int j0, int j1) {
    if (!mask.given.empty()) {  // written out: ask each pair
        int seen = 0;
        for (int i = i0; i < i1; i++)
            for (int j = j0; j < j1; j++) seen += mask.sees(e, T, i, j);
        return seen == 0 ? TileSight::none : seen == (i1 - i0) * (j1 - j0) ? TileSight::all : TileSight::some;
    }
    int pads = 0;  // the rule: PAD keys hide a column of the tile, the causal rule its upper corner
    for (int j = j0; j < j1; j++) pads += mask.pad_key(e, j);
    if (pads == j1 - j0 || (mask.causal && j0 > i1 - 1)) return TileSight::none;
    return pads == 0 && (!mask.causal || j1 - 1 <= i0) ? TileSight::all : TileSight::some;
}
// For each of queries i0 .. i1-1, whether it sees no key at all (then its tiles are all walked: see above).
inline std::vector<char> rows_seeing_nothing(const Mask& mask, int e, int T, int S, int i0, int i1) {
    std::vector<char> blind(i1 - i0, 1);
    for (int i = i0; i < i1; i++)
        for (int j = 0; j < S && blind[i - i0]; j++) blind[i - i0] = !mask.sees(e, T, i, j);
    return blind;
}
inline bool any_of(const std::vector<char>& flags) { return std::find(flags.begin(), flags.end(), 1) != flags.end(); }

// out[c] = sum over p of a[p] B[p][j0 + c], c = 0 .. w-1, B (d_k, S) a transposed K or V: each sum in order of p. A
// whole tile's row (w = FLASH_KEYS, known when compiled) is summed in registers; a short last tile, in place.
inline void row_times(const double* a, const Matrix& B, int j0, int w, double* out) {
    if (w == FLASH_KEYS) {
        double sum[FLASH_KEYS] = {};
        for (int p = 0; p < B.rows; p++) {
            const double* b = &B.data[std::size_t(p) * B.cols + j0];
            for (int c = 0; c < FLASH_KEYS; c++) sum[c] += a[p] * b[c];
        }
        for (int c = 0; c < FLASH_KEYS; c++) out[c] = sum[c];
        return;
    }
    for (int c = 0; c < w; c++) out[c] = 0.0;
    for (int p = 0; p < B.rows; p++) {
        const double* b = &B.data[std::size_t(p) * B.cols + j0];
        for (int c = 0; c < w; c++) out[c] += a[p] * b[c];
    }
}

// out[p] += a[0] rows[0][p] + a[1] rows[1][p] + ... + a[n-1] rows[n-1][p], p = 0 .. d-1, rows `stride` apart: the
// same additions, in the same order, as n updates out[p] += a[t] rows[t][p] one after the other (so the same bits),
// but each stretch of 16 of out's columns is held in registers for all n of them, not stored and loaded n times.
inline void add_weighted_rows(double* out, const double* a, int n, const double* rows, int stride, int d) {
    constexpr int W = 16;
    int p0 = 0;
    for (; p0 + W <= d; p0 += W) {
        double sum[W];
        for (int k = 0; k < W; k++) sum[k] = out[p0 + k];
        for (int t = 0; t < n; t++) {
            const double* row = rows + std::size_t(t) * stride + p0;
            for (int k = 0; k < W; k++) sum[k] += a[t] * row[k];
        }
        for (int k = 0; k < W; k++) out[p0 + k] = sum[k];
    }
    for (; p0 < d; p0++) {  // the last d mod 16 columns
        double sum = out[p0];
        for (int t = 0; t < n; t++) sum += a[t] * rows[std::size_t(t) * stride + p0];
        out[p0] = sum;
    }
}

// The scores of queries i0 .. i1-1 and keys j0 .. j1-1, as attention() and attention_weights make them:
// Q K^T / sqrt(d_k) (each a sum over d_k in order), ALiBi's penalty, MASKED where the mask hides the key (0 in
// a row that sees nothing: blind[r]). Kt (d_k, S) is K transposed, so a row of scores is summed across its keys
// side by side (vector lanes). s: row r of the tile at s[r * FLASH_KEYS].
inline void tile_scores(const Matrix& Q, const Matrix& Kt, const Mask& mask, int e, double alibi_slope, int i0,
                        int i1, int j0, int j1, TileSight sight, const std::vector<char>& blind, double* s) {
    const int d_k = Q.cols, w = j1 - j0;
    const double inv_sqrt_dk = 1.0 / std::sqrt(double(d_k));
    for (int r = 0; r < i1 - i0; r++) {
        double* row = s + r * FLASH_KEYS;
        row_times(&Q.data[std::size_t(i0 + r) * d_k], Kt, j0, w, row);  // q_i . k_j
        for (int c = 0; c < w; c++) row[c] *= inv_sqrt_dk;
        if (alibi_slope > 0.0)
            for (int c = 0; c < w; c++) row[c] -= alibi_slope * std::abs(i0 + r - (j0 + c));
        if (sight != TileSight::all)
            for (int c = 0; c < w; c++)
                if (!mask.sees(e, Q.rows, i0 + r, j0 + c)) row[c] = blind[r] ? 0.0 : MASKED;
    }
}

// attention(), in tiles: Q (T, d_k), K, V (S, d_k) of sequence e (its mask: mask's rule for e) -> O (T, d_k).
// Saves Q, K, V, O and L; no P.
inline Matrix flash_attention(Matrix Q, Matrix K, Matrix V, const Mask& mask, int e, SavedAttention& saved,
                              const TileDropout& dropped, double alibi_slope = 0.0) {
    const int T = Q.rows, S = K.rows, d_k = Q.cols;
    const Matrix Kt = transpose(K);  // (d_k, S)
    Matrix O(T, d_k);                // row i: query i's output so far, unnormalised (divided by l at the end)
    std::vector<double> L(T), s(FLASH_QUERIES * FLASH_KEYS), m(FLASH_QUERIES), l(FLASH_QUERIES);
    for (int i0 = 0; i0 < T; i0 += FLASH_QUERIES) {  // a tile of queries: i0 .. i1-1
        const int i1 = std::min(T, i0 + FLASH_QUERIES);
        const std::vector<char> blind = rows_seeing_nothing(mask, e, T, S, i0, i1);
        const bool walk_all = any_of(blind);
        std::fill(m.begin(), m.end(), -HUGE_VAL), std::fill(l.begin(), l.end(), 0.0);  // no key seen yet
        for (int j0 = 0; j0 < S; j0 += FLASH_KEYS) {  // a tile of keys: j0 .. j1-1
            const int j1 = std::min(S, j0 + FLASH_KEYS);
            const TileSight sight = tile_sight(mask, e, T, i0, i1, j0, j1);
            if (sight == TileSight::none && !walk_all) continue;  // every weight here is exactly 0
            tile_scores(Q, Kt, mask, e, alibi_slope, i0, i1, j0, j1, sight, blind, s.data());
            for (int r = 0; r < i1 - i0; r++) {
                const double* row = &s[std::size_t(r) * FLASH_KEYS];
                double* o = &O.data[std::size_t(i0 + r) * d_k];
                double m_new = m[r];  // m_new = max(m, this tile's scores)
                for (int c = 0; c < j1 - j0; c++) m_new = std::max(m_new, row[c]);
                const double rescale = maths::exp(m[r] - m_new);  // what was summed against m, now against m_new
                l[r] *= rescale;                                 // (the first tile: exp(-inf) = 0 times 0)
                for (int p = 0; p < d_k; p++) o[p] *= rescale;
                double weight[FLASH_KEYS];
                for (int c = 0; c < j1 - j0; c++) weight[c] = maths::exp(row[c] - m_new);  // softmax's top, against m
                for (int c = 0; c < j1 - j0; c++) l[r] += weight[c];  // its bottom: l = sum of exp(score - m)
                for (int c = 0; c < j1 - j0; c++) weight[c] *= dropped.factor(i0 + r, j0 + c);  // O = dropout(P) V:
                add_weighted_rows(o, weight, j1 - j0, &V.data[std::size_t(j0) * d_k], d_k, d_k);   // o += w_c v_c
                m[r] = m_new;
            }
        }
        for (int r = 0; r < i1 - i0; r++) {
            for (int p = 0; p < d_k; p++) O.at(i0 + r, p) /= l[r];  // O = (sum of exp(score - m) v) / l
            L[i0 + r] = m[r] + maths::log(l[r]);                      // L = m + log l: log of softmax's bottom
        }
    }
    saved = {std::move(Q), std::move(K), std::move(V), Matrix(), Matrix(), Matrix(), O, std::move(L)};
    return O;
}
// Undo flash_attention, tile by tile, as FlashAttention-2 does: the keys' tiles outside (each tile's dK, dV sum
// over every query tile), the queries' inside. Adds into dQ (T, d_k), dK, dV (S, d_k).
//
// Why D = rowsum(dO * O) is rowsum(P * dP): attention_backward's softmax step needs, for each row, the row term
// sum_j P_ij dP_ij (softmax_rows_backward). A tile sees only its own keys, so it cannot sum a row; but
// dP_ij = dO_i . v_j, so sum_j P_ij dP_ij = dO_i . (sum_j P_ij v_j) = dO_i . O_i, one dot product a row, known
// before any tile is made. With dropout, P_ij meets v_j as P_ij keep_ij and dP_ij = keep_ij (dO_i . v_j): the same
// sum, so the same D.
inline void flash_attention_backward(const Matrix& dO, const SavedAttention& c, const Mask& mask, int e,
                                     const TileDropout& dropped, double alibi_slope, Matrix& dQ, Matrix& dK,
                                     Matrix& dV) {
    const int T = c.Q.rows, S = c.K.rows, d_k = c.Q.cols;
    const double inv_sqrt_dk = 1.0 / std::sqrt(double(d_k));
    const Matrix Kt = transpose(c.K), Vt = transpose(c.V);  // (d_k, S)
    std::vector<double> D(T, 0.0), s(FLASH_QUERIES * FLASH_KEYS);
    for (int i = 0; i < T; i++)  // D = rowsum(dO * O): each row's sum_j P_ij dP_ij (above)
        for (int p = 0; p < d_k; p++) D[i] += dO.at(i, p) * c.O.at(i, p);
    std::vector<std::vector<char>> blind;  // each query tile's rows that see nothing, as forward found them
    for (int i0 = 0; i0 < T; i0 += FLASH_QUERIES) blind.push_back(rows_seeing_nothing(mask, e, T, S, i0, std::min(T, i0 + FLASH_QUERIES)));
    for (int j0 = 0; j0 < S; j0 += FLASH_KEYS) {
        const int j1 = std::min(S, j0 + FLASH_KEYS), w = j1 - j0;
        for (int i0 = 0; i0 < T; i0 += FLASH_QUERIES) {
            const int i1 = std::min(T, i0 + FLASH_QUERIES);
            const std::vector<char>& blind_rows = blind[i0 / FLASH_QUERIES];
            const TileSight sight = tile_sight(mask, e, T, i0, i1, j0, j1);
            if (sight == TileSight::none && !any_of(blind_rows)) continue;  // skipped, as forward skipped it
            // forward: the scores, as tile_scores made them
            tile_scores(c.Q, Kt, mask, e, alibi_slope, i0, i1, j0, j1, sight, blind_rows, s.data());
            // dropped_P[r][col] = P_ij keep_ij, grad[r][col] = dS_ij / sqrt(d_k), for the tile's rows r = i - i0
            double dropped_P[FLASH_QUERIES][FLASH_KEYS], grad[FLASH_QUERIES][FLASH_KEYS];
            for (int r = 0; r < i1 - i0; r++) {
                const int i = i0 + r;
                double* row = &s[std::size_t(r) * FLASH_KEYS];
                for (int col = 0; col < w; col++) row[col] = maths::exp(row[col] - c.L[i]);  // forward: weight / l
                double dP[FLASH_KEYS];                                                      //  = exp(score - m) / l
                // forward: o += (weight keep) v, so dP_ij = keep_ij (dO_i . v_j)             (dP = dO V^T)
                row_times(&dO.data[std::size_t(i) * d_k], Vt, j0, w, dP);
                for (int col = 0; col < w; col++) {
                    const double P = row[col], keep = dropped.factor(i, j0 + col);
                    dropped_P[r][col] = P * keep;
                    // forward: weight = exp(score - m), summed into l: softmax_rows_backward, its row term D_i
                    //          dS = P * (dP - D)
                    const double dS = P * (keep * dP[col] - D[i]);
                    grad[r][col] = dS * inv_sqrt_dk;
                }
            }
            const int n = i1 - i0;
            for (int col = 0; col < w; col++) {
                double P_col[FLASH_QUERIES], grad_col[FLASH_QUERIES];  // column col of each: key j's
                for (int r = 0; r < n; r++) P_col[r] = dropped_P[r][col], grad_col[r] = grad[r][col];
                const std::size_t j = std::size_t(j0 + col) * d_k;
                // forward: o += (weight keep) v, so dV_j += P_ij keep_ij dO_i        (dV += dropout(P)^T dO)
                add_weighted_rows(&dV.data[j], P_col, n, &dO.data[std::size_t(i0) * d_k], d_k, d_k);
                // forward: score = (q_i . k_j) / sqrt(d_k), so dK_j += dS_ij q_i / sqrt(d_k)
                add_weighted_rows(&dK.data[j], grad_col, n, &c.Q.data[std::size_t(i0) * d_k], d_k, d_k);
            }
            for (int r = 0; r < n; r++)  // and dQ_i += dS_ij k_j / sqrt(d_k)
                add_weighted_rows(&dQ.data[std::size_t(i0 + r) * d_k], grad[r], w, &c.K.data[std::size_t(j0) * d_k],
                                  d_k, d_k);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Multi-head attention: project x_q to Q and x_kv to K and V, attend in n_heads slices of d_k columns, join
// the slices, project with W_o. x_q (n_seq T, d_model), x_kv (n_seq S, d_model), mask (n_seq T, S), output
// (n_seq T, d_model). Self-attention: x_q = x_kv (causal: and a causal mask); cross-attention: x_q from the
// decoder, x_kv the encoder's output (the "memory").
// Grouped-query attention (--kv-heads N; Ainslie et al. 2023): K and V have N heads, each shared by n_heads / N
// query heads (N = 1: multi-query attention), so W_k and W_v, and the decoding cache, are N / n_heads the size.
struct MultiHeadAttention {
    int n_heads = 1, kv_heads = 1, d_k = 1;  // kv_heads: K and V's heads, dividing n_heads
    double attn_dropout = 0.0;          // P of the attention weights' dropout, in training
    Rng* dropout_draws = nullptr;       // in training the model's dropout stream (Transformer::train), else nullptr
    bool rotary = false;                // --pos rope, self-attention: Q and K turned by position
    std::vector<double> alibi_slopes;   // --pos alibi, self-attention: head h's slope; else empty
    Linear W_q, W_k, W_v, W_o;          // W_q, W_o (d_model, d_model); W_k, W_v (d_model, kv_heads d_k); no bias
    std::vector<SavedAttention> saved;  // sequence e's head h at [e * n_heads + h]; its P is the map
    bool tiled = false;                 // --attention flash, in training (Transformer::train): in tiles, no P
    Mask seen;                          // in tiles: the mask forward was given, which backward asks again
    double tile_p = 0.0;                // in tiles: this forward's attention dropout (0: none; kept for backward,
    uint64_t tile_seed = 0;             // when dropout_draws is off again) and its one draw (TileDropout)

    MultiHeadAttention() = default;
    MultiHeadAttention(const ModelConfig& c, Rng& rng, bool self_attention = false)
        : n_heads(c.n_heads), kv_heads(c.key_value_heads()), d_k(c.d_model / c.n_heads), attn_dropout(c.attn_dropout),
          W_q(c.d_model, c.d_model, false, rng), W_k(c.d_model, kv_heads * d_k, false, rng),
          W_v(c.d_model, kv_heads * d_k, false, rng), W_o(c.d_model, c.d_model, false, rng) {
        rotary = self_attention && turns_queries_and_keys(c.positions);  // cross-attention: no positions
        if (self_attention && lowers_scores_by_distance(c.positions)) alibi_slopes = alibi_slopes_of(c.n_heads);
    }
    void list_parameters(const std::string& name, ParamList& list) {  // the four have no bias
        for (auto [linear, suffix] : {std::pair{&W_q, ".W_q"}, {&W_k, ".W_k"}, {&W_v, ".W_v"}, {&W_o, ".W_o"}})
            linear->list_parameters(name + suffix, "", list);
    }
    // With rotary positions, Q or K turned (sign -1: back), its sequences of L rows starting at position `first`.
    Matrix turned(Matrix X, int L, int first, double sign = 1.0) const {
        if (!rotary) return X;  // moved out, not copied (a ?: with X would copy it)
        return rotate_pairs(std::move(X), L, first, d_k, sign);
    }

    // The projections see every row of the batch at once; each sequence attends only to its own rows.
    Matrix forward(const Matrix& x_q, const Matrix& x_kv, const Mask& mask, int n_seq = 1) {
        return attend(turned(W_q.forward(x_q), x_q.rows / n_seq, 0), turned(W_k.forward(x_kv), x_kv.rows / n_seq, 0),
                      W_v.forward(x_kv), mask, n_seq);
    }
    // Q (n_seq T, d_model), K and V (n_seq S, kv_heads d_k): every sequence's heads, joined, projected by W_o.
    // (Decoding has its own, attend_kept, at the end of the file.)
    Matrix attend(const Matrix& Q, const Matrix& K, const Matrix& V, const Mask& mask, int n_seq) {
        Matrix joined(Q.rows, Q.cols);  // (n_seq T, d_model)
        int T = Q.rows / n_seq, S = K.rows / n_seq, group = n_heads / kv_heads;  // query heads a K, V head
        saved.assign(std::size_t(n_seq) * n_heads, SavedAttention{});
        const bool dropping = dropout_draws && attn_dropout > 0.0;
        if (tiled) {  // in tiles: the mask kept as a rule, and one draw for the dropout's counters
            seen = mask;
            tile_p = dropping ? attn_dropout : 0.0;
            tile_seed = dropping ? dropout_draws->next() : 0;
        }
        // Each sequence attends to its own rows, so sequences may run at once (--threads, engine/kernels.hpp); under
        // attention dropout in turn, since its masks are drawn in order. (Not heads: a group's heads share K and V.)
        const bool in_turn = dropping && !tiled;
        parallel_each(n_seq, in_turn ? 0.0 : attention_work(n_seq * n_heads, T, S, d_k), [&](int e) {
            Matrix mask_e = tiled ? Matrix() : mask.of_sequence(e, T, S);  // (T, S); in tiles, none
            for (int h = 0; h < n_heads; h++) {
                int col = h * d_k, kv_col = h / group * d_k;  // head h owns columns col ..; its K and V, kv_col ..
                const double slope = alibi_slopes.empty() ? 0.0 : alibi_slopes[h];
                Matrix q = take_block(Q, e * T, T, col, d_k), k = take_block(K, e * S, S, kv_col, d_k),
                       v = take_block(V, e * S, S, kv_col, d_k);
                Matrix O_h = tiled ? flash_attention(std::move(q), std::move(k), std::move(v), mask, e,
                                                     saved[e * n_heads + h], tile_dropout(e, h, T, S), slope)
                                   : attention(std::move(q), std::move(k), std::move(v), mask_e, saved[e * n_heads + h],
                                               attn_dropout, dropout_draws, slope);
                add_into_block(O_h, e * T, col, joined);  // (T, d_k)
            }
        });
        return W_o.forward(joined);
    }
    // In tiles, head h of sequence e's dropout: its weights' draws numbered from ((e n_heads + h) T) S on.
    TileDropout tile_dropout(int e, int h, int T, int S) const {
        return {tile_p, tile_seed, (uint64_t(e) * n_heads + h) * uint64_t(T) * uint64_t(S), S};
    }
    // Undoes forward (positions from 0) and the attend it calls; adds into d_xq (n_seq T, d_model) and d_xkv
    // (n_seq S, d_model), caller-zeroed.
    void backward(const Matrix& d_out, Matrix& d_xq, Matrix& d_xkv) {
        Matrix d_joined = W_o.backward(d_out);  // attend: return W_o.forward(joined)
        int n_seq = int(saved.size()) / n_heads, T = d_joined.rows / n_seq, S = saved[0].K.rows;
        int group = n_heads / kv_heads;
        const bool in_tiles = !saved[0].L.empty();  // the forward ran in tiles: it saved L, not P
        Matrix dQ(n_seq * T, n_heads * d_k), dK(n_seq * S, kv_heads * d_k), dV(n_seq * S, kv_heads * d_k);
        // exercise heads: begin (uses d_xq d_xkv group in_tiles)
        parallel_each(n_seq, attention_work(n_seq * n_heads, T, S, d_k), [&](int e) {  // at once: it draws nothing
            for (int h = 0; h < n_heads; h++) {
                int col = h * d_k, kv_col = h / group * d_k;
                Matrix dQ_h(T, d_k), dK_h(S, d_k), dV_h(S, d_k);
                // attend: O_h = attention(...) (or flash_attention); add_into_block(O_h, e * T, col, joined)
                if (in_tiles)
                    flash_attention_backward(take_block(d_joined, e * T, T, col, d_k), saved[e * n_heads + h], seen, e,
                                             tile_dropout(e, h, T, S), alibi_slopes.empty() ? 0.0 : alibi_slopes[h],
                                             dQ_h, dK_h, dV_h);
                else
                    attention_backward(take_block(d_joined, e * T, T, col, d_k), saved[e * n_heads + h], dQ_h, dK_h,
                                       dV_h);
                // attend: take_block(Q, e * T, T, col, d_k), and the same for K and V at kv_col. The group's
                // heads share one K and V, so each of them adds its share (+=): the chain rule's sum over uses.
                add_into_block(dQ_h, e * T, col, dQ);
                add_into_block(dK_h, e * S, kv_col, dK);
                add_into_block(dV_h, e * S, kv_col, dV);
            }
        });
        // exercise heads: end
        // forward: Q and K turned by position (rotary): turned back
        // exercise rotary: begin
        dQ = turned(std::move(dQ), T, 0, -1.0);
        dK = turned(std::move(dK), S, 0, -1.0);
        // exercise rotary: end
        // forward: Q = W_q.forward(x_q), K = W_k.forward(x_kv), V = W_v.forward(x_kv)
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
// LayerNorm over each row:  y = gamma * (x - mean) / sqrt(var + eps) + beta.   x, y (n, d_model).
// var is the biased variance (divide by d_model), as in PyTorch's LayerNorm.
struct LayerNorm {
    static constexpr double eps = 1e-5;
    static constexpr const char *name = "LayerNorm", *short_name = "LN";  // as the pictures and counts say it
    Param gamma, beta;          // (1, d_model), start at 1 and 0: the identity after normalising
    Matrix x_hat;               // saved (n, d_model): (x - mean) / sqrt(var + eps)
    std::vector<double> rstd;   // saved (n): 1 / sqrt(var + eps) of each row

    LayerNorm() = default;
    explicit LayerNorm(int d_model) : gamma(1, d_model, 1.0), beta(1, d_model, 0.0) {}
    void list_parameters(const std::string& name, ParamList& list) {
        list.push_back({name + ".gamma", &gamma});
        list.push_back({name + ".beta", &beta});
    }

    Matrix forward(const Matrix& x) {
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
    Matrix backward(const Matrix& dy) {
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

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// RMSNorm (--rmsnorm; Zhang & Sennrich 2019, Llama's norm), today's block in LayerNorm's place.
//   y = gamma * x / sqrt(mean(x^2) + eps).   x, y (n, d_model). No mean is taken out and there is no beta: only
// the row's scale is normalised.
struct RMSNorm {
    static constexpr double eps = 1e-5;
    static constexpr const char *name = "RMSNorm", *short_name = "RMS";
    Param gamma;                // (1, d_model), starts at 1
    Matrix x_hat;               // saved (n, d_model): x / sqrt(mean(x^2) + eps)
    std::vector<double> rstd;   // saved (n): 1 / sqrt(mean(x^2) + eps) of each row

    RMSNorm() = default;
    explicit RMSNorm(int d_model) : gamma(1, d_model, 1.0) {}
    void list_parameters(const std::string& name, ParamList& list) { list.push_back({name + ".gamma", &gamma}); }

    Matrix forward(const Matrix& x) {
        int n = x.rows, d = x.cols;
        x_hat = Matrix(n, d);
        rstd.assign(n, 0.0);
        Matrix y(n, d);
        for (int i = 0; i < n; i++) {
            double mean_square = 0.0;
            for (int j = 0; j < d; j++) mean_square += x.at(i, j) * x.at(i, j) / d;
            rstd[i] = 1.0 / std::sqrt(mean_square + eps);
            for (int j = 0; j < d; j++) {
                x_hat.at(i, j) = x.at(i, j) * rstd[i];
                y.at(i, j) = gamma.value.at(0, j) * x_hat.at(i, j);
            }
        }
        return y;
    }
    // exercise rmsnorm: begin
    // forward: y = gamma * x_hat           so   d_gamma += dy * x_hat,  d_x_hat = dy * gamma
    // forward: x_hat = x * rstd: LayerNorm's backward with its mean fixed at 0, so term 2 is gone and term 3
    //          stays, through the mean of squares:   dx = rstd * (d_x_hat - x_hat * mean(d_x_hat * x_hat))
    // exercise rmsnorm: end
    Matrix backward(const Matrix& dy) {
        // exercise rmsnorm: begin (uses dy)
        int n = dy.rows, d = dy.cols;
        Matrix dx(n, d), d_x_hat(n, d);
        for (int i = 0; i < n; i++) {
            double mean_d_xhat = 0.0;
            for (int j = 0; j < d; j++) {
                gamma.grad.at(0, j) += dy.at(i, j) * x_hat.at(i, j);
                d_x_hat.at(i, j) = dy.at(i, j) * gamma.value.at(0, j);
                mean_d_xhat += d_x_hat.at(i, j) * x_hat.at(i, j) / d;
            }
            for (int j = 0; j < d; j++) dx.at(i, j) += rstd[i] * (d_x_hat.at(i, j) - x_hat.at(i, j) * mean_d_xhat);
        }
        return dx;
        // exercise rmsnorm: end
    }
};

// ---------------------------------------------------------------------------------------------
// Position-wise feed-forward  y = act(x W_1 + b_1) W_2 + b_2, the same two layers at every row.
//   x, y (n, d_model), hidden (n, d_ff). act works entry by entry: ReLU, or GELU for the exercise.
struct Pointwise {  // an activation, entry by entry, and its backward (matrix.hpp)
    std::string name;  // as --act spells it
    Matrix (*forward)(const Matrix& X);
    void (*backward)(const Matrix& dY, const Matrix& X, Matrix& dX);
};
struct FeedForward {
    Linear W_1, W_2;        // (d_model -> d_ff), (d_ff -> d_model), each with its bias b_1, b_2 (none: --no-bias)
    Pointwise act{"relu", relu, relu_backward};
    Matrix hidden;          // saved (n, d_ff): x W_1 + b_1, the activation's input

    FeedForward() = default;
    FeedForward(int d_model, int d_ff, Pointwise act, bool bias, Rng& rng)
        : W_1(d_model, d_ff, bias, rng), W_2(d_ff, d_model, bias, rng), act(act) {}
    void list_parameters(const std::string& name, ParamList& list) {
        W_1.list_parameters(name + ".W_1", name + ".b_1", list);
        W_2.list_parameters(name + ".W_2", name + ".b_2", list);
    }
    Matrix forward(const Matrix& x) {
        hidden = W_1.forward(x);
        return W_2.forward(act.forward(hidden));
    }
    Matrix backward(const Matrix& dy) {
        Matrix d_act = W_2.backward(dy);  // forward: W_2.forward(act(hidden))
        Matrix d_hidden(hidden.rows, hidden.cols);
        act.backward(d_act, hidden, d_hidden);  // forward: act(hidden)
        return W_1.backward(d_hidden);          // forward: hidden = W_1.forward(x)
    }
};

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// SwiGLU (--act swiglu; Shazeer 2020, Llama's feed-forward), today's block in FeedForward's place.
//   y = (silu(x W_1 + b_1) * (x W_3 + b_3)) W_2 + b_2, a gate times its partner, entry by entry.
//   x, y (n, d_model), hidden and partner (n, d_h). Three matrices where there were two, so the hidden width d_h is
// 2 d_ff / 3 (Llama's rule): the parameters stay about as many as ReLU's at the same d_ff, and the two compare fairly.
struct SwiGLU {
    Linear W_1, W_2, W_3;   // (d_model -> d_h), (d_h -> d_model), (d_model -> d_h): the gate, out, the partner
    Matrix hidden;          // saved (n, d_h): x W_1 + b_1, the gate's input
    Matrix partner;         // saved (n, d_h): x W_3 + b_3

    static int width(int d_ff) { return std::max(1, (2 * d_ff + 1) / 3); }  // d_h: 2 d_ff / 3, rounded
    SwiGLU() = default;
    SwiGLU(int d_model, int d_ff, bool bias, Rng& rng)
        : W_1(d_model, width(d_ff), bias, rng), W_2(width(d_ff), d_model, bias, rng),
          W_3(d_model, width(d_ff), bias, rng) {}
    void list_parameters(const std::string& name, ParamList& list) {
        W_1.list_parameters(name + ".W_1", name + ".b_1", list);
        W_2.list_parameters(name + ".W_2", name + ".b_2", list);
        W_3.list_parameters(name + ".W_3", name + ".b_3", list);
    }
    Matrix forward(const Matrix& x) {
        hidden = W_1.forward(x);
        partner = W_3.forward(x);
        return W_2.forward(multiply(silu(hidden), partner));
    }
    Matrix backward(const Matrix& dy) {
        // exercise swiglu: begin (uses dy)
        Matrix d_act = W_2.backward(dy);  // forward: W_2.forward(act), act = multiply(gate, partner)
        const int n = hidden.rows, d_h = hidden.cols;
        Matrix d_gate(n, d_h), d_partner(n, d_h), d_hidden(n, d_h);
        multiply_backward(d_act, silu(hidden), partner, d_gate, d_partner);
        silu_backward(d_gate, hidden, d_hidden);  // forward: gate = silu(hidden)
        Matrix dx = W_1.backward(d_hidden);       // forward: hidden = W_1.forward(x)
        accumulate(dx, W_3.backward(d_partner));  // forward: partner = W_3.forward(x): x's second use adds in
        return dx;
        // exercise swiglu: end
    }
};

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Which norm and which feed-forward a model uses, chosen once, when it is built. A first reading may take Norm as
// LayerNorm and FeedForwardBlock as FeedForward, as the default builds them. OneOf<A, B> holds an A or a B (a
// std::variant), and forward, backward and list_parameters reach the one it holds (std::visit calls the lambda with
// it): the blocks read as if there were one kind, and a new kind is one more name in the list.
template <class... Kinds>
struct OneOf {
    std::variant<Kinds...> block;
    Matrix forward(const Matrix& x) { return std::visit([&](auto& b) { return b.forward(x); }, block); }
    Matrix backward(const Matrix& dy) { return std::visit([&](auto& b) { return b.backward(dy); }, block); }
    void list_parameters(const std::string& name, ParamList& list) {
        std::visit([&](auto& b) { b.list_parameters(name, list); }, block);
    }
    // What the block held calls itself (a norm: "LayerNorm", "LN"), for --params and --trace-shapes.
    std::string kind() const { return std::visit([](const auto& b) { return std::string(b.name); }, block); }
    std::string short_kind() const {
        return std::visit([](const auto& b) { return std::string(b.short_name); }, block);
    }
};
using Norm = OneOf<LayerNorm, RMSNorm>;
inline Norm norm_of(const ModelConfig& c) {  // the choice of norm, made here once (--rmsnorm)
    if (c.rms_norm) return {RMSNorm(c.d_model)};
    return {LayerNorm(c.d_model)};
}
using FeedForwardBlock = OneOf<FeedForward, SwiGLU>;
inline FeedForwardBlock feed_forward_of(const ModelConfig& c, Rng& rng) {  // the choice of activation, made here once
    const std::string& name = ACTIVATION_NAMES[int(c.activation)];
    switch (c.activation) {
    case Activation::relu: return {FeedForward(c.d_model, c.d_ff, {name, relu, relu_backward}, !c.no_bias, rng)};
    case Activation::gelu: return {FeedForward(c.d_model, c.d_ff, {name, gelu, gelu_backward}, !c.no_bias, rng)};
    case Activation::swiglu: return {SwiGLU(c.d_model, c.d_ff, !c.no_bias, rng)};
    }
    return {};  // not reached
}

// ---------------------------------------------------------------------------------------------
// Sublayer: the residual connection and its norm (Norm: LayerNorm), wrapped around attention or feed-forward.
//   pre-norm (default): out = x + f(LN(x))     post-norm (the 2017 paper's blocks): out = LN(x + f(x))
// With dropout (in training), f's output is dropped before the sum, the paper's residual dropout:
//   x + dropout(f(LN(x)))   or   LN(x + dropout(f(x)))
// (Both keep the final LayerNorm before the output projection; the paper's post-norm model has none.)
// The one place the residual rule lives: forward(x, f) runs the inner function f, backward(d_out,
// f_backward) its backward (d of f's output in, d of f's input out): a block's backward is its forward reversed.
struct Sublayer {
    Norm norm;
    NormPlace where = NormPlace::pre;
    double p = 0.0;                // dropout on f's output, in training
    Rng* dropout_draws = nullptr;  // in training the model's dropout stream (Transformer::train), else nullptr
    Matrix keep;                   // saved: the dropout's factors, empty when nothing was dropped

    Sublayer() = default;
    explicit Sublayer(const ModelConfig& c) : norm(norm_of(c)), where(c.norm_place), p(c.dropout) {}

    template <typename F>  // f: Matrix(const Matrix& f_in)
    Matrix forward(const Matrix& x, F f) {
        switch (where) {
        case NormPlace::pre: return add(x, dropout(f(norm.forward(x)), p, dropout_draws, keep));   // x + f(LN(x))
        case NormPlace::post: return norm.forward(add(x, dropout(f(x), p, dropout_draws, keep)));  // LN(x + f(x))
        }
        return Matrix();  // not reached
    }
    template <typename B>  // f_backward: Matrix(const Matrix& d_f_out), returns d_f_in
    Matrix backward(const Matrix& d_out, B f_backward) {
        Matrix d_sum;
        switch (where) {  // forward: out = sum (pre-norm) or LN(sum) (post-norm)
        case NormPlace::pre: d_sum = d_out; break;
        case NormPlace::post: d_sum = norm.backward(d_out); break;
        }
        // forward: sum = add(x, dropped): both terms get d_sum
        Matrix dx(d_sum.rows, d_sum.cols), d_dropped(d_sum.rows, d_sum.cols);
        add_backward(d_sum, dx, d_dropped);
        // forward: dropped = dropout(f_out), f_out itself when nothing is dropped
        Matrix d_f_out = dropout_backward(std::move(d_dropped), keep);
        Matrix d_f_in = f_backward(d_f_out);  // forward: f_out = f(f_in)
        switch (where) {  // forward: f_in = LN(x) (pre-norm) or x (post-norm): the second path to x
        case NormPlace::pre: accumulate(dx, norm.backward(d_f_in)); break;
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
    FeedForwardBlock ffn;

    EncoderBlock() = default;
    EncoderBlock(const ModelConfig& c, Rng& rng)
        : attn_sub(c), ffn_sub(c), self_attn(c, rng, true), ffn(feed_forward_of(c, rng)) {}
    void list_parameters(const std::string& name, ParamList& list) {
        attn_sub.norm.list_parameters(name + ".norm1", list);
        self_attn.list_parameters(name + ".self_attn", list);
        ffn_sub.norm.list_parameters(name + ".norm2", list);
        ffn.list_parameters(name + ".ffn", list);
    }

    void set_dropout_draws(Rng* stream) {  // Transformer::train
        attn_sub.dropout_draws = ffn_sub.dropout_draws = self_attn.dropout_draws = stream;
    }

    Matrix forward(const Matrix& x, const Mask& src_mask, int n_seq = 1) {  // n_seq sequences stacked
        Matrix x1 = attn_sub.forward(x, [&](const Matrix& a) { return self_attn.forward(a, a, src_mask, n_seq); });
        return ffn_sub.forward(x1, [&](const Matrix& a) { return ffn.forward(a); });
    }
    Matrix backward(const Matrix& d_out) {
        // forward: out = ffn_sub.forward(x1, ffn)
        Matrix dx1 = ffn_sub.backward(d_out, [&](const Matrix& d) { return ffn.backward(d); });
        // forward: x1 = attn_sub.forward(x, self-attention)
        return attn_sub.backward(dx1, [&](const Matrix& d) { return self_attn.backward_self(d); });
    }
};

// ---------------------------------------------------------------------------------------------
// Decoder block: causal self-attention, cross-attention to the encoder memory, feed-forward.
//   y, out (n_seq T, d_model), memory (n_seq S, d_model)
// A decoder-only model's block (GPT's) is this block without cross-attention: `cross` false.
struct DecoderBlock {
    bool cross = true;  // false in a decoder-only model: no memory to attend to
    Sublayer self_sub, cross_sub, ffn_sub;
    MultiHeadAttention self_attn, cross_attn;
    FeedForwardBlock ffn;

    DecoderBlock() = default;
    DecoderBlock(const ModelConfig& c, Rng& rng)
        : cross(has_encoder(c.arch)), self_sub(c), cross_sub(c), ffn_sub(c), self_attn(c, rng, true) {
        if (cross) cross_attn = MultiHeadAttention(c, rng);
        ffn = feed_forward_of(c, rng);
    }
    void list_parameters(const std::string& name, ParamList& list) {  // decoder-only: norm1, self_attn, norm2, ffn
        self_sub.norm.list_parameters(name + ".norm1", list);
        self_attn.list_parameters(name + ".self_attn", list);
        if (cross) cross_sub.norm.list_parameters(name + ".norm2", list);
        if (cross) cross_attn.list_parameters(name + ".cross_attn", list);
        ffn_sub.norm.list_parameters(name + (cross ? ".norm3" : ".norm2"), list);
        ffn.list_parameters(name + ".ffn", list);
    }

    void set_dropout_draws(Rng* stream) {  // Transformer::train
        self_sub.dropout_draws = cross_sub.dropout_draws = ffn_sub.dropout_draws = stream;
        self_attn.dropout_draws = cross_attn.dropout_draws = stream;
    }

    // (Decoding runs this block on the newest rows alone, with its cache: decoder_block_next, at the end of the file.)
    Matrix forward(const Matrix& y, const Matrix& memory, const Mask& causal, const Mask& memory_mask,
                   int n_seq = 1) {
        Matrix y1 = self_sub.forward(y, [&](const Matrix& a) { return self_attn.forward(a, a, causal, n_seq); });
        if (!cross) return ffn_sub.forward(y1, [&](const Matrix& a) { return ffn.forward(a); });  // decoder-only
        Matrix y2 = cross_sub.forward(y1, [&](const Matrix& a) {
            return cross_attn.forward(a, memory, memory_mask, n_seq);
        });
        return ffn_sub.forward(y2, [&](const Matrix& a) { return ffn.forward(a); });
    }
    // Returns dy and adds the memory's gradient into d_memory (n_seq S, d_model).
    Matrix backward(const Matrix& d_out, Matrix& d_memory) {
        // exercise decoder-block: begin (uses d_out d_memory)
        // forward: out = ffn_sub.forward(y2, ffn)   (decoder-only: y1 in y2's place)
        Matrix dy2 = ffn_sub.backward(d_out, [&](const Matrix& d) { return ffn.backward(d); });
        // forward: y2 = cross_sub.forward(y1, cross-attention to the memory)
        Matrix dy1 = !cross ? dy2 : cross_sub.backward(dy2, [&](const Matrix& d) {
            Matrix d_queries(d.rows, d.cols);
            cross_attn.backward(d, d_queries, d_memory);  // the keys' and values' share goes to the memory
            return d_queries;
        });
        // forward: y1 = self_sub.forward(y, causal self-attention)
        return self_sub.backward(dy1, [&](const Matrix& d) { return self_attn.backward_self(d); });
        // exercise decoder-block: end
    }
};

// ---------------------------------------------------------------------------------------------
// The Transformer: embed the source, run the encoder blocks to get the memory; embed the decoder
// input, run the decoder blocks against the memory; final LayerNorm; project to vocab logits.
//   sources n_seq x (S), targets_in n_seq x (T), memory (n_seq S, d_model), logits (n_seq T, vocab)
struct Transformer {
    ModelConfig config;
    Embedding embed;  // shared by source and target
    std::vector<EncoderBlock> encoder;
    std::vector<DecoderBlock> decoder;
    Norm final_norm;
    Linear out;       // (d_model -> vocab), with bias (none: --no-bias); with tie_embeddings its W is empty: the
                      // table's transpose

    using Batch = std::vector<std::vector<int>>;  // n_seq sequences of tokens, all of one length
    Batch sources, targets_in;  // n_seq x (S), n_seq x (T): saved by encode and next_token_logits for backward
    Batch source_rows, target_rows;  // n_seq x (S), n_seq x (T): the position row each token read
    Matrix source_keep, target_keep;  // saved: dropout's factors on the embeddings (n_seq S or T, d_model)
    Batch whole_rows;                 // decoder-only: n_seq x (S + T), the rows of source and answer as one
    Matrix whole_keep;                // decoder-only: (n_seq (S + T), d_model)
    // Training mode (PyTorch's model.train(); gradient_of turns it on for its forward pass) reads two streams:
    // dropout's masks, in the order forward runs (train() hands the blocks the stream; nullptr: off), and random
    // positions' rows, each source's drawn anew. Outside it, a source's rows come from the source: no stream moves.
    Rng position_draws{1};
    Rng dropout_draws{1};
    bool training = false;
    void train(bool on) {
        training = on;
        const bool tiled = on && attends_in_tiles(config.attention);  // --attention flash: in training only
        for (EncoderBlock& block : encoder) block.set_dropout_draws(on ? &dropout_draws : nullptr);
        for (DecoderBlock& block : decoder) block.set_dropout_draws(on ? &dropout_draws : nullptr);
        for (EncoderBlock& block : encoder) block.self_attn.tiled = tiled;
        for (DecoderBlock& block : decoder) block.self_attn.tiled = block.cross_attn.tiled = tiled;
    }
    Rng* embedding_dropout_draws() { return training ? &dropout_draws : nullptr; }

    Transformer() = default;
    Transformer(const ModelConfig& c, uint64_t seed) : config(c), final_norm(norm_of(c)) {
        Rng rng(seed);
        embed = Embedding(c, rng);
        for (int i = 0; i < c.enc_layers; i++) encoder.emplace_back(c, rng);  // decoder-only: enc_layers is 0
        for (int i = 0; i < c.dec_layers; i++) decoder.emplace_back(c, rng);
        out = Linear(c.d_model, c.vocab, !c.no_bias, rng);  // (a bias draws nothing: the weights stay the same)
        if (c.tie_embeddings) out.W = Param();  // drawn and dropped, so the weights drawn after it stay the same
        position_draws = Rng(rng.next());
        dropout_draws = Rng(rng.next());
    }

    Batch rows_for(const Batch& srcs, int L);  // each source's L position rows: 0 .. L-1 (random: section below)
    Matrix encode(const Batch& srcs) {  // -> memory (n_seq S, d_model)
        sources = srcs;
        int S = int(srcs[0].size());
        source_rows = rows_for(srcs, S);
        Mask src_mask(false, srcs);  // no query sees a PAD of its source (as padding_mask writes it out)
        Matrix x = embed.forward(concatenated(srcs), concatenated(source_rows));
        x = dropout(std::move(x), config.dropout, embedding_dropout_draws(), source_keep);
        for (EncoderBlock& block : encoder) x = block.forward(x, src_mask, int(srcs.size()));
        return x;
    }
    int target_row(const std::vector<int>& rows_of_source, int t) const;  // decoder token t's row: t (random: below)
    // The logits for the next token at every position of the targets (teacher forcing). The sources' PADs
    // are hidden from cross-attention.
    Matrix next_token_logits(const Batch& tgts_in, const Matrix& memory, const Batch& srcs) {
        targets_in = tgts_in;
        int T = int(tgts_in[0].size()), n_seq = int(tgts_in.size());
        target_rows.assign(n_seq, {});
        for (int e = 0; e < n_seq; e++)
            for (int t = 0; t < T; t++) target_rows[e].push_back(target_row(source_rows[e], t));
        Mask memory_mask(false, srcs);  // no PAD of the source (padding_mask, written out: (n_seq T, S))
        Mask causal(true, {});          // nothing after the query (causal_mask, written out: (T, T) a sequence)
        Matrix y = embed.forward(concatenated(tgts_in), concatenated(target_rows));
        y = dropout(std::move(y), config.dropout, embedding_dropout_draws(), target_keep);
        for (DecoderBlock& block : decoder) y = block.forward(y, memory, causal, memory_mask, n_seq);
        return output(final_norm.forward(y));  // -> logits (n_seq T, vocab)
    }
    // The output projection: logits = h W + b, h (n_seq T, d_model) -> (n_seq T, vocab), and back: dh.
    Matrix output(const Matrix& h) { return config.tie_embeddings ? tied_output(h) : out.forward(h); }
    Matrix output_backward(const Matrix& d_logits) {
        return config.tie_embeddings ? tied_output_backward(d_logits) : out.backward(d_logits);
    }
    Matrix tied_output(const Matrix& h);  // tied embeddings (the paper, 3.4): their section, below
    Matrix tied_output_backward(const Matrix& d_logits);
    Matrix read_whole(const Batch& srcs, const Batch& tgts_in);  // decoder-only: its section, below
    void read_whole_backward(const Matrix& d_answer);
    Matrix forward(const Batch& srcs, const Batch& tgts_in) {
        switch (config.arch) {
        case Arch::encoder_decoder: return next_token_logits(tgts_in, encode(srcs), srcs);
        case Arch::decoder_only: return read_whole(srcs, tgts_in);
        }
        return Matrix();  // not reached
    }
    static std::vector<int> concatenated(const Batch& seqs) {  // the tokens of every sequence, one after another
        std::vector<int> all;
        for (const std::vector<int>& s : seqs) all.insert(all.end(), s.begin(), s.end());
        return all;
    }

    // Undo forward(), last step first. Adds into every parameter's grad.
    void backward(const Matrix& d_logits) {
        // forward: logits = output(final_norm.forward(y))
        Matrix dy = final_norm.backward(output_backward(d_logits));
        switch (config.arch) {
        case Arch::encoder_decoder: break;
        case Arch::decoder_only: read_whole_backward(dy); return;  // one causal stack, no memory
        }
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
        // The table is shared, so sequence by sequence, decoder side first: the order in which one sequence
        // at a time would add.
        for (int e = 0; e < n_seq; e++) {
            embed.backward(targets_in[e], target_rows[e], take_block(dy, e * T, T, 0, config.d_model));
            embed.backward(sources[e], source_rows[e], take_block(dx, e * S, S, 0, config.d_model));
        }
    }

    // Every learned tensor with its name, in a fixed order (the checkpoint's order too).
    ParamList parameters() {
        ParamList list;
        embed.list_parameters("embed", list);
        for (size_t i = 0; i < encoder.size(); i++) encoder[i].list_parameters("encoder." + std::to_string(i), list);
        for (size_t i = 0; i < decoder.size(); i++) decoder[i].list_parameters("decoder." + std::to_string(i), list);
        final_norm.list_parameters("final_norm", list);
        if (!config.tie_embeddings) list.push_back({"out.W", &out.W});  // tied: the table, listed once above
        if (!out.b.value.empty()) list.push_back({"out.b", &out.b});
        return list;
    }
    void zero_grad() { for (auto& [name, param] : parameters()) param->grad.zero(); }
};

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The Transformer's position rows: 0, 1, ..., L-1 for every input, unless positions are random (--pos random).
// Each source's L position rows (random positions: drawn in training, else from the source itself).
inline Transformer::Batch Transformer::rows_for(const Batch& srcs, int L) {
    Batch rows;
    for (const std::vector<int>& src : srcs) {
        Rng own(hash_of(src));
        rows.push_back(position_rows(L, config.max_len, embed.random_rows, training ? position_draws : own));
    }
    return rows;
}
// Decoder token t reads position row t; with random positions, the row its source's token t read (every task's
// output is as long as its input), so both sides share one draw. (Decoder-only: t counts from the sequence's
// start, and the rows are the whole sequence's.)
inline int Transformer::target_row(const std::vector<int>& rows_of_source, int t) const {
    return embed.random_rows ? rows_of_source.at(t) : t;
}

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Tied embeddings (--tie-embeddings; the paper, 3.4): the output projection's W is the embedding table transposed,
// so one matrix reads a token in and scores it out, and its gradient is the sum of three uses'.
inline Matrix Transformer::tied_output(const Matrix& h) {
    out.x = h;  // saved for the backward, as Linear::forward saves it
    const Param& table = embed.table;  // quantized (inference only): the table's integers, row by row
    Matrix logits = table.quantized.empty() ? matmul_bt_fast(h, table.value) : quantized_product_fast(h, table.quantized[0]);
    return out.b.value.empty() ? logits : add_row(std::move(logits), out.b.value);
}
inline Matrix Transformer::tied_output_backward(const Matrix& d_logits) {  // -> dh (n_seq T, d_model)
    if (!out.b.value.empty()) add_row_backward(d_logits, out.b.grad);  // forward: + b
    Matrix dh(out.x.rows, out.x.cols);
    // forward: h table^T, so dh += d_logits table, table.grad += d_logits^T h (then backward() adds two more)
    matmul_bt_backward_fast(d_logits, out.x, embed.table.value, dh, embed.table.grad);
    return dh;
}

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Decoder-only (--arch decoder-only, GPT's shape), in the encoder-decoder's place: one causal stack of DecoderBlocks
// without cross-attention (`cross` false) reads each source, START and the answer so far as one sequence of
// L = S + T tokens at positions 0 .. L-1, its source's PADs hidden; the rows from START on (the last T) predict the
// answer, so the loss counts the answer's positions only. -> logits (n_seq T, vocab), as the encoder-decoder's.
//
// The mask (n_seq rows, keys): query i of each sequence, at position first + i, may see key j when j is at or
// before it (causal) and is not one of its source's PADs (the source's first S keys: padding). Every query sees at
// least key 0, the source's first digit (a source is never empty, and its PADs come after its digits), so no row
// is all masked, and none spreads its weight over future keys.
inline Matrix causal_padding_mask(const std::vector<std::vector<int>>& sources, int rows, int first, int keys) {
    Matrix m(rows * int(sources.size()), keys);
    for (int i = 0; i < m.rows; i++)
        for (int j = 0; j < keys; j++) {
            const std::vector<int>& src = sources[i / rows];
            bool pad = j < int(src.size()) && src[j] == PAD;
            m.at(i, j) = j <= first + i % rows && !pad ? 1.0 : 0.0;
        }
    return m;
}
inline Transformer::Batch wholes(const Transformer::Batch& srcs, const Transformer::Batch& tgts_in) {
    Transformer::Batch whole = srcs;  // n_seq x (L): the source, START, the answer so far
    for (std::size_t e = 0; e < whole.size(); e++)
        whole[e].insert(whole[e].end(), tgts_in[e].begin(), tgts_in[e].end());
    return whole;
}
inline Matrix Transformer::read_whole(const Batch& srcs, const Batch& tgts_in) {
    sources = srcs, targets_in = tgts_in;
    const int S = int(srcs[0].size()), T = int(tgts_in[0].size()), L = S + T, n_seq = int(srcs.size());
    whole_rows = rows_for(srcs, L);  // random positions: L rows drawn at once
    Matrix x = embed.forward(concatenated(wholes(srcs, tgts_in)), concatenated(whole_rows));  // (n_seq L, d_model)
    x = dropout(std::move(x), config.dropout, embedding_dropout_draws(), whole_keep);
    Mask mask(true, srcs);  // causal, and no PAD of the source (causal_padding_mask, written out: (n_seq L, L))
    for (DecoderBlock& block : decoder) x = block.forward(x, Matrix(), mask, Matrix(), n_seq);
    Matrix answer;  // (n_seq T, d_model): each sequence's rows S .. L-1
    for (int e = 0; e < n_seq; e++) append_rows(answer, take_block(x, e * L + S, T, 0, config.d_model));
    return output(final_norm.forward(answer));
}
// Undo read_whole from d_answer (n_seq T, d_model), the gradient of the rows it kept.
inline void Transformer::read_whole_backward(const Matrix& d_answer) {
    const int S = int(sources[0].size()), T = int(targets_in[0].size()), L = S + T, n_seq = int(sources.size());
    Matrix dx(n_seq * L, config.d_model);  // forward: answer = rows S .. L-1 of each sequence; the rest get 0
    for (int e = 0; e < n_seq; e++)
        add_into_block(take_block(d_answer, e * T, T, 0, config.d_model), e * L + S, 0, dx);
    Matrix unused;  // no memory
    for (int i = int(decoder.size()) - 1; i >= 0; i--) dx = decoder[i].backward(dx, unused);
    dx = dropout_backward(std::move(dx), whole_keep);  // forward: x = dropout(embed.forward(whole))
    const Batch whole = wholes(sources, targets_in);
    for (int e = 0; e < n_seq; e++)
        embed.backward(whole[e], whole_rows[e], take_block(dx, e * L, L, 0, config.d_model));
}

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Decoding with a cache (inference only: greedy decoding, train.hpp; beam search).
// Decoding grows each output a token at a time. Rather than run the whole prefix through the decoder again at
// every position, it keeps what every attention computed (llama2.c's RunState) and feeds only the newest
// tokens: causal self-attention adds the new rows' K and V to those kept, cross-attention reads the memory's K
// and V, made once. The new rows are those a whole-prefix pass gives, bit for bit: its later keys are masked
// and add exactly 0 (tests.cpp checks).
struct DecodingCache {
    // self_K, self_V (n_seq t, kv_heads d_k), t the tokens fed so far; cross_K, cross_V (n_seq S, kv_heads d_k)
    struct Layer { Matrix self_K, self_V, cross_K, cross_V; };
    std::vector<Layer> layers;        // one per decoder block
    Transformer::Batch sources;       // n_seq x (S): each sequence's source, for the padding mask
    Transformer::Batch rows;          // n_seq x (S): the position rows its source read, which the output's follow
                                      // (random positions); decoder-only: n_seq x (2 S), the whole sequence's
    int position = 0;                 // the position the next tokens take: 0 for START (decoder-only: S)
};

// n_seq sequences in A (n_seq a, m) and in B (n_seq b, m) -> (n_seq (a + b), m): each sequence's rows
// from A, then its rows from B. Decoding grows every sequence's kept K and V this way.
inline Matrix join_sequences(const Matrix& A, const Matrix& B, int n_seq) {
    Matrix Y;
    for (int e = 0, a = A.rows / n_seq, b = B.rows / n_seq; e < n_seq; e++) {
        append_rows(Y, take_block(A, e * a, a, 0, A.cols));
        append_rows(Y, take_block(B, e * b, b, 0, B.cols));
    }
    return Y;
}

// MultiHeadAttention::attend for decoding: the same sums in the same order, so the same bits, but read in place
// from Q (n_seq T, d_model) and the kept K, V (n_seq S, kv_heads d_k), where attend copies out every head's slices
// for its backward; each head keeps only its map P (T, S), which --inspect reads. The queries' positions start at
// first_query (ALiBi's distances: the newest row is further on).
inline Matrix attend_kept(MultiHeadAttention& m, const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& mask,
                          int n_seq, int first_query) {
    Matrix joined(Q.rows, Q.cols);  // (n_seq T, d_model)
    const int T = Q.rows / n_seq, S = K.rows / n_seq, d_k = m.d_k, group = m.n_heads / m.kv_heads;
    const double inv_sqrt_dk = 1.0 / std::sqrt(double(d_k));
    m.saved.assign(std::size_t(n_seq) * m.n_heads, SavedAttention{});
    parallel_each(n_seq, attention_work(n_seq * m.n_heads, T, S, d_k), [&](int e) {
        Matrix mask_e = mask.empty() ? mask : take_block(mask, e * T, T, 0, S);  // (T, S)
        for (int h = 0; h < m.n_heads; h++) {
            int col = h * d_k, kv_col = h / group * d_k;
            Matrix scores(T, S);  // attention(): scale(matmul_bt_fast(Q, K), inv_sqrt_dk), one sum an entry
            for (int i = 0; i < T; i++) {
                const double* q = &Q.data[std::size_t(e * T + i) * Q.cols + col];  // query i of head h
                for (int j = 0; j < S; j++) {
                    const double* k = &K.data[std::size_t(e * S + j) * K.cols + kv_col];  // key j of its K head
                    double sum = 0.0;
                    for (int p = 0; p < d_k; p++) sum += q[p] * k[p];
                    scores.at(i, j) = sum * inv_sqrt_dk;
                }
            }
            Matrix& P = m.saved[std::size_t(e) * m.n_heads + h].P;  // (T, S)
            P = attention_weights(std::move(scores), mask_e, m.alibi_slopes.empty() ? 0.0 : m.alibi_slopes[h],
                                  first_query);
            for (int i = 0; i < T; i++) {  // attention(): P V, each sum from 0 in order of j, summed straight into
                                           // the zeroed join: the same bits as summing apart and adding to 0
                double* o = &joined.data[std::size_t(e * T + i) * joined.cols + col];
                for (int j = 0; j < S; j++) {
                    const double w = P.at(i, j), *v = &V.data[std::size_t(e * S + j) * V.cols + kv_col];
                    for (int p = 0; p < d_k; p++) o[p] += w * v[p];
                }
            }
        }
    });
    return m.W_o.forward(joined);
}

// DecoderBlock::forward for y (n_seq new_rows, d_model), the newest rows of each sequence (one, or a decoder-only
// model's whole prompt) from `position` on, against what `kept` holds; self_mask (n_seq new_rows, keys) hides what
// they may not see (empty: all). With rotary positions the kept keys were turned at their own positions, so only
// the newest rows turn.
inline Matrix decoder_block_next(DecoderBlock& b, const Matrix& y, DecodingCache::Layer& kept, const Matrix& self_mask,
                                 const Matrix& memory_mask, int n_seq, int position) {
    MultiHeadAttention& self = b.self_attn;
    const int new_rows = y.rows / n_seq;
    Matrix y1 = b.self_sub.forward(y, [&](const Matrix& a) {
        kept.self_K = join_sequences(kept.self_K, self.turned(self.W_k.forward(a), new_rows, position), n_seq);  // each
        kept.self_V = join_sequences(kept.self_V, self.W_v.forward(a), n_seq);  // sequence's rows, then its new ones
        return attend_kept(self, self.turned(self.W_q.forward(a), new_rows, position), kept.self_K, kept.self_V,
                           self_mask, n_seq, position);
    });
    if (!b.cross) return b.ffn_sub.forward(y1, [&](const Matrix& a) { return b.ffn.forward(a); });  // decoder-only
    Matrix y2 = b.cross_sub.forward(y1, [&](const Matrix& a) {
        return attend_kept(b.cross_attn, b.cross_attn.W_q.forward(a), kept.cross_K, kept.cross_V, memory_mask,
                           n_seq, 0);
    });
    return b.ffn_sub.forward(y2, [&](const Matrix& a) { return b.ffn.forward(a); });
}

// Decoder-only: run the sources through the stack once, keeping every layer's K and V; START comes next.
inline DecodingCache start_decoding_whole(Transformer& model, const Transformer::Batch& sources) {
    DecodingCache cache;
    cache.sources = sources;
    const int S = int(sources[0].size()), n_seq = int(sources.size());
    cache.rows = model.rows_for(sources, positions_read(model.config, S));
    Transformer::Batch rows;  // the sources' own rows, the first S of each
    for (const std::vector<int>& r : cache.rows) rows.push_back({r.begin(), r.begin() + S});
    Matrix x = model.embed.forward(Transformer::concatenated(sources), Transformer::concatenated(rows));
    Matrix mask = causal_padding_mask(sources, S, 0, S);  // (n_seq S, S)
    cache.layers.resize(model.decoder.size());
    for (std::size_t i = 0; i < model.decoder.size(); i++)
        x = decoder_block_next(model.decoder[i], x, cache.layers[i], mask, Matrix(), n_seq, 0);
    cache.position = S;
    return cache;
}
// Encode the sources once and make every cross-attention's K and V from the memory (n_seq S, d_model).
inline DecodingCache start_decoding(Transformer& model, const Transformer::Batch& sources) {
    switch (model.config.arch) {
    case Arch::encoder_decoder: break;
    case Arch::decoder_only: return start_decoding_whole(model, sources);
    }
    DecodingCache cache;
    cache.sources = sources;
    Matrix memory = model.encode(sources);
    cache.rows = model.source_rows;
    for (DecoderBlock& block : model.decoder)
        cache.layers.push_back({Matrix(), Matrix(), block.cross_attn.W_k.forward(memory),
                                block.cross_attn.W_v.forward(memory)});
    return cache;
}

// The logits (n_seq, vocab) of the token after each sequence's newest (n_seq x (1)), at cache.position.
inline Matrix newest_logits(Transformer& model, DecodingCache& cache, const Transformer::Batch& newest) {
    const int n_seq = int(newest.size());
    std::vector<int> rows;  // the position row each newest token reads
    for (int e = 0; e < n_seq; e++) rows.push_back(model.target_row(cache.rows[e], cache.position));
    Matrix y = model.embed.forward(Transformer::concatenated(newest), rows);  // (n_seq, d_model)
    Matrix memory_mask, self_mask;  // cross-attention's (n_seq, S), or decoder-only's self-attention's (n_seq, keys)
    switch (model.config.arch) {
    case Arch::encoder_decoder: memory_mask = padding_mask(1, cache.sources); break;
    case Arch::decoder_only:
        self_mask = causal_padding_mask(cache.sources, 1, cache.position, cache.position + 1);
        break;
    }
    for (std::size_t i = 0; i < model.decoder.size(); i++)
        y = decoder_block_next(model.decoder[i], y, cache.layers[i], self_mask, memory_mask, n_seq, cache.position);
    cache.position++;
    return model.output(model.final_norm.forward(y));
}
