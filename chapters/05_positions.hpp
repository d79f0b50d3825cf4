// chapters/05_positions.hpp -- positions beyond the sinusoidal table: drawn at random, turned (rotary), or a penalty
// on distance (ALiBi).
//
// What it adds: --pos random (Ruoss et al. 2023), --pos rope (Su et al. 2021, RoFormer) and --pos alibi (Press et
// al. 2022). What it changes in the first part: Embedding reads a row of its table per token (position_ids_of, here),
// and self-attention's heads attend in a way of their own (PositionsInAttention, a HeadAttention: model.hpp, whose K
// and V heads may be shared: chapter 04), which turns the queries and keys (rotate_pairs) or lowers each score by its
// distance (alibi_slopes_of gives each head its slope). --pos learned and --pos none are Embedding's own (model.hpp):
// a table of their own, or nothing added.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "../model.hpp"  // HeadAttention; chapter 04's SharedKeys (this file is read where model.hpp includes it)

// The position ids of L tokens: which row of the position table each reads, 0, 1, ..., L-1. Or, with random
// positions (--pos random; Ruoss et al. 2023), L distinct rows drawn from all max_len and kept in order: the order
// survives, and training at short lengths visits every row, so a longer input at test time meets no unseen row.
inline std::vector<int> position_ids_of(int L, int max_len, bool drawn, Rng& rng) {
    std::vector<int> ids;
    for (int row = 0; row < max_len && int(ids.size()) < L; row++)  // take each row with chance
        if (!drawn || rng.below(max_len - row) < L - int(ids.size()))  // needed / left
            ids.push_back(row);
    return ids;
}
// Outside training a source's rows are drawn from a stream seeded by the source itself, so one input always reads
// the same rows: FNV-1a over its token ids.
inline uint64_t hash_of(const std::vector<int>& tokens) {
    uint64_t h = 14695981039346656037ull;
    for (int t : tokens) h = (h ^ uint64_t(t)) * 1099511628211ull;
    return h;
}

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

// Self-attention with positions in it: Q and K turned before the heads read them (rotary), or each head's scores
// lowered by distance before the softmax (ALiBi); the rest is the paper's attention. Cross-attention keeps the paper's.
struct PositionsInAttention : SharedKeys {  // (its K and V heads may be shared: chapter 04)
    int d_k = 1;
    bool rotary = false;
    std::vector<double> alibi_slopes;  // each head's (empty: no ALiBi)
    std::unique_ptr<HeadAttention> copy() const override { return std::make_unique<PositionsInAttention>(*this); }
    Matrix ready(Matrix X, int L, int first) const override {  // X (n_seq L, heads d_k)
        if (!rotary) return X;  // moved out, not copied (a ?: with X would copy it)
        return rotate_pairs(std::move(X), L, first, d_k);
    }
    // exercise rotary: begin
    // forward: Q, K turned by position, Y = R X pair by pair   so   dX = R^T dY: the rotation by minus the angle
    // exercise rotary: end
    Matrix ready_backward(Matrix dX, int L, int first) const override {
        if (!rotary) return dX;
        // exercise rotary: begin (uses dX L first)
        return rotate_pairs(std::move(dX), L, first, d_k, -1.0);
        // exercise rotary: end
    }
    double slope(int h) const { return alibi_slopes.empty() ? 0.0 : alibi_slopes[h]; }
    // forward: scores -= slope |first_query + i - j|, a constant: the backward passes through it unchanged.
    Matrix weights(Matrix scores, const Matrix& mask_e, int h, int first_query) const override {
        const double m = slope(h);
        if (m > 0.0)
            for (int i = 0; i < scores.rows; i++)
                for (int j = 0; j < scores.cols; j++) scores.at(i, j) -= m * std::abs(first_query + i - j);
        return attention_weights(std::move(scores), mask_e);
    }
};
