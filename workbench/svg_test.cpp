// workbench/svg_test.cpp -- tests of SVG pictures, charts and the gradient flow (svg.hpp, history.hpp).
#include "test_helpers.hpp"
#include "svg.hpp"

#include <map>

TEST_CASE("SVG pictures are whole documents, written atomically") {
    ModelConfig c;
    c.positions = Positions::learned;
    DataConfig d;
    Transformer model(c, 1);
    History h;
    for (int s = 1; s <= 30; s++) h.losses.push_back(2.0 / s);
    h.evals = {{10, 0.5, 0.2, 0.6, 0.4}, {20, 0.1, 0.7, 0.9, 0.2}, {30, 0.05, 1.0, 1.0, 0.1}};
    TempDir dir("svg");
    write_pictures(dir.path.string(), model, make_example({5, 3, 9, 1, 1}, d).source, &h, DecodeConfig(), {});
    CHECK(dir.listing() == std::vector<std::string>{"attention.svg", "pe.svg", "training.svg"});
    for (const std::string& name : dir.listing()) {
        std::string svg = read_all(dir.file(name));
        INFO(name);
        CHECK(svg.rfind("<svg", 0) == 0);
        CHECK(svg.substr(svg.find_last_not_of("\n") - 5, 6) == "</svg>");
        auto count = [&](const std::string& s) {
            std::size_t n = 0;
            for (std::size_t at = svg.find(s); at != std::string::npos; at = svg.find(s, at + 1)) n++;
            return n;
        };
        CHECK(count("<svg") == 1);
        CHECK(count("<text") == count("</text>"));
        CHECK(count("<") == count(">"));
    }
    // Text is escaped: a label with < or & cannot break the document.
    CHECK(svg_text(0, 0, "a<b & c") == "<text x=\"0.0\" y=\"0.0\" font-size=\"12\" text-anchor=\"middle\" "
                                       "fill=\"#222\">a&lt;b &amp; c</text>\n");
    CHECK_THROWS_AS(write_svg(dir.file("missing"), "x.svg", "<svg></svg>"), UsageError);
}

// However many heads and layers the flags allow, attention.svg draws at most MOST_MAPS maps, the first
// heads of each layer, and says what it left out; the picture stays about 1,100 pixels wide.
TEST_CASE("attention.svg: at most 48 maps, the first heads of each layer, and a note") {
    std::vector<AttentionMap> maps;
    for (int layer = 0; layer < 24; layer++)
        for (int h = 0; h < 64; h++)
            maps.push_back({"layer " + std::to_string(layer), h, Matrix(2, 2, 0.5), {"1", "2"}, {"1", "2"},
                            {"1", "2"}});
    std::string svg = attention_svg(maps, 64, "many heads");
    std::size_t drawn = 0;
    for (std::size_t at = svg.find(">head "); at != std::string::npos; at = svg.find(">head ", at + 1)) drawn++;
    CHECK(drawn == 48u);  // 2 heads of each of the 24 layers
    CHECK(contains(svg, ">head 1<"));
    CHECK(!contains(svg, ">head 2<"));
    CHECK(contains(svg, "heads 2 to 63 of each layer are left out here"));
    double width = std::stod(svg.substr(svg.find("width=\"") + 7));
    CHECK(width <= 1200);
    std::vector<AttentionMap> few(maps.begin(), maps.begin() + 64 * 6);  // 6 layers of 64: 8 heads each
    CHECK(contains(attention_svg(few, 64, "six layers"), ">head 7<"));
    CHECK(!contains(attention_svg(few, 64, "six layers"), ">head 8<"));
}

// Steps on the axes of the charts: round numbers, about 5 of them, within the steps shown.
TEST_CASE("charts: step ticks are round numbers inside the range") {
    CHECK(step_ticks(1, 5000) == std::vector<long>{1000, 2000, 3000, 4000, 5000});
    CHECK(step_ticks(1, 12) == std::vector<long>{2, 4, 6, 8, 10, 12});
    CHECK(step_ticks(601, 1200) == std::vector<long>{700, 800, 900, 1000, 1100, 1200});
    CHECK(step_ticks(1, 1) == std::vector<long>{1});
}

// The gradient flow adds up each block's tensors: with every grad entry 1, a block's norm is the
// square root of how many entries its tensors hold.
TEST_CASE("gradient flow: one norm per block, the square root of the sum of squares") {
    CHECK(block_of("embed.table") == "embed");
    CHECK(block_of("encoder.1.ffn.W_1") == "encoder.1");
    CHECK(block_of("decoder.0.norm3.beta") == "decoder.0");
    CHECK(block_of("final_norm.gamma") == "final_norm");
    ModelConfig c;
    c.enc_layers = 2;
    Transformer model(c, 1);
    std::map<std::string, double> entries;
    for (auto& [name, p] : model.parameters()) {
        for (double& g : p->grad.data) g = 1.0;
        entries[block_of(name)] += double(p->grad.data.size());
    }
    History h;
    record_gradient_norms(model, h);
    record_gradient_norms(model, h);
    CHECK(h.blocks == std::vector<std::string>{"embed", "encoder.0", "encoder.1", "decoder.0", "final_norm", "out"});
    REQUIRE(h.gradient_norms.size() == 2u);
    for (std::size_t b = 0; b < h.blocks.size(); b++)
        CHECK(h.gradient_norms[1][b] == doctest::Approx(std::sqrt(entries[h.blocks[b]])).epsilon(1e-15));
}


// experts.svg (chapter 11), written by --svg for a model with experts: each layer's load is the router's, the share of
// the K n choices each expert took (the bars' tips), and each token's first choices add up to its rows (each row of
// the heatmap sums to 1). A decoder-only model with 2 blocks, E = 4, K = 2, untrained: 200 examples of 5 + 5 rows.
TEST_CASE("experts.svg: each layer's load and each token's first choices, as the router chose") {
    DataConfig d;
    Dataset data(d, {}, 200, 5);
    ModelConfig c;
    c.arch = Arch::decoder_only;
    c = fit_to_data(c, d);
    c.enc_layers = 0, c.dec_layers = 2, c.experts = 4, c.top_k_asked = 2;
    Transformer model(c, 7);
    TempDir dir("svg-experts");
    printed_by([&] { write_pictures(dir.path.string(), model, data.held_out[0].source, nullptr, DecodeConfig(),
                                    data.held_out); });
    CHECK(dir.listing() == std::vector<std::string>{"attention.svg", "experts.svg", "pe.svg"});
    const std::string svg = read_all(dir.file("experts.svg"));
    CHECK(contains(svg, "Experts: 2 of 4 a token, over 200 held-out examples"));
    CHECK(contains(svg, "even 25.0%"));
    // The model's last forward is experts_svg's: every block's load, as the bars' tips say it.
    int blocks = 0;
    for (const DecoderBlock& block : model.decoder) {
        const Experts& moe = dynamic_cast<Experts&>(*block.ffn);
        const std::vector<int> load = moe.load();
        int choices = 0;
        for (int j = 0; j < 4; j++) {
            choices += load[j];
            CHECK(contains(svg, fmt("<title>e%d: %.1f%%</title>", j, 100.0 * load[j] / (2.0 * 2000))));
        }
        CHECK(choices == 2 * 2000);  // K n: 200 examples of 10 rows, 2 choices a row
        CHECK(contains(svg, ">decoder." + std::to_string(blocks++) + "<"));
    }
    CHECK(blocks == 2);
    // Each heatmap row (a token read) sums to 1: its cells' tips, "1, e0: 0.2500", one a cell.
    std::map<std::string, double> row_sums;  // "layer token" -> the sum of its cells
    int layer = -1;
    for (std::size_t at = svg.find("<title>"); at != std::string::npos; at = svg.find("<title>", at + 1)) {
        const std::string tip = svg.substr(at + 7, svg.find("</title>", at) - at - 7);
        if (tip.find(", e") == std::string::npos) continue;  // a bar's tip
        if (tip.rfind("1, e0:", 0) == 0) layer++;               // the first cell of a layer's heatmap (token 1 first)
        const std::string row = std::to_string(layer) + " " + tip.substr(0, tip.find(','));
        row_sums[row] += std::atof(tip.c_str() + tip.find(':') + 1);
    }
    CHECK(layer == 1);
    CHECK(row_sums.size() == 2 * 10u);  // each layer's rows read every digit 1 to 9 and START (no PAD: no row reads it)
    for (const auto& [row, sum] : row_sums) CHECK(sum == doctest::Approx(1.0).epsilon(1e-3));
}
