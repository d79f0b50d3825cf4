// chapters/03_optimizers.hpp -- beyond plain SGD: momentum and Adam, gradient clipping and weight decay.
//
// What it adds: --optimizer momentum and adam (the paper trained with Adam), --clip and --weight-decay. What it
// changes in the first part: TrainState keeps an Optimizer, whose update is SGD's one line (w -= lr g) by default.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "../model.hpp"  // ParamList, Transformer

// Each optimizer's row, in OptimizerKind's order: its name (flags, checkpoint), its title (printed), its rate when --lr
// is not given (momentum's steps are about 1 / (1 - mu) = 10 times SGD's for one rate; Adam's about lr in every entry).
enum class OptimizerKind { sgd, momentum, adam };
struct OptimizerRow { std::string name, title; double default_lr; };
const std::vector<OptimizerRow> OPTIMIZERS = {
    {"sgd", "SGD", 0.2}, {"momentum", "momentum", 0.02}, {"adam", "Adam", 0.001}};
const std::vector<std::string> OPTIMIZER_NAMES = [] {  // the rows' names, for the flag and the checkpoint
    std::vector<std::string> names;
    for (const OptimizerRow& row : OPTIMIZERS) names.push_back(row.name);
    return names;
}();

// The Optimizer: SGD, momentum and Adam, and before them clipping and weight decay. What one needs between steps, it
// keeps per parameter, in w's shape.
//   SGD        w -= lr g
//   momentum   m = mu m + g,  w -= lr m        (mu 0.9: m sums past gradients, decaying, so a steady
//                                               direction gathers speed and noise cancels out)
//   Adam       m = beta1 m + (1 - beta1) g,  s = beta2 s + (1 - beta2) g^2   (running means of g, g^2)
//              m_hat = m / (1 - beta1^t),    s_hat = s / (1 - beta2^t)       (both start at 0: unbias)
//              w -= lr m_hat / (sqrt(s_hat) + eps)                           (a step size per entry)
//   with the paper's beta1 0.9, beta2 0.98, eps 1e-9; t counts the updates from 1.
// Before the step, each off at 0:
//   clipping      the norm of all gradients as one vector, above `clip`, scales every g by clip / (norm + 1e-6)
//                 (PyTorch's clip_grad_norm_, which minGPT and nanoGPT call; the 1e-6 spares a zero norm)
//   weight decay  w *= 1 - lr weight_decay, apart from the gradient (decoupled, AdamW's form, for SGD and
//                 momentum too): matrices only, not biases, gamma or beta, as nanoGPT; LoRA's adapters too
//                 (chapter 12: a LoRA run keeps its base file's decay), as PyTorch's AdamW decays every tensor
//                 it trains. minGPT spares the embedding table, lest rare tokens' rows shrink; all 11 of ours
//                 are common.
inline bool decays(const std::string& name) {  // W_q .. W_2, out.W, embed.table, embed.positions, lora_A, lora_B
    std::string last = name.substr(name.rfind('.') + 1);
    return last[0] == 'W' || last == "table" || last == "positions" || last == "lora_A" || last == "lora_B";
}
struct Optimizer {
    static constexpr double mu = 0.9, beta1 = 0.9, beta2 = 0.98, eps = 1e-9;
    OptimizerKind kind = OptimizerKind::sgd;
    double weight_decay = 0.0, clip = 0.0;  // TrainConfig's
    std::vector<Matrix> m, s;   // one per parameter, in its shape: momentum keeps m, Adam m and s, SGD none

    explicit Optimizer(OptimizerKind k = OptimizerKind::sgd, double decay = 0.0, double max_norm = 0.0)
        : kind(k), weight_decay(decay), clip(max_norm) {}
    int running_means() const {  // kept per parameter: m for momentum, m and s for Adam
        switch (kind) {
        case OptimizerKind::sgd: return 0;
        case OptimizerKind::momentum: return 1;
        case OptimizerKind::adam: return 2;
        }
        return 0;  // not reached
    }

    // Update number t (1, 2, ...: Adam's unbiasing reads it) with the rate lr.
    void update(Transformer& model, double lr, long t) {
        ParamList params = trained_parameters(model);  // every parameter; a model with adapters, them alone (ch. 12)
        if (clip > 0) {  // clipping: norm = sqrt(sum of g^2 over every entry of every gradient)
            double sum = 0.0;
            for (auto& [name, p] : params)
                for (double g : p->grad.data) sum += g * g;
            for (auto& [name, p] : params)
                for (double& g : p->grad.data) g *= std::min(1.0, clip / (std::sqrt(sum) + 1e-6));
        }
        if (m.empty() && running_means() > 0)  // the first update: the running means start at zero
            for (auto& [name, p] : params) {
                m.emplace_back(p->value.rows, p->value.cols);
                if (running_means() == 2) s.emplace_back(p->value.rows, p->value.cols);
            }
        const double unbias1 = 1.0 - maths::pow(beta1, double(t)), unbias2 = 1.0 - maths::pow(beta2, double(t));
        for (std::size_t k = 0; k < params.size(); k++) {
            std::vector<double>& w = params[k].second->value.data;
            const std::vector<double>& g = params[k].second->grad.data;
            if (weight_decay > 0 && decays(params[k].first))
                for (double& wi : w) wi *= 1.0 - lr * weight_decay;
            switch (kind) {
            case OptimizerKind::sgd:
                for (std::size_t i = 0; i < w.size(); i++) w[i] -= lr * g[i];
                break;
            case OptimizerKind::momentum:
                for (std::size_t i = 0; i < w.size(); i++) {
                    m[k].data[i] = mu * m[k].data[i] + g[i];
                    w[i] -= lr * m[k].data[i];
                }
                break;
            case OptimizerKind::adam:
                // exercise adam: begin (uses unbias1 unbias2)
                for (std::size_t i = 0; i < w.size(); i++) {
                    double& mi = m[k].data[i];
                    double& si = s[k].data[i];
                    mi = beta1 * mi + (1.0 - beta1) * g[i];
                    si = beta2 * si + (1.0 - beta2) * g[i] * g[i];
                    w[i] -= lr * (mi / unbias1) / (std::sqrt(si / unbias2) + eps);
                }
                // exercise adam: end
                break;
            }
        }
    }
};
