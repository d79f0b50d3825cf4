// workbench/exercise_check.hpp -- the check of "Write it yourself" (exercises.hpp says how the parts fit): your
// gradient against central differences of the forward, tensor by tensor, in every configuration the block runs in,
// and what the pattern of the error suggests. Exercise-only, as exercises.hpp. The check is built with the C++
// library's bounds checks on (-D_GLIBCXX_ASSERTIONS, the Makefile), so an index past a matrix's end stops it with a
// crash it names (exercise_grade.hpp), not with numbers that look like another mistake.
//
// Sections: the diagnosis; Ref; the gradient check; the time of a backward; the blocks' checks; the list of checks.
// The whole model's checks (its gradient, Adam's update) and the training run are exercise_model.hpp's.
#pragma once

#include <chrono>
#include <functional>
#include <type_traits>

#include "exercises.hpp"

namespace exercises {

// ---------------------------------------------------------------------------------------------
// The diagnosis: your gradient against the true one (the central differences), entry by entry, and what the
// pattern of the error suggests, the way docs/course.md's exercise 9 reads its table: a whole tensor off by one
// factor is a constant left out or put in (named when it is one of the check's: sqrt(d_k), 1/T, ...); by -1, a
// flipped sign; the true gradient's transpose, two indices swapped; the true gradient one row or column further, an
// index off by one; only the last (or first) row or column wrong, a loop bound; the same error across each row, a
// row's mean or sum; some rows wrong, a case the code misses; a mistake the check was told to look for (a rotary turn
// the wrong way, Adam's bias correction left out). Otherwise it says it cannot tell.
// h, the floor and the tolerance are tests.cpp's (its comment says why).
constexpr double H = 3e-5, FLOOR = 1e-4, TOLERANCE = 1e-6;
constexpr double LIKE = 1e-4;  // a named mistake matches within this (Adam's eps, rounding): a reading, not a pass
enum class Kind { right, assigns, zero, not_zero, sign, factor, transpose, offset, edge, per_row, some_rows, named,
                  slow, unknown };
// What a check tells the diagnosis about itself: its constants (to name a factor), the mistakes it can recognise
// (a tensor, the words, and what that mistake makes of the true gradient), and how its rows split into sequences.
struct Suspect {
    std::string tensor, words;
    std::function<Matrix(const Matrix& truth)> makes;
};
struct Clues {
    std::vector<std::pair<double, std::string>> constants;  // {2, "sqrt(d_k), d_k 4"}
    std::vector<Suspect> suspects;
    int sequence_rows = 0;  // the rows of one sequence, when the rows of an input are sequences one after another
};
struct Verdict {
    Kind kind = Kind::right;
    double worst = 0.0;               // the worst relative error ...
    int row = 0, col = 0;             // ... at this entry,
    double yours = 0.0, truth = 0.0;  // where yours and the true gradient are these
    double factor = 1.0;              // Kind::factor: yours = factor x true; Kind::slow: the backward's forwards
    std::string words;                // Kind::factor: the constant's name; named, edge, offset, some_rows: the reading
    bool is_right() const { return kind == Kind::right; }  // what the grade counts
};
inline double relative_error(double a, double n) {
    return std::fabs(a - n) / std::max(std::fabs(a) + std::fabs(n), FLOOR);
}
inline bool agree(const Matrix& a, const Matrix& b, double tolerance = TOLERANCE) {  // every entry
    if (a.rows != b.rows || a.cols != b.cols) return false;
    for (std::size_t i = 0; i < a.data.size(); i++)
        if (relative_error(a.data[i], b.data[i]) > tolerance) return false;
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
inline std::string ordinal(int k) {  // 0 -> "first"
    const char* words[] = {"first", "second", "third", "fourth", "fifth", "sixth"};
    return k < 6 ? words[k] : fmt("%dth", k + 1);
}
inline std::string list_text(const std::vector<int>& v) {  // {1, 2, 3, 5} -> "1 to 3, 5"
    std::vector<std::string> parts;
    for (std::size_t i = 0; i < v.size();) {
        std::size_t j = i;
        while (j + 1 < v.size() && v[j + 1] == v[j] + 1) j++;
        parts.push_back(j >= i + 2 ? fmt("%d to %d", v[i], v[j]) : std::to_string(v[i]));
        if (j == i + 1) parts.push_back(std::to_string(v[j]));
        i = j + 1;
    }
    return join(parts, ", ");
}

// Yours, one row or column further than the true gradient: yours[i][j] = truth[i - dr][j - dc] wherever both exist.
inline bool moved(const Matrix& yours, const Matrix& truth, int dr, int dc) {
    int compared = 0;
    for (int i = 0; i < yours.rows; i++)
        for (int j = 0; j < yours.cols; j++) {
            const int r = i - dr, c = j - dc;
            if (r < 0 || c < 0 || r >= truth.rows || c >= truth.cols) continue;
            if (relative_error(yours.at(i, j), truth.at(r, c)) > TOLERANCE) return false;
            compared += truth.at(r, c) != 0.0;
        }
    return compared * 2 >= int(yours.data.size());
}

// adds: whether the backward added (+=) into the gradient it was handed, rather than assigning it (the check runs
// it twice, on zeros and on ones, and compares).
inline Verdict diagnose(const Matrix& yours, const Matrix& truth, bool adds = true, const Clues& clues = {},
                        const std::string& tensor = "") {
    Verdict v;
    std::vector<int> wrong_rows, wrong_cols;
    for (int i = 0; i < yours.rows; i++)
        for (int j = 0; j < yours.cols; j++)
            if (const double err = relative_error(yours.at(i, j), truth.at(i, j)); err > TOLERANCE) {
                if (err > v.worst)
                    v.worst = err, v.row = i, v.col = j, v.yours = yours.at(i, j), v.truth = truth.at(i, j);
                if (wrong_rows.empty() || wrong_rows.back() != i) wrong_rows.push_back(i);
                if (std::find(wrong_cols.begin(), wrong_cols.end(), j) == wrong_cols.end()) wrong_cols.push_back(j);
            } else {
                v.worst = std::max(v.worst, err);  // right: the worst error, for the row that says so
            }
    std::sort(wrong_cols.begin(), wrong_cols.end());
    if (!adds) return v.kind = Kind::assigns, v;
    if (v.worst <= TOLERANCE) return v.kind = Kind::right, v;
    if (dot(yours, yours) == 0.0) return v.kind = Kind::zero, v;
    if (dot(truth, truth) == 0.0) return v.kind = Kind::not_zero, v;
    for (const Suspect& s : clues.suspects)
        if (s.tensor == tensor && agree(yours, s.makes(truth), LIKE)) return v.kind = Kind::named, v.words = s.words, v;
    v.factor = dot(yours, truth) / dot(truth, truth);
    if (agree(yours, scale(truth, v.factor))) {
        v.kind = std::fabs(v.factor + 1.0) < 1e-6 ? Kind::sign : Kind::factor;
        for (const auto& [value, name] : clues.constants)
            if (std::fabs(v.factor - value) < 1e-6 * value) v.words = name;
        return v;
    }
    if (yours.rows == yours.cols && agree(yours, transposed(truth))) return v.kind = Kind::transpose, v;
    for (auto [dr, dc] : {std::pair{1, 0}, {-1, 0}, {0, 1}, {0, -1}})
        if (moved(yours, truth, dr, dc)) {
            v.kind = Kind::offset;
            v.words = dr != 0 ? fmt("yours[i] holds true[i %s 1]: a row index off by one", dr > 0 ? "-" : "+")
                              : fmt("yours[.][j] holds true[.][j %s 1]: a column index off by one", dc > 0 ? "-" : "+");
            return v;
        }
    const int last_row = yours.rows - 1, last_col = yours.cols - 1;
    auto only = [](const std::vector<int>& wrong, int k) { return wrong.size() == 1 && wrong[0] == k; };
    if (yours.cols > 1 && (only(wrong_cols, last_col) || only(wrong_cols, 0))) {
        v.kind = Kind::edge;
        v.words = wrong_cols[0] == 0 ? "only the first column wrong: a loop that starts at 1?"
                                     : "only the last column wrong: a loop bound one short (< n - 1, or a <= n)?";
        return v;
    }
    if (yours.rows > 1 && (only(wrong_rows, last_row) || only(wrong_rows, 0))) {
        v.kind = Kind::edge;
        v.words = wrong_rows[0] == 0 ? "only the first row wrong: a loop that starts at 1?"
                                     : "only the last row wrong: a loop bound one short (< n - 1, or a <= n)?";
        return v;
    }
    bool per_row = yours.cols > 1;  // yours - truth the same across each row, and not zero in some
    for (int i = 0; i < yours.rows && per_row; i++)
        for (int j = 1; j < yours.cols && per_row; j++)
            per_row = relative_error(yours.at(i, j) - truth.at(i, j), yours.at(i, 0) - truth.at(i, 0)) <= 1e-5;
    if (per_row) return v.kind = Kind::per_row, v;
    if (int(wrong_rows.size()) < yours.rows) {
        v.kind = Kind::some_rows;
        v.words = "only row" + std::string(wrong_rows.size() > 1 ? "s " : " ") + list_text(wrong_rows) + " wrong";
        const int L = clues.sequence_rows, n_seq = L > 0 && yours.rows % L == 0 ? yours.rows / L : 0;
        if (n_seq > 1) {  // the rows are sequences: which sequences, which positions?
            std::vector<std::vector<int>> wrong(n_seq);
            for (int r : wrong_rows) wrong[r / L].push_back(r % L);
            std::vector<std::string> some;
            for (int e = 0; e < n_seq; e++)
                if (!wrong[e].empty()) some.push_back(ordinal(e));
            if (int(some.size()) < n_seq)
                v.words += fmt(", all in the %s of %d sequences of %d rows", join(some, " and ").c_str(), n_seq, L);
            else if (std::all_of(wrong.begin(), wrong.end(), [&](const std::vector<int>& w) { return w == wrong[0]; }))
                v.words += fmt(": position%s %s of each sequence of %d rows", wrong[0].size() > 1 ? "s" : "",
                               list_text(wrong[0]).c_str(), L);
        }
        return v;
    }
    if (int(wrong_cols.size()) < yours.cols) {
        v.kind = Kind::some_rows;
        v.words = "only column" + std::string(wrong_cols.size() > 1 ? "s " : " ") + list_text(wrong_cols) + " wrong";
        return v;
    }
    return v.kind = Kind::unknown, v;
}
inline std::string kind_text(const Verdict& v) {
    switch (v.kind) {
    case Kind::right: return "right";
    case Kind::assigns: return "assigns (=) where it must add (+=): the gradient it was handed is lost";
    case Kind::zero: return "zero everywhere: no gradient reaches it (a path left out?)";
    case Kind::not_zero: return "the true gradient is zero here, and yours is not";
    case Kind::sign: return "a flipped sign: yours is minus the true gradient";
    case Kind::factor:
        return fmt("a constant factor: yours is %.4g times the true gradient", v.factor) +
               (v.words.empty() ? "" : " (" + v.words + ")");
    case Kind::transpose: return "the transpose of the true gradient: two indices swapped";
    case Kind::offset: return "the true gradient moved by one: " + v.words + " (counted from 1?)";
    case Kind::edge: return v.words;
    case Kind::per_row:
        return "wrong by the same amount across each row: a row's mean or sum left out, or one too many";
    case Kind::some_rows: return v.words + ": a case the code misses";
    case Kind::named: return v.words;
    case Kind::slow:
        return fmt("runs the forward in place of a backward: it took %.0f forwards' time (%s)", v.factor,
                   v.words.c_str());
    case Kind::unknown:
        return "no pattern the check knows: it cannot tell which mistake (often a term left out, or one too many)";
    }
    return "";  // not reached
}

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
// The blocks' checks, each at tests.cpp's small shapes (d_model 8, 2 heads of d_k 4, d_ff 12), in each configuration
// the block runs in (masks, dropout on and off, lengths and widths that differ), from random inputs and jittered
// parameters: L = sum(out * G) for a random G, so dL/d(out) = G. Each check's name says its shapes.
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
const std::vector<int> PADDED_SOURCE = {4, 2, 5, PAD, PAD};  // S = 5, the last two hidden by the padding mask
inline Clues attention_clues(int d_k, double p) {
    Clues clues;
    clues.constants = {{std::sqrt(double(d_k)), fmt("sqrt(d_k), d_k %d: 1/sqrt(d_k) left out?", d_k)},
                       {1.0 / std::sqrt(double(d_k)), fmt("1/sqrt(d_k), d_k %d: put in twice?", d_k)},
                       {1.0 / d_k, fmt("1/d_k, d_k %d: d_k where sqrt(d_k) belongs?", d_k)}};
    if (p > 0)
        clues.constants.insert(clues.constants.end(), {{1.0 - p, fmt("1 - p, p %g: dropout's 1/(1 - p) left out?", p)},
                                                       {1.0 / (1.0 - p), fmt("1/(1 - p), p %g: put in twice?", p)}});
    return clues;
}

inline void check_softmax_rows(Checker& c, const ModelConfig&) {
    Rng rng(1);
    for (auto [rows, cols] : {std::pair{4, 5}, {6, 3}}) {  // rows neither flat nor one-hot; more columns, then rows
        Matrix X = scale(random_matrix(rows, cols, rng), 3.0), dX(rows, cols);
        check_block(c, "softmax_rows X " + shape_text(rows, cols), {{"X", &X, &dX}}, [&] { return softmax_rows(X); },
                    [&](const Matrix& G) { softmax_rows_backward(G, softmax_rows(X), dX); });
    }
}
inline void time_softmax_rows(Checker& c) {
    Rng rng(1);
    Matrix X = scale(random_matrix(16, 32, rng), 3.0), dX(16, 32), P;
    time_block(c, "time of softmax_rows_backward, X (16, 32)", {{"X", &X, &dX}},
               [&] { return P = softmax_rows(X); }, [&](const Matrix& G) { softmax_rows_backward(G, P, dX); });
}
// Attention without a mask (T 3 queries, S 5 keys), causal (4, 4) and with padding (3, 5), each with its weights'
// dropout off and on.
inline void check_attention(Checker& c, const ModelConfig&) {
    Rng rng(2);
    for (double p : {0.0, 0.3})
        for (int how = 0; how < 3; how++) {
            const int T = how == 1 ? 4 : 3, S = how == 1 ? 4 : 5;
            Matrix mask = how == 0 ? Matrix() : how == 1 ? causal_mask(4) : padding_mask(3, {PADDED_SOURCE});
            Matrix Q = random_matrix(T, 4, rng), K = random_matrix(S, 4, rng), V = random_matrix(S, 4, rng);
            Matrix dQ(T, 4), dK(S, 4), dV(S, 4);
            SavedAttention saved;
            const std::string name[] = {"no mask", "causal", "padding"};
            check_block(c, fmt("attention (%s, T %d, S %d, d_k 4%s)", name[how].c_str(), T, S,
                               p > 0 ? ", dropout 0.3" : ""),
                        {{"Q", &Q, &dQ}, {"K", &K, &dK}, {"V", &V, &dV}},
                        [&] {
                            Rng draws(6);  // the same masks at every pass
                            return attention(Q, K, V, mask, saved, p, &draws);
                        },
                        [&](const Matrix& G) { attention_backward(G, saved, dQ, dK, dV); }, attention_clues(4, p));
        }
}
inline void time_attention(Checker& c) {
    Rng rng(2), draws(6);
    Matrix Q = random_matrix(16, 8, rng), K = random_matrix(16, 8, rng), V = random_matrix(16, 8, rng);
    Matrix dQ(16, 8), dK(16, 8), dV(16, 8), mask = causal_mask(16);
    SavedAttention saved;
    time_block(c, "time of attention_backward, T = S = 16, d_k 8", {{"Q", &Q, &dQ}, {"K", &K, &dK}, {"V", &V, &dV}},
               [&] { return attention(Q, K, V, mask, saved); },
               [&](const Matrix& G) { attention_backward(G, saved, dQ, dK, dV); });
}
// Multi-head attention with the exercise's heads (grouped-query: 4 query heads on 2 key-value heads), positions
// (rotary) and attention (in tiles): cross-attention of 3 queries on 5 keys (padding), self-attention over two
// sequences of 4 (causal).
inline void check_multi_head(Checker& c, const ModelConfig& config) {
    ModelConfig self = small_config(config);
    self.attn_dropout = 0.0;
    const bool tiled = attends_in_tiles(config.attention);  // (the heads and the tiles: the exercise's variant says)
    Rng rng(3);
    MultiHeadAttention mha(self, rng, true), cross(self, rng);
    mha.tiles.on = cross.tiles.on = tiled;
    jitter(params_of(mha, "self_attn"), rng);
    // Cross-attention first: its inputs are two (the queries' y, the keys' and values' memory), so that `=` where the
    // memory's second path needs `+=` shows as one (in self-attention both paths meet in one x, inside the backward).
    Matrix y = random_matrix(3, 8, rng), dy(3, 8), memory = random_matrix(5, 8, rng), d_memory(5, 8);
    Matrix mask = padding_mask(3, {PADDED_SOURCE});
    check_block(c, "MultiHeadAttention cross (3 on 5 rows)",
                tensors_of(params_of(cross, "cross_attn"), {{"y", &y, &dy}, {"memory", &memory, &d_memory}}),
                [&] { return cross.forward(y, memory, mask); },
                [&](const Matrix& G) { cross.backward(G, dy, d_memory); });
    Clues clues;
    clues.sequence_rows = 4;
    Matrix x = random_matrix(8, 8, rng), dx(8, 8), causal = stack_rows({causal_mask(4), causal_mask(4)});
    check_block(c, "MultiHeadAttention self (2 x 4 rows)",
                tensors_of(params_of(mha, "self_attn"), {{"x", &x, &dx}}),
                [&] { return mha.forward(x, x, causal, 2); },  // two sequences of 4, causal
                [&](const Matrix& G) { accumulate(dx, mha.backward_self(G)); }, clues);
}
inline MultiHeadAttention timed_heads(const ModelConfig& config, Rng& rng) {
    ModelConfig c = config;
    c.d_model = 16, c.n_heads = 4, c.kv_heads_asked = c.kv_heads_asked > 0 ? 2 : 0;
    return MultiHeadAttention(c, rng, true);
}
inline void time_multi_head(Checker& c, const ModelConfig& config) {
    Rng rng(3);
    MultiHeadAttention mha = timed_heads(config, rng);
    Matrix x = random_matrix(16, 16, rng), dx(16, 16), causal = stack_rows({causal_mask(8), causal_mask(8)});
    time_block(c, "time of MultiHeadAttention::backward, 2 x 8 rows", tensors_of(params_of(mha, "a"), {{"x", &x, &dx}}),
               [&] { return mha.forward(x, x, causal, 2); },
               [&](const Matrix& G) { accumulate(dx, mha.backward_self(G)); });
}
// Rotary positions alone: self-attention's queries from x_q and keys and values from x_kv (two sequences of 4), W_q
// and W_k the identity, so that x_q's gradient is the gradient of the turned queries turned back. A turn the wrong way
// gives the true gradient turned by twice the angle; positions counted from 1, turned back by one position's angle.
// (check_rotary runs it with the tutorial's backward; the test beside this file, with planted ones.)
template <typename Backward>
void rotary_check(Checker& c, const ModelConfig& config, Backward backward) {
    ModelConfig rope = small_config(config);
    rope.positions = Positions::rope, rope.kv_heads_asked = 0, rope.n_heads = 2, rope.attn_dropout = 0.0;
    Rng rng(12);
    MultiHeadAttention mha(rope, rng, true);
    for (Linear* W : {&mha.W_q, &mha.W_k})
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 8; j++) W->W.value.at(i, j) = i == j;
    jitter({{"W_v", &mha.W_v.W}, {"W_o", &mha.W_o.W}}, rng);
    constexpr int L = 4;  // rows a sequence (a constant: the lambdas below read it uncaptured)
    const int d_k = mha.d_k;
    Clues clues;
    clues.sequence_rows = L;
    auto turn = [d_k](int rows_a_turn, int first, double sign) {
        return [=](const Matrix& truth) {
            return rotate_pairs(truth, rows_a_turn == 0 ? L : rows_a_turn, first, d_k, sign);
        };
    };
    clues.suspects = {
        {"x_q", "turned the wrong way: yours turns by +angle where the backward turns back (-angle, R^T)",
         turn(0, 0, 2.0)},
        {"x_q", "not turned back: the rotation of the forward is not undone", turn(0, 0, 1.0)},
        {"x_q", "turned back twice", turn(0, 0, -1.0)},
        {"x_q", "turned back from position 1, not 0: the positions counted from 1", turn(1, 1, -1.0)},
        {"x_q", "turned back from position -1, not 0: a position offset by one", turn(1, 1, 1.0)}};
    Matrix x_q = random_matrix(8, 8, rng), dx_q(8, 8), x_kv = random_matrix(8, 8, rng), dx_kv(8, 8);
    Matrix causal = stack_rows({causal_mask(4), causal_mask(4)});
    check_block(c, "rotary (2 x 4 rows, d_k 4; W_q = W_k = I)",
                tensors_of(params_of(mha, "attn"), {{"x_q", &x_q, &dx_q}, {"x_kv", &x_kv, &dx_kv}}),
                [&] { return mha.forward(x_q, x_kv, causal, 2); },
                [&](const Matrix& G) { backward(mha, G, dx_q, dx_kv); }, clues);
}
inline void check_rotary(Checker& c, const ModelConfig& config) {
    rotary_check(c, config, [](MultiHeadAttention& m, const Matrix& G, Matrix& dx_q, Matrix& dx_kv) {
        m.backward(G, dx_q, dx_kv);
    });
}
// A norm alone, rows of different offsets and spreads, so the mean and the variance matter: 4 rows of 8, 3 of 5.
template <typename Norm>
void check_norm(Checker& c, const std::string& check) {
    Rng rng(4);
    for (auto [rows, d] : {std::pair{4, 8}, {3, 5}}) {
        Norm norm(d);
        jitter(params_of(norm, "norm"), rng, 0.3);
        Matrix x = random_matrix(rows, d, rng), dx(rows, d);
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < d; j++) x.at(i, j) = x.at(i, j) * (i + 1) + i;
        check_block(c, check + " x " + shape_text(rows, d), tensors_of(params_of(norm, "norm"), {{"x", &x, &dx}}),
                    [&] { return norm.forward(x); }, [&](const Matrix& G) { accumulate(dx, norm.backward(G)); });
    }
}
template <typename Norm>
void time_norm(Checker& c, const std::string& check) {
    Rng rng(4);
    Norm norm(32);
    Matrix x = random_matrix(16, 32, rng, 3.0), dx(16, 32);
    time_block(c, "time of " + check + "::backward, x (16, 32)", tensors_of(params_of(norm, "n"), {{"x", &x, &dx}}),
               [&] { return norm.forward(x); }, [&](const Matrix& G) { accumulate(dx, norm.backward(G)); });
}
// The embedding with the exercise's positions: a sequence with tokens twice (their rows add up), its rows in order,
// and (learned positions) in another order.
inline void check_embedding(Checker& c, const ModelConfig& config) {
    Rng rng(5);
    const ModelConfig small = small_config(config);
    Embedding embed(small, rng);
    const std::vector<int> tokens = {3, 1, 3, 6, 1};  // 3 and 1 twice: rows add up
    Clues clues;
    clues.constants = {{std::sqrt(8.0), "sqrt(d_model), d_model 8: the multiplier put in twice?"},
                       {1.0 / std::sqrt(8.0), "1/sqrt(d_model), d_model 8: the multiplier left out?"}};
    for (const std::vector<int>& rows : {std::vector<int>{0, 1, 2, 3, 4}, {4, 0, 3, 1, 2}}) {
        const std::string& positions = POSITION_NAMES[int(small.positions)];
        check_block(c, fmt("Embedding (5 tokens, d_model 8, %s positions%s)", positions.c_str(),
                           rows[0] == 0 ? "" : ", rows out of order"),
                    tensors_of(params_of(embed, "embed")), [&] { return embed.forward(tokens, rows); },
                    [&](const Matrix& G) { embed.backward(tokens, rows, G); }, clues);
        if (embed.learned.value.empty()) break;  // other rows change nothing
    }
}
inline void time_embedding(Checker& c) {
    ModelConfig m;
    m.vocab = 32, m.d_model = 32, m.max_len = 16, m.positions = Positions::learned;
    Rng rng(5);
    Embedding embed(m, rng);
    std::vector<int> tokens, rows;
    for (int t = 0; t < 16; t++) tokens.push_back(int(rng.uniform(0, 31.99))), rows.push_back(t);
    time_block(c, "time of Embedding::backward, 16 tokens, d_model 32", tensors_of(params_of(embed, "e")),
               [&] { return embed.forward(tokens, rows); }, [&](const Matrix& G) { embed.backward(tokens, rows, G); });
}
// Cross-entropy (T 4, vocab 7) without smoothing and weight 1, then with smoothing 0.1 and weight 0.5 (a batch of 2).
inline void check_cross_entropy(Checker& c, const ModelConfig&) {
    Rng rng(7);
    Matrix logits = random_matrix(4, 7, rng, 4.0), d_logits(4, 7);
    const std::vector<int> target = {0, 6, 3, 3};
    for (auto [smoothing, weight] : {std::pair{0.0, 1.0}, {0.1, 0.5}}) {
        Matrix unused(4, 7);
        Clues clues;
        clues.constants = {{4.0, "T, T 4: the mean's 1/T left out?"}, {0.25, "1/T, T 4: put in twice?"}};
        if (weight != 1.0)
            clues.constants.push_back({1.0 / weight, fmt("1/weight, weight %g: weight left out?", weight)});
        c.gradients(smoothing > 0 ? "cross_entropy (T 4, vocab 7, smoothing 0.1, weight 0.5)"
                                  : "cross_entropy (T 4, vocab 7)",
                    {{"logits", &logits, &d_logits}},
                    [&, smoothing = smoothing, weight = weight] {
                        return weight * cross_entropy(logits, target, weight, unused, smoothing);
                    },
                    [&, smoothing = smoothing, weight = weight] {
                        cross_entropy(logits, target, weight, d_logits, smoothing);
                    },
                    clues);
    }
}
// Dropout on (p 0.3), and off: outside training, or p 0, keep is empty and the backward hands dy back.
inline void check_dropout(Checker& c, const ModelConfig&) {
    Rng rng(8);
    Clues clues;
    clues.constants = {{0.7, "1 - p, p 0.3: the kept entries' 1/(1 - p) left out?"},
                       {1.0 / 0.7, "1/(1 - p), p 0.3: put in twice?"}};
    for (bool on : {true, false}) {
        Matrix x = random_matrix(4, 6, rng), dx(4, 6), keep;
        check_block(c, on ? "dropout (p 0.3, x (4, 6))" : "dropout (off: keep empty, x (4, 6))", {{"x", &x, &dx}},
                    [&] {
                        Rng draws(6);
                        return dropout(x, 0.3, on ? &draws : nullptr, keep);
                    },
                    [&](const Matrix& G) { accumulate(dx, dropout_backward(G, keep)); }, clues);
    }
}
// SwiGLU with biases and without (--no-bias).
inline void check_swiglu(Checker& c, const ModelConfig& config) {
    Rng rng(9);
    for (bool bias : {true, false}) {
        SwiGLU ffn(8, small_config(config).d_ff, bias, rng);
        jitter(params_of(ffn, "ffn"), rng);
        Matrix x = random_matrix(4, 8, rng), dx(4, 8);
        check_block(c, fmt("SwiGLU (4 rows, d_model 8, hidden %d%s)", SwiGLU::width(12), bias ? "" : ", no biases"),
                    tensors_of(params_of(ffn, "ffn"), {{"x", &x, &dx}}), [&] { return ffn.forward(x); },
                    [&](const Matrix& G) { accumulate(dx, ffn.backward(G)); });
    }
}
inline void time_swiglu(Checker& c) {
    Rng rng(9);
    SwiGLU ffn(16, 24, true, rng);
    Matrix x = random_matrix(8, 16, rng), dx(8, 16);
    time_block(c, "time of SwiGLU::backward, x (8, 16)", tensors_of(params_of(ffn, "f"), {{"x", &x, &dx}}),
               [&] { return ffn.forward(x); }, [&](const Matrix& G) { accumulate(dx, ffn.backward(G)); });
}
// The encoder's and the decoder's blocks, each in pre- and post-norm, with the exercise's choices (its norm, its
// feed-forward, its dropout): the encoder's input x (S = 5, the padding mask); the decoder's y (T = 4, causal) and
// the memory (S = 5, two PADs masked), none in a decoder-only model's block.
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
        block.self_attn.tiles.on = attends_in_tiles(small.attention);  // as Transformer::train sets it
        if constexpr (decoder) block.cross_attn.tiles.on = block.self_attn.tiles.on;
        Matrix x = random_matrix(rows, 8, rng), dx(rows, 8), memory, d_memory(5, 8);
        std::vector<Tensor> inputs = {{decoder ? "y" : "x", &x, &dx}};
        memory = random_matrix(5, 8, rng);
        const bool cross = decoder && has_encoder(small.arch);
        if (cross) inputs.push_back({"memory", &memory, &d_memory});
        const Matrix causal = causal_mask(4), mask = padding_mask(rows, {PADDED_SOURCE});
        const std::string place = NORM_PLACE_NAMES[int(where)] + "-norm" + (decoder && !cross ? ", no memory" : "");
        check_block(c, check + " (" + place + ")",
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
inline void time_decoder_block(Checker& c, const ModelConfig& config) {
    ModelConfig m = config;
    m.d_model = 16, m.d_ff = 32, m.n_heads = 2;
    Rng rng(11);
    DecoderBlock block(m, rng);
    Matrix y = random_matrix(6, 16, rng), dy(6, 16), memory = random_matrix(7, 16, rng), d_memory(7, 16);
    const Matrix causal = causal_mask(6), mask(6, 7, 1.0);
    time_block(c, "time of DecoderBlock::backward, y (6, 16)",
               tensors_of(params_of(block, "b"), {{"y", &y, &dy}, {"memory", &memory, &d_memory}}),
               [&] { return block.forward(y, memory, causal, mask); },
               [&](const Matrix& G) { accumulate(dy, block.backward(G, d_memory)); });
}
// ---------------------------------------------------------------------------------------------
// The checks by name, as the exercises list them (exercises.hpp): those that read the model's choices run once for
// each of the exercise's choices (its variants), the others once. ("model" and "Adam", the whole model's, are
// exercise_model.hpp's.)
struct BlockCheck {
    const char* name;
    bool reads_choices;
    void (*run)(Checker&, const ModelConfig&);
};
const std::vector<BlockCheck> BLOCK_CHECKS = {
    {"softmax_rows", false, check_softmax_rows},
    {"attention", false, check_attention},
    {"MultiHeadAttention", true, check_multi_head},
    {"rotary", false, check_rotary},
    {"LayerNorm", false, [](Checker& c, const ModelConfig&) { check_norm<LayerNorm>(c, "LayerNorm"); }},
    {"RMSNorm", false, [](Checker& c, const ModelConfig&) { check_norm<RMSNorm>(c, "RMSNorm"); }},
    {"Embedding", true, check_embedding},
    {"cross_entropy", false, check_cross_entropy},
    {"dropout", false, check_dropout},
    {"SwiGLU", false, check_swiglu},
    {"EncoderBlock", true,
     [](Checker& c, const ModelConfig& m) { check_stack_block<EncoderBlock>(c, m, "EncoderBlock", 10); }},
    {"DecoderBlock", true,
     [](Checker& c, const ModelConfig& m) { check_stack_block<DecoderBlock>(c, m, "DecoderBlock", 11); }},
    // The time of a backward (its section, above), one a block.
    {"time softmax_rows", false, [](Checker& c, const ModelConfig&) { time_softmax_rows(c); }},
    {"time attention", false, [](Checker& c, const ModelConfig&) { time_attention(c); }},
    {"time MultiHeadAttention", false, time_multi_head},
    {"time LayerNorm", false, [](Checker& c, const ModelConfig&) { time_norm<LayerNorm>(c, "LayerNorm"); }},
    {"time RMSNorm", false, [](Checker& c, const ModelConfig&) { time_norm<RMSNorm>(c, "RMSNorm"); }},
    {"time Embedding", false, [](Checker& c, const ModelConfig&) { time_embedding(c); }},
    {"time SwiGLU", false, [](Checker& c, const ModelConfig&) { time_swiglu(c); }},
    {"time DecoderBlock", false, time_decoder_block},
};
}  // namespace exercises
