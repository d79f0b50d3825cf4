// chapters/07_llama_layer.hpp -- one Llama layer, read top to bottom in one place: forward, then backward.
//
// What it adds: the layer --llama builds (decoder-only, RMSNorm, rotary positions, grouped-query attention, SwiGLU,
// no biases), written as one function in the order llama2.c's run.c forward takes (Karpathy 2023, after Touvron et
// al. 2023's Llama 2), then its backward as the mirror, each step quoting the line it undoes. The model runs the same
// layer through a DecoderBlock's parts, Sublayer, MultiHeadAttention, RMSNorm and SwiGLU (chapters 4 to 6); this
// chapter reads one DecoderBlock's weights and calls the same primitives in the same order, so
// 07_llama_layer_test.cpp finds every output and every gradient equal to the model's, bit for bit. What it changes in
// the first part: nothing. Out of scope here: dropout and attention in tiles (chapter 8); decoding's cache (ch. 10).
#pragma once

#include <cmath>
#include <vector>

#include "../model.hpp"  // DecoderBlock, Mask, MASKED (this file is read where model.hpp includes it)

// Legend: n_seq sequences of L positions each (decoder-only: the source, START and the answer, L = S + T), one
// stack of n_seq L rows; d_k = d_model / n_heads; kv_heads key/value heads (W_k is kv_heads d_k wide), each read by
// kv_mul = n_heads / kv_heads query heads (Ainslie et al. 2023); d_h SwiGLU's hidden width. What the forward saves:
struct LlamaLayerSaved {
    int n_seq = 1;
    Matrix x, x1;                      // (n_seq L, d_model): the layer's input, and the input plus attention
    std::vector<double> rstd1, rstd2;  // (n_seq L): each row's 1 / sqrt(mean(x^2) + eps), of x and of x1
    Matrix xb, xb2;                    // (n_seq L, d_model): rmsnorm(x), rmsnorm(x1)
    Matrix Q, K, V;                    // Q (n_seq L, n_heads d_k); K, V (n_seq L, kv_heads d_k); Q, K turned
    std::vector<Matrix> P;             // (L, L) each: sequence e's head h's attention weights at [e n_heads + h]
    Matrix joined;                     // (n_seq L, d_model): every head's weighted sum of v, side by side
    Matrix hidden, partner, glu;       // (n_seq L, d_h): xb2 W_1, xb2 W_3, silu(hidden) * partner
};

// rmsnorm (Zhang & Sennrich 2019), as run.c's: y = gamma * x * rstd, rstd = 1 / sqrt(mean(x^2) + eps).
inline Matrix llama_rmsnorm(const Matrix& x, const Param& gamma, std::vector<double>& rstd) {  // (n, d_model)
    Matrix y(x.rows, x.cols);
    rstd.assign(x.rows, 0.0);
    for (int i = 0; i < x.rows; i++) {
        double mean_square = 0.0;
        for (int j = 0; j < x.cols; j++) mean_square += x.at(i, j) * x.at(i, j) / x.cols;
        rstd[i] = 1.0 / std::sqrt(mean_square + RMSNorm::eps);
        for (int j = 0; j < x.cols; j++) y.at(i, j) = gamma.value.at(0, j) * (x.at(i, j) * rstd[i]);
    }
    return y;
}
// forward: y = gamma * x_hat, x_hat = x * rstd   so   d_gamma += dy * x_hat, d_x_hat = dy * gamma, and (chapter 4)
//          dx = rstd * (d_x_hat - x_hat * mean(d_x_hat * x_hat)): LayerNorm's backward with its mean fixed at 0
inline Matrix llama_rmsnorm_backward(const Matrix& dy, const Matrix& x, Param& gamma, const std::vector<double>& rstd) {
    // shows the answers of rmsnorm layernorm: begin (uses dy x gamma rstd)
    Matrix dx(x.rows, x.cols);
    for (int i = 0; i < x.rows; i++) {
        double mean_d_xhat = 0.0;
        for (int j = 0; j < x.cols; j++) {
            gamma.grad.at(0, j) += dy.at(i, j) * (x.at(i, j) * rstd[i]);
            mean_d_xhat += dy.at(i, j) * gamma.value.at(0, j) * (x.at(i, j) * rstd[i]) / x.cols;
        }
        for (int j = 0; j < x.cols; j++)
            dx.at(i, j) = rstd[i] * (dy.at(i, j) * gamma.value.at(0, j) - x.at(i, j) * rstd[i] * mean_d_xhat);
    }
    return dx;
    // shows the answers: end
}

// One layer: x (n_seq L, d_model) -> (n_seq L, d_model), positions 0 .. L-1 in each sequence; mask as the model's
// (Mask(true, sources): no key after its query, no PAD of the sequence's source). Reads block's weights.
inline Matrix llama_layer_forward(const DecoderBlock& block, const Matrix& x, const Mask& mask, int n_seq,
                                  LlamaLayerSaved& s) {
    const MultiHeadAttention& attn = block.self_attn;
    const SwiGLU& ffn = dynamic_cast<SwiGLU&>(*block.ffn);
    const int L = x.rows / n_seq, n_heads = attn.n_heads, d_k = attn.d_k;
    s.n_seq = n_seq, s.x = x;
    // attention rmsnorm
    s.xb = llama_rmsnorm(x, dynamic_cast<RMSNorm&>(*block.self_sub.norm).gamma, s.rstd1);
    // q k v = matmuls (no bias)
    s.Q = matmul_fast(s.xb, attn.W_q.W.value);  // (n_seq L, n_heads d_k)
    s.K = matmul_fast(s.xb, attn.W_k.W.value);  // (n_seq L, kv_heads d_k)
    s.V = matmul_fast(s.xb, attn.W_v.W.value);  // (n_seq L, kv_heads d_k)
    // RoPE: in every head, pair (2i, 2i+1) of q and k turned by the angle pos / 10000^(2i / d_k) (chapter 5)
    s.Q = rotate_pairs(std::move(s.Q), L, 0, d_k);
    s.K = rotate_pairs(std::move(s.K), L, 0, d_k);
    // multihead attention: every sequence e, every head h
    s.joined = Matrix(x.rows, n_heads * d_k);
    s.P.assign(std::size_t(n_seq) * n_heads, Matrix());
    for (int e = 0; e < n_seq; e++)
        for (int h = 0; h < n_heads; h++) {
            const int col = h * d_k, kv_col = attn.heads->key_head(h) * d_k;  // GQA: K and V head h / kv_mul
            const Matrix q = take_block(s.Q, e * L, L, col, d_k);      // (L, d_k)
            const Matrix k = take_block(s.K, e * L, L, kv_col, d_k);   // (L, d_k)
            const Matrix v = take_block(s.V, e * L, L, kv_col, d_k);   // (L, d_k)
            // scores: q . k / sqrt(d_k), every query against every key (L, L)
            Matrix scores = scale(matmul_bt_fast(q, k), 1.0 / std::sqrt(double(d_k)));
            // the causal and padding mask: a key the query may not see gets -1e9, and after the softmax exactly 0
            for (int i = 0; i < L; i++)
                for (int j = 0; j < L; j++)
                    if (!mask.sees(e, L, i, j)) scores.at(i, j) = MASKED;
            // softmax the scores to get attention weights (L, L)
            const Matrix& P = s.P[e * n_heads + h] = softmax_rows(scores);
            // weighted sum of the values, into the head's columns of joined (L, d_k)
            add_into_block(matmul_fast(P, v), e * L, col, s.joined);
        }
    // final matmul to get the output of the attention, and the residual connection back into x
    s.x1 = add(x, matmul_fast(s.joined, attn.W_o.W.value));
    // ffn rmsnorm
    s.xb2 = llama_rmsnorm(s.x1, dynamic_cast<RMSNorm&>(*block.ffn_sub.norm).gamma, s.rstd2);
    // silu(w1(x)) * w3(x) (Shazeer 2020)
    s.hidden = matmul_fast(s.xb2, ffn.W_1.W.value);   // (n_seq L, d_h)
    s.partner = matmul_fast(s.xb2, ffn.W_3.W.value);  // (n_seq L, d_h)
    s.glu = multiply(silu(s.hidden), s.partner);      // (n_seq L, d_h)
    // final matmul to get the output of the ffn, and the residual connection
    return add(s.x1, matmul_fast(s.glu, ffn.W_2.W.value));
}

// The mirror: d_out (n_seq L, d_model) -> dx (n_seq L, d_model); adds (+=) into every weight's grad in block.
inline Matrix llama_layer_backward(DecoderBlock& block, const Matrix& d_out, const LlamaLayerSaved& s) {
    // shows the answers of rmsnorm swiglu attention heads rotary decoder-block: begin (uses block d_out s)
    MultiHeadAttention& attn = block.self_attn;
    SwiGLU& ffn = dynamic_cast<SwiGLU&>(*block.ffn);
    const int n_seq = s.n_seq, L = s.x.rows / n_seq, n_heads = attn.n_heads, d_k = attn.d_k;
    // forward: return add(x1, matmul_fast(glu, W_2)): a sum hands d_out to both terms
    Matrix dx1 = d_out, d_glu(s.glu.rows, s.glu.cols);
    matmul_backward_fast(d_out, s.glu, ffn.W_2.W.value, d_glu, ffn.W_2.W.grad);  // d_glu += d_out W_2^T
    // forward: glu = multiply(silu(hidden), partner): each factor's slope is the other
    Matrix d_gate(s.glu.rows, s.glu.cols), d_partner(s.glu.rows, s.glu.cols), d_hidden(s.glu.rows, s.glu.cols);
    multiply_backward(d_glu, silu(s.hidden), s.partner, d_gate, d_partner);
    silu_backward(d_gate, s.hidden, d_hidden);  // forward: gate = silu(hidden)
    // forward: hidden = matmul_fast(xb2, W_1), partner = matmul_fast(xb2, W_3): xb2's second use adds in (+=)
    Matrix d_xb2(s.xb2.rows, s.xb2.cols);
    matmul_backward_fast(d_hidden, s.xb2, ffn.W_1.W.value, d_xb2, ffn.W_1.W.grad);
    matmul_backward_fast(d_partner, s.xb2, ffn.W_3.W.value, d_xb2, ffn.W_3.W.grad);
    // forward: xb2 = llama_rmsnorm(x1, gamma): the second path to x1
    accumulate(dx1, llama_rmsnorm_backward(d_xb2, s.x1, dynamic_cast<RMSNorm&>(*block.ffn_sub.norm).gamma, s.rstd2));
    // forward: x1 = add(x, matmul_fast(joined, W_o)): a sum hands dx1 to both terms
    Matrix dx = dx1, d_joined(s.joined.rows, s.joined.cols);
    matmul_backward_fast(dx1, s.joined, attn.W_o.W.value, d_joined, attn.W_o.W.grad);
    // forward: multihead attention, every sequence e, every head h (in the same order, so the += below add alike)
    Matrix dQ(s.Q.rows, s.Q.cols), dK(s.K.rows, s.K.cols), dV(s.V.rows, s.V.cols);
    for (int e = 0; e < n_seq; e++)
        for (int h = 0; h < n_heads; h++) {
            const int col = h * d_k, kv_col = attn.heads->key_head(h) * d_k;
            const Matrix& P = s.P[e * n_heads + h];
            Matrix dq(L, d_k), dk(L, d_k), dv(L, d_k), dP(L, L), d_scores(L, L), d_qk(L, L);
            // forward: add_into_block(matmul_fast(P, v), e * L, col, joined)
            matmul_backward_fast(take_block(d_joined, e * L, L, col, d_k), P, take_block(s.V, e * L, L, kv_col, d_k),
                                 dP, dv);
            // forward: P = softmax_rows(scores): dscores = P * (dP - sum_j dP P); a masked key's P is 0, its grad 0
            softmax_rows_backward(dP, P, d_scores);
            // forward: scores = scale(matmul_bt_fast(q, k), 1 / sqrt(d_k))
            scale_backward(d_scores, 1.0 / std::sqrt(double(d_k)), d_qk);
            matmul_bt_backward_fast(d_qk, take_block(s.Q, e * L, L, col, d_k), take_block(s.K, e * L, L, kv_col, d_k),
                                    dq, dk);
            // forward: q, k, v = take_block(...). GQA: kv_mul query heads share a K and V head, so each adds (+=)
            add_into_block(dq, e * L, col, dQ);
            add_into_block(dk, e * L, kv_col, dK);
            add_into_block(dv, e * L, kv_col, dV);
        }
    // forward: RoPE, Q = R Q, K = R K pair by pair: a rotation's backward is its transpose, R(-angle) (nothing saved)
    dQ = rotate_pairs(std::move(dQ), L, 0, d_k, -1.0);
    dK = rotate_pairs(std::move(dK), L, 0, d_k, -1.0);
    // forward: Q = matmul_fast(xb, W_q), K = matmul_fast(xb, W_k), V = matmul_fast(xb, W_v): xb's three uses add (+=)
    Matrix d_xb(s.xb.rows, s.xb.cols);
    matmul_backward_fast(dQ, s.xb, attn.W_q.W.value, d_xb, attn.W_q.W.grad);
    matmul_backward_fast(dK, s.xb, attn.W_k.W.value, d_xb, attn.W_k.W.grad);
    matmul_backward_fast(dV, s.xb, attn.W_v.W.value, d_xb, attn.W_v.W.grad);
    // forward: xb = llama_rmsnorm(x, gamma): the second path to x
    accumulate(dx, llama_rmsnorm_backward(d_xb, s.x, dynamic_cast<RMSNorm&>(*block.self_sub.norm).gamma, s.rstd1));
    return dx;
    // shows the answers: end
}
