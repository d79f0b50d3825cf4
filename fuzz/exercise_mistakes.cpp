// fuzz/exercise_mistakes.cpp -- typical mistakes of "Write it yourself", each planted into a student's copy
// and graded there by its own make check: `make mistakes` (a few minutes), whose table docs/course.md shows. This
// program runs no other: it plants each mistake in a copy of its own, make runs each copy's make check, and it then
// reads the grades (the two skipped test cases below, in turn, with MISTAKES_DIR naming the folder). Each
// mistake is an edit of the tutorial's answer (`find` becomes `replace`), so the list stays true as the code moves;
// make test checks that every edit still finds its text. A hand-out leaves this file out, as every
// workbench/exercise*_test.cpp: these are answers, each one mistake away.
#include <fcntl.h>

#include <map>

#include "workbench/test_helpers.hpp"
#include "workbench/exercise_grade.hpp"

namespace ex = exercises;

namespace mistakes {
struct Edit { std::string find, replace; };
struct Mistake {
    std::string exercise, what;  // the mistake in words, as the table says it
    std::vector<Edit> edits;     // each `find` once in the answer's code, becoming `replace`; "" the whole first region
    std::string named;           // words of the grade line that name it rightly; "" when the check cannot tell
};
// An answer that runs the forward in place of a backward: central differences of softmax_rows, from X = log P.
const std::string SOFTMAX_BY_DIFFERENCES = R"(    Matrix X(P.rows, P.cols);
    for (std::size_t i = 0; i < P.data.size(); i++) X.data[i] = std::log(P.data[i]);
    for (int i = 0; i < P.rows; i++)
        for (int k = 0; k < P.cols; k++) {
            const double saved = X.at(i, k);
            X.at(i, k) = saved + 1e-5;
            const Matrix up = softmax_rows(X);
            X.at(i, k) = saved - 1e-5;
            const Matrix down = softmax_rows(X);
            X.at(i, k) = saved;
            for (int j = 0; j < P.cols; j++) dX.at(i, k) += dP.at(i, j) * (up.at(i, j) - down.at(i, j)) / 2e-5;
        }
)";
const std::string EMBEDDING_BY_DIFFERENCES = R"(        auto loss = [&] {
            const Matrix X = forward(tokens, position_ids);
            double sum = 0.0;
            for (std::size_t i = 0; i < X.data.size(); i++) sum += X.data[i] * dX.data[i];
            return sum;
        };
        for (Param* p : {&table, &learned})
            for (std::size_t i = 0; i < p->value.data.size(); i++) {
                const double saved = p->value.data[i];
                p->value.data[i] = saved + 1e-5;
                const double up = loss();
                p->value.data[i] = saved - 1e-5;
                const double down = loss();
                p->value.data[i] = saved;
                p->grad.data[i] += (up - down) / 2e-5;
            }
)";
// dV and dP by hand, with P's indices swapped in dV's sum (the issue's `dV += P[s][t] dO`).
const std::string ATTENTION_P_SWAPPED = R"(    const Matrix& P_used = c.keep.empty() ? c.P : c.P_dropped;
    for (int t = 0; t < P_used.rows; t++)
        for (int s = 0; s < P_used.cols; s++)
            for (int k = 0; k < c.V.cols; k++) {
                dP_dropped.at(t, s) += dO.at(t, k) * c.V.at(s, k);
                dV.at(s, k) += P_used.at(s, t) * dO.at(t, k);
            }
)";
const std::vector<Mistake> MISTAKES = {
    {"softmax", "`=` where `+=` belongs", {{"dX.at(i, k) += P.at(i, k)", "dX.at(i, k) = P.at(i, k)"}}, "assigns (=)"},
    {"softmax", "the row term left out (bug 5)",
     {{"* (dP.at(i, k) - row_term);", "* dP.at(i, k);\n        (void)row_term;"}}, ""},
    {"softmax", "a loop bound one short",
     {{"for (int k = 0; k < P.cols; k++)", "for (int k = 0; k < P.cols - 1; k++)"}}, "loop bound"},
    {"softmax", "central differences of the forward, no backward", {{"", SOFTMAX_BY_DIFFERENCES}}, "runs the forward"},
    {"layernorm", "the mean term left out (bug 2)", {{"d_x_hat.at(i, j) - mean_d - x_hat", "d_x_hat.at(i, j) - x_hat"}},
     "each row: a row's mean"},
    {"layernorm", "beta's gradient with its sign flipped", {{"beta.grad.at(0, j) += dy", "beta.grad.at(0, j) -= dy"}},
     "flipped sign"},
    {"layernorm", "the rows' loop one short", {{"for (int i = 0; i < n; i++) {", "for (int i = 0; i < n - 1; i++) {"}},
     "loop bound"},
    {"rmsnorm", "LayerNorm's mean term kept",
     {{"double mean_d_xhat = 0.0;", "double mean_d_xhat = 0.0, mean_d = 0.0;"},
      {"mean_d_xhat += d_x_hat.at(i, j) * x_hat.at(i, j) / d;",
       "mean_d_xhat += d_x_hat.at(i, j) * x_hat.at(i, j) / d;\n                mean_d += d_x_hat.at(i, j) / d;"},
      {"(d_x_hat.at(i, j) - x_hat", "(d_x_hat.at(i, j) - mean_d - x_hat"}},
     "each row: a row's mean"},
    {"embedding", "the scatter-add overwrites (bug 6)",
     {{"table.grad.at(tokens[t], c) += multiplier", "table.grad.at(tokens[t], c) = multiplier"}}, "assigns (=)"},
    {"embedding", "the multiplier left out", {{"+= multiplier * dX.at(t, c);", "+= dX.at(t, c);"}},
     "multiplier left out"},
    {"embedding", "the positions counted from 1", {{"learned.grad.at(position_ids[t], c)", "learned.grad.at(position_ids[t] + 1, c)"}},
     "off by one"},
    {"embedding", "fixed positions forgotten (no learned table)",
     {{"if (!learned.value.empty()) learned.grad", "learned.grad"}}, "index out of range"},
    {"embedding", "central differences of the forward, no backward", {{"", EMBEDDING_BY_DIFFERENCES}},
     "runs the forward"},
    {"cross-entropy", "the mean's 1/T left out (bug 8)", {{"(exps[v] / sum - q) / T;", "(exps[v] / sum - q);"}},
     "1/T left out"},
    {"cross-entropy", "the batch's weight left out", {{"+= weight * (exps[v] / sum - q)", "+= (exps[v] / sum - q)"}},
     "weight left out"},
    {"cross-entropy", "the smoothing left out of the gradient",
     {{"double q = (v == target[t] ? 1.0 - smoothing : 0.0) + spread;", "double q = v == target[t] ? 1.0 : 0.0;"}}, ""},
    {"dropout", "nothing dropped (keep empty) forgotten", {{"if (!keep.empty())\n", ""}}, "index out of range"},
    {"dropout", "the kept entries' 1/(1 - p) left out",
     {{"dy.data[i] *= keep.data[i];", "dy.data[i] *= keep.data[i] > 0 ? 1.0 : 0.0;"}}, "1/(1 - p) left out"},
    {"attention", "the 1/sqrt(d_k) left out (bug 4)",
     {{"scale_backward(d_scores, inv_sqrt_dk, d_QKt);", "scale_backward(d_scores, 1.0, d_QKt);"}},
     "1/sqrt(d_k) left out"},
    {"attention", "P's indices swapped in dV (dV += P[s][t] dO)",
     {{"matmul_backward_fast(dO, c.keep.empty() ? c.P : c.P_dropped, c.V, dP_dropped, dV);\n", ATTENTION_P_SWAPPED}},
     "index out of range"},
    {"attention", "the attention dropout's backward left out",
     {{"Matrix dP = dropout_backward(std::move(dP_dropped), c.keep);", "Matrix dP = dP_dropped;"}}, ""},
    {"heads", "`=` for the keys' and values' shared input (bug 3)",
     {{"accumulate(d_xkv, W_v.backward(dV));", "d_xkv = W_v.backward(dV);"}}, "assigns (=)"},
    {"heads", "grouped-query's key-value head taken as the query head's",
     {{"int col = h * d_k, kv_col = heads->key_head(h) * d_k;", "int col = h * d_k, kv_col = col;"}}, "index out of range"},
    {"heads", "the first sequence only", {{"parallel_each(n_seq, attention_work", "parallel_each(1, attention_work"}},
     "second of 2 sequences"},
    {"rotary", "turned the wrong way",
     {{"return rotate_pairs(std::move(dX), L, first, d_k, -1.0);",
       "return rotate_pairs(std::move(dX), L, first, d_k, 1.0);"}},
     "turned the wrong way"},
    {"rotary", "the positions counted from 1",
     {{"return rotate_pairs(std::move(dX), L, first, d_k, -1.0);",
       "return rotate_pairs(std::move(dX), L, first + 1, d_k, -1.0);"}},
     "counted from 1"},
    {"swiglu", "the partner's path into x left out",
     {{"accumulate(dx, W_3.backward(d_partner));", "W_3.backward(d_partner);"}}, ""},
    {"adam", "the second bias correction left out", {{"std::sqrt(si / unbias2)", "std::sqrt(si)"}},
     "second bias correction left out"},
    {"adam", "the first bias correction left out", {{"(mi / unbias1)", "mi"}}, "first bias correction left out"},
    {"adam", "a loop bound one short",
     {{"i < w.size(); i++) {\n                    double& mi",
       "i + 1 < w.size(); i++) {\n"
       "                    double& mi"}},
     "loop bound"},
    {"decoder-block", "the memory's gradient lost",
     {{"cross_attn.backward(d, d_queries, d_memory);",
       "Matrix lost(d_memory.rows, d_memory.cols);\n            cross_attn.backward(d, d_queries, lost);"}},
     "zero everywhere"},
};

// The answer of exercise `name`: the code between each `// exercise NAME: begin` and its end in the tutorial (regions
// of comments left out: they are no gap), in the order a hand-out's gaps come.
inline std::vector<std::string> answer_regions(const std::string& name) {
    std::vector<std::string> regions;
    for (const std::string& file : ex::TUTORIAL_FILES) {
        std::istringstream in(read_all(file));
        std::string line, region;
        bool inside = false, code = false;
        while (std::getline(in, line)) {
            const std::string words = ex::trimmed(line);
            if (!inside && ex::starts_with(words, "// exercise " + name + ": begin"))
                inside = true, code = false, region.clear();
            else if (inside && ex::starts_with(words, "// exercise " + name + ": end")) {
                inside = false;
                if (code) regions.push_back(region);
            } else if (inside) {
                region += line + "\n";
                code = code || !(words.empty() || ex::starts_with(words, "//"));
            }
        }
    }
    return regions;
}
// The answer with the mistake's edits made; "" and the reason when an edit does not find its text exactly once.
inline std::vector<std::string> planted(const Mistake& m, std::string& why) {
    std::vector<std::string> regions = answer_regions(m.exercise);
    for (const Edit& edit : m.edits) {
        if (edit.find.empty()) {
            regions.at(0) = edit.replace;
            continue;
        }
        int found = 0;
        for (std::string& region : regions)
            for (std::size_t at = region.find(edit.find); at != std::string::npos; at = region.find(edit.find, at + 1))
                found++;
        if (found != 1) {
            why = fmt("%s, \"%s\": '%s' is %d times in the answer, not once", m.exercise.c_str(), m.what.c_str(),
                      edit.find.c_str(), found);
            return {};
        }
        for (std::string& region : regions)
            if (std::size_t at = region.find(edit.find); at != std::string::npos)
                region.replace(at, edit.find.size(), edit.replace);
    }
    return regions;
}
// A copy's gap regions with the planted answer inside: each gap's first and last lines (its markers) kept.
inline std::vector<std::string> filled_gaps(const std::vector<std::string>& gaps,
                                            const std::vector<std::string>& code) {
    std::vector<std::string> out;
    for (std::size_t k = 0; k < gaps.size(); k++) {
        const std::string& gap = gaps[k];
        const std::size_t first = gap.find('\n') + 1, last = gap.rfind('\n', gap.size() - 2) + 1;
        out.push_back(gap.substr(0, first) + code.at(k) + gap.substr(last));
    }
    return out;
}
// The folder make mistakes names: copy NN (the mistake's place in MISTAKES) is its NN/ below it, which make check
// graded into NN/check.out; the files git tracks are listed in its files.
inline std::string folder() {
    const char* dir = std::getenv("MISTAKES_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "run by make mistakes, which names the folder in MISTAKES_DIR");
    return dir;
}
inline std::string copy_of(std::size_t k) { return folder() + fmt("/%02zu", k); }
inline std::string last_line_starting(const std::string& text, const std::string& start) {
    std::istringstream in(text);
    std::string line, found;
    while (std::getline(in, line))
        if (ex::starts_with(line, start)) found = line;
    return found;
}
}  // namespace mistakes

// Every mistake's edits find their text in today's answers (make test: the list cannot rot as the code moves).
TEST_CASE("exercises: every planted mistake finds its place in the answer") {
    std::vector<std::string> exercises;
    for (const mistakes::Mistake& m : mistakes::MISTAKES) {
        std::string why;
        INFO(m.exercise, ": ", m.what);
        CHECK(!mistakes::planted(m, why).empty());
        CHECK(why == "");
        if (std::find(exercises.begin(), exercises.end(), m.exercise) == exercises.end())
            exercises.push_back(m.exercise);
    }
    CHECK(mistakes::MISTAKES.size() > 15);
    CHECK(exercises.size() >= 8);
}

// make mistakes, first: each mistake planted into a hand-out of its exercise, a copy of its own.
TEST_CASE("exercises: the planted mistakes, each in a student's copy (make mistakes: the copies)" * doctest::skip()) {
    std::vector<std::string> files;
    {
        std::istringstream in(read_all(mistakes::folder() + "/files"));
        for (std::string f; std::getline(in, f);) files.push_back(f);
    }
    REQUIRE(!files.empty());
    std::fflush(stdout);  // the hand-outs' own lines are not the table's
    const int saved_stdout = dup(1), null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    for (std::size_t k = 0; k < mistakes::MISTAKES.size(); k++) {
        const mistakes::Mistake& m = mistakes::MISTAKES[k];
        const std::string dir = mistakes::copy_of(k);
        ex::hand_out(m.exercise, dir, files);
        std::string why;
        const std::vector<std::string> code = mistakes::planted(m, why);
        REQUIRE(why == "");
        std::size_t used = 0;
        for (const std::string& file : ex::TUTORIAL_FILES) {
            const std::string text = read_all(dir + "/" + file);
            const std::vector<std::string> gaps = ex::regions_of(text);
            const std::vector<std::string> mine(code.begin() + used, code.begin() + used + gaps.size());
            used += gaps.size();
            std::ofstream(dir + "/" + file, std::ios::binary)
                << ex::with_regions(text, mistakes::filled_gaps(gaps, mine));
        }
        REQUIRE(used == code.size());
    }
    std::fflush(stdout);
    dup2(saved_stdout, 1), close(null), close(saved_stdout);
}

// make mistakes, last: what each copy's make check said: docs/course.md's table, and the count. None may pass,
// and the check must name at least 12 rightly.
TEST_CASE("exercises: the planted mistakes, each graded in a student's copy (make mistakes: the grades)" *
          doctest::skip()) {
    std::vector<std::string> exercises;
    int named = 0, cannot_tell = 0, passed = 0, wrongly = 0;
    std::printf("| exercise | the mistake planted | what make check says (the grade line's reason) | named |\n"
                "|---|---|---|---|\n");
    for (std::size_t k = 0; k < mistakes::MISTAKES.size(); k++) {
        const mistakes::Mistake& m = mistakes::MISTAKES[k];
        if (std::find(exercises.begin(), exercises.end(), m.exercise) == exercises.end())
            exercises.push_back(m.exercise);
        const std::string out = read_all(mistakes::copy_of(k) + "/check.out");
        const std::string grade = mistakes::last_line_starting(out, "grade: ");
        const bool pass = contains(grade, ": pass:");
        std::string says = grade.substr(std::min(grade.size(), grade.find(": fail: ") + 8));
        if (std::size_t first = says.find("(first wrong: "); first != std::string::npos)
            says = says.substr(first + 14, says.size() - first - 15);
        std::string verdict;
        if (pass) verdict = "**passed**", passed++;
        else if (m.named.empty())
            verdict = contains(says, "cannot tell") ? "cannot tell (says so)" : "no name expected", cannot_tell++;
        else if (contains(grade, m.named)) verdict = "yes", named++;
        else verdict = "**no**", wrongly++;
        std::printf("| %s | %s | %s | %s |\n", m.exercise.c_str(), m.what.c_str(), says.c_str(), verdict.c_str());
        std::fflush(stdout);
        INFO(m.exercise, ": ", m.what, "\n", out);
        CHECK(!pass);
        CHECK(grade != "");
    }
    std::printf("\n%zu mistakes in %zu exercises: %d named rightly, %d where the check says it cannot tell, %d named "
                "wrongly, %d passed\n",
                mistakes::MISTAKES.size(), exercises.size(), named, cannot_tell, wrongly, passed);
    CHECK(passed == 0);
    CHECK(named >= 12);
}
