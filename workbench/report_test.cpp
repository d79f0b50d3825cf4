// workbench/report_test.cpp -- tests of the --report page (report.hpp); a whole run's report, and a
// loaded model's, are tested in run_test.cpp.
#include "test_helpers.hpp"
#include "report.hpp"

// The hand-made markup check that the report tests rely on: it must catch what a strict parser would.
TEST_CASE("markup_problem: a tag left open, a wrong closing tag, an unknown entity") {
    CHECK(markup_problem("<a><b/><c x=\"1\">&amp;</c></a>") == "");
    CHECK(markup_problem("<a><b></a>") == "</a> closes <b>");
    CHECK(markup_problem("<a>&nbsp;</a>") == "bad entity &nbsp;");
    CHECK(markup_problem("<a><b>") == "<b> never closes");
    CHECK(markup_problem("<a><script>//<![CDATA[ if (x < y && z) {} //]]></script></a>") == "");
}

// The page of an untrained model with no training history: well-formed, every section there, the
// curves replaced by a sentence, nothing fetched from outside, and the mistakes counted.
TEST_CASE("--report: the page of an untrained model is whole and well-formed") {
    DataConfig d = few_digits();
    Transformer model(small_model(d), 5);
    Dataset data(d, {}, 30, 5);
    History h;
    h.header = "a header & its <tags>\n";
    std::string page = report_html(model, h, data.held_out[0].source, data.held_out);
    CHECK(markup_problem(page) == "");
    for (const char* id : {"run", "curves", "attention", "replay", "positions", "mistakes"})
        CHECK(contains(page, "<section id=\"" + std::string(id) + "\">"));
    CHECK(contains(page, "a header &amp; its &lt;tags&gt;"));
    CHECK(contains(page, "Not trained in this run"));
    CHECK(contains(page, "of the 30 held-out sequences are wrong"));
    CHECK(contains(page, "step 4: the decoder has read"));
    for (const char* fetch : {"src=", "href=\"http", "url(", "@import"}) CHECK(!contains(page, fetch));
    CHECK(contains(page, "data-ready"));
    CHECK(!contains(page, "<section id=\"experts\">"));  // without experts, no section of theirs
    ModelConfig c = small_model(d);  // with experts (chapter 11): each token's experts and gates, each layer's load
    c.experts = 3, c.top_k_asked = 2;
    Transformer experts(c, 5);
    page = report_html(experts, h, data.held_out[0].source, data.held_out);
    CHECK(markup_problem(page) == "");
    CHECK(contains(page, "<section id=\"experts\"><h2>The experts</h2>"));
    CHECK(contains(page, "the 2 of 3 experts its router chose"));
    CHECK(contains(page, "Experts: 2 of 3 a token, over 30 held-out examples"));  // experts.svg, in the section
    CHECK(contains(page, "<tr><th>encoder.0</th><td>"));
    CHECK(contains(page, "<tr><th>decoder.0</th><td>S: e"));
}

// A model whose numbers are nan draws them as the terminal pictures do: before, the replay's bars were
// written "width:-nanpx" and its probabilities "-nan".
TEST_CASE("--report: a model of nan draws no -nan and no bar of nan pixels") {
    DataConfig d = few_digits();
    Transformer model(small_model(d), 5);
    model.out.b.value.at(0, 1) = std::nan("");
    Dataset data(d, {}, 10, 5);
    std::string page = report_html(model, History(), data.held_out[0].source, data.held_out);
    CHECK(markup_problem(page) == "");
    CHECK(!contains(page, "-nan"));
    CHECK(!contains(page, "nanpx"));
    CHECK(contains(page, "width:0px\"></span> nan"));
}
