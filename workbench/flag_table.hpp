// workbench/flag_table.hpp -- every flag of the command line in one table (its value, its help, how it is read and
// said back, what --load allows), and --help made from it.
//
// Sections: the table (flag_table), one row a flag in the groups of --help (Options, the caps and the kinds of row are
// flags.hpp's); find_flag; --help. Reading a command line and the checks between flags are options.hpp's.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "flags.hpp"

inline std::string default_lr_text() {  // "0.2; 0.02 with momentum, 0.001 with adam": each optimizer's row
    std::string text = fmt("%g", OPTIMIZERS[0].default_lr);
    for (std::size_t k = 1; k < OPTIMIZERS.size(); k++)
        text += fmt("%s%g with %s", k == 1 ? "; " : ", ", OPTIMIZERS[k].default_lr, OPTIMIZERS[k].name.c_str());
    return text;
}
inline const std::vector<FlagGroup>& flag_table() {  // every flag, in the groups of --help
    using O = Options; using M = ModelConfig; using D = DataConfig; using R = TrainConfig;  // short: rows fit
    using B = DecodeConfig;
    static const std::vector<FlagGroup> table = {
        {"Model", "./sorter --d-model 32 --heads 4 --d-ff 64 --enc-layers 2 --dec-layers 2", false, {
            whole_flag("--d-model", "width of every token vector", 1, MAX_D_MODEL, true, &M::d_model),
            whole_flag("--heads", "attention heads; must divide d_model", 1, MAX_HEADS, true, &M::n_heads),
            whole_flag("--d-ff", "hidden width of the feed-forward layers", 1, MAX_D_FF, true, &M::d_ff),
            whole_flag("--enc-layers", "encoder blocks", 1, MAX_LAYERS, true, &M::enc_layers),
            whole_flag("--dec-layers", "decoder blocks (decoder-only: the blocks of its one stack)", 1, MAX_LAYERS,
                       true, &M::dec_layers),
            choice_flag("--arch", "encoder-decoder: the 2017 paper's; decoder-only: GPT's and Llama's, one causal "
                        "stack of --dec-layers blocks (no cross-attention, no encoder) reads the source, START and the "
                        "answer as one sequence, and the loss counts the answer", ARCH_NAMES, true, &M::arch)}},
        {"Data", "./sorter --task reverse --seq-len 6 --min-len 3", true, {
            fine_tuning(choice_flag("--task", "what the output is; with --load, the task to fine-tune it on (or score "
                        "it on)", TASK_NAMES, true, &D::task)),
            fine_tuning(whole_flag("--seq-len", "longest input, S = T; with --load, fine-tuning's", 1, MAX_SEQ_LEN,
                                   true, &D::seq_len)),
            fine_tuning({"--min-len", "N", "shortest input (default: seq-len); below seq-len inputs vary in length, "
             "padded with PAD, which the source padding mask hides from attention; with --load, fine-tuning's", true,
             [](O& o, Args& a) { o.data.min_len = int(a.whole(1, MAX_SEQ_LEN)); },
             [](const O& o) { return o.data.min_len == o.data.seq_len ? "" : fmt("--min-len %d", o.data.min_len); }}),
            whole_flag("--max-digit", "digits are 1..N, so vocab = N + 2", 1, MAX_DIGIT, true, &D::max_digit),
            checked_by_checkpoint(path_flag("--train-data", "FILE", "train on the sequences in FILE (one a line, "
                "digits separated by spaces; blank lines and lines starting with # are skipped); with --load, the "
                "file that model trained on, whose fingerprint its checkpoint keeps", true, &O::train_data_path))}},
        {"Training", "./sorter --steps 3000 --batch 16 --optimizer adam --schedule warmup --warmup 200", false, {
            whole_flag("--steps", "training steps; 0 trains nothing; with --load, that many more from where the "
                       "checkpoint stopped; Ctrl-C (or kill, or a closed terminal) stops after the current step and "
                       "writes what was asked for", 0, MAX_STEPS, false, &R::steps),
            whole_flag("--batch", "examples per step", 1, MAX_BATCH, true, &R::batch),
            fine_tuning({"--lr", "X", fmt("learning rate, above 0 and at most %g (default %s); with --load, a "
             "fine-tuning run's (--lora, --task, --seq-len, --min-len)", MAX_LR, default_lr_text().c_str()),
             true, [](O& o, Args& a) { o.train.lr = a.above_zero(MAX_LR); },
             [](const O& o) { return fmt("--lr %g", o.train.lr); }}),
            choice_flag("--optimizer", "how a step moves the weights, as train.hpp writes out", OPTIMIZER_NAMES, true,
                        &R::optimizer),
            choice_flag("--schedule", "the learning rate over the steps: constant; linear decay towards 0; warmup: up "
                        "for --warmup steps, then down as 1/sqrt(step)", SCHEDULE_NAMES, true, &R::schedule),
            whole_flag("--warmup", "steps of the warmup schedule's rise", 1, MAX_STEPS, true, &R::warmup),
            whole_flag("--seed", "seed for the weights and the training draws", 0, MAX_SEED, true, &O::seed),
            whole_flag("--eval-every", "steps between held-out evaluations", 1, MAX_STEPS, false, &O::eval_every),
            scoring(whole_flag("--test-len", "after training (or with --load), held-out exact-match for every length "
                       "from 1 to N; N may pass --seq-len (the position table is made that long); 0: none", 0,
                       MAX_SEQ_LEN, false, &O::test_len)),
            path_flag("--dump-step", "FILE", "write the first step (weights, batch, logits, loss) to FILE, for "
                      "make reference; with --load and --lora (or --adapters), the adapters and the next two "
                      "steps' batches too", true, &O::dump_step_path)}},
        {"Variants for the exercises", "./sorter --norm post --pos learned --act gelu", true, {
            choice_flag("--norm", "LayerNorm before each sublayer, or after the residual sum", NORM_PLACE_NAMES, true,
                        &M::norm_place),
            choice_flag("--pos", "positional encoding; random: sinusoidal rows drawn in order from " +
                        std::to_string(RANDOM_POSITION_SPAN) + " x the longest input (Ruoss et al. 2023); rope: "
                        "rotary, queries and keys turned by position in self-attention (Su et al. 2021); alibi: "
                        "self-attention scores lowered by distance, a slope a head (Press et al. 2022)",
                        POSITION_NAMES, true, &M::positions),
            choice_flag("--act", "feed-forward activation; swiglu: silu(x W_1 + b_1) * (x W_3 + b_3), then W_2, "
                        "hidden width 2 d_ff / 3 so the parameters stay about as many (Shazeer 2020)", ACTIVATION_NAMES,
                        true, &M::activation),
            switch_flag("--rmsnorm", "RMSNorm in place of every LayerNorm: no mean taken out, no beta (Zhang & "
                        "Sennrich 2019)", true, true, &M::rms_norm),
            {"--llama", "", "Llama's recipe in one flag: --arch decoder-only --rmsnorm --act swiglu --pos rope "
             "--no-bias --no-embed-scale, and --kv-heads half of --heads (all of them when --heads is odd); "
             "--dec-layers still sets the blocks (default 1); --arch, --rmsnorm, --act, --pos and --kv-heads after it "
             "change the recipe, and before it are refused. The rotary base is 10000 (Llama 2's; Llama 3's is "
             "500000)", true,
             [](O& o, Args& a) {
                 for (int k = 1; k < a.i; k++)  // the recipe would override it unseen
                     for (std::string set : {"--arch", "--rmsnorm", "--act", "--pos", "--kv-heads"})
                         if (a.argv[k] == set)
                             fail(set + " comes before --llama, which sets it too: give " + set + " after --llama to "
                                  "change the recipe");
                 o.model.arch = Arch::decoder_only, o.model.rms_norm = true, o.model.activation = Activation::swiglu;
                 o.model.positions = Positions::rope, o.model.no_bias = true, o.model.embed_scale = false;
                 o.llama = true;
             },
             [](const O&) { return std::string(); }},  // the variant line names what it set
            {"--kv-heads", "N", "grouped-query attention: N key-value heads, each shared by heads / N query heads; "
             "N must divide --heads; 1 is multi-query attention (default: --heads, multi-head attention)", true,
             [](O& o, Args& a) { o.model.kv_heads_asked = int(a.whole(1, MAX_HEADS)); },
             [](const O& o) { return o.model.kv_heads_asked == 0 ? "" : fmt("--kv-heads %d", o.model.kv_heads_asked); }},
            choice_flag("--attention", "how training computes attention; flash: tile by tile, keeping no (T, S) "
                        "matrix, the same numbers within rounding in memory that grows as T, not T^2 (FlashAttention-2, "
                        "Dao 2023; model.hpp's section); maps and decoding stay plain", ATTENTION_NAMES, true,
                        &M::attention),
            whole_flag("--experts", "a mixture of experts: each feed-forward becomes E of the same kind and a router "
                       "that sends each token to --top-k of them (chapter 11; Shazeer et al. 2017); 0: one "
                       "feed-forward", 0, MAX_EXPERTS, true, &M::experts),
            {"--top-k", "N", std::string("experts kept a token, from 1 to --experts; their weights are a softmax over the K "
             "kept scores (Mixtral's rule; with K = 1 the router learns from the balance loss alone) (default: 2, "
             "or 1 with --experts 1)"), true,
             [](O& o, Args& a) { o.model.top_k_asked = int(a.whole(1, MAX_EXPERTS)); },
             [](const O& o) { return o.model.top_k_asked == 0 ? "" : fmt("--top-k %d", o.model.top_k_asked); }},
            whole_flag("--shared-experts", "experts every token goes through besides its K, weight 1 (DeepSeekMoE, "
                       "Dai et al. 2024); needs --experts", 0, MAX_SHARED_EXPERTS, true, &M::shared_experts),
            number_flag("--balance", "the experts' load-balancing loss weight alpha in alpha E sum_i f_i P_i (Switch "
                        "Transformer, Fedus et al. 2021); reported apart from the task's loss; 0: none; needs "
                        "--experts", 0, MAX_BALANCE, true, &M::balance),
            switch_flag("--no-embed-scale", "do not multiply embeddings by sqrt(d_model)", true, false,
                        &M::embed_scale),
            switch_flag("--no-bias", "no bias in the feed-forward layers and the output projection, as Llama "
                        "(attention's projections have none either way)", true, true, &M::no_bias),
            switch_flag("--tie-embeddings", "the output projection is the embedding table, transposed (the paper's "
                        "section 3.4): one matrix of vocab x d_model fewer", true, true, &M::tie_embeddings)}},
        {"Regularisation (each 0, off, by default)", "./sorter --train-data docs/train-200.txt --dropout 0.1 "
         "--weight-decay 0.003", true, {
            number_flag("--dropout", "in training, zero each entry of the embeddings and of every sublayer's output "
                        "with chance X, scaling the rest by 1 / (1 - X) (the paper: 0.1)", 0, MAX_FRACTION, true,
                        &M::dropout),
            number_flag("--attn-dropout", "in training, the same on the attention weights; maps show them before "
                        "it", 0, MAX_FRACTION, true, &M::attn_dropout),
            number_flag("--label-smoothing", "aim at (1 - X) on the true token and X / vocab on every token, not "
                        "at certainty; the table still shows the plain cross-entropy", 0, MAX_FRACTION, true,
                        &R::label_smoothing),
            number_flag("--clip", "scale the gradients down when their global norm is above X", 0, MAX_CLIP, true,
                        &R::clip),
            number_flag("--weight-decay", "shrink every matrix by 1 - lr X a step (decoupled, as AdamW), biases and "
                        "LayerNorm spared; keep lr X small: with SGD's lr 0.2, 0.003", 0, MAX_WEIGHT_DECAY, true,
                        &R::weight_decay)}},
        {"Decoding (evaluation and --sort; with --load too)", "./sorter --load model.txt --beam 4 --sort 5 3 9 1 1",
         false, {
            whole_flag("--beam", "beam search: keep the N likeliest outputs of each input at every step; 1 is "
                       "greedy decoding; --sort prints all N with their log-probabilities", 1, MAX_BEAM, false,
                       &B::beam),
            number_flag("--length-penalty", "beam search ranks log P / ((5 + length) / 6)^X, length counted up to "
                        "the first PAD (GNMT's penalty, the paper's 0.6)", 0, MAX_LENGTH_PENALTY, false,
                        &B::length_penalty)}},
        {"Seeing inside", "./sorter --steps 1500 --show-attention --svg /tmp", false, {
            switch_flag("--show-attention", "after training (or with --load), every head of every attention layer "
                        "as a terminal heatmap: rows = queries, columns = keys", false, true, &O::show_attention),
            switch_flag("--numbers", "print the numbers below each terminal heatmap", false, true, &O::numbers),
            scoring(switch_flag("--inspect", "after training (or with --load): held-out exact-match with each head "
                        "switched off, and how often cross-attention points at the digit being written", false, true,
                        &O::inspect)),
            switch_flag("--show-pe", "the positional-encoding table as a heatmap, then stop (no training)", false,
                        true, &O::show_pe),
            switch_flag("--trace-shapes", "the shape of every tensor on one forward pass, then stop", false, true,
                        &O::trace_shapes),
            switch_flag("--params", "parameter count per block and in total, then stop", false, true, &O::params),
            path_flag("--svg", "DIR",
                      "write " + ATTENTION_SVG + ", " + POSITIONS_SVG + " and " + TRAINING_SVG + " into DIR (with "
                      "--experts, " + EXPERTS_SVG + " too)", false,
                      &O::svg_dir),
            scoring(path_flag("--report", "FILE", "after training (or with --load), write one HTML page of the run "
                      "to FILE: curves, gradient flow, attention, a decoding replay, the positions, the mistakes",
                      false, &O::report_path)),
            {"--demo", join(DEMO_NAMES, "|"), demos_help() + " (no training)", false,
             [](O& o, Args& a) { o.demo = Demo(a.choice(DEMO_NAMES)); },
             [](const O& o) { return o.demo ? "--demo " + DEMO_NAMES[int(*o.demo)] : ""; }}}},
        {"Keeping and using a model", "./sorter --save model.txt, then ./sorter --load model.txt --sort 5 3 9 1 1",
         false, {
            path_flag("--save", "FILE", "as training ends, write the model to FILE (plain text); it may be the --load "
                      "file, to train on in place; no other output may name the --load file or another output's",
                      false, &O::save_path),
            whole_flag("--save-every", "while training, write the --save file every N steps too (whole or not at "
                       "all), so that a run killed at any moment keeps all but the last N steps; 0: only as training "
                       "ends", 0, MAX_STEPS, false, &O::save_every),
            path_flag("--load", "FILE", "read a model saved with --save instead of training one; with --steps N, "
                      "train it N steps more; model, data and other training flags cannot be combined with it, but "
                      "--task, --seq-len and --min-len fine-tune it on other data (its checkpoint keeps both)", false,
                      &O::load_path),
            switch_flag("--finish", "with --load and --save: train the steps its run had left when it was cut short, "
                        "on the schedule it planned, to the same bits as a run never stopped (Ctrl-C and kill keep a "
                        "run that had --save; kill -9 and a crash, one that had --save-every); a fine-tuning run too, "
                        "with the adapters, data and rate its file keeps", false, true,
                        &O::finish),
            {"--quantize", "BITS", "with --load: every matrix of a product (attention's, the feed-forward's, the output "
             "projection, the embedding table) as whole numbers of BITS bits, 2 to 8, one scale a group of 32 (8 bits: "
             "64) along the input, so that the model runs in integers (8: llama2.c's Q8_0; below 8: llama.cpp's Q4_0 "
             "rule); prints each matrix's largest error; --save FILE keeps it (a quantized model trains adapters "
             "alone: --lora)", false,
             [](O& o, Args& a) { o.quantize_bits = int(a.whole(2, 8)); },
             [](const O& o) { return o.quantize_bits == 0 ? "" : fmt("--quantize %d", o.quantize_bits); }},
            {"--sort", "D D ...", "print the model's output for these digits (with --load, or after training)", false,
             [](O& o, Args& a) {
                 o.sort_words.clear();
                 while (a.has_value()) o.sort_words.push_back(a.argv[++a.i]);
                 if (o.sort_words.empty()) fail("--sort needs digits, e.g. --sort 5 3 9 1 1");
             },
             [](const O& o) { return join(o.sort_words, " "); }}}},
        {"Fine-tuning with low-rank adapters (chapter 12)", "./sorter --load model.txt --lora 4 --steps 1000 "
         "--save tuned.txt --save-adapters adapters.txt", false, {
            whole_flag("--lora", "with --load: freeze the model and train adapters of rank R beside the chosen "
                       "matrices, each W read as W + (alpha / R) A B, A (d_in, R) small and random, B (R, d_out) "
                       "zero, so the first step is the loaded model's (Hu et al. 2021); on a quantized model too "
                       "(QLoRA's idea); --save FILE writes the model merged at the run's end (before it, --save-every "
                       "keeps the adapters apart, for --finish); 0: none", 0, MAX_LORA_RANK, false,
                       &O::lora_rank),
            number_flag("--lora-alpha", "the adapters' scale is alpha / R; 0: R (a scale of 1)", 0, MAX_LORA_ALPHA,
                        false, &O::lora_alpha),
            choice_flag("--lora-on", "which matrices take adapters: qv, every attention's W_q and W_v; all, every "
                        "matrix of attention and of the feed-forward (each expert's)", LORA_ON_NAMES, false, &O::lora_on),
            path_flag("--save-adapters", "FILE", "as training ends, write the adapters alone to FILE, which names "
                      "its base by a fingerprint of its weights", false, &O::save_adapters_path),
            path_flag("--adapters", "FILE", "with --load: put the adapters of FILE (from --save-adapters) on the "
                      "model they were trained on, and run it so (another model is refused)", false,
                      &O::adapters_path)}},
        {"Speed", "", false, {
            switch_flag("--bench", "print the speed table instead of training (make bench runs it)", false, true,
                        &O::bench),
            switch_flag("--speed", "measure training examples/s of the model and batch the other flags give (or the "
                        "--load file's), then time one held-out evaluation (make compare runs it)", false, true,
                        &O::speed),
            switch_flag("--step-cost", "time a training step of the model and batch the other flags give (or the "
                        "--load file's; the median of 5, no evaluation) and print the peak memory", false, true,
                        &O::step_cost),
            {"--threads", "N", fmt("threads for the matrix products, attention and decoding; every result is the "
             "same, bit for bit, for any N (default: the cores available; at most %ld)", MAX_THREADS), false,
             [](O& o, Args& a) { o.thread_count = int(a.whole(1, MAX_THREADS)); },
             [](const O& o) { return o.thread_count == 0 ? "" : fmt("--threads %d", o.thread_count); }},
            switch_flag("--help", "this text", false, true, &O::help)}},
    };
    return table;
}
inline const Flag* find_flag(const std::string& name) {  // nullptr for a flag not in the table
    for (const FlagGroup& g : flag_table())
        for (const Flag& f : g.flags)
            if (f.name == name || (name == "-h" && f.name == "--help")) return &f;
    return nullptr;
}

// --help, generated from the table: each flag and its value, then its help wrapped at 100 columns.
inline void print_help() {
    std::printf("sorter: a from-scratch Transformer that learns to sort digits.\n\n"
                "usage: ./sorter [flags]      with no flags: train the default model and report\n");
    const std::size_t left = 21;  // the column every help text starts in
    for (const FlagGroup& g : flag_table()) {
        std::printf("\n%s\n", g.title.c_str());
        for (const Flag& f : g.flags) {
            std::string text = "  " + f.name + (f.value.empty() ? "" : " " + f.value);
            text += text.size() < left ? std::string(left - text.size(), ' ') : "\n" + std::string(left, ' ');
            std::size_t column = left;  // where the next word would start, after a space
            for (const std::string& word : split_words(f.help)) {
                if (column + word.size() > 100) {  // wrap at 100 columns, under the help of the line above
                    text += "\n" + std::string(left, ' ');
                    column = left;
                }
                text += (column > left ? " " : "") + word;
                column += word.size() + 1;
            }
            std::printf("%s\n", text.c_str());
        }
        if (!g.example.empty()) std::printf("  example: %s\n", g.example.c_str());
    }
}
