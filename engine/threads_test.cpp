// engine/threads_test.cpp -- tests of the pool (threads.hpp): every part runs once a round, and a part that
// throws is rethrown by the caller. That results keep their bits on any count is tests.cpp's.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

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
