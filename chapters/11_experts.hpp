// chapters/11_experts.hpp -- a mixture of experts: E feed-forwards, a router that picks K of them for each token,
// and the balance loss that keeps the router from leaning on a few; each forward beside its backward.
//
// What it adds: --experts E --top-k K (Shazeer et al. 2017, "Outrageously large neural networks": a gate picks the
// top K of many experts), the softmax over the K kept scores (Mixtral, Jiang et al. 2024), --shared-experts N,
// experts every token goes through (DeepSeekMoE, Dai et al. 2024), and --balance A, the Switch Transformer's load
// balancing loss (Fedus, Zoph & Shazeer 2021). What it changes in the first part: Experts is a Layer (model.hpp) a
// block may hold as its feed-forward, and feed_forward_of builds one when E > 0, each expert by itself; with E = 0
// (the default) nothing changes, not one bit. The training table reports the balance loss apart
// (balance_loss_of, below).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "04_todays_blocks.hpp"  // Layer, feed_forward_of (this file is read where chapter 04 includes it)

// ---------------------------------------------------------------------------------------------
// Why experts. A feed-forward is most of a block's parameters, and every token pays for all of them. Make E of
// them, and let each token go through K << E: the model holds E feed-forwards' knowledge, a token costs K. Which K
// is learned: a router scores each expert for each token, and the token goes to its K best. Mixtral's 8 experts,
// 2 a token, hold 47B parameters and use 13B of them per token.
//
// The names, as every comment below uses them: n rows (the tokens of n_seq sequences stacked, n_seq T or n_seq S),
// d_model, E experts, K kept a token, N shared experts. An expert is a whole feed-forward of the model's kind
// (ReLU, GELU or SwiGLU) of width d_ff: x (n_i, d_model) -> (n_i, d_model) for the n_i rows routed to it.

// ---------------------------------------------------------------------------------------------
// The router: one linear map, W_router (d_model, E) without bias, gives each row a score per expert,
// scores = x W_router (n, E). A high score says "send this token here". It is trained like any weight, by the
// gradient that reaches it through the gate below (and through the balance loss, at the end).
//
// Top-k: the K largest of one row's E scores, best first. Ties are broken by a stated rule, the lower expert index
// wins, so that one seed gives the same choice, and then the same bits, on any machine and any thread count.
// (Exact ties hardly happen with real numbers, but a rule must exist for them to be reproducible.)
inline std::vector<int> top_k_of(const Matrix& scores, int row, int K) {  // scores (n, E) -> K expert indices
    std::vector<int> kept;
    std::vector<bool> taken(scores.cols, false);
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int i = 0; i < scores.cols; i++)  // strictly greater: on a tie the lower index, met first, stays
            if (!taken[i] && (best < 0 || scores.at(row, i) > scores.at(row, best))) best = i;
        taken[best] = true;
        kept.push_back(best);
    }
    return kept;
}

// A softmax over a short list (K kept scores, or all E): subtract the largest first, as softmax_rows does.
inline std::vector<double> softmax_of(const std::vector<double>& s) {
    double top = s[0], total = 0.0;
    for (double v : s) top = v > top ? v : top;
    std::vector<double> p(s.size());
    for (std::size_t i = 0; i < s.size(); i++) total += p[i] = maths::exp(s[i] - top);
    for (double& v : p) v /= total;
    return p;
}

// ---------------------------------------------------------------------------------------------
// The layer.   x, out (n, d_model); scores (n, E); for each row r its K experts chosen[r] and weights gate[r].
//   scores = x W_router                                  W_router (d_model, E), no bias: a score per expert
//   chosen[r] = top_k(scores[r])                         K indices, best first
//   gate[r] = softmax(scores[r][chosen[r]])              over the K kept scores only (Mixtral's rule): sums to 1
//   out[r] = sum_k gate[r][k] expert_{chosen[r][k]}(x[r]) + sum_j shared_j(x[r])
// Why a softmax over the K kept (Shazeer 2017's rule too, who also adds noise to the scores; Switch, at K = 1, weighs
// by the softmax over all E instead): the K weights sum to 1, so a token's output has one scale whatever E and K
// are. Its price shows at K = 1: the one weight is exactly 1 whatever the score, and the task's loss gives the router
// no gradient at all; it then learns from the balance loss alone (--top-k 1 --balance 0: a router that never moves,
// which a test checks exactly).
// Only a chosen expert computes, and only on its rows: gather them, run the expert, scatter back. An expert's work
// grows with the rows it was given, so a step's expert work grows with K, not with E.
struct Experts : Layer {
    int K = 1;                                // experts kept a token
    double balance = 0.0;                     // alpha, the balance loss's weight (--balance)
    Linear router;                            // (d_model -> E), no bias
    std::vector<Owned<Layer>> experts;        // E of them, each (n_i, d_model) -> (n_i, d_model)
    std::vector<Owned<Layer>> shared;         // N of them, every row, weight 1
    // Saved by forward, for the backward (and for --inspect: which expert each token went to):
    Matrix scores;                            // (n, E), x W_router
    std::vector<std::vector<int>> chosen;     // n x (K): each row's experts, best first
    std::vector<std::vector<double>> gate;    // n x (K): their weights, a softmax over the K kept scores
    std::vector<std::vector<int>> rows_of;    // E lists: the rows routed to expert i, in increasing order
    std::vector<std::vector<int>> slot_of;    // E lists: for each of those rows, which of its K slots i is
    std::vector<Matrix> expert_out;           // E matrices (n_i, d_model): expert i's outputs, before the gate
    Matrix probs;                             // (n, E): softmax over all E scores, the balance loss's P
    std::vector<double> share;                // (E): f_i, the share of the n K choices that went to expert i
    double balance_loss = 0.0;                // alpha E sum_i f_i P_i, this layer's term of the loss

    Experts() = default;
    // E experts and N shared ones, each built as the model's own feed-forward (dense: one_expert), drawn in this
    // order: the router, then experts 0 .. E-1, then shared 0 .. N-1.
    Experts(const ModelConfig& c, Rng& rng)
        : K(c.top_k()), balance(c.balance), router(c.d_model, c.experts, false, rng) {
        ModelConfig one_expert = c;
        one_expert.experts = 0, one_expert.shared_experts = 0;  // a plain feed-forward of the model's kind
        for (int i = 0; i < c.experts; i++) experts.push_back(feed_forward_of(one_expert, rng));
        for (int j = 0; j < c.shared_experts; j++) shared.push_back(feed_forward_of(one_expert, rng));
    }
    std::unique_ptr<Layer> copy() const override { return std::make_unique<Experts>(*this); }
    std::string kind(bool short_form) const override { return short_form ? "MoE" : "Experts"; }
    void list_parameters(const std::string& name, ParamList& list) override {
        list.push_back({name + ".router.W", &router.W});
        for (std::size_t i = 0; i < experts.size(); i++)
            experts[i]->list_parameters(name + ".experts." + std::to_string(i), list);
        for (std::size_t j = 0; j < shared.size(); j++)
            shared[j]->list_parameters(name + ".shared." + std::to_string(j), list);
    }

    Matrix forward(const Matrix& x) override {
        const int n = x.rows, d = x.cols, E = int(experts.size());
        // The router: one score per expert per row.   scores (n, E)
        scores = router.forward(x);
        // Top-k, and the gate: a softmax over the K kept scores, so a row's K weights sum to 1 whatever E is.
        chosen.assign(n, {});
        gate.assign(n, {});
        rows_of.assign(E, {});
        slot_of.assign(E, {});
        for (int r = 0; r < n; r++) {
            chosen[r] = top_k_of(scores, r, K);
            std::vector<double> kept_scores(K);
            for (int k = 0; k < K; k++) kept_scores[k] = scores.at(r, chosen[r][k]);
            gate[r] = softmax_of(kept_scores);
            for (int k = 0; k < K; k++) rows_of[chosen[r][k]].push_back(r), slot_of[chosen[r][k]].push_back(k);
        }
        // The weighted sum: expert by expert, gather its rows (n_i, d_model), run it, scatter gate * output back.
        // Each row's sum runs in expert order: fixed by the routing alone, whatever the thread count.
        Matrix out(n, d);
        expert_out.assign(E, Matrix());
        for (int i = 0; i < E; i++) {
            const int n_i = int(rows_of[i].size());
            if (n_i == 0) continue;  // chosen by no row: it does not run
            Matrix x_i(n_i, d);
            for (int j = 0; j < n_i; j++)
                for (int c = 0; c < d; c++) x_i.at(j, c) = x.at(rows_of[i][j], c);
            expert_out[i] = experts[i]->forward(x_i);  // (n_i, d_model)
            for (int j = 0; j < n_i; j++) {
                const int r = rows_of[i][j];
                const double g = gate[r][slot_of[i][j]];
                for (int c = 0; c < d; c++) out.at(r, c) += g * expert_out[i].at(j, c);
            }
        }
        for (Owned<Layer>& s : shared) accumulate(out, s->forward(x));  // every row, weight 1
        balance_forward();
        return out;
    }

    // ---------------------------------------------------------------------------------------------
    // The backward, the forward's lines undone last first. d_out (n, d_model) -> dx (n, d_model).
    //   The shared experts: out += shared_j(x), so d of shared_j's output is d_out, and dx gets its input's gradient.
    //   The weighted sum: out[r] += g expert_i(x)[j] (row r the j-th of expert i's, g = gate[r][k]), so
    //     d expert_i's output row j = g d_out[r]               (an expert's rows only; one no row chose gets nothing)
    //     d g = d_out[r] . expert_i(x)[j]                       (the gate's slope is the output it weighs)
    //   The gate: g = softmax(kept_scores), so d kept_scores_k = g_k (d g_k - sum_m g_m d g_m)   (softmax's backward)
    //   Top-k: a choice, constant while no two scores swap (away from ties): d score = d kept_scores at the K chosen
    //     experts, 0 at the others (the others' scores reach the loss only through the balance loss, below).
    //   The router: scores = x W_router, so d W_router += x^T d scores, and dx += d scores W_router^T.
    // x fed three paths (the experts, the shared experts, the router): its gradient is the sum of the three.
    Matrix backward(const Matrix& d_out) override {
        const int n = d_out.rows, d = d_out.cols, E = int(experts.size());
        Matrix dx(n, d);
        // forward: out += shared_j.forward(x)
        for (Owned<Layer>& s : shared) accumulate(dx, s->backward(d_out));
        // forward: out[r] += gate[r][k] * expert_out[i][j], for each row j of expert i's
        std::vector<std::vector<double>> d_gate(n, std::vector<double>(K, 0.0));
        for (int i = 0; i < E; i++) {
            const int n_i = int(rows_of[i].size());
            if (n_i == 0) continue;  // ran on no row: its gradient stays exactly the zero it was set to
            Matrix d_out_i(n_i, d);  // (n_i, d_model): d of expert i's output
            for (int j = 0; j < n_i; j++) {
                const int r = rows_of[i][j], k = slot_of[i][j];
                for (int c = 0; c < d; c++) {
                    d_out_i.at(j, c) = gate[r][k] * d_out.at(r, c);
                    d_gate[r][k] += d_out.at(r, c) * expert_out[i].at(j, c);
                }
            }
            // forward: expert_out[i] = experts[i].forward(x_i), x_i gathered from x: scatter its gradient back
            Matrix dx_i = experts[i]->backward(d_out_i);
            for (int j = 0; j < n_i; j++)
                for (int c = 0; c < d; c++) dx.at(rows_of[i][j], c) += dx_i.at(j, c);
        }
        // forward: gate[r] = softmax(kept_scores), kept_scores[k] = scores[r][chosen[r][k]]
        Matrix d_scores(n, E);  // (n, E): zero at every expert a row did not keep
        for (int r = 0; r < n; r++) {
            double weighed = 0.0;  // sum_m g_m d g_m
            for (int k = 0; k < K; k++) weighed += gate[r][k] * d_gate[r][k];
            for (int k = 0; k < K; k++) d_scores.at(r, chosen[r][k]) += gate[r][k] * (d_gate[r][k] - weighed);
        }
        balance_backward(d_scores);  // the balance loss's own term: its gradient starts here
        // forward: scores = router.forward(x)
        accumulate(dx, router.backward(d_scores));
        return dx;
    }

    // ---------------------------------------------------------------------------------------------
    // The balance loss. Left alone, a router can collapse: the experts chosen early train more, score higher, are
    // chosen more. Switch's fix is a small loss that is least when the load is even:
    //   L_balance = alpha E sum_i f_i P_i
    //   f_i = (rows' choices of expert i) / (K n): the share of the n K choices expert i took
    //   P_i = (1 / n) sum_r probs[r][i], probs[r] = softmax over all E scores[r]: the router's mean wish for i
    // With every expert alike, f_i = P_i = 1 / E and L_balance = alpha: the E in front makes that true for any E.
    // f_i counts choices, a step function of the scores: it has no gradient, and the loss moves P alone, down where
    // f is high. So it pushes each router score down in proportion to how loaded its expert is.
    // Which rows: all n the layer sees (a sequence's PAD rows too; decoder-only, the source's rows too).
    // What it does to the experts' loads, with and without it: course lab 34 measures it, and draws it (--svg).
    void balance_forward() {
        const int n = scores.rows, E = scores.cols;
        probs = Matrix(n, E);
        share.assign(E, 0.0);
        for (int r = 0; r < n; r++) {
            std::vector<double> row(E);
            for (int i = 0; i < E; i++) row[i] = scores.at(r, i);
            std::vector<double> p = softmax_of(row);
            for (int i = 0; i < E; i++) probs.at(r, i) = p[i];
        }
        balance_loss = 0.0;
        if (n == 0) return;  // no rows, no load: nothing to balance (and no 0 / 0)
        for (int i = 0; i < E; i++) share[i] = double(rows_of[i].size()) / (double(K) * n);
        for (int i = 0; i < E; i++) {
            double mean_p = 0.0;  // P_i
            for (int r = 0; r < n; r++) mean_p += probs.at(r, i);
            balance_loss += share[i] * (mean_p / n);
        }
        balance_loss *= balance * E;
    }
    // d L_balance / d probs[r][i] = alpha E f_i / n (f fixed), the same for every row; then through each row's
    // softmax over E: d scores[r] += p (g - sum_m p_m g_m), with g_i = alpha E f_i / n.   d_scores (n, E)
    void balance_backward(Matrix& d_scores) const {
        if (balance == 0.0) return;
        const int n = scores.rows, E = scores.cols;
        std::vector<double> g(E);
        for (int i = 0; i < E; i++) g[i] = balance * E * share[i] / n;
        for (int r = 0; r < n; r++) {
            double weighed = 0.0;
            for (int i = 0; i < E; i++) weighed += probs.at(r, i) * g[i];
            for (int i = 0; i < E; i++) d_scores.at(r, i) += probs.at(r, i) * (g[i] - weighed);
        }
    }
    // How many rows each expert took in the last forward (--inspect, the report): (E)
    std::vector<int> load() const {
        std::vector<int> counts;
        for (const std::vector<int>& rows : rows_of) counts.push_back(int(rows.size()));
        return counts;
    }
};

// The balance loss of a whole model (the training table's column): the sum of every block's from the
// last forward; 0 without experts. Each block's backward adds its gradient itself. (A template: the Transformer is
// defined after this chapter, where model.hpp includes it.)
template <class Model>
double balance_loss_of(const Model& model) {
    double total = 0.0;
    auto add = [&](const Owned<Layer>& f) {
        if (const auto* moe = dynamic_cast<const Experts*>(f.get())) total += moe->balance_loss;
    };
    for (const auto& block : model.encoder) add(block.ffn);
    for (const auto& block : model.decoder) add(block.ffn);
    return total;
}
