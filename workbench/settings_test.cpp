// workbench/settings_test.cpp -- the one check of a model's settings (settings.hpp): each problem it finds and a
// neighbour without one, and the same problem as the flags, the checkpoint reader and the page say it.
#include "test_runs.hpp"
#include "web.hpp"

// The checks between a model's settings are one function (settings_problem), which names the settings that
// disagree and says why; the flags, the checkpoint reader and the page each name them in their own words: the flags
// that set them, or the header's lines after the file's name. Each problem, and a neighbour that has none.
TEST_CASE("settings: one check, said by the flags, the checkpoint reader and the page") {
    auto problem = [](auto change) {
        ModelConfig c;  // d_model 16, n_heads 2, encoder-decoder with 1 + 1 layers
        change(c);
        return settings_problem(c);
    };
    using Names = std::vector<std::string>;
    CHECK(problem([](ModelConfig&) {}).settings.empty());
    SettingsProblem heads = problem([](ModelConfig& c) { c.n_heads = 3; });
    CHECK(heads.settings == Names{"n_heads", "d_model"});
    CHECK(heads.why == "d_model must be a multiple of the number of heads");
    CHECK(problem([](ModelConfig& c) { c.n_heads = 4; }).settings.empty());
    SettingsProblem kv = problem([](ModelConfig& c) { c.n_heads = 4, c.kv_heads_asked = 3; });
    CHECK(kv.settings == Names{"kv_heads", "n_heads"});
    CHECK(contains(kv.why, "so it must divide the heads"));
    CHECK(problem([](ModelConfig& c) { c.n_heads = 4, c.kv_heads_asked = 2; }).settings.empty());
    SettingsProblem rope = problem([](ModelConfig& c) { c.positions = Positions::rope, c.d_model = 6; });
    CHECK(rope.settings == Names{"positions", "d_model", "n_heads"});
    CHECK(contains(rope.why, "d_k = d_model / n_heads = 6 / 2 = 3 is odd; choose an even d_k"));
    CHECK(problem([](ModelConfig& c) { c.positions = Positions::rope, c.d_model = 8; }).settings.empty());
    CHECK(problem([](ModelConfig& c) { c.positions = Positions::alibi, c.d_model = 6; }).settings.empty());
    SettingsProblem encoder = problem([](ModelConfig& c) { c.arch = Arch::decoder_only; });  // enc_layers 1
    CHECK(encoder.settings == Names{"enc_layers", "arch"});
    CHECK(encoder.why == "a decoder-only model has none, an encoder-decoder at least 1");
    CHECK(problem([](ModelConfig& c) { c.enc_layers = 0; }).settings == encoder.settings);
    CHECK(problem([](ModelConfig& c) { c.arch = Arch::decoder_only, c.enc_layers = 0; }).settings.empty());

    // The flags (--arch decoder-only sets enc_layers 0, and --enc-layers is at least 1: no flags give the last)
    CHECK(parse_error({"--heads", "3"}) == "--heads 3 with --d-model 16: " + heads.why);
    CHECK(parse_error({"--heads", "4", "--kv-heads", "3"}) == "--kv-heads 3 with --heads 4: " + kv.why);
    CHECK(parse_error({"--pos", "rope", "--d-model", "6"}) == "--pos rope with --d-model 6, --heads 2: " + rope.why);
    // The checkpoint reader: the header's lines, after the file's name
    DataConfig d = few_digits();
    Transformer model(small_model(d), 1);  // d_model 8, n_heads 2, 1 + 1 layers (the rest: checkpoint_test.cpp)
    const std::string text = checkpoint_text(model, Kept(d));
    CHECK(load_error(replace_once(text, "n_heads 2", "n_heads 3")) ==
          "--load model.txt header: n_heads 3 with d_model 8: " + heads.why);
    CHECK(contains(load_error(replace_once(text, "enc_layers 1", "enc_layers 0")),
                   " header: enc_layers 0 with arch encoder-decoder: " + encoder.why));
    // The page: its flags, and its checkpoint text
    Lab lab;
    CHECK(contains(web_answer(lab, "start", "--heads 3", 0), json_text("--heads 3 with --d-model 16: " + heads.why)));
    CHECK(contains(web_answer(lab, "load", "m.txt\n\n" + replace_once(text, "n_heads 2", "n_heads 3"), 0),
                   json_text("the checkpoint header: n_heads 3 with d_model 8: " + heads.why)));
}

// The schedules' questions agree with scheduled_lr itself: only linear's rate at a step moves when the run is planned
// longer (step 5 of 10 and of 20), and only warmup's moves with --warmup.
TEST_CASE("settings: what each schedule reads, as scheduled_lr computes it") {
    for (Schedule s : {Schedule::constant, Schedule::linear, Schedule::warmup}) {
        INFO(SCHEDULE_NAMES[int(s)]);
        CHECK(rate_follows_the_plan(s) == (scheduled_lr(s, 0.2, 5, 10, 3) != scheduled_lr(s, 0.2, 5, 20, 3)));
        CHECK(reads_warmup(s) == (scheduled_lr(s, 0.2, 5, 10, 3) != scheduled_lr(s, 0.2, 5, 10, 8)));
    }
    CHECK(rate_follows_the_plan(Schedule::linear));
    CHECK(reads_warmup(Schedule::warmup));
}

// The model fits the data: one token a digit and PAD and START; the positions one input reads, twice as many when
// source and answer are one sequence (decoder-only). The default model is the default data's as it stands, which
// tests.cpp's default_model takes.
TEST_CASE("settings: fit_to_data, the model's vocab and max_len from the data") {
    const ModelConfig as_built = fit_to_data(ModelConfig(), DataConfig());
    CHECK(as_built.vocab == ModelConfig().vocab);
    CHECK(as_built.max_len == ModelConfig().max_len);
    DataConfig d;
    d.max_digit = 5, d.seq_len = 7;
    ModelConfig c;
    CHECK(fit_to_data(c, d).vocab == 7);  // PAD, 1 .. 5, START
    CHECK(fit_to_data(c, d).max_len == 7);
    c.arch = Arch::decoder_only;
    CHECK(fit_to_data(c, d).max_len == 14);
}
