// workbench/options_test.cpp -- tests of the flag table, --help (flag_table.hpp), parsing and the checks between flags
// (options.hpp).
#include "test_helpers.hpp"
#include "options.hpp"

#include <set>

TEST_CASE("flags: every invalid value gets one line naming the flag and the value") {
    struct Case {
        std::vector<std::string> args;
        std::vector<std::string> must_say;
    };
    std::vector<Case> cases = {
        {{"--bogus"}, {"unknown flag", "--bogus"}},
        {{"--steps"}, {"--steps needs a value", "whole number"}},
        {{"--steps", "abc"}, {"--steps abc", "from 0 to 1000000"}},
        {{"--steps", "12x"}, {"--steps 12x"}},
        {{"--steps", "-5"}, {"--steps -5"}},
        {{"--steps", "99999999999999999999999"}, {"--steps 99999999999999999999999"}},
        {{"--steps", "2000000"}, {"--steps 2000000"}},
        {{"--d-model", "0"}, {"--d-model 0", "from 1 to 256"}},
        {{"--d-model", "100000"}, {"--d-model 100000"}},
        {{"--heads", "0"}, {"--heads 0"}},
        {{"--heads", "3"}, {"--heads 3", "--d-model 16", "multiple"}},
        {{"--d-model", "15"}, {"--d-model 15", "--heads 2"}},
        {{"--d-ff", "-1"}, {"--d-ff -1"}},
        {{"--d-ff", "1000000"}, {"--d-ff 1000000"}},
        {{"--enc-layers", "0"}, {"--enc-layers 0"}},
        {{"--dec-layers", "99"}, {"--dec-layers 99", "from 1 to 8"}},
        {{"--task", "shuffle"}, {"--task shuffle", "sort, copy, reverse"}},
        {{"--task"}, {"--task needs a value"}},
        {{"--seq-len", "0"}, {"--seq-len 0"}},
        {{"--seq-len", "1000"}, {"--seq-len 1000"}},
        {{"--min-len", "7"}, {"--min-len 7", "at most", "5"}},
        {{"--seq-len", "3", "--min-len", "4"}, {"--min-len 4", "3"}},
        {{"--min-len", "0"}, {"--min-len 0"}},
        {{"--max-digit", "0"}, {"--max-digit 0"}},
        {{"--max-digit", "100"}, {"--max-digit 100"}},
        {{"--batch", "0"}, {"--batch 0"}},
        {{"--lr", "0"}, {"--lr 0", "above 0"}},
        {{"--lr", "-1"}, {"--lr -1"}},
        {{"--lr", "abc"}, {"--lr abc"}},
        {{"--lr", "inf"}, {"--lr inf"}},
        {{"--lr", "nan"}, {"--lr nan"}},
        {{"--lr", "11"}, {"--lr 11"}},
        {{"--lr"}, {"--lr needs a value"}},
        {{"--seed", "x"}, {"--seed x"}},
        {{"--seed", "-1"}, {"--seed -1"}},
        {{"--eval-every", "0"}, {"--eval-every 0"}},
        {{"--norm", "mid"}, {"--norm mid", "pre, post"}},
        {{"--pos", "rotary"}, {"--pos rotary", "sinusoidal, learned, none"}},
        {{"--act", "tanh"}, {"--act tanh", "relu, gelu"}},
        {{"--demo", "x"}, {"--demo x", "scale, softmax"}},
        {{"--svg"}, {"--svg needs a value"}},
        {{"--save"}, {"--save needs a value"}},
        {{"--load"}, {"--load needs a value"}},
        {{"--train-data"}, {"--train-data needs a value"}},
        {{"--steps", "--batch", "4"}, {"--steps needs a value"}},
        {{"--sort"}, {"--sort needs digits"}},
        {{"--sort", "--steps", "1"}, {"--sort needs digits"}},
        {{"--load", "m.txt", "--d-model", "8"}, {"--d-model", "--load m.txt"}},
        {{"--load", "m.txt", "--batch", "8"}, {"--batch", "--load m.txt"}},
        {{"--load", "m.txt", "--no-embed-scale"}, {"--no-embed-scale", "--load"}},
        {{"--kv-heads", "0"}, {"--kv-heads 0", "from 1 to 64"}},
        {{"--heads", "4", "--kv-heads", "3"}, {"--kv-heads 3 with --heads 4", "must divide the heads"}},
        {{"--kv-heads", "4"}, {"--kv-heads 4 with --heads 2"}},
        {{"--pos", "rope", "--d-model", "6", "--heads", "2"},
         {"--pos rope with --d-model 6, --heads 2", "d_k = d_model / n_heads = 6 / 2 = 3 is odd"}},
        {{"--load", "m.txt", "--rmsnorm"}, {"--rmsnorm", "--load m.txt"}},
        {{"--load", "m.txt", "--kv-heads", "1"}, {"--kv-heads", "--load m.txt"}},
        {{"--save-every", "5"}, {"--save-every 5", "add --save FILE"}},
        {{"--finish"}, {"--finish", "add --load FILE"}},
        {{"--arch", "gpt"}, {"--arch gpt", "encoder-decoder, decoder-only"}},
        {{"--arch", "decoder-only", "--enc-layers", "2"}, {"--enc-layers with --arch decoder-only", "--dec-layers N"}},
        {{"--experts", "4", "--top-k", "5"}, {"--top-k 5 with --experts 4", "K must be at most E"}},  // chapter 11
        {{"--experts", "1", "--top-k", "2"}, {"--top-k 2 with --experts 1"}},
        {{"--experts", "65"}, {"--experts 65", "from 0 to 64"}},
        {{"--experts", "2", "--top-k", "0"}, {"--top-k 0", "from 1 to 64"}},
        {{"--top-k", "2"}, {"--top-k sets the mixture of experts", "add --experts E"}},
        {{"--shared-experts", "1"}, {"--shared-experts sets the mixture of experts", "add --experts E"}},
        {{"--balance", "0.1"}, {"--balance sets the mixture of experts", "add --experts E"}},
        {{"--experts", "4", "--shared-experts", "9"}, {"--shared-experts 9", "from 0 to 8"}},
        {{"--experts", "4", "--balance", "11"}, {"--balance 11", "from 0 to 10"}},
        {{"--load", "m.txt", "--experts", "4"}, {"--experts", "cannot be combined with --load m.txt"}},
    };
    for (const Case& c : cases) {
        std::string message = parse_error(c.args);
        INFO("args: " << join(c.args, " ") << "  message: " << message);
        CHECK(!message.empty());
        CHECK(message.find('\n') == std::string::npos);
        for (const std::string& part : c.must_say) CHECK(contains(message, part));
    }
}

// One rule for what a number is, for flags, --train-data, --sort and checkpoint values alike.
TEST_CASE("numbers: one syntax everywhere; +5, hex, inf, nan and underflow to 0 are refused") {
    double x = 0;
    long n = 0;
    for (const char* good : {"5", "0.1", "-2.5e-3", "1e+300", "-0", "4.9406564584124654e-324", "0.0"}) {
        INFO(good);
        CHECK(parse_finite(good, x));
    }
    CHECK(parse_finite("-2.5e-3", x));
    CHECK(x == -2.5e-3);
    for (const char* bad : {"+5", " 5", "5 ", "0x1p-3", "inf", "-inf", "nan", "1e-400", ".5", "5.", "1e", "--5",
                            "1e5x", ""}) {
        INFO("'" << bad << "'");
        CHECK(!parse_finite(bad, x));
    }
    CHECK(!parse_finite(std::string("1e\0" "5", 4), x));  // a NUL byte is not a character of a number
    CHECK(parse_whole("007", 0, 10, n));
    CHECK(n == 7);
    for (const char* bad : {"+5", "-0", "-1", "5.0", "1e2", "0x10", ""}) {
        INFO("'" << bad << "'");
        CHECK(!parse_whole(bad, -10, 1000, n));
    }
    CHECK(contains(parse_error({"--lr", "0x1p-3"}), "--lr 0x1p-3"));
    CHECK(contains(parse_error({"--steps", "+5"}), "--steps +5"));
    CHECK(contains(parse_error({"--steps", "-0"}), "--steps -0"));
    CHECK(contains(parse_error({"--lr", "1e-400"}), "--lr 1e-400"));
    DataConfig d;
    CHECK_THROWS_AS(parse_sequence({"+5", "1", "2", "3", "4"}, d, "--sort"), UsageError);
}

TEST_CASE("printable: a bad file's raw bytes reach the terminal escaped") {
    CHECK(printable("line 2: vocab \x1b[31mred\x01\xff") == "line 2: vocab \\x1b[31mred\\x01\\xff");
    CHECK(printable("--lr 0.5: fine") == "--lr 0.5: fine");
}

// Without --lr, each optimizer gets its own rate; --dump-step records any optimizer's step, for make reference.
// The regularisers' flags: each a number in its range; weight decay with the rate must shrink, never flip, a
// weight (1 - lr weight_decay above 0); the checkpoint keeps them, so --load refuses them.
TEST_CASE("regularisers: flags") {
    Options o;
    CHECK(parse_error({"--label-smoothing", "0.1", "--clip", "1", "--weight-decay", "0.5"}, &o).empty());
    CHECK((o.train.label_smoothing == 0.1 && o.train.clip == 1.0 && o.train.weight_decay == 0.5));
    CHECK(variant_text(o) == "--label-smoothing 0.1 --clip 1 --weight-decay 0.5");
    CHECK(parse_error({"--label-smoothing", "0"}, &o).empty());
    CHECK(variant_text(o).empty());
    CHECK(parse_error({"--label-smoothing", "1"}) == "--label-smoothing 1: expected a number from 0 to 0.9");
    CHECK(parse_error({"--clip", "-1"}) == "--clip -1: expected a number from 0 to 1000");
    CHECK(parse_error({"--weight-decay", "nan"}) == "--weight-decay nan: expected a number from 0 to 10");
    CHECK(parse_error({"--weight-decay", "5"}) ==
          "--weight-decay 5 with --lr 0.2: each step multiplies the matrices by 1 - lr x weight decay, which must "
          "stay above 0; lower one of them");
    CHECK(parse_error({"--weight-decay", "5", "--optimizer", "adam"}).empty());  // lr 0.001
    CHECK(contains(parse_error({"--load", "m.txt", "--clip", "1"}), "--clip cannot be combined with --load"));
}

// Decoding's flags: a beam from 1 to 64; its length penalty only with a beam; --inspect (greedy, step by step)
// refuses a beam. Neither is fixed by a checkpoint.
TEST_CASE("decoding: flags") {
    Options o;
    CHECK(parse_error({"--beam", "4", "--length-penalty", "1"}, &o).empty());
    CHECK((o.decode.beam == 4 && o.decode.length_penalty == 1.0));
    CHECK(parse_error({"--beam", "0"}) == "--beam 0: expected a whole number from 1 to 64");
    CHECK(parse_error({"--length-penalty", "1"}) ==
          "--length-penalty ranks the hypotheses of beam search; add --beam K with K above 1");
    CHECK(parse_error({"--beam", "2", "--inspect"}) ==
          "--inspect measures greedy decoding step by step; it cannot be combined with --beam 2");
    CHECK(parse_error({"--load", "m.txt", "--beam", "4"}).empty());
    CHECK(variant_text(o).empty());
}

TEST_CASE("optimizers: flags") {
    Options o;
    CHECK(parse_error({"--optimizer", "adam"}, &o).empty());
    CHECK(o.train.lr == 0.001);
    CHECK(parse_error({"--optimizer", "momentum", "--lr", "0.05"}, &o).empty());
    CHECK(o.train.lr == 0.05);
    CHECK(o.train.optimizer == OptimizerKind::momentum);
    CHECK(parse_error({"--schedule", "warmup", "--warmup", "300"}, &o).empty());
    CHECK((o.train.schedule == Schedule::warmup && o.train.warmup == 300 && o.train.lr == 0.2));
    CHECK(contains(parse_error({"--optimizer", "adamw"}), "--optimizer"));
    CHECK(parse_error({"--seq-len", "5", "--test-len", "9"}, &o).empty());  // the position table reaches 9
    CHECK((o.model.max_len == 9 && o.data.seq_len == 5));
    CHECK(parse_error({"--seq-len", "6", "--test-len", "3"}, &o).empty());
    CHECK(o.model.max_len == 6);
    CHECK(parse_error({"--optimizer", "adam", "--dump-step", "x.txt"}).empty());
    CHECK(contains(parse_error({"--pos", "random", "--dump-step", "x.txt"}), "cannot be combined with --pos random"));
}

// The table of options is the one source of --help, of parsing and of the --load check: every
// flag in it is printed by --help, parses, and (when the checkpoint fixes it) is refused with
// --load; the variant line lists exactly the data and variant settings that differ.
TEST_CASE("flags: one table drives --help, parsing and the --load check") {
    std::string help;
    {
        std::FILE* f = std::tmpfile();
        REQUIRE(f != nullptr);
        std::FILE* saved = stdout;
        stdout = f;  // print_help writes with printf: catch it in a file
        print_help();
        stdout = saved;
        std::rewind(f);
        for (int ch; (ch = std::fgetc(f)) != EOF;) help += char(ch);
        std::fclose(f);
    }
    std::set<std::string> names;  // a name twice would leave the second row unreachable (find_flag)
    for (const FlagGroup& g : flag_table()) {
        CHECK(contains(help, g.title));
        for (const Flag& f : g.flags) {
            INFO(f.name);
            CHECK(names.insert(f.name).second);
            CHECK(contains(help, "  " + f.name));
            if (!f.fixed_by_checkpoint) continue;
            std::vector<std::string> args = {"--load", "m.txt", f.name};
            if (f.value == "N") args.push_back("2");
            else if (f.value == "X") args.push_back("0.5");
            else if (!f.value.empty()) args.push_back(f.value.substr(0, f.value.find('|')));  // a choice, a file
            if (f.checked_by_checkpoint || f.fine_tunes)  // allowed: the checkpoint checks it is the model's own file
                                                          // (--train-data); the data of fine-tuning (chapter 12)
                CHECK(parse_error(args) == "");
            else
                CHECK(contains(parse_error(args), f.name + " cannot be combined with --load m.txt"));
        }
    }
    CHECK(names.count("--d-model") == 1);  // the table is the whole table: a model flag, a data flag, a switch
    CHECK(names.count("--train-data") == 1);
    CHECK(names.count("--help") == 1);
    CHECK(help.find(" \n") == std::string::npos);  // no trailing spaces

    Options o;
    REQUIRE(parse_error({}, &o) == "");
    CHECK(variant_text(o) == "");
    REQUIRE(parse_error({"--seq-len", "8", "--d-model", "32"}, &o) == "");
    CHECK(variant_text(o) == "--seq-len 8");  // --min-len follows --seq-len; d_model is in the header
    REQUIRE(parse_error({"--task", "reverse", "--min-len", "3", "--pos", "none", "--no-embed-scale"}, &o) == "");
    CHECK(variant_text(o) == "--task reverse --min-len 3 --pos none --no-embed-scale");
}

TEST_CASE("flags: valid values parse, and the vocabulary follows --max-digit") {
    Options o;
    REQUIRE(parse_error({"--d-model", "32", "--heads", "4", "--d-ff", "64", "--enc-layers", "2", "--dec-layers", "3",
                         "--task", "reverse", "--seq-len", "7", "--min-len", "3", "--max-digit", "5", "--steps", "10",
                         "--batch", "8", "--lr", "0.05", "--seed", "4", "--eval-every", "5", "--norm", "post", "--pos",
                         "learned", "--act", "gelu", "--no-embed-scale", "--sort", "1", "2", "3", "--show-attention"},
                        &o) == "");
    CHECK(o.model.d_model == 32);
    CHECK(o.model.n_heads == 4);
    CHECK(o.model.d_ff == 64);
    CHECK(o.model.enc_layers == 2);
    CHECK(o.model.dec_layers == 3);
    CHECK(o.data.task == Task::reverse);
    CHECK(o.data.seq_len == 7);
    CHECK(o.data.min_len == 3);
    CHECK(o.model.vocab == 7);
    CHECK(o.model.max_len == 7);
    CHECK(o.train.steps == 10);
    CHECK(o.train.batch == 8);
    CHECK(o.train.lr == 0.05);
    CHECK(o.seed == 4);
    CHECK(o.model.norm_place == NormPlace::post);
    CHECK(o.model.positions == Positions::learned);
    CHECK(o.model.activation == Activation::gelu);
    CHECK(!o.model.embed_scale);
    CHECK(o.sort_words == std::vector<std::string>{"1", "2", "3"});
    CHECK(o.show_attention);
    // Without --min-len, inputs keep the full length of --seq-len.
    REQUIRE(parse_error({"--seq-len", "8"}, &o) == "");
    CHECK(o.data.min_len == 8);
}


// --llama sets five settings, and one rule holds for all of them: a flag after it changes the recipe, and one of
// those flags before it is refused, since the recipe would override it unseen. Before, --pos learned --llama trained
// rotary positions without a word, while --kv-heads 1 --heads 4 --llama kept its one key-value head.
TEST_CASE("--llama: the flags it sets change the recipe after it, and are refused before it") {
    Options o;
    REQUIRE(parse_error({"--heads", "4", "--llama"}, &o) == "");
    CHECK((o.model.arch == Arch::decoder_only && o.model.rms_norm && o.model.activation == Activation::swiglu &&
           o.model.positions == Positions::rope && o.model.key_value_heads() == 2));
    REQUIRE(parse_error({"--llama", "--pos", "learned", "--kv-heads", "1", "--act", "gelu", "--heads", "4"}, &o) == "");
    CHECK((o.model.positions == Positions::learned && o.model.key_value_heads() == 1 &&
           o.model.activation == Activation::gelu && o.model.rms_norm));
    const std::vector<std::vector<std::string>> before = {
        {"--pos", "learned"}, {"--kv-heads", "1"}, {"--act", "relu"}, {"--rmsnorm"}, {"--arch", "encoder-decoder"}};
    for (std::vector<std::string> args : before) {
        const std::string flag = args[0];
        args.insert(args.begin(), {"--heads", "4"});
        args.push_back("--llama");
        CHECK(parse_error(args) ==
              flag + " comes before --llama, which sets it too: give " + flag + " after --llama to change the recipe");
    }
    CHECK(parse_error({"--norm", "post", "--heads", "4", "--dec-layers", "2", "--llama"}) == "");  // not its settings
}
