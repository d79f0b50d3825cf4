// engine/kernels.hpp -- the same numbers as matrix.hpp's matmul, faster, and on every core (--threads N).
//
// Beneath the tutorial: model.hpp calls these *_fast kernels, which give matrix.hpp's plain loops' bits on any
// number of threads (kernels_test.cpp checks, bit for bit, on 1, 2, 3 and 8); the loops are the math, and a
// first reading skips this file. How work is cut into ranges (parallel_for) lives here; who runs the ranges, the
// pool, is engine/threads.hpp; chapter 09's integer product, faster, is engine/integers.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "../matrix.hpp"
#include "threads.hpp"  // Threads, the pool the products run on

// Every entry of a product is one chain of additions, summed in order; splitting it across vector
// lanes would change the rounding. So these kernels keep each chain whole and in order, and find
// speed elsewhere: a tile of TILE_ROWS x TILE_COLS entries of C stays in registers while p runs over
// the whole sum, so each number loaded from A or B serves many entries, and the TILE_COLS chains of a
// row fill the vector lanes. Same bits as matrix.hpp's loops (kernels_test.cpp checks), which stay the reference.
// The fastest tile measured here depends on the compiler: g++ with 512-bit vectors keeps a row of 8 sums in
// one register and multiplies it by A's number straight from memory (docs/performance.md); others, 6 x 16.
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
constexpr int TILE_ROWS = 16, TILE_COLS = 8;
#else
constexpr int TILE_ROWS = 6, TILE_COLS = 16;
#endif

// Every core, the same bits (--threads N). parallel_for cuts the outputs of one piece of work into N ranges; the
// thread that claims a range computes all of it, each entry exactly as one thread alone would compute it, so N
// changes no bit of any result. The pool `threads` (threads.hpp) runs the ranges. Work under PARALLEL_WORK
// multiply-adds stays on the calling thread: waking another costs more than it would gain (docs/performance.md).
constexpr double PARALLEL_WORK = 1e5;

// ranges(begin, end) over 0 .. n-1, cut into up to threads.count() ranges of whole grains (the last may end short),
// each run by the thread that claims it; when `work` (the multiply-adds, or the like) is under PARALLEL_WORK, all
// of it on the calling thread.
template <class Work>
inline void parallel_for(int n, int grain, double work, Work&& ranges) {
    const int grains = (n + grain - 1) / grain, parts = work < PARALLEL_WORK ? 1 : std::min(threads.count(), grains);
    if (parts <= 1) {
        if (n > 0) ranges(0, n);
        return;
    }
    threads.run([&](int k) {
        if (k >= parts) return;
        const int begin = std::min(n, k * grains / parts * grain), end = std::min(n, (k + 1) * grains / parts * grain);
        if (begin < end) ranges(begin, end);
    });
}

// The work of `heads` heads of T queries and S keys of d_k columns, for parallel_each below: their two products,
// and about 5000 multiply-adds' worth for each head's small matrices (counted smaller, decoding's attention stays
// on one thread, and an evaluation of the large model takes longer: docs/performance.md).
inline double attention_work(int heads, int T, int S, int d_k) { return heads * (2.0 * T * S * d_k + 5000.0); }
// each(e) for e = 0 .. n-1, on the threads as parallel_for cuts them: model.hpp's sequences, which attend only to
// their own rows.
template <class Each>
inline void parallel_each(int n, double work, Each&& each) {
    parallel_for(n, 1, work, [&](int begin, int end) {
        for (int e = begin; e < end; e++) each(e);
    });
}

// Reading ahead. A tile reads B a row at a time, and row p lies B.cols numbers after row p - 1. From B.cols = 64 on
// (rows 512 bytes apart, at most 8 to a 4 KiB page; from 512 on, one to a page) the processor's own prefetcher, which
// stops at a page's end, falls behind: when B is not in the core's cache (decoding reads every weight afresh at each
// token), the tile waits at each new page. So it asks for its columns of the row AHEAD steps on: a number every 8
// (8 fill a 64-byte line) and its last, as they may start mid-line. Below 64 (the default size's B has at most 32
// columns) it does not. A hint: it changes no number.
constexpr int AHEAD = 8;
inline void prefetch(const double* x) {
#ifdef __GNUC__
    __builtin_prefetch(x);  // g++ and clang++; other compilers read without the hint
#else
    (void)x;
#endif
}

// Rows i0 .. i0+R-1, columns j0 .. j0+W-1 of  C += op(A) B,  each entry continuing its own sum (or, with
// add_at_end, summed from 0 and then added to C, as matmul_backward's dA is). a points at op(A)[i0][0];
// a_row is the step in a from one row of op(A) to the next, a_col from one column to the next.
template <int R, int W>
inline void product_tile(Matrix& C, const double* a, std::size_t a_row, std::size_t a_col, const Matrix& B,
                         bool add_at_end, int i0, int j0) {
    double sum[R][W];
    for (int r = 0; r < R; r++)
        for (int w = 0; w < W; w++) sum[r][w] = add_at_end ? 0.0 : C.at(i0 + r, j0 + w);
    const bool read_ahead = B.cols >= 64;
    for (int p = 0; p < B.rows; p++) {
        const double* b = B.data.data() + std::size_t(p) * B.cols + j0;  // row p of B, from column j0
        if (read_ahead && p + AHEAD < B.rows)  // row p + AHEAD, every cache line of the tile's W columns
            for (int w = 0; w <= W; w += 8) prefetch(b + AHEAD * B.cols + std::min(w, W - 1));
        double a_p[R];                                                   // column p of the tile's rows of op(A)
        for (int r = 0; r < R; r++) a_p[r] = a[r * a_row + p * a_col];
        for (int w = 0; w < W; w++)
            for (int r = 0; r < R; r++) sum[r][w] += a_p[r] * b[w];
    }
    for (int r = 0; r < R; r++)
        for (int w = 0; w < W; w++) C.at(i0 + r, j0 + w) = add_at_end ? C.at(i0 + r, j0 + w) + sum[r][w] : sum[r][w];
}
// Rows i0 .. i0+R-1, columns j0 .. j1-1 of C: tiles of W columns, then of 8 (a 512-bit register of sums a row,
// for the columns a thread's range leaves beyond the wide tiles), then one column at a time.
// When op(A) is A, the tile reads R rows of A, a row of A apart, at every step of p; rows a multiple of 4 KiB
// apart (A.cols a multiple of 512) share cache sets and evict each other. So those rows are first copied,
// transposed, into panel: panel[p * R + r] = A[i0 + r][p], the R numbers a step needs side by side (a copy
// costs little beside the product; the panel is reused by every tile of rows of the caller's block). When
// op(A) is A transposed, the numbers a step needs, A[p][i0 .. i0+R-1], already lie side by side.
template <int R, int W>
inline void product_rows(Matrix& C, const Matrix& A, bool A_transposed, const Matrix& B, bool add_at_end, int i0,
                         int j0, int j1, std::vector<double>& panel) {
    const double* a = A.data.data() + (A_transposed ? std::size_t(i0) : std::size_t(i0) * A.cols);
    std::size_t a_row = A_transposed ? 1 : A.cols, a_col = A_transposed ? A.cols : 1;
    if (!A_transposed) {
        panel.resize(std::size_t(R) * B.rows);
        for (int r = 0; r < R; r++)
            for (int p = 0; p < B.rows; p++) panel[std::size_t(p) * R + r] = A.at(i0 + r, p);
        a = panel.data(), a_row = 1, a_col = R;
    }
    int j = j0;
    for (; j + W <= j1; j += W) product_tile<R, W>(C, a, a_row, a_col, B, add_at_end, i0, j);
    for (; j + 8 <= j1; j += 8) product_tile<R, 8>(C, a, a_row, a_col, B, add_at_end, i0, j);
    for (; j < j1; j++) product_tile<R, 1>(C, a, a_row, a_col, B, add_at_end, i0, j);
}
// Rows i0 .. i1-1, columns j0 .. j1-1 of C += op(A) B: TILE_ROWS rows at a time, then those left over in tiles
// of 8, 4, 2 and 1 rows (with 6-row tiles, at most 4 + 1), each as wide as measured fastest with g++ and 512-bit
// vectors (a tile too narrow keeps too few sums going).
inline void product_block(Matrix& C, const Matrix& A, bool A_transposed, const Matrix& B, bool add_at_end, int i0,
                          int i1, int j0, int j1) {
    std::vector<double> panel;
    int i = i0;
    for (; i + TILE_ROWS <= i1; i += TILE_ROWS)
        product_rows<TILE_ROWS, TILE_COLS>(C, A, A_transposed, B, add_at_end, i, j0, j1, panel);
    if (i + 8 <= i1) product_rows<8, 16>(C, A, A_transposed, B, add_at_end, i, j0, j1, panel), i += 8;
    if (i + 4 <= i1) product_rows<4, 8>(C, A, A_transposed, B, add_at_end, i, j0, j1, panel), i += 4;
    if (i + 2 <= i1) product_rows<2, 32>(C, A, A_transposed, B, add_at_end, i, j0, j1, panel), i += 2;
    if (i + 1 <= i1) product_rows<1, 32>(C, A, A_transposed, B, add_at_end, i, j0, j1, panel);
}
// C (n, m) += op(A) B, with op(A) = A (n, k) or, when A_transposed, the transpose of A (k, n); B (k, m); C shares
// no storage with A or B. With --threads N: C's rows cut into N ranges of whole tiles (or, when rows are few and
// columns many, its columns), for the threads.
inline void product_into(Matrix& C, const Matrix& A, bool A_transposed, const Matrix& B, bool add_at_end = false) {
    const double work = double(C.rows) * C.cols * B.rows;  // multiply-adds
    if (C.rows >= TILE_ROWS * threads.count() || C.cols < TILE_COLS * threads.count())
        parallel_for(C.rows, TILE_ROWS, work,
                     [&](int i0, int i1) { product_block(C, A, A_transposed, B, add_at_end, i0, i1, 0, C.cols); });
    else
        parallel_for(C.cols, TILE_COLS, work,
                     [&](int j0, int j1) { product_block(C, A, A_transposed, B, add_at_end, 0, C.rows, j0, j1); });
}
inline Matrix transpose(const Matrix& X) {  // X (n, m) -> (m, n), 8 rows of X at a time: each row of Y
    Matrix Y(X.cols, X.rows);                 // gets 8 neighbours at once, and the 8 rows read stay cached
    for (int i0 = 0; i0 < X.rows; i0 += 8)
        for (int j = 0; j < X.cols; j++)
            for (int i = i0; i < std::min(i0 + 8, X.rows); i++) Y.at(j, i) = X.at(i, j);
    return Y;
}
// Same as matmul(A, B): every sum starts from 0.
inline Matrix matmul_fast(const Matrix& A, const Matrix& B) {
    Matrix C(A.rows, B.cols);
    product_into(C, A, false, B);
    return C;
}
// Same as matmul_bt(A, B), through a transposed copy of B.
inline Matrix matmul_bt_fast(const Matrix& A, const Matrix& B) { return matmul_fast(A, transpose(B)); }
// Same as matmul_backward(dC, A, B, dA, dB).
inline void matmul_backward_fast(const Matrix& dC, const Matrix& A, const Matrix& B, Matrix& dA, Matrix& dB) {
    product_into(dA, dC, false, transpose(B), true);  // da = sum over j, in order, from 0; then dA += da
    product_into(dB, A, true, dC);                  // dB[p][j] += A[i][p] dC[i][j], over i in order
}
// Same as matmul_bt_backward(dC, A, B, dA, dB): both continue their sums from what they hold.
inline void matmul_bt_backward_fast(const Matrix& dC, const Matrix& A, const Matrix& B, Matrix& dA, Matrix& dB) {
    product_into(dA, dC, false, B);  // dA[i][p] += dC[i][j] B[j][p], over j in order
    product_into(dB, dC, true, A);   // dB[j][p] += dC[i][j] A[i][p], over i in order
}
