// engine/integers.hpp -- chapter 09's integer product, the same bits as its quantized_product, faster and on every
// core (--threads N). Beneath the tutorial, as kernels.hpp: read where chapters/09_eight_bits.hpp includes it, after
// Quantized (kernels_test.cpp checks it against the plain loop, bit for bit).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../chapters/09_eight_bits.hpp"  // Quantized, quantize_activations (this file is read where it includes it)
#include "kernels.hpp"                    // parallel_for

// Chapter 09's integer product (quantized_product), faster and on every core, with its bits. Inference only
// (--quantize). Each output y[i][j] is the same chain as the plain loop's: the same exact int32 sum of each group
// (whole numbers: any order gives the same sum), then y += double(sum) * scale_w * scale_x, group after group from
// 0.0, in doubles rounded as there. The speed is in how the sums are taken. The plain loop sums one output at a
// time and must add its lanes across at each group's end; here a tile of QUANT_ROWS rows of X x QUANT_COLS outputs
// keeps its sums side by side in vector lanes, outputs across the lanes, so nothing is added across: each weight
// read serves QUANT_ROWS rows, and each activation QUANT_COLS outputs. An activation is at most 127 in size (Q8_0)
// and a weight 128, so two products add up to at most 2 x 127 x 128 = 32512 < 2^15: a pair is multiplied and added
// in 16-bit lanes, exactly (twice the lanes of 32 bits; g++ emits 16-bit multiplies), and only then widened into
// the int32 sums.
constexpr int QUANT_ROWS = 4, QUANT_COLS = 64;

// Wt laid out for the tile, into Wt.packed_q and Wt.packed_scales: outputs in blocks of QUANT_COLS (the last block's
// missing outputs are zeros), and in a block, input by input, the QUANT_COLS weights of that input side by side
// (int16, as the lanes take them); the scales likewise, group by group. Done once, when a model's matrix is
// quantized or read (workbench/quantize.hpp): decoding multiplies a few rows at a time (8 for the large model of
// docs/performance.md), and laying the weights out at every call cost much of its 8-bit evaluation (how much: there).
//   packed_q     (blocks, d_in, QUANT_COLS):   packed_q[(b d_in + k) QUANT_COLS + c] = q[b QUANT_COLS + c][k]
//   packed_scales (blocks, groups, QUANT_COLS): packed_scales[(b groups + g) QUANT_COLS + c] = scale[b QUANT_COLS + c][g]
inline void pack_weights(Quantized& Wt) {
    constexpr int J = QUANT_COLS;
    const int blocks = (Wt.rows + J - 1) / J, G = Wt.groups();
    Wt.packed_q.assign(std::size_t(blocks) * Wt.cols * J, 0);
    Wt.packed_scales.assign(std::size_t(blocks) * G * J, 0.0);
    for (int j = 0; j < Wt.rows; j++) {
        const std::size_t b = std::size_t(j / J), c = std::size_t(j % J);
        for (int k = 0; k < Wt.cols; k++) Wt.packed_q[(b * Wt.cols + k) * J + c] = Wt.q[std::size_t(j) * Wt.cols + k];
        for (int g = 0; g < G; g++) Wt.packed_scales[(b * G + g) * J + c] = Wt.scales[std::size_t(j) * G + g];
    }
}
// Rows i0 .. i0+R-1 of Y, outputs j0 .. j0 + width - 1 (width <= QUANT_COLS): qx, scale_x the quantized rows of X
// (n, d_in) and their scales (n, groups); w, scale_w the block of packed weights from output j0.
template <int R>
inline void quantized_tile(const int8_t* qx, const double* scale_x, int d_in, int groups, int size,
                           const int16_t* w, const double* scale_w, Matrix& Y, int i0, int j0, int width) {
    constexpr int J = QUANT_COLS;
    double y[R][J];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < J; c++) y[r][c] = 0.0;
    for (int g = 0; g < groups; g++) {
        int32_t sum[R][J];  // the group's sums, exact
        for (int r = 0; r < R; r++)
            for (int c = 0; c < J; c++) sum[r][c] = 0;
        int k = g * size;
        for (; k + 1 < (g + 1) * size; k += 2) {  // two inputs a step: a pair of products in 16 bits
            const int16_t *wa = w + std::size_t(k) * J, *wb = wa + J;
            for (int r = 0; r < R; r++) {
                const int xa = qx[std::size_t(i0 + r) * d_in + k], xb = qx[std::size_t(i0 + r) * d_in + k + 1];
                for (int c = 0; c < J; c++) sum[r][c] += int16_t(xa * wa[c] + xb * wb[c]);
            }
        }
        if (k < (g + 1) * size)  // an odd group's last input
            for (int r = 0; r < R; r++)
                for (int c = 0; c < J; c++)
                    sum[r][c] += qx[std::size_t(i0 + r) * d_in + k] * w[std::size_t(k) * J + c];
        for (int r = 0; r < R; r++) {  // scaled back as quantized_product does: (sum x scale_w) x scale_x
            const double sx = scale_x[std::size_t(i0 + r) * groups + g];
            for (int c = 0; c < J; c++) y[r][c] += double(sum[r][c]) * scale_w[std::size_t(g) * J + c] * sx;
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < width; c++) Y.at(i0 + r, j0 + c) = y[r][c];
}
// Chapter 09's quantize_activations, the same bits, in a form the compiler puts in vector lanes: the largest size
// kept per lane (8 maxima, then the largest of them: a maximum has no order, and a comparison skips a NaN in either
// form), and rounded() with no branch. An inf or a NaN is found as a sum of x * 0 that is not 0 (inf * 0 is NaN).
inline double quantize_activations_fast(const double* x, int n, int8_t* qx) {
    constexpr int LANES = 8;
    double lane[LANES] = {}, times_zero[LANES] = {};
    int k = 0;
    for (; k + LANES <= n; k += LANES)
        for (int l = 0; l < LANES; l++) {
            const double size = std::fabs(x[k + l]);
            lane[l] = lane[l] < size ? size : lane[l];
            times_zero[l] += x[k + l] * 0.0;
        }
    double largest = 0.0, not_finite = 0.0;
    for (; k < n; k++) {
        const double size = std::fabs(x[k]);
        largest = largest < size ? size : largest;
        not_finite += x[k] * 0.0;
    }
    for (int l = 0; l < LANES; l++) largest = largest < lane[l] ? lane[l] : largest, not_finite += times_zero[l];
    const double scale = not_finite != 0.0 ? not_finite : largest / 127.0;  // a NaN, or group_scale's rule at 8 bits
    if (scale == 0.0 || not_finite != 0.0) {
        for (k = 0; k < n; k++) qx[k] = 0;
        return scale;
    }
    for (k = 0; k < n; k++) {  // rounded(x[k] / scale)
        const double v = x[k] / scale, size = std::fabs(v);  // v's size (fabs(-0.0) is 0.0: the same whole part)
        const int whole = int(size), away = whole + int(size - whole >= 0.5);
        qx[k] = int8_t(v < 0 ? -away : away);
    }
    return scale;
}
// Y (n, d_out) = X (n, d_in) W, W quantized as Wt: the same bits as quantized_product. X's rows are quantized once,
// Wt packed once; then X's rows cut across the threads in tiles, each output computed whole by one thread.
inline Matrix quantized_product_fast(const Matrix& X, const Quantized& Wt) {
    constexpr int J = QUANT_COLS;
    const int n = X.rows, d_in = X.cols, G = Wt.groups(), size = Wt.group;
    Matrix Y(n, Wt.rows);
    std::vector<int8_t> qx(X.data.size());
    std::vector<double> scale_x(std::size_t(n) * G);
    for (int i = 0; i < n; i++)
        for (int g = 0; g < G; g++) {
            const std::size_t at = std::size_t(i) * d_in + std::size_t(g) * size;  // row i's group g
            scale_x[std::size_t(i) * G + g] = quantize_activations_fast(&X.data[at], size, &qx[at]);
        }
    Quantized laid_out;  // Wt not packed yet (a test's matrix): a packed copy for this call
    if (Wt.packed_q.empty()) laid_out = Wt, pack_weights(laid_out);
    const Quantized& P = Wt.packed_q.empty() ? laid_out : Wt;
    parallel_for(n, QUANT_ROWS, double(n) * d_in * Wt.rows, [&](int i0, int i1) {
        for (int j0 = 0; j0 < Wt.rows; j0 += J) {
            const int16_t* w = P.packed_q.data() + std::size_t(j0) * d_in;
            const double* scale_w = P.packed_scales.data() + std::size_t(j0) * G;
            const int width = std::min(J, Wt.rows - j0);
            int i = i0;
            for (; i + QUANT_ROWS <= i1; i += QUANT_ROWS)
                quantized_tile<QUANT_ROWS>(qx.data(), scale_x.data(), d_in, G, size, w, scale_w, Y, i, j0, width);
            for (; i < i1; i++)
                quantized_tile<1>(qx.data(), scale_x.data(), d_in, G, size, w, scale_w, Y, i, j0, width);
        }
    });
    return Y;
}
