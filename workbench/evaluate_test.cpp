// workbench/evaluate_test.cpp -- tests of evaluate.hpp: what exact match and token accuracy count.
#include "test_helpers.hpp"
#include "evaluate.hpp"

// Token accuracy counts the target's digits only: a PAD position (the output has ended) is not a
// token the model got right. Exact match asks for every position, PAD included. An untrained model
// is scored against targets it happens to produce: evaluate on examples whose target is replaced
// by the model's own greedy output, then with one digit changed.
TEST_CASE("evaluate: token accuracy counts digits, exact match every position") {
    DataConfig d = few_digits();
    Transformer model(small_model(d), 8);
    Example e = make_example({3, 1}, d);  // target 1 3 _ _
    e.target = greedy_decode(model, {e.source}, d.seq_len)[0];
    int digits = 0;
    for (int token : e.target) digits += token != PAD;
    Accuracy all = evaluate(model, {e});
    CHECK(all.exact_count == 1);
    CHECK(all.token == 1.0);
    std::vector<int> wrong = e.target;
    wrong[0] = wrong[0] == 1 ? 2 : 1;  // the first position now disagrees, and is a digit
    e.target = wrong;
    Accuracy one_off = evaluate(model, {e});
    CHECK(one_off.exact_count == 0);
    int digits_now = 0;
    for (int token : wrong) digits_now += token != PAD;
    CHECK(one_off.token == doctest::Approx(double(digits_now - 1) / digits_now).epsilon(1e-15));
    CHECK(digits > 0);  // the untrained model did emit digits, so token accuracy had something to count
}
