// chapters/04_todays_blocks.hpp -- today's blocks in the paper's places: RMSNorm for LayerNorm, GELU for ReLU,
// SwiGLU for the two-layer feed-forward, fewer K and V heads than query heads.
//
// What it adds: --rmsnorm (Zhang & Sennrich 2019), --act gelu (Hendrycks & Gimpel 2016; BERT's and GPT's),
// --act swiglu (Shazeer 2020), Llama's norm and feed-forward, and --kv-heads (grouped-query attention), its K and V.
// What it changes in the first part: RMSNorm and SwiGLU are Layers (model.hpp), which a block may hold in LayerNorm's
// and FeedForward's places; norm_of and feed_forward_of, at the end, choose once, when a model is built. A block's
// feed-forward may also be chapter 11's experts. Shared K and V heads are a way for attention's heads (SharedKeys),
// which head_attention_of (chapter 08) gives a model when --kv-heads is below n_heads.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../model.hpp"  // Layer, Linear, HeadAttention (this file is read where model.hpp includes it)

// ---------------------------------------------------------------------------------------------
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
// RMSNorm (--rmsnorm; Zhang & Sennrich 2019, Llama's norm), today's block in LayerNorm's place.
//   y = gamma * x / sqrt(mean(x^2) + eps).   x, y (n, d_model). No mean is taken out and there is no beta: only
// the row's scale is normalised.
struct RMSNorm : Layer {
    static constexpr double eps = 1e-5;
    Param gamma;                // (1, d_model), starts at 1
    Matrix x_hat;               // saved (n, d_model): x / sqrt(mean(x^2) + eps)
    std::vector<double> rstd;   // saved (n): 1 / sqrt(mean(x^2) + eps) of each row

    RMSNorm() = default;
    explicit RMSNorm(int d_model) : gamma(1, d_model, 1.0) {}
    std::unique_ptr<Layer> copy() const override { return std::make_unique<RMSNorm>(*this); }
    std::string kind(bool short_form) const override { return short_form ? "RMS" : "RMSNorm"; }
    void list_parameters(const std::string& name, ParamList& list) override {
        list.push_back({name + ".gamma", &gamma});
    }

    Matrix forward(const Matrix& x) override {
        int n = x.rows, d = x.cols;
        x_hat = Matrix(n, d);
        rstd.assign(n, 0.0);
        Matrix y(n, d);
        for (int i = 0; i < n; i++) {
            double mean_square = 0.0;
            for (int j = 0; j < d; j++) mean_square += x.at(i, j) * x.at(i, j) / d;
            rstd[i] = 1.0 / std::sqrt(mean_square + eps);
            for (int j = 0; j < d; j++) {
                x_hat.at(i, j) = x.at(i, j) * rstd[i];
                y.at(i, j) = gamma.value.at(0, j) * x_hat.at(i, j);
            }
        }
        return y;
    }
    // exercise rmsnorm: begin
    // forward: y = gamma * x_hat           so   d_gamma += dy * x_hat,  d_x_hat = dy * gamma
    // forward: x_hat = x * rstd: LayerNorm's backward with its mean fixed at 0, so term 2 is gone and term 3
    //          stays, through the mean of squares:   dx = rstd * (d_x_hat - x_hat * mean(d_x_hat * x_hat))
    // exercise rmsnorm: end
    Matrix backward(const Matrix& dy) override {
        // exercise rmsnorm: begin (uses dy)
        int n = dy.rows, d = dy.cols;
        Matrix dx(n, d), d_x_hat(n, d);
        for (int i = 0; i < n; i++) {
            double mean_d_xhat = 0.0;
            for (int j = 0; j < d; j++) {
                gamma.grad.at(0, j) += dy.at(i, j) * x_hat.at(i, j);
                d_x_hat.at(i, j) = dy.at(i, j) * gamma.value.at(0, j);
                mean_d_xhat += d_x_hat.at(i, j) * x_hat.at(i, j) / d;
            }
            for (int j = 0; j < d; j++) dx.at(i, j) += rstd[i] * (d_x_hat.at(i, j) - x_hat.at(i, j) * mean_d_xhat);
        }
        return dx;
        // exercise rmsnorm: end
    }
};

// ---------------------------------------------------------------------------------------------
// SwiGLU (--act swiglu; Shazeer 2020, Llama's feed-forward), today's block in FeedForward's place.
//   y = (silu(x W_1 + b_1) * (x W_3 + b_3)) W_2 + b_2, a gate times its partner, entry by entry.
//   x, y (n, d_model), hidden and partner (n, d_h). Three matrices where there were two, so the hidden width d_h is
// 2 d_ff / 3 (Llama's rule): the parameters stay about as many as ReLU's at the same d_ff, and the two compare fairly.
struct SwiGLU : Layer {
    Linear W_1, W_2, W_3;   // (d_model -> d_h), (d_h -> d_model), (d_model -> d_h): the gate, out, the partner
    Matrix hidden;          // saved (n, d_h): x W_1 + b_1, the gate's input
    Matrix partner;         // saved (n, d_h): x W_3 + b_3

    static int width(int d_ff) { return std::max(1, (2 * d_ff + 1) / 3); }  // d_h: 2 d_ff / 3, rounded
    SwiGLU() = default;
    SwiGLU(int d_model, int d_ff, bool bias, Rng& rng)
        : W_1(d_model, width(d_ff), bias, rng), W_2(width(d_ff), d_model, bias, rng),
          W_3(d_model, width(d_ff), bias, rng) {}
    std::unique_ptr<Layer> copy() const override { return std::make_unique<SwiGLU>(*this); }
    std::string kind(bool) const override { return "SwiGLU"; }
    void list_parameters(const std::string& name, ParamList& list) override {
        W_1.list_parameters(name + ".W_1", name + ".b_1", list);
        W_2.list_parameters(name + ".W_2", name + ".b_2", list);
        W_3.list_parameters(name + ".W_3", name + ".b_3", list);
    }
    Matrix forward(const Matrix& x) override {
        hidden = W_1.forward(x);
        partner = W_3.forward(x);
        return W_2.forward(multiply(silu(hidden), partner));
    }
    Matrix backward(const Matrix& dy) override {
        // exercise swiglu: begin (uses dy)
        Matrix d_act = W_2.backward(dy);  // forward: W_2.forward(act), act = multiply(gate, partner)
        const int n = hidden.rows, d_h = hidden.cols;
        Matrix d_gate(n, d_h), d_partner(n, d_h), d_hidden(n, d_h);
        multiply_backward(d_act, silu(hidden), partner, d_gate, d_partner);
        silu_backward(d_gate, hidden, d_hidden);  // forward: gate = silu(hidden)
        Matrix dx = W_1.backward(d_hidden);       // forward: hidden = W_1.forward(x)
        accumulate(dx, W_3.backward(d_partner));  // forward: partner = W_3.forward(x): x's second use adds in
        return dx;
        // exercise swiglu: end
    }
};

// ---------------------------------------------------------------------------------------------
// Grouped-query attention (--kv-heads N; Ainslie et al. 2023), Llama's: K and V have N heads, each read by
// kv_mul = n_heads / N query heads, so W_k and W_v are (d_model, N d_k) (key_value_width), and the decoding cache
// (chapter 10) N / n_heads the size; the paper's N is n_heads, kv_mul 1. N = 1 is multi-query attention (Shazeer
// 2019). MultiHeadAttention asks its heads which K and V head each reads (key_head); its backward's += adds the
// kv_mul shares of a shared head. Positions in attention (chapter 05) and tiles (chapter 08) are ways of this kind.
struct SharedKeys : HeadAttention {
    int kv_mul = 1;  // query heads a K and V head serves
    std::unique_ptr<HeadAttention> copy() const override { return std::make_unique<SharedKeys>(*this); }
    int key_head(int h) const override { return h / kv_mul; }  // heads 0 .. kv_mul-1 read head 0, and so on
};

// ---------------------------------------------------------------------------------------------
// The choice of norm and of feed-forward, made here once, when a model is built: the blocks call these.
inline std::unique_ptr<Layer> norm_of(const ModelConfig& c) {  // the choice of norm, made here once (--rmsnorm)
    if (c.rms_norm) return std::make_unique<RMSNorm>(c.d_model);
    return std::make_unique<LayerNorm>(c.d_model);
}
inline std::unique_ptr<Layer> feed_forward_of(const ModelConfig& c, Rng& rng);
// A mixture of experts (--experts E) holds E feed-forwards, each built by feed_forward_of below: chapter 11.
#include "11_experts.hpp"
inline std::unique_ptr<Layer> feed_forward_of(const ModelConfig& c, Rng& rng) {  // the choice of activation, once
    if (c.experts > 0) return std::make_unique<Experts>(c, rng);  // E experts of the kind chosen below (chapter 11)
    const std::string& name = ACTIVATION_NAMES[int(c.activation)];
    switch (c.activation) {
    case Activation::relu:
        return std::make_unique<FeedForward>(c.d_model, c.d_ff, Pointwise{name, relu, relu_backward}, !c.no_bias, rng);
    case Activation::gelu:
        return std::make_unique<FeedForward>(c.d_model, c.d_ff, Pointwise{name, gelu, gelu_backward}, !c.no_bias, rng);
    case Activation::swiglu: return std::make_unique<SwiGLU>(c.d_model, c.d_ff, !c.no_bias, rng);
    }
    return nullptr;  // not reached
}
