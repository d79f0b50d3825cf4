// workbench/exercises_test.cpp -- tests of "Write it yourself"'s list and hand-out (exercises.hpp): cut() takes every
// exercise's answer out of the tutorial and leaves a gap that compiles and says "not written yet". The check's tests
// are beside exercise_check.hpp and exercise_grade.hpp.
#include "test_helpers.hpp"
#include "exercises.hpp"

namespace ex = exercises;

// The message of the UsageError that f throws ("" if none).
template <typename F>
std::string usage_error_of(F f) {
    try {
        f();
    } catch (const UsageError& e) {
        return e.message;
    }
    return "";
}

// cut(): every exercise's regions leave its file; a region of code becomes a gap that throws, a region of comments
// a line saying so; the other exercises' markers stay. A marker left open is an error.
TEST_CASE("exercises: cut() takes the answer out and leaves the gap") {
    for (const ex::Exercise& e : ex::EXERCISES) {
        int gaps = 0;
        for (const std::string& file : ex::TUTORIAL_FILES) {
            const std::string text = read_all(file), copy = ex::cut(text, e.name);
            const std::string begin = "// exercise " + e.name + ": begin";
            INFO(e.name, " in ", file);
            CHECK(!contains(copy, begin));
            CHECK(!contains(copy, "// exercise " + e.name + ": end"));
            if (!contains(text, begin)) {
                CHECK(copy == text);
                continue;
            }
            gaps++;
            CHECK(contains(copy, "throw std::logic_error(\"not written yet: exercise " + e.name + "\");"));
            CHECK(contains(copy, "// exercise " + e.name + ": your code from here"));
            for (std::size_t at = text.find(begin); at != std::string::npos; at = text.find(begin, at + 1)) {
                std::size_t line = text.find('\n', at) + 1, end = text.find("// exercise " + e.name + ": end", at);
                const std::string answer = text.substr(line, text.rfind('\n', end) + 1 - line);
                CHECK(!contains(copy, answer));  // the region, whole, is gone
            }
            for (const ex::Exercise& other : ex::EXERCISES)
                if (other.name != e.name && contains(text, "// exercise " + other.name + ": begin"))
                    CHECK(contains(copy, "// exercise " + other.name + ": begin"));
        }
        CHECK(gaps >= 1);
    }
    CHECK(usage_error_of([] { ex::cut("a\n// exercise softmax: begin\nb\n", "softmax"); }) ==
          "exercise softmax: a '// exercise softmax: begin' without its '// exercise softmax: end'");
}
