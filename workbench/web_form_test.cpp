// workbench/web_form_test.cpp -- the page's form (web_form.hpp): the flag table's rows the page takes, what a command
// line sets, the shortest command that sets it, and the group that waits for an opened checkpoint.
#include <doctest/doctest.h>

#include "test_helpers.hpp"
#include "web_form.hpp"

// The page's form is the flag table's rows the page takes, each choice's names as the program takes them: a new
// flag or value appears in the form without an edit to the page.
TEST_CASE("web form: the form comes from the flag table") {
    std::string form = form_json();
    std::string activations;  // the names list, as the form spells it: ["relu","gelu",...]
    for (const std::string& name : ACTIVATION_NAMES) activations += (activations.empty() ? "" : ",") + json_text(name);
    CHECK(contains(form, "{\"name\":\"--act\",\"kind\":\"choice\",\"names\":[" + activations + "]"));
    CHECK(contains(form, "{\"name\":\"--steps\",\"kind\":\"whole\",\"names\":[]"));
    CHECK(contains(form, "{\"name\":\"--llama\",\"kind\":\"switch\""));
    CHECK(contains(form, "{\"name\":\"--label-smoothing\",\"kind\":\"number\""));
    for (const FlagGroup& g : flag_table())
        for (const Flag& f : g.flags) CHECK(contains(form, json_text(f.name)) == page_takes(f));
    CHECK(!contains(form, "Speed"));  // a group with no row the page takes
    CHECK(!contains(form, "\"FILE\""));  // no row that names a file (--save-adapters, --adapters): Download's
}

// --lora's group waits for an opened checkpoint, as ./sorter refuses --lora R without --load FILE; the data flags
// that fine-tune a loaded model say so.
TEST_CASE("web form: the fine-tuning group needs a checkpoint, and the rows that fine-tune say so") {
    const std::string form = form_json();
    for (const FlagGroup& g : flag_table()) {
        const bool lora = std::any_of(g.flags.begin(), g.flags.end(), [](const Flag& f) { return f.name == "--lora"; });
        CHECK(needs_checkpoint(g) == lora);
        if (std::any_of(g.flags.begin(), g.flags.end(), page_takes))
            CHECK(contains(form, "{\"title\":" + json_text(g.title) + ",\"needs_checkpoint\":" +
                                     (lora ? "true" : "false")));
    }
    CHECK(contains(form, "{\"name\":\"--lora-on\",\"kind\":\"choice\",\"names\":[\"qv\",\"all\"]"));
    CHECK(contains(form, "\"--task\",\"kind\":\"choice\""));
    for (const char* flag : {"--task", "--seq-len", "--min-len", "--lr"}) {
        const std::size_t at = form.find(fmt("{\"name\":\"%s\"", flag));
        REQUIRE(at != std::string::npos);
        CHECK(form.substr(at, form.find('}', at) - at).find("\"fine_tunes\":true") != std::string::npos);
    }
    CHECK(contains(form, "\"fine_tunes\":false"));
    // An opened checkpoint's flags: checked as ./sorter --load FILE checks them, the file named as the page names it.
    CHECK(page_options({"--lora", "4", "--steps", "30"}, "m.txt").lora_rank == 4);
    CHECK(page_options({"--lora", "4"}, "m.txt").load_path == "m.txt");
    CHECK(contains(usage_error_of([] { page_options({"--lora", "4"}); }), "--lora 4 fine-tunes a trained model"));
    CHECK(contains(usage_error_of([] { page_options({"--d-model", "8"}, "m.txt"); }),
                   "--d-model cannot be combined with --load m.txt"));
    CHECK(contains(usage_error_of([] { page_options({"--save-adapters", "a.txt"}, "m.txt"); }), "is not for the page"));
}

// What a command line sets, flag by flag, and the shortest command asking for the same run.
TEST_CASE("web form: settings and the shortest command") {
    std::string s = settings_json("--llama --pos alibi --rmsnorm --optimizer adam --heads 2");
    INFO(s);
    CHECK(contains(s, "\"command\":\"--llama --pos alibi --optimizer adam\""));
    CHECK(contains(s, "\"--pos\":\"alibi\""));
    CHECK(contains(s, "\"--llama\":\"on\""));
    CHECK(contains(s, "\"--rmsnorm\":\"on\""));
    CHECK(contains(s, "\"--lr\":\"0.001\""));     // adam's
    CHECK(contains(s, "\"--kv-heads\":\"1\""));   // half of --heads, --llama's
    CHECK(contains(s, "\"--min-len\":\"\""));     // follows --seq-len
    CHECK(contains(usage_error_of([] { settings_json("--pos alibi --llama"); }), "comes before --llama"));
    CHECK(contains(usage_error_of([] { settings_json("--save x"); }), "is not for the page"));
}
