// workbench/shapes.hpp -- what a model is made of: the shape of every tensor of a forward pass (--trace-shapes)
// and the parameter counts by block (--params), read from the built model. Tests: shapes_test.cpp.
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
    const std::string norm = model.final_norm->kind(true);  // LN (LayerNorm), RMS (RMSNorm)
    const bool before = norm_before_sublayer(c.norm_place);    // pre-norm: a sublayer reads LN(x)
    const std::string x_in = before ? norm + "(x)" : "x", y_in = before ? norm + "(y)" : "y";
    std::printf("  %-50s %-30s %s\n", "tensor", "legend", "this run");
    if (has_encoder(c.arch)) trace_encoder_decoder(model, t, n_seq, S, T, x_in, y_in);
    else trace_decoder_only(model, t, n_seq, S, T, y_in);
    shape_line("final " + model.final_norm->kind(false), "(n_seq T, d_model)",
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
                           : rest.rfind("norm", 0) == 0 ? model.final_norm->kind(false) + "s"
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
