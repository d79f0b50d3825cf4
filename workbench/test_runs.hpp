// workbench/test_runs.hpp -- what the tests of whole runs share (run_test.cpp, signals_test.cpp): main.cpp
// without its main(), a run's refusal or its output, and a run in a child process that a test can send signals.
#pragma once

#define SORTER_NO_MAIN  // main.cpp without its main(): run() and finish_output() are called directly
#include "../main.cpp"
#include "test_helpers.hpp"

#include <sys/resource.h>
#include <sys/wait.h>

// A run of these flags: "" when it did what was asked, else its one-line refusal (from parsing or running).
inline std::string run_error(const std::vector<std::string>& args) {
    Options o;
    std::string parse = parse_error(args, &o);
    if (!parse.empty()) return parse;
    try {
        run(o);
        return std::string();
    } catch (const UsageError& e) {
        return e.message;
    }
}
// What a run of these flags prints, or its one-line refusal.
inline std::string run_output(const std::vector<std::string>& args) {
    std::string error;
    std::string printed = printed_by([&] { error = run_error(args); });
    return error.empty() ? printed : error;
}

// A run in a child process, as main() runs it, its output and errors into the new file `log` (or its output
// into `out`, a terminal the test holds, and its errors into `log`); returns the child's pid.
inline pid_t start_run(const std::vector<std::string>& args, const std::string& log, int out = -1) {
    std::fflush(stdout);  // else the child would print what the test's own buffer still holds, into its log
    std::fflush(stderr);
    threads.set_count(1);  // a child has only the forking thread: no workers of the pool may be left to join
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid != 0) return pid;
    install_signal_handlers();  // the child, first of all: sorter's handlers, not doctest's
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);  // a new log: no old text to be misread
    dup2(out >= 0 ? out : fd, 1);
    dup2(fd, 2);
    for (int other = 3; other < 1024; other++) close(other);  // none of the test's files stays open in the run
    std::setvbuf(stdout, nullptr, _IOLBF, 1 << 16);  // line by line, as main() sets it
    int status = 1;
    try {
        status = finish_output(stdout, run(parse_options(args)));
    } catch (const UsageError& e) {
        std::fprintf(stderr, "sorter: %s\n", e.message.c_str());
        status = 2;
    }
    std::fflush(stdout);
    _exit(status);
}
// Waits up to `seconds` for `text` to appear in the file, looking every `poll_ms`; if it never does, the child
// is killed. (Under the sanitizers a run is many times slower.)
inline bool wait_for_text(pid_t pid, const std::string& log, const std::string& text, int seconds = 60,
                          int poll_ms = 100) {
    for (long waited = 0; waited < seconds * 1000L; waited += poll_ms, usleep(useconds_t(poll_ms) * 1000))
        if (contains(read_all(log), text)) return true;
    kill(pid, SIGKILL);  // never leave a run of a million steps behind
    waitpid(pid, nullptr, 0);
    return false;
}
// The child's exit status, or minus the signal that ended it.
inline int exit_status(pid_t pid) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}
