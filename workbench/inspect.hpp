// workbench/inspect.hpp -- what a trained model relies on (--inspect: each head switched off, the pointer check,
// the experts' loads) and how it does at every input length (--test-len). Tests: inspect_test.cpp.
#pragma once

#include "evaluate.hpp"
#include "shapes.hpp"  // --trace-shapes and --params, which the same runs print

// --inspect: what a trained model relies on, measured on the held-out set.
// (a) Exact-match with one head switched off at a time (its output left out of the join): a head the
//     model needs costs accuracy when it is silenced; a head it does not need costs nothing.
// (b) The pointer check. Sorting as a program (the RASP view) reads: at output step t, find the
//     source position holding the t-th smallest digit and copy it. If a cross-attention head does
//     that, its strongest weight at each step falls on a source position that holds the digit being
//     emitted. The share of steps (emitting a digit, not PAD) where it does, per layer and head.
// Head h's output fills columns h*d_k .. of the join, which meet rows h*d_k .. of W_o: with those rows
// zero, the head adds nothing to the layer's output, exactly as if it were left out.
inline Accuracy exact_match_without_head(Transformer& model, MultiHeadAttention& attn, int h,
                                         const std::vector<Example>& held_out) {
    Matrix kept = attn.W_o.W.value;
    for (int r = h * attn.d_k; r < (h + 1) * attn.d_k; r++)
        for (int col = 0; col < kept.cols; col++) attn.W_o.W.value.at(r, col) = 0.0;
    Accuracy a = evaluate(model, held_out);
    attn.W_o.W.value = kept;
    return a;
}
// The pointer check's counts: hits[l * n_heads + h] positions where decoder.l's head h pointed at the digit.
inline long pointer_hits(Transformer& model, const std::vector<Example>& held_out, std::vector<long>& hits) {
    const int n_heads = model.config.n_heads, layers = int(model.decoder.size());
    hits.assign(std::size_t(layers) * n_heads, 0);
    long emitted = 0;  // the positions that emit a digit
    const std::size_t n = chunk_size(model.config, int(held_out[0].target.size()));
    for (std::size_t chunk = 0; chunk < held_out.size() && !(chunk > 0 && evaluation_stopped()); chunk += n) {
        // greedy decoding, step by step (a signal after training stops it after the chunk under way)
        Transformer::Batch sources = inputs_of(held_out, chunk, n).sources;
        DecodingCache cache = start_decoding(model, sources);
        Transformer::Batch newest(sources.size(), {start_token(model.config.vocab)});
        for (int t = 0; t < int(held_out[chunk].target.size()); t++) {
            greedy_next(model, cache, newest);  // this position's maps are in the heads now
            for (std::size_t e = 0; e < newest.size(); e++) {
                int chosen = newest[e][0];
                if (chosen == PAD || chosen == start_token(model.config.vocab)) continue;
                emitted++;
                for (int l = 0; l < layers; l++)
                    for (int h = 0; h < n_heads; h++) {
                        const Matrix& P = model.decoder[l].cross_attn.saved[e * n_heads + h].P;  // (1, S)
                        int strongest = int(std::max_element(P.data.begin(), P.data.end()) - P.data.begin());
                        hits[std::size_t(l) * n_heads + h] += sources[e][strongest] == chosen;
                    }
            }
        }
    }
    return emitted;
}
// With experts (chapter 11): each layer's load, the share of the K choices each expert took, and which expert is each
// token's first choice, by the token the row reads (a digit, START or PAD), over the first 200 held-out examples
// under teacher forcing. A layer whose router collapsed shows one expert near 100%.
inline void inspect_experts(Transformer& model, const std::vector<Example>& held_out) {
    const Inputs in = inputs_of(held_out, 0, 200);
    model.forward(in.sources, in.targets_in);
    const int vocab = model.config.vocab, E = model.config.experts;
    std::printf("\n--- inspect: the experts, over %zu held-out examples (teacher forcing) ---\n", in.sources.size());
    auto show = [&](const std::string& name, const Owned<Layer>& ffn, const std::vector<int>& tokens) {
        const Experts& moe = dynamic_cast<Experts&>(*ffn);
        std::string load;
        for (int taken : moe.load()) load += fmt(" %5.1f%%", 100.0 * taken / (double(moe.K) * tokens.size()));
        std::printf("  %-10s load by expert:%s\n", name.c_str(), load.c_str());
        std::vector<std::vector<int>> firsts(vocab, std::vector<int>(E, 0));  // token -> its rows' first choices
        for (std::size_t r = 0; r < tokens.size(); r++) firsts[tokens[r]][moe.chosen[r][0]]++;
        std::string by_token;
        for (int v = 0; v < vocab; v++) {
            int rows = 0, best = 0;
            for (int i = 0; i < E; i++) rows += firsts[v][i], best = firsts[v][i] > firsts[v][best] ? i : best;
            if (rows > 0)
                by_token += fmt(" %s:e%d %.0f%%", v == PAD ? "_" : v == vocab - 1 ? "S" : std::to_string(v).c_str(),
                                best, 100.0 * firsts[v][best] / rows);
        }
        std::printf("  %-10s first choice by token read:%s\n", "", by_token.c_str());
    };
    std::vector<int> sources = Transformer::concatenated(in.sources), targets = Transformer::concatenated(in.targets_in);
    for (std::size_t i = 0; i < model.encoder.size(); i++)
        show("encoder." + std::to_string(i), model.encoder[i].ffn, sources);
    std::vector<int> rows = targets;  // decoder-only: each sequence's source, then its START and answer
    if (!has_encoder(model.config.arch)) {
        rows.clear();
        for (std::size_t e = 0; e < in.sources.size(); e++) {
            rows.insert(rows.end(), in.sources[e].begin(), in.sources[e].end());
            rows.insert(rows.end(), in.targets_in[e].begin(), in.targets_in[e].end());
        }
    }
    for (std::size_t i = 0; i < model.decoder.size(); i++)
        show("decoder." + std::to_string(i), model.decoder[i].ffn, rows);
}

inline void inspect(Transformer& model, const std::vector<Example>& held_out) {
    if (held_out.empty()) {  // a score of nothing would read 0.0%
        std::printf("\n--- inspect: n/a: this model's data settings allow no held-out set ---\n");
        return;
    }
    if (model.config.experts > 0) inspect_experts(model, held_out);
    Accuracy all = evaluate(model, held_out);
    std::string cut = all.total < all.asked ? fmt(", %d %s", all.total, cut_short_text(all).c_str()) : "";
    std::printf("\n--- inspect: held-out exact-match with one head switched off (none off: %.1f%%%s) ---\n",
                100 * all.exact, cut.c_str());
    if (!weights_note(model.config).empty()) std::printf("%s\n", weights_note(model.config).c_str());
    for (const AttentionLayer& l : attention_layers(model))
        for (int h = 0; h < l.attn->n_heads; h++) {
            if (evaluation_stopped()) {
                std::printf("  (%s cut --inspect short here)\n", signal_text(stop_signal).c_str());
                return;
            }
            Accuracy a = exact_match_without_head(model, *l.attn, h, held_out);
            std::printf("  %-36s head %d off: %5.1f%%%s\n", l.name.c_str(), h, 100 * a.exact,
                        a.total < a.asked ? fmt("   (%d %s)", a.total, cut_short_text(a).c_str()).c_str() : "");
        }
    if (!has_encoder(model.config.arch)) {
        std::printf("\n--- inspect: the pointer check: n/a (it reads cross-attention, which a decoder-only model does "
                    "not have) ---\n");
        return;
    }
    std::vector<long> hits;
    long steps = pointer_hits(model, held_out, hits);
    std::printf("\n--- inspect: the pointer check, over %ld decoding steps that emit a digit ---\n"
                "share of steps whose strongest cross-attention falls on a source position holding that digit\n",
                steps);
    for (int l = 0, n_heads = model.config.n_heads; l < int(model.decoder.size()); l++)
        for (int h = 0; h < n_heads; h++)
            std::printf("  decoder.%d cross-attention head %d: %s\n", l, h,
                        steps ? fmt("%5.1f%%", 100.0 * hits[std::size_t(l) * n_heads + h] / steps).c_str()
                              : "  n/a (no decoding step emitted a digit)");
}

// --test-len N: held-out exact-match for every input length from 1 to N, on inputs training never drew.
// A length training drew from (--min-len to --seq-len) uses the run's own held-out sequences of that
// length; any other length is unseen whatever its digits, so 200 are drawn fresh (fewer where fewer
// exist). Shorter inputs are padded to --seq-len, as in training. Lengths past --seq-len use positions
// training never reached: sinusoidal ones are defined there, learned ones are rows of the table that
// training never moved (still their random start), and --pos none has no positions to leave behind.
// Up to n distinct inputs drawn from their own seed: all of them where fewer exist. (A length training never
// drew needs none left over for training, unlike the held-out set, which takes at most half.)
inline std::vector<std::vector<int>> distinct_inputs(const DataConfig& d, int n, uint64_t seed) {
    std::set<std::vector<int>> seen;
    std::vector<std::vector<int>> inputs;
    Rng rng(seed);
    while (double(inputs.size()) < std::min(double(n), count_sources(d))) {
        std::vector<int> digits = random_digits(rng, d);
        if (seen.insert(digits).second) inputs.push_back(digits);
    }
    return inputs;
}
// The length lab on a loaded model (--load FILE --test-len N): the sinusoidal table is computed, so it is made N
// rows long (rotary positions and ALiBi compute theirs in attention); a learned table, or random positions' rows,
// cannot reach past the rows the model trained with. (Fine-tuning at a longer --seq-len reaches it too: `flag`.)
inline void reach_length(Transformer& model, int length, const std::string& load_path,
                         const std::string& flag = "--test-len") {
    ModelConfig& c = model.config;
    if (positions_read(c, length) <= c.max_len) return;
    const std::string refused = fmt("%s %d with --load %s: ", flag.c_str(), length, load_path.c_str());
    switch (c.positions) {
    case Positions::sinusoidal:
    case Positions::none:
    case Positions::rope: case Positions::alibi:  // computed in attention, at any position
        c.max_len = positions_read(c, length);
        if (!model.embed.fixed.empty()) model.embed.fixed = sinusoidal_table(c.max_len, c.d_model);  // the one added
        return;
    case Positions::learned:
        fail(refused + fmt("this model's learned position table has %d rows, one for each position it trained at; "
                           "train a new model with %s %d", c.max_len, flag.c_str(), length));
    case Positions::random:
        fail(refused + fmt("random positions read rows drawn from this model's %d, all it trained with; train a new "
                           "model with %s %d", c.max_len, flag.c_str(), length));
    }
}
inline void length_report(Transformer& model, const Dataset& data, int test_len, const DecodeConfig& how) {
    const DataConfig& trained = data.config;
    std::printf("\n--- held-out exact-match by input length (trained on lengths %d to %d) ---\n", trained.min_len,
                trained.seq_len);
    for (int len = 1; len <= test_len; len++) {
        if (evaluation_stopped()) {
            std::printf("  length %d%s: not scored (%s cut the evaluation short)\n", len,
                        len < test_len ? fmt(" to %d", test_len).c_str() : "", signal_text(stop_signal).c_str());
            return;
        }
        std::vector<Example> tests;
        if (len >= trained.min_len && len <= trained.seq_len) {
            for (const Example& e : data.held_out)
                if (std::count(e.source.begin(), e.source.end(), PAD) == trained.seq_len - len) tests.push_back(e);
        } else {
            DataConfig d = trained;
            d.seq_len = d.min_len = len;
            for (const std::vector<int>& digits : distinct_inputs(d, 200, HELD_OUT_SEED + uint64_t(len)))
                tests.push_back(make_example(digits, len < trained.seq_len ? trained : d));
        }
        Accuracy a = evaluate(model, tests, how);
        std::string score = a.total ? fmt("%5.1f%% (%d/%d%s)", 100 * a.exact, a.exact_count, a.total,
                                          a.total < a.asked ? (", " + cut_short_text(a)).c_str() : "")
                                    : "  n/a (no input of this length is held out: training may draw them all)";
        std::printf("  length %2d: %s%s\n", len, score.c_str(),
                    len > trained.seq_len ? "   longer than any training input"
                                          : len < trained.min_len ? "   shorter than any training input" : "");
    }
}
