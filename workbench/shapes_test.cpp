// workbench/shapes_test.cpp -- tests of --trace-shapes (shapes.hpp); --params with experts: inspect_test.cpp.
#include "test_helpers.hpp"
#include "shapes.hpp"

// --trace-shapes runs a training batch, as the code runs it: every row count is n_seq times a length, every weight
// the model's own. Three sequences of 4 (S = T = 4) through d_model 8, d_ff 12; then a decoder-only model with
// SwiGLU and one key-value head, whose one stack reads L = 8 rows a sequence.
TEST_CASE("--trace-shapes: the shapes of a stacked batch") {
    DataConfig d = few_digits();
    Transformer model(small_model(d), 3);
    std::vector<Example> batch = batch_of(d, 20, 5, 4, 3);
    std::string text = printed_by([&] { trace_shapes(model, batch); });
    INFO(text);
    CHECK(contains(text, "n_seq = 3, S = 4, T = 4, d_model = 8, n_heads = 2, d_k = 4, d_ff = 12, vocab = 7\n"));
    CHECK(contains(text, "queries read LN(x)                                 (n_seq S, d_model)             (12, 8)"));
    CHECK(contains(text, "one sequence's head: Q_h (columns h*d_k ..)        (S, d_k)                       (4, 4)"));
    CHECK(contains(text, "hidden = LN(y) W_1 + b_1                           (n_seq T, d_ff)                (12, 12)"));
    CHECK(contains(text, "final LayerNorm                                    (n_seq T, d_model)             (12, 8)"));
    CHECK(contains(text, "logits = LN(y) W_out + b_out                       (n_seq T, vocab)               (12, 7)"));

    ModelConfig c = small_model(d);
    c.arch = Arch::decoder_only, c.enc_layers = 0, c.activation = Activation::swiglu, c.kv_heads_asked = 1, c.max_len = 8;
    Transformer whole(c, 3);
    text = printed_by([&] { trace_shapes(whole, batch); });
    INFO(text);
    CHECK(contains(text, ", d_h = 2 d_ff / 3 = 8\n"));
    CHECK(contains(text, "W_k, W_v (each; 1 key-value head)                  (d_model, kv_heads d_k)        (8, 4)"));
    CHECK(contains(text, "K = LN(y) W_k, V = LN(y) W_v                       (n_seq L, kv_heads d_k)        (24, 4)"));
    CHECK(contains(text, "P_h = softmax(masked(Q_h K_h^T / sqrt(d_k)))       (L, L)                         (8, 8)"));
    CHECK(contains(text, "partner = LN(y) W_3 + b_3                          (n_seq L, d_h)                 (24, 8)"));
    CHECK(contains(text, "the answer's rows: the last T of each sequence     (n_seq T, d_model)             (12, 8)"));
    CHECK(contains(text, "self-attention K, V (each), after t tokens         (n_seq t, kv_heads d_k)        (3 t, 4)"));
    CHECK(!contains(text, "cross-attention"));
}
