// chapters/11_experts_test.cpp -- the mixture of experts (11_experts.hpp): every backward checked by central
// differences in double precision (the router, the experts, the input, the balance loss), away from ties; an expert no
// row chose gets an exact zero gradient; one expert kept of one is the dense feed-forward, bit for bit; E = 0 builds
// the model it always built; and the whole model's gradient with experts, its balance loss included.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "10_decoding.hpp"  // the tutorial, the decoding cache, and through model.hpp the chapter under test

namespace experts_test {

// The check, as tests.cpp's: nudge each entry by +-H, compare (L_up - L_down) / (up - down) with the analytic
// gradient, relative error floored at FLOOR; a real bug gives 1e-3 to 1. H is 1e-5, not tests.cpp's 3e-5: a central
// difference's own error falls as H^2, and on the whole decoder-only model with experts it was 1.4e-6 at 3e-5 (the
// embedding table's worst entry), 1.4e-7 at 1e-5; round-off stays far below either.
constexpr double H = 1e-5, FLOOR = 1e-4, TOLERANCE = 1e-6;
struct Tensor { std::string name; Matrix* value; Matrix* grad; };
std::vector<Tensor> tensors_of(const ParamList& params) {
    std::vector<Tensor> t;
    for (const auto& [name, p] : params)
        if (!p->value.empty()) t.push_back({name, &p->value, &p->grad});
    return t;
}
Matrix random_matrix(int rows, int cols, Rng& rng, double lo = -1.0, double hi = 1.0) {
    Matrix m(rows, cols);
    for (double& v : m.data) v = rng.uniform(lo, hi);
    return m;
}
void jitter(const ParamList& params, Rng& rng, double amount) {
    for (const auto& [name, p] : params)
        for (double& v : p->value.data) v += rng.uniform(-amount, amount);
}
double dot(const Matrix& A, const Matrix& B) {
    double s = 0.0;
    for (std::size_t i = 0; i < A.data.size(); i++) s += A.data[i] * B.data[i];
    return s;
}
// The worst relative error over every entry of every tensor; each tensor's analytic gradient must not be all zeros.
void check_gradients(const std::string& check, const std::vector<Tensor>& tensors, const std::function<double()>& loss,
                     const std::function<void()>& analytic) {
    REQUIRE(!tensors.empty());
    for (const Tensor& t : tensors) t.grad->zero();
    analytic();
    for (const Tensor& t : tensors) {
        const Matrix a = *t.grad;
        double worst = 0.0, largest = 0.0;
        for (std::size_t i = 0; i < t.value->data.size(); i++) {
            double& x = t.value->data[i];
            const double saved = x, up = saved + H, down = saved - H;
            x = up;
            const double L_up = loss();
            x = down;
            const double L_down = loss();
            x = saved;
            const double n = (L_up - L_down) / (up - down);
            worst = std::max(worst, std::fabs(a.data[i] - n) / std::max(std::fabs(a.data[i]) + std::fabs(n), FLOOR));
            largest = std::max(largest, std::fabs(a.data[i]));
        }
        std::printf("  %-34s %-26s %5zu entries   worst rel. error %.1e\n", check.c_str(), t.name.c_str(),
                    t.value->data.size(), worst);
        INFO(check, " / ", t.name, ": worst relative error ", worst, ", largest |gradient| ", largest);
        CHECK(largest > 0.0);
        CHECK(worst <= TOLERANCE);
    }
}
// The smallest gap, over the rows, between the K-th kept score and the best one left out: a nudge of H moves a score
// by about H |x|, far below it, so no check crosses a tie.
double smallest_gap(const Experts& moe) {
    double gap = 1e9;
    for (int r = 0; r < moe.scores.rows; r++) {
        const double last_kept = moe.scores.at(r, moe.chosen[r].back());
        for (int i = 0; i < moe.scores.cols; i++) {
            bool kept = false;
            for (int k : moe.chosen[r]) kept = kept || k == i;
            if (!kept) gap = std::min(gap, last_kept - moe.scores.at(r, i));
        }
    }
    return gap;
}
ModelConfig experts_config(Activation act, int E, int K, int shared, double balance) {
    ModelConfig c;
    c.d_model = 8, c.d_ff = 12, c.activation = act;
    c.experts = E, c.top_k_asked = K, c.shared_experts = shared, c.balance = balance;
    return c;
}

}  // namespace experts_test

// out = Experts(x), L = sum(out * G) + L_balance: every parameter and the input, for each kind of expert, K = 1 and 2,
// with and without a shared expert and the balance loss. Weights jittered (biases off zero), n = 16 rows.
TEST_CASE("gradient: experts, the router, the gate and the input, each kind of feed-forward") {
    using namespace experts_test;
    struct Case { Activation act; int K, shared; double balance; };
    const std::vector<Case> cases = {
        {Activation::relu, 1, 0, 0.0},   {Activation::relu, 2, 0, 0.0},  {Activation::gelu, 2, 1, 0.0},
        {Activation::swiglu, 1, 0, 0.5}, {Activation::swiglu, 2, 1, 0.5}, {Activation::gelu, 3, 0, 0.5},
    };
    for (const Case& k : cases) {
        const ModelConfig c = experts_config(k.act, 4, k.K, k.shared, k.balance);
        Rng rng(31);
        Owned<Layer> built = feed_forward_of(c, rng);
        REQUIRE(dynamic_cast<Experts*>(built.get()));
        Layer& ffn = *built;
        Experts& moe = dynamic_cast<Experts&>(ffn);
        ParamList params;
        ffn.list_parameters("ffn", params);
        jitter(params, rng, 0.1);
        Matrix x = random_matrix(16, c.d_model, rng), dx(16, c.d_model);
        Matrix G = random_matrix(16, c.d_model, rng);
        ffn.forward(x);
        INFO("K = ", k.K, ", smallest gap ", smallest_gap(moe));
        REQUIRE(smallest_gap(moe) > 1e-3);
        std::vector<int> load = moe.load();
        for (int taken : load) REQUIRE(taken > 0);  // every expert ran: each gradient below is compared, none zero
        std::vector<Tensor> tensors = tensors_of(params);
        tensors.insert(tensors.begin(), {"x", &x, &dx});
        if (k.K == 1 && k.balance == 0.0) {
            // One expert kept: its gate is softmax of one score, exactly 1 whatever the score, so the task's loss
            // gives the router no gradient at all (only the balance loss does). Checked exact, then left out.
            ffn.forward(x);
            moe.router.W.grad.zero();
            ffn.backward(G);
            for (double g : moe.router.W.grad.data) CHECK(g == 0.0);
            tensors.erase(tensors.begin() + 1);  // ffn.router.W, listed first
        }
        const std::string name = "Experts (" + ACTIVATION_NAMES[int(k.act)] + ", E 4, K " + std::to_string(k.K) +
                                 (k.shared ? ", shared 1" : "") + (k.balance > 0 ? ", balance" : "") + ")";
        check_gradients(
            name, tensors, [&] { return dot(ffn.forward(x), G) + moe.balance_loss; },
            [&] {
                ffn.forward(x);
                dx = ffn.backward(G);
            });
    }
}

// L = L_balance alone (G = 0): its gradient reaches the router's weights and, through the scores, the input; the
// experts' weights get none (f_i is a count, P_i does not read them).
TEST_CASE("gradient: the balance loss alone, into the router and the input") {
    using namespace experts_test;
    for (int K : {1, 2}) {
        const ModelConfig c = experts_config(Activation::relu, 4, K, 0, 0.3);
        Rng rng(5);
        Experts moe(c, rng);
        Matrix x = random_matrix(9, c.d_model, rng), dx(9, c.d_model), zero(9, c.d_model);
        moe.forward(x);
        REQUIRE(smallest_gap(moe) > 1e-3);
        CHECK(moe.balance_loss > 0.0);
        check_gradients(
            "balance loss (K " + std::to_string(K) + ")", {{"x", &x, &dx}, {"router.W", &moe.router.W.value,
                                                                              &moe.router.W.grad}},
            [&] {
                moe.forward(x);
                return moe.balance_loss;
            },
            [&] {
                moe.forward(x);
                dx = moe.backward(zero);
            });
        // With the load even and the router undecided (every score equal), L_balance = alpha exactly: f_i = P_i = 1/E.
        Experts even(c, rng);
        even.router.W.value.zero();
        Matrix same(8, c.d_model, 0.5);
        even.forward(same);  // all scores 0: ties everywhere, broken by the lower index, so K experts take every row
        for (int i = 0; i < 4; i++) CHECK(even.load()[i] == (i < K ? 8 : 0));
        CHECK(even.balance_loss == doctest::Approx(0.3 * 4 * (K * (1.0 / K) * 0.25)).epsilon(1e-15));
    }
}

// An expert no row chose does not run, and its gradient is exactly zero, not merely small. Expert 3's router column
// scores -10 on a column of the input that is 1 in every row, the others' 0 there, and the rest of the input small, so
// expert 3 comes last in every row.
TEST_CASE("experts: an expert no row chose gets an exact zero gradient") {
    using namespace experts_test;
    for (Activation act : {Activation::relu, Activation::swiglu}) {
        const ModelConfig c = experts_config(act, 4, 2, 1, 0.1);
        Rng rng(8);
        Owned<Layer> built = feed_forward_of(c, rng);
        Layer& ffn = *built;
        Experts& moe = dynamic_cast<Experts&>(ffn);
        ParamList params;
        ffn.list_parameters("ffn", params);
        jitter(params, rng, 0.1);
        for (auto& [name, p] : params) p->grad.zero();
        for (int i = 0; i < 4; i++) moe.router.W.value.at(0, i) = i == 3 ? -10.0 : 0.0;
        Matrix x = random_matrix(12, c.d_model, rng, -0.3, 0.3);
        for (int r = 0; r < x.rows; r++) x.at(r, 0) = 1.0;
        Matrix G = random_matrix(12, c.d_model, rng);
        ffn.forward(x);
        for (int i = 0; i < 3; i++) REQUIRE(moe.load()[i] > 0);
        CHECK(moe.load()[3] == 0);
        ffn.backward(G);
        int unchosen = 0, chosen_nonzero = 0;
        for (auto& entry : params) {  // (not a structured binding: clang's C++17 lets INFO's lambda capture none)
            const std::string name = entry.first;
            const Param* p = entry.second;
            double largest = 0.0;
            for (double g : p->grad.data) largest = std::max(largest, std::fabs(g));
            if (name.rfind("ffn.experts.3.", 0) == 0) {
                unchosen++;
                INFO(name);
                CHECK(largest == 0.0);
            } else if (name.rfind("ffn.experts.", 0) == 0 && name.find(".W_") != std::string::npos) {
                chosen_nonzero += largest > 0.0 ? 1 : 0;
            }
        }
        CHECK(unchosen == (act == Activation::swiglu ? 6 : 4));  // every weight and bias of expert 3 was looked at
        CHECK(chosen_nonzero == (act == Activation::swiglu ? 9 : 6));  // experts 0 .. 2's weights all moved
    }
}

// E = 1, K = 1: the gate is softmax of one score, exactly 1, and the router's gradient exactly 0; the layer is its one
// expert, the dense feed-forward, bit for bit, forward and backward (the router drawn first, so the expert is copied
// into a dense block of its own).
TEST_CASE("experts: one expert kept of one is the dense feed-forward, bit for bit") {
    using namespace experts_test;
    for (Activation act : {Activation::relu, Activation::gelu, Activation::swiglu}) {
        const ModelConfig c = experts_config(act, 1, 1, 0, 0.01);
        Rng rng(3);
        Experts moe(c, rng);
        Owned<Layer> copied = moe.experts[0];
        Layer& dense = *copied;
        Matrix x = random_matrix(5, c.d_model, rng), G = random_matrix(5, c.d_model, rng);
        const Matrix y_moe = moe.forward(x), y_dense = dense.forward(x);
        CHECK(y_moe.data == y_dense.data);
        const Matrix dx_moe = moe.backward(G), dx_dense = dense.backward(G);
        CHECK(dx_moe.data == dx_dense.data);
        ParamList from_moe, from_dense;
        moe.experts[0]->list_parameters("f", from_moe);
        dense.list_parameters("f", from_dense);
        REQUIRE(from_moe.size() == from_dense.size());
        for (std::size_t i = 0; i < from_moe.size(); i++)
            CHECK(from_moe[i].second->grad.data == from_dense[i].second->grad.data);
        for (double g : moe.router.W.grad.data) CHECK(g == 0.0);
    }
}

// E = 0, the default: the experts' other settings change nothing, the model is drawn as before (the same weights,
// the same logits, bit for bit), and every feed-forward is the dense kind.
TEST_CASE("experts: E = 0 leaves the model as it was") {
    ModelConfig plain;
    ModelConfig asked = plain;
    asked.top_k_asked = 3, asked.shared_experts = 2, asked.balance = 0.5;  // with E = 0, read by nothing
    Transformer a(plain, 42), b(asked, 42);
    ParamList pa = a.parameters(), pb = b.parameters();
    REQUIRE(pa.size() == pb.size());
    for (std::size_t i = 0; i < pa.size(); i++) CHECK(pa[i].second->value.data == pb[i].second->value.data);
    for (DecoderBlock& block : b.decoder) CHECK(dynamic_cast<FeedForward*>(block.ffn.get()));
    const Transformer::Batch src = {{3, 1, 2, 5, 4}}, tgt = {{10, 1, 2, 3, 4}};
    CHECK(a.forward(src, tgt).data == b.forward(src, tgt).data);
}

// The whole model with experts, encoder-decoder and decoder-only: L = the batch's cross-entropy + every layer's
// balance loss, as training follows it (gradient_of); every parameter checked.
TEST_CASE("gradient: the whole model with experts and the balance loss") {
    using namespace experts_test;
    for (Arch arch : {Arch::encoder_decoder, Arch::decoder_only}) {
        ModelConfig c = experts_config(Activation::gelu, 4, 2, 1, 0.2);
        c.arch = arch, c.enc_layers = arch == Arch::decoder_only ? 0 : 1;
        c.max_len = arch == Arch::decoder_only ? 10 : 5;
        Transformer model(c, 19);
        Rng rng(2);
        jitter(model.parameters(), rng, 0.05);
        const std::vector<Example> batch = {{{3, 1, 2, 5, 4}, {10, 1, 2, 3, 4}, {1, 2, 3, 4, 5}},
                                            {{9, 7, 8, PAD, PAD}, {10, 7, 8, 9, PAD}, {7, 8, 9, PAD, PAD}}};
        auto loss = [&] {
            Inputs in = inputs_of(batch, 0, batch.size());
            Matrix logits = model.forward(in.sources, in.targets_in);
            Matrix unused(logits.rows, logits.cols);
            return batch_loss(logits, batch, 0.0, unused).followed + balance_loss_of(model);
        };
        gradient_of(model, batch, 0.0);
        const double at_start = balance_loss_of(model);  // the term of the forward gradient_of ran
        for (DecoderBlock& block : model.decoder) REQUIRE(smallest_gap(dynamic_cast<Experts&>(*block.ffn)) > 1e-3);
        for (EncoderBlock& block : model.encoder) REQUIRE(smallest_gap(dynamic_cast<Experts&>(*block.ffn)) > 1e-3);
        CHECK(at_start > 0.0);
        check_gradients(arch == Arch::decoder_only ? "model with experts (decoder-only)" : "model with experts",
                        tensors_of(model.parameters()), loss, [&] { gradient_of(model, batch, 0.0); });
    }
}

// Decoding with the cache (chapter 10) runs each block on the newest rows alone; the experts route each row by itself,
// so every position's logits are those of one teacher-forced pass, bit for bit, and greedy takes their argmax.
TEST_CASE("experts: greedy decoding with the cache is one teacher-forced pass, bit for bit") {
    for (Arch arch : {Arch::encoder_decoder, Arch::decoder_only}) {
        ModelConfig c = experts_test::experts_config(Activation::relu, 4, 2, 1, 0.01);
        c.arch = arch, c.enc_layers = arch == Arch::decoder_only ? 0 : 1, c.dec_layers = 2;
        c.max_len = arch == Arch::decoder_only ? 8 : 4;
        Transformer model(c, 51);
        const std::vector<int> source = {5, 3, 1, PAD};
        const int length = 4;
        std::vector<int> out = greedy_decode(model, {source}, length)[0];
        std::vector<int> decoder_in = shifted_right(out, c.vocab);
        Matrix full = model.forward({source}, {decoder_in});  // (length, vocab)
        DecodingCache cache = start_decoding(model, {source});
        int differing = 0;
        for (int t = 0; t < length; t++) {
            Matrix newest = newest_logits(model, cache, {{decoder_in[t]}});  // (1, vocab)
            for (int v = 0; v < c.vocab; v++) differing += newest.at(0, v) == full.at(t, v) ? 0 : 1;
        }
        CHECK(differing == 0);
    }
}
