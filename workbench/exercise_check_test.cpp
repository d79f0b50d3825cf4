// workbench/exercise_check_test.cpp -- tests of "Write it yourself"'s gradient check (exercise_check.hpp: the time of
// a backward tells the forward run again from a backward) and of exercise_model.hpp's Adam: its numbers are the
// tutorial's, and its planted bugs are named. (The blocks' planted bugs: exercise_blocks_test.cpp; fuzz/
// exercise_mistakes.cpp plants mistakes into students' copies and grades them there: make mistakes.)
#include "test_helpers.hpp"
#include "exercise_model.hpp"  // (and exercise_check.hpp)

namespace ex = exercises;

// The time of a backward: a backward that costs about a forward passes; one that runs the forward for each number
// (central differences) is named.
TEST_CASE("exercises: the time of a backward tells the forward run again") {
    ex::Checker c;
    c.quiet = true;
    Rng rng(3);
    Matrix X = ex::random_matrix(16, 32, rng), dX(16, 32), P;
    auto forward = [&] { P = softmax_rows(X); };
    ex::time_backward(c, "derived", X.data.size(), forward, [&] { softmax_rows_backward(P, P, dX); });
    ex::time_backward(c, "by differences", X.data.size(), forward, [&] {
        for (std::size_t i = 0; i < X.data.size(); i++) {
            X.data[i] += 1e-5;
            dX.data[i] += softmax_rows(X).data[i];
            X.data[i] -= 2e-5;
            dX.data[i] -= softmax_rows(X).data[i];
            X.data[i] += 1e-5;
        }
    });
    CHECK(c.rows[0].verdict.kind == ex::Kind::right);
    CHECK(c.rows[1].verdict.kind == ex::Kind::slow);
    CHECK(c.rows[1].verdict.factor > 200);
    CHECK(contains(ex::kind_text(c.rows[1].verdict), "runs the forward in place of a backward"));
}

// The Adam exercise's numbers are the tutorial's update's (to 1e-12: were the maths library's sqrt and pow to move a
// last bit, the check's tolerance of 1e-6 would not notice, and this test should not either).
TEST_CASE("exercises: Adam's numbers are the tutorial's") {
    ModelConfig m;
    TrainConfig t;
    ex::exercise_named("adam").variants[0].choose(m, t);
    Transformer model(ex::small_config(fit_to_data(m, ex::small_data())), 1);
    for (const Matrix& steps : ex::adam_steps(model))
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < steps.cols; j++)
                CHECK(ex::relative_error(steps.at(i, j), ex::ADAM_STEPS[i][j % 6]) <= 1e-12);
}
// Adam written with its update's sign flipped, and without one bias correction or the other (the factor then changes
// from update to update: named by the check's suspects).
TEST_CASE("exercises: planted bugs in the Adam update are named") {
    const Matrix truth = ex::adam_truth(6);
    for (int bug = 0; bug < 3; bug++) {
        Matrix steps(3, 6);
        for (int i = 0; i < 6; i++) {
            double w = 0.5, m = 0.0, s = 0.0;
            for (int t = 0; t < 3; t++) {
                const double g = ex::ADAM_GRADIENTS[t][i], beta1 = Optimizer::beta1, beta2 = Optimizer::beta2;
                m = beta1 * m + (1 - beta1) * g, s = beta2 * s + (1 - beta2) * g * g;
                const double u1 = bug == 1 ? 1 : 1 - std::pow(beta1, t + 1);
                const double u2 = bug == 2 ? 1 : 1 - std::pow(beta2, t + 1);
                w += (bug == 0 ? 0.01 : -0.01) * (m / u1) / (std::sqrt(s / u2) + Optimizer::eps);
                steps.at(t, i) = w - 0.5;
            }
        }
        const ex::Verdict v = ex::diagnose(steps, truth, true, ex::adam_clues("w"), "w");
        INFO(bug, ": ", ex::kind_text(v));
        CHECK(v.kind == (bug == 0 ? ex::Kind::sign : ex::Kind::named));
        if (bug > 0) CHECK(contains(v.words, bug == 1 ? "first bias correction" : "second bias correction"));
    }
}
