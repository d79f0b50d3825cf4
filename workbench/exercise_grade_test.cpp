// workbench/exercise_grade_test.cpp -- tests of "Write it yourself"'s grade (exercise_grade.hpp): the tutorial's own
// answers pass every check and the training run, and the training run's reading tells its failures apart.
#include "test_helpers.hpp"
#include "exercise_grade.hpp"

namespace ex = exercises;

// Every exercise's checks pass on the tutorial's own code (the gradients; the training run of the default once).
TEST_CASE("exercises: the tutorial's own answers pass every check") {
    for (const ex::Exercise& e : ex::EXERCISES) {
        ex::Checker c;
        c.quiet = true;
        ex::run_checks(c, e);
        INFO(e.name);
        CHECK(c.rows.size() >= 1);
        for (const ex::Row& r : c.rows) {
            INFO(r.check, " / ", r.tensor, ": ", ex::kind_text(r.verdict), " ", r.verdict.worst);
            CHECK(r.verdict.kind == ex::Kind::right);
        }
    }
    const ex::Training run = ex::train_briefly(ex::exercise_named("softmax"));
    CHECK(run.exact >= ex::TRAINING_PASSES);
    CHECK(ex::training_text(run) == "learns");
}

// Bug 7, the causal mask left out of the forward: every gradient agrees with that forward, and only training shows
// it. With exercise 9's figures (loss 0.0007, exact-match 1.4%) the training run names it; a diverged run, a run
// that learns, and one that learns too little are told apart.
TEST_CASE("exercises: the training run's reading") {
    CHECK(contains(ex::training_text({0.0007, 0.014}), "reads the answer"));
    CHECK(contains(ex::training_text({std::nan(""), 0.0}), "diverged"));
    CHECK(ex::training_text({0.01, 0.99}) == "learns");
    CHECK(ex::training_text({0.8, 0.3}) == "does not learn well enough");
}
