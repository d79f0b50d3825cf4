// chapters/12_lora_test.cpp -- low-rank adapters (12_lora.hpp): every backward checked by central differences in
// double precision (A, B and the input through the frozen W and the adapter; on a quantized base, A and B, and the
// input's gradient through the dequantized W); the frozen W's gradient never filled; step 1 is the loaded model's, bit
// for bit; the optimizer moves A and B alone; merged and unmerged agree; the whole model's gradient with adapters,
// with experts too (adapters on each expert's feed-forward).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "../train.hpp"  // the tutorial, and through model.hpp the chapter under test

namespace lora_test {

// The check, as chapter 11's: nudge each entry by +-H, compare (L_up - L_down) / (2 H) with the analytic gradient,
// relative error floored at FLOOR. A wrong backward (a missing s, a transposed product) gives 1e-3 to 1.
constexpr double H = 1e-5, FLOOR = 1e-4, TOLERANCE = 1e-6;
struct Tensor { std::string name; Matrix* value; Matrix* grad; };
std::vector<Tensor> tensors_of(const ParamList& params) {
    std::vector<Tensor> t;
    for (const auto& [name, p] : params) t.push_back({name, &p->value, &p->grad});
    return t;
}
Matrix random_matrix(int rows, int cols, Rng& rng) {
    Matrix m(rows, cols);
    for (double& v : m.data) v = rng.uniform(-1.0, 1.0);
    return m;
}
double dot(const Matrix& A, const Matrix& B) {
    double s = 0.0;
    for (std::size_t i = 0; i < A.data.size(); i++) s += A.data[i] * B.data[i];
    return s;
}
// The worst relative error over every entry of every tensor, printed; each tensor's gradient must not be all zeros.
double check_gradients(const std::string& check, const std::vector<Tensor>& tensors, const std::function<double()>& loss,
                       const std::function<void()>& analytic) {
    REQUIRE(!tensors.empty());
    for (const Tensor& t : tensors) t.grad->zero();
    analytic();
    double worst_of_all = 0.0;
    for (const Tensor& t : tensors) {
        const Matrix a = *t.grad;
        double worst = 0.0, largest = 0.0;
        for (std::size_t i = 0; i < t.value->data.size(); i++) {
            double& x = t.value->data[i];
            const double saved = x;
            x = saved + H;
            const double L_up = loss();
            x = saved - H;
            const double L_down = loss();
            x = saved;
            const double n = (L_up - L_down) / (2 * H);
            worst = std::max(worst, std::fabs(a.data[i] - n) / std::max(std::fabs(a.data[i]) + std::fabs(n), FLOOR));
            largest = std::max(largest, std::fabs(a.data[i]));
        }
        std::printf("  %-34s %-30s %5zu entries   worst rel. error %.1e\n", check.c_str(), t.name.c_str(),
                    t.value->data.size(), worst);
        INFO(check, " / ", t.name, ": worst relative error ", worst, ", largest |gradient| ", largest);
        CHECK(largest > 0.0);
        CHECK(worst <= TOLERANCE);
        worst_of_all = std::max(worst_of_all, worst);
    }
    return worst_of_all;
}
// B starts at zero, which makes dA zero: the checks move B off zero first, so every gradient is a real number.
void nudge_B(const ParamList& adapters, Rng& rng) {
    for (const auto& [name, p] : adapters)
        if (name.size() > 6 && name.compare(name.size() - 6, 6, "lora_B") == 0)
            for (double& v : p->value.data) v += rng.uniform(-0.3, 0.3);
}
ModelConfig small_config(Arch arch, Activation act) {
    ModelConfig c;
    c.d_model = 8, c.d_ff = 12, c.n_heads = 2, c.activation = act, c.arch = arch;
    c.enc_layers = arch == Arch::decoder_only ? 0 : 1;
    c.max_len = arch == Arch::decoder_only ? 10 : 5;
    return c;
}
const std::vector<Example> BATCH = {{{3, 1, 2, 5, 4}, {10, 1, 2, 3, 4}, {1, 2, 3, 4, 5}},
                                    {{9, 7, 8, PAD, PAD}, {10, 7, 8, 9, PAD}, {7, 8, 9, PAD, PAD}}};
double model_loss(Transformer& model) {
    Inputs in = inputs_of(BATCH, 0, BATCH.size());
    Matrix logits = model.forward(in.sources, in.targets_in);
    Matrix unused(logits.rows, logits.cols);
    return batch_loss(logits, BATCH, 0.0, unused).followed;
}
Matrix logits_of(Transformer& model) {
    Inputs in = inputs_of(BATCH, 0, BATCH.size());
    return model.forward(in.sources, in.targets_in);
}
// Merged (each W + s A B, the adapters gone) gives the model's logits up to rounding.
void check_merge_keeps_logits(Transformer& model) {
    Transformer merged = model;
    merge_adapters(merged);
    CHECK(adapters_of(merged).empty());
    const Matrix a = logits_of(model), b = logits_of(merged);
    double worst = 0.0;
    for (std::size_t i = 0; i < a.data.size(); i++) worst = std::max(worst, std::fabs(a.data[i] - b.data[i]));
    INFO("largest difference ", worst);
    CHECK(worst < 1e-12);
}

}  // namespace lora_test

// y = x W + b + s (x A) B, L = sum(y * G): A, B and x, W frozen; with and without bias, ranks 1 and 3, alpha != R.
TEST_CASE("gradient: a Linear with an adapter: A, B and the input through W and the adapter") {
    using namespace lora_test;
    for (bool bias : {false, true})
        for (int R : {1, 3}) {
            Rng rng(7 + R);
            Linear linear(6, 5, bias, rng);
            if (bias) linear.b.value = random_matrix(1, 5, rng);
            Adapter& lora = frozen(linear);  // W frozen, as add_adapters leaves it
            lora = Adapter(6, 5, R, 2.5, rng);
            CHECK(lora.s == 2.5 / R);
            for (double& v : lora.B.value.data) v = rng.uniform(-1, 1);
            Matrix x = random_matrix(4, 6, rng), dx(4, 6), G = random_matrix(4, 5, rng);
            std::vector<Tensor> tensors = {{"x", &x, &dx}, {"A", &lora.A.value, &lora.A.grad},
                                           {"B", &lora.B.value, &lora.B.grad}};
            const double worst = check_gradients("Linear + adapter, R = " + std::to_string(R) + (bias ? ", bias" : ""), tensors,
                [&] { return dot(linear.forward(x), G); },
                [&] {
                    linear.forward(x);
                    accumulate(dx, linear.backward(G));
                });
            CHECK(worst < 1e-8);          // the figure docs/course.md quotes: about 1e-10 here
            CHECK(linear.W.grad.empty());  // no gradient buffer for the frozen W: none was filled
        }
}

// On a quantized base (chapter 09) the product runs in integers: its value is piecewise constant in x (the activations
// are rounded to 8 bits), so x's gradient is checked against its definition, dy W^T with W the dequantized values
// plus the adapter's share, computed on a float Linear of those values; A's and B's by central differences, since
// the integer product does not move with them.
TEST_CASE("gradient: an adapter over a quantized base (8 and 4 bits)") {
    using namespace lora_test;
    for (int bits : {8, 4}) {
        Rng rng(40 + bits);
        Linear q(32, 8, true, rng);
        q.b.value = random_matrix(1, 8, rng);
        Quantized Q = quantize(transpose(q.W.value), bits);
        q.W.value = transpose(dequantize(Q));  // as the checkpoint's reader keeps it
        pack_weights(Q);
        q.product = std::make_unique<IntegerProduct>(std::make_shared<const Quantized>(std::move(Q)), Owned<Product>());
        Adapter& lora = frozen(q);
        lora = Adapter(32, 8, 2, 2.0, rng);
        for (double& v : lora.B.value.data) v = rng.uniform(-1, 1);
        Matrix x = random_matrix(3, 32, rng), G = random_matrix(3, 8, rng), unused(3, 32);
        std::vector<Tensor> tensors = {{"A", &lora.A.value, &lora.A.grad}, {"B", &lora.B.value, &lora.B.grad}};
        check_gradients("adapter over " + std::to_string(bits) + " bits", tensors, [&] { return dot(q.forward(x), G); }, [&] {
            q.forward(x);
            accumulate(unused, q.backward(G));
        });
        Linear f = q;  // the same weights in float64: its backward is the definition
        dynamic_cast<Adapted&>(*f.product).base = Owned<Product>();  // the paper's product beneath the adapter
        f.forward(x);
        const Matrix dx_float = f.backward(G);
        q.forward(x);
        const Matrix dx_quantized = q.backward(G);
        for (std::size_t i = 0; i < dx_float.data.size(); i++) CHECK(dx_quantized.data[i] == dx_float.data[i]);
        CHECK(q.forward(x).data != f.forward(x).data);  // while the forward did run in integers
    }
}

// The whole model with adapters: the loss's gradient with respect to every A and B, W_q W_v and all, both archs.
TEST_CASE("gradient: the whole model with adapters, on W_q W_v and on every matrix") {
    using namespace lora_test;
    struct Case { Arch arch; Activation act; LoraOn on; };
    for (const Case& k : {Case{Arch::encoder_decoder, Activation::relu, LoraOn::qv},
                          Case{Arch::encoder_decoder, Activation::gelu, LoraOn::all},
                          Case{Arch::decoder_only, Activation::swiglu, LoraOn::all}}) {
        Transformer model(small_config(k.arch, k.act), 5);
        Rng rng(3);
        add_adapters(model, 2, 4.0, k.on, rng);
        const ParamList adapters = adapters_of(model);
        CHECK(adapters.size() == (k.on == LoraOn::qv ? 2u * 2 * 3 : k.arch == Arch::decoder_only ? 2u * 7 : 2u * 16));
        nudge_B(adapters, rng);
        check_gradients("model + adapters (" + ARCH_NAMES[int(k.arch)] + ", " + LORA_ON_NAMES[int(k.on)] + ")",
                        tensors_of(adapters), [&] { return model_loss(model); },
                        [&] { gradient_of(model, BATCH, 0.0); });
    }
}

// B = 0: A B = 0 and the adapted model's logits are the loaded model's, bit for bit (x + 0 is x).
TEST_CASE("lora: the first step is the loaded model exactly") {
    using namespace lora_test;
    Transformer base(small_config(Arch::encoder_decoder, Activation::relu), 9), adapted = base;
    Rng rng(1);
    add_adapters(adapted, 4, 8.0, LoraOn::all, rng);
    CHECK(logits_of(adapted).data == logits_of(base).data);
    for (auto& [name, p] : adapters_of(adapted))
        if (name.find("lora_A") != std::string::npos) CHECK(dot(p->value, p->value) > 0.0);  // A drawn, not zero
}

// Adam, three steps: A and B move, every base tensor keeps its bits, the running means are the adapters' alone, and
// no frozen W's gradient is filled (its buffer is empty).
TEST_CASE("lora: the optimizer moves A and B alone") {
    using namespace lora_test;
    Transformer model(small_config(Arch::encoder_decoder, Activation::relu), 11);
    Rng rng(2);
    add_adapters(model, 2, 2.0, LoraOn::qv, rng);
    std::vector<Matrix> base_before, adapters_before;
    for (auto& [name, p] : model.parameters()) base_before.push_back(p->value);
    for (auto& [name, p] : adapters_of(model)) adapters_before.push_back(p->value);
    Optimizer adam(OptimizerKind::adam);
    for (long t = 1; t <= 3; t++) {
        gradient_of(model, BATCH, 0.0);
        adam.update(model, 0.01, t);
    }
    std::size_t k = 0;
    for (auto& [tensor, p] : model.parameters()) {
        const std::string name = tensor;  // a structured binding cannot be captured (INFO's lambda) in C++17
        INFO(name);
        CHECK(p->value.data == base_before[k++].data);
        const std::string last = name.substr(name.rfind('.') + 1);
        const bool attention_or_ffn = last[0] == 'W' && name != "out.W";  // frozen, adapted (W_q W_v) or not
        CHECK(p->grad.empty() == attention_or_ffn);
    }
    k = 0;
    for (auto& [tensor, p] : adapters_of(model)) {
        const std::string name = tensor;
        INFO(name);
        CHECK(p->value.data != adapters_before[k++].data);
    }
    CHECK(adam.m.size() == adapters_of(model).size());
    CHECK(adam.s.size() == adapters_of(model).size());
}

// Weight decay shrinks the adapters as it shrinks the model's matrices (decoupled, chapter 03): by hand, one SGD step.
TEST_CASE("lora: weight decay shrinks A and B, by hand") {
    using namespace lora_test;
    Transformer model(small_config(Arch::encoder_decoder, Activation::relu), 11);
    Rng rng(2);
    add_adapters(model, 2, 2.0, LoraOn::qv, rng);
    Optimizer sgd(OptimizerKind::sgd, 0.5);
    const double lr = 0.1;
    gradient_of(model, BATCH, 0.0);
    std::vector<Matrix> before;
    for (auto& [name, p] : adapters_of(model)) before.push_back(p->value);
    sgd.update(model, lr, 1);
    std::size_t k = 0;
    for (auto& [tensor, p] : adapters_of(model)) {
        const std::string name = tensor;
        INFO(name);
        CHECK(decays(name));
        const Matrix& w = before[k++];
        for (std::size_t i = 0; i < w.data.size(); i++)
            REQUIRE(p->value.data[i] == w.data[i] * (1.0 - lr * 0.5) - lr * p->grad.data[i]);
    }
    CHECK(k == 12);  // A and B on W_q and W_v of three attentions: the encoder's, the decoder's self and cross
}

// Merged (W + s A B) and unmerged: the same logits up to rounding, and the merged model has no adapter left.
TEST_CASE("lora: merged and unmerged give the same logits") {
    using namespace lora_test;
    Transformer model(small_config(Arch::encoder_decoder, Activation::gelu), 13);
    Rng rng(4);
    add_adapters(model, 3, 3.0, LoraOn::all, rng);
    nudge_B(adapters_of(model), rng);
    check_merge_keeps_logits(model);
}

// With experts (chapter 11), --lora-on all puts adapters on every matrix of each expert's feed-forward and of each
// shared expert's, none on the router: each expert's W frozen (no gradient buffer), the router's kept. The loss is the
// one training follows, the balance loss included; every A and B of every expert is checked, both archs.
TEST_CASE("gradient: adapters on each expert's feed-forward, the router left alone") {
    using namespace lora_test;
    struct Case { Arch arch; Activation act; std::size_t matrices; };  // adapted: attention's, then E + N experts'
    for (const Case& k : {Case{Arch::encoder_decoder, Activation::relu, 12 + 2 * (3 + 1) * 2},
                          Case{Arch::decoder_only, Activation::swiglu, 4 + (3 + 1) * 3}}) {
        ModelConfig c = small_config(k.arch, k.act);
        c.experts = 3, c.top_k_asked = 2, c.shared_experts = 1, c.balance = 0.1;
        Transformer model(c, 17);
        Rng rng(6);
        add_adapters(model, 2, 3.0, LoraOn::all, rng);
        const ParamList adapters = adapters_of(model);
        CHECK(adapters.size() == 2 * k.matrices);
        int on_experts = 0;
        for (const auto& [tensor, p] : adapters) {
            const std::string name = tensor;
            INFO(name);
            CHECK(name.find("router") == std::string::npos);
            on_experts += name.find(".experts.") != std::string::npos || name.find(".shared.0.") != std::string::npos;
        }
        CHECK(on_experts == int(2 * (k.matrices - (k.arch == Arch::decoder_only ? 4 : 12))));
        for (auto& [tensor, p] : model.parameters()) {
            const std::string name = tensor;
            INFO(name);
            if (name.find(".W_") != std::string::npos) CHECK(p->grad.empty());     // every expert's W frozen
            if (name.find("router.W") != std::string::npos) CHECK(!p->grad.empty());  // the router's buffer kept
        }
        nudge_B(adapters, rng);
        check_gradients("experts + adapters (" + ARCH_NAMES[int(k.arch)] + ", " + ACTIVATION_NAMES[int(k.act)] + ")",
                        tensors_of(adapters), [&] { return model_loss(model) + balance_loss_of(model); },
                        [&] { gradient_of(model, BATCH, 0.0); });
        check_merge_keeps_logits(model);  // each expert's W + s A B: the routing and all
    }
}
