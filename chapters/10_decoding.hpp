// chapters/10_decoding.hpp -- decoding with a cache: each new token runs alone through the decoder.
//
// What it adds: greedy decoding at the cost of one row a step, not the whole input (greedy_decode_cached, at the end:
// the tokens of train.hpp's greedy_decode), and the cache beam search (workbench/beam.hpp) runs on. What it changes in
// the first part: nothing; it reads the blocks' weights and calls their parts. It comes after train.hpp, which it
// includes; the program and the tests include it.
#pragma once

#include <vector>

#include "../train.hpp"  // greedy_decode, which this chapter's greedy_decode_cached equals, faster

// The masks written out, as decoding (and the tests) take them, 1 = may attend: the causal mask (T, T), and the padding
// mask (n_seq T, S), each source's T rows stacked (the rule Mask says, model.hpp, written out).
inline Matrix causal_mask(int T) {
    Matrix m(T, T);
    for (int i = 0; i < T; i++)
        for (int j = 0; j <= i; j++) m.at(i, j) = 1.0;
    return m;
}
inline Matrix padding_mask(int T, const std::vector<std::vector<int>>& sources) {
    Matrix m(T * int(sources.size()), int(sources[0].size()));
    for (int i = 0; i < m.rows; i++)
        for (int j = 0; j < m.cols; j++) m.at(i, j) = sources[i / T][j] == PAD ? 0.0 : 1.0;
    return m;
}

// Decoding with a cache (inference only: greedy_decode_cached, below; beam search, workbench/beam.hpp).
// Decoding grows each output a token at a time. Rather than run the whole prefix through the decoder again at
// every position, it keeps what every attention computed (llama2.c's RunState) and feeds only the newest
// tokens: causal self-attention adds the new rows' K and V to those kept, cross-attention reads the memory's K
// and V, made once. The new rows are those a whole-prefix pass gives, bit for bit: its later keys are masked
// and add exactly 0 (tests.cpp checks).
struct DecodingCache {
    // self_K, self_V (n_seq t, kv_heads d_k), t the tokens fed so far; cross_K, cross_V (n_seq S, kv_heads d_k)
    struct Block { Matrix self_K, self_V, cross_K, cross_V; };
    std::vector<Block> blocks;        // one per decoder block
    Transformer::Batch sources;       // n_seq x (S): each sequence's source, for the padding mask
    Transformer::Batch position_ids;  // n_seq x (S): the position ids its source read, which the output's follow
                                      // (random positions); decoder-only: n_seq x (2 S), the whole sequence's
    int position = 0;                 // the position the next tokens take: 0 for START (decoder-only: S)
};

// n_seq sequences in A (n_seq a, m) and in B (n_seq b, m) -> (n_seq (a + b), m): each sequence's rows
// from A, then its rows from B. Decoding grows every sequence's kept K and V this way.
inline Matrix join_sequences(const Matrix& A, const Matrix& B, int n_seq) {
    Matrix Y;
    for (int e = 0, a = A.rows / n_seq, b = B.rows / n_seq; e < n_seq; e++) {
        append_rows(Y, take_block(A, e * a, a, 0, A.cols));
        append_rows(Y, take_block(B, e * b, b, 0, B.cols));
    }
    return Y;
}

// MultiHeadAttention::attend for decoding: the same sums in the same order, so the same bits, but read in place
// from Q (n_seq T, d_model) and the kept K, V (n_seq S, kv_heads d_k), where attend copies out every head's slices
// for its backward; each head keeps only its map P (T, S), which --inspect reads. The queries' positions start at
// first_query (ALiBi's distances: the newest row is further on).
inline Matrix attend_kept(MultiHeadAttention& m, const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& mask,
                          int n_seq, int first_query) {
    Matrix joined(Q.rows, Q.cols);  // (n_seq T, d_model)
    const int T = Q.rows / n_seq, S = K.rows / n_seq, d_k = m.d_k;
    const double inv_sqrt_dk = 1.0 / std::sqrt(double(d_k));
    m.saved.assign(std::size_t(n_seq) * m.n_heads, SavedAttention{});
    parallel_each(n_seq, attention_work(n_seq * m.n_heads, T, S, d_k), [&](int e) {
        Matrix mask_e = mask.empty() ? mask : take_block(mask, e * T, T, 0, S);  // (T, S)
        for (int h = 0; h < m.n_heads; h++) {
            int col = h * d_k, kv_col = m.heads->key_head(h) * d_k;
            Matrix scores(T, S);  // attention(): scale(matmul_bt_fast(Q, K), inv_sqrt_dk), one sum an entry
            for (int i = 0; i < T; i++) {
                const double* q = &Q.data[std::size_t(e * T + i) * Q.cols + col];  // query i of head h
                for (int j = 0; j < S; j++) {
                    const double* k = &K.data[std::size_t(e * S + j) * K.cols + kv_col];  // key j of its K head
                    double sum = 0.0;
                    for (int p = 0; p < d_k; p++) sum += q[p] * k[p];
                    scores.at(i, j) = sum * inv_sqrt_dk;
                }
            }
            Matrix& P = m.saved[std::size_t(e) * m.n_heads + h].P;  // (T, S)
            P = m.heads->weights(std::move(scores), mask_e, h, first_query);
            for (int i = 0; i < T; i++) {  // attention(): P V, each sum from 0 in order of j, summed straight into
                                           // the zeroed join: the same bits as summing apart and adding to 0
                double* o = &joined.data[std::size_t(e * T + i) * joined.cols + col];
                for (int j = 0; j < S; j++) {
                    const double w = P.at(i, j), *v = &V.data[std::size_t(e * S + j) * V.cols + kv_col];
                    for (int p = 0; p < d_k; p++) o[p] += w * v[p];
                }
            }
        }
    });
    return m.W_o.forward(joined);
}

// DecoderBlock::forward for y (n_seq new_rows, d_model), the newest rows of each sequence (one, or a decoder-only
// model's whole prompt) from `position` on, against what `kept` holds; self_mask (n_seq new_rows, keys) hides what
// they may not see (empty: all). With rotary positions the kept keys were turned at their own positions, so only
// the newest rows turn.
inline Matrix decoder_block_next(DecoderBlock& b, const Matrix& y, DecodingCache::Block& kept, const Matrix& self_mask,
                                 const Matrix& memory_mask, int n_seq, int position) {
    MultiHeadAttention& self = b.self_attn;
    const int new_rows = y.rows / n_seq;
    Matrix y1 = b.self_sub.forward(y, [&](const Matrix& a) {
        // each sequence's kept rows, then its new ones
        kept.self_K = join_sequences(kept.self_K, self.heads->ready(self.W_k.forward(a), new_rows, position), n_seq);
        kept.self_V = join_sequences(kept.self_V, self.W_v.forward(a), n_seq);
        return attend_kept(self, self.heads->ready(self.W_q.forward(a), new_rows, position), kept.self_K, kept.self_V,
                           self_mask, n_seq, position);
    });
    if (kept.cross_K.empty())  // no memory kept: a decoder-only block (chapter 06's, no cross-attention)
        return b.ffn_sub.forward(y1, [&](const Matrix& a) { return b.ffn->forward(a); });
    Matrix y2 = b.cross_sub.forward(y1, [&](const Matrix& a) {
        return attend_kept(b.cross_attn, b.cross_attn.W_q.forward(a), kept.cross_K, kept.cross_V, memory_mask,
                           n_seq, 0);
    });
    return b.ffn_sub.forward(y2, [&](const Matrix& a) { return b.ffn->forward(a); });
}

// Decoder-only: run the sources through the stack once, keeping every layer's K and V; START comes next.
inline DecodingCache start_decoding_whole(Transformer& model, const Transformer::Batch& sources) {
    DecodingCache cache;
    cache.sources = sources;
    const int S = int(sources[0].size()), n_seq = int(sources.size());
    cache.position_ids = model.position_ids_for(sources, positions_read(model.config, S));
    Transformer::Batch source_ids;  // the sources' own position ids, the first S of each
    for (const std::vector<int>& ids : cache.position_ids) source_ids.push_back({ids.begin(), ids.begin() + S});
    Matrix x = model.embed.forward(Transformer::concatenated(sources), Transformer::concatenated(source_ids));
    Matrix mask = causal_padding_mask(sources, S, 0, S);  // (n_seq S, S)
    cache.blocks.resize(model.decoder.size());
    for (std::size_t i = 0; i < model.decoder.size(); i++)
        x = decoder_block_next(model.decoder[i], x, cache.blocks[i], mask, Matrix(), n_seq, 0);
    cache.position = S;
    return cache;
}
// Encode the sources once and make every cross-attention's K and V from the memory (n_seq S, d_model).
inline DecodingCache start_decoding(Transformer& model, const Transformer::Batch& sources) {
    switch (model.config.arch) {
    case Arch::encoder_decoder: break;
    case Arch::decoder_only: return start_decoding_whole(model, sources);
    }
    DecodingCache cache;
    cache.sources = sources;
    Matrix memory = model.encode(sources);
    cache.position_ids = model.source_position_ids;
    for (DecoderBlock& block : model.decoder)
        cache.blocks.push_back({Matrix(), Matrix(), block.cross_attn.W_k.forward(memory),
                                block.cross_attn.W_v.forward(memory)});
    return cache;
}

// The logits (n_seq, vocab) of the token after each sequence's newest (n_seq x (1)), at cache.position.
inline Matrix newest_logits(Transformer& model, DecodingCache& cache, const Transformer::Batch& newest) {
    const int n_seq = int(newest.size());
    std::vector<int> ids;  // the position id (row of the position table) each newest token reads
    for (int e = 0; e < n_seq; e++) ids.push_back(model.target_position_id(cache.position_ids[e], cache.position));
    Matrix y = model.embed.forward(Transformer::concatenated(newest), ids);  // (n_seq, d_model)
    Matrix memory_mask, self_mask;  // cross-attention's (n_seq, S), or decoder-only's self-attention's (n_seq, keys)
    switch (model.config.arch) {
    case Arch::encoder_decoder: memory_mask = padding_mask(1, cache.sources); break;
    case Arch::decoder_only:
        self_mask = causal_padding_mask(cache.sources, 1, cache.position, cache.position + 1);
        break;
    }
    for (std::size_t i = 0; i < model.decoder.size(); i++)
        y = decoder_block_next(model.decoder[i], y, cache.blocks[i], self_mask, memory_mask, n_seq, cache.position);
    cache.position++;
    return model.output(model.final_norm->forward(y));
}

// ---------------------------------------------------------------------------------------------
// Greedy decoding with the cache (train.hpp's greedy_decode, each step one row; the program's): read the sources
// once, then feed each sequence's newest token alone. greedy_next: every sequence's next token (`newest` holds its
// last and becomes the chosen one); a function of its own so that --inspect can read each position's maps.
inline void greedy_next(Transformer& model, DecodingCache& cache, Transformer::Batch& newest) {
    Matrix logits = newest_logits(model, cache, newest);  // (n_seq, vocab)
    for (std::size_t e = 0; e < newest.size(); e++)
        if (newest[e][0] != PAD) newest[e][0] = greedy_choice(logits, int(e));  // an ended one: PAD again
}
inline std::vector<std::vector<int>> greedy_decode_cached(Transformer& model, const Transformer::Batch& sources,
                                                          int length) {
    DecodingCache cache = start_decoding(model, sources);
    Transformer::Batch newest(sources.size(), {start_token(model.config.vocab)});  // each sequence's last token
    std::vector<std::vector<int>> decoded(sources.size());
    for (int t = 0; t < length; t++) {
        greedy_next(model, cache, newest);
        for (std::size_t e = 0; e < decoded.size(); e++) decoded[e].push_back(newest[e][0]);
    }
    return decoded;
}
