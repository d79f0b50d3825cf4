// workbench/flags_test.cpp -- tests of flags.hpp: each kind of row reads its value, checks it and says it back.
#include "test_helpers.hpp"

// One row read from words as after ./sorter; returns the error message, or "" (and the words it read, in `read`).
static std::string apply_row(const Flag& f, std::vector<std::string> words, Options& o, int* read = nullptr) {
    words.insert(words.begin(), "./sorter");
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    Args a{int(argv.size()), argv.data(), 1, words[1]};
    try {
        f.apply(o, a);
    } catch (const UsageError& e) {
        return e.message;
    }
    if (read) *read = a.i;
    return "";
}

// Each builder gives its row the default and range in its help, reads and checks the value after the flag, and
// says the value back as it would be given (a switch left off: nothing).
TEST_CASE("flags: each kind of row reads, checks and says back its value") {
    using M = ModelConfig;
    Options o;
    int read = 0;
    Flag d_model = whole_flag("--d-model", "width", 1, MAX_D_MODEL, true, &M::d_model);
    CHECK(d_model.value == "N");
    CHECK(d_model.help == "width (default 16, at most 256)");
    CHECK(apply_row(d_model, {"--d-model", "32", "--heads"}, o, &read).empty());
    CHECK((o.model.d_model == 32 && read == 2));
    CHECK(d_model.as_given(o) == "--d-model 32");
    CHECK(apply_row(d_model, {"--d-model", "257"}, o) == "--d-model 257: expected a whole number from 1 to 256");
    CHECK(apply_row(d_model, {"--d-model", "--heads", "4"}, o) ==
          "--d-model needs a value: a whole number from 1 to 256");

    Flag pos = choice_flag("--pos", "positions", POSITION_NAMES, true, &M::positions);
    CHECK(pos.value == "sinusoidal|learned|none|random|rope|alibi");
    CHECK(pos.help == "positions (default sinusoidal)");
    CHECK(apply_row(pos, {"--pos", "alibi"}, o).empty());
    CHECK((o.model.positions == Positions::alibi && pos.as_given(o) == "--pos alibi"));
    CHECK(apply_row(pos, {"--pos", "rotary"}, o) ==
          "--pos rotary: expected one of sinusoidal, learned, none, random, rope, alibi");

    Flag rms = switch_flag("--rmsnorm", "RMSNorm", true, true, &M::rms_norm);
    CHECK(rms.as_given(DEFAULTS).empty());
    CHECK(apply_row(rms, {"--rmsnorm", "--heads"}, o, &read).empty());
    CHECK((o.model.rms_norm && read == 1 && rms.as_given(o) == "--rmsnorm"));

    Flag dropout = number_flag("--dropout", "dropout", 0, MAX_FRACTION, true, &M::dropout);
    CHECK(dropout.help == "dropout (default 0, from 0 to 0.9)");
    CHECK(apply_row(dropout, {"--dropout", "0.25"}, o).empty());
    CHECK((o.model.dropout == 0.25 && dropout.as_given(o) == "--dropout 0.25"));
    CHECK(apply_row(dropout, {"--dropout", "0.95"}, o) == "--dropout 0.95: expected a number from 0 to 0.9");

    Flag save = path_flag("--save", "FILE", "where", false, &Options::save_path);
    CHECK(save.as_given(DEFAULTS).empty());
    CHECK(apply_row(save, {"--save", "m.txt"}, o).empty());
    CHECK((o.save_path == "m.txt" && save.as_given(o) == "--save m.txt"));
}
