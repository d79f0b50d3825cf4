// workbench/text.hpp -- the errors and the text every part of the program uses.
//
// Sections: UsageError and fail(); text helpers (join, split_words, fmt, printable, shape_text, read_all); JSON;
// numbers as every flag, input file and checkpoint spells them.
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../matrix.hpp"

// Every check of the program throws a UsageError carrying one line that names the flag (or file
// and line), the value, and what is allowed. main() prints it and exits with status 2. Nothing
// deep inside calls exit(), so the tests can call these functions and read the message.
struct UsageError { std::string message; };
[[noreturn]] inline void fail(const std::string& message) { throw UsageError{message}; }

// Text helpers: join words, split a line at whitespace, format as printf does.
inline std::string join(const std::vector<std::string>& words, const std::string& between) {
    std::string s;
    for (std::size_t i = 0; i < words.size(); i++) s += (i ? between : "") + words[i];
    return s;
}
inline std::vector<std::string> split_words(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    return words;
}
template <typename... Values>
std::string fmt(const char* format, Values... values) {  // fmt("%d of %d", 3, 5) is "3 of 5"
    std::vector<char> text(std::snprintf(nullptr, 0, format, values...) + 1);
    std::snprintf(text.data(), text.size(), format, values...);
    return text.data();
}
inline std::string printable(const std::string& text) {  // control bytes and non-ASCII shown as \xNN
    std::string out;
    for (unsigned char ch : text) out += ch >= 0x20 && ch < 0x7f ? std::string(1, char(ch)) : fmt("\\x%02x", ch);
    return out;
}
// A number with `decimals` decimals; "nan" and "inf" spelled the same on every library (printf may write
// "-nan"), for the pictures and tables that must show a diverged model's values as such.
inline std::string number_text(double v, int decimals = 4) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    std::string text = fmt("%.*f", decimals, v);
    if (text.find_first_not_of("-0.") == std::string::npos && text[0] == '-') text.erase(0, 1);  // -1e-5: 0.0000
    return text;
}
// log10 for the pictures' log axes, from matrix.hpp's maths::log like every number the program prints.
inline double log10_of(double v) { return maths::log(v) * 0.43429448190325182765; }  // 1 / ln 10
inline std::string shape_text(int rows, int cols) { return fmt("(%d, %d)", rows, cols); }  // "(5, 16)"
inline std::string read_all(const std::string& path) {  // a file read whole ("" if it cannot be read)
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}
inline std::string shape_text(const Matrix& m) { return shape_text(m.rows, m.cols); }

// JSON, as little as the page's answers need (web.hpp): a string, a number, a list.
inline std::string json_text(const std::string& s) {  // a JSON string: quotes, backslashes, control bytes escaped
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') out += '\\', out += char(c);
        else if (c < 0x20) out += fmt("\\u%04x", c);
        else out += char(c);
    }
    return out + "\"";
}
inline std::string json_number(double v) {  // JSON has no nan or inf: null
    return std::isfinite(v) ? fmt("%.9g", v) : "null";
}
template <class T, class F> std::string json_list(const std::vector<T>& items, F item) {
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); i++) out += (i ? "," : "") + item(items[i]);
    return out + "]";
}
// What a number is, in every flag, input file and checkpoint: decimal digits, and for a real number
// an optional '-', fraction and exponent ("5", "0.1", "-2.5e-3", "1e+300"). Not "+5", " 5", "0x1p-3",
// "inf" or "nan", which strtol and strtod would also take; and not "1e-400", which would become 0.
inline bool number_syntax(const std::string& s, bool whole) {
    std::size_t i = 0;
    auto digits = [&] {  // one or more digits from i
        std::size_t from = i;
        while (i < s.size() && std::isdigit((unsigned char)s[i])) i++;
        return i > from;
    };
    auto skip = [&](const char* chars) {  // one of chars at i: step over it
        bool there = i < s.size() && s[i] != '\0' && std::strchr(chars, s[i]);
        i += there;
        return there;
    };
    if (whole) return digits() && i == s.size();
    skip("-");
    if (!digits() || (skip(".") && !digits())) return false;
    if (skip("eE")) {
        skip("+-");
        if (!digits()) return false;
    }
    return i == s.size();
}
inline bool parse_whole(const std::string& text, long lo, long hi, long& out) {  // a whole number in [lo, hi]
    errno = 0;
    long v = number_syntax(text, true) ? std::strtol(text.c_str(), nullptr, 10) : 0;
    if (!number_syntax(text, true) || errno == ERANGE || v < lo || v > hi) return false;
    out = v;
    return true;
}
inline bool parse_finite(const std::string& text, double& out) {  // a finite number that does not underflow to 0
    double v = number_syntax(text, false) ? std::strtod(text.c_str(), nullptr) : 0.0;
    bool nonzero_digits = text.substr(0, text.find_first_of("eE")).find_first_of("123456789") != std::string::npos;
    if (!number_syntax(text, false) || !std::isfinite(v) || (v == 0.0 && nonzero_digits)) return false;
    out = v;
    return true;
}
inline std::string range_text(long lo, long hi) { return fmt("a whole number from %ld to %ld", lo, hi); }  // allowed
// A flag's value or a header value, checked: "WHAT TEXT: expected ALLOWED", what = "--heads" or file, line, key.
inline long whole_or_fail(const std::string& what, const std::string& text, long lo, long hi) {
    long v = 0;
    if (!parse_whole(text, lo, hi, v)) fail(what + " " + text + ": expected " + range_text(lo, hi));
    return v;
}
inline int choice_or_fail(const std::string& what, const std::string& text, const std::vector<std::string>& names) {
    auto it = std::find(names.begin(), names.end(), text);
    if (it == names.end()) fail(what + " " + text + ": expected one of " + join(names, ", "));
    return int(it - names.begin());
}
