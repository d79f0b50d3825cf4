// chapters/02_dropout.hpp -- dropout, the paper's regularizer (section 5.4), forward and backward.
//
// What it adds: --dropout P_drop (the paper's name for the chance) on the embeddings and on every sublayer's output,
// before the residual sum (the paper's residual dropout), and --attn-dropout P_drop on the attention weights (the
// tutorials' place). Off by default, and outside training always: a first reading takes dropout(x) as x and
// dropout_backward(dy) as dy. What it changes in the first part: the blocks call these two where the paper drops,
// and keep the factors their backward reads.
#pragma once

#include <cstddef>

#include "../matrix.hpp"

// Inverted dropout, as PyTorch's: in training each entry is zeroed with chance p and the rest are scaled by
// 1 / (1 - p), so each keeps its expected value. keep (n, d) saves each factor for backward; off (no dropout_draws,
// as outside training, or p 0), keep is empty.
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
