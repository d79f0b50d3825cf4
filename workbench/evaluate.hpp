// workbench/evaluate.hpp -- how the program scores a model on many examples (the held-out set): exact match
// and token accuracy of its decoded outputs, and the teacher-forced loss the training table prints beside the
// training loss.
//
// Many examples are decoded or scored a chunk at a time, as one stack of rows: large products, bounded
// memory. A forward pass keeps per sequence of length L about n_heads L^2 + 16 L d_model values in each
// attention layer and 4 L d_ff in each feed-forward; a chunk keeps at most CHUNK_VALUES (48 MB) of them,
// in 6 to 100 sequences (at each decoding position, every number a product reads from a weight then serves
// at least 6 rows).
#pragma once

#include "beam.hpp"
#include "signals.hpp"  // a signal after training cuts an evaluation short

constexpr double CHUNK_VALUES = 6e6;
inline std::size_t chunk_size(const ModelConfig& c, int L) {
    double attention_layers = c.enc_layers + (has_encoder(c.arch) ? 2.0 : 1.0) * c.dec_layers,  // self-, cross-
           ffn_layers = c.enc_layers + c.dec_layers;
    L = positions_read(c, L);  // decoder-only: source and answer, one sequence
    double per_sequence = attention_layers * (double(c.n_heads) * L * L + 16.0 * L * c.d_model) +
                          ffn_layers * 4.0 * L * c.d_ff;
    return std::size_t(std::clamp(CHUNK_VALUES / per_sequence, 6.0, 100.0));
}

struct Accuracy {
    double token = 0.0;  // share of the target's digits predicted right (PAD positions not counted)
    double exact = 0.0;  // share of sequences right at every position, PAD included
    int exact_count = 0, total = 0;  // right, and scored
    int asked = 0;                   // the examples given: above total when a signal cut the evaluation short
};
// An evaluation a signal cut short, said after the count of those scored: "of 1000: Ctrl-C cut the evaluation short".
inline std::string cut_short_text(const Accuracy& a) {
    return fmt("of %d: %s cut the evaluation short", a.asked, signal_text(stop_signal).c_str());
}

// The outputs for many examples, a chunk at a time (all of one target length); a beam of K decodes K
// sequences a source, so its chunks hold K times fewer sources. A signal after training (signals.hpp) stops it
// after the first chunk or the one under way: fewer outputs than examples, the first ones.
inline std::vector<std::vector<int>> decode_all(Transformer& model, const std::vector<Example>& examples,
                                                const DecodeConfig& how = DecodeConfig()) {
    std::vector<std::vector<int>> guesses;
    if (examples.empty()) return guesses;
    const int T = int(examples[0].target.size());
    const std::size_t n = std::max<std::size_t>(1, chunk_size(model.config, T) / std::size_t(how.beam));
    for (std::size_t chunk = 0; chunk < examples.size() && !(chunk > 0 && evaluation_stopped()); chunk += n)
        for (std::vector<int>& g : decode_outputs(model, inputs_of(examples, chunk, n).sources, T, how))
            guesses.push_back(std::move(g));
    return guesses;
}

inline Accuracy evaluate(Transformer& model, const std::vector<Example>& examples,
                         const DecodeConfig& how = DecodeConfig()) {
    Accuracy a;
    long right_digits = 0, all_digits = 0;
    std::vector<std::vector<int>> guesses = decode_all(model, examples, how);
    for (std::size_t k = 0; k < guesses.size(); k++) {
        const Example& e = examples[k];
        a.exact_count += guesses[k] == e.target;
        for (std::size_t t = 0; t < e.target.size(); t++)
            if (e.target[t] != PAD) right_digits += guesses[k][t] == e.target[t], all_digits++;
    }
    a.total = int(guesses.size()), a.asked = int(examples.size());
    a.token = all_digits ? double(right_digits) / double(all_digits) : 0.0;
    a.exact = a.total ? double(a.exact_count) / a.total : 0.0;
    return a;
}

// The mean loss over examples under teacher forcing, with no update: the held-out loss that the
// training table prints beside the training loss.
inline double teacher_forced_loss(Transformer& model, const std::vector<Example>& examples) {
    double loss = 0.0;
    if (examples.empty()) return loss;
    const std::size_t n = chunk_size(model.config, int(examples[0].target.size()));
    std::size_t scored = 0;
    for (std::size_t chunk = 0; chunk < examples.size() && !(chunk > 0 && evaluation_stopped()); chunk += n) {
        Inputs in = inputs_of(examples, chunk, n);
        scored += in.sources.size();
        Matrix logits = model.forward(in.sources, in.targets_in);  // (n_seq T, vocab)
        int T = logits.rows / int(in.sources.size());
        for (std::size_t k = 0; k < in.sources.size(); k++) {
            Matrix unused(T, logits.cols);  // the gradient, not needed here
            loss += cross_entropy(take_block(logits, int(k) * T, T, 0, logits.cols), examples[chunk + k].target, 1.0,
                                  unused) / double(examples.size());
        }
    }
    if (scored < examples.size()) loss *= double(examples.size()) / double(scored);  // cut short: those scored
    return loss;
}
