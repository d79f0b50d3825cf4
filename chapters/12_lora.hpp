// chapters/12_lora.hpp -- fine-tuning with low-rank adapters (LoRA): a trained model's weights frozen, two small
// matrices beside each chosen one trained in their place; each forward beside its backward.
//
// What it adds: --lora R on a --load'ed model (workbench/lora.hpp runs it), after Hu et al. 2021, "LoRA: low-rank
// adaptation of large language models"; on a quantized base (chapter 09) too, as Dettmers et al. 2023 (QLoRA) train
// float adapters over a 4-bit model. What it changes in the first part: a fine-tuned Linear's product (model.hpp's
// Product) is Adapted, here: its W frozen, and its adapter's term added; a model without adapters has none, and
// not one bit changes. Transformer::zero_grad zeroes the adapters' gradients too, and the optimizer (chapter 03)
// moves the adapters alone when a model has any.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../model.hpp"  // Linear, Product; chapter 09's ProductOver (this file is read where model.hpp includes it)

// ---------------------------------------------------------------------------------------------
// Why adapters. Fine-tuning a trained model on a new task moves every weight: the optimizer keeps a gradient and
// (Adam) two running means for each, three more copies of the model. Hu et al. found that the change a fine-tuning
// makes to a weight matrix has a low rank: W + dW with dW ~ A B, A (d_in, R), B (R, d_out), R small. So keep W
// frozen and learn A and B alone: R (d_in + d_out) numbers in place of d_in d_out, and W needs no gradient and no
// optimizer state. After training, A B can be added into W once (merged), and the model runs as fast as before.
//
// The names, as every comment below uses them: n rows (the tokens of n_seq sequences stacked, n_seq T or n_seq S),
// a Linear's W (d_in, d_out) (attention's W_q: d_in = d_out = d_model; the feed-forward's W_1: d_model -> d_ff),
// R the adapter's rank, alpha its scale, s = alpha / R.
//
//   y = x W + s (x A) B            x (n, d_in), A (d_in, R), B (R, d_out), y (n, d_out)
//
// A starts small and random, B at zero, so A B = 0: the first forward is the loaded model's, exactly, and the first
// gradient reaches B (below: dB = s h^T dy, with h = x A not zero) while A's is zero (dA needs B). s = alpha / R:
// Hu et al. keep alpha fixed as they try ranks, so that a larger R does not mean larger updates at the same rate;
// here alpha defaults to R (s = 1), and --lora-alpha sets it.

// ---------------------------------------------------------------------------------------------
// The adapter of one Linear.   x (n, d_in), h (n, R), A (d_in, R), B (R, d_out).
struct Adapter {
    Param A, B;      // empty (0 x 0) when off: the frozen W alone
    double s = 0.0;  // alpha / R
    Matrix h;        // saved (n, R): x A
    bool on() const { return !A.value.empty(); }
    int rank() const { return A.value.cols; }
    Adapter() = default;
    // A drawn uniform in +-1/sqrt(d_in) (PyTorch's default for a Linear's weight, which the PEFT library's A keeps),
    // B zero; alpha / R the scale.
    Adapter(int d_in, int d_out, int R, double alpha, Rng& rng) : A(d_in, R), B(R, d_out), s(alpha / R) {
        const double bound = 1.0 / std::sqrt(double(d_in));  // sqrt: correctly rounded (IEEE), as Adam's
        for (double& a : A.value.data) a = rng.uniform(-bound, bound);
    }
    // y_base = x W (Linear adds its bias after) -> y = x W + s (x A) B.
    Matrix forward(const Matrix& x, Matrix y_base) {
        h = matmul_fast(x, A.value);                   // h = x A          (n, R)
        Matrix low = scale(matmul_fast(h, B.value), s);  // s h B            (n, d_out)
        return add(y_base, low);                       // y = x W + s h B
    }
    // dy (n, d_out) -> dx (n, d_in) += the gradient through the frozen W and through the adapter; dA, dB +=.
    // W is the base's float values (a quantized base's dequantized ones, chapter 09: the product forward ran in
    // integers has those values up to the activations' rounding, which the gradient leaves out, as QLoRA's does).
    // (Off, on a frozen W of a model with adapters elsewhere: the first line alone.)
    void backward(const Matrix& dy, const Matrix& x, const Matrix& W, Matrix& dx) {
        accumulate(dx, matmul_bt_fast(dy, W));    // forward: x W, W frozen: dx += dy W^T, and no dW at all
        if (!on()) return;
        Matrix d_low(dy.rows, dy.cols), dh(h.rows, h.cols);
        scale_backward(dy, s, d_low);             // forward: low = s (h B): d(h B) += s dy
        matmul_backward_fast(d_low, h, B.value, dh, B.grad);  // forward: h B: dh += d(hB) B^T, dB += h^T d(hB)
        matmul_backward_fast(dh, x, A.value, dx, A.grad);     // forward: h = x A: dx += dh A^T, dA += x^T dh
    }
    // Merged: W + s A B, one matrix, the same function (up to rounding): what --save writes.
    Matrix merged(const Matrix& W) const { return add(W, scale(matmul_fast(A.value, B.value), s)); }
};

// A fine-tuned Linear's product: the product it had (a quantized base's integers too, chapter 09), W frozen, and its
// adapter beside it (off: the frozen W alone, as every matrix of attention and of the feed-forward is when any is
// adapted).
struct Adapted : ProductOver {  // (chapter 09) its base: the product it had, beneath which the integers go
    Adapter lora;
    std::unique_ptr<Product> copy() const override { return std::make_unique<Adapted>(*this); }
    Matrix forward(const Matrix& x, const Param& W) override {
        Matrix y = base->forward(x, W);
        return lora.on() ? lora.forward(x, std::move(y)) : y;  // + s (x A) B
    }
    // dx through the frozen W and the adapter; dA, dB +=. (Not base's backward: W's gradient was freed. The base is
    // x W, in floats or integers: an adapter never sits on the tied output projection, x table^T.)
    void backward(const Matrix& dy, const Matrix& x, Param& W, Matrix& dx) override {
        lora.backward(dy, x, W.value, dx);
    }
};
// A Linear frozen, its product Adapted (once): its adapter, off until given a rank. Its W's gradient buffer is freed.
inline Adapter& frozen(Linear& linear) {
    if (!dynamic_cast<Adapted*>(linear.product.get())) {
        auto adapted = std::make_unique<Adapted>();
        adapted->base = std::move(linear.product);
        linear.product = std::move(adapted);
    }
    linear.W.grad = Matrix();
    return static_cast<Adapted*>(linear.product.get())->lora;
}
inline const Adapter* adapter_of(const Linear& linear) {  // nullptr: not fine-tuned
    const auto* adapted = dynamic_cast<const Adapted*>(linear.product.get());
    return adapted ? &adapted->lora : nullptr;
}
inline bool adapted(const Linear& linear) { return adapter_of(linear) && adapter_of(linear)->on(); }

// ---------------------------------------------------------------------------------------------
// Which Linears take adapters: attention's W_q and W_v (Hu et al.'s choice, their table 5: the two at rank 4 did about
// as well as all four at rank 2, for the same count), or every matrix of attention and of the feed-forward (with
// experts, chapter 11, every matrix of each expert's feed-forward, the shared ones' too). Never the embedding table or
// the output projection: they read and write tokens, which a new task of the same digits keeps. Nor the router:
// W_router (d_model, E) is already thin, so an adapter saves nothing there, and a router that moved would send tokens
// to experts whose adapters never trained on them; left frozen, each expert's adapter learns the tokens its expert
// already takes.
enum class LoraOn { qv, all };
const std::vector<std::string> LORA_ON_NAMES = {"qv", "all"};
// Whether adapters go on every matrix of attention and of the feed-forward (all), not on W_q and W_v alone (qv).
inline bool adapts_every_matrix(LoraOn on) {
    switch (on) {
    case LoraOn::all: return true;
    case LoraOn::qv: return false;
    }
    return false;  // not reached
}

// Every Linear adapters may sit on, with the name its W has in the checkpoint ("encoder.0.self_attn.W_q"), in the
// checkpoint's order (each_linear, chapter 09): W_q and W_v, or every matrix of attention and of the feed-forward
// (each expert's too); never the router (W_router: "...router.W") or out.W.
template <class Model, class Linear_>
void each_adaptable(Model& model, LoraOn on, const std::function<void(const std::string&, Linear_&)>& visit) {
    each_linear(model, [&](const std::string& name, Linear_& linear) {
        const std::string last = name.substr(name.rfind('.') + 1);
        if (last == "W") return;  // the router, out.W
        if (adapts_every_matrix(on) || last == "W_q" || last == "W_v") visit(name, linear);
    });
}

// Adapters of rank R and scale alpha / R on the chosen Linears, A drawn from `rng` in the checkpoint's order. Every
// matrix of attention and of the feed-forward (each expert's too) is frozen, adapted or not: its gradient buffer is
// freed (a frozen W needs none), and Linear::backward then carries dx alone through it (and through its adapter, if it
// has one). The router, as the embedding table, keeps its buffer, which the optimizer does not read.
template <class Model> void add_adapters(Model& model, int R, double alpha, LoraOn on, Rng& rng) {
    each_adaptable<Model, Linear>(model, LoraOn::all, [&](const std::string&, Linear& linear) { frozen(linear); });
    each_adaptable<Model, Linear>(model, on, [&](const std::string&, Linear& linear) {
        frozen(linear) = Adapter(linear.W.value.rows, linear.W.value.cols, R, alpha, rng);
    });
}
// The adapters a model holds, A then B of each, named after their W ("encoder.0.self_attn.W_q.lora_A"), in the
// checkpoint's order; none when it holds none.
template <class Model> ParamList adapters_of(Model& model) {
    ParamList list;
    each_adaptable<Model, Linear>(model, LoraOn::all, [&](const std::string& name, Linear& linear) {
        if (!adapted(linear)) return;
        Adapter& lora = frozen(linear);
        list.push_back({name + ".lora_A", &lora.A});
        list.push_back({name + ".lora_B", &lora.B});
    });
    return list;
}
// Their scale s (every adapter has the same), and where they sit: on W_q W_v alone, or on every matrix (a checkpoint
// of a run under way names both, workbench/checkpoint.hpp).
template <class Model> double adapters_scale(Model& model) {
    double s = 0.0;
    each_adaptable<Model, Linear>(model, LoraOn::all, [&](const std::string&, Linear& linear) {
        if (adapted(linear)) s = adapter_of(linear)->s;
    });
    return s;
}
template <class Model> LoraOn adapters_on(Model& model) {
    std::size_t on_qv = 0;
    each_adaptable<Model, Linear>(model, LoraOn::qv, [&](const std::string&, Linear& linear) {
        on_qv += adapted(linear);
    });
    return 2 * on_qv == adapters_of(model).size() ? LoraOn::qv : LoraOn::all;
}
// What training moves: the adapters, when the model has any; else every parameter (the first part's rule).
template <class Model> ParamList trained_parameters(Model& model) {
    ParamList adapters = adapters_of(model);
    return adapters.empty() ? model.parameters() : adapters;
}
// Every gradient a backward fills: the parameters' (a frozen W's is empty) and the adapters'. zero_grad zeroes these.
template <class Model> ParamList parameters_and_adapters(Model& model) {
    ParamList list = model.parameters(), adapters = adapters_of(model);
    list.insert(list.end(), adapters.begin(), adapters.end());
    return list;
}
// Merge every adapter into its W (W + s A B) and take it off: W trains again, and the model saves, loads and runs with
// no flag. A quantized base's merged W is its dequantized values plus s A B, in float64 (workbench/lora.hpp
// quantizes those again, merged_copy); its Linears without an adapter keep their integers.
template <class Model> void merge_adapters(Model& model) {
    each_adaptable<Model, Linear>(model, LoraOn::all, [&](const std::string& name, Linear& linear) {
        linear.W.grad = Matrix(linear.W.value.rows, linear.W.value.cols);  // trainable again
        auto* fine_tuned = dynamic_cast<Adapted*>(linear.product.get());
        if (!fine_tuned) return;
        if (fine_tuned->lora.on()) {  // float64 now: the paper's product (a quantized base's integers dropped)
            linear.W.value = fine_tuned->lora.merged(linear.W.value);
            model.integers.erase(name);
            linear.product = Owned<Product>();
            return;
        }
        Owned<Product> base = std::move(fine_tuned->base);  // the product it had
        linear.product = std::move(base);
    });
}
