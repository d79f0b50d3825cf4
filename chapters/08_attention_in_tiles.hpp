// chapters/08_attention_in_tiles.hpp -- attention computed tile by tile (--attention flash; FlashAttention-2).
//
// What it adds: the same attention as model.hpp's attention(), within rounding, in memory that grows with T, not
// T x S. What it changes in the first part: MultiHeadAttention's heads attend in a way of their own (InTiles, a
// HeadAttention: model.hpp), which in training calls flash_attention and its backward flash_attention_backward.
// Here too is head_attention_of, which picks the way a model's attention is built with.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../model.hpp"  // Mask, SavedAttention, MASKED (this file is read where model.hpp includes it)

// Attention in tiles (--attention flash; FlashAttention-2, Dao 2023), in training: the O attention() gives, within
// rounding, without ever holding a (T, S) matrix. attention() keeps P (T, S) for its backward, as large as T x S for
// every head of every sequence of every layer (at T = S = 1024, 8 sequences, 4 heads, 2 layers: 512 MB). Here the
// queries go a tile of FLASH_QUERIES rows at a time, and each walks the keys a tile of FLASH_KEYS at a time,
// keeping for each query row its running max m, running sum l and output so far, unnormalised (the online
// softmax). Only O and one number a row, log_sum_exp = m + log l, are saved; the backward makes each tile of P again
// from Q, K and it, since exp(score - log_sum_exp) = exp(score - m) / l is the weight itself.
// It lives here, a section a first reading skips: the math is attention()'s, and this is how to compute it in
// less memory; the forward and backward stand side by side, each line of the backward naming the forward's it
// undoes. Masks are asked of the rule tile by tile (Mask::sees); a tile every one of whose keys is hidden from
// every one of its queries is skipped (half the tiles, under the causal mask), unless one of its query rows sees
// no key at all: attention() gives such a row equal weights on every key (all its scores are MASKED), and so
// does this, by walking all of that row's tiles, its keys scored 0 rather than MASKED (the same equal weights,
// and log_sum_exp = log S keeps its digits, where MASKED + log S would round away the last 1e-7 of them).
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

// What a head in tiles saves besides Q, K, V (SavedAttention's, whose P stays empty): O and a number a query row.
struct SavedTiles {
    Matrix O;                         // the output (T, d_k)
    std::vector<double> log_sum_exp;  // (T): m + log l, the log of each row's softmax bottom
};
// attention(), in tiles: Q (T, d_k), K, V (S, d_k) of sequence e (its mask: mask's rule for e) -> O (T, d_k).
// Saves Q, K, V, O and log_sum_exp; no P.
inline Matrix flash_attention(Matrix Q, Matrix K, Matrix V, const Mask& mask, int e, SavedAttention& saved,
                              SavedTiles& tiles, const TileDropout& dropped, double alibi_slope = 0.0) {
    const int T = Q.rows, S = K.rows, d_k = Q.cols;
    const Matrix Kt = transpose(K);  // (d_k, S)
    Matrix O(T, d_k);                // row i: query i's output so far, unnormalised (divided by l at the end)
    std::vector<double> log_sum_exp(T), s(FLASH_QUERIES * FLASH_KEYS), m(FLASH_QUERIES), l(FLASH_QUERIES);
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
            log_sum_exp[i0 + r] = m[r] + maths::log(l[r]);            // m + log l: log of softmax's bottom
        }
    }
    saved = {std::move(Q), std::move(K), std::move(V), Matrix(), Matrix(), Matrix()};
    tiles = {O, std::move(log_sum_exp)};
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
inline void flash_attention_backward(const Matrix& dO, const SavedAttention& c, const SavedTiles& tiles,
                                     const Mask& mask, int e, const TileDropout& dropped, double alibi_slope,
                                     Matrix& dQ, Matrix& dK, Matrix& dV) {
    const int T = c.Q.rows, S = c.K.rows, d_k = c.Q.cols;
    const double inv_sqrt_dk = 1.0 / std::sqrt(double(d_k));
    const Matrix Kt = transpose(c.K), Vt = transpose(c.V);  // (d_k, S)
    std::vector<double> D(T, 0.0), s(FLASH_QUERIES * FLASH_KEYS);
    for (int i = 0; i < T; i++)  // D = rowsum(dO * O): each row's sum_j P_ij dP_ij (above)
        for (int p = 0; p < d_k; p++) D[i] += dO.at(i, p) * tiles.O.at(i, p);
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
                for (int col = 0; col < w; col++)  // forward: weight / l = exp(score - m) / l
                    row[col] = maths::exp(row[col] - tiles.log_sum_exp[i]);
                double dP[FLASH_KEYS];
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

// The way heads attend in tiles (a HeadAttention, model.hpp): in training only, which it knows by the model's dropout
// stream, given only then (Transformer::train); outside training, and for the maps, plain, with chapter 05's
// positions either way. It keeps what its backward asks again: the mask its forward was given, that forward's
// attention dropout (p 0: none) with its one draw, for the dropout's counters, and each head's SavedTiles.
struct InTiles : PositionsInAttention {
    int n_heads = 1;
    bool tiled = false;  // whether this forward ran in tiles
    Mask seen;
    double p = 0.0;
    uint64_t seed = 0;
    std::vector<SavedTiles> kept;  // sequence e's head h at [e * n_heads + h]
    InTiles(PositionsInAttention positions, int n_heads)
        : PositionsInAttention(std::move(positions)), n_heads(n_heads) {}
    std::unique_ptr<HeadAttention> copy() const override { return std::make_unique<InTiles>(*this); }
    bool start(const Mask& mask, int n_seq, double attn_dropout, Rng* dropout_draws) override {
        tiled = dropout_draws != nullptr;
        const bool dropping = tiled && attn_dropout > 0.0;
        p = dropping ? attn_dropout : 0.0;
        seed = dropping ? dropout_draws->next() : 0;
        if (!tiled) return PositionsInAttention::start(mask, n_seq, attn_dropout, dropout_draws);  // plain
        seen = mask;
        kept.assign(std::size_t(n_seq) * n_heads, SavedTiles{});
        return false;  // the draws are numbered by place (dropout_factor_at): the sequences may run at once
    }
    Matrix sequence_mask(const Mask& mask, int e, int T, int S) const override {
        return tiled ? Matrix() : mask.of_sequence(e, T, S);  // in tiles, none: the rule is asked tile by tile
    }
    // Head h of sequence e's dropout: its weights' draws numbered from ((e n_heads + h) T) S on.
    TileDropout dropout_of(int e, int h, int T, int S) const {
        return {p, seed, (uint64_t(e) * n_heads + h) * uint64_t(T) * uint64_t(S), S};
    }
    Matrix attend(Matrix q, Matrix k, Matrix v, const Matrix& mask_e, int e, int h, SavedAttention& saved,
                  double attn_dropout, Rng* dropout_draws) override {
        if (!tiled)
            return PositionsInAttention::attend(std::move(q), std::move(k), std::move(v), mask_e, e, h, saved,
                                                attn_dropout, dropout_draws);
        const int T = q.rows, S = k.rows;
        return flash_attention(std::move(q), std::move(k), std::move(v), seen, e, saved,
                               kept[std::size_t(e) * n_heads + h], dropout_of(e, h, T, S), slope(h));
    }
    void attend_backward(const Matrix& dO, const SavedAttention& saved, int e, int h, Matrix& dQ, Matrix& dK,
                         Matrix& dV) const override {
        if (!tiled) return PositionsInAttention::attend_backward(dO, saved, e, h, dQ, dK, dV);
        flash_attention_backward(dO, saved, kept[std::size_t(e) * n_heads + h], seen, e,
                                 dropout_of(e, h, saved.Q.rows, saved.K.rows), slope(h), dQ, dK, dV);
    }
};

// The way a model's attention is built with: in tiles (--attention flash), with positions (self-attention with
// --pos rope or alibi), with shared K and V heads alone (--kv-heads, chapter 04), or the paper's.
inline std::unique_ptr<HeadAttention> head_attention_of(const ModelConfig& c, bool self_attention) {
    PositionsInAttention way;
    way.kv_mul = c.n_heads / c.key_value_heads();  // chapter 04's shared K and V heads
    way.d_k = c.d_model / c.n_heads;
    way.rotary = self_attention && turns_queries_and_keys(c.positions);  // cross-attention: no positions
    if (self_attention && lowers_scores_by_distance(c.positions)) way.alibi_slopes = alibi_slopes_of(c.n_heads);
    if (attends_in_tiles(c.attention)) return std::make_unique<InTiles>(std::move(way), c.n_heads);
    if (way.rotary || !way.alibi_slopes.empty()) return std::make_unique<PositionsInAttention>(way);
    if (way.kv_mul > 1) return std::make_unique<SharedKeys>(static_cast<const SharedKeys&>(way));
    return std::make_unique<HeadAttention>();
}
