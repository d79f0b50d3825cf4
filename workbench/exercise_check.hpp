// workbench/exercise_check.hpp -- the gradient check of "Write it yourself" (exercises.hpp says how the parts fit):
// your gradient against central differences of the forward, tensor by tensor, each row read by the diagnosis
// (exercise_diagnosis.hpp), and the time of your backward beside its forward. Exercise-only, as exercises.hpp. The
// check is built with the C++ library's bounds checks on (-D_GLIBCXX_ASSERTIONS, the Makefile), so an index past a
// matrix's end stops it with a crash it names (exercise_grade.hpp), not with numbers that look like another mistake.
//
// Sections: Ref; the gradient check; the time of a backward; a block's check. The blocks' checks, each block in every
// configuration it runs in, are exercise_blocks.hpp's; the whole model's (its gradient, Adam's update) and the
// training run, exercise_model.hpp's.
#pragma once

#include <chrono>
#include <type_traits>

#include "exercise_diagnosis.hpp"

namespace exercises {

// ---------------------------------------------------------------------------------------------
// Ref<R(Args...)>: a callable handed down and called, never kept (the checks' forwards, backwards and losses): a
// pointer to it and a function that calls it. std::function would do, but the check's build would then make a copy
// machinery for each of its lambdas, and that build is what a student waits for after each edit.
template <typename Signature>
class Ref;
template <typename R, typename... Args>
class Ref<R(Args...)> {
    const void* callable;
    R (*call)(const void*, Args...);

  public:
    template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Ref>>>
    Ref(const F& f)  // f must outlive the call it is handed to (a lambda written in the call does)
        : callable(&f), call([](const void* c, Args... args) -> R { return (*static_cast<const F*>(c))(args...); }) {}
    R operator()(Args... args) const { return call(callable, args...); }
};

// ---------------------------------------------------------------------------------------------
// The gradient check, as tests.cpp's: every entry nudged by +-h, the central difference beside your backward's.
// A row a tensor, kept for the grade; printed a check a line: "right", or its first WRONG tensor in full. A gap
// throws "not written yet", which stops it.
struct Tensor {
    std::string name;
    Matrix* value;
    Matrix* grad;
};
struct Row {
    std::string check, tensor;
    Verdict verdict;
};
// The check now running, and the first WRONG row before it ("" if none), for a crash's grade line (exercise_grade.hpp's
// main sets it).
inline void (*check_started)(const std::string& check, const std::string& first_wrong) = nullptr;
inline std::string row_text(const Row& r) {  // "attention (...) Q: a constant factor: ..."
    return r.check + (r.tensor == "time" ? "" : " " + r.tensor) + ": " + kind_text(r.verdict);
}
struct Checker {
    std::vector<Row> rows;
    bool quiet = false;   // the tests read the rows without the printing
    std::string variant;  // the exercise's choice the checks now run under, added to their names: " [dropout 0.05]"
    bool shown_wrong = false;  // a WRONG row was printed in full

    void start(const std::string& check) const {
        if (!check_started) return;
        for (const Row& r : rows)
            if (!r.verdict.is_right()) return check_started(check, row_text(r));
        check_started(check, "");
    }
    // loss(): L at the values in place. analytic(): forward, then backward adding (+=) into every tensor's grad.
    void gradients(std::string check, const std::vector<Tensor>& tensors, Ref<double()> loss, Ref<void()> analytic,
                   const Clues& clues = {}) {
        check += variant;
        start(check);
        std::vector<Matrix> yours;
        for (const Tensor& t : tensors) t.grad->zero();
        analytic();
        for (const Tensor& t : tensors) yours.push_back(*t.grad);
        for (const Tensor& t : tensors) *t.grad = Matrix(t.grad->rows, t.grad->cols, 1.0);
        analytic();  // handed ones: a backward that adds gives yours + 1
        const std::size_t first = rows.size();
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
            rows.push_back({check, tensors[k].name, diagnose(yours[k], truth, adds, clues, tensors[k].name)});
        }
        print(first);
    }
    void add(const Row& row) {  // a row made elsewhere (Adam's, the time of a backward)
        rows.push_back(row);
        print(rows.size() - 1);
    }
    // The rows from `first` on, one check's: one line when every one is right. The first check with a WRONG row prints
    // it in full, and a line naming the others; a later one (a block built on the first, which shows the same mistake
    // again) prints one line.
    void print(std::size_t first) {
        if (quiet || first >= rows.size()) return;
        std::vector<std::string> right, wrong;
        const Row* shown = nullptr;
        double worst = 0.0;
        for (std::size_t k = first; k < rows.size(); k++) {
            const Row& r = rows[k];
            if (r.verdict.is_right()) right.push_back(r.tensor), worst = std::max(worst, r.verdict.worst);
            else if (!shown) shown = &r;
            else wrong.push_back(r.tensor);
        }
        const std::string& check = rows[first].check;
        const std::size_t n = rows.size() - first;
        if (!shown) {
            if (n == 1 && rows[first].tensor == "time")
                std::printf("  %-56s right: %s\n", check.c_str(), rows[first].verdict.words.c_str());
            else
                std::printf("  %-56s %s right (worst rel. error %.1e)\n", check.c_str(),
                            n == 1 ? rows[first].tensor.c_str() : fmt("%zu of %zu", n, n).c_str(), worst);
            return;
        }
        if (shown_wrong) {
            wrong.insert(wrong.begin(), shown->tensor);
            const std::string which =
                n == 1 ? shown->tensor : fmt("%zu of %zu (", wrong.size(), n) + join(first_few(wrong), ", ") + ")";
            std::printf("  %-56s WRONG: %s\n", check.c_str(), which.c_str());
            return;
        }
        shown_wrong = true;
        const Verdict& v = shown->verdict;
        if (v.kind == Kind::slow)
            std::printf("  %-56s WRONG: %s\n", check.c_str(), kind_text(v).c_str());
        else
            std::printf("  %-56s %s WRONG, rel. error %.2g at [%d][%d] (yours %.4g, true %.4g): %s\n", check.c_str(),
                        shown->tensor.c_str(), v.worst, v.row, v.col, v.yours, v.truth, kind_text(v).c_str());
        std::string rest;
        if (!wrong.empty()) rest = fmt("%zu more WRONG (%s)", wrong.size(), join(first_few(wrong), ", ").c_str());
        if (!right.empty())
            rest += (rest.empty() ? "" : "; ") +
                    fmt("%zu right (%s)", right.size(), join(first_few(right), ", ").c_str());
        if (!rest.empty()) std::printf("  %-56s %s\n", "", rest.c_str());
    }
    static std::vector<std::string> first_few(std::vector<std::string> names) {
        if (names.size() > 4) names.resize(3), names.push_back("...");
        return names;
    }
};

// ---------------------------------------------------------------------------------------------
// The time of a backward. A backward derived by the chain rule costs about what its forward costs (1 to 5 forwards
// here); an answer that runs the forward instead, central differences of it, costs 2 forwards for each number of the
// inputs and parameters (hundreds here), and passes every gradient check. So the check times your backward beside one
// forward of the same block, at a larger size than its gradient checks, and takes the least of a few runs (a busy
// machine only slows a run down): above SLOW forwards, the row says WRONG.
constexpr double SLOW = 40.0;
inline double seconds_of(Ref<void()> f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
inline void time_backward(Checker& c, const std::string& check, std::size_t numbers,
                          Ref<void()> forward, Ref<void()> backward) {
    c.start(check);
    double one_forward = 1e30, one_backward = 1e30, spent = 0.0;
    for (int k = 0; k < 9; k++) one_forward = std::min(one_forward, seconds_of(forward));
    for (int k = 0; k < 5 && one_backward / one_forward > SLOW && (k < 3 || spent < 1.0); k++) {
        forward();
        const double s = seconds_of(backward);
        one_backward = std::min(one_backward, s), spent += s;
    }
    Verdict v;
    v.factor = one_backward / one_forward;
    v.kind = v.factor > SLOW ? Kind::slow : Kind::right;
    v.words = fmt("your backward took %.1f forwards' time (central differences of the forward: %zu)", v.factor,
                  2 * numbers);
    if (v.kind == Kind::slow)
        v.words = fmt("a backward takes 1 to 5, central differences of the forward %zu here", 2 * numbers);
    c.add({check + c.variant, "time", v});
}
inline std::size_t numbers_of(const std::vector<Tensor>& tensors) {
    std::size_t n = 0;
    for (const Tensor& t : tensors) n += t.value->data.size();
    return n;
}

// ---------------------------------------------------------------------------------------------
// A block's check (exercise_blocks.hpp's use it), at tests.cpp's small shapes (d_model 8, 2 heads of d_k 4, d_ff 12),
// from random inputs and jittered parameters: L = sum(out * G) for a random G, so dL/d(out) = G.
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
                        Ref<Matrix()> forward, Ref<void(const Matrix&)> backward,
                        const Clues& clues = {}) {
    Rng rng(99);
    Matrix out = forward(), G = random_matrix(out.rows, out.cols, rng);
    c.gradients(check, tensors, [&] { return dot(forward(), G); }, [&] { forward(), backward(G); }, clues);
}
// The time of a block's backward (above), from a random dL/d(out).
inline void time_block(Checker& c, const std::string& check, const std::vector<Tensor>& tensors,
                       Ref<Matrix()> forward, Ref<void(const Matrix&)> backward) {
    Rng rng(98);
    const Matrix out = forward(), G = random_matrix(out.rows, out.cols, rng);
    time_backward(c, check, numbers_of(tensors), [&] { forward(); }, [&] { backward(G); });
}
inline ModelConfig small_config(ModelConfig c) {  // the exercise's choices, at the small shapes
    c.vocab = 7, c.max_len = std::max(c.max_len, 6), c.d_model = 8, c.d_ff = 12;  // (decoder-only: 2 seq_len + 1)
    if (c.kv_heads_asked == 0) c.n_heads = 2;
    return c;
}
}  // namespace exercises
