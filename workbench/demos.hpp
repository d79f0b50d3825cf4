// workbench/demos.hpp -- --demo scale, softmax and gradcheck: three small experiments for the course's
// exercises, each printing a table (no training).
//
// Sections: why attention divides by sqrt(d_k); why softmax subtracts the row max; the gradient
// check's step h; the one switch that runs them.
#pragma once

#include <string>
#include <vector>

#include "settings.hpp"  // fit_to_data, and through it train.hpp
#include "text.hpp"

// The demonstrations, with their names as --demo spells them and what each shows (--help), in the enum's order. A new
// one is a value, a name and a line here, its function below, and its case in run_demo's switch, which the compiler
// asks for (-Wswitch).
enum class Demo { scale, softmax, gradcheck };
const std::vector<std::string> DEMO_NAMES = {"scale", "softmax", "gradcheck"};
const std::vector<std::string> DEMO_SHOWS = {"why attention divides its scores by sqrt(d_k)",
                                             "why softmax subtracts the row max before exp",
                                             "the central difference's error against its step h"};
inline std::string demos_help() {  // "scale: why ...; softmax: why ...; gradcheck: ..."
    std::string help;
    for (std::size_t k = 0; k < DEMO_NAMES.size(); k++) help += (k ? "; " : "") + DEMO_NAMES[k] + ": " + DEMO_SHOWS[k];
    return help;
}

// Scores q.k of random unit-variance vectors have variance d_k. Without the 1/sqrt(d_k) scale,
// large d_k pushes softmax to one-hot: the top weight nears 1 and the gradient through softmax
// (its Jacobian-vector product, as in matrix.hpp) nears 0, so attention stops learning.
inline void demo_scale() {
    const int keys = 8, samples = 2000;
    std::printf("--- why attention divides its scores by sqrt(d_k) ---\n"
                "one query against %d keys, entries drawn with mean 0 and variance 1, %d draws per row;\n"
                "'top weight' is the largest softmax weight, 'grad' the size of the gradient that softmax\n"
                "passes back for a random upstream gradient (both are means over the draws)\n\n"
                "%6s  %9s  %12s  %12s  %12s  %12s\n",
                keys, samples, "d_k", "std(q.k)", "top, scaled", "top, raw", "grad, scaled", "grad, raw");
    Rng rng(7);
    const double a = std::sqrt(3.0);  // U(-a, a) has variance 1
    for (int d_k : {1, 4, 16, 64, 256, 1024}) {
        double sum_sq = 0, top[2] = {0, 0}, grad[2] = {0, 0};  // [0] scaled, [1] raw
        for (int n = 0; n < samples; n++) {
            Matrix q(1, d_k), K(keys, d_k), G(1, keys);
            for (Matrix* m : {&q, &K, &G})
                for (double& v : m->data) v = rng.uniform(-a, a);
            Matrix raw = matmul_bt(q, K);  // (1, keys) = q K^T
            for (double v : raw.data) sum_sq += v * v / keys;
            for (int which = 0; which < 2; which++) {
                Matrix P = softmax_rows(which == 0 ? scale(raw, 1.0 / std::sqrt(double(d_k))) : raw), dS(1, keys);
                softmax_rows_backward(G, P, dS);
                double norm = 0;
                for (double v : dS.data) norm += v * v;
                top[which] += *std::max_element(P.data.begin(), P.data.end()) / samples;
                grad[which] += std::sqrt(norm) / samples;
            }
        }
        std::printf("%6d  %9.2f  %12.3f  %12.3f  %12.4f  %12.6f\n", d_k, std::sqrt(sum_sq / samples), top[0], top[1],
                    grad[0], grad[1]);
    }
}

// softmax as written in a textbook, exp(s) / sum exp(s), with no max subtracted.
inline std::vector<double> naive_softmax(const std::vector<double>& s) {
    std::vector<double> p(s.size());
    double sum = 0;
    for (std::size_t i = 0; i < s.size(); i++) sum += p[i] = maths::exp(s[i]);
    for (double& v : p) v /= sum;
    return p;
}

// Four rows of scores through both softmaxes: the textbook one overflows or divides 0 by 0.
inline void demo_softmax() {
    std::printf("--- why softmax subtracts the row max before exp ---\n"
                "exp overflows to inf above about 709.78 and underflows to 0 below about -745\n\n");
    const std::pair<const char*, std::vector<double>> rows[] = {
        {"small scores", {1, 2, 3}},
        {"large scores (an unscaled dot product)", {1000, 999, 998}},
        {"very negative scores", {-1000, -1001, -1002}},
        {"every key masked with -1e9", {MASKED, MASKED, MASKED}}};
    for (const auto& [what, scores] : rows) {
        Matrix S(1, int(scores.size()));
        S.data = scores;
        std::vector<double> naive = naive_softmax(scores), stable = softmax_rows(S).data;
        std::vector<std::string> s, a, b;
        for (std::size_t i = 0; i < scores.size(); i++) {
            s.push_back(std::to_string(long(scores[i])));
            a.push_back(number_text(naive[i]));
            b.push_back(number_text(stable[i]));
        }
        std::printf("%s: scores [%s]\n  exp(s) / sum exp(s)         [%s]\n  after subtracting the max   [%s]\n\n", what,
                    join(s, ", ").c_str(), join(a, ", ").c_str(), join(b, ", ").c_str());
    }
    std::printf("one nan weight makes its head's output nan, then every logit, the loss, every gradient,\n"
                "and after one SGD step every parameter: the whole model is lost.\n");
}

// The gradient check's step h (tests.cpp): the central difference (L(w + h) - L(w - h)) / 2h against
// the backward's dL/dw for one weight, h from 1e-1 to 1e-13. Its error has two parts: truncation,
// about h^2 L''' / 6, which shrinks with h, and round-off, about eps |L| / h (L(w + h) and L(w - h)
// share most of their digits, and eps = 2.2e-16 of |L| is lost in each), which grows as h shrinks.
// On a log scale the sum is a V; for this weight its bottom is at h = 1e-4.
inline void demo_gradcheck() {
    DataConfig d;
    Dataset data(d, {}, 0);
    ModelConfig c = fit_to_data(ModelConfig{}, d);
    c.activation = Activation::gelu;  // smooth: with ReLU, a unit that switches within h bends the large-h side
    Transformer model(c, 1);
    Rng rng = training_rng(1);
    std::vector<Example> batch = data.draw_batch(rng, 8);
    auto loss = [&] { return gradient_of(model, batch, 0.0).plain; };  // the loss and the grads, no step
    loss();
    Param& p = model.decoder[0].self_attn.W_q.W;
    double& w = p.value.at(3, 5);
    const double analytic = p.grad.at(3, 5), original = w;
    std::printf("--- how big a step h for the central difference? ---\n"
                "weight decoder.0.self_attn.W_q[3][5] of the default model with GELU (seed 1); "
                "L = the mean loss of 8 examples\n"
                "backward: dL/dw = %.15f\n\n%8s  %24s  %9s  %s\n", analytic, "h", "(L(w+h) - L(w-h)) / 2h", "|error|",
                "log10 |error|, one # per half decade");
    for (int k = 1; k <= 13; k++) {
        double h = maths::pow(10.0, -k);
        w = original + h;
        double up = loss();
        w = original - h;
        double down = loss();
        w = original;
        double numeric = (up - down) / (2 * h), error = std::fabs(numeric - analytic);
        double decades = error > 0 ? log10_of(error) : -17.0;
        std::printf("%8.0e  %24.15f  %9.1e  %6.1f %s\n", h, numeric, error, decades,
                    std::string(std::size_t(std::max(0.0, 2 * (decades + 16))), '#').c_str());
    }
    std::printf("\nlarge h: truncation, the error falls as h^2 (two decades per decade of h);\n"
                "small h: round-off, the error grows as 1/h; tests.cpp uses h = 3e-5, near the bottom of the V.\n");
}

// --demo NAME: the one place a demonstration is chosen.
inline void run_demo(Demo demo) {
    switch (demo) {
    case Demo::scale: demo_scale(); return;
    case Demo::softmax: demo_softmax(); return;
    case Demo::gradcheck: demo_gradcheck(); return;
    }
}
