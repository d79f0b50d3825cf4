// workbench/exercise_blocks_test.cpp -- tests of "Write it yourself"'s blocks' checks (exercise_blocks.hpp): each
// names the kind of each planted bug, exercise 9's eight and one more an exercise, each planted into a copy of its
// exercise's answer here (which is why a hand-out leaves this file out).
#include "test_helpers.hpp"
#include "exercise_blocks.hpp"

namespace ex = exercises;

// The kind the check found for one tensor of one check (the first row of that name).
inline ex::Kind kind_of(const ex::Checker& c, const std::string& check, const std::string& tensor) {
    for (const ex::Row& r : c.rows)
        if (r.check == check && r.tensor == tensor) return r.verdict.kind;
    FAIL("no row " << check << " / " << tensor);
    return ex::Kind::right;
}
// The planted bugs: a copy of each answer with one mistake, run through the exercise's check, and the kind it names.
// Exercise 9's are marked "bug N".
inline void softmax_without_row_term(const Matrix& dP, const Matrix& P, Matrix& dX) {  // bug 5
    for (std::size_t i = 0; i < dX.data.size(); i++) dX.data[i] += P.data[i] * dP.data[i];
}
inline void softmax_assigning(const Matrix& dP, const Matrix& P, Matrix& dX) {  // dX = where dX += belongs
    Matrix mine(dX.rows, dX.cols);
    softmax_rows_backward(dP, P, mine);
    dX = mine;
}
TEST_CASE("exercises: planted bugs in softmax, attention, dropout and cross-entropy are named") {
    ex::Checker c;
    c.quiet = true;
    Rng rng(1);
    Matrix X = scale(ex::random_matrix(4, 5, rng), 3.0), dX(4, 5);
    using Backward = void (*)(const Matrix&, const Matrix&, Matrix&);
    for (auto [name, backward] : {std::pair<std::string, Backward>{"no row term", softmax_without_row_term},
                                  {"assigns", softmax_assigning}})
        ex::check_block(c, name, {{"X", &X, &dX}}, [&] { return softmax_rows(X); },
                        [&, backward = backward](const Matrix& G) { backward(G, softmax_rows(X), dX); });
    CHECK(kind_of(c, "no row term", "X") == ex::Kind::unknown);
    CHECK(kind_of(c, "assigns", "X") == ex::Kind::assigns);

    // Attention at d_k = 4: without the 1/sqrt(d_k) (bug 4) Q and K come out 2 times too large; without the
    // softmax's backward (d_scores = dP), a term is missing.
    Matrix Q = ex::random_matrix(3, 4, rng), K = ex::random_matrix(5, 4, rng), V = ex::random_matrix(5, 4, rng);
    Matrix dQ(3, 4), dK(5, 4), dV(5, 4);
    SavedAttention saved;
    for (bool scaled : {false, true})
        ex::check_block(c, scaled ? "without softmax" : "without 1/sqrt(d_k)", {{"Q", &Q, &dQ}, {"K", &K, &dK}},
                        [&] { return attention(Q, K, V, Matrix(), saved); },
                        [&](const Matrix& G) {
                            Matrix dP(3, 5), d_scores(3, 5), unused(5, 4);
                            matmul_backward(G, saved.P, saved.V, dP, unused);
                            if (scaled) scale_backward(dP, 0.5, d_scores);
                            else softmax_rows_backward(dP, saved.P, d_scores);
                            matmul_bt_backward(d_scores, saved.Q, saved.K, dQ, dK);
                        });
    CHECK(kind_of(c, "without 1/sqrt(d_k)", "Q") == ex::Kind::factor);
    CHECK(c.rows[2].verdict.factor == doctest::Approx(2.0));
    CHECK(kind_of(c, "without 1/sqrt(d_k)", "K") == ex::Kind::factor);
    CHECK(kind_of(c, "without softmax", "Q") == ex::Kind::unknown);

    // Dropout that zeroes the dropped entries but forgets the 1 / (1 - p) of the kept ones: a factor of 0.7.
    Matrix x = ex::random_matrix(4, 6, rng), dx(4, 6), keep;
    ex::check_block(c, "dropout unscaled", {{"x", &x, &dx}},
                    [&] {
                        Rng draws(6);
                        return dropout(x, 0.3, &draws, keep);
                    },
                    [&](const Matrix& G) {
                        for (std::size_t i = 0; i < G.data.size(); i++) dx.data[i] += keep.data[i] > 0 ? G.data[i] : 0;
                    });
    CHECK(kind_of(c, "dropout unscaled", "x") == ex::Kind::factor);
    CHECK(c.rows.back().verdict.factor == doctest::Approx(0.7));

    // Cross-entropy (T = 4) without the mean's 1/T (bug 8): 4 times too large. With label smoothing, a target row
    // that stays one-hot: a term missing.
    Matrix logits = ex::random_matrix(4, 7, rng, 4.0), d_logits(4, 7), unused(4, 7);
    const std::vector<int> target = {0, 6, 3, 3};
    c.gradients("cross_entropy without 1/T", {{"logits", &logits, &d_logits}},
                [&] { return cross_entropy(logits, target, 1.0, unused); },
                [&] {
                    Matrix mine(4, 7);
                    cross_entropy(logits, target, 1.0, mine);
                    accumulate(d_logits, scale(mine, 4.0));
                });
    CHECK(kind_of(c, "cross_entropy without 1/T", "logits") == ex::Kind::factor);
    CHECK(c.rows.back().verdict.factor == doctest::Approx(4.0));
    CHECK(c.rows.back().verdict.worst == doctest::Approx(0.6));  // exercise 9's 0.6
    c.gradients("cross_entropy one-hot", {{"logits", &logits, &d_logits}},
                [&] { return cross_entropy(logits, target, 1.0, unused, 0.1); },
                [&] { cross_entropy(logits, target, 1.0, d_logits); });  // the smoothing forgotten
    CHECK(kind_of(c, "cross_entropy one-hot", "logits") == ex::Kind::unknown);
}

// LayerNorm::backward with two mistakes it can take: no mean term (bug 2: the same error across each row), and beta's
// gradient with its sign flipped (bug 1's mistake, in the bias of this exercise). RMSNorm's, with LayerNorm's mean
// term kept.
inline Matrix norm_backward(const Matrix& dy, Param& gamma, Param* beta, const Matrix& x_hat,
                            const std::vector<double>& rstd, bool mean_term, double beta_sign) {
    const int n = dy.rows, d = dy.cols;
    Matrix dx(n, d);
    for (int i = 0; i < n; i++) {
        double mean_d = 0.0, mean_d_xhat = 0.0;
        for (int j = 0; j < d; j++) {
            gamma.grad.at(0, j) += dy.at(i, j) * x_hat.at(i, j);
            if (beta) beta->grad.at(0, j) += beta_sign * dy.at(i, j);
            mean_d += dy.at(i, j) * gamma.value.at(0, j) / d;
            mean_d_xhat += dy.at(i, j) * gamma.value.at(0, j) * x_hat.at(i, j) / d;
        }
        for (int j = 0; j < d; j++)
            dx.at(i, j) = rstd[i] * (dy.at(i, j) * gamma.value.at(0, j) - (mean_term ? mean_d : 0.0) -
                                     x_hat.at(i, j) * mean_d_xhat);
    }
    return dx;
}
TEST_CASE("exercises: planted bugs in LayerNorm and RMSNorm are named") {
    ex::Checker c;
    c.quiet = true;
    Rng rng(4);
    LayerNorm layer(8);
    RMSNorm rms(8);
    ex::jitter(ex::params_of(layer, "norm"), rng, 0.3);
    ex::jitter(ex::params_of(rms, "norm"), rng, 0.3);
    Matrix x = ex::random_matrix(4, 8, rng), dx(4, 8);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) x.at(i, j) = x.at(i, j) * (i + 1) + i;
    ex::check_block(c, "LayerNorm", ex::tensors_of(ex::params_of(layer, "norm"), {{"x", &x, &dx}}),
                    [&] { return layer.forward(x); },
                    [&](const Matrix& G) {
                        accumulate(dx, norm_backward(G, layer.gamma, &layer.beta, layer.x_hat, layer.rstd, false, -1));
                    });
    CHECK(kind_of(c, "LayerNorm", "x") == ex::Kind::per_row);
    CHECK(kind_of(c, "LayerNorm", "norm.gamma") == ex::Kind::right);
    CHECK(kind_of(c, "LayerNorm", "norm.beta") == ex::Kind::sign);
    ex::check_block(c, "RMSNorm", ex::tensors_of(ex::params_of(rms, "norm"), {{"x", &x, &dx}}),
                    [&] { return rms.forward(x); },
                    [&](const Matrix& G) {
                        accumulate(dx, norm_backward(G, rms.gamma, nullptr, rms.x_hat, rms.rstd, true, 1));
                    });
    CHECK(kind_of(c, "RMSNorm", "x") == ex::Kind::per_row);
    CHECK(kind_of(c, "RMSNorm", "norm.gamma") == ex::Kind::right);
}

// The embedding's scatter-add: overwriting (bug 6) loses what the rows held, and the second of a token seen twice;
// forgetting the sqrt(d_model) multiplier is a constant factor, 1 / sqrt(8).
TEST_CASE("exercises: planted bugs in the embedding's scatter-add are named") {
    ex::Checker c;
    c.quiet = true;
    ModelConfig m;
    TrainConfig t;
    ex::exercise_named("embedding").variants[0].choose(m, t);
    Rng rng(5);
    Embedding embed(ex::small_config(m), rng);
    const std::vector<int> tokens = {3, 1, 3, 6, 1}, rows = {0, 1, 2, 3, 4};
    for (bool overwrite : {true, false})
        ex::check_block(c, overwrite ? "overwrites" : "no multiplier", ex::tensors_of(ex::params_of(embed, "embed")),
                        [&] { return embed.forward(tokens, rows); },
                        [&](const Matrix& dX) {
                            for (int r = 0; r < dX.rows; r++)
                                for (int col = 0; col < dX.cols; col++) {
                                    double& g = embed.table.grad.at(tokens[r], col);
                                    g = overwrite ? embed.multiplier * dX.at(r, col) : g + dX.at(r, col);
                                    embed.learned.grad.at(rows[r], col) += dX.at(r, col);
                                }
                        });
    CHECK(kind_of(c, "overwrites", "embed.table") == ex::Kind::assigns);
    CHECK(kind_of(c, "overwrites", "embed.positions") == ex::Kind::right);
    CHECK(kind_of(c, "no multiplier", "embed.table") == ex::Kind::factor);
    CHECK(c.rows[2].verdict.factor == doctest::Approx(1.0 / std::sqrt(8.0)));
}

// MultiHeadAttention::backward, copied with one change at a time: bug 3, `=` where the shared input x_kv needs `+=`
// (the keys' share lost); only the first sequence's heads (the rows of the second get nothing); and rotary positions
// turned the wrong way back (sign +1: a query or key at position 0 is not turned, so only its rows come out right), or
// turned back from position 1.
enum class HeadsBug { assigns, first_sequence, turned_forward, from_one, none };
inline void heads_backward(MultiHeadAttention& m, const Matrix& d_out, Matrix& d_xq, Matrix& d_xkv, HeadsBug bug) {
    Matrix d_joined = m.W_o.backward(d_out);
    int n_seq = int(m.saved.size()) / m.n_heads, T = d_joined.rows / n_seq, S = m.saved[0].K.rows;
    int d_k = m.d_k, kv_width = m.W_k.W.value.cols;
    Matrix dQ(n_seq * T, m.n_heads * d_k), dK(n_seq * S, kv_width), dV(n_seq * S, kv_width);
    for (int e = 0; e < (bug == HeadsBug::first_sequence ? 1 : n_seq); e++)
        for (int h = 0; h < m.n_heads; h++) {
            int col = h * d_k, kv_col = m.heads->key_head(h) * d_k;
            Matrix dQ_h(T, d_k), dK_h(S, d_k), dV_h(S, d_k);
            attention_backward(take_block(d_joined, e * T, T, col, d_k), m.saved[e * m.n_heads + h], dQ_h, dK_h, dV_h);
            add_into_block(dQ_h, e * T, col, dQ);
            add_into_block(dK_h, e * S, kv_col, dK);
            add_into_block(dV_h, e * S, kv_col, dV);
        }
    const double back = bug == HeadsBug::turned_forward ? 1.0 : -1.0;
    const int first = bug == HeadsBug::from_one ? 1 : 0;
    const auto* positions = dynamic_cast<const PositionsInAttention*>(m.heads.get());
    if (positions && positions->rotary) {  // the rotary exercise's: --pos rope
        dQ = rotate_pairs(std::move(dQ), T, first, d_k, back);
        dK = rotate_pairs(std::move(dK), S, first, d_k, back);
    }
    accumulate(d_xq, m.W_q.backward(dQ));
    if (bug == HeadsBug::assigns) {
        d_xkv = m.W_v.backward(dV);
        return;
    }
    accumulate(d_xkv, m.W_k.backward(dK));
    accumulate(d_xkv, m.W_v.backward(dV));
}
TEST_CASE("exercises: planted bugs in the heads' split and join and in rotary positions are named") {
    ex::Checker c;
    c.quiet = true;
    for (HeadsBug bug : {HeadsBug::assigns, HeadsBug::first_sequence, HeadsBug::turned_forward}) {
        ModelConfig m;
        TrainConfig t;
        ex::exercise_named(bug == HeadsBug::turned_forward ? "rotary" : "heads").variants[0].choose(m, t);
        Rng rng(3);
        MultiHeadAttention mha(ex::small_config(m), rng, true);
        Matrix x = ex::random_matrix(8, 8, rng), dx(8, 8), causal = stack_rows({causal_mask(4), causal_mask(4)});
        Matrix memory = ex::random_matrix(8, 8, rng), d_memory(8, 8);
        const std::string name[] = {"assigns", "first sequence", "turned forward"};
        ex::Clues clues;
        clues.sequence_rows = 4;
        ex::check_block(c, name[int(bug)],
                        ex::tensors_of(ex::params_of(mha, "attn"), {{"x", &x, &dx}, {"memory", &memory, &d_memory}}),
                        [&] { return mha.forward(x, memory, causal, 2); },
                        [&](const Matrix& G) { heads_backward(mha, G, dx, d_memory, bug); }, clues);
    }
    CHECK(kind_of(c, "assigns", "memory") == ex::Kind::assigns);  // bug 3
    CHECK(kind_of(c, "assigns", "x") == ex::Kind::right);
    CHECK(kind_of(c, "first sequence", "x") == ex::Kind::some_rows);
    for (const ex::Row& r : c.rows)
        if (r.check == "first sequence" && r.tensor == "x")
            CHECK(r.verdict.words == "only rows 5 to 7 wrong, all in the second of 2 sequences of 4 rows");
    CHECK(kind_of(c, "turned forward", "x") == ex::Kind::some_rows);
    for (const ex::Row& r : c.rows)
        if (r.check == "turned forward" && r.tensor == "x")  // rows 0 and 4 at position 0
            CHECK(r.verdict.words == "only rows 1 to 3, 5 to 7 wrong: positions 1 to 3 of each sequence of 4 rows");

    // The rotary check proper (W_q = W_k = I): a turn the wrong way and positions counted from 1 are named.
    for (HeadsBug bug : {HeadsBug::none, HeadsBug::turned_forward, HeadsBug::from_one})
        ex::rotary_check(c, ModelConfig(), [bug](MultiHeadAttention& m, const Matrix& G, Matrix& dx_q, Matrix& dx_kv) {
            heads_backward(m, G, dx_q, dx_kv, bug);
        });
    std::vector<ex::Verdict> x_q;
    for (const ex::Row& r : c.rows)
        if (r.tensor == "x_q") x_q.push_back(r.verdict);
    REQUIRE(x_q.size() == 3);
    CHECK(x_q[0].kind == ex::Kind::right);
    CHECK(x_q[1].kind == ex::Kind::named);
    CHECK(contains(x_q[1].words, "turned the wrong way"));
    CHECK(x_q[2].kind == ex::Kind::named);
    CHECK(contains(x_q[2].words, "counted from 1"));
}

// SwiGLU without the partner's path into x (x feeds W_1 and W_3: a term missing), and DecoderBlock::backward that
// hands cross-attention's keys and values a gradient of its own instead of d_memory (the memory gets nothing).
TEST_CASE("exercises: planted bugs in SwiGLU and in the decoder block are named") {
    ex::Checker c;
    c.quiet = true;
    Rng rng(9);
    SwiGLU ffn(8, 12, true, rng);
    Matrix x = ex::random_matrix(4, 8, rng), dx(4, 8);
    ex::check_block(c, "SwiGLU", ex::tensors_of(ex::params_of(ffn, "ffn"), {{"x", &x, &dx}}),
                    [&] { return ffn.forward(x); },
                    [&](const Matrix& G) {
                        Matrix d_act = ffn.W_2.backward(G), d_gate(4, 8), d_partner(4, 8), d_hidden(4, 8);
                        multiply_backward(d_act, silu(ffn.hidden), ffn.partner, d_gate, d_partner);
                        silu_backward(d_gate, ffn.hidden, d_hidden);
                        accumulate(dx, ffn.W_1.backward(d_hidden));
                        ffn.W_3.backward(d_partner);  // its dx dropped
                    });
    CHECK(kind_of(c, "SwiGLU", "x") == ex::Kind::unknown);
    CHECK(kind_of(c, "SwiGLU", "ffn.W_3") == ex::Kind::right);

    DecoderBlock block(ex::small_config(ModelConfig()), rng);
    Matrix y = ex::random_matrix(4, 8, rng), dy(4, 8), memory = ex::random_matrix(5, 8, rng), d_memory(5, 8);
    Matrix causal = causal_mask(4), mask = padding_mask(4, {ex::PADDED_SOURCE});
    ex::check_block(c, "DecoderBlock",
                    ex::tensors_of(ex::params_of(block, "block"), {{"y", &y, &dy}, {"memory", &memory, &d_memory}}),
                    [&] { return block.forward(y, memory, causal, mask); },
                    [&](const Matrix& G) {
                        Matrix dy2 = block.ffn_sub.backward(G, [&](const Matrix& d) { return block.ffn->backward(d); });
                        Matrix dy1 = block.cross_sub.backward(dy2, [&](const Matrix& d) {
                            Matrix d_queries(d.rows, d.cols), lost(5, 8);
                            block.cross_attn.backward(d, d_queries, lost);
                            return d_queries;
                        });
                        accumulate(dy, block.self_sub.backward(dy1, [&](const Matrix& d) {
                            return block.self_attn.backward_self(d);
                        }));
                    });
    CHECK(kind_of(c, "DecoderBlock", "memory") == ex::Kind::zero);
    CHECK(kind_of(c, "DecoderBlock", "y") == ex::Kind::right);
}
