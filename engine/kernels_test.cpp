// engine/kernels_test.cpp -- the fast kernels (kernels.hpp, integers.hpp) against matrix.hpp's and chapter 09's plain
// loops: the same bits, on any shape and on 1, 2, 3 and 8 threads. Built with the program's flags (Makefile), as the
// kernels run in ./sorter.
#include <doctest/doctest.h>

#include <array>

#include "../model.hpp"  // kernels.hpp, and integers.hpp where chapter 09 reads it

namespace {
Matrix filled(int rows, int cols, Rng& rng) {  // entries uniform in [-1, 1)
    Matrix m(rows, cols);
    for (double& x : m.data) x = rng.uniform(-1.0, 1.0);
    return m;
}
}  // namespace

// The fast kernels add the same products in the same order as the plain
// loops, so they must give the same bits: on odd shapes (full tiles, the tiles of 8, 4, 2 and 1 rows left
// over, and the columns left over; and empty ones, k = 0, no rows, no columns, which the sanitizers of
// make sanitize check for reads outside the matrices), and with gradients that already hold something
// (matmul_backward's dA adds its sum at the end, as the plain loop does; its dB, and both gradients of
// matmul_bt, continue from what they hold).
TEST_CASE("fast kernels: the same bits as the plain loops") {
    Rng rng(11);
    for (std::array<int, 3> shape : {std::array<int, 3>{1, 1, 1}, {3, 7, 5}, {6, 16, 16}, {13, 9, 35}, {40, 33, 17},
                                     {67, 5, 3}, {31, 12, 40}, {3, 0, 4}, {0, 5, 4}, {4, 5, 0}}) {
        int n = shape[0], k = shape[1], m = shape[2];
        Matrix A = filled(n, k, rng), B = filled(k, m, rng), Bt = filled(m, k, rng);
        Matrix dC = filled(n, m, rng), dA1 = filled(n, k, rng), dB1 = filled(k, m, rng);
        Matrix dA2 = dA1, dB2 = dB1;
        matmul_backward(dC, A, B, dA1, dB1);
        matmul_backward_fast(dC, A, B, dA2, dB2);
        INFO(n << " x " << k << " x " << m);
        CHECK(dA1.data == dA2.data);
        CHECK(dB1.data == dB2.data);
        CHECK(matmul(A, B).data == matmul_fast(A, B).data);
        CHECK(matmul_bt(A, Bt).data == matmul_bt_fast(A, Bt).data);
        Matrix dCt = filled(n, m, rng), dA3 = filled(n, k, rng), dBt3 = filled(m, k, rng);
        Matrix dA4 = dA3, dBt4 = dBt3;
        matmul_bt_backward(dCt, A, Bt, dA3, dBt3);
        matmul_bt_backward_fast(dCt, A, Bt, dA4, dBt4);
        CHECK(dA3.data == dA4.data);
        CHECK(dBt3.data == dBt4.data);
        CHECK(transpose(transpose(A)).data == A.data);
    }
}

// --threads N (parallel_for and product_into): every entry of a product is still summed by one thread
// in the plain loop's order, so 1, 2, 3 and 8 threads give the plain loops' bits. The shapes are large enough to be
// cut (above PARALLEL_WORK): by rows, by columns (7 rows), ranges ending mid-tile, more threads than tiles.
TEST_CASE("threads: the fast kernels give the plain loops' bits on 1, 2, 3 and 8 threads") {
    Rng rng(12);
    for (std::array<int, 3> shape : {std::array<int, 3>{67, 40, 61}, {7, 300, 101}, {130, 129, 13}, {200, 2, 300}}) {
        int n = shape[0], k = shape[1], m = shape[2];
        REQUIRE(double(n) * k * m >= PARALLEL_WORK);
        Matrix A = filled(n, k, rng), B = filled(k, m, rng), Bt = filled(m, k, rng);
        Matrix dC = filled(n, m, rng), dA0 = filled(n, k, rng), dB0 = filled(k, m, rng);
        Matrix dA1 = dA0, dB1 = dB0, dBt1 = filled(m, k, rng), dA3 = dA0, dBt3 = dBt1;
        matmul_backward(dC, A, B, dA1, dB1);
        matmul_bt_backward(dC, A, Bt, dA3, dBt3);
        for (int count : {1, 2, 3, 8}) {
            threads.set_count(count);
            INFO(n << " x " << k << " x " << m << " on " << count << " threads");
            CHECK(matmul(A, B).data == matmul_fast(A, B).data);
            CHECK(matmul_bt(A, Bt).data == matmul_bt_fast(A, Bt).data);
            Matrix dA2 = dA0, dB2 = dB0, dA4 = dA0, dBt4 = dBt1;
            matmul_backward_fast(dC, A, B, dA2, dB2);
            matmul_bt_backward_fast(dC, A, Bt, dA4, dBt4);
            CHECK(dA1.data == dA2.data);
            CHECK(dB1.data == dB2.data);
            CHECK(dA3.data == dA4.data);
            CHECK(dBt3.data == dBt4.data);
        }
    }
    threads.set_count(1);
}

// The integer product (--quantize): quantized_product_fast against matrix.hpp's quantized_product, bit for bit. Its
// tiles of QUANT_ROWS x QUANT_COLS: rows and outputs that are not a multiple of either (the last block's padding),
// every width from 2 to 8 bits, groups of 64, 32, 16, 8, 4, 2 and 1 (an odd group ends on one input alone), the
// weights laid out once (as a loaded model has them) or at the call, on 1, 2, 3 and 8 threads.
TEST_CASE("quantized product: the fast kernel gives quantized_product's bits") {
    Rng rng(13);
    for (std::array<int, 3> shape : {std::array<int, 3>{1, 64, 1}, {9, 128, 33}, {13, 96, 64}, {5, 40, 70},
                                     {7, 36, 31}, {4, 18, 32}, {3, 7, 65}, {70, 128, 96}, {0, 8, 8}, {2, 1, 3}}) {
        const int n = shape[0], d_in = shape[1], d_out = shape[2];
        Matrix X = filled(n, d_in, rng), Wt = filled(d_out, d_in, rng);
        if (n > 1) X.at(1, 0) = 40.0;  // a row with one large activation: its small ones round to few levels
        for (int bits = 2; bits <= 8; bits++) {
            const Quantized plain = quantize(Wt, bits);
            Quantized packed = plain;
            pack_weights(packed);
            const Matrix want = quantized_product(X, plain);
            for (int count : {1, 2, 3, 8}) {
                threads.set_count(count);
                INFO(n << " x " << d_in << " x " << d_out << ", " << bits << " bits (groups of " << plain.group
                       << ") on " << count << " threads");
                CHECK(quantized_product_fast(X, plain).data == want.data);
                CHECK(quantized_product_fast(X, packed).data == want.data);
            }
        }
    }
    threads.set_count(1);
}

// The activations' quantization in lanes, against matrix.hpp's: halves (away from 0), -0.0, a group of zeros, one
// of numbers so small their scale is 0 (every q then 0), one whose largest comes last, and random groups.
TEST_CASE("quantized product: activations quantized in lanes as quantize_activations does") {
    Rng rng(14);
    std::vector<std::vector<double>> groups = {
        {0.5, -0.5, 1.5, -1.5, 127.0, 2.5, -2.5, 0.0, -0.0, 126.5, -126.5, 63.5, 1.0, -1.0, 0.25, 3.5},
        std::vector<double>(16, 0.0), std::vector<double>(8, 4.9e-324),
        {1e-3, -2e-3, 3e-3, 4e-3, -5e-3, 6e-3, 7e-3, -8e-3, 9e-3, 1.0}, {-3.0}};
    for (int n : {64, 32, 17, 3})
        for (int draw = 0; draw < 20; draw++) {
            std::vector<double> x(static_cast<std::size_t>(n));
            for (double& v : x) v = rng.uniform(-2.0, 2.0);
            groups.push_back(x);
        }
    for (const std::vector<double>& x : groups) {
        const int n = int(x.size());
        std::vector<int8_t> want(x.size()), got(x.size());
        const double scale_want = quantize_activations(x.data(), n, want.data());
        const double scale_got = quantize_activations_fast(x.data(), n, got.data());
        CHECK(scale_got == scale_want);
        CHECK(got == want);
    }
}

// A group holding an inf or a NaN (a model whose values overflowed) has no scale: every q 0 and the scale NaN, in
// both forms, never a NaN converted to an integer; and the product's rows that read it are NaN, the others as before.
TEST_CASE("quantized product: an inf or a NaN among the activations gives NaN, never a NaN made an integer") {
    const double inf = HUGE_VAL, nan = std::nan("");
    for (double bad : {inf, -inf, nan})
        for (int n : {64, 17, 3})
            for (int at : {0, n - 1}) {
                std::vector<double> x(static_cast<std::size_t>(n), 0.5);
                x[std::size_t(at)] = bad;
                std::vector<int8_t> want(x.size(), 1), got(x.size(), 1);
                CHECK(std::isnan(quantize_activations(x.data(), n, want.data())));
                CHECK(std::isnan(quantize_activations_fast(x.data(), n, got.data())));
                CHECK(want == std::vector<int8_t>(x.size(), 0));
                CHECK(got == want);
            }
    Rng rng(15);
    Matrix X(9, 64), Wt(5, 64);
    for (double& v : X.data) v = rng.uniform(-2.0, 2.0);
    for (double& v : Wt.data) v = rng.uniform(-0.3, 0.3);
    const Quantized Q = quantize(Wt, 8);
    const Matrix before = quantized_product(X, Q);
    X.at(2, 7) = inf, X.at(6, 63) = nan;
    const Matrix slow = quantized_product(X, Q), fast = quantized_product_fast(X, Q);
    for (int i = 0; i < X.rows; i++)
        for (int j = 0; j < Wt.rows; j++) {
            const bool broken = i == 2 || i == 6;
            CHECK(std::isnan(slow.at(i, j)) == broken);
            CHECK(std::isnan(fast.at(i, j)) == broken);
            if (!broken) CHECK((slow.at(i, j) == before.at(i, j) && fast.at(i, j) == before.at(i, j)));
        }
}
