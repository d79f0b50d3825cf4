// workbench/step_dump.hpp -- --dump-step FILE: the first training step before its update, for
// reference/torch_sorter.py (make reference): lr, each example and its logits, dropout's masks (when on), the
// loss (batch_loss's plain cross-entropy, as train_step sums it, so the same to the last bit; with label
// smoothing also the smoothed loss training follows, which PyTorch's loss computes), and the model as a
// checkpoint. A fine-tuning run's (--lora or --adapters with --load, chapter 12) holds its adapters before the step
// too, as their file, and the batches of its next two steps (no dropout's masks: the twin checks those without).
#pragma once

#include "checkpoint.hpp"
#include "lora.hpp"  // a fine-tuning step's adapters, written as their file (chapter 12)

inline std::string ids_text(const std::vector<int>& tokens) {  // {3, 1, 0} -> "3 1 0"
    std::vector<std::string> words;
    for (int t : tokens) words.push_back(std::to_string(t));
    return join(words, " ");
}
// Dropout's masks as the step draws them, for the twin to replay, each (rows, cols) with its place's name:
// the embeddings', each sublayer's, and each attention's (its heads' (T, S) factors stacked, sequence by
// sequence, head by head). A place with nothing dropped is left out.
inline std::vector<std::pair<std::string, Matrix>> dropout_masks(const Transformer& model) {
    std::vector<std::pair<std::string, Matrix>> masks = {
        {"embed.source", model.source_keep},
        {has_encoder(model.config.arch) ? "embed.target" : "embed.whole", model.target_keep}};  // (the whole: ch. 06)
    auto heads = [](const MultiHeadAttention& attn) {
        std::vector<Matrix> keeps;
        for (std::size_t k = 0; k < attn.saved.size(); k++) {
            const SavedAttention& head = attn.saved[k];
            const InTiles* tiles = dynamic_cast<const InTiles*>(attn.heads.get());
            if (!tiles || tiles->p == 0.0) {
                keeps.push_back(head.keep);
                continue;
            }
            // In tiles (--attention flash) nothing is kept: each factor is made again from its counter, as the
            // backward makes it.
            const int T = head.Q.rows, S = head.K.rows, e = int(k) / attn.n_heads, h = int(k) % attn.n_heads;
            Matrix keep(T, S);
            const TileDropout dropped = tiles->dropout_of(e, h, T, S);
            for (int i = 0; i < T; i++)
                for (int j = 0; j < S; j++) keep.at(i, j) = dropped.factor(i, j);
            keeps.push_back(keep);
        }
        return keeps[0].empty() ? Matrix() : stack_rows(keeps);
    };
    for (std::size_t i = 0; i < model.encoder.size(); i++) {
        const EncoderBlock& b = model.encoder[i];
        std::string name = "encoder." + std::to_string(i);
        masks.insert(masks.end(), {{name + ".attn_sub", b.attn_sub.keep}, {name + ".self_attn", heads(b.self_attn)},
                                   {name + ".ffn_sub", b.ffn_sub.keep}});
    }
    for (std::size_t i = 0; i < model.decoder.size(); i++) {
        const DecoderBlock& b = model.decoder[i];
        std::string name = "decoder." + std::to_string(i);
        masks.insert(masks.end(), {{name + ".self_sub", b.self_sub.keep}, {name + ".self_attn", heads(b.self_attn)}});
        if (has_encoder(model.config.arch))
            masks.insert(masks.end(), {{name + ".cross_sub", b.cross_sub.keep}, {name + ".cross_attn", heads(b.cross_attn)}});
        masks.push_back({name + ".ffn_sub", b.ffn_sub.keep});
    }
    masks.erase(std::remove_if(masks.begin(), masks.end(), [](auto& m) { return m.second.empty(); }), masks.end());
    return masks;
}
// A later step of a fine-tuning run: its number, rate and batch (the twin runs it on from its own weights).
struct LaterStep {
    long step;
    double lr;
    std::vector<Example> batch;
};
inline void dump_step(const std::string& path, Transformer& model, const std::vector<Example>& batch, double lr,
                      const DataConfig& d, const TrainConfig& t, const TrainState& state, const Origin& origin,
                      const std::vector<LaterStep>& later = {}) {
    Inputs in = inputs_of(batch, 0, batch.size());
    const Rng masks = model.dropout_draws;  // the step will draw the same masks again from here
    model.train(true);                      // as train_step runs the batch: one stack of rows, dropout on
    Matrix logits = model.forward(in.sources, in.targets_in);  // (n_seq T, vocab)
    model.train(false);
    model.dropout_draws = masks;
    Matrix unused(logits.rows, logits.cols);  // the gradient, not needed here
    const Loss loss = batch_loss(logits, batch, t.label_smoothing, unused);
    const int T = logits.rows / int(batch.size());
    write_atomically(path, "--dump-step", [&](FILE* f) {
        std::fprintf(f, "sorter-step 1\nlr %.17g\nexamples %zu\n", lr, batch.size());
        for (std::size_t i = 0; i < batch.size(); i++) {
            const Example& e = batch[i];
            Matrix logits_e = take_block(logits, int(i) * T, T, 0, logits.cols);
            std::fprintf(f, "example %zu\nsource %s\ntarget_in %s\ntarget %s\nlogits %d %d\n", i,
                         ids_text(e.source).c_str(), ids_text(e.target_in).c_str(), ids_text(e.target).c_str(),
                         logits_e.rows, logits_e.cols);
            write_matrix(f, logits_e);
        }
        std::vector<std::pair<std::string, Matrix>> kept = dropout_masks(model);
        if (!kept.empty()) std::fprintf(f, "masks %zu\n", kept.size());  // only with dropout on
        for (auto& [name, keep] : kept) {
            std::fprintf(f, "mask %s %d %d\n", name.c_str(), keep.rows, keep.cols);
            write_matrix(f, keep);
        }
        std::fprintf(f, "loss %.17g\n", loss.plain);  // the cross-entropy, as the table shows it
        if (t.label_smoothing > 0) std::fprintf(f, "smoothed_loss %.17g\n", loss.followed);  // what training follows
        if (!adapters_of(model).empty()) {  // fine-tuning (chapter 12): the adapters before the step, as their file
            std::fprintf(f, "adapters\n");
            write_adapters(f, model, base_fingerprint(model));
            std::fprintf(f, "later_steps %zu\n", later.size());
            for (const LaterStep& s : later) {
                std::fprintf(f, "step %ld lr %.17g examples %zu\n", s.step, s.lr, s.batch.size());
                for (const Example& e : s.batch)
                    std::fprintf(f, "source %s\ntarget_in %s\ntarget %s\n", ids_text(e.source).c_str(),
                                 ids_text(e.target_in).c_str(), ids_text(e.target).c_str());
            }
        }
        std::fprintf(f, "checkpoint\n");
        write_checkpoint(f, model, d, t, state, origin);
    });
}
// A fine-tuning run's dump holds its next steps' batches as well, two at most: the twin checks three Adam steps.
constexpr long DUMPED_LATER_STEPS = 2;
// The run's first step (step 1; a fine-tuning run's, the step after the loaded model's) as train_step is about to
// run it: the batch it will draw, the rate it will use, and the training state as the checkpoint of a run stopped
// just after drawing that batch would hold it.
inline void dump_first_step(const std::string& path, Transformer& model, const Dataset& data, const TrainConfig& t,
                            const TrainState& state, const Origin& origin, long first, long last) {
    TrainState at_first = state;  // a copy: train_step draws the same batch again from `state`
    std::vector<Example> batch = data.draw_batch(at_first.batch_draws, t.batch);
    std::vector<LaterStep> later;  // fine-tuning: the next DUMPED_LATER_STEPS steps' batches, drawn on from there
    Rng draws = at_first.batch_draws;
    if (!adapters_of(model).empty())
        for (long step = first + 1; step <= std::min(last, first + DUMPED_LATER_STEPS); step++)
            later.push_back(
                {step, scheduled_lr(t.schedule, t.lr, step, last, t.warmup), data.draw_batch(draws, t.batch)});
    dump_step(path, model, batch, scheduled_lr(t.schedule, t.lr, first, last, t.warmup), data.config, t, at_first,
              origin, later);
}
