// engine/threads_test.cpp -- tests of the pool (threads.hpp): every part runs once a round, a part that throws is
// rethrown by the caller, and the whole model, trained and decoded on the pool, keeps its bits on any thread count
// (the last test reads the tutorial, which runs on the pool: train.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../chapters/10_decoding.hpp"  // the model, and decoding as the program runs it: the bits on any count
#include "threads.hpp"

// A part that throws (out of memory, say) must not end the program from a worker, nor leave the others
// reading a job that is gone: run() waits for every part, then rethrows on the calling thread; the pool
// then serves the next job.
TEST_CASE("threads: a part that throws is rethrown by the caller once every part has ended") {
    threads.set_count(3);
    for (int thrower : {0, 2}) {  // the calling thread's part, a worker's
        std::atomic<int> ran{0};
        CHECK_THROWS_AS(threads.run([&](int k) {
            ran++;
            if (k == thrower) throw std::runtime_error("part " + std::to_string(k));
        }), std::runtime_error);
        CHECK(ran == 3);
    }
    std::atomic<int> after{0};
    threads.run([&](int) { after++; });
    CHECK(after == 3);
    threads.set_count(1);
}

// Each thread claims the next part no one has taken, so who runs a part changes from round to round, and a
// worker may wake after its round has ended. Every part must still run exactly once a round, and run() must
// return only after all have: here parts of unequal length (part 0 the longest, then the last), many rounds.
TEST_CASE("threads: every part runs exactly once a round, whoever claims it") {
    for (int count : {2, 3, 8}) {
        threads.set_count(count);
        bool all_once = true;
        for (int round = 0; round < 2000; round++) {
            std::vector<std::atomic<int>> ran(std::size_t(count) + 1);
            threads.run([&](int k) {
                volatile double sink = 0.0;
                for (int i = 0; i < (k == 0 ? 3000 : k == count - 1 ? 1000 : 10) * (round % 3); i++) sink = sink + i;
                ran[std::size_t(k)]++;
            });
            for (int k = 0; k <= count; k++) all_once = all_once && ran[std::size_t(k)] == (k < count ? 1 : 0);
        }
        CHECK(all_once);
    }
    threads.set_count(1);
}

// A worker waits for a job awake (yielding its core) only after serving one, and only briefly; told to stop, it
// stops. Before, every worker yielded up to 2000 times without looking at the stop, and on a busy machine a yield
// can last a whole time slice: a run with --threads 8 beside four busy processes took seconds to exit (issue 44).
// Here busy threads on every core make the machine busy; starting and stopping the pool must still take moments.
TEST_CASE("threads: on a busy machine the pool starts and stops at once, with or without a job run") {
    std::atomic<bool> busy{true};
    std::vector<std::thread> hogs;
    for (unsigned k = 0; k < 2 * std::max(1u, std::thread::hardware_concurrency()); k++)
        hogs.emplace_back([&] { while (busy) continue; });
    auto seconds_of = [](auto&& work) {
        auto t0 = std::chrono::steady_clock::now();
        work();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    double no_job = seconds_of([] {
        threads.set_count(8);
        threads.set_count(1);
    });
    threads.set_count(8);
    std::atomic<int> running{0};
    threads.run([&](int) {  // every part waits for the others: each worker has served, and waits for the next job
        running++;
        while (running < 8) std::this_thread::yield();
    });
    double after_a_job = seconds_of([] { threads.set_count(1); });
    busy = false;
    for (std::thread& t : hogs) t.join();
    CHECK(no_job < 0.25);
    CHECK(after_a_job < 0.25);
}

// --threads N for the whole model: training on 1, 2, 3 and 8 threads gives the same bits, parameters, optimizer
// moments and losses, and greedy decoding the same outputs. Two sizes, large enough to be cut (products above
// PARALLEL_WORK, sequences' attention too); SGD, momentum and Adam; today's blocks (decoder-only, rotary, grouped-query,
// SwiGLU, RMSNorm); variable lengths with post-norm, GELU and ALiBi; and attention dropout, whose sequences run in
// turn, beside dropout elsewhere.
TEST_CASE("threads: training and decoding give the same bits on 1, 2, 3 and 8 threads") {
    struct Case { std::string name; std::function<void(ModelConfig&, DataConfig&, TrainConfig&)> set; };
    std::vector<Case> cases = {
        {"d_model 32, SGD", [](ModelConfig&, DataConfig&, TrainConfig&) {}},
        {"d_model 64, 8 heads, 2 + 2 layers, momentum", [](ModelConfig& m, DataConfig& d, TrainConfig& t) {
             m.d_model = 64, m.n_heads = 8, m.d_ff = 64, m.enc_layers = m.dec_layers = 2, d.seq_len = 6;
             t.optimizer = OptimizerKind::momentum, t.lr = 0.02, t.batch = 16;
         }},
        {"Adam, clip, weight decay", [](ModelConfig&, DataConfig&, TrainConfig& t) {
             t.optimizer = OptimizerKind::adam, t.lr = 0.003, t.clip = 1.0, t.weight_decay = 0.01;
         }},
        {"decoder-only, rotary, grouped-query, SwiGLU, RMSNorm", [](ModelConfig& m, DataConfig&, TrainConfig&) {
             m.arch = Arch::decoder_only, m.enc_layers = 0, m.positions = Positions::rope, m.kv_heads_asked = 2;
             m.activation = Activation::swiglu, m.rms_norm = true;
         }},
        {"variable lengths, post-norm, GELU, ALiBi", [](ModelConfig& m, DataConfig& d, TrainConfig&) {
             d.min_len = 3, m.norm_place = NormPlace::post, m.activation = Activation::gelu, m.positions = Positions::alibi;
         }},
        {"dropout and attention dropout", [](ModelConfig& m, DataConfig&, TrainConfig&) {
             m.dropout = 0.1, m.attn_dropout = 0.1;
         }},
        {"attention in tiles, attention dropout, ALiBi, variable lengths", [](ModelConfig& m, DataConfig& d,
                                                                               TrainConfig&) {
             m.attention = Attention::flash, m.attn_dropout = 0.1, m.positions = Positions::alibi, d.min_len = 3;
         }},
        {"attention in tiles, decoder-only, grouped-query", [](ModelConfig& m, DataConfig&, TrainConfig&) {
             m.attention = Attention::flash, m.arch = Arch::decoder_only, m.enc_layers = 0, m.kv_heads_asked = 2;
         }},
        {"experts: 8, top-2, a shared one, balance 0.1 (chapter 11)", [](ModelConfig& m, DataConfig&, TrainConfig&) {
             m.experts = 8, m.top_k_asked = 2, m.shared_experts = 1, m.balance = 0.1;
         }},
        {"experts: decoder-only, 4, top-1, SwiGLU, Adam", [](ModelConfig& m, DataConfig&, TrainConfig& t) {
             m.arch = Arch::decoder_only, m.enc_layers = 0, m.experts = 4, m.top_k_asked = 1;
             m.activation = Activation::swiglu, t.optimizer = OptimizerKind::adam, t.lr = 0.003;
         }},
    };
    for (const Case& c : cases) {
        DataConfig d;
        d.seq_len = 8;
        ModelConfig m;
        m.d_model = 32, m.n_heads = 4, m.d_ff = 128;
        TrainConfig t;
        t.batch = 24;
        c.set(m, d, t);
        m.vocab = vocab_size(d), m.max_len = positions_read(m, d.seq_len);  // decoder-only: S + T
        Dataset data(d, {}, 60, 7);
        Inputs held = inputs_of(data.held_out, 0, data.held_out.size());
        struct Run { std::vector<Matrix> values, moments; std::vector<double> losses; std::vector<std::vector<int>> out; };
        auto run = [&](int count) {
            threads.set_count(count);
            Transformer model(m, 3);
            TrainState state(t, 3);
            Run r;
            for (int step = 0; step < 4; step++) r.losses.push_back(train_step(model, data, t, state, 4));
            for (auto& [name, param] : model.parameters()) r.values.push_back(param->value);
            for (const std::vector<Matrix>* means : {&state.optimizer.m, &state.optimizer.s})
                r.moments.insert(r.moments.end(), means->begin(), means->end());
            r.out = greedy_decode_cached(model, held.sources, d.seq_len);
            return r;
        };
        const Run one = run(1);
        for (int count : {2, 3, 8}) {
            INFO(c.name << " on " << count << " threads");
            const Run many = run(count);
            CHECK(many.losses == one.losses);
            CHECK(many.out == one.out);
            REQUIRE(many.values.size() == one.values.size());
            for (std::size_t i = 0; i < one.values.size(); i++) CHECK(many.values[i].data == one.values[i].data);
            REQUIRE(many.moments.size() == one.moments.size());
            for (std::size_t i = 0; i < one.moments.size(); i++) CHECK(many.moments[i].data == one.moments[i].data);
        }
    }
    threads.set_count(1);
}
