// workbench/exercise_diagnosis.hpp -- what the pattern of a wrong gradient suggests, for "Write it yourself"'s check
// (exercises.hpp says how the parts fit): yours against the true gradient, entry by entry, read as one kind of
// mistake, or "it cannot tell". Exercise-only, as exercises.hpp.
#pragma once

#include <functional>

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
}  // namespace exercises
