// matrix.hpp -- the math under the Transformer, each forward beside its backward.
//
// Read this file first: matrix.hpp, model.hpp and train.hpp, read whole, are the 2017 paper's model end to end (its
// blocks pre-norm by default, as most code runs them today: model.hpp); the chapters after them add today's blocks.
// A Matrix is a rows x cols block of doubles, row by row; one row is one position, so T tokens of d_model numbers
// each are a (T, d_model) matrix. Legend used in every file:
//   T        target (decoder) sequence length      S      source (encoder) sequence length
//   d_model  width of every token vector           vocab  vocabulary size
//   n_heads  attention heads                       d_k    d_model / n_heads, width of one head
//   d_ff     hidden width of the feed-forward layer
//   n_seq    sequences of a mini-batch, one stack of rows  Q K V  attention's queries, keys, values
//   (in attention, T counts the queries and S the keys: in the encoder's self-attention both are the source's)
//
// The model multiplies with engine/kernels.hpp's *_fast kernels: the same bits as matmul and matmul_bt here, faster.
// Every backward here, given d loss/d output, ADDS (+=) d loss/d input into gradients the caller zeroed: the chain
// rule's sum over every path to the loss (model.hpp's blocks add into their parameters' and return their input's).
// `// exercise NAME: begin` .. `end` mark an answer a class writes itself (docs/course.md): `make exercise` cuts it
// out of a student's copy, leaving a gap that throws "not written yet".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

// ---------------------------------------------------------------------------------------------
// Matrix: rows x cols doubles, row-major. at(r, c) is the only indexing a reader needs.
struct Matrix {
    int rows = 0, cols = 0;
    std::vector<double> data;  // (rows * cols), row r starts at data[r * cols]
    Matrix() = default;
    Matrix(int r, int c, double fill = 0.0) : rows(r), cols(c), data(std::size_t(r) * c, fill) {}
    double& at(int r, int c) { return data[std::size_t(r) * cols + c]; }
    double at(int r, int c) const { return data[std::size_t(r) * cols + c]; }
    bool empty() const { return data.empty(); }
    void zero() { std::fill(data.begin(), data.end(), 0.0); }
};

// A learned tensor and the gradient of the loss with respect to it, the same shape (empty: a tensor that never trains).
// Training zeroes grad, backward passes add (+=) into it, and the optimizer reads it.
struct Param {
    Matrix value, grad;
    Param() = default;
    Param(int r, int c, double fill = 0.0) : value(r, c, fill), grad(r, c, 0.0) {}
};

// A small deterministic random generator (splitmix64), so one seed gives the same numbers on every compiler;
// std::uniform_real_distribution is allowed to differ between libraries.
struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed) {}
    uint64_t next() {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    int below(int n) { return int(next() % uint64_t(n)); }                            // 0 .. n-1
};

// Xavier (Glorot) uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out)): the variance of activations and gradients
// stays about the same from layer to layer, as in PyTorch's xavier_uniform_.
inline void xavier_init(Matrix& w, Rng& rng) {
    double a = std::sqrt(6.0 / double(w.rows + w.cols));
    for (double& v : w.data) v = rng.uniform(-a, a);
}

// ---------------------------------------------------------------------------------------------
// Matrix product  C = A B.   A (n, k), B (k, m), C (n, m).
inline Matrix matmul(const Matrix& A, const Matrix& B) {
    Matrix C(A.rows, B.cols);
    for (int i = 0; i < A.rows; i++)
        for (int p = 0; p < A.cols; p++) {
            double a = A.at(i, p);  // i-p-j loop order: the innermost loop walks rows of B and C
            for (int j = 0; j < B.cols; j++) C.at(i, j) += a * B.at(p, j);
        }
    return C;
}
// forward: C[i][j] = sum_p A[i][p] B[p][j]
// so       dA[i][p] += sum_j dC[i][j] B[p][j]   (dA += dC B^T)
//          dB[p][j] += sum_i A[i][p] dC[i][j]   (dB += A^T dC)
inline void matmul_backward(const Matrix& dC, const Matrix& A, const Matrix& B, Matrix& dA, Matrix& dB) {
    for (int i = 0; i < A.rows; i++)
        for (int p = 0; p < A.cols; p++) {
            double a = A.at(i, p), da = 0.0;
            for (int j = 0; j < B.cols; j++) {
                da += dC.at(i, j) * B.at(p, j);
                dB.at(p, j) += a * dC.at(i, j);
            }
            dA.at(i, p) += da;
        }
}

// ---------------------------------------------------------------------------------------------
// Product with B transposed  C = A B^T.   A (n, k), B (m, k), C (n, m). Entry (i, j) is the dot product of row i of A
// with row j of B, both rows contiguous in memory. Attention's scores Q K^T are this product.
inline Matrix matmul_bt(const Matrix& A, const Matrix& B) {
    Matrix C(A.rows, B.rows);
    for (int i = 0; i < A.rows; i++)
        for (int j = 0; j < B.rows; j++) {
            double sum = 0.0;
            for (int p = 0; p < A.cols; p++) sum += A.at(i, p) * B.at(j, p);
            C.at(i, j) = sum;
        }
    return C;
}
// forward: C[i][j] = sum_p A[i][p] B[j][p]
// so       dA[i][p] += sum_j dC[i][j] B[j][p]   (dA += dC B)
//          dB[j][p] += sum_i dC[i][j] A[i][p]   (dB += dC^T A)
inline void matmul_bt_backward(const Matrix& dC, const Matrix& A, const Matrix& B, Matrix& dA, Matrix& dB) {
    for (int i = 0; i < A.rows; i++)
        for (int j = 0; j < B.rows; j++) {
            double g = dC.at(i, j);
            for (int p = 0; p < A.cols; p++) {
                dA.at(i, p) += g * B.at(j, p);
                dB.at(j, p) += g * A.at(i, p);
            }
        }
}

// ---------------------------------------------------------------------------------------------
// Sum  C = A + B (same shape). This is the residual connection x + sublayer(x) (Sublayer in model.hpp).
inline Matrix add(const Matrix& A, const Matrix& B) {
    Matrix C = A;
    for (std::size_t i = 0; i < C.data.size(); i++) C.data[i] += B.data[i];
    return C;
}
// forward: C = A + B   so   dA += dC and dB += dC: a sum hands its gradient to both terms.
inline void add_backward(const Matrix& dC, Matrix& dA, Matrix& dB) {
    for (std::size_t i = 0; i < dC.data.size(); i++) {
        dA.data[i] += dC.data[i];
        dB.data[i] += dC.data[i];
    }
}
// dA += dC: adding one more path's gradient into a gradient that already holds others.
inline void accumulate(Matrix& dA, const Matrix& dC) {
    for (std::size_t i = 0; i < dC.data.size(); i++) dA.data[i] += dC.data[i];
}

// ---------------------------------------------------------------------------------------------
// Bias  Y = X + b, the row vector b (1, m) added to every row of X (n, m).
// X is taken by value: a temporary, such as add_row(matmul(x, W), b), moves in and is not copied.
inline Matrix add_row(Matrix X, const Matrix& b) {
    for (int i = 0; i < X.rows; i++)
        for (int j = 0; j < X.cols; j++) X.at(i, j) += b.at(0, j);
    return X;
}
// forward: Y[i][j] = X[i][j] + b[j]   so   dX = dY: the gradient passes through unchanged, and the
// caller hands dY on as dX itself; only the bias needs work:   db[j] += sum_i dY[i][j]
inline void add_row_backward(const Matrix& dY, Matrix& db) {
    for (int i = 0; i < dY.rows; i++)
        for (int j = 0; j < dY.cols; j++) db.at(0, j) += dY.at(i, j);
}

// ---------------------------------------------------------------------------------------------
// Scale  Y = s X  by a constant s.
inline Matrix scale(const Matrix& X, double s) {
    Matrix Y = X;
    for (double& v : Y.data) v *= s;
    return Y;
}
// forward: Y = s X   so   dX += s dY
inline void scale_backward(const Matrix& dY, double s, Matrix& dX) {
    for (std::size_t i = 0; i < dY.data.size(); i++) dX.data[i] += s * dY.data[i];
}

#include "chapters/01_maths.hpp"  // sorter's own exp, log, sin, cos, pow: the same bits on every machine

// ---------------------------------------------------------------------------------------------
// Row-wise softmax  P[i][j] = exp(X[i][j]) / sum_k exp(X[i][k]).   X, P (n, m).
inline Matrix softmax_rows(const Matrix& X) {
    Matrix P(X.rows, X.cols);
    for (int i = 0; i < X.rows; i++) {
        // Subtracting the row's max changes nothing (it cancels between top and bottom) but
        // keeps every exp() argument <= 0, so a logit of 1000 cannot overflow to inf and NaN.
        double max = X.at(i, 0);
        for (int j = 1; j < X.cols; j++) max = std::max(max, X.at(i, j));
        double sum = 0.0;
        for (int j = 0; j < X.cols; j++) P.at(i, j) = maths::exp(X.at(i, j) - max);  // (a loop of its own: vector lanes)
        for (int j = 0; j < X.cols; j++) sum += P.at(i, j);
        for (int j = 0; j < X.cols; j++) P.at(i, j) /= sum;
    }
    return P;
}
// forward: P[i][j] = exp(X[i][j]) / sum_k exp(X[i][k])
// exercise softmax: begin
// Jacobian: dP[i][j]/dX[i][k] = P[i][j] (delta_jk - P[i][k]), so the vector-Jacobian product is
//          dX[i][k] += P[i][k] (dP[i][k] - sum_j dP[i][j] P[i][j])
// in words: each input gets its own probability times (its upstream gradient minus the
// probability-weighted mean of the row's upstream gradients: the "row term").
// exercise softmax: end
inline void softmax_rows_backward(const Matrix& dP, const Matrix& P, Matrix& dX) {
    // exercise softmax: begin (uses dP P dX)
    for (int i = 0; i < P.rows; i++) {
        double row_term = 0.0;
        for (int j = 0; j < P.cols; j++) row_term += dP.at(i, j) * P.at(i, j);
        for (int k = 0; k < P.cols; k++) dX.at(i, k) += P.at(i, k) * (dP.at(i, k) - row_term);
    }
    // exercise softmax: end
}

// ---------------------------------------------------------------------------------------------
// Activations, elementwise. Each backward multiplies dY by the local slope at the saved input X.
inline Matrix relu(const Matrix& X) {
    Matrix Y = X;
    for (double& v : Y.data) v = v > 0.0 ? v : 0.0;
    return Y;
}
// forward: Y = max(0, X)   so   dX += dY where X > 0, and nothing (0) where X <= 0 (the mask)
inline void relu_backward(const Matrix& dY, const Matrix& X, Matrix& dX) {
    const double *x = X.data.data(), *dy = dY.data.data();  // plain pointers: the compiler runs the loop in vector
    double* dx = dX.data.data();                            // lanes (called through a pointer, FeedForward's act)
    for (std::size_t i = 0, n = X.data.size(); i < n; i++) dx[i] += x[i] > 0.0 ? dy[i] : 0.0;
}

// ---------------------------------------------------------------------------------------------
// Blocks: a mini-batch is its sequences' rows stacked (sequence e of length T owns rows e*T ..), and multi-head
// attention cuts each sequence's Q, K, V into n_heads slices of d_k columns.
inline Matrix take_block(const Matrix& X, int row, int rows, int col, int cols) {  // X (n, m) -> (rows, cols)
    Matrix Y(rows, cols);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) Y.at(i, j) = X.at(row + i, col + j);
    return Y;
}
// forward: Y[i][j] = X[row + i][col + j]   so   dX[row + i][col + j] += dY[i][j].
// Read the other way, the same loop also joins heads: it writes a (T, d_k) slice into (n, d_model).
inline void add_into_block(const Matrix& dY, int row, int col, Matrix& dX) {  // (rows, cols) into (n, m)
    for (int i = 0; i < dY.rows; i++)
        for (int j = 0; j < dY.cols; j++) dX.at(row + i, col + j) += dY.at(i, j);
}
