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

// What the page sends to open a checkpoint: its name, the flags ./sorter --load FILE would take, the file.
inline std::string opened(const std::string& flags, const std::string& text) { return "m.txt\n" + flags + "\n" + text; }

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

// A mixture of experts on the page (chapter 11): the form offers its four flags, the model says it has experts, and
// each evaluation row carries the balance loss's column as ./sorter's table prints it (null without experts).
TEST_CASE("web: an experts run's rows, balance column and all, are ./sorter's") {
    const std::string flags = "--steps 60 --eval-every 30 --experts 4 --top-k 2 --shared-experts 1";
    const std::string printed = run_output(split_words(flags));
    Lab lab;
    const std::string form = web_answer(lab, "form", "", 0);
    for (const char* flag : {"--experts", "--top-k", "--shared-experts", "--balance"})
        CHECK(contains(form, fmt("{\"name\":\"%s\"", flag)));
    CHECK(json_field(web_answer(lab, "start", flags, 0), "experts") == 4);
    for (int rows = 0; rows < 2; rows++) {
        CHECK(json_field(web_answer(lab, "train", "", 30), "step") == 30 * (rows + 1));
        const std::string row = web_answer(lab, "evaluate", "", 0);
        const std::size_t at = row.find("\"line\":\"") + 8;
        const std::string line = row.substr(at, row.rfind('"') - at);
        INFO(line);
        CHECK(contains(printed, line + "\n"));
        CHECK(json_field(row, "balance") > 0.0);
        CHECK(contains(line, fmt("  %10.4f", json_field(row, "balance"))));  // the column, as the table prints it
    }
    CHECK(contains(printed, "     balance\n"));  // the table's header names the column
    Lab dense;
    web_answer(dense, "start", "--steps 10", 0);
    web_answer(dense, "train", "", 10);
    CHECK(contains(web_answer(dense, "evaluate", "", 0), "\"balance\":null"));
}

// A checkpoint read back gives the same model: its checkpoint is the same text, and it trains on.
TEST_CASE("web: a checkpoint loads and trains on") {
    Lab lab;
    web_answer(lab, "start", "--steps 20", 0);
    web_answer(lab, "train", "", 20);
    std::string text = lab.checkpoint();
    Lab other;
    std::string loaded = web_answer(other, "load", opened("--steps 30", text), 0);
    INFO(loaded);
    CHECK(json_field(loaded, "step") == 20);
    CHECK(json_field(loaded, "last") == 50);
    std::string again = text;  // the same file, but for the plan: 30 steps more
    again.replace(again.find("planned_steps 20"), 16, "planned_steps 50");
    CHECK(other.checkpoint() == again);
    CHECK(json_field(web_answer(other, "train", "", 30), "step") == 50);
    CHECK(contains(web_answer(other, "load", opened("--steps 1", "not a checkpoint"), 0), "\"error\":\"the checkpoint"));
    CHECK(json_field(other.describe(), "step") == 50);  // a file refused leaves the model as it was
    Lab scoring;  // steps 0: none, as --load FILE --steps 0
    CHECK(json_field(web_answer(scoring, "load", opened("", text), 0), "last") == 20);
    CHECK(json_field(web_answer(scoring, "plan", "", 7), "last") == 27);  // the page's steps field, changed
    CHECK(json_field(web_answer(scoring, "train", "", 100), "step") == 27);
}

// An opened checkpoint fine-tuned with adapters (chapter 12), as ./sorter --load FILE --lora R with the same flags:
// the same LoRA line (the trainable parameters and their share), the same table rows, and Download's files are
// --save's merged model and --save-adapters' adapters, byte for byte. Over an 8-bit base too (QLoRA), which then
// trains; Quantize is refused with ./sorter's words.
TEST_CASE("web: an opened checkpoint fine-tuned with --lora is ./sorter's run") {
    TempDir dir("web-lora");
    const std::string m = dir.file("m.txt"), tuned = dir.file("tuned.txt"), adapters = dir.file("adapters.txt");
    run_output({"--steps", "300", "--save", m});
    const std::string flags = "--lora 4 --lora-on all --task reverse --steps 60 --eval-every 30";
    std::vector<std::string> words = split_words(flags);
    words.insert(words.end(), {"--load", m, "--save", tuned, "--save-adapters", adapters});
    const std::string printed = run_output(words);
    REQUIRE(contains(printed, "LoRA: rank 4, alpha 4, on attention and feed-forward: 16 adapted matrices, 2304 "
                              "trainable parameters (39.92% of the model's 5771; the base frozen)\n"));
    Lab lab;
    const std::string loaded = web_answer(lab, "load", opened(flags, read_all(m)), 0);
    INFO(loaded);
    CHECK(json_field(loaded, "step") == 0);  // a run of its own, from step 1
    CHECK(json_field(loaded, "last") == 60);
    CHECK(json_field(loaded, "trainable") == 2304);
    CHECK(json_field(loaded, "adapters") == 32);
    CHECK(contains(loaded, "\"tuning\":\"fine-tuning: a run of its own, from step 1; first trained on task sort, "
                           "seq_len 5, min_len 5\\u000aLoRA: rank 4, alpha 4, on attention and feed-forward"));
    for (int rows = 0; rows < 2; rows++) {
        CHECK(json_field(web_answer(lab, "train", "", 30), "step") == 30 * (rows + 1));
        const std::string row = web_answer(lab, "evaluate", "", 0);
        const std::size_t at = row.find("\"line\":\"") + 8;
        const std::string line = row.substr(at, row.rfind('"') - at);
        INFO(line);
        CHECK(contains(printed, "\n" + line + "\n"));
    }
    CHECK(lab.checkpoint() == read_all(tuned));
    CHECK(lab.adapters() == read_all(adapters));
    CHECK(contains(web_answer(lab, "quantize", "", 8), "--quantize with --lora: quantize the model first"));
    Lab plain;  // no adapters: nothing for the adapters' Download
    web_answer(plain, "load", opened("--steps 10", read_all(m)), 0);
    CHECK(contains(web_answer(plain, "adapters", "", 0), "no adapters"));
    CHECK(contains(web_answer(plain, "load", opened("--lora 17", read_all(m)), 0), "--lora 17: above the smaller side"));
    // An 8-bit base: frozen without adapters, trained with them.
    const std::string m8 = dir.file("m8.txt");
    run_output({"--load", m, "--quantize", "8", "--save", m8});
    Lab quantized;
    CHECK(contains(web_answer(quantized, "load", opened("--steps 10", read_all(m8)), 0), "cannot_train"));
    const std::string qlora = web_answer(quantized, "load", opened("--lora 2 --steps 10", read_all(m8)), 0);
    CHECK(!contains(qlora, "cannot_train"));
    CHECK(json_field(web_answer(quantized, "train", "", 10), "step") == 10);
}

// A quantized checkpoint opened (./sorter --load m8.txt): it evaluates and decodes with the integer model, scoring
// what ./sorter --load scores, plans no steps whatever the page asks, and a Train is refused with ./sorter's reason.
TEST_CASE("web: a quantized checkpoint evaluates and decodes, and does not train") {
    TempDir dir("web-quantized");
    const std::string m = dir.file("m.txt"), m8 = dir.file("m8.txt");
    run_output({"--steps", "300", "--save", m});
    REQUIRE(contains(run_output({"--load", m, "--quantize", "8", "--save", m8}),
                     "held-out: exact-match 92.9% (929/1000), token-accuracy 97.7%"));
    Lab lab;
    std::string loaded = web_answer(lab, "load", opened("--steps 200", read_all(m8)), 0);  // the page's steps field: none are planned
    INFO(loaded);
    CHECK(json_field(loaded, "bits") == 8);
    CHECK(json_field(loaded, "step") == 300);
    CHECK(json_field(loaded, "last") == 300);
    const std::string reason = cannot_train_text("the checkpoint", 8);
    CHECK(contains(reason, "holds a model quantized to 8 bits, which cannot train"));
    CHECK(contains(loaded, "\"cannot_train\":" + json_text(reason)));
    CHECK(json_field(web_answer(lab, "evaluate", "", 0), "right") == 929);  // ./sorter --load m8.txt's 929/1000
    CHECK(web_answer(lab, "train", "", 10) == "{\"error\":" + json_text(reason) + "}");
    CHECK(web_answer(lab, "plan", "", 5) == "{\"error\":" + json_text(reason) + "}");
    CHECK(json_field(web_answer(lab, "plan", "", 0), "last") == 300);
    CHECK(contains(web_answer(lab, "decode", "3 1 2 5 4", 2), "\"greedy\":[\"1\",\"2\",\"3\",\"4\",\"5\"]"));
    CHECK(lab.checkpoint() == read_all(m8));  // written back as it was read
    CHECK(!contains(web_answer(lab, "attention", "3 1 2 5 4", 0), "error"));
    Lab float_model;
    CHECK(json_field(web_answer(float_model, "load", opened("--steps 200", read_all(m)), 0), "bits") == 0);
    CHECK(!contains(web_answer(float_model, "load", opened("--steps 200", read_all(m)), 0), "cannot_train"));
}

// The page's Quantize, on the model it trained: the same integers as ./sorter --load FILE --quantize 8 (its
// checkpoint is --save's file, byte for byte), the same score, and no training or second quantizing after it.
TEST_CASE("web: the page quantizes the model it trained as ./sorter --quantize does") {
    TempDir dir("web-quantize");
    const std::string m = dir.file("m.txt"), m8 = dir.file("m8.txt");
    run_output({"--steps", "300", "--save", m});
    REQUIRE(contains(run_output({"--load", m, "--quantize", "8", "--save", m8}),
                     "held-out: exact-match 92.9% (929/1000), token-accuracy 97.7%"));
    Lab lab;
    web_answer(lab, "start", "--steps 300", 0);
    web_answer(lab, "train", "", 300);
    REQUIRE(lab.checkpoint() == read_all(m));
    std::string quantized;
    const std::string printed = printed_by([&] { quantized = web_answer(lab, "quantize", "", 8); });
    INFO(quantized);
    CHECK(contains(printed, "max error in any group: "));  // quantize_model's lines: the page shows the last
    CHECK(json_field(quantized, "bits") == 8);
    CHECK(json_field(quantized, "step") == 300);
    CHECK(json_field(quantized, "last") == 300);
    CHECK(lab.checkpoint() == read_all(m8));
    CHECK(json_field(web_answer(lab, "evaluate", "", 0), "right") == 929);
    CHECK(contains(quantized, "\"cannot_train\":" + json_text(cannot_train_text("the page's model", 8))));
    CHECK(web_answer(lab, "train", "", 1) == "{\"error\":" + json_text(cannot_train_text("the page's model", 8)) + "}");
    CHECK(contains(web_answer(lab, "quantize", "", 4), "quantized already (8 bits)"));
    CHECK(contains(web_answer(lab, "quantize", "", 9), "expected 2 to 8 bits"));
}

// A checkpoint's settings come back as the command line that makes its model: the page's form and title show them.
TEST_CASE("web: a checkpoint's command line") {
    Lab lab;
    web_answer(lab, "start", "--llama --heads 4 --steps 3", 0);
    web_answer(lab, "train", "", 3);
    Lab other;
    std::string loaded = web_answer(other, "load", opened("", lab.checkpoint()), 0);
    CHECK(contains(loaded, "\"command\":\"--heads 4 --arch decoder-only --pos rope --act swiglu --rmsnorm --kv-heads 2 "
                           "--no-embed-scale --no-bias\""));
    CHECK(contains(loaded, "\"arch\":\"decoder-only\""));
    CHECK(contains(web_answer(lab, "start", "--optimizer adam --lr 0.01 --steps 3", 0),
                   "\"command\":\"--lr 0.01 --optimizer adam\""));
}

// A rate that makes the loss overflow: the run ends at that step with ./sorter's words (record_loss's rule), keeps
// its plan (step 11 of 2000), says what it drew, trains no further, and is not downloaded or quantized.
TEST_CASE("web: a run that diverges stops as ./sorter stops") {
    const std::string flags = "--pos rope --rmsnorm --act swiglu --lr 10 --steps 2000";
    const std::string printed = run_output(split_words(flags));  // its refusal: ./sorter's line on stderr
    const std::string ending = " Nothing was saved or drawn";
    REQUIRE(contains(printed, "training diverged at step 11 (loss nan); try a smaller --lr than 10." + ending));
    const std::string said = printed.substr(printed.find("training"), printed.find(ending) - printed.find("training"));
    Lab lab;
    web_answer(lab, "start", flags, 0);
    std::string trained = web_answer(lab, "train", "", 2000);
    const std::string page_said = said + " The charts show every step up to it; Download is off: ./sorter saves "
                                         "nothing of a run that diverged.";
    CHECK(contains(trained, "\"diverged\":" + json_text(page_said)));
    CHECK(json_field(trained, "step") == 11);
    CHECK(json_field(trained, "last") == 2000);
    CHECK(web_answer(lab, "train", "", 10) == "{\"error\":" + json_text(page_said) + "}");
    CHECK(web_answer(lab, "checkpoint", "", 0) == "{\"error\":" + json_text(page_said) + "}");
    CHECK(web_answer(lab, "quantize", "", 8) == "{\"error\":" + json_text(page_said) + "}");
    CHECK(json_field(web_answer(lab, "start", "--steps 5", 0), "last") == 5);  // a new run: it trains again
    CHECK(json_field(web_answer(lab, "train", "", 5), "step") == 5);
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


// A typed input as ./sorter prints it: digits apart by commas, in brackets.
TEST_CASE("web: an input with commas") {
    Lab lab;
    web_answer(lab, "start", "--steps 1", 0);
    CHECK(contains(web_answer(lab, "decode", "[1, 7, 4, 1, 5]", 1), "\"answer\":[\"1\",\"1\",\"4\",\"5\",\"7\"]"));
    CHECK(contains(web_answer(lab, "decode", "1,7", 1), "\"error\":"));  // 2 digits: too short
}
