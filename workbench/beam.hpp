// workbench/beam.hpp -- beam search (--beam K, --length-penalty A), the paper's way of decoding beside the
// tutorial's greedy decoding (greedy_decode_cached, chapters/10_decoding.hpp), and decode_outputs, which picks one.
//
// Beam search keeps the K likeliest outputs so far of each source (hypotheses), so that a first token that
// looks worse can still win with what follows. Each position extends every live hypothesis by every token and
// keeps the K best candidates by score = log_prob / ((5 + length) / 6)^alpha, log_prob the sum of the chosen
// tokens' log-softmax and the divisor GNMT's length penalty (a longer output sums more negative terms, so
// without it a short output would win). An output ends at its first PAD, which its length counts: after it a
// hypothesis takes no more tokens and no more log-probability. START is never a candidate. A live
// hypothesis's candidates share one length, so with K = 1 the best is the largest logit: greedy decoding's
// choice, bit for bit (tested).
// The hypotheses run side by side in one decoding cache (chapters/10_decoding.hpp), which follows each kept one's
// parent.
#pragma once

#include "../chapters/10_decoding.hpp"  // the decoding cache, and the model

struct DecodeConfig {
    int beam = 1;                 // K; 1 is greedy decoding
    double length_penalty = 0.6;  // alpha; the paper's 0.6
};
struct Hypothesis {
    std::vector<int> tokens;  // (up to T) the output so far
    double log_prob = 0.0;
};
inline int output_length(const std::vector<int>& tokens) {
    auto pad = std::find(tokens.begin(), tokens.end(), PAD);
    return int(pad == tokens.end() ? tokens.size() : pad - tokens.begin() + 1);
}
inline double length_penalty(int length, double alpha) { return maths::pow((5.0 + length) / 6.0, alpha); }
inline double beam_score(double log_prob, int length, double alpha) { return log_prob / length_penalty(length, alpha); }

// Sequence i of the cache's stack now continues sequence from[i], its parent, and takes what the parent kept:
// its K and V in every block, its source and its source's position rows.
inline void follow_parents(DecodingCache& cache, const std::vector<int>& from) {
    const int n_seq = int(cache.sources.size());
    for (DecodingCache::Block& block : cache.blocks)
        for (Matrix* kept : {&block.self_K, &block.self_V, &block.cross_K, &block.cross_V}) {
            if (kept->empty()) continue;  // a decoder-only model keeps no cross-attention
            const int L = kept->rows / n_seq;  // each sequence's rows
            Matrix gathered(int(from.size()) * L, kept->cols);
            for (std::size_t i = 0; i < from.size(); i++)  // sequence i's rows: its parent's
                std::copy_n(&kept->at(from[i] * L, 0), std::size_t(L) * kept->cols, &gathered.at(int(i) * L, 0));
            *kept = std::move(gathered);
        }
    Transformer::Batch parents_sources = cache.sources, parents_position_ids = cache.position_ids;
    cache.sources.clear(), cache.position_ids.clear();
    for (int parent : from)
        cache.sources.push_back(parents_sources[parent]), cache.position_ids.push_back(parents_position_ids[parent]);
}

// Each source's hypotheses after `length` tokens, best score first: K of them, or every possible output if
// fewer. A source starts with one, START alone; its hypotheses sit side by side in the decoder's stack, source
// e's from first[e] on. A hypothesis that has emitted PAD is finished, as in GNMT's beam: its one candidate is
// itself, PAD again, with its log P and score as they were, and it competes with the live hypotheses'.
inline std::vector<std::vector<Hypothesis>> beam_search(Transformer& model, const Transformer::Batch& sources,
                                                        int length, int K, double alpha) {
    const int n = int(sources.size()), vocab = model.config.vocab, start = start_token(vocab);
    DecodingCache cache = start_decoding(model, sources);  // sequence i of its stack is hypothesis i
    Transformer::Batch newest(n, {start});                  // each hypothesis's last token
    std::vector<Hypothesis> beams(n);
    std::vector<int> first(n + 1);  // source e's hypotheses: beams[first[e] .. first[e + 1] - 1]
    for (int e = 0; e <= n; e++) first[e] = e;
    for (int t = 0; t < length; t++) {
        Matrix logits = newest_logits(model, cache, newest);  // (hypotheses, vocab)
        std::vector<Hypothesis> next;
        std::vector<int> from, next_first = {0};
        for (int e = 0; e < n; e++) {
            struct Candidate { int parent, token; double log_prob, score; };
            std::vector<Candidate> candidates;  // in (parent, token) order: of two equal scores the first stays
            for (int i = first[e]; i < first[e + 1]; i++) {
                const Hypothesis& h = beams[i];
                if (!h.tokens.empty() && h.tokens.back() == PAD) {  // finished
                    candidates.push_back({i, PAD, h.log_prob, beam_score(h.log_prob, output_length(h.tokens), alpha)});
                    continue;
                }
                double max = logits.at(i, 0), sum = 0.0;  // log-softmax of row i, the max trick
                for (int v = 1; v < vocab; v++) max = std::max(max, logits.at(i, v));
                for (int v = 0; v < vocab; v++) sum += maths::exp(logits.at(i, v) - max);
                const double log_sum = maths::log(sum);
                const double penalty = length_penalty(int(h.tokens.size()) + 1, alpha);  // each candidate's length
                for (int v = 0; v < vocab; v++) {
                    if (v == start) continue;  // an input, never an output
                    double log_prob = h.log_prob + (logits.at(i, v) - max - log_sum);
                    candidates.push_back({i, v, log_prob, log_prob / penalty});
                }
            }
            std::stable_sort(candidates.begin(), candidates.end(),
                             [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
            for (int k = 0; k < std::min(K, int(candidates.size())); k++) {
                const Candidate& c = candidates[k];
                from.push_back(c.parent);
                next.push_back({beams[c.parent].tokens, c.log_prob});
                next.back().tokens.push_back(c.token);
            }
            next_first.push_back(int(next.size()));
        }
        follow_parents(cache, from);
        beams = std::move(next), first = std::move(next_first);
        newest.assign(beams.size(), {0});
        for (std::size_t i = 0; i < beams.size(); i++) newest[i][0] = beams[i].tokens.back();
    }
    std::vector<std::vector<Hypothesis>> found(n);
    for (int e = 0; e < n; e++) found[e].assign(beams.begin() + first[e], beams.begin() + first[e + 1]);
    return found;
}

// The best output of each source: greedy decoding, or with a beam the best-scoring hypothesis.
inline std::vector<std::vector<int>> decode_outputs(Transformer& model, const Transformer::Batch& sources, int length,
                                                    const DecodeConfig& how) {
    if (how.beam == 1) return greedy_decode_cached(model, sources, length);
    std::vector<std::vector<int>> best;
    for (std::vector<Hypothesis>& found : beam_search(model, sources, length, how.beam, how.length_penalty))
        best.push_back(found[0].tokens);
    return best;
}
