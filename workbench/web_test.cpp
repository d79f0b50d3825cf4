// workbench/web_test.cpp -- the page's side (web.hpp), run natively: the same model, the same steps and the same
// figures as ./sorter, and a clear answer to a bad flag or input.
#include "test_runs.hpp"
#include "web.hpp"

// The number after "key": in an answer (the tests read only flat numbers).
inline double json_field(const std::string& json, const std::string& key) {
    std::size_t at = json.find("\"" + key + "\":");
    REQUIRE(at != std::string::npos);
    return std::atof(json.c_str() + at + key.size() + 3);
}

// The page trains in pieces of its own size (here 25, then 35 steps), and its checkpoint is the program's, byte
// for byte; its evaluation scores as many held-out sequences right as the program's final line.
TEST_CASE("web: the page's steps and checkpoint are ./sorter's") {
    TempDir dir("web");
    const std::string saved = dir.file("m.txt");
    std::string printed = run_output({"--steps", "60", "--eval-every", "60", "--dropout", "0.1", "--save", saved});
    Lab lab;
    std::string started = web_answer(lab, "start", "--steps 60 --eval-every 60 --dropout 0.1", 0);
    CHECK(json_field(started, "last") == 60);
    long values = 0;
    for (auto& named : lab.model->parameters()) values += long(named.second->value.data.size());
    CHECK(json_field(started, "parameters") == values);
    CHECK(json_field(web_answer(lab, "train", "", 25), "step") == 25);
    std::string trained = web_answer(lab, "train", "", 100);  // no further than --steps
    CHECK(json_field(trained, "step") == 60);
    CHECK(contains(trained, "\"gradients\":["));  // each block's gradient size
    CHECK(!contains(trained, "\"gradients\":[]"));
    CHECK(lab.checkpoint() == read_all(saved));
    std::string row = web_answer(lab, "evaluate", "", 0);
    int right = int(json_field(row, "right"));
    CHECK(contains(printed, fmt("(%d/%d)", right, int(json_field(row, "total")))));
}

// A checkpoint read back gives the same model: its checkpoint is the same text, and it trains on.
TEST_CASE("web: a checkpoint loads and trains on") {
    Lab lab;
    web_answer(lab, "start", "--steps 20", 0);
    web_answer(lab, "train", "", 20);
    std::string text = lab.checkpoint();
    Lab other;
    std::string loaded = web_answer(other, "load", text, 30);
    INFO(loaded);
    CHECK(json_field(loaded, "step") == 20);
    CHECK(json_field(loaded, "last") == 50);
    std::string again = text;  // the same file, but for the plan: 30 steps more
    again.replace(again.find("planned_steps 20"), 16, "planned_steps 50");
    CHECK(other.checkpoint() == again);
    CHECK(json_field(web_answer(other, "train", "", 30), "step") == 50);
    CHECK(contains(web_answer(other, "load", "not a checkpoint", 1), "\"error\":\"the checkpoint"));
    CHECK(json_field(other.describe(), "step") == 50);  // a file refused leaves the model as it was
    Lab finishing;  // steps 0: on to the steps its run planned, as --finish
    CHECK(json_field(web_answer(finishing, "load", text, 0), "last") == 20);
}

// A rate that makes the loss overflow: the slice ends at that step, says what to do, and trains no further.
TEST_CASE("web: a run that diverges stops and says so") {
    Lab lab;
    web_answer(lab, "start", "--lr 10 --steps 300", 0);
    std::string trained = web_answer(lab, "train", "", 300);
    CHECK(contains(trained, "\"diverged\":\"training diverged at step"));
    CHECK(json_field(trained, "last") == json_field(trained, "step"));
    CHECK(json_field(trained, "step") < 300);
}

// What the page draws: every layer's and head's map, the watched inputs, a typed input decoded.
TEST_CASE("web: attention maps, watched inputs and a typed input") {
    Lab lab;
    web_answer(lab, "start", "--steps 10 --heads 2 --enc-layers 1 --dec-layers 1", 0);
    std::string maps = web_answer(lab, "attention", "3 1 2 5 4", 0);
    std::size_t count = 0;
    for (std::size_t at = maps.find("\"head\":"); at != std::string::npos; at = maps.find("\"head\":", at + 1)) count++;
    CHECK(count == 3 * 2);  // encoder self, decoder self, cross: 2 heads each
    CHECK(contains(maps, "\"layer\":\"decoder.0 cross-attention\""));
    CHECK(contains(web_answer(lab, "watched", "", 0), "\"answer\":"));
    std::string decoded = web_answer(lab, "decode", "3 1 2 5 4", 3);
    CHECK(contains(decoded, "\"answer\":[\"1\",\"2\",\"3\",\"4\",\"5\"]"));
    CHECK(contains(decoded, "\"beam\":[{\"output\":"));
}

// A bad flag, a file flag, a bad input: one clear message, never a crash.
TEST_CASE("web: bad flags and inputs are answered with an error") {
    Lab lab;
    CHECK(contains(web_answer(lab, "train", "", 1), "no model yet"));
    CHECK(contains(web_answer(lab, "start", "--save m.txt", 0), "--save is not for the page"));
    CHECK(contains(web_answer(lab, "start", "--heads 3", 0), "\"error\":"));
    web_answer(lab, "start", "--steps 10", 0);
    CHECK(contains(web_answer(lab, "decode", "3 x 2", 1), "\"error\":"));
    CHECK(contains(web_answer(lab, "nonsense", "", 0), "unknown command nonsense"));
    CHECK(json_text("a\"b\\c\n") == "\"a\\\"b\\\\c\\u000a\"");
    CHECK(json_number(NAN) == "null");
}


// The page's form offers each choice's names as the program takes them, its default selected: the flag table's, so
// a new value appears in the form without an edit to the page.
TEST_CASE("the page: each choice's names and default come from the flag table") {
    Lab lab;
    std::string json = web_answer(lab, "choices", "", 0);
    CHECK(contains(json, "\"--act\":{\"names\":[\"relu\",\"gelu\",\"swiglu\"],\"default\":\"relu\"}"));
    CHECK(contains(json, "\"--schedule\":{\"names\":[\"constant\",\"linear\",\"warmup\"],\"default\":\"linear\"}"));
    CHECK(contains(json, "\"--pos\":{\"names\":[\"sinusoidal\",\"learned\",\"none\",\"random\",\"rope\",\"alibi\"]"));
    CHECK(!contains(json, "\"--steps\""));  // a number, not a choice
}
