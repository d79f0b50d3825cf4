// chapters/09_eight_bits.hpp -- the model in 8 bits (and fewer): weights as small integers, products in integers.
//
// What it adds: --quantize BITS (workbench/quantize.hpp) keeps a trained model's matrices as whole numbers of BITS
// bits, one scale for each group of consecutive weights, and computes its products in integers (llama2.c's runq.c;
// llama.cpp's Q8_0 and Q4_0). Inference only: a quantized model never trains. What it changes in the first part: a
// quantized model keeps its matrices' integers by name (QuantizedParts, which Transformer derives from), each Linear
// multiplies by its own (IntegerProduct, a Product: model.hpp), and so does the tied output projection by the
// table's (engine/integers.hpp's quantized_product_fast, the same bits as quantized_product here, faster). Param
// keeps the values the integers stand for, which the float readers (--inspect, the report, an adapter's backward)
// read. A product laid over another (ProductOver, here: chapter 12's adapter) keeps it beneath, where the integers go.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../model.hpp"  // Product, Linear, the blocks (this file is read where model.hpp includes it)

// A matrix of a product as whole numbers of `bits` bits, one scale for each `group` of them along the input
// dimension (below: what each member means).
struct Quantized {
    int rows = 0, cols = 0;      // Wt's shape: (d_out, d_in), one row an output
    int bits = 8, group = 64;    // the width of q, and the weights a scale covers
    std::vector<int8_t> q;       // (rows, cols), row by row
    std::vector<double> scales;  // (rows, cols / group): row j's groups, in order, each a float32's value
    std::vector<int16_t> packed_q;      // engine only: q and scales laid out for engine/integers.hpp's product (its
    std::vector<double> packed_scales;  // pack_weights, once q is made or read; empty: laid out at each call)
    int groups() const { return cols / group; }
};

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
// (Quantized, the integers and scales of a matrix, is defined at the top of this file.)
// The rule of a width, in this one place: 8 bits, Q8_0 (runq.c): whole numbers -127 .. 127, groups of 64, the scale
// max|w| / 127; fewer bits, Q4_0's rule (llama.cpp): -2^(bits-1) .. 2^(bits-1) - 1, groups of 32, the scale the
// group's largest weight m, its sign kept, over the lowest level (m / -2^(bits-1)). Either way the scale's divisor is
// -lowest.
struct Levels {
    bool symmetric;       // 8 bits: as many levels below 0 as above
    int lowest, highest;  // the whole numbers a weight may be
    int group;            // the weights a scale is shared by, at most
};
inline Levels levels_of(int bits) {
    if (bits == 8) return {true, -127, 127, 64};
    return {false, -(1 << (bits - 1)), (1 << (bits - 1)) - 1, 32};
}
// The group of a width: its levels' group, halved until it divides the width.
inline int group_for(int bits, int width) {
    int group = levels_of(bits).group;
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
    const Levels levels = levels_of(bits);
    return levels.symmetric ? largest / levels.highest : signed_largest / levels.lowest;
}
// Wt (rows, cols) quantized: each row's groups of `group_for(bits, cols)` weights.
inline Quantized quantize(const Matrix& Wt, int bits) {
    Quantized Q;
    Q.rows = Wt.rows, Q.cols = Wt.cols, Q.bits = bits, Q.group = group_for(bits, Wt.cols);
    const Levels levels = levels_of(bits);
    Q.q.resize(Wt.data.size());
    for (int r = 0; r < Wt.rows; r++)
        for (int g = 0; g < Q.groups(); g++) {
            const std::size_t at = std::size_t(r) * Wt.cols + std::size_t(g) * Q.group;
            const double scale = double(float(group_scale(&Wt.data[at], Q.group, bits)));  // kept as a float, as
            Q.scales.push_back(scale);                                                           // runq.c keeps it
            for (int k = 0; k < Q.group; k++) {
                const int q = scale == 0.0 ? 0 : rounded(Wt.data[at + k] / scale);
                Q.q[at + k] = int8_t(std::min(levels.highest, std::max(levels.lowest, q)));
            }
        }
    return Q;
}
inline Matrix dequantize(const Quantized& Q) {  // -> (rows, cols): q * scale, entry by entry
    Matrix Wt(Q.rows, Q.cols);
    for (int r = 0; r < Q.rows; r++)
        for (int c = 0; c < Q.cols; c++)
            Wt.at(r, c) = Q.q[std::size_t(r) * Q.cols + c] * Q.scales[std::size_t(r) * Q.groups() + c / Q.group];
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
                y += double(sum) * Wt.scales[std::size_t(j) * G + g] * scale_x[g];
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
#include "../engine/integers.hpp"  // quantized_product_fast: the same bits, faster

// ---------------------------------------------------------------------------------------------
// A quantized model: its matrices' integers by tensor name ("decoder.0.ffn.W_1", "embed.table"), each kept as its Wt
// (the table as it is); empty in float64. Shared (never changed once made), so a copy of the model shares them.
struct QuantizedParts {
    std::map<std::string, std::shared_ptr<const Quantized>> integers;
};
// A Linear's product in integers: forward, x W with W's integers, never its floats; backward, the float product's it
// took the place of, on the values the integers stand for (the activations' rounding left out, as QLoRA leaves it: an
// adapter over a quantized base trains through it, chapter 12; a quantized model alone never trains).
struct IntegerProduct : Product {
    std::shared_ptr<const Quantized> Wt;
    Owned<Product> floats;  // x W as before (the paper's; the tied output's, x table^T)
    IntegerProduct(std::shared_ptr<const Quantized> Wt, Owned<Product> floats)
        : Wt(std::move(Wt)), floats(std::move(floats)) {}
    std::unique_ptr<Product> copy() const override { return std::make_unique<IntegerProduct>(*this); }
    Matrix forward(const Matrix& x, const Param&) override { return quantized_product_fast(x, *Wt); }
    void backward(const Matrix& dy, const Matrix& x, Param& W, Matrix& dx) override { floats->backward(dy, x, W, dx); }
};

// A product laid over the one a Linear had, which it keeps beneath it (chapter 12's adapter): a quantized model's
// integers go beneath, into the product that multiplies by W.
struct ProductOver : Product {
    Owned<Product> base;  // the product it was laid over
    std::unique_ptr<Product> copy() const override = 0;  // each kind copies itself, its base with it
};

// Every Linear of a model with the name its W has in the checkpoint ("encoder.0.self_attn.W_q"), in the checkpoint's
// order: attention's W_q W_k W_v W_o, a feed-forward's W_1 W_2 (SwiGLU's W_3; with experts, chapter 11, the router,
// then each expert's and shared expert's), and out.W (tied embeddings: W empty, the table's product). A template:
// the Transformer comes after this chapter.
template <class Model, class Visit>  // visit(const std::string& name, Linear& linear)
void each_linear(Model& model, Visit&& visit) {
    auto attention = [&](MultiHeadAttention& attn, const std::string& name) {
        for (auto [linear, suffix] : {std::pair{&attn.W_q, ".W_q"}, {&attn.W_k, ".W_k"}, {&attn.W_v, ".W_v"},
                                      {&attn.W_o, ".W_o"}})
            visit(name + suffix, *linear);
    };
    auto dense = [&](Layer& ffn, const std::string& name) {  // one feed-forward, of whichever kind it is
        if (auto* f = dynamic_cast<FeedForward*>(&ffn)) visit(name + ".W_1", f->W_1), visit(name + ".W_2", f->W_2);
        if (auto* g = dynamic_cast<SwiGLU*>(&ffn))
            visit(name + ".W_1", g->W_1), visit(name + ".W_2", g->W_2), visit(name + ".W_3", g->W_3);
    };
    auto feed_forward = [&](Layer& ffn, const std::string& name) {
        auto* moe = dynamic_cast<Experts*>(&ffn);
        if (!moe) return dense(ffn, name);
        visit(name + ".router.W", moe->router);  // the checkpoint's order: the router, then the experts
        for (std::size_t i = 0; i < moe->experts.size(); i++)
            dense(*moe->experts[i], name + ".experts." + std::to_string(i));
        for (std::size_t j = 0; j < moe->shared.size(); j++) dense(*moe->shared[j], name + ".shared." + std::to_string(j));
    };
    for (std::size_t i = 0; i < model.encoder.size(); i++) {
        const std::string name = "encoder." + std::to_string(i);
        attention(model.encoder[i].self_attn, name + ".self_attn");
        feed_forward(*model.encoder[i].ffn, name + ".ffn");
    }
    for (std::size_t i = 0; i < model.decoder.size(); i++) {
        const std::string name = "decoder." + std::to_string(i);
        attention(model.decoder[i].self_attn, name + ".self_attn");
        if (has_encoder(model.config.arch)) attention(model.decoder[i].cross_attn, name + ".cross_attn");
        feed_forward(*model.decoder[i].ffn, name + ".ffn");
    }
    visit("out.W", model.out);
}
// Once a model's integers are made or read (workbench/quantize.hpp): each Linear that has them multiplies by them
// (beneath an adapter, chapter 12, when one wraps its product), and with tied embeddings the output projection by
// the table's.
template <class Model> void multiply_in_integers(Model& model) {
    each_linear(model, [&](const std::string& name, Linear& linear) {
        const std::string of = model.config.tie_embeddings && name == "out.W" ? "embed.table" : name;
        const auto found = model.integers.find(of);
        if (found == model.integers.end()) return;
        Owned<Product>* product = &linear.product;
        while (auto* over = dynamic_cast<ProductOver*>(product->get())) product = &over->base;
        if (auto* integers = dynamic_cast<IntegerProduct*>(product->get())) integers->Wt = found->second;  // anew
        else *product = std::make_unique<IntegerProduct>(found->second, std::move(*product));
    });
}
