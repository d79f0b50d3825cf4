// workbench/terminal_test.cpp -- tests of terminal pictures and the attention maps (terminal.hpp).
#include "test_helpers.hpp"
#include "svg.hpp"
#include "terminal.hpp"

// A diverged or corrupt model gives nan, inf or huge numbers; every picture draws them as such and
// never indexes past its table of shades (std::lround of nan is undefined). Before this check,
// --lr 10 --show-attention ended in a segmentation fault.
TEST_CASE("pictures: nan, inf and huge values are drawn, never crash") {
    const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
    CHECK(shade(nan, 0.0, 1.0) == '?');
    CHECK(shade(0.5, -inf, inf) == '?');
    CHECK(shade(1e308, -1e308, 1e308) == '@');  // huge but finite: drawn, without overflowing the range
    CHECK(shade(1.0, 0.0, 1.0) == '@');
    CHECK(color_for(nan, false) == "rgb(255,0,255)");
    CHECK(color_for(-inf, true) == "rgb(255,0,255)");
    Matrix weights(2, 2, nan);
    AttentionMap map{"encoder.0 self-attention", 0, weights, {"1", "2"}, {"1", "2"}, {"1", "2"}};
    print_attention({map}, true);
    CHECK(contains(attention_svg({map}, 1, "nan weights"), "rgb(255,0,255)"));
}

TEST_CASE("the source padding mask gives PAD positions exactly zero attention") {
    ModelConfig c;
    DataConfig d;
    d.min_len = 2;
    Transformer model(c, 1);
    std::vector<int> source = make_example({4, 2, 7}, d).source;  // 4 2 7 _ _
    std::vector<AttentionMap> maps = attention_maps(model, source, {2, 4, 7, PAD, PAD});  // the decoder reads S 2 4 7 _
    for (const AttentionMap& m : maps) {
        if (contains(m.layer, "causal")) continue;  // keys are decoder tokens there
        for (int r = 0; r < m.P.rows; r++)
            for (int k = 3; k < 5; k++) CHECK(m.P.at(r, k) == 0.0);
    }
}


// The loss curve's step axis keeps its two labels apart: before, a resume of three steps from step 101
// printed "101103", and steps near the cap ran their digits together.
TEST_CASE("the loss curve's first and last steps never run together") {
    for (long first : {101L, 999999998L}) {
        std::string text = printed_by([&] { print_loss_plot({0.5, 0.4, 0.3}, first); });
        INFO(text);
        CHECK(contains(text, std::to_string(first) + "  "));
        CHECK(contains(text, " " + std::to_string(first + 2) + "   (step)"));
    }
}
