// workbench/exercise_check.hpp -- the check of "Write it yourself" (exercises.hpp says how the three parts fit): your
// gradient against central differences of the forward, tensor by tensor, and what the pattern of the error suggests.
// Exercise-only, as exercises.hpp. The Adam update, which has no forward to differentiate, is compared with numbers
// computed once (the test beside this file computes them again from the tutorial).
//
// Sections: the diagnosis; the gradient check; the blocks' checks.
#pragma once

#include <functional>
#include <type_traits>

#include "exercises.hpp"

namespace exercises {

// ---------------------------------------------------------------------------------------------
// The diagnosis: your gradient against the true one (the central differences), entry by entry, and what the
// pattern of the error suggests, the way docs/course.md's exercise 9 reads its table: a whole tensor off by one
// factor is a constant left out or put in; by -1, a flipped sign; the true gradient's transpose, an index swapped;
// some rows right and others not, a case the code misses; none of these, a term missing (or one too many).
// h, the floor and the tolerance are tests.cpp's (its comment says why).
constexpr double H = 3e-5, FLOOR = 1e-4, TOLERANCE = 1e-6;
enum class Kind { right, assigns, zero, sign, factor, transpose, some_rows, term };
struct Verdict {
    Kind kind = Kind::right;
    double worst = 0.0;            // the worst relative error ...
    int row = 0, col = 0;          // ... at this entry,
    double yours = 0.0, truth = 0.0;  // where yours and the true gradient are these
    double factor = 1.0;           // Kind::factor: yours = factor x true
    std::vector<int> wrong_rows;   // Kind::some_rows
    bool is_right() const { return kind == Kind::right; }  // what the grade counts
};
inline double relative_error(double a, double n) {
    return std::fabs(a - n) / std::max(std::fabs(a) + std::fabs(n), FLOOR);
}
inline bool agree(const Matrix& a, const Matrix& b, int row = -1) {  // every entry (or row's) within the tolerance
    for (int i = 0; i < a.rows; i++)
        for (int j = 0; j < a.cols && (row < 0 || row == i); j++)
            if (relative_error(a.at(i, j), b.at(i, j)) > TOLERANCE) return false;
    return true;
}
inline Matrix transposed(const Matrix& A) {
    Matrix T(A.cols, A.rows);
    for (int i = 0; i < A.rows; i++)
        for (int j = 0; j < A.cols; j++) T.at(j, i) = A.at(i, j);
    return T;
}
inline double dot(const Matrix& A, const Matrix& B) {
    double sum = 0.0;
    for (std::size_t i = 0; i < A.data.size(); i++) sum += A.data[i] * B.data[i];
    return sum;
}

// adds: whether the backward added (+=) into the gradient it was handed, rather than assigning it (the check runs
// it twice, on zeros and on ones, and compares).
inline Verdict diagnose(const Matrix& yours, const Matrix& truth, bool adds = true) {
    Verdict v;
    for (int i = 0; i < yours.rows; i++)
        for (int j = 0; j < yours.cols; j++)
            if (double err = relative_error(yours.at(i, j), truth.at(i, j)); err > v.worst)
                v.worst = err, v.row = i, v.col = j, v.yours = yours.at(i, j), v.truth = truth.at(i, j);
    if (!adds) v.kind = Kind::assigns;
    else if (v.worst <= TOLERANCE) v.kind = Kind::right;
    else if (dot(yours, yours) == 0.0) v.kind = Kind::zero;
    else if (v.factor = dot(yours, truth) / dot(truth, truth); agree(yours, scale(truth, v.factor)))
        v.kind = std::fabs(v.factor + 1.0) < 1e-6 ? Kind::sign : Kind::factor;
    else if (yours.rows == yours.cols && agree(yours, transposed(truth))) v.kind = Kind::transpose;
    else {
        for (int i = 0; i < yours.rows; i++)
            if (!agree(yours, truth, i)) v.wrong_rows.push_back(i);
        v.kind = int(v.wrong_rows.size()) < yours.rows ? Kind::some_rows : Kind::term;
    }
    return v;
}
inline std::string kind_text(const Verdict& v) {
    std::vector<std::string> rows;
    for (int i : v.wrong_rows) rows.push_back(std::to_string(i));
    switch (v.kind) {
    case Kind::right: return "right";
    case Kind::assigns: return "assigns (=) where it must add (+=): the gradient it was handed is lost";
    case Kind::zero: return "zero everywhere: no gradient reaches it (a path left out?)";
    case Kind::sign: return "a flipped sign: yours is minus the true gradient";
    case Kind::factor: return fmt("a constant factor: yours is %.4g times the true gradient", v.factor);
    case Kind::transpose: return "the transpose of the true gradient (two indices swapped?)";
    case Kind::some_rows: return "only some rows wrong: row " + join(rows, ", ") + " (a case the code misses?)";
    case Kind::term: return "no factor, sign or transpose explains it: a term missing (or one too many)";
    }
    return "";  // not reached
}

// ---------------------------------------------------------------------------------------------
// The gradient check, as tests.cpp's: every entry nudged by +-h, the central difference beside your backward's.
// A row a tensor, printed as it is found and kept for the grade. A gap throws "not written yet", which stops it.
struct Tensor {
    std::string name;
    Matrix* value;
    Matrix* grad;
};
struct Row {
    std::string check, tensor;
    Verdict verdict;
};
struct Checker {
    std::vector<Row> rows;
    bool quiet = false;  // the tests read the rows without the printing

    // loss(): L at the values in place. analytic(): forward, then backward adding (+=) into every tensor's grad.
    void gradients(const std::string& check, const std::vector<Tensor>& tensors, const std::function<double()>& loss,
                   const std::function<void()>& analytic) {
        std::vector<Matrix> yours;
        for (const Tensor& t : tensors) t.grad->zero();
        analytic();
        for (const Tensor& t : tensors) yours.push_back(*t.grad);
        for (const Tensor& t : tensors) *t.grad = Matrix(t.grad->rows, t.grad->cols, 1.0);
        analytic();  // handed ones: a backward that adds gives yours + 1
        for (std::size_t k = 0; k < tensors.size(); k++) {
            Matrix& x = *tensors[k].value;
            Matrix truth(x.rows, x.cols);
            bool adds = true;
            for (std::size_t i = 0; i < x.data.size(); i++) {
                adds = adds && std::fabs(tensors[k].grad->data[i] - yours[k].data[i] - 1.0) < 1e-9;
                const double saved = x.data[i], up = saved + H, down = saved - H;
                x.data[i] = up;
                const double L_up = loss();
                x.data[i] = down;
                truth.data[i] = (L_up - loss()) / (up - down);
                x.data[i] = saved;
            }
            rows.push_back({check, tensors[k].name, diagnose(yours[k], truth, adds)});
            if (!quiet) print(rows.back());
        }
    }
    static void print(const Row& r) {  // one line: right, or wrong with the worst entry and what the pattern says
        const Verdict& v = r.verdict;
        std::printf("  %-27s %-25s ", r.check.c_str(), r.tensor.c_str());
        if (v.is_right()) std::printf("right (worst rel. error %.1e)\n", v.worst);
        else
            std::printf("WRONG, rel. error %.2g at [%d][%d] (yours %.4g, true %.4g): %s\n", v.worst, v.row, v.col,
                        v.yours, v.truth, kind_text(v).c_str());
    }
};

// ---------------------------------------------------------------------------------------------
// The blocks' checks, each at tests.cpp's small shapes (d_model 8, 2 heads of d_k 4, d_ff 12), with the exercise's
// choices (config), from random inputs and jittered parameters: L = sum(out * G) for a random G, so dL/d(out) = G.
inline Matrix random_matrix(int rows, int cols, Rng& rng, double amount = 1.0) {
    Matrix m(rows, cols);
    for (double& v : m.data) v = rng.uniform(-amount, amount);
    return m;
}
inline std::vector<Tensor> tensors_of(const ParamList& params, std::vector<Tensor> first = {}) {  // inputs first
    for (const auto& [name, p] : params)
        if (!p->value.empty()) first.push_back({name, &p->value, &p->grad});
    return first;
}
inline void jitter(const ParamList& params, Rng& rng, double amount = 0.1) {  // away from gamma 1, beta and biases 0
    for (const auto& [name, p] : params)
        for (double& v : p->value.data) v += rng.uniform(-amount, amount);
}
template <typename Block>
ParamList params_of(Block& block, const std::string& name) {
    ParamList list;
    block.list_parameters(name, list);
    return list;
}
inline void check_block(Checker& c, const std::string& check, const std::vector<Tensor>& tensors,
                        const std::function<Matrix()>& forward, const std::function<void(const Matrix&)>& backward) {
    Rng rng(99);
    Matrix out = forward(), G = random_matrix(out.rows, out.cols, rng);
    c.gradients(check, tensors, [&] { return dot(forward(), G); }, [&] { forward(), backward(G); });
}
inline ModelConfig small_config(ModelConfig c) {  // the exercise's choices, at the small shapes
    c.vocab = 7, c.max_len = 6, c.d_model = 8, c.d_ff = 12;
    if (c.kv_heads_asked == 0) c.n_heads = 2;
    return c;
}
const std::vector<int> PADDED_SOURCE = {4, 2, 5, PAD, PAD};  // S = 5, the last two hidden by the padding mask

inline void check_softmax_rows(Checker& c, const ModelConfig&) {
    Rng rng(1);
    Matrix X = scale(random_matrix(4, 5, rng), 3.0), dX(4, 5);  // rows neither flat nor one-hot
    check_block(c, "softmax_rows", {{"X", &X, &dX}}, [&] { return softmax_rows(X); },
                [&](const Matrix& G) { softmax_rows_backward(G, softmax_rows(X), dX); });
}
inline void check_attention(Checker& c, const ModelConfig& config) {
    Rng rng(2);
    const double p = config.attn_dropout;
    for (int how = 0; how < 3; how++) {  // no mask (T 3, S 5), causal (4, 4), padding (3, 5)
        const int T = how == 1 ? 4 : 3, S = how == 1 ? 4 : 5;
        Matrix mask = how == 0 ? Matrix() : how == 1 ? causal_mask(4) : padding_mask(3, {PADDED_SOURCE});
        Matrix Q = random_matrix(T, 4, rng), K = random_matrix(S, 4, rng), V = random_matrix(S, 4, rng);
        Matrix dQ(T, 4), dK(S, 4), dV(S, 4);
        SavedAttention saved;
        const std::string name[] = {"attention", "attention (causal)", "attention (padding)"};
        check_block(c, name[how] + (p > 0 ? " (dropout)" : ""), {{"Q", &Q, &dQ}, {"K", &K, &dK}, {"V", &V, &dV}},
                    [&] {
                        Rng draws(6);  // the same masks at every pass
                        return attention(Q, K, V, mask, saved, p, &draws);
                    },
                    [&](const Matrix& G) { attention_backward(G, saved, dQ, dK, dV); });
    }
}
inline void check_multi_head(Checker& c, const ModelConfig& config) {
    ModelConfig self = small_config(config);
    self.attn_dropout = 0.0;
    Rng rng(3);
    MultiHeadAttention mha(self, rng, true), cross(self, rng);
    jitter(params_of(mha, "self_attn"), rng);
    Matrix x = random_matrix(8, 8, rng), dx(8, 8), causal = stack_rows({causal_mask(4), causal_mask(4)});
    check_block(c, "MultiHeadAttention (self)", tensors_of(params_of(mha, "self_attn"), {{"x", &x, &dx}}),
                [&] { return mha.forward(x, x, causal, 2); },  // two sequences of 4, causal
                [&](const Matrix& G) { accumulate(dx, mha.backward_self(G)); });
    Matrix y = random_matrix(3, 8, rng), dy(3, 8), memory = random_matrix(5, 8, rng), d_memory(5, 8);
    Matrix mask = padding_mask(3, {PADDED_SOURCE});
    check_block(c, "MultiHeadAttention (cross)",
                tensors_of(params_of(cross, "cross_attn"), {{"y", &y, &dy}, {"memory", &memory, &d_memory}}),
                [&] { return cross.forward(y, memory, mask); },
                [&](const Matrix& G) { cross.backward(G, dy, d_memory); });
}
// A norm alone, rows of different offsets and spreads, so the mean and the variance matter.
template <typename Norm>
void check_norm(Checker& c, const std::string& check) {
    Rng rng(4);
    Norm norm(8);
    jitter(params_of(norm, "norm"), rng, 0.3);
    Matrix x = random_matrix(4, 8, rng), dx(4, 8);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) x.at(i, j) = x.at(i, j) * (i + 1) + i;
    check_block(c, check, tensors_of(params_of(norm, "norm"), {{"x", &x, &dx}}), [&] { return norm.forward(x); },
                [&](const Matrix& G) { accumulate(dx, norm.backward(G)); });
}
inline void check_embedding(Checker& c, const ModelConfig& config) {
    Rng rng(5);
    Embedding embed(small_config(config), rng);  // learned positions: a gradient for the position table too
    const std::vector<int> tokens = {3, 1, 3, 6, 1}, rows = {0, 1, 2, 3, 4};  // 3 and 1 twice: rows add up
    check_block(c, "Embedding", tensors_of(params_of(embed, "embed")), [&] { return embed.forward(tokens, rows); },
                [&](const Matrix& G) { embed.backward(tokens, rows, G); });
}
inline void check_cross_entropy(Checker& c, const ModelConfig&) {
    Rng rng(7);
    Matrix logits = random_matrix(4, 7, rng, 4.0), d_logits(4, 7);
    const std::vector<int> target = {0, 6, 3, 3};
    for (double smoothing : {0.0, 0.1}) {
        Matrix unused(4, 7);
        c.gradients(smoothing > 0 ? "cross_entropy (smoothing 0.1)" : "cross_entropy", {{"logits", &logits, &d_logits}},
                    [&] { return cross_entropy(logits, target, 1.0, unused, smoothing); },
                    [&] { cross_entropy(logits, target, 1.0, d_logits, smoothing); });
    }
}
inline void check_dropout(Checker& c, const ModelConfig&) {
    Rng rng(8);
    Matrix x = random_matrix(4, 6, rng), dx(4, 6), keep;
    check_block(c, "dropout (p 0.3)", {{"x", &x, &dx}},
                [&] {
                    Rng draws(6);
                    return dropout(x, 0.3, &draws, keep);
                },
                [&](const Matrix& G) { accumulate(dx, dropout_backward(G, keep)); });
}
inline void check_swiglu(Checker& c, const ModelConfig& config) {
    Rng rng(9);
    SwiGLU ffn(8, small_config(config).d_ff, true, rng);  // with biases
    jitter(params_of(ffn, "ffn"), rng);
    Matrix x = random_matrix(4, 8, rng), dx(4, 8);
    check_block(c, "SwiGLU", tensors_of(params_of(ffn, "ffn"), {{"x", &x, &dx}}), [&] { return ffn.forward(x); },
                [&](const Matrix& G) { accumulate(dx, ffn.backward(G)); });
}
// The encoder's and the decoder's blocks, each in pre- and post-norm: the encoder's input x (S = 5, the padding
// mask); the decoder's y (T = 4, causal) and the memory (S = 5, two PADs masked).
template <typename Block>
void check_stack_block(Checker& c, const ModelConfig& config, const std::string& check, uint64_t seed) {
    constexpr bool decoder = std::is_same_v<Block, DecoderBlock>;
    const int rows = decoder ? 4 : 5;
    for (NormPlace where : {NormPlace::pre, NormPlace::post}) {
        ModelConfig small = small_config(config);
        small.norm_place = where;
        Rng rng(seed), draws(6);
        Block block(small, rng);
        jitter(params_of(block, "block"), rng);
        Matrix x = random_matrix(rows, 8, rng), dx(rows, 8), memory, d_memory(5, 8);
        std::vector<Tensor> inputs = {{decoder ? "y" : "x", &x, &dx}};
        if (decoder) memory = random_matrix(5, 8, rng), inputs.push_back({"memory", &memory, &d_memory});
        const Matrix causal = causal_mask(4), mask = padding_mask(rows, {PADDED_SOURCE});
        check_block(c, check + " (" + NORM_PLACE_NAMES[int(where)] + "-norm)",
                    tensors_of(params_of(block, "block"), inputs),
                    [&] {
                        draws = Rng(6);  // dropout: the same masks at every pass
                        block.set_dropout_draws(&draws);
                        if constexpr (decoder) return block.forward(x, memory, causal, mask);
                        else return block.forward(x, mask);
                    },
                    [&](const Matrix& G) {
                        if constexpr (decoder) accumulate(dx, block.backward(G, d_memory));
                        else accumulate(dx, block.backward(G));
                    });
    }
}
// The whole model's gradient, as tests.cpp's check_model: the mean cross-entropy of two examples of the small task
// (digits 1..5, seq_len 4, the second source ending in PADs), every parameter.
inline DataConfig small_data() {
    DataConfig d;
    d.seq_len = 4, d.min_len = 2, d.max_digit = 5;
    return d;
}
inline void check_whole_model(Checker& c, const ModelConfig& config, double label_smoothing) {
    const DataConfig d = small_data();
    ModelConfig small = small_config(fit_to_data(config, d));
    Transformer model(small, 41);
    Rng rng(42);
    jitter(model.parameters(), rng);
    const std::vector<Example> batch = {make_example({5, 2, 4, 2}, d), make_example({3, 1}, d)};
    const Rng masks = model.dropout_draws;  // dropout: the same masks at every pass
    Matrix d_logits;
    auto loss = [&] {  // forward in training mode, as gradient_of runs it: the loss, and its gradient in d_logits
        model.dropout_draws = masks;
        model.train(true);
        const Inputs in = inputs_of(batch, 0, 2);
        const Matrix logits = model.forward(in.sources, in.targets_in);
        model.train(false);
        d_logits = Matrix(logits.rows, logits.cols);
        return batch_loss(logits, batch, label_smoothing, d_logits).followed;
    };
    c.gradients("model", tensors_of(model.parameters()), loss, [&] {
        loss();
        model.backward(d_logits);  // += into every grad (gradient_of zeroes them first)
    });
}
// Adam has no forward to differentiate: three updates of lr 0.01 from w = 0.5 with the gradients below, against
// the weights the tutorial's update gives (w - 0.5 at each step of the first six entries; computed once, and again
// by the test beside this file). The first by hand: m = 0.1 g, s = 0.02 g^2, so m_hat = g, s_hat = g^2 and
// w = 0.5 - 0.01 g / (|g| + 1e-9): 0.49000000005 for g = 0.2.
const double ADAM_GRADIENTS[3][6] = {{0.2, -0.1, 0.05, 1.0, -3.0, 0.0}, {-0.1, -0.1, 0.5, 0.0, 2.0, 0.01},
                                     {0.3, 0.2, -0.05, 1.0, -1.0, 0.0}};
const double ADAM_STEPS[3][6] = {
    {-0.0099999999500000047, 0.0099999999000000006, -0.0099999997999999923, -0.0099999999900000081,
     0.0099999999966666753, 0},
    {-0.012671077068590997, 0.019999999800000001, -0.018033185522715878, -0.016732997675136085,
     0.011447881504628277, -0.0074059185786687354},
    {-0.019002447066415573, 0.019247122736852251, -0.023608839713495366, -0.024912749806675405,
     0.014248371551796035, -0.013158507128837038}};
inline Matrix adam_steps(Transformer& model) {  // (3, 6): w - 0.5 after each update
    Optimizer adam(OptimizerKind::adam);
    for (auto& [name, p] : model.parameters()) std::fill(p->value.data.begin(), p->value.data.end(), 0.5);
    Matrix steps(3, 6);
    for (int t = 0; t < 3; t++) {
        for (auto& [name, p] : model.parameters())
            for (std::size_t i = 0; i < p->grad.data.size(); i++) p->grad.data[i] = ADAM_GRADIENTS[t][i % 6];
        adam.update(model, 0.01, t + 1);
        for (int i = 0; i < 6; i++) steps.at(t, i) = model.embed.table.value.data[i] - 0.5;
    }
    return steps;
}
inline void check_adam(Checker& c, const ModelConfig& config) {
    Transformer model(small_config(fit_to_data(config, small_data())), 1);
    Matrix truth(3, 6);
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 6; i++) truth.at(t, i) = ADAM_STEPS[t][i];
    c.rows.push_back({"Adam (3 updates, a row each)", "w - 0.5", diagnose(adam_steps(model), truth)});
    if (!c.quiet) Checker::print(c.rows.back());
}
const std::vector<std::pair<std::string, void (*)(Checker&, const ModelConfig&)>> BLOCK_CHECKS = {
    {"softmax_rows", check_softmax_rows},
    {"attention", check_attention},
    {"MultiHeadAttention", check_multi_head},
    {"LayerNorm", [](Checker& c, const ModelConfig&) { check_norm<LayerNorm>(c, "LayerNorm"); }},
    {"RMSNorm", [](Checker& c, const ModelConfig&) { check_norm<RMSNorm>(c, "RMSNorm"); }},
    {"Embedding", check_embedding},
    {"cross_entropy", check_cross_entropy},
    {"dropout", check_dropout},
    {"SwiGLU", check_swiglu},
    {"EncoderBlock",
     [](Checker& c, const ModelConfig& m) { check_stack_block<EncoderBlock>(c, m, "EncoderBlock", 10); }},
    {"DecoderBlock",
     [](Checker& c, const ModelConfig& m) { check_stack_block<DecoderBlock>(c, m, "DecoderBlock", 11); }},
    {"Adam", check_adam},
};
}  // namespace exercises
