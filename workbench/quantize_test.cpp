// workbench/quantize_test.cpp -- --quantize: matrix.hpp's quantize, dequantize and integer product; the checkpoint of a
// quantized model (quantize.hpp).
#include "test_helpers.hpp"
#include "evaluate.hpp"

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
                const double signed_scale = Q.scales[std::size_t(r) * Q.groups() + c / Q.group];
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
        for (auto& [name, p] : back.parameters()) CHECK((back.integers.count(name) == 0) == !is_product_matrix(name));
    }
}

// A quantized model's text with every word of its quantized rows rewritten: `scale(row, g)` for each group scale,
// `whole(row, c)` for each whole number (the tensors' rows as write_quantized writes them).
template <typename Scale, typename Whole>
static std::string rewritten(Transformer& model, const std::string& text, Scale scale, Whole whole) {
    std::istringstream in(text);
    std::string out, line;
    const Quantized* Q = nullptr;
    int row = 0;
    while (std::getline(in, line)) {
        if (line.rfind("tensor ", 0) == 0) {
            const auto found = model.integers.find(split_words(line)[1]);
            Q = found == model.integers.end() ? nullptr : found->second.get(), row = 0;
        } else if (line == "training") {
            Q = nullptr;
        } else if (Q && row < Q->rows) {
            std::string words;
            for (int g = 0; g < Q->groups(); g++) words += scale(row, g) + " ";
            for (int c = 0; c < Q->cols; c++) words += whole(row, c) + (c + 1 == Q->cols ? "" : " ");
            line = words, row++;
        }
        out += line + "\n";
    }
    return out;
}

// Every value a quantized file may hold is one its kernels can run: scales at float32's largest (3.40282347e+38, as
// "%.9g" writes FLT_MAX, which as a double is a little above it), of either sign, 0, a float32 subnormal, a double
// too small for a float (read as 0), and whole numbers at both ends of the width; the model loads, keeps each scale
// as the float written, evaluates and decodes. Past them, each is refused in one line: a scale that would be inf as a
// float (the old check let 1e39 through, to an inf weight, and called 1e101 "not a finite number"), and a whole number
// past the width.
TEST_CASE("quantize: each extreme value of a quantized file loads and runs; past them, one line") {
    for (int bits : {8, 4}) {
        INFO("bits " << bits);
        ModelConfig c;
        DataConfig d;
        Transformer model = small_trained_model(c, d);
        printed_by([&] { quantize_model(model, bits); });
        const std::string text = checkpoint_text(model, Kept(d));
        const long top = bits == 8 ? 127 : 7, bottom = bits == 8 ? -127 : -8;
        const Dataset data(d, {}, 20, 5);
        for (const std::string scale : {"3.40282347e+38", "-3.40282347e+38", "0", "-0", "1.40129846e-45", "1e-300",
                                        "1e-400"}) {
            INFO("scale " << scale);
            const std::string file = rewritten(model, text, [&](int, int) { return scale; }, [&](int r, int col) {
                return std::to_string((r + col) % 2 ? top : bottom);
            });
            std::istringstream in(file);
            Kept kept;
            Transformer back = read_kept(in, "--load q.txt", kept);
            for (auto& [name, Q] : back.integers)
                for (double s : Q->scales) CHECK(s == double(float(std::strtod(scale.c_str(), nullptr))));
            CHECK(evaluate(back, data.held_out).total == 20);  // it runs: greedy decoding of every held-out input
            teacher_forced_loss(back, data.held_out);
        }
        auto refused = [&](const std::string& scale, const std::string& whole) {
            return load_error(rewritten(model, text, [&](int r, int g) { return r == 1 && g == 0 ? scale : "0.5"; },
                                        [&](int r, int col) { return r == 1 && col == 2 ? whole : "1"; }));
        };
        CHECK(refused("0.5", "1").empty());
        const std::string at = "--load model.txt line 29: tensor 'embed.table' row 1: ";
        for (const std::string scale : {"1e39", "-1e39", "3.5e38", "3.40282357e38", "1e100", "1e101", "1e400"})
            CHECK(refused(scale, "1") == at + "scale " + scale + " is beyond float32's range (a scale is kept as a "
                                                               "float32, at most 3.40282347e+38 in size)");
        for (const std::string scale : {"nan", "inf", "-inf", "0x1p3", "x"})
            CHECK(refused(scale, "1") == at + "scale '" + scale + "' is not a finite number");
        for (long whole : {top + 1, bottom - 1, 100000L})
            CHECK(refused("0.5", std::to_string(whole)) ==
                  at + fmt("'%ld' is not a whole number from %ld to %ld (%d bits)", whole, bottom, top, bits));
        CHECK(refused("0.5", std::to_string(top)).empty());
        CHECK(refused("0.5", std::to_string(bottom)).empty());
    }
}

// Values that overflow as the model runs (every scale float32's largest, every whole number the top, and norms and
// biases of 1e100, which a float64 tensor may hold) reach the integer product as inf: it gives NaN, as a float
// product would, and the model runs to its end (the sanitizers stop a NaN made an integer).
TEST_CASE("quantize: a model whose values overflow runs on to NaN, never to a NaN made an integer") {
    ModelConfig c;
    DataConfig d;
    c = fit_to_data(c, d);
    c.activation = Activation::swiglu, c.rms_norm = true;  // the gate times its partner: two overflowing factors
    Transformer model(c, 1);
    printed_by([&] { quantize_model(model, 8); });
    for (auto& [name, p] : model.parameters()) {
        if (!model.integers.count(name)) {
            std::fill(p->value.data.begin(), p->value.data.end(), 1e100);
            continue;
        }
        Quantized Q = *model.integers.at(name);
        std::fill(Q.scales.begin(), Q.scales.end(), double(FLT_MAX));
        std::fill(Q.q.begin(), Q.q.end(), int8_t(127));
        set_quantized(model, *p, name, std::move(Q));
    }
    multiply_in_integers(model);
    const Dataset data(d, {}, 10, 5);
    const Inputs in = inputs_of(data.held_out, 0, 10);
    const Matrix logits = model.forward(in.sources, in.targets_in);
    CHECK(std::any_of(logits.data.begin(), logits.data.end(), [](double v) { return std::isnan(v); }));
    CHECK(evaluate(model, data.held_out).total == 10);
}

// The writing side: a float model whose weights would give a group a scale beyond float32's range is refused before
// any matrix is quantized (nothing printed, the model as it was), at the width whose divisor is too small for it.
TEST_CASE("quantize: a model whose scale would not fit a float32 is refused before quantizing") {
    ModelConfig c;
    DataConfig d;
    Transformer model = small_trained_model(c, d);
    const std::string name = "encoder.1.self_attn.W_v";  // a matrix of a product
    Param* found = nullptr;
    for (auto& [n, p] : model.parameters())
        if (n == name) found = p;
    REQUIRE(found);
    Param& W = *found;
    W.value.data[5] = 1e50;
    std::string error;
    CHECK(printed_by([&] {
              try {
                  quantize_model(model, 8);
              } catch (const UsageError& e) {
                  error = e.message;
              }
          }).empty());
    CHECK(error == "--quantize 8: tensor '" + name + "' holds a weight of 1e+50, whose group's "
                   "scale 7.87402e+47 would not fit a float32 (at most 3.40282e+38: at 8 bits a weight may be "
                   "4.32159e+40 in size); this model cannot be quantized: train it again, or keep it in float64");
    CHECK(model.integers.empty());
    CHECK(model.config.bits == 0);
    W.value.data[5] = 4e40;  // a scale of 3.1e38 at 8 bits; 5e39 at 4
    error.clear();
    try {
        quantize_model(model, 4);
    } catch (const UsageError& e) {
        error = e.message;
    }
    CHECK(contains(error, "--quantize 4: tensor"));
    printed_by([&] { quantize_model(model, 8); });
    CHECK(model.config.bits == 8);
    CHECK(unstorable(model).empty());  // its weights, 127 scales of 3.1e38 at most, are a checkpoint's
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

// Quantizing composes with experts (chapter 11): the router's W and every expert's matrices are matrices of a
// product, quantized as any other. What differs from the float model of the same dequantized weights is the integer
// product's other rounding, of each activation row to 8 bits (matrix.hpp's last section): the logits move a little,
// and now and then a row's scores cross and it goes to another expert, which moves them more. Measured on the default
// sort, E = 4, K = 2, one shared expert, the balance loss, 300 SGD steps (exact-match about 71%): at 8 bits 57 of the
// 10,000 rows of a teacher-forced pass over the held-out set change experts, the logits stay within 0.13 of the
// float twin's on every sequence whose rows all kept their experts and move up to 1.16 on the others, and greedy
// decoding gives the float twin's output on 995 of 1,000 inputs (4 bits: 65 rows, 0.19 and 1.10, 991). Its
// quantized file reads back to the same bytes.
TEST_CASE("quantize: an experts model decodes as the float model of its dequantized weights, routes nearly alike") {
    DataConfig d;
    Dataset data(d);
    ModelConfig c = fit_to_data(ModelConfig(), d);
    c.experts = 4, c.top_k_asked = 2, c.shared_experts = 1, c.balance = 0.01;
    Transformer model(c, 3);
    TrainConfig t;
    t.lr = 0.2, t.schedule = Schedule::constant;
    TrainState state(t, 3);
    for (long step = 1; step <= 300; step++) train_step(model, data, t, state, 300);
    const std::string float_text = checkpoint_text(model, Kept(d));
    struct Want { int bits, quantized_exact, float_exact, same_outputs, same_routes, rows; double worst_alike; };
    for (Want w : {Want{8, 714, 713, 995, 9943, 10000, 0.14}, Want{4, 763, 758, 991, 9935, 10000, 0.19}}) {
        INFO("bits " << w.bits);
        std::istringstream in(float_text);
        Kept kept;
        Transformer quantized = read_kept(in, "--load m.txt", kept);
        printed_by([&] { quantize_model(quantized, w.bits); });
        const std::string text = checkpoint_text(quantized, kept);
        std::istringstream again(text);
        Kept kept_again;
        Transformer back = read_kept(again, "--load q.txt", kept_again);
        CHECK(checkpoint_text(back, kept_again) == text);
        std::istringstream twin_in(text);  // the float twin: the same file, its integer products dropped
        Kept twin_kept;
        Transformer twin = read_kept(twin_in, "--load q.txt", twin_kept);
        const int quantized_tensors = int(twin.integers.size());
        twin.integers.clear();
        each_linear(twin, [](const std::string&, Linear& linear) { linear.product = Owned<Product>(); });  // untied
        CHECK(quantized_tensors == 36);  // embed.table, out.W, 12 of attention, 2 routers, 2 x 5 experts' W_1 and W_2
        twin.config.bits = 0;
        const std::vector<std::vector<int>> q_out = decode_all(quantized, data.held_out),
                                            f_out = decode_all(twin, data.held_out);
        int same_outputs = 0, quantized_exact = 0, float_exact = 0;
        for (std::size_t k = 0; k < data.held_out.size(); k++) {
            same_outputs += q_out[k] == f_out[k];
            quantized_exact += q_out[k] == data.held_out[k].target;
            float_exact += f_out[k] == data.held_out[k].target;
        }
        // Teacher-forced on the whole held-out set: the logits' largest difference, and each block's rows that kept
        // the same experts in the same order.
        Inputs all = inputs_of(data.held_out, 0, data.held_out.size());
        const Matrix q_logits = quantized.forward(all.sources, all.targets_in);
        std::vector<std::vector<std::vector<int>>> q_chosen;
        auto routes = [](Transformer& m) {
            std::vector<std::vector<std::vector<int>>> chosen;
            for (EncoderBlock& b : m.encoder) chosen.push_back(dynamic_cast<Experts&>(*b.ffn).chosen);
            for (DecoderBlock& b : m.decoder) chosen.push_back(dynamic_cast<Experts&>(*b.ffn).chosen);
            return chosen;
        };
        q_chosen = routes(quantized);
        const Matrix f_logits = twin.forward(all.sources, all.targets_in);
        const std::vector<std::vector<std::vector<int>>> f_chosen = routes(twin);
        // A sequence routed alike: each of its rows kept the same experts in the same order, in every block.
        const int n_seq = int(all.sources.size());
        std::vector<bool> alike(n_seq, true);
        int same_routes = 0, rows = 0;
        for (std::size_t b = 0; b < q_chosen.size(); b++) {
            const int L = int(q_chosen[b].size()) / n_seq;  // each sequence's rows in this block
            for (std::size_t r = 0; r < q_chosen[b].size(); r++) {
                const bool same = q_chosen[b][r] == f_chosen[b][r];
                same_routes += same, rows++;
                if (!same) alike[r / L] = false;
            }
        }
        double worst_alike = 0.0, worst_other = 0.0;  // the logits' largest difference, on each kind of sequence
        const int T = q_logits.rows / n_seq;
        for (int r = 0; r < q_logits.rows; r++)
            for (int v = 0; v < q_logits.cols; v++) {
                double& worst = alike[r / T] ? worst_alike : worst_other;
                worst = std::max(worst, std::fabs(q_logits.at(r, v) - f_logits.at(r, v)));
            }
        std::printf("  quantize with experts, %d bits: exact-match %d (float twin %d) of 1000, %d outputs alike; "
                    "%d of %d rows routed alike; logits within %.4f where a sequence's rows all routed alike, %.4f "
                    "elsewhere\n", w.bits, quantized_exact, float_exact, same_outputs, same_routes, rows, worst_alike,
                    worst_other);
        CHECK(quantized_exact == w.quantized_exact);
        CHECK(float_exact == w.float_exact);
        CHECK(same_outputs == w.same_outputs);
        CHECK(same_routes == w.same_routes);
        CHECK(rows == w.rows);
        CHECK(worst_alike < w.worst_alike);
        CHECK(worst_other > w.worst_alike);
    }
}
