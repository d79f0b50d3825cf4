// chapters/06_decoder_only.hpp -- one causal stack, GPT's shape (--arch decoder-only).
//
// What it adds: a model without an encoder. What it changes in the first part: the Transformer builds, lists, runs
// and undoes its decoder blocks through DecoderOnly, an Architecture (model.hpp), here, in place of encode and
// next_token_logits. Decoder-only is not a second model: the paper's decoder blocks without their cross-attention,
// one stack.
#pragma once

#include <string>
#include <vector>

#include "../model.hpp"  // Transformer (this file is read where model.hpp includes it)

// The positions one input of `length` tokens reads: a decoder-only model reads its source, START and the answer
// as one sequence, twice as long (every task's answer is as long as its input).
inline int positions_read(const ModelConfig& c, int length) {
    switch (c.arch) {
    case Arch::encoder_decoder: return length;
    case Arch::decoder_only: return 2 * length;
    }
    return length;  // not reached
}

// Rows of matrices stacked, one after another: each sequence's answer rows gathered (below; chapter 10's new rows).
inline void append_rows(Matrix& Y, const Matrix& more) {  // Y (n, m) grows to (n + more.rows, m)
    Y.cols = more.cols;
    Y.data.insert(Y.data.end(), more.data.begin(), more.data.end());
    Y.rows += more.rows;
}
inline Matrix stack_rows(const std::vector<Matrix>& parts) {  // the rows of each part, one after another
    Matrix Y;
    for (const Matrix& p : parts) append_rows(Y, p);
    return Y;
}

// Decoder-only (--arch decoder-only, GPT's shape), in the encoder-decoder's place: one causal stack of decoder
// blocks without cross-attention (decoder_only_block, below) reads each source, START and the answer so far as one
// sequence of L = S + T tokens at positions 0 .. L-1, its source's PADs hidden; the rows from START on (the last T)
// predict the answer, so the loss counts the answer's positions only. -> logits (n_seq T, vocab), as the
// encoder-decoder's.
//
// The mask (n_seq queries, keys): query i of each sequence, at position first + i, may see key j when j is at or
// before it (causal) and is not one of its source's PADs (the source's first S keys: padding). Every query sees at
// least key 0, the source's first digit (a source is never empty, and its PADs come after its digits), so no row
// is all masked, and none spreads its weight over future keys.
inline Matrix causal_padding_mask(const std::vector<std::vector<int>>& sources, int queries, int first, int keys) {
    Matrix m(queries * int(sources.size()), keys);
    for (int i = 0; i < m.rows; i++)
        for (int j = 0; j < keys; j++) {
            const std::vector<int>& src = sources[i / queries];
            bool pad = j < int(src.size()) && src[j] == PAD;
            m.at(i, j) = j <= first + i % queries && !pad ? 1.0 : 0.0;
        }
    return m;
}
inline Transformer::Batch wholes(const Transformer::Batch& srcs, const Transformer::Batch& tgts_in) {
    Transformer::Batch whole = srcs;  // n_seq x (L): the source, START, the answer so far
    for (std::size_t e = 0; e < whole.size(); e++)
        whole[e].insert(whole[e].end(), tgts_in[e].begin(), tgts_in[e].end());
    return whole;
}
// A decoder-only block: the paper's DecoderBlock without cross-attention (its cross_sub and cross_attn left empty,
// never drawn): causal self-attention, then the feed-forward, each in its Sublayer. Parameters norm1, self_attn, norm2,
// ffn. x, out (n_seq L, d_model).
inline DecoderBlock decoder_only_block(const ModelConfig& c, Rng& rng) {
    DecoderBlock b;
    b.self_sub = Sublayer(c), b.ffn_sub = Sublayer(c);
    b.self_attn = MultiHeadAttention(c, rng, true);
    b.ffn = feed_forward_of(c, rng);
    return b;
}
inline void decoder_only_parameters(DecoderBlock& b, const std::string& name, ParamList& list) {
    b.self_sub.norm->list_parameters(name + ".norm1", list);
    b.self_attn.list_parameters(name + ".self_attn", list);
    b.ffn_sub.norm->list_parameters(name + ".norm2", list);
    b.ffn->list_parameters(name + ".ffn", list);
}
inline Matrix decoder_only_forward(DecoderBlock& b, const Matrix& x, const Mask& mask, int n_seq) {
    Matrix x1 = b.self_sub.forward(x, [&](const Matrix& a) { return b.self_attn.forward(a, a, mask, n_seq); });
    return b.ffn_sub.forward(x1, [&](const Matrix& a) { return b.ffn->forward(a); });
}
inline Matrix decoder_only_backward(DecoderBlock& b, const Matrix& d_out) {
    // forward: out = ffn_sub.forward(x1, ffn)
    Matrix dx1 = b.ffn_sub.backward(d_out, [&](const Matrix& d) { return b.ffn->backward(d); });
    // forward: x1 = self_sub.forward(x, causal self-attention)
    return b.self_sub.backward(dx1, [&](const Matrix& d) { return b.self_attn.backward_self(d); });
}

struct DecoderOnly : Architecture {
    std::unique_ptr<Architecture> copy() const override { return std::make_unique<DecoderOnly>(*this); }
    DecoderBlock decoder_block(const ModelConfig& c, Rng& rng) const override { return decoder_only_block(c, rng); }
    void list_parameters(Transformer& model, ParamList& list) const override {
        for (size_t i = 0; i < model.decoder.size(); i++)
            decoder_only_parameters(model.decoder[i], "decoder." + std::to_string(i), list);
    }
    Matrix forward(Transformer& model, const Transformer::Batch& srcs, const Transformer::Batch& tgts_in) override {
        model.sources = srcs, model.targets_in = tgts_in;
        const int S = int(srcs[0].size()), T = int(tgts_in[0].size()), L = S + T, n_seq = int(srcs.size());
        model.target_position_ids = model.position_ids_for(srcs, L);  // random positions: L rows drawn at once
        Matrix x = model.embed.forward(Transformer::concatenated(wholes(srcs, tgts_in)),  // (n_seq L, d_model)
                                       Transformer::concatenated(model.target_position_ids));
        x = dropout(std::move(x), model.config.dropout, model.embedding_dropout_draws(), model.target_keep);
        Mask mask(true, srcs);  // causal, and no PAD of the source (causal_padding_mask, written out: (n_seq L, L))
        for (DecoderBlock& block : model.decoder) x = decoder_only_forward(block, x, mask, n_seq);
        Matrix answer;  // (n_seq T, d_model): each sequence's rows S .. L-1
        for (int e = 0; e < n_seq; e++) append_rows(answer, take_block(x, e * L + S, T, 0, model.config.d_model));
        return model.output(model.final_norm->forward(answer));
    }
    void backward(Transformer& model, const Matrix& d_logits) override {  // undo forward, last line first
        const int S = int(model.sources[0].size()), T = int(model.targets_in[0].size()), L = S + T;
        const int n_seq = int(model.sources.size());
        // forward: logits = output(final_norm->forward(answer))
        const Matrix d_answer = model.final_norm->backward(model.output_backward(d_logits));
        Matrix dx(n_seq * L, model.config.d_model);  // forward: answer = rows S .. L-1 of each sequence; the rest get 0
        for (int e = 0; e < n_seq; e++)
            add_into_block(take_block(d_answer, e * T, T, 0, model.config.d_model), e * L + S, 0, dx);
        for (int i = int(model.decoder.size()) - 1; i >= 0; i--) dx = decoder_only_backward(model.decoder[i], dx);
        dx = dropout_backward(std::move(dx), model.target_keep);  // forward: x = dropout(embed.forward(whole))
        const Transformer::Batch whole = wholes(model.sources, model.targets_in);
        for (int e = 0; e < n_seq; e++)
            model.embed.backward(whole[e], model.target_position_ids[e], take_block(dx, e * L, L, 0, dx.cols));
    }
};
// The choice, made once as a model is built (--arch).
inline std::unique_ptr<Architecture> architecture_of(const ModelConfig& c) {
    switch (c.arch) {
    case Arch::encoder_decoder: return nullptr;  // the paper's, Transformer's own
    case Arch::decoder_only: return std::make_unique<DecoderOnly>();
    }
    return nullptr;  // not reached
}
