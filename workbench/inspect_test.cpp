// workbench/inspect_test.cpp -- tests of --inspect and --test-len (inspect.hpp), and of all three with experts.
#include "test_helpers.hpp"
#include "inspect.hpp"

// --inspect silences a head by zeroing its rows of W_o. That must be the same as leaving the head's
// output out of the join, which zeroing its slice of W_v does in another way (its O_h = P V_h is then
// 0): the logits agree bit for bit, differ from the model's own, and the model comes back unchanged.
TEST_CASE("inspect: a head switched off is left out of the join, and comes back unchanged") {
    DataConfig d = few_digits();
    Transformer model(small_model(d), 21);
    Dataset data(d, {}, 40, 5);
    const std::vector<int> source = {5, 3, 1, 4}, target_in = {start_token(model.config.vocab), 1, 3, 4};
    Matrix before = model.forward({source}, {target_in});
    MultiHeadAttention& attn = model.decoder[0].cross_attn;
    const Matrix W_o = attn.W_o.W.value, W_v = attn.W_v.W.value;
    for (int r = attn.d_k; r < 2 * attn.d_k; r++)  // head 1 of 2: rows d_k .. 2 d_k - 1 of W_o
        for (int col = 0; col < W_o.cols; col++) attn.W_o.W.value.at(r, col) = 0.0;
    Matrix without_rows = model.forward({source}, {target_in});
    attn.W_o.W.value = W_o;
    for (int row = 0; row < W_v.rows; row++)  // head 1's values: columns d_k .. 2 d_k - 1 of W_v
        for (int col = attn.d_k; col < 2 * attn.d_k; col++) attn.W_v.W.value.at(row, col) = 0.0;
    Matrix without_values = model.forward({source}, {target_in});
    attn.W_v.W.value = W_v;
    CHECK(without_rows.data == without_values.data);
    CHECK(without_rows.data != before.data);

    double exact = exact_match_without_head(model, attn, 1, data.held_out).exact;
    CHECK(attn.W_o.W.value.data == W_o.data);
    CHECK(model.forward({source}, {target_in}).data == before.data);
    CHECK(exact >= 0.0);
    CHECK(exact <= 1.0);
}

// The pointer check decodes step by step as greedy_decode_cached does: it counts one step for every digit
// the decoding emits, and no more hits than steps for any head.
TEST_CASE("inspect: the pointer check counts every emitted digit once") {
    DataConfig d = few_digits();
    Transformer model(small_model(d), 8);
    Dataset data(d, {}, 40, 5);
    long digits = 0;
    for (const std::vector<int>& out : decode_all(model, data.held_out))
        for (int t : out) digits += t != PAD && t != start_token(model.config.vocab);
    std::vector<long> hits;
    CHECK(pointer_hits(model, data.held_out, hits) == digits);
    REQUIRE(hits.size() == std::size_t(model.config.n_heads));
    for (long h : hits) CHECK(h <= digits);
}

// With experts (chapter 11): --trace-shapes shows the router, top-k and one expert on its rows, --params the weights
// a token uses against the total, --inspect each layer's load (the shares of the K n choices, summing to 100%).
TEST_CASE("--trace-shapes, --params and --inspect with experts") {
    DataConfig d = few_digits();
    ModelConfig c = small_model(d);
    c.experts = 4, c.top_k_asked = 2, c.shared_experts = 1;
    Transformer model(c, 3);
    std::vector<Example> batch = batch_of(d, 20, 5, 4, 3);
    std::string text = printed_by([&] { trace_shapes(model, batch); });
    INFO(text);
    CHECK(contains(text, "W_router (no bias)                                 (d_model, E)                   (8, 4)"));
    CHECK(contains(text, "scores = LN(y) W_router                            (n_seq T, E)                   (12, 4)"));
    CHECK(contains(text, "top-k: K experts a row; gate = softmax of the K    (n_seq T, K)                   (12, 2)"));
    CHECK(contains(text, "(sum n_i = K n_seq T = 24; even: n_i = 6)"));
    CHECK(contains(text, "hidden = its rows W_1 + b_1                        (n_i, d_ff)                    (6, 12)"));
    CHECK(contains(text, "and 1 shared expert on every row"));
    text = printed_by([&] { print_params(model); });
    long total = 0, one_expert = 0;
    for (auto& [name, p] : model.parameters()) {
        total += long(p->value.data.size());
        if (name.rfind("decoder.0.ffn.experts.0.", 0) == 0) one_expert += long(p->value.data.size());
    }
    CHECK(one_expert == 8 * 12 + 12 + 12 * 8 + 8);  // W_1, b_1, W_2, b_2
    const long active = total - 2 * (4 - 2) * one_expert;  // two layers, each with 2 of its 4 experts idle a token
    CHECK(contains(text, fmt("a token goes through 2 of the 4: active per token %ld of the %ld)", active, total)));
    Dataset data(d, {}, 50, 5);
    text = printed_by([&] { inspect_experts(model, data.held_out); });
    INFO(text);
    CHECK(contains(text, "  encoder.0  load by expert:"));
    CHECK(contains(text, "  decoder.0  load by expert:"));
    double shares = 0.0;
    for (int taken : dynamic_cast<Experts&>(*model.decoder[0].ffn).load()) shares += taken;
    const Experts& moe = dynamic_cast<Experts&>(*model.decoder[0].ffn);
    CHECK(shares == double(moe.K) * moe.chosen.size());  // every row's K choices counted once
}

// A score of nothing is said as such: before, a length whose every input training may draw printed
// "0.0% (0/0)", and an --inspect of no decoding step "0.0%". A length training never drew is scored on
// all its inputs, however few (one input of length 3 here; the held-out cap left none before).
TEST_CASE("--test-len and --inspect: n/a where nothing was scored") {
    DataConfig d;
    d.max_digit = 1, d.seq_len = 2, d.min_len = 1;
    ModelConfig c = fit_to_data(small_model(d), d);
    c.max_len = 3;
    Transformer model(c, 1);
    Dataset data(d);
    std::string text = printed_by([&] {
        length_report(model, data, 3, DecodeConfig());
        inspect(model, {});
    });
    INFO(text);
    CHECK(contains(text, "length  2:   n/a (no input of this length is held out"));
    CHECK(contains(text, "/1)   longer than any training input"));
    CHECK(!contains(text, "(0/0)"));
    CHECK(contains(text, "--- inspect: n/a"));
    CHECK(distinct_inputs(d, 200, 7).size() == 2u);  // [1] and [1, 1]: every input of lengths 1 and 2
}
