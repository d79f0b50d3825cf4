// fuzz/maths.cpp -- matrix.hpp's maths::exp, log, sin, cos and pow measured against the C library: over a million
// random points of each range, the worst error in units of the last place (against the long double function, 64 bits
// on x86-64) and the share of results that are the correctly rounded value; then the time of a call, ours and the C
// library's in turn, five rounds, the median. `make maths` builds and runs it; it exits 1 if any error reaches 1 ulp.
// docs/performance.md quotes its output. (tests.cpp checks the same bound on 20,000 points of each range.)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "../matrix.hpp"

struct Range {
    const char* name;
    double lo, hi;
    bool log_uniform;                    // x = e^u, u uniform in [lo, hi]: every size of input
    std::function<double(double)> ours;  // the argument of pow's rows is y, its base fixed
    std::function<long double(long double)> truth;
    std::function<double(double)> library;
};

int main(int argc, char** argv) {
    const int points = argc > 1 ? std::atoi(argv[1]) : 1000000;
    auto pow_of = [](double base) {
        return Range{"", 0, 0, false, [base](double y) { return maths::pow(base, y); },
                     [base](long double y) { return std::pow((long double)base, y); },
                     [base](double y) { return std::pow(base, y); }};
    };
    auto named = [](Range r, const char* name, double lo, double hi) { r.name = name, r.lo = lo, r.hi = hi; return r; };
    std::vector<Range> ranges = {
        {"exp   x in [-745, 709]", -745, 709, false, [](double x) { return maths::exp(x); },
         [](long double x) { return std::exp(x); }, [](double x) { return std::exp(x); }},
        {"exp   x in [-20, 0] (softmax)", -20, 0, false, [](double x) { return maths::exp(x); },
         [](long double x) { return std::exp(x); }, [](double x) { return std::exp(x); }},
        {"log   x in [1e-300, 1e300]", -690, 690, true, [](double x) { return maths::log(x); },
         [](long double x) { return std::log(x); }, [](double x) { return std::log(x); }},
        {"log   x in [1, 100] (a loss's sum)", 1, 100, false, [](double x) { return maths::log(x); },
         [](long double x) { return std::log(x); }, [](double x) { return std::log(x); }},
        {"sin   x in [0, 4096] (positions)", 0, 4096, false, [](double x) { return maths::sin(x); },
         [](long double x) { return std::sin(x); }, [](double x) { return std::sin(x); }},
        {"cos   x in [0, 4096] (positions)", 0, 4096, false, [](double x) { return maths::cos(x); },
         [](long double x) { return std::cos(x); }, [](double x) { return std::cos(x); }},
        named(pow_of(10000), "pow   10000^y, y in [-1, 1]", -1, 1),
        named(pow_of(0.999), "pow   0.999^y, y in [1, 100000]", 1, 100000),
        named(pow_of(3.7), "pow   3.7^y, y in [-300, 300]", -300, 300),
    };
    bool all_below_one = true;
    std::printf("%-36s %13s %18s %12s %12s\n", "function and inputs", "worst (ulp)", "correctly rounded",
                "ours (ns)", "C lib (ns)");
    for (const Range& r : ranges) {
        Rng rng(1);
        std::vector<double> xs(points);
        for (double& x : xs) x = r.log_uniform ? std::exp(rng.uniform(r.lo, r.hi)) : rng.uniform(r.lo, r.hi);
        double worst = 0;
        long exact = 0;
        for (double x : xs) {
            const double ours = r.ours(x);
            const long double truth = r.truth((long double)x);
            const double below = std::nextafter(ours, 0.0), above = std::nextafter(ours, 2.0 * ours);
            const long double ulp = std::fabs((long double)above - (long double)below) / 2;
            worst = std::max(worst, double(std::fabs((long double)ours - truth) / ulp));
            exact += ours == double(truth);
        }
        all_below_one = all_below_one && worst < 1;
        auto time = [&](const std::function<double(double)>& f) {  // ns a call, over the points
            const auto start = std::chrono::steady_clock::now();
            double sink = 0;
            for (double x : xs) sink += f(x);
            const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
            if (sink == 1.5) std::printf(" ");  // keeps the sum, and so the calls
            return ns / points;
        };
        std::vector<double> ours_ns, library_ns;
        for (int round = 0; round < 5; round++) ours_ns.push_back(time(r.ours)), library_ns.push_back(time(r.library));
        std::sort(ours_ns.begin(), ours_ns.end());
        std::sort(library_ns.begin(), library_ns.end());
        std::printf("%-36s %13.3f %17.2f%% %12.1f %12.1f\n", r.name, worst, 100.0 * exact / points, ours_ns[2],
                    library_ns[2]);
    }
    std::printf("%s\n", all_below_one ? "every result within 1 ulp of the correctly rounded value"
                                      : "FAILED: an error of 1 ulp or more");
    return all_below_one ? 0 : 1;
}
