// workbench/checkpoint_test.cpp -- tests of checkpoint.hpp: round trips, training on bit for bit, every
// corrupt file refused, a pipe; --dump-step.
#include "test_helpers.hpp"
#include "checkpoint.hpp"

#include <sys/wait.h>

TEST_CASE("checkpoint: a round trip gives bit-identical parameters and identical predictions") {
    ModelConfig c;
    DataConfig d;
    Transformer model = small_trained_model(c, d);
    TempDir dir("roundtrip");
    std::string path = dir.file("model.txt");
    save_kept(path, model, Kept{d});
    CHECK(dir.listing() == std::vector<std::string>{"model.txt"});  // no temporary left behind

    Kept saved;
    Transformer loaded = load_kept(path, saved);
    const DataConfig& d2 = saved.data;
    CHECK(d2.task == d.task);
    CHECK(d2.seq_len == d.seq_len);
    CHECK(d2.min_len == d.min_len);
    CHECK(d2.max_digit == d.max_digit);
    CHECK(loaded.config.norm_place == c.norm_place);
    CHECK(loaded.config.positions == c.positions);
    CHECK(loaded.config.activation == c.activation);
    CHECK(loaded.config.embed_scale == c.embed_scale);
    auto a = model.parameters(), b = loaded.parameters();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); i++) {
        INFO(a[i].first);
        CHECK(a[i].first == b[i].first);
        REQUIRE(a[i].second->value.data.size() == b[i].second->value.data.size());
        CHECK(std::memcmp(a[i].second->value.data.data(), b[i].second->value.data.data(),
                          a[i].second->value.data.size() * sizeof(double)) == 0);
    }
    Rng rng(11);
    for (int n = 0; n < 20; n++) {
        Example e = make_example(random_digits(rng, d), d);
        CHECK(greedy_decode(model, {e.source}, d.seq_len)[0] == greedy_decode(loaded, {e.source}, d.seq_len)[0]);
        Matrix la = model.forward({e.source}, {e.target_in}), lb = loaded.forward({e.source}, {e.target_in});
        CHECK(std::memcmp(la.data.data(), lb.data.data(), la.data.size() * sizeof(double)) == 0);
    }
    // Saving the loaded model writes the same bytes.
    std::string again = dir.file("again.txt");
    save_kept(again, loaded, Kept{d2});
    CHECK(read_all(again) == read_all(path));
}

// Today's blocks round-trip too (version 6): RMSNorm, SwiGLU, rotary positions or ALiBi and grouped-query
// attention come back as they were, with the same bits and the same outputs; a header that breaks their rules
// is refused with its reason.
TEST_CASE("checkpoint: today's blocks, version 6, round-trip, and their header is checked") {
    for (Positions positions : {Positions::rope, Positions::alibi, Positions::random}) {
        ModelConfig c;
        DataConfig d;
        small_trained_model(c, d);  // its sizes and data
        c.kv_heads_asked = 1, c.rms_norm = true, c.activation = Activation::swiglu, c.positions = positions;
        if (positions == Positions::random)  // decoder-only, its position table twice as long (and 4 x for random)
            c.arch = Arch::decoder_only, c.enc_layers = 0, c.max_len = 4 * positions_read(c, d.seq_len);
        Transformer model(c, 3);
        TempDir dir("todays");
        std::string path = dir.file("model.txt");
        save_kept(path, model, Kept{d});
        const std::string text = read_all(path);
        CHECK(text.rfind("sorter-checkpoint 6\n", 0) == 0);
        CHECK(contains(text, "\nrms_norm 1\narch " + ARCH_NAMES[int(c.arch)] + "\nkv_heads 1\n"));
        Kept saved;
        Transformer loaded = load_kept(path, saved);
        CHECK((loaded.config.rms_norm && loaded.config.key_value_heads() == 1 && loaded.config.positions == positions &&
               loaded.config.activation == Activation::swiglu && loaded.config.arch == c.arch));
        Rng rng(12);
        for (int n = 0; n < 10; n++) {
            Example e = make_example(random_digits(rng, d), d);
            Matrix la = model.forward({e.source}, {e.target_in}), lb = loaded.forward({e.source}, {e.target_in});
            CHECK(std::memcmp(la.data.data(), lb.data.data(), la.data.size() * sizeof(double)) == 0);
        }
        std::string again = dir.file("again.txt");
        save_kept(again, loaded, Kept{saved.data});
        CHECK(read_all(again) == text);
        if (positions == Positions::random) {  // a decoder-only model keeps no encoder, and reads twice the positions
            CHECK(contains(load_error(replace_once(text, "enc_layers 0", "enc_layers 1")),
                           "enc_layers 1 with arch decoder-only"));
            CHECK(contains(load_error(replace_once(text, "max_len 32", "max_len 4")),
                           "max_len 4 is below seq_len 4 x 2"));
        }
        if (positions != Positions::rope) continue;
        CHECK(contains(load_error(replace_once(text, "kv_heads 1", "kv_heads 3")),
                       "kv_heads 3 with n_heads 2: each key-value head serves"));
        CHECK(contains(load_error(replace_once(text, "rms_norm 1", "rms_norm 2")), "rms_norm 2"));
        std::string odd = replace_once(replace_once(text, "n_heads 2", "n_heads 8"), "kv_heads 1", "kv_heads 8");
        CHECK(contains(load_error(odd),
                       "positions rope with d_model 8, n_heads 8: rotary positions turn each head's columns in pairs, "
                       "and d_k = d_model / n_heads = 8 / 8 = 1 is odd"));
        CHECK(contains(load_error(replace_once(text, "sorter-checkpoint 6", "sorter-checkpoint 5")),
                       "line 10: positions rope came in version 6, and this file says version 5"));
    }
}

// A choice's values, as the settings' rows, are read only from the version that brought them: rope, alibi and swiglu
// came in version 6, so an older file may not name them. Before, a version 5 file saying "positions rope" loaded as
// a rotary model.
TEST_CASE("checkpoint: a file older than version 6 may not name rope, alibi or swiglu") {
    const std::vector<std::pair<std::string, std::string>> todays = {
        {"positions", "rope"}, {"positions", "alibi"}, {"activation", "swiglu"}};
    for (const auto& todays_value : todays) {
        const std::string key = todays_value.first, value = todays_value.second;  // (INFO's lambda reads them)
        ModelConfig c;
        DataConfig d;
        small_trained_model(c, d);
        if (key == "positions") c.positions = value == "rope" ? Positions::rope : Positions::alibi;
        else c.activation = Activation::swiglu;
        Transformer model(c, 3);
        const std::string text = checkpoint_text(model, Kept{d});
        REQUIRE(text.rfind("sorter-checkpoint 6\n", 0) == 0);
        CHECK(load_error(text) == "");
        for (int version : {5, 4, 2}) {
            INFO(key, " ", value, ", version ", version);
            CHECK(load_error(as_version(text, version)) ==
                  fmt("--load model.txt line %d: %s %s came in version 6, and this file says version %d (a model that "
                      "uses it is saved as version 6)", key == "positions" ? 10 : 11, key.c_str(), value.c_str(),
                      version));
        }
    }
}

// A version 6 file holding a line of version 7 (no_bias, attention, bits) says so, rather than "expected 'task',
// found 'no_bias'"; so does a training line a file's version does not have. And a file cut inside a word names
// what it was cut in: before, a file ending at "tensor d" (of decoder.0...) said "unknown tensor 'd'".
TEST_CASE("checkpoint: a line of a later version, and a file cut inside a word, are said as such") {
    ModelConfig c;
    DataConfig d;
    small_trained_model(c, d);
    c.arch = Arch::decoder_only, c.enc_layers = 0, c.max_len = positions_read(c, d.seq_len);  // (version 6)
    Transformer model(c, 3);
    const std::string six = checkpoint_text(model, Kept{d});
    REQUIRE(six.rfind("sorter-checkpoint 6\n", 0) == 0);
    for (const std::string line : {"attention plain", "no_bias 0", "bits 0"}) {
        INFO(line);
        const std::string key = split_words(line)[0];
        CHECK(load_error(replace_once(six, "\ntask ", "\n" + line + "\ntask ")) ==
              "--load model.txt line 19: the line '" + key + "' came in version 7, and this file says version 6 (a "
              "file with it is version 7 or later: its first line 'sorter-checkpoint 7')");
    }
    ModelConfig paper_config;
    DataConfig paper_data;
    Transformer paper = small_trained_model(paper_config, paper_data);  // (version 5)
    const std::string three = as_version(checkpoint_text(paper, Kept{paper_data}), 3);
    CHECK(contains(load_error(replace_once(three, "\nupdates ", "\nseed 1\nupdates ")),
                   "the line 'seed' came in version 4, and this file says version 3"));
    // Cut inside a word: a tensor's name, the word tensor, a key, training, end.
    const std::size_t tensor_d = six.find("tensor decoder.0.norm1.gamma");
    REQUIRE(tensor_d != std::string::npos);
    CHECK(load_error(six.substr(0, tensor_d + 8)) ==
          "--load model.txt line 42: the file ends early (truncated) inside the name of tensor 'decoder.0.norm1.gamma'");
    CHECK(contains(load_error(six.substr(0, tensor_d + 3)),
                   "the file ends early (truncated): tensor 'decoder.0.norm1.gamma' is missing"));
    CHECK(contains(load_error(six.substr(0, six.find("\ntraining\n") + 5)), "truncated): expected 'training'"));
    CHECK(contains(load_error(six.substr(0, six.find("\nd_model ") + 4)), "truncated) inside 'd_model'"));
    CHECK(contains(load_error(six.substr(0, six.size() - 2)), "truncated): expected 'end'"));
    CHECK(contains(load_error(six.substr(0, six.find("\ntraining\n") + 1) + "tensor"),
                   "truncated): expected 'training'"));
    CHECK(contains(load_error(replace_once(six, "\ntensor decoder.0.norm1.gamma", "\ntensor d")),  // a whole word
                   "unknown tensor 'd'"));                                                          // (not cut)
}

// Training goes on from a checkpoint as if it had never stopped: 12 steps, saved, loaded, 12 more give
// the same bits as 24 steps in one go, for each optimizer (constant rate: a schedule would see a longer
// run). The checkpoint keeps the optimizer's update count and running means, and the training draws; with a
// regulariser on (version 3), its settings and the dropout draws too.
TEST_CASE("checkpoint: training goes on from a checkpoint bit for bit (versions 2 and 3), and version 1 loads") {
    DataConfig d = few_digits();
    ModelConfig c = small_model(d);
    Dataset data(d, {}, 20, 5);
    TempDir dir("resume");
    struct Run {
        OptimizerKind kind;
        bool random;  // random positions: the model's own draws must go on too
        bool regularised = false;  // version 3: label smoothing, clipping, weight decay
    };
    for (Run run : {Run{OptimizerKind::sgd, false}, Run{OptimizerKind::momentum, false}, Run{OptimizerKind::adam, false},
                    Run{OptimizerKind::sgd, true}, Run{OptimizerKind::momentum, false, true},
                    Run{OptimizerKind::adam, false, true}}) {
        const OptimizerKind kind = run.kind;
        const bool random = run.random;
        ModelConfig c = small_model(d);
        if (random) {
            c.positions = Positions::random;
            c.max_len = 12;
        }
        c.tie_embeddings = run.regularised;
        c.dropout = c.attn_dropout = run.regularised ? 0.1 : 0.0;
        TrainConfig t;
        t.optimizer = kind;
        t.lr = kind == OptimizerKind::adam ? 0.01 : 0.1;
        t.batch = 3;
        if (run.regularised) t.label_smoothing = 0.1, t.clip = 0.5, t.weight_decay = 0.1;
        t.schedule = Schedule::constant;
        auto train = [&](Transformer& model, Kept& saved, int steps) {
            for (int step = 0; step < steps; step++) train_step(model, data, saved.train, saved.state, 24);
        };
        Transformer straight(c, 9), halves(c, 9);
        Kept straight_saved(d, t, 4), first_half(d, t, 4);
        train(straight, straight_saved, 24);
        train(halves, first_half, 12);
        save_kept(dir.file("half.txt"), halves, first_half);
        CHECK(read_all(dir.file("half.txt")).rfind("sorter-checkpoint 5\n", 0) == 0);
        Kept second_half;
        Transformer loaded = load_kept(dir.file("half.txt"), second_half);
        CHECK(second_half.state.updates == 12);
        CHECK(second_half.train.optimizer == kind);
        CHECK(second_half.train.batch == 3);
        CHECK((second_half.train.label_smoothing == t.label_smoothing && second_half.train.clip == t.clip &&
               second_half.train.weight_decay == t.weight_decay));
        const Optimizer& resumed = second_half.state.optimizer;
        CHECK((resumed.clip == t.clip && resumed.weight_decay == t.weight_decay));
        train(loaded, second_half, 12);
        CHECK(second_half.state.updates == 24);
        CHECK(loaded.position_draws.state == straight.position_draws.state);
        if (run.regularised) CHECK(loaded.dropout_draws.state == straight.dropout_draws.state);  // v3 keeps them
        CHECK((loaded.config.dropout == c.dropout && loaded.config.attn_dropout == c.attn_dropout));
        auto a = straight.parameters(), b = loaded.parameters();
        for (std::size_t i = 0; i < a.size(); i++) {
            INFO(OPTIMIZER_NAMES[int(kind)], random ? " random positions " : " ", a[i].first);
            CHECK(a[i].second->value.data == b[i].second->value.data);
        }
    }
    // A version 1 file (no training section) loads the same model, with a fresh optimizer.
    Transformer model(c, 9);
    std::string v2 = as_version(checkpoint_text(model, Kept(d)), 2);
    std::string v1 = replace_once(v2, "sorter-checkpoint 2", "sorter-checkpoint 1");
    v1 = v1.substr(0, v1.find("training\n")) + "end\n";
    CHECK(load_error(v1) == "");
    std::istringstream in(v1);
    Kept saved;
    saved.state.updates = 5;
    Transformer old = read_kept(in, "v1", saved);
    CHECK(saved.state.updates == 0);
    CHECK(old.parameters()[0].second->value.data == model.parameters()[0].second->value.data);
    CHECK(contains(load_error(replace_once(v1, "end\n", "training\nend\n")), "expected 'end', found 'training'"));
}

TEST_CASE("checkpoint: every kind of corrupt file is rejected with a clear message") {
    ModelConfig c;
    DataConfig d;
    Transformer model = small_trained_model(c, d);
    Kept trained(d);  // as after 20 SGD steps of batch 5
    trained.train.batch = 5;
    trained.state.updates = 20;
    const std::string good = checkpoint_text(model, trained);
    REQUIRE(load_error(good) == "");

    struct Case {
        const char* what;
        std::string text;
        std::vector<std::string> must_say;
    };
    std::string missing = good;  // drop the whole block of one tensor (its line and its one row)
    {
        std::size_t at = missing.find("tensor encoder.0.norm1.beta");
        std::size_t next = missing.find("tensor ", at + 1);
        missing.erase(at, next - at);
    }
    std::string first_value = good.substr(good.find("tensor embed.table"));
    first_value = first_value.substr(first_value.find('\n') + 1);
    first_value = first_value.substr(0, first_value.find(' '));
    std::vector<Case> cases = {
        {"empty file", "", {"not a sorter checkpoint"}},
        {"bad magic", replace_once(good, "sorter-checkpoint", "sorter-chekpoint"), {"line 1", "not a sorter checkpoint"}},
        {"another format", "P6\n640 480\n255\n", {"not a sorter checkpoint", "'P6'"}},
        {"bad version", replace_once(good, "sorter-checkpoint 5", "sorter-checkpoint 0"),
         {"version 0", "1 to " + std::to_string(newest_version())}},
        {"header key out of order", replace_once(good, "d_model 8", "d_models 8"), {"expected 'd_model'", "'d_models'"}},
        {"absurd d_model", replace_once(good, "d_model 8", "d_model 1000000000"), {"d_model 1000000000", "from 1 to 256"}},
        {"absurd layers", replace_once(good, "enc_layers 2", "enc_layers 4000"), {"enc_layers 4000"}},
        {"negative size", replace_once(good, "d_ff 12", "d_ff -12"), {"d_ff -12"}},
        {"bad choice", replace_once(good, "norm post", "norm sideways"), {"norm sideways", "pre, post"}},
        {"heads do not divide", replace_once(good, "n_heads 2", "n_heads 3"), {"n_heads 3 with d_model 8: d_model must be a multiple"}},
        {"vocab mismatch", replace_once(good, "vocab 8", "vocab 11"), {"vocab 11", "max_digit 6"}},
        {"min_len above seq_len", replace_once(good, "min_len 2", "min_len 5"), {"min_len 5", "seq_len 4"}},
        {"wrong tensor count", replace_once(good, "tensors ", "tensors 1"), {"tensors"}},
        {"unknown tensor", replace_once(good, "tensor out.b ", "tensor out.bias "), {"unknown tensor 'out.bias'"}},
        {"missing tensor", missing, {"tensor 'encoder.0.norm1.beta' is missing"}},
        {"extra tensor", replace_once(good, "training\n", "tensor out.c 1 1\n0\ntraining\n"),
         {"unknown tensor 'out.c'"}},
        {"no training section", replace_once(good, "training\n", "trained\n"), {"expected 'training'", "'trained'"}},
        {"bad optimizer", replace_once(good, "optimizer sgd", "optimizer rmsprop"), {"rmsprop", "sgd, momentum, adam"}},
        {"lr 0", replace_once(good, "lr 0.20000000000000001", "lr 0"), {"lr 0", "above 0"}},
        {"bad batch", replace_once(good, "batch 5", "batch 0"), {"batch 0", "from 1 to 1024"}},
        {"bad draws", replace_once(good, "draws ", "draws 99999999999999999999999 "),
         {"draws 99999999999999999999999"}},
        {"negative updates", replace_once(good, "updates 20", "updates -3"), {"updates -3"}},
        {"plan below updates", replace_once(good, "planned_steps unknown", "planned_steps 12"),
         {"line ", "planned_steps 12 is below updates 20"}},
        {"bad plan", replace_once(good, "planned_steps unknown", "planned_steps -1"), {"planned_steps -1"}},
        {"bad position draws", replace_once(good, "position_draws ", "position_draws x"), {"position_draws x"}},
        {"wrong shape", replace_once(good, "tensor out.b 1 8", "tensor out.b 1 9"),
         {"tensor 'out.b' has shape (1, 9)", "needs (1, 8)"}},
        {"absurd shape", replace_once(good, "tensor embed.table 8 8", "tensor embed.table 99999999999999 8"),
         {"tensor 'embed.table' has shape (99999999999999, 8)"}},
        {"truncated in a tensor", good.substr(0, good.find('\n', good.find("tensor embed.table")) + 30), {"truncated"}},
        {"truncated inside a number", good.substr(0, good.find("tensor out.b") - 3), {"truncated"}},
        {"truncated before end", good.substr(0, good.size() - 4), {"truncated", "'end'"}},
        {"truncated before training", good.substr(0, good.find("training\n")), {"truncated", "'training'"}},
        {"nan value", replace_once(good, first_value, "nan"), {"tensor 'embed.table' value 0: 'nan' is not a finite number"}},
        {"underflow", replace_once(good, first_value, "1e-400"), {"value 0: '1e-400' is not a finite number"}},
        {"plus sign", replace_once(good, first_value, "+0.5"), {"value 0: '+0.5' is not a finite number"}},
        {"inf value", replace_once(good, first_value, "-inf"), {"'-inf' is not a finite number"}},
        {"overflowing value", replace_once(good, first_value, "1e999"), {"'1e999' is not a finite number"}},
        {"text value", replace_once(good, first_value, "0.5x"), {"'0.5x'"}},
        {"huge word", replace_once(good, first_value, std::string(100000, '7')), {"longer than 64 characters"}},
        {"words after end", good + "more\n", {"unexpected 'more' after 'end'"}},
    };
    for (const Case& k : cases) {
        std::string message = load_error(k.text);
        INFO(k.what << ": " << message);
        CHECK(!message.empty());
        CHECK(message.find('\n') == std::string::npos);
        CHECK(contains(message, "--load model.txt"));
        for (const std::string& part : k.must_say) CHECK(contains(message, part));
    }
    // Version 3: the regularisers' lines, each checked.
    Transformer regularised = model;
    regularised.config.dropout = 0.1;
    Kept settings = trained;
    settings.train.label_smoothing = 0.1, settings.train.weight_decay = 0.5;
    const std::string v3 = as_version(checkpoint_text(regularised, settings), 3);
    REQUIRE(load_error(v3) == "");
    for (const Case& k : std::vector<Case>{
             {"v3: bad tie", replace_once(v3, "tie_embeddings 0", "tie_embeddings 2"), {"tie_embeddings 2", "0 to 1"}},
             {"v3: dropout 1", replace_once(v3, "dropout 0.1", "dropout 1"), {"dropout 1", "from 0 to 0.9"}},
             {"v3: no attn_dropout", replace_once(v3, "attn_dropout 0\n", ""), {"expected 'attn_dropout'"}},
             {"v3: bad smoothing", replace_once(v3, "label_smoothing 0.1", "label_smoothing x"), {"label_smoothing x"}},
             {"v3: negative clip", replace_once(v3, "clip 0\n", "clip -1\n"), {"clip -1", "from 0 to 1000"}},
             {"v3: decay flips", replace_once(v3, "weight_decay 0.5", "weight_decay 9"), {"lr x weight_decay"}},
             {"v3: bad dropout draws", replace_once(v3, "dropout_draws ", "dropout_draws -"), {"dropout_draws -"}},
             {"v2 with v3 lines", replace_once(v3, "sorter-checkpoint 3", "sorter-checkpoint 2"),
              {"line 13: the line 'tie_embeddings' came in version 3, and this file says version 2"}}}) {
        std::string message = load_error(k.text);
        INFO(k.what << ": " << message);
        for (const std::string& part : k.must_say) CHECK(contains(message, part));
    }
    // Momentum's running means follow, one a tensor in the order of the tensors.
    Kept with_momentum(d);
    with_momentum.state.optimizer = Optimizer(OptimizerKind::momentum);
    with_momentum.state.optimizer.update(model, 0.0, 1);
    with_momentum.state.updates = 1;  // one update at rate 0: running means of the zero grads
    const std::string momentum = checkpoint_text(model, with_momentum);
    REQUIRE(load_error(momentum) == "");
    CHECK(contains(load_error(momentum.substr(0, momentum.size() - 40)), "truncated"));
    CHECK(contains(load_error(replace_once(momentum, "m embed.table", "m out.b")),
                   "expected 'm embed.table', found 'm out.b'"));
    CHECK(contains(load_error(replace_once(momentum, "m out.b\n", "m out.b\nx")), "m of 'out.b' value 0: 'x"));
    // The line number points at the problem.
    CHECK(contains(load_error(replace_once(good, "d_model 8", "d_model 0")), "line 4:"));

    Kept saved;
    CHECK_THROWS_AS(load_kept("/nonexistent/model.txt", saved), UsageError);
}

// The line counter is 64 bits: a file of 2^31 newlines (2 GB) once overflowed an int, undefined
// behaviour that named line -2147483645. Started just below 2^31, it counts on past it.
TEST_CASE("checkpoint: the line count does not overflow past 2^31") {
    std::istringstream in("\n\n\nsorter-checkpoint 7\n");
    WordReader r{in, "--load big.txt", 1, ""};
    r.line = 2147483647;
    CHECK(r.next() == "sorter-checkpoint");
    CHECK(r.at() == "--load big.txt line 2147483650");
}

// --test-len makes the position table longer than the training inputs (max_len above seq_len); such a
// model saves and loads like any other, while a table shorter than the inputs is refused.
TEST_CASE("checkpoint: a position table longer than the inputs (--test-len) round-trips") {
    DataConfig d = few_digits();
    ModelConfig c = small_model(d);
    c.max_len = d.seq_len + 3;
    c.positions = Positions::learned;
    Transformer model(c, 4);
    std::string text = checkpoint_text(model, Kept(d));
    CHECK(load_error(text).empty());
    CHECK(contains(load_error(replace_once(text, "max_len " + std::to_string(c.max_len), "max_len 2")),
                   "max_len 2 is below seq_len"));
}

// How many values a model holds is read from its own parameter list: two models counted by hand.
TEST_CASE("checkpoint: parameter_count, the model's own list, against two counts by hand") {
    ModelConfig paper;  // d_model 16, n_heads 2, d_ff 32, vocab 11, 1 + 1 layers, LayerNorm, ReLU
    Transformer first(paper, 1);
    // embed 11 x 16; an encoder block: two LayerNorms (gamma, beta) 4 x 16, W_q W_k W_v W_o 4 x 16 x 16, W_1 b_1
    // W_2 b_2 16 x 32 + 32 + 32 x 16 + 16; a decoder block: three LayerNorms, two attentions, one feed-forward;
    // final_norm 2 x 16; out.W, out.b 16 x 11 + 11
    CHECK(parameter_count(first) == 176 + (64 + 1024 + 1072) + (96 + 2048 + 1072) + 32 + 187);  // 5771
    ModelConfig todays = paper;  // decoder-only, 2 blocks, RMSNorm, SwiGLU, 1 key-value head, learned, tied
    todays.arch = Arch::decoder_only, todays.enc_layers = 0, todays.dec_layers = 2, todays.rms_norm = true;
    todays.activation = Activation::swiglu, todays.kv_heads_asked = 1, todays.positions = Positions::learned;
    todays.tie_embeddings = true, todays.max_len = 10;
    Transformer second(todays, 1);
    // embed 11 x 16 + positions 10 x 16; a block: two RMSNorms (gamma) 2 x 16, W_q W_o 2 x 16 x 16, W_k W_v
    // 2 x 16 x 8 (one head of d_k 8), W_1 b_1 W_3 b_3 W_2 b_2 at d_h = 21: 2 (16 x 21 + 21) + 21 x 16 + 16;
    // final_norm 16; out.b 11 (out.W is the table)
    CHECK(parameter_count(second) == 176 + 160 + 2 * (32 + 768 + 1066) + 16 + 11);  // 4095
}

// A header claiming the largest model the caps allow, and nothing after it, is refused before a value is read: the
// model it describes has more values than the bytes that follow.
TEST_CASE("checkpoint: a header too big for its file is refused before its values are read") {
    std::string header = "sorter-checkpoint 1\nvocab 101\nmax_len 32\nd_model 256\nn_heads 64\nd_ff 1024\n"
                         "enc_layers 8\ndec_layers 8\nnorm pre\npositions learned\nactivation relu\nembed_scale 1\n"
                         "task sort\nseq_len 32\nmin_len 32\nmax_digit 99\ntensors 171\ntensor embed.table 101 256\n";
    std::istringstream in(header);
    Kept saved;
    std::string message;
    try {
        read_kept(in, "--load big.txt", saved);
    } catch (const UsageError& e) {
        message = e.message;
    }
    CHECK(message == "--load big.txt line 17: the file ends early (truncated): this header describes 14781541 "
                     "values, and only 28 bytes follow");
}

// A checkpoint read from a pipe (cat m.txt | ./sorter --load /dev/stdin, or --load <(cat m.txt)) loads
// exactly as from the disk. A pipe cannot tell its length; before, the size probe left the stream failed
// and the reader said "the file ends early (truncated): tensor 'embed.table' is missing".
TEST_CASE("checkpoint: a model read from a real pipe is the model read from the file") {
    ModelConfig c;
    DataConfig d;
    Transformer model = small_trained_model(c, d);
    TempDir dir("pipe");
    save_kept(dir.file("m.txt"), model, Kept(d));
    const std::string text = read_all(dir.file("m.txt"));
    REQUIRE(mkfifo(dir.file("fifo").c_str(), 0600) == 0);
    pid_t writer = fork();
    if (writer == 0) {  // the child feeds the pipe, as cat would
        std::ofstream(dir.file("fifo"), std::ios::binary) << text;
        _exit(0);
    }
    Kept from_pipe, from_file;
    std::string error;
    try {
        Transformer piped = load_kept(dir.file("fifo"), from_pipe);
        Transformer filed = load_kept(dir.file("m.txt"), from_file);
        auto a = piped.parameters(), b = filed.parameters();
        REQUIRE(a.size() == b.size());
        for (std::size_t i = 0; i < a.size(); i++) CHECK(a[i].second->value.data == b[i].second->value.data);
        CHECK(from_pipe.state.batch_draws.state == from_file.state.batch_draws.state);
    } catch (const UsageError& e) {
        error = e.message;
    }
    int status = 0;
    waitpid(writer, &status, 0);
    CHECK(error == "");
}

// An optimizer's running means are checked as the tensors are: before, an Adam file with a negative
// second moment loaded, and training on from it blamed the learning rate for the nan that followed;
// first moments of 1e300 loaded, and the run saved weights near 1e298 with exit status 0.
TEST_CASE("checkpoint: corrupt optimizer state is refused at load, with its line") {
    DataConfig d = few_digits();
    Transformer model(small_model(d), 2);
    Dataset data(d, {}, 20, 5);
    TrainConfig adam;
    adam.optimizer = OptimizerKind::adam;
    Kept saved(d, adam, 1);
    for (long step = 1; step <= 3; step++) train_step(model, data, adam, saved.state, 3);
    const std::string good = checkpoint_text(model, saved);
    REQUIRE(load_error(good) == "");
    auto changed = [&](const std::string& line_start, const std::string& value) {  // the first value after line_start
        std::size_t at = good.find("\n" + line_start + "\n");
        REQUIRE(at != std::string::npos);
        std::size_t row = at + line_start.size() + 2, end = good.find(' ', row);
        return good.substr(0, row) + value + good.substr(end);
    };
    CHECK(contains(load_error(changed("s embed.table", "-1")),
                   "s of 'embed.table' value 0: -1 is negative: a second moment is a running mean of squares"));
    CHECK(contains(load_error(changed("m encoder.0.norm1.gamma", "1e300")),
                   "m of 'encoder.0.norm1.gamma' value 0: 1e300 is beyond 1e+100 in size"));
    CHECK(contains(load_error(changed("m encoder.0.norm1.gamma", "7")), "(Adam keeps m^2 <= 3.00 s)"));
    CHECK(contains(load_error(replace_once(good, "\nm embed.table", "\nend\nm embed.table")),
                   "the optimizer's running means are missing: after 3 updates, Adam keeps 'm' and 's' for every "
                   "tensor, from 'm embed.table' on"));
    CHECK(contains(load_error(replace_once(good, "optimizer adam", "optimizer")), "'optimizer' has no value"));
    CHECK(contains(load_error(replace_once(good, "d_model 8", "d_model")), "line 4: 'd_model' has no value"));
    model.out.b.value.at(0, 0) = 2e100;  // a diverged model is not written: it could not be read back
    TempDir dir("beyond");
    std::string error;
    try {
        save_kept(dir.file("m.txt"), model, saved);
    } catch (const UsageError& e) {
        error = e.message;
    }
    CHECK(contains(error, "tensor 'out.b' holds a value beyond 1e+100 (training diverged); not saved"));
    CHECK(dir.listing().empty());
}

// A new setting is one row of a table, with the version that first writes it; the newest version is the newest
// row's (7: --attention, no_bias, bits), so a file of a later version is refused, not read as lacking that row.
// A model of the 2017 paper's blocks writes version 5, without version 6's lines; one of today's, version 6's lines
// (the bytes as before version 7 came); one without biases, or one that attends in tiles, every line.
TEST_CASE("checkpoint: the version written is the newest row's") {
    CHECK(newest_version() >= LORA_VERSION);  // 9: a fine-tuned model's first data; 10: a LoRA run under way (ch. 12)
    ModelConfig c;
    DataConfig d;
    Transformer model = small_trained_model(c, d);
    const std::string text = checkpoint_text(model, Kept(d));
    CHECK(text.rfind("sorter-checkpoint 5\n", 0) == 0);  // the 2017 paper's blocks: the file as before today's came
    for (const auto* table : {&header_table(), &training_table()})
        for (const SettingRow& row : *table) CHECK(contains(text, "\n" + row.name + " ") == (row.version <= 5));
    c.rms_norm = true;  // one of today's blocks: version 6, and every row of 6
    Transformer todays(c, 3);
    const std::string todays_text = checkpoint_text(todays, Kept(d));
    CHECK(todays_text.rfind("sorter-checkpoint 6\n", 0) == 0);
    for (const auto* table : {&header_table(), &training_table()})
        for (const SettingRow& row : *table) CHECK(contains(todays_text, "\n" + row.name + " ") == (row.version <= 6));
    c.no_bias = true;  // Llama's: version 7, and every row
    Transformer bias_free(c, 3);
    const std::string newest_text = checkpoint_text(bias_free, Kept(d));
    CHECK(newest_text.rfind("sorter-checkpoint 7\n", 0) == 0);
    CHECK(contains(newest_text, "\nno_bias 1\n"));
    CHECK(!contains(newest_text, "\ntensor out.b "));
    for (const auto* table : {&header_table(), &training_table()})
        for (const SettingRow& row : *table) CHECK(contains(newest_text, "\n" + row.name + " ") == (row.version <= 7));
    c.no_bias = false;
    c.attention = Attention::flash;  // in tiles: version 7, and every row
    Transformer tiled(c, 3);
    const std::string tiled_text = checkpoint_text(tiled, Kept(d));
    CHECK(tiled_text.rfind("sorter-checkpoint 7\n", 0) == 0);
    CHECK(contains(tiled_text, "\nattention flash\n"));
    for (const auto* table : {&header_table(), &training_table()})
        for (const SettingRow& row : *table) CHECK(contains(tiled_text, "\n" + row.name + " ") == (row.version <= 7));
    Kept kept(d);
    std::istringstream in(tiled_text);
    CHECK(read_kept(in, "--load model.txt", kept).config.attention == Attention::flash);
    c.attention = Attention::plain;
    c.experts = 3, c.shared_experts = 1, c.balance = 0.25;  // a mixture of experts (chapter 11): version 8, every row
    Transformer experts(c, 3);
    const std::string experts_text = checkpoint_text(experts, Kept(d));
    CHECK(experts_text.rfind("sorter-checkpoint 8\n", 0) == 0);
    CHECK(contains(experts_text, "\nexperts 3\ntop_k 2\nshared_experts 1\nbalance 0.25\n"));
    CHECK(contains(experts_text, "\ntensor decoder.0.ffn.router.W 8 3\n"));
    for (const auto* table : {&header_table(), &training_table()})
        for (const SettingRow& row : *table) CHECK(contains(experts_text, "\n" + row.name + " ") == (row.version <= 8));
}

// A model with experts round-trips bit for bit (its logits and its file), and its header is checked: K above E, and a
// file of version 7 naming a line of version 8, are refused.
TEST_CASE("checkpoint: a mixture of experts, version 8, round-trips") {
    for (int K : {1, 2}) {
        ModelConfig c;
        DataConfig d;
        small_trained_model(c, d);
        c.experts = 4, c.top_k_asked = K, c.shared_experts = K - 1, c.activation = Activation::swiglu;
        Transformer model(c, 5);
        TempDir dir("experts");
        std::string path = dir.file("model.txt");
        save_kept(path, model, Kept{d});
        const std::string text = read_all(path);
        Kept saved;
        Transformer loaded = load_kept(path, saved);
        CHECK((loaded.config.experts == 4 && loaded.config.top_k() == K && loaded.config.shared_experts == K - 1));
        Rng rng(12);
        for (int n = 0; n < 5; n++) {
            Example e = make_example(random_digits(rng, d), d);
            Matrix la = model.forward({e.source}, {e.target_in}), lb = loaded.forward({e.source}, {e.target_in});
            CHECK(std::memcmp(la.data.data(), lb.data.data(), la.data.size() * sizeof(double)) == 0);
        }
        std::string again = dir.file("again.txt");
        save_kept(again, loaded, Kept{saved.data});
        CHECK(read_all(again) == text);
        CHECK(contains(load_error(replace_once(text, "top_k " + std::to_string(K), "top_k 5")),
                       "top_k 5 with experts 4: a token keeps K of the E experts"));
        CHECK(contains(load_error(replace_once(text, "sorter-checkpoint 8", "sorter-checkpoint 7")),
                       "the line 'experts' came in version 8, and this file says version 7"));
    }
}
