// workbench/inspect.hpp -- looking inside a model: the shape of every tensor (--trace-shapes), the
// parameter counts (--params), what a trained model relies on (--inspect), and how it does at every
// input length (--test-len).
#pragma once

#include "evaluate.hpp"
#include "terminal.hpp"

// --trace-shapes: one forward pass of a mini-batch, then a walk through the activations every block
// saved for its backward, in order. No line of the forward is repeated: each shape is read from a saved
// matrix (or the two that made it). The batch runs as one stack of rows, as in training: (n_seq S, d_model).
inline void shape_line(const std::string& what, const std::string& legend, const std::string& numbers) {
    std::printf("  %-50s %-30s %s\n", what.c_str(), legend.c_str(), numbers.c_str());
}
inline std::string product_shape(const Linear& l) { return shape_text(l.x.rows, l.W.value.cols); }  // x W, not saved
inline std::string weight_shapes(const Linear& l) { return shape_text(l.W.value) + ", " + shape_text(l.b.value); }
// One attention layer: Q and K are the legends' lengths ("T", "S"), q_in and kv what the queries and the
// keys and values read.
inline void trace_attention(const MultiHeadAttention& m, const std::string& Q, const std::string& K,
                            const std::string& q_in, const std::string& kv) {
    const AttentionCache& h = m.heads[0];
    const bool grouped = m.kv_heads < m.n_heads;  // K and V are kv_heads d_k wide (grouped-query attention)
    const std::string kv_width = grouped ? "kv_heads d_k" : "d_model";
    shape_line("queries read " + q_in, "(n_seq " + Q + ", d_model)", shape_text(m.W_q.x));
    shape_line("keys and values read " + kv, "(n_seq " + K + ", d_model)", shape_text(m.W_k.x));
    if (grouped) {
        shape_line("W_q", "(d_model, d_model)", shape_text(m.W_q.W.value));
        shape_line(fmt("W_k, W_v (each; %d key-value head%s)", m.kv_heads, m.kv_heads == 1 ? "" : "s"),
                   "(d_model, kv_heads d_k)",
                   shape_text(m.W_k.W.value));
    } else {
        shape_line("W_q, W_k, W_v (each)", "(d_model, d_model)", shape_text(m.W_q.W.value));
    }
    shape_line("Q = " + q_in + " W_q", "(n_seq " + Q + ", d_model)", product_shape(m.W_q));
    shape_line("K = " + kv + " W_k, V = " + kv + " W_v", "(n_seq " + K + ", " + kv_width + ")", product_shape(m.W_k));
    if (m.rotary) shape_line("Q, K turned by position (rotary; shapes unchanged)", "", "");
    shape_line("one sequence's head: Q_h (columns h*d_k ..)", "(" + Q + ", d_k)", shape_text(h.Q));
    shape_line(grouped ? fmt("one sequence's head: K_h, V_h (one for %d heads)", m.n_heads / m.kv_heads)
                       : "one sequence's head: K_h, V_h", "(" + K + ", d_k)", shape_text(h.K));
    shape_line(m.alibi_slopes.empty() ? "P_h = softmax(masked(Q_h K_h^T / sqrt(d_k)))"
                                      : "P_h = softmax(masked(Q_h K_h^T/sqrt(d_k) - ALiBi))",
               "(" + Q + ", " + K + ")", shape_text(h.P));
    shape_line("P_h V_h", "(" + Q + ", d_k)", shape_text(h.P.rows, h.V.cols));
    shape_line("n_heads heads joined side by side", "(n_seq " + Q + ", d_model)", shape_text(m.W_o.x));
    shape_line("joined W_o, added to the residual", "(n_seq " + Q + ", d_model)", product_shape(m.W_o));
}
inline void trace_feed_forward(const FeedForward& f, const std::string& N, const std::string& in) {
    const bool swiglu = f.activation == Activation::swiglu;
    const std::string ff = swiglu ? "d_h" : "d_ff";  // SwiGLU's hidden width d_h is 2 d_ff / 3 (hidden_width)
    shape_line("reads " + in, "(n_seq " + N + ", d_model)", shape_text(f.layer1.x));
    shape_line(swiglu ? "W_1, b_1 (the gate)" : "W_1, b_1", "(d_model, " + ff + "), (1, " + ff + ")",
               weight_shapes(f.layer1));
    shape_line("hidden = " + in + " W_1 + b_1", "(n_seq " + N + ", " + ff + ")", shape_text(f.hidden));
    if (swiglu) {
        shape_line("W_3, b_3 (the partner)", "(d_model, " + ff + "), (1, " + ff + ")", weight_shapes(f.layer3));
        shape_line("partner = " + in + " W_3 + b_3", "(n_seq " + N + ", " + ff + ")", shape_text(f.partner));
        shape_line("act = silu(hidden) * partner", "(n_seq " + N + ", " + ff + ")", shape_text(f.layer2.x));
    } else {
        shape_line(ACTIVATION_NAMES[int(f.activation)] + "(hidden)", "(n_seq " + N + ", d_ff)", shape_text(f.layer2.x));
    }
    shape_line("W_2, b_2", "(" + ff + ", d_model), (1, d_model)", weight_shapes(f.layer2));
    shape_line(swiglu ? "out = act W_2 + b_2, added to the residual"
                      : "out = act(hidden) W_2 + b_2, added to the residual", "(n_seq " + N + ", d_model)",
               product_shape(f.layer2));
}
inline void trace_encoder_block(const EncoderBlock& block, std::size_t i, const std::string& x_in) {
    std::printf("encoder.%zu self-attention (padding mask (n_seq S, S))\n", i);
    trace_attention(block.self_attn, "S", "S", x_in, x_in);
    std::printf("encoder.%zu feed-forward\n", i);
    trace_feed_forward(block.ffn, "S", x_in);
}
// T: the decoder's length ("T"; a decoder-only model's, "L": source, START and answer).
inline void trace_decoder_block(const DecoderBlock& block, std::size_t i, const std::string& y_in,
                                const std::string& T = "T") {
    std::printf(block.cross ? "decoder.%zu causal self-attention (causal mask (n_seq T, T))\n"
                            : "decoder.%zu causal self-attention (causal mask, the source's PADs hidden "
                              "(n_seq L, L))\n", i);
    trace_attention(block.self_attn, T, T, y_in, y_in);
    if (block.cross) {
        std::printf("decoder.%zu cross-attention (queries from the decoder, keys and values from the memory)\n", i);
        trace_attention(block.cross_attn, "T", "S", y_in, "memory");
    }
    std::printf("decoder.%zu feed-forward\n", i);
    trace_feed_forward(block.ffn, T, y_in);
}
// A decoder-only model: one stack over source, START and answer (L = S + T rows a sequence).
inline void trace_decoder_only(Transformer& model, std::size_t n_seq, std::size_t S, std::size_t T,
                               const std::string& y_in) {
    std::printf("the one sequence: source, START, answer (L = S + T = %zu)\n", S + T);
    shape_line("tokens: source, START, target[0 .. T-2]", "(n_seq, L)", fmt("(%zu, %zu)", n_seq, S + T));
    shape_line("embedding table", "(vocab, d_model)", shape_text(model.embed.table.value));
    if (const Matrix* table = model.embed.position_table())
        shape_line("position table", "(max_len, d_model)", shape_text(*table));
    shape_line(model.embed.position_table() ? "y = table[tokens] * scale + positions" : "y = table[tokens] * scale",
               "(n_seq L, d_model)",
               shape_text(model.decoder[0].self_attn.W_k.x));
    for (std::size_t i = 0; i < model.decoder.size(); i++) trace_decoder_block(model.decoder[i], i, y_in, "L");
    std::printf("output\n");
    shape_line("the answer's rows: the last T of each sequence", "(n_seq T, d_model)",
               shape_text(model.final_norm.x_hat));
}
inline void trace_encoder_decoder(Transformer& model, std::size_t n_seq, std::size_t S, std::size_t T,
                                  const std::string& x_in, const std::string& y_in) {
    std::printf("encoder input\n");
    shape_line("source tokens", "(n_seq, S)", fmt("(%zu, %zu)", n_seq, S));
    shape_line("embedding table", "(vocab, d_model)", shape_text(model.embed.table.value));
    if (const Matrix* table = model.embed.position_table())
        shape_line("position table", "(max_len, d_model)", shape_text(*table));
    shape_line(model.embed.position_table() ? "x = table[source] * scale + positions" : "x = table[source] * scale",
               "(n_seq S, d_model)", shape_text(model.encoder[0].self_attn.W_k.x));
    for (std::size_t i = 0; i < model.encoder.size(); i++) trace_encoder_block(model.encoder[i], i, x_in);
    std::printf("encoder output\n");
    shape_line("memory = the last encoder block's output", "(n_seq S, d_model)",
               shape_text(model.decoder[0].cross_attn.W_k.x));
    std::printf("decoder input\n");
    shape_line("decoder input tokens: START, target[0 .. T-2]", "(n_seq, T)", fmt("(%zu, %zu)", n_seq, T));
    shape_line(model.embed.position_table() ? "y = table[decoder input] * scale + positions"
                                            : "y = table[decoder input] * scale",
               "(n_seq T, d_model)", shape_text(model.decoder[0].self_attn.W_k.x));
    for (std::size_t i = 0; i < model.decoder.size(); i++) trace_decoder_block(model.decoder[i], i, y_in);
    std::printf("output\n");
}
inline void trace_shapes(Transformer& model, const std::vector<Example>& batch) {
    const ModelConfig& c = model.config;
    Inputs in = inputs_of(batch, 0, batch.size());
    Matrix logits = model.forward(in.sources, in.targets_in);
    std::size_t n_seq = batch.size(), S = in.sources[0].size(), T = in.targets_in[0].size();
    std::printf("--- shapes on one forward pass of a training batch ---\n");
    std::printf("n_seq = %zu, S = %zu, T = %zu, d_model = %d, n_heads = %d, d_k = %d, d_ff = %d, vocab = %d%s\n\n",
                n_seq, S, T, c.d_model, c.n_heads, c.d_model / c.n_heads, c.d_ff, c.vocab,
                c.activation == Activation::swiglu ? fmt(", d_h = 2 d_ff / 3 = %d", hidden_width(c)).c_str() : "");
    if (c.positions == Positions::alibi) std::printf("ALiBi: head h's scores minus m_h |i - j|, m_h its slope\n\n");
    const std::string norm = c.rms_norm ? "RMS" : "LN";  // RMSNorm or LayerNorm
    const std::string x_in = c.norm == Norm::pre ? norm + "(x)" : "x", y_in = c.norm == Norm::pre ? norm + "(y)" : "y";
    std::printf("  %-50s %-30s %s\n", "tensor", "legend", "this run");
    switch (c.arch) {
    case Arch::encoder_decoder: trace_encoder_decoder(model, n_seq, S, T, x_in, y_in); break;
    case Arch::decoder_only: trace_decoder_only(model, n_seq, S, T, y_in); break;
    }
    shape_line(c.rms_norm ? "final RMSNorm" : "final LayerNorm", "(n_seq T, d_model)",
               shape_text(model.final_norm.x_hat));
    if (c.tie_embeddings) {
        shape_line("W_out = table^T (tied), b_out", "(d_model, vocab), (1, vocab)",
                   fmt("(%d, %d), ", c.d_model, c.vocab) + shape_text(model.out.b.value));
    } else {
        shape_line("W_out, b_out", "(d_model, vocab), (1, vocab)", weight_shapes(model.out));
    }
    shape_line("logits = " + norm + "(y) W_out + b_out", "(n_seq T, vocab)", shape_text(logits));
    if (c.key_value_heads() < c.n_heads) {  // what decoding keeps a layer: kv_heads of n_heads heads' K and V
        std::printf("decoding cache, each decoder layer (grouped-query: %d of %d heads' keys and values)\n",
                    c.key_value_heads(), c.n_heads);
        const int width = c.key_value_heads() * (c.d_model / c.n_heads);
        shape_line("self-attention K, V (each), after t tokens", "(n_seq t, kv_heads d_k)",
                   fmt("(%zu t, %d)", n_seq, width));
        if (c.arch == Arch::encoder_decoder)
            shape_line("cross-attention K, V (each)", "(n_seq S, kv_heads d_k)", fmt("(%zu, %d)", n_seq * S, width));
    }
}

// Parameter counts by block: "encoder.0.self_attn.W_q" counts for encoder.0, and inside it for self_attn.
inline void print_params(Transformer& model) {
    const ModelConfig& c = model.config;
    struct Group { std::string block; long total = 0; std::vector<std::pair<std::string, long>> parts; };
    std::vector<Group> groups;
    long total = 0;
    for (auto& [name, p] : model.parameters()) {
        bool layered = name.rfind("encoder.", 0) == 0 || name.rfind("decoder.", 0) == 0;
        std::size_t end = name.find('.', layered ? name.find('.') + 1 : 0);
        std::string block = name.substr(0, end), rest = name.substr(end + 1);
        std::string part = !layered                     ? rest
                           : rest.rfind("norm", 0) == 0 ? (c.rms_norm ? "RMSNorms" : "LayerNorms")
                                                        : rest.substr(0, rest.find('.'));
        long n = long(p->value.data.size());
        if (groups.empty() || groups.back().block != block) groups.push_back({block, 0, {}});
        Group& g = groups.back();
        g.total += n, total += n;
        auto it = std::find_if(g.parts.begin(), g.parts.end(), [&](auto& q) { return q.first == part; });
        if (it == g.parts.end()) g.parts.push_back({part, n});
        else it->second += n;
    }
    std::printf("--- parameters (d_model %d, n_heads %d, d_ff %d, vocab %d, layers %s) ---\n", c.d_model, c.n_heads,
                c.d_ff, c.vocab, layers_text(c).c_str());
    for (const Group& g : groups) {
        std::string parts;
        for (auto& [part, n] : g.parts) parts += (parts.empty() ? "" : ", ") + part + " " + std::to_string(n);
        std::printf("  %-12s %9ld   %s\n", g.block.c_str(), g.total, parts.c_str());
    }
    std::printf("  %-12s %9ld\n", "total", total);
    if (c.tie_embeddings)
        std::printf("  (tied: out.W is embed.table transposed, so %d x %d = %d weights fewer)\n", c.d_model, c.vocab,
                    c.d_model * c.vocab);
    if (c.activation == Activation::swiglu)
        std::printf("  (SwiGLU: each feed-forward has W_1, W_3 (%d, %d) and W_2 (%d, %d), hidden width 2 x %d / 3 = "
                    "%d)\n", c.d_model, hidden_width(c), hidden_width(c), c.d_model, c.d_ff, hidden_width(c));
    if (c.key_value_heads() < c.n_heads) {
        const int d_k = c.d_model / c.n_heads, kv = c.key_value_heads() * d_k;
        std::printf("  (grouped-query: W_k and W_v are (%d, %d), %d of %d heads, so each attention layer has %d "
                    "weights fewer; decoding keeps %d numbers a token a layer for K and V, not %d)\n", c.d_model, kv,
                    c.key_value_heads(), c.n_heads, 2 * c.d_model * (c.d_model - kv), 2 * kv, 2 * c.d_model);
    }
}

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
                        const Matrix& P = model.decoder[l].cross_attn.heads[e * n_heads + h].P;  // (1, S)
                        int strongest = int(std::max_element(P.data.begin(), P.data.end()) - P.data.begin());
                        hits[std::size_t(l) * n_heads + h] += sources[e][strongest] == chosen;
                    }
            }
        }
    }
    return emitted;
}
inline void inspect(Transformer& model, const std::vector<Example>& held_out) {
    if (held_out.empty()) {  // a score of nothing would read 0.0%
        std::printf("\n--- inspect: n/a: this model's data settings allow no held-out set ---\n");
        return;
    }
    Accuracy all = evaluate(model, held_out);
    std::printf("\n--- inspect: held-out exact-match with one head switched off (none off: %.1f%%%s) ---\n",
                100 * all.exact,
                all.total < all.asked ? fmt(", %d %s", all.total, cut_short_text(all).c_str()).c_str() : "");
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
    if (model.config.arch == Arch::decoder_only) {
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
// cannot reach past the rows the model trained with.
inline void reach_length(Transformer& model, int length, const std::string& load_path) {
    ModelConfig& c = model.config;
    if (positions_read(c, length) <= c.max_len) return;
    const std::string refused = fmt("--test-len %d with --load %s: ", length, load_path.c_str());
    switch (c.positions) {
    case Positions::sinusoidal:
    case Positions::none:
    case Positions::rope: case Positions::alibi:  // computed in attention, at any position
        c.max_len = positions_read(c, length);
        model.embed.fixed = sinusoidal_table(c.max_len, c.d_model);
        return;
    case Positions::learned:
        fail(refused + fmt("this model's learned position table has %d rows, one for each position it trained at; "
                           "train a new model with --test-len %d", c.max_len, length));
    case Positions::random:
        fail(refused + fmt("random positions read rows drawn from this model's %d, all it trained with; train a new "
                           "model with --test-len %d", c.max_len, length));
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
