// workbench/quantize_test.cpp -- --quantize: matrix.hpp's quantize, dequantize and integer product; the checkpoint of a
// quantized model (quantize.hpp).
#include "test_helpers.hpp"

// A (rows, cols) matrix of uniform draws in [-size, size].
static Matrix drawn(int rows, int cols, double size, uint64_t seed) {
    Rng rng(seed);
    Matrix M(rows, cols);
    for (double& v : M.data) v = size * (2.0 * rng.uniform() - 1.0);
    return M;
}

// Rounding moves w / scale at most half a step: every weight comes back within half its group's scale; under Q4_0's
// rule (below 8 bits) a weight beyond 2^(bits-1) - 1/2 steps on the side without the extra level is clamped to the
// top level, within one step, and the group's largest weight comes back exactly.
TEST_CASE("quantize: every weight within half its group's scale after a round trip") {
    const Matrix W = drawn(6, 96, 0.7, 5);
    for (int bits = 2; bits <= 8; bits++) {
        INFO("bits " << bits);
        Quantized Q = quantize(W, bits);
        CHECK(Q.group == 32);  // 64 (8 bits) and 32 halved until they divide 96
        const Matrix back = dequantize(Q);
        const double top = bits == 8 ? 127 : (1 << (bits - 1)) - 1;
        int clamped = 0;
        for (int r = 0; r < W.rows; r++)
            for (int c = 0; c < W.cols; c++) {
                const double signed_scale = Q.scale[std::size_t(r) * Q.groups() + c / Q.group];
                const double scale = std::fabs(signed_scale), error = std::fabs(W.at(r, c) - back.at(r, c));
                const bool beyond = bits < 8 && W.at(r, c) / signed_scale > top + 0.5;  // rounds past the top level
                clamped += beyond;
                CHECK(error <= (beyond ? 1.0 : 0.5) * scale);
            }
        if (bits == 2) CHECK(clamped > 0);  // the rule's one-sidedness shows at 2 bits on these draws
    }
    CHECK(group_for(8, 256) == 64);
    CHECK(group_for(4, 256) == 32);
    CHECK(group_for(8, 21) == 1);  // SwiGLU's hidden width 21: every weight its own scale
}

// With every value a small whole number times a power of two, and each group holding 127 times it, quantizing is
// exact and the product of the dequantized values is exact in doubles: the integer product must give the same bits.
TEST_CASE("quantize: the integer product equals the exact product of the quantized values") {
    Rng rng(7);
    auto dyadic = [&](int rows, int cols, double unit) {
        Matrix M(rows, cols);
        for (double& v : M.data) v = double(int(rng.next() % 255) - 127) * unit;
        for (int r = 0; r < rows; r++)
            for (int g = 0; g < cols / 32; g++) M.at(r, g * 32 + (r % 32)) = 127 * unit;  // each group's largest
        return M;
    };
    const Matrix X = dyadic(5, 64, 1.0 / 8), Wt = dyadic(7, 64, 1.0 / 32);
    const Quantized Q = quantize(Wt, 8);
    CHECK(dequantize(Q).data == Wt.data);  // exact
    const Matrix exact = matmul(X, transpose(Wt));
    const Matrix integer = quantized_product(X, Q);
    CHECK(integer.data == exact.data);
    // Any values: the product of the dequantized values, up to a few roundings a group.
    const Matrix A = drawn(4, 64, 2.0, 8), B = drawn(9, 64, 0.3, 9);
    const Quantized QB = quantize(B, 4);
    Matrix Aq(A.rows, A.cols);  // A as the product quantizes it: Q8_0 in QB's groups of 32
    REQUIRE(QB.group == 32);
    for (int i = 0; i < A.rows; i++)
        for (int g = 0; g < 2; g++) {
            const double s = group_scale(&A.data[std::size_t(i) * 64 + g * 32], 32, 8);
            for (int k = 0; k < 32; k++) Aq.at(i, g * 32 + k) = rounded(A.at(i, g * 32 + k) / s) * s;
        }
    const Matrix want = matmul(Aq, transpose(dequantize(QB))), got = quantized_product(A, QB);
    for (std::size_t k = 0; k < want.data.size(); k++) CHECK(got.data[k] == doctest::Approx(want.data[k]).epsilon(1e-12));
}

// A quantized model's file read and written again is the same bytes; it evaluates as it did; training it is refused.
TEST_CASE("quantize: a quantized checkpoint read and written again is byte-identical") {
    for (int bits : {8, 4, 3}) {
        ModelConfig c;
        DataConfig d;
        Transformer model = small_trained_model(c, d);
        quantize_model(model, bits);
        const std::string text = checkpoint_text(model, Kept(d));
        CHECK(contains(text, fmt("\nbits %d\n", bits)));
        std::istringstream in(text);
        Kept kept;
        Transformer back = read_kept(in, "--load q.txt", kept);
        CHECK(checkpoint_text(back, kept) == text);
        for (auto& [name, p] : back.parameters()) CHECK(p->quantized.empty() == !is_product_matrix(name));
    }
}

// Integer sums leave no room to differ: the same bits on every thread count.
TEST_CASE("quantize: the integer product gives the same bits on any thread count") {
    const Matrix X = drawn(300, 128, 1.5, 11);
    const Quantized Q = quantize(drawn(96, 128, 0.2, 12), 8);
    threads.set_count(1);
    const Matrix one = quantized_product_fast(X, Q);
    CHECK(one.data == quantized_product(X, Q).data);
    for (int count : {2, 3, 7}) {
        threads.set_count(count);
        CHECK(quantized_product_fast(X, Q).data == one.data);
    }
    threads.set_count(1);
}

// A quantized default checkpoint runs through every way of using a trained model, with the figures it prints
// when evaluated; what cannot be done with one is refused in one line (exit 2 from main).
#include "test_runs.hpp"

TEST_CASE("quantize: a quantized checkpoint evaluates, decodes, scores, inspects and reports; misuse is refused") {
    TempDir dir("quantized-runs");
    const std::string m = dir.file("m.txt"), m8 = dir.file("m8.txt");
    REQUIRE(contains(run_output({"--steps", "300", "--save", m}), "exact-match 93.0% (930/1000)"));
    const std::string quantized = run_output({"--load", m, "--quantize", "8", "--save", m8});
    CHECK(contains(quantized, "max error in any group: 0.003641"));
    const std::string figure = "held-out: exact-match 92.9% (929/1000), token-accuracy 97.7%";
    CHECK(contains(quantized, figure));  // as evaluated when quantized, and as evaluated when loaded
    CHECK(contains(run_output({"--load", m8}), figure));
    CHECK(contains(run_output({"--load", m8, "--beam", "3"}), "exact-match 94.1% (941/1000)"));
    CHECK(contains(run_output({"--load", m8, "--test-len", "7"}), "length  7:   4.5% (9/200)"));
    CHECK(contains(run_output({"--load", m8, "--inspect"}), "decoder.0 cross-attention head 1:  68.8%"));
    CHECK(contains(run_output({"--load", m8, "--report", dir.file("r.html")}), "wrote "));
    CHECK(contains(read_all(dir.file("r.html")), "92.9%"));
    CHECK(contains(run_error({"--load", m8, "--steps", "5"}), "quantized to 8 bits, which cannot train"));
    CHECK(contains(run_error({"--load", m8, "--quantize", "4"}), "is quantized already (8 bits)"));
    // A file whose bits line says 1, and one whose quantized row holds a value beyond 8 bits.
    std::string text = read_all(m8);
    std::ofstream(dir.file("b1.txt")) << replace_once(text, "\nbits 8\n", "\nbits 1\n");
    CHECK(contains(run_error({"--load", dir.file("b1.txt")}), "bits 1: a quantized model has 2 to 8 bits"));
    const std::size_t row = text.find('\n', text.find("tensor embed.table"));
    const std::size_t value = text.find(' ', row + 1);  // after row 0's scale: its first whole number
    text.replace(value + 1, text.find(' ', value + 1) - value - 1, "300");
    std::ofstream(dir.file("bad.txt")) << text;
    CHECK(contains(run_error({"--load", dir.file("bad.txt")}),
                   "tensor 'embed.table' row 0: '300' is not a whole number from -127 to 127 (8 bits)"));
}
