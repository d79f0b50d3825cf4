// engine/threads.hpp -- the pool that engine/kernels.hpp shares its work out on (--threads N).
// kernels.hpp's parallel_for says how a piece of work is cut into ranges, one a thread; this is who runs them.
// Tests: threads_test.cpp beside it (the whole model's same bits on any count too); the kernels', kernels_test.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

// Threads, the pool: run(job) is one round of parts 0 .. count()-1. It posts the job; each thread, the caller and
// every worker awake, claims the next part no one has taken, runs it, and claims again until none is left, so the
// caller never waits on a worker that has not woken: it runs that part itself. Part k is the same work whoever runs
// it (kernels.hpp's parallel_for gives part k its range), so the bits do not depend on who ran what. Between rounds a
// worker that has served one waits awake (yielding its core) for up to SPIN, as the next product of a step comes
// sooner than that, then sleeps until the next round; a new worker sleeps at once, and a stop ends the wait.
class Threads {
  public:
    int count() const { return int(workers.size()) + 1; }  // the calling thread and its workers
    void set_count(int n) {  // n >= 1: n - 1 workers. From the program's thread, between jobs; a process that
                             // forks sets 1 first (a child would have none of the workers)
        stop();
        quit = false;
        for (int k = 1; k < n; k++) workers.emplace_back([this, seen = round.load()] { serve(seen); });
    }
    ~Threads() { stop(); }
    // job(k) for k = 0 .. count()-1; returns when all are done, and then rethrows the first exception a part threw
    // (out of memory, say; the other parts still ran). Called from inside a job (a product inside one sequence's
    // attention, which kernels.hpp's parallel_each runs as a part), it runs every k there, in turn.
    void run(const std::function<void(int)>& job) {
        if (workers.empty() || inside) {
            for (int k = 0; k < count(); k++) job(k);
            return;
        }
        {
            std::lock_guard<std::mutex> hold(lock);
            current = &job;
            parts = count();
            done = 0;
            round++;
            next.store(round * ROUND, std::memory_order_release);  // part 0 of this round is the next to claim
        }
        wake.notify_all();
        run_parts(round);
        wait_awake([&] { return done < parts; });  // the others end soon
        std::unique_lock<std::mutex> hold(lock);
        finished.wait(hold, [&] { return done == parts; });
        if (std::exception_ptr error = std::exchange(part_error, nullptr)) std::rethrow_exception(error);
    }

  private:
    // How long a thread waits awake before it sleeps: a time, not a count of yields, since on a busy machine one
    // yield can last a whole time slice of another process (docs/performance.md).
    static constexpr std::chrono::microseconds SPIN{1000};
    static constexpr std::int64_t ROUND = 1 << 16;  // next = round * ROUND + the next part to claim (parts < ROUND)
    std::vector<std::thread> workers;
    std::mutex lock;
    std::condition_variable wake, finished;
    const std::function<void(int)>* current = nullptr;
    std::atomic<std::int64_t> round{0}, next{0};  // 64 bits everywhere: round * ROUND must not overflow
    std::atomic<int> parts{0}, done{0};  // this round's parts, and how many have ended
    std::atomic<bool> quit{false};  // read by a worker waiting awake, outside the lock
    std::exception_ptr part_error;  // the first exception a part threw this round
    static inline thread_local bool inside = false;  // this thread is running a job

    // Claim parts of round r and run them until none is left. A claim names its round, so a worker that wakes
    // late, after round r has ended, claims nothing and never touches a job that is gone.
    void run_parts(std::int64_t r) {
        for (std::int64_t claim = next.load(std::memory_order_acquire); claim / ROUND == r && claim % ROUND < parts;) {
            if (!next.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) continue;  // claim: reread
            inside = true;
            std::exception_ptr error;
            try {
                (*current)(int(claim % ROUND));
            } catch (...) {
                error = std::current_exception();  // kept for run() to rethrow once every part has ended
            }
            inside = false;
            if (error) {
                std::lock_guard<std::mutex> hold(lock);
                if (!part_error) part_error = error;
            }
            if (done.fetch_add(1) + 1 == parts) {
                std::lock_guard<std::mutex> hold(lock);  // the caller is waiting, or has not yet looked
                finished.notify_one();
            }
            claim = next.load(std::memory_order_acquire);
        }
    }
    template <class Waiting> static void wait_awake(Waiting waiting) {  // yields while waiting(), for SPIN at most
        const auto until = std::chrono::steady_clock::now() + SPIN;
        while (waiting() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    }
    void serve(std::int64_t seen) {  // seen: the round before this worker's first
        for (bool served = false;; served = true) {
            if (served) wait_awake([&] { return round == seen && !quit; });
            {
                std::unique_lock<std::mutex> hold(lock);
                wake.wait(hold, [&] { return round != seen || quit; });
                if (quit) return;
                seen = round;
            }
            run_parts(seen);
        }
    }
    void stop() {
        {
            std::lock_guard<std::mutex> hold(lock);
            quit = true;
        }
        wake.notify_all();
        for (std::thread& t : workers) t.join();
        workers.clear();
    }
};
inline Threads threads;  // the program's one pool: one thread (no workers) until --threads sets it
