// chapters/01_maths.hpp -- sorter's own exp, log, pow, sin, cos and erf, from + - * / alone.
//
// What it adds: the transcendental functions every other file calls (softmax's exp, the loss's log, the positions'
// sin, cos and pow, GELU's erf), written here rather than taken from the C library. Why: IEEE 754 rounds + - * /
// and sqrt the same on every machine; maths libraries do not round exp, log, sin, cos, pow and erf the same (glibc,
// musl, Apple's, Microsoft's and the browser's differ in the last bit here and there), and one seed must give the
// same bits everywhere: the page, ./sorter on any CPU, any C library. CI refuses a build that imports any of them.
// Each is within 1 ulp of the correctly rounded value (erf: 4 ulps; tests.cpp checks 20,000 points a range, make
// maths a million). The recipe is the classic one (Cody and Waite; fdlibm): write x as a multiple of a constant plus
// a small remainder r, whose function a short Taylor polynomial gives, then put the multiple back.
// A first reading (matrix.hpp, model.hpp, train.hpp) takes them as given; read this after it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

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
// erf, for GELU (chapters/04_todays_blocks.hpp), written out rather than std::erf: glibc's ARM64 build and its x86-64
// build differ in its last bit.
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
