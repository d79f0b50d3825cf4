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


TEST_CASE("the demonstrations: each has a name and a line of --help, and each name is in the help, in order") {
    REQUIRE(DEMO_NAMES.size() == DEMO_SHOWS.size());
    std::size_t at = 0;
    for (std::size_t k = 0; k < DEMO_NAMES.size(); k++) {
        at = demos_help().find(DEMO_NAMES[k] + ": " + DEMO_SHOWS[k], at);
        CHECK(at != std::string::npos);
    }
}
