// workbench/beam.hpp -- beam search (--beam K, --length-penalty A), the paper's way of decoding beside the
// tutorial's greedy decoding (train.hpp), and decode_outputs, which picks one of the two.
//
// Beam search keeps the K likeliest outputs so far of each source (hypotheses), so that a first token that
// looks worse can still win with what follows. Each position extends every hypothesis by every token and
// keeps the K best candidates by score = log_prob / ((5 + length) / 6)^alpha, log_prob the sum of the chosen
// tokens' log-softmax and the divisor GNMT's length penalty (a longer output sums more negative terms);
// length counts up to the first PAD, which ends the output, or all tokens. A hypothesis's candidates share
// one length, so with K = 1 the best is the largest logit: greedy decoding's choice, bit for bit (tested).
// The hypotheses run side by side in one decoding cache (model.hpp), which follows each kept one's parent.
#pragma once

#include "../train.hpp"

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
inline double length_penalty(int length, double alpha) { return std::pow((5.0 + length) / 6.0, alpha); }
inline double beam_score(double log_prob, int length, double alpha) { return log_prob / length_penalty(length, alpha); }

// Sequence i of the cache's stack now continues sequence from[i], its parent, and takes what the parent kept:
// its K and V in every layer, its source and its source's position rows.
inline void follow_parents(DecodingCache& cache, const std::vector<int>& from) {
    const int n_seq = int(cache.sources.size());
    for (DecodingCache::Layer& layer : cache.layers)
        for (Matrix* kept : {&layer.self_K, &layer.self_V, &layer.cross_K, &layer.cross_V}) {
            const int rows = kept->rows / n_seq;  // each sequence's rows
            Matrix gathered(int(from.size()) * rows, kept->cols);
            for (std::size_t i = 0; i < from.size(); i++)  // sequence i's rows: its parent's
                std::copy_n(&kept->at(from[i] * rows, 0), std::size_t(rows) * kept->cols,
                            &gathered.at(int(i) * rows, 0));
            *kept = std::move(gathered);
        }
    Transformer::Batch sources = cache.sources, rows = cache.source_rows;
    cache.sources.clear(), cache.source_rows.clear();
    for (int parent : from) cache.sources.push_back(sources[parent]), cache.source_rows.push_back(rows[parent]);
}

// Each source's hypotheses after `length` tokens, best score first: K of them, or all vocab^length if fewer.
// A source starts with one, START alone; its `live` hypotheses sit side by side in the decoder's stack.
inline std::vector<std::vector<Hypothesis>> beam_search(Transformer& model, const Transformer::Batch& sources,
                                                        int length, int K, double alpha) {
    const int n = int(sources.size()), vocab = model.config.vocab;
    DecodingCache cache = start_decoding(model, sources);  // sequence i of its stack is hypothesis i
    Transformer::Batch newest(n, {start_token(vocab)});      // each hypothesis's last token
    std::vector<Hypothesis> beams(n);  // source e's hypotheses: beams[e live .. (e + 1) live - 1]
    int live = 1;
    for (int t = 0; t < length; t++) {
        Matrix logits = newest_logits(model, cache, newest);  // (n live, vocab)
        const int kept = int(std::min<long>(K, long(live) * vocab));
        std::vector<Hypothesis> next;
        std::vector<int> from;
        for (int e = 0; e < n; e++) {
            struct Candidate { int parent, token; double log_prob, score; };
            std::vector<Candidate> candidates;  // in (parent, token) order: of two equal scores the first stays
            for (int i = e * live; i < (e + 1) * live; i++) {
                double max = logits.at(i, 0), sum = 0.0;  // log-softmax of row i, the max trick
                for (int v = 1; v < vocab; v++) max = std::max(max, logits.at(i, v));
                for (int v = 0; v < vocab; v++) sum += std::exp(logits.at(i, v) - max);
                const double log_sum = std::log(sum);
                const std::vector<int>& tokens = beams[i].tokens;  // its candidates' length: one more, or ended
                bool ended = std::find(tokens.begin(), tokens.end(), PAD) != tokens.end();
                const double penalty = length_penalty(ended ? output_length(tokens) : int(tokens.size()) + 1, alpha);
                for (int v = 0; v < vocab; v++) {
                    double log_prob = beams[i].log_prob + (logits.at(i, v) - max - log_sum);
                    candidates.push_back({i, v, log_prob, log_prob / penalty});
                }
            }
            std::stable_sort(candidates.begin(), candidates.end(),
                             [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
            for (int k = 0; k < kept; k++) {
                const Candidate& c = candidates[k];
                from.push_back(c.parent);
                next.push_back({beams[c.parent].tokens, c.log_prob});
                next.back().tokens.push_back(c.token);
            }
        }
        follow_parents(cache, from);
        beams = std::move(next), live = kept;
        newest.assign(beams.size(), {0});
        for (std::size_t i = 0; i < beams.size(); i++) newest[i][0] = beams[i].tokens.back();
    }
    std::vector<std::vector<Hypothesis>> found(n);
    for (std::size_t i = 0; i < beams.size(); i++) found[i / live].push_back(beams[i]);
    return found;
}

// The best output of each source: greedy decoding, or with a beam the best-scoring hypothesis.
inline std::vector<std::vector<int>> decode_outputs(Transformer& model, const Transformer::Batch& sources, int length,
                                                    const DecodeConfig& how) {
    if (how.beam == 1) return greedy_decode(model, sources, length);
    std::vector<std::vector<int>> best;
    for (std::vector<Hypothesis>& found : beam_search(model, sources, length, how.beam, how.length_penalty))
        best.push_back(found[0].tokens);
    return best;
}
