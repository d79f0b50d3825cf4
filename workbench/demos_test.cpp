// workbench/demos_test.cpp -- tests of the demonstrations (demos.hpp).
#include "test_helpers.hpp"
#include "demos.hpp"

TEST_CASE("the demonstrations: the naive softmax overflows where the stable one does not") {
    std::vector<double> naive = naive_softmax({1000, 999, 998});
    CHECK(std::isnan(naive[0]));
    Matrix S(1, 3);
    S.data = {1000, 999, 998};
    Matrix P = softmax_rows(S);
    CHECK(P.data[0] == doctest::Approx(0.6652).epsilon(1e-3));
}

