// workbench/inspect.hpp -- looking inside a model: the shape of every tensor (--trace-shapes), the parameter counts
// (--params), what a trained model relies on (--inspect), and how it does at every input length (--test-len).
#pragma once

#include "evaluate.hpp"
#include "settings.hpp"
#include "terminal.hpp"

// The model's own tensors by name (Transformer::parameters(), the checkpoint's names), which --trace-shapes and
// --params read: each weight's shape, and whether a block has it, come from the built model; else (0, 0).
struct Tensors {
    ParamList list;
    explicit Tensors(Transformer& model) : list(model.parameters()) {}
    bool has(const std::string& name) const {
        return std::any_of(list.begin(), list.end(), [&](const auto& p) { return p.first == name; });
    }
    const Matrix& operator[](const std::string& name) const {
        static const Matrix none;
        for (const auto& [n, p] : list)
            if (n == name) return p->value;
        return none;
    }
    int blocks(const std::string& stack) const {  // "encoder" or "decoder": its blocks, 0 .. n-1
        int n = 0;
        while (has(stack + "." + std::to_string(n) + ".self_attn.W_q")) n++;
        return n;
    }
};

// --trace-shapes: one forward pass of a mini-batch, then every tensor of it, in order. Each weight's shape is the
// model's own (its parameter list); an activation is n_seq sequences of a length stacked as in training (n_seq S,
// d_model), as wide as the weight that made it or reads it; the logits are the pass's own.
inline void shape_line(const std::string& what, const std::string& legend, const std::string& numbers) {
    std::printf("  %-50s %-30s %s\n", what.c_str(), legend.c_str(), numbers.c_str());
}
inline std::string weight_shapes(const Matrix& W, const Matrix& b) { return shape_text(W) + ", " + shape_text(b); }
// One attention layer ("decoder.0.cross_attn"): queries from n_seq sequences of Lq rows, keys and values from n_seq
// of Lk; Q and K are those lengths' legends ("T", "S"), q_in and kv what the queries and the keys and values read.
// Rotary positions and ALiBi act in self-attention only.
inline void trace_attention(const Tensors& t, const ModelConfig& c, const std::string& layer, bool self, int n_seq,
                            int Lq, int Lk, const std::string& Q, const std::string& K, const std::string& q_in,
                            const std::string& kv) {
    const Matrix &W_q = t[layer + ".W_q"], &W_k = t[layer + ".W_k"], &W_o = t[layer + ".W_o"];
    const int d_k = W_q.cols / c.n_heads, kv_heads = W_k.cols / d_k;  // W_k is kv_heads d_k wide
    const bool grouped = kv_heads < c.n_heads;                          // grouped-query attention
    const std::string kv_width = grouped ? "kv_heads d_k" : "d_model";
    shape_line("queries read " + q_in, "(n_seq " + Q + ", d_model)", shape_text(n_seq * Lq, W_q.rows));
    shape_line("keys and values read " + kv, "(n_seq " + K + ", d_model)", shape_text(n_seq * Lk, W_k.rows));
    if (grouped) {
        shape_line("W_q", "(d_model, d_model)", shape_text(W_q));
        shape_line(fmt("W_k, W_v (each; %d key-value head%s)", kv_heads, kv_heads == 1 ? "" : "s"),
                   "(d_model, kv_heads d_k)", shape_text(W_k));
    } else {
        shape_line("W_q, W_k, W_v (each)", "(d_model, d_model)", shape_text(W_q));
    }
    shape_line("Q = " + q_in + " W_q", "(n_seq " + Q + ", d_model)", shape_text(n_seq * Lq, W_q.cols));
    shape_line("K = " + kv + " W_k, V = " + kv + " W_v", "(n_seq " + K + ", " + kv_width + ")",
               shape_text(n_seq * Lk, W_k.cols));
    if (self && turns_queries_and_keys(c.positions))
        shape_line("Q, K turned by position (rotary; shapes unchanged)", "", "");
    shape_line("one sequence's head: Q_h (columns h*d_k ..)", "(" + Q + ", d_k)", shape_text(Lq, d_k));
    shape_line(grouped ? fmt("one sequence's head: K_h, V_h (one for %d heads)", c.n_heads / kv_heads)
                       : "one sequence's head: K_h, V_h", "(" + K + ", d_k)", shape_text(Lk, d_k));
    shape_line(self && lowers_scores_by_distance(c.positions) ? "P_h = softmax(masked(Q_h K_h^T/sqrt(d_k) - ALiBi))"
                                                              : "P_h = softmax(masked(Q_h K_h^T / sqrt(d_k)))",
               "(" + Q + ", " + K + ")", shape_text(Lq, Lk));
    shape_line("P_h V_h", "(" + Q + ", d_k)", shape_text(Lq, d_k));
    shape_line("n_heads heads joined side by side", "(n_seq " + Q + ", d_model)", shape_text(n_seq * Lq, W_o.rows));
    shape_line("joined W_o, added to the residual", "(n_seq " + Q + ", d_model)", shape_text(n_seq * Lq, W_o.cols));
}
// One feed-forward ("encoder.0.ffn") over `rows` rows, legend N ("n_seq S"; an expert's "n_i"). A third matrix, W_3,
// is SwiGLU's: the gate's partner.
inline void trace_feed_forward(const Tensors& t, const ModelConfig& c, const std::string& ffn, int rows,
                               const std::string& N, const std::string& in) {
    if (t.has(ffn + ".router.W")) {  // a mixture of experts (chapter 11): the router, then each expert on its rows
        const Matrix& W_router = t[ffn + ".router.W"];
        const int E = W_router.cols, K = c.top_k();
        shape_line("reads " + in, "(" + N + ", d_model)", shape_text(rows, W_router.rows));
        shape_line("W_router (no bias)", "(d_model, E)", shape_text(W_router));
        shape_line("scores = " + in + " W_router", "(" + N + ", E)", shape_text(rows, E));
        shape_line("top-k: K experts a row; gate = softmax of the K", "(" + N + ", K)",
                   shape_text(rows, K));
        std::printf("  each of the E = %d experts, on the n_i rows routed to it (sum n_i = K %s = %d; even: n_i = %d):\n", E,
                    N.c_str(), K * rows, K * rows / E);
        trace_feed_forward(t, c, ffn + ".experts.0", K * rows / E, "n_i", "its rows");  // n_i: K rows / E if even
        shape_line("out = sum of gate * expert out, scattered back", "(" + N + ", d_model)",
                   shape_text(rows, W_router.rows));
        if (t.has(ffn + ".shared.0.W_1"))
            std::printf("  and %d shared expert%s on every row, as one feed-forward, added\n", c.shared_experts,
                        c.shared_experts == 1 ? "" : "s");
        return;
    }
    const Matrix &W_1 = t[ffn + ".W_1"], &W_2 = t[ffn + ".W_2"], &W_3 = t[ffn + ".W_3"];
    const bool gated = t.has(ffn + ".W_3");
    const std::string ff = gated ? "d_h" : "d_ff";  // SwiGLU's hidden width d_h is 2 d_ff / 3
    shape_line("reads " + in, "(" + N + ", d_model)", shape_text(rows, W_1.rows));
    shape_line(gated ? "W_1, b_1 (the gate)" : "W_1, b_1", "(d_model, " + ff + "), (1, " + ff + ")",
               weight_shapes(W_1, t[ffn + ".b_1"]));
    shape_line("hidden = " + in + " W_1 + b_1", "(" + N + ", " + ff + ")", shape_text(rows, W_1.cols));
    if (gated) {
        shape_line("W_3, b_3 (the partner)", "(d_model, " + ff + "), (1, " + ff + ")",
                   weight_shapes(W_3, t[ffn + ".b_3"]));
        shape_line("partner = " + in + " W_3 + b_3", "(" + N + ", " + ff + ")", shape_text(rows, W_3.cols));
        shape_line("act = silu(hidden) * partner", "(" + N + ", " + ff + ")", shape_text(rows, W_2.rows));
    } else {
        shape_line(ACTIVATION_NAMES[int(c.activation)] + "(hidden)", "(" + N + ", d_ff)",
                   shape_text(rows, W_2.rows));
    }
    shape_line("W_2, b_2", "(" + ff + ", d_model), (1, d_model)", weight_shapes(W_2, t[ffn + ".b_2"]));
    const std::string to = in == "its rows" ? ", expert i's output" : ", added to the residual";
    shape_line(gated ? "out = act W_2 + b_2" + to : "out = act(hidden) W_2 + b_2" + to, "(" + N + ", d_model)",
               shape_text(rows, W_2.cols));
}
// Encoder block i over n_seq sources of S rows.
inline void trace_encoder_block(const Tensors& t, const ModelConfig& c, int i, int n_seq, int S,
                                const std::string& x_in) {
    const std::string block = "encoder." + std::to_string(i);
    std::printf("%s self-attention (padding mask (n_seq S, S))\n", block.c_str());
    trace_attention(t, c, block + ".self_attn", true, n_seq, S, S, "S", "S", x_in, x_in);
    std::printf("%s feed-forward\n", block.c_str());
    trace_feed_forward(t, c, block + ".ffn", n_seq * S, "n_seq S", x_in);
}
// Decoder block i over n_seq sequences of L rows, legend T ("T"; a decoder-only model's, "L": source, START and
// answer); with cross-attention, its memory has S rows a sequence.
inline void trace_decoder_block(const Tensors& t, const ModelConfig& c, int i, int n_seq, int L, int S,
                                const std::string& y_in, const std::string& T) {
    const std::string block = "decoder." + std::to_string(i);
    const bool cross = t.has(block + ".cross_attn.W_q");
    std::printf(cross ? "%s causal self-attention (causal mask (n_seq T, T))\n"
                      : "%s causal self-attention (causal mask, the source's PADs hidden (n_seq L, L))\n",
                block.c_str());
    trace_attention(t, c, block + ".self_attn", true, n_seq, L, L, T, T, y_in, y_in);
    if (cross) {
        std::printf("%s cross-attention (queries from the decoder, keys and values from the memory)\n", block.c_str());
        trace_attention(t, c, block + ".cross_attn", false, n_seq, L, S, "T", "S", y_in, "memory");
    }
    std::printf("%s feed-forward\n", block.c_str());
    trace_feed_forward(t, c, block + ".ffn", n_seq * L, "n_seq " + T, y_in);
}
// The embedding table and the position table the model adds (none with rope, ALiBi or none: Embedding's own answer).
inline const Matrix* trace_tables(Transformer& model, const Tensors& t) {
    shape_line("embedding table", "(vocab, d_model)", shape_text(t["embed.table"]));
    const Matrix* positions = model.embed.position_table();
    if (positions) shape_line("position table", "(max_len, d_model)", shape_text(*positions));
    return positions;
}
// A decoder-only model: one stack over source, START and answer (L = S + T rows a sequence).
inline void trace_decoder_only(Transformer& model, const Tensors& t, int n_seq, int S, int T, const std::string& y_in) {
    const int L = S + T, d_model = t["embed.table"].cols;
    std::printf("the one sequence: source, START, answer (L = S + T = %d)\n", L);
    shape_line("tokens: source, START, target[0 .. T-2]", "(n_seq, L)", shape_text(n_seq, L));
    const bool positions = trace_tables(model, t);
    shape_line(positions ? "y = table[tokens] * scale + positions" : "y = table[tokens] * scale", "(n_seq L, d_model)",
               shape_text(n_seq * L, d_model));
    for (int i = 0; i < t.blocks("decoder"); i++) trace_decoder_block(t, model.config, i, n_seq, L, S, y_in, "L");
    std::printf("output\n");
    shape_line("the answer's rows: the last T of each sequence", "(n_seq T, d_model)", shape_text(n_seq * T, d_model));
}
inline void trace_encoder_decoder(Transformer& model, const Tensors& t, int n_seq, int S, int T,
                                  const std::string& x_in, const std::string& y_in) {
    const int d_model = t["embed.table"].cols;
    std::printf("encoder input\n");
    shape_line("source tokens", "(n_seq, S)", shape_text(n_seq, S));
    const bool positions = trace_tables(model, t);
    shape_line(positions ? "x = table[source] * scale + positions" : "x = table[source] * scale", "(n_seq S, d_model)",
               shape_text(n_seq * S, d_model));
    for (int i = 0; i < t.blocks("encoder"); i++) trace_encoder_block(t, model.config, i, n_seq, S, x_in);
    std::printf("encoder output\n");
    shape_line("memory = the last encoder block's output", "(n_seq S, d_model)", shape_text(n_seq * S, d_model));
    std::printf("decoder input\n");
    shape_line("decoder input tokens: START, target[0 .. T-2]", "(n_seq, T)", shape_text(n_seq, T));
    shape_line(positions ? "y = table[decoder input] * scale + positions" : "y = table[decoder input] * scale",
               "(n_seq T, d_model)", shape_text(n_seq * T, d_model));
    for (int i = 0; i < t.blocks("decoder"); i++) trace_decoder_block(t, model.config, i, n_seq, T, S, y_in, "T");
    std::printf("output\n");
}
inline void trace_shapes(Transformer& model, const std::vector<Example>& batch) {
    const ModelConfig& c = model.config;
    Inputs in = inputs_of(batch, 0, batch.size());
    Matrix logits = model.forward(in.sources, in.targets_in);
    const Tensors t(model);
    const int n_seq = int(batch.size()), S = int(in.sources[0].size()), T = int(in.targets_in[0].size());
    const bool gated = t.has("decoder.0.ffn.W_3");  // SwiGLU
    std::printf("--- shapes on one forward pass of a training batch ---\n");
    std::printf("n_seq = %d, S = %d, T = %d, d_model = %d, n_heads = %d, d_k = %d, d_ff = %d, vocab = %d%s\n\n",
                n_seq, S, T, c.d_model, c.n_heads, c.d_model / c.n_heads, c.d_ff, c.vocab,
                gated ? fmt(", d_h = 2 d_ff / 3 = %d", t["decoder.0.ffn.W_1"].cols).c_str() : "");
    if (lowers_scores_by_distance(c.positions))
        std::printf("ALiBi: head h's scores minus m_h |i - j|, m_h its slope\n\n");
    const std::string norm = model.final_norm.short_kind();  // LN (LayerNorm), RMS (RMSNorm)
    const bool before = norm_before_sublayer(c.norm_place);    // pre-norm: a sublayer reads LN(x)
    const std::string x_in = before ? norm + "(x)" : "x", y_in = before ? norm + "(y)" : "y";
    std::printf("  %-50s %-30s %s\n", "tensor", "legend", "this run");
    if (has_encoder(c.arch)) trace_encoder_decoder(model, t, n_seq, S, T, x_in, y_in);
    else trace_decoder_only(model, t, n_seq, S, T, y_in);
    shape_line("final " + model.final_norm.kind(), "(n_seq T, d_model)",
               shape_text(n_seq * T, t["final_norm.gamma"].cols));
    if (!t.has("out.W")) {  // tied: the output projection is the embedding table, transposed
        const Matrix& table = t["embed.table"];
        shape_line("W_out = table^T (tied), b_out", "(d_model, vocab), (1, vocab)",
                   shape_text(table.cols, table.rows) + ", " + shape_text(t["out.b"]));
    } else {
        shape_line("W_out, b_out", "(d_model, vocab), (1, vocab)", weight_shapes(t["out.W"], t["out.b"]));
    }
    shape_line("logits = " + norm + "(y) W_out + b_out", "(n_seq T, vocab)", shape_text(logits));
    const Matrix &W_q = t["decoder.0.self_attn.W_q"], &W_k = t["decoder.0.self_attn.W_k"];
    if (W_k.cols < W_q.cols) {  // what decoding keeps a layer: kv_heads of n_heads heads' K and V
        const int kv_heads = W_k.cols / (W_q.cols / c.n_heads);
        std::printf("decoding cache, each decoder layer (grouped-query: %d of %d heads' keys and values)\n", kv_heads,
                    c.n_heads);
        shape_line("self-attention K, V (each), after t tokens", "(n_seq t, kv_heads d_k)",
                   fmt("(%d t, %d)", n_seq, W_k.cols));
        if (t.has("decoder.0.cross_attn.W_k"))
            shape_line("cross-attention K, V (each)", "(n_seq S, kv_heads d_k)",
                       shape_text(n_seq * S, t["decoder.0.cross_attn.W_k"].cols));
    }
}

// Parameter counts by block: "encoder.0.self_attn.W_q" counts for encoder.0, and inside it for self_attn. Then what
// a variant changes, said from the tensors it has: tied embeddings have no out.W, SwiGLU a W_3, grouped-query
// attention a narrower W_k and W_v.
inline void print_params(Transformer& model) {
    const ModelConfig& c = model.config;
    const Tensors t(model);
    struct Group { std::string block; long total = 0; std::vector<std::pair<std::string, long>> parts; };
    std::vector<Group> groups;
    long total = 0;
    for (auto& [name, p] : t.list) {
        bool layered = name.rfind("encoder.", 0) == 0 || name.rfind("decoder.", 0) == 0;
        std::size_t end = name.find('.', layered ? name.find('.') + 1 : 0);
        std::string block = name.substr(0, end), rest = name.substr(end + 1);
        std::string part = !layered                     ? rest
                           : rest.rfind("norm", 0) == 0 ? model.final_norm.kind() + "s"
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
    const Matrix& table = t["embed.table"];  // (vocab, d_model)
    if (!t.has("out.W"))
        std::printf("  (tied: out.W is embed.table transposed, so %d x %d = %d weights fewer)\n", table.cols,
                    table.rows, table.cols * table.rows);
    const std::string ffn = c.experts > 0 ? "decoder.0.ffn.experts.0" : "decoder.0.ffn";  // (an expert's, chapter 11)
    const Matrix &W_1 = t[ffn + ".W_1"], &W_2 = t[ffn + ".W_2"];
    if (t.has(ffn + ".W_3"))
        std::printf("  (SwiGLU: each feed-forward has W_1, W_3 (%d, %d) and W_2 (%d, %d), hidden width 2 x %d / 3 = "
                    "%d)\n", W_1.rows, W_1.cols, W_2.rows, W_2.cols, c.d_ff, W_1.cols);
    if (c.experts > 0) {  // chapter 11: a token goes through the router, K of the E experts and the N shared
        long one_expert = 0;
        for (auto& [name, p] : t.list)
            if (name.rfind("decoder.0.ffn.experts.0.", 0) == 0) one_expert += long(p->value.data.size());
        const long idle = long(c.enc_layers + c.dec_layers) * (c.experts - c.top_k()) * one_expert;
        std::printf("  (experts: each feed-forward is %d experts of %ld weights, %d shared, and a router (%d, %d); a "
                    "token goes through %d of the %d: active per token %ld of the %ld)\n", c.experts, one_expert,
                    c.shared_experts, c.d_model, c.experts, c.top_k(), c.experts, total - idle, total);
    }
    const Matrix &W_q = t["decoder.0.self_attn.W_q"], &W_k = t["decoder.0.self_attn.W_k"];
    if (W_k.cols < W_q.cols) {  // K and V narrower than Q: kv_heads d_k wide
        const int kv = W_k.cols, d = W_q.cols;
        std::printf("  (grouped-query: W_k and W_v are (%d, %d), %d of %d heads, so each attention layer has %d "
                    "weights fewer; decoding keeps %d numbers a token a layer for K and V, not %d)\n", W_k.rows, kv,
                    kv / (d / c.n_heads), c.n_heads, 2 * W_k.rows * (d - kv), 2 * kv, 2 * d);
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
    auto show = [&](const std::string& name, const FeedForwardBlock& ffn, const std::vector<int>& tokens) {
        const Experts& moe = std::get<Experts>(ffn.block);
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
        model.embed.fixed = sinusoidal_table(c.max_len, c.d_model);
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
