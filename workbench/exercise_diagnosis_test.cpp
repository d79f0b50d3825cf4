// workbench/exercise_diagnosis_test.cpp -- tests of "Write it yourself"'s diagnosis (exercise_diagnosis.hpp): each
// kind of mistake named on a gradient spoiled by hand, and the right one right.
#include "test_helpers.hpp"
#include "exercise_check.hpp"  // (random_matrix; and exercise_diagnosis.hpp)

namespace ex = exercises;

// The diagnosis on a gradient made wrong by hand, each kind once, and on the right one.
TEST_CASE("exercises: the diagnosis names each kind of mistake") {
    Rng rng(1);
    Matrix truth = ex::random_matrix(4, 4, rng), yours = truth;
    CHECK(ex::diagnose(yours, truth).kind == ex::Kind::right);
    CHECK(ex::diagnose(yours, truth, false).kind == ex::Kind::assigns);
    CHECK(ex::diagnose(Matrix(4, 4), truth).kind == ex::Kind::zero);
    CHECK(ex::diagnose(truth, Matrix(4, 4)).kind == ex::Kind::not_zero);
    CHECK(ex::diagnose(scale(truth, -1.0), truth).kind == ex::Kind::sign);
    ex::Verdict half = ex::diagnose(scale(truth, 0.5), truth);
    CHECK(half.kind == ex::Kind::factor);
    CHECK(std::fabs(half.factor - 0.5) < 1e-12);
    CHECK(std::fabs(half.worst - 1.0 / 3.0) < 1e-12);  // |g/2 - g| / (|g/2| + |g|), exercise 9's clean fraction
    CHECK(contains(ex::kind_text(half), "0.5 times"));
    ex::Clues clues;
    clues.constants = {{0.5, "1/sqrt(d_k), d_k 4"}};
    CHECK(contains(ex::kind_text(ex::diagnose(scale(truth, 0.5), truth, true, clues)), "0.5 times the true gradient "
                                                                                         "(1/sqrt(d_k), d_k 4)"));
    CHECK(ex::diagnose(ex::transposed(truth), truth).kind == ex::Kind::transpose);
    yours.at(2, 1) += 0.5;
    ex::Verdict row = ex::diagnose(yours, truth);
    CHECK(row.kind == ex::Kind::some_rows);
    CHECK(row.words == "only row 2 wrong");
    CHECK((row.row == 2 && row.col == 1));
    for (int i = 0; i < 4; i++) yours.at(i, i) += 0.5;  // every row, no pattern
    CHECK(ex::diagnose(yours, truth).kind == ex::Kind::unknown);
    CHECK(contains(ex::kind_text(ex::diagnose(yours, truth)), "cannot tell"));
}

// The patterns of an index: the true gradient one row or column further (counted from 1), only the last or first
// column or row wrong (a loop bound), the same error across each row (a row's mean), whole sequences wrong.
TEST_CASE("exercises: the diagnosis names an index off by one, a loop bound, a row's mean and a sequence") {
    Rng rng(2);
    const Matrix truth = ex::random_matrix(6, 5, rng);
    Matrix down(6, 5), left(6, 5);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 5; j++) {
            if (i > 0) down.at(i, j) = truth.at(i - 1, j);
            if (j + 1 < 5) left.at(i, j) = truth.at(i, j + 1);
        }
    ex::Verdict v = ex::diagnose(down, truth);
    CHECK(v.kind == ex::Kind::offset);
    CHECK(contains(ex::kind_text(v), "yours[i] holds true[i - 1]: a row index off by one (counted from 1?)"));
    CHECK(ex::diagnose(left, truth).words == "yours[.][j] holds true[.][j + 1]: a column index off by one");
    Matrix last_col = truth, first_row = truth, per_row = truth;
    for (int i = 0; i < 6; i++) last_col.at(i, 4) = 0.0;
    for (int j = 0; j < 5; j++) first_row.at(0, j) *= 3.0;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 5; j++) per_row.at(i, j) += 0.1 * (i + 1);
    CHECK(ex::diagnose(last_col, truth).kind == ex::Kind::edge);
    CHECK(contains(ex::kind_text(ex::diagnose(last_col, truth)), "only the last column wrong: a loop bound"));
    CHECK(contains(ex::kind_text(ex::diagnose(first_row, truth)), "only the first row wrong: a loop that starts at 1"));
    CHECK(ex::diagnose(per_row, truth).kind == ex::Kind::per_row);
    Matrix second = truth;  // rows 3 to 5, the second of two sequences of 3
    for (int i = 3; i < 6; i++) second.at(i, 1) += 1.0, second.at(i, 3) -= 1.0;
    ex::Clues clues;
    clues.sequence_rows = 3;
    CHECK(ex::diagnose(second, truth, true, clues).words ==
          "only rows 3 to 5 wrong, all in the second of 2 sequences of 3 rows");
    Matrix suspect = scale(truth, -2.0);  // a mistake the check was told of comes before the factor
    clues.suspects = {{"x", "twice, backwards", [](const Matrix& t) { return scale(t, -2.0); }}};
    CHECK(ex::diagnose(suspect, truth, true, clues, "x").kind == ex::Kind::named);
    CHECK(ex::diagnose(suspect, truth, true, clues, "y").kind == ex::Kind::factor);
    CHECK(ex::list_text({0, 1, 2, 4, 6, 7}) == "0 to 2, 4, 6, 7");
}
