// matrix.hpp -- the math under the Transformer, each forward beside its backward.
//
// Read this file first. Everything here works on a Matrix: a rows x cols block of doubles
// stored row by row. One row is one position of a sequence, so a sequence of T tokens that
// each carry d_model numbers is a (T, d_model) matrix. Legend used in every file:
//   T        target (decoder) sequence length      S      source (encoder) sequence length
//   d_model  width of every token vector           vocab  vocabulary size
//   n_heads  attention heads                       d_k    d_model / n_heads, width of one head
//   d_ff     hidden width of the feed-forward layer
//   n_seq    sequences of a mini-batch, one stack of rows  Q K V  attention's queries, keys, values
//
// Sections: Matrix, Param, Rng; matmul; matmul_bt; add; add_row; scale; maths (exp, log, sin, cos, pow); softmax_rows;
// relu; gelu; silu and multiply (SwiGLU's); blocks of rows; quantization. A first reading skips the sections under a
// rule of ~, as in every file. The model multiplies with engine/kernels.hpp's *_fast kernels, beneath the tutorial: the
// same bits as matmul and matmul_bt here, faster and on every core; these loops are the math.
// The backward rule for every function: given dL/d(output) it ADDS (+=) dL/d(input) into gradient matrices the caller
// has zeroed. Adding, not assigning, is the chain rule's sum over every path from an input to the loss: when one input
// feeds two places, both add in.
// Exercise-only: a line `// exercise NAME: begin` and its `// exercise NAME: end` hold an answer a class writes
// itself (docs/course.md, "Write it yourself"): `make exercise` cuts them out of a student's copy and leaves a gap
// that throws "not written yet" (<stdexcept>), naming what `uses` lists so that it compiles without a warning.
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

// A learned tensor and the gradient of the loss with respect to it, always the same shape.
// Training zeroes grad, backward passes add (+=) into it, and the optimizer reads it.
// Inference only (--quantize; the last section, under its rule of ~, says what each member is): a matrix of a
// product as whole numbers of `bits` bits, one scale for each `group` of them along the input dimension.
struct Quantized {
    int rows = 0, cols = 0;      // Wt's shape: (d_out, d_in), one row an output
    int bits = 8, group = 64;    // the width of q, and the weights a scale covers
    std::vector<int8_t> q;       // (rows, cols), row by row
    std::vector<double> scale;   // (rows, cols / group): row j's groups, in order, each a float32's value
    std::vector<int16_t> packed_q;      // engine only: q and scale laid out for engine/kernels.hpp's product (its
    std::vector<double> packed_scale;   // pack_weights, again after q changes; empty: laid out at each call)
    int groups() const { return cols / group; }
};
struct Param {
    Matrix value, grad;
    std::vector<Quantized> quantized;  // inference only: empty, or one entry, value's integers (last section)
    Param() = default;
    Param(int r, int c, double fill = 0.0) : value(r, c, fill), grad(r, c, 0.0) {}
};

// A small deterministic random generator (splitmix64), so one seed gives the same numbers on
// every compiler; std::uniform_real_distribution is allowed to differ between libraries.
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

// Xavier (Glorot) uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out)). It keeps the variance of
// activations and of gradients about the same from layer to layer, as in PyTorch's xavier_uniform_.
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
// Product with B transposed  C = A B^T.   A (n, k), B (m, k), C (n, m).
// Entry (i, j) is the dot product of row i of A with row j of B, both rows contiguous in memory.
// Attention's scores Q K^T are this product (the model calls matmul_bt_fast, at the end of the file).
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

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// exp, log, sin, cos and pow, our own (namespace maths), from + - * / alone. IEEE 754 rounds those four the same on
// every machine; maths libraries do not round exp, log, sin, cos and pow the same (glibc, musl, Apple's, Microsoft's
// and the browser's differ in the last bit here and there), and one seed must give the same bits everywhere: the
// page, ./sorter on any CPU, any C library. Each is within 1 ulp of the correctly rounded value (tests.cpp checks
// 20,000 points a range, make maths a million) and about as fast as glibc's (docs/performance.md). The recipe is
// the classic one (Cody and Waite; fdlibm): write x as a multiple of a constant plus a small remainder r, whose
// function a short Taylor polynomial gives, then put the multiple back. A first reading takes them as given.
namespace maths {

// (hi, lo) pairs: a number held as two doubles, hi + lo, when one double's 53 bits are too few (pow needs ~65).
struct Wide { double hi, lo; };
inline Wide two_sum(double a, double b) {  // a + b exactly: s = fl(a + b), and the rounding error it dropped
    const double s = a + b, b_part = s - a, a_part = s - b_part;
    return {s, (a - a_part) + (b - b_part)};
}
inline Wide two_product(double a, double b) {  // a * b exactly (Dekker): split each into two 26-bit halves
    auto split = [](double v) { const double c = 134217729.0 * v, hi = c - (c - v); return Wide{hi, v - hi}; };
    const Wide x = split(a), y = split(b);
    const double p = a * b;
    return {p, ((x.hi * y.hi - p) + x.hi * y.lo + x.lo * y.hi) + x.lo * y.lo};
}
inline double from_bits(std::uint64_t bits) {  // the double whose 64 bits these are
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
}
inline std::uint64_t bits_of(double d) {
    std::uint64_t bits;
    std::memcpy(&bits, &d, 8);
    return bits;
}
inline int nearest_int(double v) {  // for |v| < 2^31: adding 1.5 2^52 rounds v to a whole number, ties to even
    return int((v + 6755399441055744.0) - 6755399441055744.0);
}
constexpr double infinity = std::numeric_limits<double>::infinity();
constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
constexpr double largest = std::numeric_limits<double>::max(), smallest_normal = std::numeric_limits<double>::min();

// ln 2 in two parts: ln2_hi has 32 significant bits, so k ln2_hi is exact for |k| < 2^21.
constexpr double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;

// exp(x + tail), tail a small correction (pow's). x = k ln 2 + r with |r| <= ln(2)/2, and e^x = 2^k e^r:
//   e^r = 1 + r + r^2 (1/2! + r/3! + ... + r^11/13!)   (the next term, r^14/14!, is below 2^-57)
// The polynomial in pairs (Estrin's order): (1/2! + r/3!) + r^2 (1/4! + r/5!) + r^4 (...) ..., whose products a
// processor works on side by side, where Horner's r (r (r ...)) must wait for each one before the next.
// No branch and no conversion to int, so that a loop of exps runs in vector lanes (softmax's, attention's):
// - x is clamped to -746 .. 710, where e^x already rounds to 0 and to infinity (a NaN passes, and is returned);
// - k is rounded by adding 1.5 2^52 (nearest_int's way), and read back from that sum's lowest bits, where it sits in
//   two's complement;
// - 2^k is made as 2^a 2^b, a = floor(k / 2), b = k - a, since 2^k alone is a double only for -1022 <= k <= 1023:
//   y 2^a is exact, and times 2^b rounds once, where the result is subnormal or too large.
inline double exp(double x, double tail = 0.0) {
    double within = x < -746.0 ? -746.0 : x;
    within = within > 710.0 ? 710.0 : within;
    const double shifted = within * 1.44269504088896338700 + 6755399441055744.0;  // 1 / ln 2; 1.5 2^52 + k
    const double k = shifted - 6755399441055744.0;
    const Wide r = two_sum(within - k * ln2_hi, tail - k * ln2_lo);  // within - k ln2_hi is exact
    constexpr double f[14] = {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320,
                              1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800};  // 1/n!
    const double t = r.hi, r2 = t * t, r4 = r2 * r2, r8 = r4 * r4;
    const double p = ((f[2] + t * f[3]) + r2 * (f[4] + t * f[5])) + r4 * ((f[6] + t * f[7]) + r2 * (f[8] + t * f[9])) +
                     r8 * ((f[10] + t * f[11]) + r2 * (f[12] + t * f[13]));
    const std::uint64_t k_2048 = (bits_of(shifted) + 2048) & 0xFFFFF;  // k + 2048: 972 .. 3072
    // the exponent fields (e + 1023) of 2^a and 2^b, a = floor(k / 2) and b = k - a
    const std::uint64_t a_field = k_2048 / 2 - 1024 + 1023, b_field = k_2048 - k_2048 / 2 - 1024 + 1023;
    const double e = (1.0 + (r.hi + (r.lo + r2 * p))) * from_bits(a_field << 52) * from_bits(b_field << 52);
    return x == x ? e : x;  // NaN stays NaN
}

// log x = e ln 2 + log m for x = 2^e m, sqrt(1/2) <= m < sqrt(2). With f = m - 1 and s = f / (2 + f):
//   log m = 2 atanh s = 2s + s^3 (2/3 + s^2 2/5 + s^4 2/7 + ...)    (|s| <= 0.172: 11 terms reach 2^-60)
// and, as 2s = f - s f, it is computed as f - (f^2/2 - s (f^2/2 + R)), R = s^2 (2/3 + ...): f is exact, the rest small.
struct Split { int e; double f; };  // x = 2^e (1 + f)
inline Split split_exponent(double x) {
    int e = 0;
    if (x < smallest_normal) x *= 18014398509481984.0, e = -54;  // subnormal: times 2^54 first
    const std::uint64_t bits = bits_of(x);
    e += int(bits >> 52) - 1023;
    double m = from_bits((bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);  // m in [1, 2)
    if (m > 1.4142135623730951) m *= 0.5, e++;
    return {e, m - 1.0};
}
inline double atanh_tail(double z) {  // 2/3 + z 2/5 + ... + z^10 2/23, z = s^2
    double R = 2.0 / 23;
    for (int n = 10; n >= 1; n--) R = R * z + 2.0 / (2 * n + 1);
    return R;
}
inline double log(double x) {
    if (!(x > 0) || x > largest) return x == 0 ? -infinity : x > 0 ? x : not_a_number;  // log 0, log inf, log of < 0
    const Split sx = split_exponent(x);
    const double f = sx.f, s = f / (2.0 + f), z = s * s, half_f2 = 0.5 * f * f, R = z * atanh_tail(z);
    return sx.e * ln2_hi - ((half_f2 - (s * (half_f2 + R) + sx.e * ln2_lo)) - f);
}

// log x as hi + lo, to about 2^-70: pow's y log x may be 700 times log x, and still must be right to 2^-60. The same
// series, its first two terms carried wide: 2 (s + s_lo) + 2/3 (s + s_lo)^3 + s^5 (2/5 + s^2 2/7 + ...).
inline Wide log_wide(double x) {
    const Split sx = split_exponent(x);
    const double f = sx.f, u = 2.0 + f, u_lo = f - (u - 2.0);   // 2 + f = u + u_lo exactly
    const double s = f / u;                                      // s = f / (2 + f), and its remainder s_lo:
    const Wide su = two_product(s, u);
    const double s_lo = (((f - su.hi) - su.lo) - s * u_lo) / u;  // f = (s + s_lo)(u + u_lo)
    const Wide s2 = two_product(s, s), s3 = two_product(s2.hi, s);              // s^2, s^3 exactly
    const double two_thirds = 2.0 / 3, two_thirds_lo = 3.7007434154171886e-17;  // 2/3 = their sum, to 2^-107
    const Wide cube = two_product(s3.hi, two_thirds);                            // 2/3 s^3, its head
    const double cube_lo = cube.lo + s3.hi * two_thirds_lo + (s3.lo + s2.lo * s) * two_thirds + 2.0 * s2.hi * s_lo;
    double R = 2.0 / 23;  // s^5 (2/5 + ... + z^9 2/23), small enough for plain doubles
    for (int n = 10; n >= 2; n--) R = R * s2.hi + 2.0 / (2 * n + 1);
    const Wide head = two_sum(sx.e * ln2_hi, 2.0 * s), mid = two_sum(head.hi, cube.hi);
    const double lo = head.lo + mid.lo + (2.0 * s_lo + cube_lo + s3.hi * s2.hi * R + sx.e * ln2_lo);
    return two_sum(mid.hi, lo);
}

// pow(x, y) = e^(y log x), with y log x carried in two parts so its error stays below 2^-60 of the result.
inline double pow(double x, double y) {
    if (y == 0 || x == 1) return 1.0;
    if (x != x || y != y) return not_a_number;
    if (x < 0) {  // a negative base: defined for whole y only, its sign by y's parity
        if (!(y > -2e9 && y < 2e9) || double(nearest_int(y)) != y) return not_a_number;
        return (nearest_int(y) % 2 ? -1.0 : 1.0) * pow(-x, y);
    }
    if (x == 0 || x > largest) return (x == 0) == (y > 0) ? 0.0 : infinity;
    const Wide l = log_wide(x), p = two_product(y, l.hi);
    return exp(p.hi, p.lo + y * l.lo);
}

// sin and cos: x = n pi/2 + r with |r| <= pi/4, then a Taylor polynomial of r by the quarter turn n mod 4.
// pi/2 in three parts of 33 bits (and a fourth): n times each is exact for |n| < 2^20, so r is right to ~2^-100
// for |x| < 10^6; beyond (never an angle of sorter's, which are positions) r loses bits, and past 10^9 it is NaN.
constexpr double half_pi_1 = 1.57079632673412561417e+00, half_pi_2 = 6.07710050630396597660e-11,
                 half_pi_3 = 2.02226624871116645580e-21, half_pi_4 = 8.47842766036889956997e-32;
struct Quarter { int n; Wide r; };
inline Quarter reduce_quarter(double x) {
    const int n = nearest_int(x * 6.36619772367581382433e-01);  // 2 / pi
    const Wide r = two_sum(x - n * half_pi_1, -(n * half_pi_2));
    return {n, two_sum(r.hi, r.lo - (n * half_pi_3 + n * half_pi_4))};
}
inline double sin_near_zero(Wide r) {  // sin(r + r_lo) = r + r^3 (-1/3! + r^2/5! - ... - r^16/19!) + r_lo cos r
    const double z = r.hi * r.hi;
    double p = -1.0 / 121645100408832000.0;  // -1/19!
    const double coefficient[8] = {1.0 / 355687428096000, -1.0 / 1307674368000, 1.0 / 6227020800, -1.0 / 39916800,
                                   1.0 / 362880,          -1.0 / 5040,          1.0 / 120,         -1.0 / 6};
    for (double c : coefficient) p = p * z + c;
    return r.hi + (z * r.hi * p + r.lo * (1.0 - 0.5 * z));
}
inline double cos_near_zero(Wide r) {  // cos(r + r_lo) = 1 - r^2/2 + r^4 (1/4! - r^2/6! + ... - r^14/18!) - r r_lo
    const double z = r.hi * r.hi, half_z = 0.5 * z, w = 1.0 - half_z;  // w + ((1 - w) - z/2): 1 - z/2 to 2^-106
    double p = -1.0 / 6402373705728000.0;  // -1/18!
    const double coefficient[7] = {1.0 / 20922789888000, -1.0 / 87178291200, 1.0 / 479001600, -1.0 / 3628800,
                                   1.0 / 40320,          -1.0 / 720,         1.0 / 24};
    for (double c : coefficient) p = p * z + c;
    return w + (((1.0 - w) - half_z) + (z * z * p - r.hi * r.lo));
}
inline double sin(double x) {
    if (!(x > -1e9 && x < 1e9)) return not_a_number;
    const Quarter q = reduce_quarter(x);
    const int turn = q.n & 3;
    const double v = turn % 2 ? cos_near_zero(q.r) : sin_near_zero(q.r);
    return turn >= 2 ? -v : v;
}
inline double cos(double x) {
    if (!(x > -1e9 && x < 1e9)) return not_a_number;
    const Quarter q = reduce_quarter(x);
    const int turn = q.n & 3;
    const double v = turn % 2 ? sin_near_zero(q.r) : cos_near_zero(q.r);
    return turn == 1 || turn == 2 ? -v : v;
}

}  // namespace maths

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

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// GELU (--act gelu, an exercise's activation), and erf written out for it rather than std::erf: maths libraries
// round erf differently (glibc's ARM64 build and its x86-64 build differ in the last bit), and one seed must give the
// same bits on every machine. Within 4 ulps of the true value (tests.cpp), and no slower than std::erf
// (docs/performance.md).
//
// error_function(x) sums a Taylor polynomial around the nearest of the centers c = 0, 1/8, 2/8, ..., 6:
//   erf(c + h) = erf(c) + sum_n erf^(n)(c) h^n / n!,   |h| <= 1/16,  12 terms,
//   erf^(n)(c) = 2/sqrt(pi) e^(-c^2) (-1)^(n-1) H_(n-1)(c),   H_0 = 1, H_1 = 2c, H_(n+1) = 2c H_n - 2n H_(n-1)
// (the Hermite polynomials). The table of coefficients is built once, on the first call; erf(c) itself is
// erf_at_center's, slower but all its terms are positive, so nothing cancels:
//   c < 2.5:  erf(c) = 2/sqrt(pi) e^(-c^2) (c + 2c^3/3 + 4c^5/15 + ...),  term n = term n-1 times 2c^2 / (2n+1)
//   beyond:   erf(c) = 1 - erfc(c),  erfc(c) = e^(-c^2) / sqrt(pi) / (c + (1/2) / (c + 1 / (c + (3/2) / ...)))
inline double erf_at_center(double c) {
    const double gauss = maths::exp(-c * c);  // c is a multiple of 1/8: c * c is exact
    if (c < 2.5) {
        double term = c, sum = c;
        for (int n = 1; term > 1e-17 * sum; n++) {
            term *= 2.0 * c * c / (2 * n + 1);
            sum += term;
        }
        return 1.1283791670955126 * gauss * sum;  // 2 / sqrt(pi)
    }
    double fraction = c;  // the continued fraction, 50 levels deep
    for (int k = 50; k >= 1; k--) fraction = c + 0.5 * k / fraction;
    return 1.0 - gauss / (1.7724538509055160 * fraction);  // sqrt(pi)
}
struct ErfTable {
    static constexpr int per_unit = 8, centers = 6 * per_unit + 1, terms = 12;
    double coefficient[centers][terms];  // coefficient[k][n] = erf^(n)(k / 8) / n!
    ErfTable() {
        for (int k = 0; k < centers; k++) {
            const double c = double(k) / per_unit, scale = 1.1283791670955126 * maths::exp(-c * c);
            coefficient[k][0] = erf_at_center(c);
            double hermite_before = 0.0, hermite = 1.0, factorial = 1.0;  // H_(n-2), H_(n-1), n!
            for (int n = 1; n < terms; n++) {
                factorial *= n;
                coefficient[k][n] = (n % 2 ? scale : -scale) * hermite / factorial;
                const double next = 2.0 * c * hermite - 2.0 * (n - 1) * hermite_before;
                hermite_before = hermite;
                hermite = next;
            }
        }
    }
};
inline double error_function(double x) {
    static const ErfTable table;
    const double a = std::fabs(x);
    if (!(a < 6.0)) return a >= 6.0 ? std::copysign(1.0, x) : x;  // erfc(6) = 2e-17: +-1; NaN stays NaN
    const int k = int(a * ErfTable::per_unit + 0.5);
    const double h = a - double(k) / ErfTable::per_unit;  // exact
    const double* coefficient = table.coefficient[k];
    double y = coefficient[ErfTable::terms - 1];
    for (int n = ErfTable::terms - 2; n >= 0; n--) y = y * h + coefficient[n];  // Horner
    return std::copysign(y, x);
}

// GELU, exact form: x * Phi(x), with Phi the standard normal CDF (PyTorch's default GELU).
inline double normal_cdf(double x) { return 0.5 * (1.0 + error_function(x / std::sqrt(2.0))); }
inline double normal_pdf(double x) { return maths::exp(-0.5 * x * x) * 0.3989422804014327; }  // 1/sqrt(2 pi)
inline Matrix gelu(const Matrix& X) {
    Matrix Y = X;
    for (double& v : Y.data) v = v * normal_cdf(v);
    return Y;
}
// forward: Y = X Phi(X)   so   dX += dY (Phi(X) + X phi(X))   (product rule; Phi' = phi)
inline void gelu_backward(const Matrix& dY, const Matrix& X, Matrix& dX) {
    for (std::size_t i = 0; i < X.data.size(); i++) {
        double x = X.data[i];
        dX.data[i] += dY.data[i] * (normal_cdf(x) + x * normal_pdf(x));
    }
}

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// SiLU (swish), SwiGLU's gate: silu(x) = x sigmoid(x) = x / (1 + e^-x).
inline double sigmoid(double x) { return 1.0 / (1.0 + maths::exp(-x)); }
inline Matrix silu(const Matrix& X) {
    Matrix Y = X;
    for (double& v : Y.data) v = v * sigmoid(v);
    return Y;
}
// forward: Y = X s(X), s = sigmoid, s' = s (1 - s)   so   dX += dY (s + X s (1 - s))   (product rule)
inline void silu_backward(const Matrix& dY, const Matrix& X, Matrix& dX) {
    for (std::size_t i = 0; i < X.data.size(); i++) {
        double s = sigmoid(X.data[i]);
        dX.data[i] += dY.data[i] * (s + X.data[i] * s * (1.0 - s));
    }
}
// Entry by entry, Y = A * B: SwiGLU's gate times its partner.
inline Matrix multiply(const Matrix& A, const Matrix& B) {
    Matrix Y = A;
    for (std::size_t i = 0; i < Y.data.size(); i++) Y.data[i] *= B.data[i];
    return Y;
}
// forward: Y = A * B   so   dA += dY * B,  dB += dY * A   (each factor's slope is the other)
inline void multiply_backward(const Matrix& dY, const Matrix& A, const Matrix& B, Matrix& dA, Matrix& dB) {
    for (std::size_t i = 0; i < dY.data.size(); i++) {
        dA.data[i] += dY.data[i] * B.data[i];
        dB.data[i] += dY.data[i] * A.data[i];
    }
}

// ---------------------------------------------------------------------------------------------
// Blocks: a mini-batch is its sequences' rows stacked (sequence e of length T owns rows e*T ..),
// and multi-head attention cuts each sequence's Q, K, V into n_heads slices of d_k columns.
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
inline void append_rows(Matrix& Y, const Matrix& more) {  // Y (n, m) grows to (n + more.rows, m)
    Y.cols = more.cols;
    Y.data.insert(Y.data.end(), more.data.begin(), more.data.end());
    Y.rows += more.rows;
}
inline Matrix stack_rows(const std::vector<Matrix>& parts) {  // the rows of each part, one after another
    Matrix Y;
    for (const Matrix& p : parts) append_rows(Y, p);
    return Y;
}

// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Quantization (inference only: --quantize BITS, workbench/quantize.hpp): a trained matrix kept as small integers,
// one scale for each group of consecutive weights, and its product computed in integers (llama2.c's runq.c;
// llama.cpp's Q8_0 and Q4_0).
//
// A matrix of a product y = x W, W (d_in, d_out), is kept as its transpose Wt (d_out, d_in): row j holds the d_in
// weights output j sums over, cut into groups of `group` along the input dimension, and each group is
//   w ~ q * scale,   q a whole number of `bits` bits, the same scale for the whole group.
// Two rules choose the scale:
//   8 bits (Q8_0, runq.c):  scale = max|w| / 127,  q = round(w / scale) in -127 .. 127, symmetric;
//   2 to 7 bits (Q4_0's rule, llama.cpp, at 4 bits): m the group's weight of largest size, sign kept,
//            scale = m / -2^(bits-1),  q = round(w / scale) in -2^(bits-1) .. 2^(bits-1) - 1:
//            m itself lands on -2^(bits-1) exactly, so no level is spent on the side it is not.
// Dequantizing is q * scale. The error of one weight is where it comes from: rounding moves w / scale at most
// half a step, so |w - q scale| <= |scale| / 2 (under Q4_0's rule a weight near -m, beyond 2^(bits-1) - 1/2 steps
// on the side without the extra level, is clamped to the top level: within one step). A group with one large
// weight has a large scale, and every small weight beside it is rounded as coarsely.
//
// The product: each row of x is quantized as it arrives, in the same groups, to 8 bits (Q8_0, as runq.c and
// llama.cpp do for activations), and each group's sum is taken in whole numbers:
//   y[j] = sum over groups g of ( sum_k qx[g k] qw[j][g k] ) * scale_w[j][g] * scale_x[g]
// The inner sum is exact: at most 64 products of size 127 x 128 < 2^21, so an int32 holds it without rounding; the
// only roundings are the three doubles of each group's term and the sum over groups. So the integer product equals
// the product of the dequantized values up to those few roundings (tests.cpp), and it has no order to disagree on:
// the same bits on every thread count and every build. Its error against the float model is the weights' rounding
// above, plus the activations' (half a step of scale_x each).
// (Quantized, the integers and scales of a matrix, is defined beside Param, at the top of this file.)
// The group of a width: runq.c's 64 (8 bits) or llama.cpp's 32 (fewer bits), halved until it divides the width.
inline int group_for(int bits, int width) {
    int group = bits == 8 ? 64 : 32;
    while (width % group != 0) group /= 2;
    return group;
}
// v rounded to the nearest whole number, halves away from 0 (C's round), for |v| < 2^31, with + - alone.
inline int rounded(double v) {
    const double size = v < 0 ? -v : v;
    int n = int(size);                // size's whole part (truncation: size >= 0)
    if (size - n >= 0.5) n++;         // exact: size and n share their leading bits
    return v < 0 ? -n : n;
}
// The scale of one group of n weights, by the rule of `bits`.
inline double group_scale(const double* w, int n, int bits) {
    double largest = 0.0, signed_largest = 0.0;  // max|w|, and that weight with its sign (the first, on a tie)
    for (int k = 0; k < n; k++)
        if ((w[k] < 0 ? -w[k] : w[k]) > largest) largest = w[k] < 0 ? -w[k] : w[k], signed_largest = w[k];
    return bits == 8 ? largest / 127.0 : signed_largest / -double(1 << (bits - 1));
}
// Wt (rows, cols) quantized: each row's groups of `group_for(bits, cols)` weights.
inline Quantized quantize(const Matrix& Wt, int bits) {
    Quantized Q;
    Q.rows = Wt.rows, Q.cols = Wt.cols, Q.bits = bits, Q.group = group_for(bits, Wt.cols);
    const int lowest = bits == 8 ? -127 : -(1 << (bits - 1)), highest = bits == 8 ? 127 : (1 << (bits - 1)) - 1;
    Q.q.resize(Wt.data.size());
    for (int r = 0; r < Wt.rows; r++)
        for (int g = 0; g < Q.groups(); g++) {
            const std::size_t at = std::size_t(r) * Wt.cols + std::size_t(g) * Q.group;
            const double scale = double(float(group_scale(&Wt.data[at], Q.group, bits)));  // kept as a float, as
            Q.scale.push_back(scale);                                                           // runq.c keeps it
            for (int k = 0; k < Q.group; k++) {
                const int q = scale == 0.0 ? 0 : rounded(Wt.data[at + k] / scale);
                Q.q[at + k] = int8_t(std::min(highest, std::max(lowest, q)));
            }
        }
    return Q;
}
inline Matrix dequantize(const Quantized& Q) {  // -> (rows, cols): q * scale, entry by entry
    Matrix Wt(Q.rows, Q.cols);
    for (int r = 0; r < Q.rows; r++)
        for (int c = 0; c < Q.cols; c++)
            Wt.at(r, c) = Q.q[std::size_t(r) * Q.cols + c] * Q.scale[std::size_t(r) * Q.groups() + c / Q.group];
    return Wt;
}
// One group of n activations x quantized Q8_0 into qx: returns its scale. A group holding an inf or a NaN (a model
// whose values overflowed) has none: every q is 0 and the scale NaN, so its outputs are NaN, as a float product's are.
inline double quantize_activations(const double* x, int n, int8_t* qx) {
    if (!std::all_of(x, x + n, [](double v) { return std::isfinite(v); })) {
        std::fill(qx, qx + n, int8_t(0));
        return std::numeric_limits<double>::quiet_NaN();
    }
    const double scale = group_scale(x, n, 8);
    for (int k = 0; k < n; k++) qx[k] = int8_t(scale == 0.0 ? 0 : rounded(x[k] / scale));
    return scale;
}
// Rows i0 .. i1-1 of Y (n, d_out) = X (n, d_in) W, W quantized as Wt: X's rows quantized as they arrive (Q8_0).
inline void quantized_product_rows(const Matrix& X, const Quantized& Wt, Matrix& Y, int i0, int i1) {
    const int G = Wt.groups(), size = Wt.group;
    std::vector<int8_t> qx(X.cols);
    std::vector<double> scale_x(G);
    for (int i = i0; i < i1; i++) {
        const double* x = &X.data[std::size_t(i) * X.cols];
        for (int g = 0; g < G; g++)  // the activations: Q8_0, group by group
            scale_x[g] = quantize_activations(x + g * size, size, &qx[g * size]);
        for (int j = 0; j < Wt.rows; j++) {
            const int8_t* w = &Wt.q[std::size_t(j) * Wt.cols];
            double y = 0.0;
            for (int g = 0; g < G; g++) {
                int32_t sum = 0;  // exact: whole numbers
                for (int k = g * size; k < (g + 1) * size; k++) sum += int32_t(qx[k]) * int32_t(w[k]);
                y += double(sum) * Wt.scale[std::size_t(j) * G + g] * scale_x[g];
            }
            Y.at(i, j) = y;
        }
    }
}
inline Matrix quantized_product(const Matrix& X, const Quantized& Wt) {  // X (n, d_in) -> (n, d_out)
    Matrix Y(X.rows, Wt.rows);
    quantized_product_rows(X, Wt, Y, 0, X.rows);
    return Y;
}
