// workbench/speed_test.cpp -- tests of speed.hpp: the FLOP count --speed and --bench print.
#include "test_helpers.hpp"
#include "speed.hpp"

// The FLOPs of a forward pass are read from the built model's weights and the rows through them: two models
// counted by hand, 2 m n k a product of (m, k) by (k, n).
TEST_CASE("speed: the FLOPs of a forward pass, from the model's weights, against two counts by hand") {
    DataConfig d;  // seq_len 5: S = T = 5
    ModelConfig paper;  // d_model 16, n_heads 2 (d_k 8), d_ff 32, vocab 11, 1 + 1 layers
    // an attention over Lq queries and Lk keys: W_q, W_o 2 x 2 Lq 16 16, W_k, W_v 2 x 2 Lk 16 16, Q K^T and P V in
    // 2 heads 2 x 2 x 2 Lq Lk 8: 11840 at 5 and 5; a feed-forward 2 x 2 x 5 x 16 x 32 = 10240; the logits 2 x 5 x 16
    // x 11 = 1760. The encoder's block, the decoder's (self- and cross-attention), the logits:
    CHECK(matmul_flops_forward(paper, d) == (11840 + 10240) + (11840 + 11840 + 10240) + 1760);  // 57760
    d.seq_len = d.min_len = 4;
    ModelConfig todays = paper;  // decoder-only over L = S + T = 8 rows, SwiGLU (d_h 21), 1 key-value head, tied
    todays.arch = Arch::decoder_only, todays.enc_layers = 0, todays.activation = Activation::swiglu;
    todays.kv_heads_asked = 1, todays.tie_embeddings = true;
    // W_q, W_o 2 x 2 x 8 x 16 x 16 = 8192; W_k, W_v (16, 8) 2 x 2 x 8 x 16 x 8 = 4096; Q K^T, P V 2 x 2 x 2 x 8 x 8
    // x 8 = 4096; W_1, W_3, W_2 3 x 2 x 8 x 16 x 21 = 16128; the logits of the T = 4 answer rows, by the table
    // transposed, 2 x 4 x 16 x 11 = 1408
    CHECK(matmul_flops_forward(todays, d) == 8192 + 4096 + 4096 + 16128 + 1408);  // 33920
}

// --speed and --step-cost time the model --load names, at its own batch and size (before, they timed the default
// float model whatever --load said, even a file that was not there), and refuse a missing file and a quantized model
// as every --load does.
#include "test_runs.hpp"

TEST_CASE("speed: --speed and --step-cost time the --load file's model; a missing file is refused") {
    for (const char* flag : {"--speed", "--step-cost"}) {
        CHECK(run_error({flag, "--load", "/nonexistent/m.txt"}) ==
              "--load /nonexistent/m.txt: cannot open the file (No such file or directory)");
    }
    TempDir dir("speed-load");
    ModelConfig c;
    DataConfig d;
    Transformer model = small_trained_model(c, d);
    TrainConfig t;
    t.batch = 5;
    const std::string m = dir.file("m.txt"), q = dir.file("q.txt");
    save_kept(m, model, Kept(d, t));
    const std::string size = "d_model 8, heads 2, d_ff 12, layers 2+1, seq_len 4, batch 5, 1 thread";
    CHECK(contains(run_output({"--step-cost", "--load", m, "--threads", "1"}),
                   "sorter --step-cost: attention plain, " + size + ": a step in "));
    const std::string speed = run_output({"--speed", "--load", m, "--threads", "1"});
    CHECK(contains(speed, "training examples/s (" + size + "; "));
    CHECK(contains(speed, "one held-out evaluation (774 sequences, greedy, 1 thread)"));  // its data's held-out set
    printed_by([&] { quantize_model(model, 8); });
    save_kept(q, model, Kept(d, t));
    CHECK(run_error({"--speed", "--load", q}) == "--load " + cannot_train_text(q, 8));
}
