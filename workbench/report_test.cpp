// workbench/report_test.cpp -- tests of the --report page (report.hpp).
#include "test_helpers.hpp"
#define SORTER_NO_MAIN  // the report of a whole run: run() from main.cpp, without its main()
#include "../main.cpp"
#include "report.hpp"

// The report of a run, and of a loaded model: one page, whole, well-formed, with every section; with
// --load there are no curves. The default run's page is under 1 MB (measured: about 110 kB).

TEST_CASE("--report: one self-contained page of the run, and of a loaded model") {
    CHECK(markup_problem("<a><b/><c x=\"1\">&amp;</c></a>") == "");
    CHECK(markup_problem("<a><b></a>") == "</a> closes <b>");
    CHECK(markup_problem("<a>&nbsp;</a>") == "bad entity &nbsp;");
    CHECK(markup_problem("<a><script>//<![CDATA[ if (x < y && z) {} //]]></script></a>") == "");
    TempDir dir("report");
    Options o;
    REQUIRE(parse_error({"--steps", "200", "--eval-every", "100", "--save", dir.file("m.txt"), "--report",
                         dir.file("run.html")}, &o) == "");
    run(o);
    REQUIRE(parse_error({"--load", dir.file("m.txt"), "--report", dir.file("loaded.html")}, &o) == "");
    run(o);
    for (const char* name : {"run.html", "loaded.html"}) {
        std::string page = read_all(dir.file(name));
        INFO(name);
        CHECK(markup_problem(page) == "");
        CHECK(page.size() < 1000000u);
        for (const char* id : {"run", "curves", "attention", "replay", "positions", "mistakes"})
            CHECK(contains(page, "<section id=\"" + std::string(id) + "\">"));
        CHECK(contains(page, "step 1: the decoder has read S and writes"));
        CHECK(contains(page, "of the 1000 held-out sequences are wrong"));
        for (const char* fetch : {"src=", "href=\"http", "url(", "@import"})
            CHECK(!contains(page, fetch));  // everything inline, nothing fetched
        CHECK(!contains(page, "nan"));
    }
    CHECK(contains(read_all(dir.file("run.html")), "<section id=\"gradients\">"));
    CHECK(contains(read_all(dir.file("run.html")), "Gradient flow"));
    CHECK(!contains(read_all(dir.file("loaded.html")), "<section id=\"gradients\">"));
    CHECK(contains(read_all(dir.file("loaded.html")), "Not trained in this run"));
    CHECK(dir.listing() == std::vector<std::string>{"loaded.html", "m.txt", "run.html"});
}

