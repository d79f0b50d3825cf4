// engine/threads_test.cpp -- tests of the pool (threads.hpp): every part runs once a round, and a part that
// throws is rethrown by the caller. That results keep their bits on any count is tests.cpp's.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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
