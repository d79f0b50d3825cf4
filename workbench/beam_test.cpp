// workbench/beam_test.cpp -- tests of beam search (beam.hpp): the length penalty by hand, a beam of 1 is
// greedy decoding bit for bit, and a beam as wide as every output finds the exhaustive search's best; with experts
// (chapter 11), the cache and the beam as exact as without.
#include "test_helpers.hpp"
#include "evaluate.hpp"

// The length penalty by hand: ((5 + 5) / 6)^0.6 = 1.35866..., so log P -1 scores -0.736022...; alpha 0 leaves
// log P as it is. A length counts up to the first PAD, PAD included.
// A beam of 1 is greedy decoding, bit for bit: 1,000 held-out inputs, an untrained and a trained model,
// lengths 3 to 5 (PAD ends some outputs), with and without the penalty.
TEST_CASE("beam search: the length penalty by hand, and a beam of 1 is greedy decoding bit for bit") {
    CHECK(beam_score(-1.0, 5, 0.6) == doctest::Approx(-1.0 / std::pow(10.0 / 6.0, 0.6)).epsilon(1e-15));
    CHECK(beam_score(-1.0, 5, 0.6) == doctest::Approx(-0.7360219).epsilon(1e-6));
    CHECK(beam_score(-2.5, 3, 0.0) == -2.5);
    CHECK(output_length({3, 0, 0}) == 2);
    CHECK(output_length({1, 2, 3}) == 3);
    CHECK(output_length({0, 0, 0}) == 1);
    DataConfig d;
    d.min_len = 3;
    Dataset data(d);
    Transformer model(fit_to_data(ModelConfig(), d), 3);
    TrainConfig t;  // 300 SGD steps of 16 examples at the rate 0.2
    t.lr = 0.2, t.schedule = Schedule::constant;
    TrainState state(t, 3);
    for (int trained = 0; trained < 2; trained++) {
        for (long step = 1; trained && step <= 300; step++) train_step(model, data, t, state, 300);
        std::vector<std::vector<int>> greedy = decode_all(model, data.held_out);
        for (double alpha : {0.0, 0.6}) {
            std::vector<std::vector<int>> beam = decode_all(model, data.held_out, DecodeConfig{1, alpha});
            int same = 0;
            for (std::size_t k = 0; k < greedy.size(); k++) same += beam[k] == greedy[k];
            INFO("trained " << trained << ", alpha " << alpha);
            CHECK(same == int(greedy.size()));
        }
        Accuracy a = evaluate(model, data.held_out);
        CHECK((trained ? a.exact > 0.3 : a.exact < 0.05));  // both regimes: wrong outputs and right ones
    }
}

// The possible outputs of vocab 4 (PAD, digits 1 and 2, START) and length 3: never START, and PAD after the first
// PAD: 1 + 2 + 4 + 8 = 15. A beam as wide as 64 keeps them all, and its best is the best of an exhaustive
// search: every output scored by one teacher-forced pass (log P is the sum of the chosen tokens' log-softmax
// up to the first PAD: after it, nothing), with the same length penalty. The log P that beam search added up
// position by position, through its reordered cache, agrees with the teacher-forced one. On this model the
// penalty decides: alpha 0 keeps an output that ends after one digit, alpha 0.6 and 2 a longer one.
TEST_CASE("beam search: as wide as every possible output, it finds the exhaustive search's best") {
    DataConfig d;
    d.max_digit = 2, d.seq_len = 3, d.min_len = 1;
    ModelConfig c = fit_to_data(ModelConfig(), d);
    c.d_model = 8;
    Transformer model(c, 21);
    Rng rng(138);  // of the first 400 seeds, one whose best output the paper's alpha changes
    for (auto& [name, p] : model.parameters())  // a model with opinions: far from uniform log-probabilities
        for (double& v : p->value.data) v += rng.uniform(-0.5, 0.5);
    const std::vector<int> source = {2, 1, PAD};
    std::vector<std::vector<int>> possible;  // every output: digits 1 and 2, then PAD to the end
    for (int code = 0; code < 27; code++) {
        std::vector<int> tokens = {code / 9, code / 3 % 3, code % 3};
        if (std::is_sorted(tokens.begin(), tokens.end(), [](int a, int b) { return a != PAD && b == PAD; }))
            possible.push_back(tokens);
    }
    REQUIRE(possible.size() == 15u);
    std::vector<std::vector<int>> best_of;  // the best output at each alpha: the penalty changes it
    for (double alpha : {0.0, 0.6, 2.0}) {
        std::vector<Hypothesis> found = beam_search(model, {source}, 3, 64, alpha)[0];
        REQUIRE(found.size() == 15u);
        double best = -INFINITY;
        std::vector<int> best_tokens;
        std::set<std::vector<int>> outputs;
        for (const std::vector<int>& tokens : possible) {
            Matrix logits = model.forward({source}, {shifted_right(tokens, c.vocab)});  // (3, vocab)
            double log_prob = 0.0;
            for (int t = 0; t < output_length(tokens); t++) {  // up to the first PAD
                double max = logits.at(t, 0), sum = 0.0;
                for (int v = 1; v < c.vocab; v++) max = std::max(max, logits.at(t, v));
                for (int v = 0; v < c.vocab; v++) sum += std::exp(logits.at(t, v) - max);
                log_prob += logits.at(t, tokens[t]) - max - std::log(sum);
            }
            double score = beam_score(log_prob, output_length(tokens), alpha);
            if (score > best) best = score, best_tokens = tokens;
            for (const Hypothesis& h : found)
                if (h.tokens == tokens) CHECK(h.log_prob == doctest::Approx(log_prob).epsilon(1e-12));
        }
        for (const Hypothesis& h : found) outputs.insert(h.tokens);
        INFO("alpha " << alpha);
        CHECK(outputs == std::set<std::vector<int>>(possible.begin(), possible.end()));
        CHECK(found[0].tokens == best_tokens);
        CHECK(beam_score(found[0].log_prob, output_length(found[0].tokens), alpha) == doctest::Approx(best));
        best_of.push_back(found[0].tokens);
    }
    CHECK(best_of[0] == std::vector<int>{2, PAD, PAD});  // ended after one digit: length 2
    CHECK(best_of[1] == std::vector<int>{2, 2, 2});      // the paper's 0.6 favours the longer output
    CHECK(best_of[2] == std::vector<int>{2, 2, 2});
}

// An output ends at its first PAD, and START is never one: on an untrained model (where both happened before
// this rule), greedy decoding and a beam of 16 over the held-out set give no output with START and none with a
// digit after a PAD; a finished hypothesis's log P stays what it was when it emitted PAD.
TEST_CASE("decoding: an output ends at its first PAD, and never contains START") {
    DataConfig d;
    d.seq_len = 6, d.min_len = 2;
    Dataset data(d, {}, 200, 5);
    Transformer model(fit_to_data(ModelConfig(), d), 2);
    const int start = start_token(model.config.vocab);
    auto well_formed = [&](const std::vector<int>& out) {
        bool ended = false;
        for (int token : out) {
            if (token == start || (ended && token != PAD)) return false;
            ended = ended || token == PAD;
        }
        return true;
    };
    int ended_early = 0;
    for (const std::vector<int>& out : decode_all(model, data.held_out)) {
        CHECK(well_formed(out));
        ended_early += output_length(out) < int(out.size());
    }
    CHECK(ended_early > 0);  // the rule was put to work
    Transformer::Batch sources = inputs_of(data.held_out, 0, 20).sources;
    std::vector<std::vector<Hypothesis>> found = beam_search(model, sources, d.seq_len, 16, 0.6);
    int finished_early = 0;
    for (std::size_t e = 0; e < sources.size(); e++)
        for (const Hypothesis& h : found[e]) {
            CHECK(well_formed(h.tokens));
            // log P, teacher-forced, summed up to the first PAD only: what the hypothesis carries
            Matrix logits = model.forward({sources[e]}, {shifted_right(h.tokens, model.config.vocab)});
            double log_prob = 0.0;
            for (int t = 0; t < output_length(h.tokens); t++) {
                double max = logits.at(t, 0), sum = 0.0;
                for (int v = 1; v < logits.cols; v++) max = std::max(max, logits.at(t, v));
                for (int v = 0; v < logits.cols; v++) sum += std::exp(logits.at(t, v) - max);
                log_prob += logits.at(t, h.tokens[t]) - max - std::log(sum);
            }
            CHECK(h.log_prob == doctest::Approx(log_prob).epsilon(1e-12));
            finished_early += output_length(h.tokens) < d.seq_len;
        }
    CHECK(finished_early > 0);
}

// Decoding composes with experts (chapter 11): the router sends each row by itself, so the cache's one new row a step
// goes where the whole prefix's row would. On a trained model with E = 4, K = 2, one shared expert and the balance
// loss, encoder-decoder and decoder-only: greedy decoding with the cache gives every position's logits of decoding
// without it (the whole prefix run again each step), bit for bit; a beam of 1 is greedy decoding; and a beam of 3's
// log P, added up through its reordered cache, is a teacher-forced pass's, bit for bit (the same sums, maths::exp
// and maths::log as beam_search takes them).
TEST_CASE("decoding with experts: the cache is decoding without it bit for bit, a beam of 1 is greedy") {
    for (Arch arch : {Arch::encoder_decoder, Arch::decoder_only}) {
        INFO(std::string(arch == Arch::decoder_only ? "decoder-only" : "encoder-decoder"));
        DataConfig d;
        Dataset data(d, {}, 200, 5);
        ModelConfig c;
        c.arch = arch;
        c = fit_to_data(c, d);
        c.experts = 4, c.top_k_asked = 2, c.shared_experts = 1, c.balance = 0.01;
        if (arch == Arch::decoder_only) c.enc_layers = 0;  // (as --arch decoder-only sets it)
        Transformer model(c, 3);
        TrainConfig t;
        t.lr = 0.2, t.schedule = Schedule::constant;
        TrainState state(t, 3);
        for (long step = 1; step <= 300; step++) train_step(model, data, t, state, 300);
        const int T = d.seq_len, vocab = c.vocab, start = start_token(vocab);
        Transformer::Batch sources = inputs_of(data.held_out, 0, 200).sources;
        // Without the cache: every step runs each output so far (START first) through the whole model again.
        std::vector<std::vector<int>> uncached(sources.size());
        Transformer::Batch prefix(sources.size(), {start});
        DecodingCache cache = start_decoding(model, sources);
        Transformer::Batch newest(sources.size(), {start});
        long differing = 0;
        for (int step = 0; step < T; step++) {
            const Matrix full = model.forward(sources, prefix);  // (n_seq (step + 1), vocab)
            const Matrix kept = newest_logits(model, cache, newest);  // (n_seq, vocab)
            for (std::size_t e = 0; e < sources.size(); e++) {
                const int row = int(e) * (step + 1) + step;  // sequence e's newest position
                int best = 0;
                for (int v = 0; v < vocab; v++) {
                    differing += full.at(row, v) != kept.at(int(e), v);
                    if (v != start && v > 0 && full.at(row, v) > full.at(row, best)) best = v;
                }
                const int token = !uncached[e].empty() && uncached[e].back() == PAD ? PAD : best;
                uncached[e].push_back(token), prefix[e].push_back(token), newest[e][0] = token;
            }
        }
        CHECK(differing == 0);
        CHECK(greedy_decode_cached(model, sources, T) == uncached);
        int right = 0;
        for (std::size_t e = 0; e < sources.size(); e++) right += uncached[e] == data.held_out[e].target;
        std::printf("  decoding with experts, %s: greedy exact-match %d of 200\n",
                    arch == Arch::decoder_only ? "decoder-only" : "encoder-decoder", right);
        CHECK(right == (arch == Arch::decoder_only ? 59 : 112));
        const std::vector<std::vector<int>> greedy = decode_all(model, data.held_out);
        for (double alpha : {0.0, 0.6}) CHECK(decode_all(model, data.held_out, DecodeConfig{1, alpha}) == greedy);
        // A beam of 3 on 20 sources: each hypothesis's log P, teacher-forced, to the last bit.
        Transformer::Batch few(sources.begin(), sources.begin() + 20);
        std::vector<std::vector<Hypothesis>> found = beam_search(model, few, T, 3, 0.6);
        int hypotheses = 0, equal = 0;
        for (std::size_t e = 0; e < few.size(); e++)
            for (const Hypothesis& h : found[e]) {
                const Matrix logits = model.forward({few[e]}, {shifted_right(h.tokens, vocab)});  // (T, vocab)
                double log_prob = 0.0;
                for (int p = 0; p < output_length(h.tokens); p++) {
                    double max = logits.at(p, 0), sum = 0.0;
                    for (int v = 1; v < vocab; v++) max = std::max(max, logits.at(p, v));
                    for (int v = 0; v < vocab; v++) sum += maths::exp(logits.at(p, v) - max);
                    const double log_sum = maths::log(sum);
                    log_prob = log_prob + (logits.at(p, h.tokens[p]) - max - log_sum);
                }
                hypotheses++, equal += h.log_prob == log_prob;
            }
        CHECK(hypotheses == 60);
        CHECK(equal == hypotheses);
    }
}
