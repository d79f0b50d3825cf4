// workbench/memory_test.cpp -- tests of memory.hpp: the parameters counted from the settings, and the one check of a
// training step's memory, for a new model and a loaded one (main.cpp's build_or_load), plain and in tiles.
#include "test_helpers.hpp"
#include "memory.hpp"
#include "test_runs.hpp"

// The count from the settings is the model's own, for every kind of block.
TEST_CASE("memory: the parameters counted from the settings are the model's") {
    DataConfig d;
    const ModelConfig base = fit_to_data(ModelConfig(), d);
    std::vector<ModelConfig> configs(15, base);
    configs[1].positions = Positions::learned;
    configs[2].activation = Activation::swiglu;
    configs[3].no_bias = true;
    configs[4].tie_embeddings = true;
    configs[5].rms_norm = true;
    configs[6].arch = Arch::decoder_only, configs[6].enc_layers = 0, configs[6].max_len = 10;
    configs[7].n_heads = 4, configs[7].kv_heads_asked = 2;
    configs[8].d_model = 24, configs[8].n_heads = 3, configs[8].d_ff = 50, configs[8].enc_layers = 3;
    configs[9].activation = Activation::swiglu, configs[9].no_bias = true, configs[9].d_ff = 21;
    configs[10] = configs[6], configs[10].activation = Activation::gelu, configs[10].positions = Positions::learned;
    configs[11].attention = Attention::flash, configs[11].positions = Positions::rope;
    configs[12].experts = 4;  // chapter 11: E experts and a router; shared ones; of each kind
    configs[13].experts = 3, configs[13].shared_experts = 2, configs[13].activation = Activation::swiglu;
    configs[14] = configs[6], configs[14].experts = 5, configs[14].top_k_asked = 1, configs[14].no_bias = true;
    for (const ModelConfig& c : configs) {
        Transformer model(c, 1);
        CHECK(parameter_values(c) == double(parameter_count(model)));
    }
}

// A step's count grows with the batch; plain attention's weights as T x T, tiles' not; Adam keeps two running means.
TEST_CASE("memory: a step's count grows as its parts do") {
    Options o = parse_options(std::vector<std::string>{"--arch", "decoder-only", "--task", "copy", "--seq-len", "256"});
    TrainConfig big = o.train;
    big.batch *= 2;
    const StepMemory one = step_memory(o.model, o.data, o.train, 1), two = step_memory(o.model, o.data, big, 1);
    CHECK(two.activations > 1.9 * one.activations);
    CHECK(two.attention > 1.8 * one.attention);  // (each thread's matrices at work stay as they were)
    CHECK(two.weights == one.weights);
    ModelConfig tiles = o.model;
    tiles.attention = Attention::flash;
    CHECK(step_memory(tiles, o.data, o.train, 1).attention < one.attention / 100);
    TrainConfig adam = o.train;
    adam.optimizer = OptimizerKind::adam;
    CHECK(step_memory(o.model, o.data, adam, 1).weights - one.weights == 8 * 2 * parameter_values(o.model));
}

// A new model: a step that would need more than MAX_STEP_BYTES is refused as the flags are read, naming its size, what
// holds most of it and the flags that bring it within; the ways out it names are accepted. Before, only plain
// attention's weights were counted: --attention flash (its own advice) lifted the one check, and a step at the caps
// grew until std::bad_alloc.
TEST_CASE("memory: a new model's step too large to fit is refused, with its size and the flags that fit it") {
    CHECK(parse_error({"--seq-len", "512", "--batch", "1024", "--threads", "1"}) ==
          "--seq-len 512 with --batch 1024: a training step would need about 18.0 GB (12.9 GB of it every head's "
          "attention weights, kept for the backward), above the 4 GB a run may take; train with --attention flash and "
          "--batch 866, or with --batch 222 (the largest that fits)");
    CHECK(parse_error({"--seq-len", "512", "--batch", "866", "--attention", "flash", "--threads", "1"}).empty());
    CHECK(parse_error({"--seq-len", "512", "--batch", "222", "--threads", "1"}).empty());
    const std::vector<std::string> caps = {"--d-model", "256", "--heads", "64", "--d-ff", "1024", "--enc-layers", "8",
                                           "--dec-layers", "8", "--seq-len", "512", "--batch", "1024",
                                           "--attention", "flash", "--threads", "1"};
    CHECK(parse_error(caps) == "--seq-len 512 with --batch 1024: a training step would need about 467.2 GB (444.7 GB "
                               "of it the activations the blocks keep for the backward), above the 4 GB a run may "
                               "take; train with --batch 8 (the largest that fits)");
    std::vector<std::string> longer = {"--d-model", "256", "--heads", "64", "--d-ff", "1024", "--dec-layers", "8",
                                       "--seq-len", "512", "--batch", "1024", "--arch", "decoder-only", "--threads",
                                       "1"};  // plain, decoder-only: 1024 rows a sequence, and no batch fits
    CHECK(parse_error(longer) == "--seq-len 512 with --batch 1024: a training step would need about 5010.7 GB (4398.1 "
                                 "GB of it every head's attention weights, kept for the backward), above the 4 GB a "
                                 "run may take; train with --attention flash and --batch 9");
    const std::vector<std::string> attention = {"--arch", "decoder-only", "--task", "copy", "--seq-len", "512",
                                                "--heads", "8", "--d-model", "64", "--dec-layers", "2", "--batch", "64",
                                                "--threads", "1"};
    CHECK(parse_error(attention) == "--seq-len 512 with --batch 64: a training step would need about 10.5 GB (8.62 GB "
                                    "of it every head's attention weights, kept for the backward), above the 4 GB a "
                                    "run may take; train with --attention flash (in tiles: about 1.53 GB), or with "
                                    "--batch 23 (the largest that fits)");
    for (const char* flag : {"--speed", "--step-cost"}) {  // they train too
        std::vector<std::string> timed = attention;
        timed.push_back(flag);
        CHECK(contains(parse_error(timed), "a training step would need about 10.5 GB"));
    }
    std::vector<std::string> scored = attention;  // no step: nothing to refuse
    scored.insert(scored.end(), {"--steps", "0"});
    CHECK(parse_error(scored).empty());
    CHECK(parse_error({"--d-model", "256", "--heads", "64", "--d-ff", "1024", "--enc-layers", "8", "--dec-layers", "8",
                       "--seq-len", "32", "--batch", "16"}).empty());  // docs/performance.md's largest
}

// A loaded model: its checkpoint fixes the batch and the attention, and its step is checked as a new model's, before
// training allocates it (and for --speed and --step-cost). Before, --load of a file that --steps 0 --save wrote at
// --seq-len 512 --batch 1024 trained until std::bad_alloc after 46 s. It is still scored and sorts.
TEST_CASE("memory: a loaded model's step too large to fit is refused before it trains; it still sorts") {
    TempDir dir("memory-load");
    DataConfig d;
    d.seq_len = d.min_len = 512;
    TrainConfig t;
    t.batch = 1024;
    ModelConfig c = fit_to_data(ModelConfig(), d);
    Transformer model(c, 1);
    const std::string m = dir.file("m.txt");
    save_kept(m, model, Kept(d, t));
    const std::string refused = "--load " + m + ": a training step of this model (batch 1024, seq_len 512, attention "
                                "plain) would need about 18.0 GB (12.9 GB of it every head's attention weights, kept "
                                "for the backward), above the 4 GB a run may take; its checkpoint fixes the batch and "
                                "the attention, so it cannot train here: without --steps it is still scored and sorts; "
                                "or train a new model with --attention flash and --batch 866, or with --batch 222 (the "
                                "largest that fits)";
    for (const std::vector<std::string>& args : {std::vector<std::string>{"--load", m, "--steps", "1"},
                                                 {"--load", m, "--speed"}, {"--load", m, "--step-cost"}}) {
        std::vector<std::string> one_thread = args;
        one_thread.insert(one_thread.end(), {"--threads", "1"});
        CHECK(run_error(one_thread) == refused);
    }
    std::vector<int> digits(512, 3);
    std::vector<std::string> sort = {"--load", m, "--sort"};
    for (int digit : digits) sort.push_back(std::to_string(digit));
    CHECK(contains(run_output(sort), "input  [3, 3, 3"));
}
