// workbench/signals.hpp -- what Ctrl-C, kill and a closed terminal do to a run: none of them loses a trained
// model, and no file is left half-written.
//
// Three signals ask a run to stop: SIGINT (Ctrl-C), SIGTERM (kill, a batch scheduler's time limit, a laptop
// shutting down) and SIGHUP (the terminal or the ssh session closed). What the first of them does depends on
// the phase the run is in:
//   before training   the program ends at once: nothing has been learned yet.
//   training          the loop stops after the current step; the checkpoint (--save) is written at once, and the
//                     run then scores the model and writes everything asked for, as of that step.
//   after training    (the final evaluation, --test-len, --inspect, the pictures and the report; the checkpoint
//                     is already written; a model loaded with --load that trains no further is here from its
//                     held-out score on) the evaluation or decoding under way stops after its current chunk,
//                     and the outputs are written from what is known, saying where it was cut short.
// A second signal, in any phase, and SIGQUIT end the program at once; the temporary file of a write under way
// goes first, so a file is written whole or not at all. A run stopped by a signal exits with 128 + its number
// (130, 143, 129), as a shell reports it.
#pragma once

#include <unistd.h>  // unlink (POSIX): callable inside a signal handler

#include <csignal>
#include <string>

enum class Phase : int { before_training, training, after_training };
inline volatile std::sig_atomic_t run_phase = 0;    // a Phase: main.cpp moves it on
inline volatile std::sig_atomic_t stop_signal = 0;  // the signal that asked the run to stop, or 0
inline volatile std::sig_atomic_t stopped_in = 0;   // the Phase it came in
inline char pending_tmp[4096] = "";                 // the temporary file being written (files.hpp), or ""

inline void on_signal(int sig) {
    if (sig != SIGQUIT && run_phase != int(Phase::before_training) && !stop_signal) {
        stop_signal = sig, stopped_in = run_phase;
        std::signal(SIGPIPE, SIG_IGN);  // with the terminal gone, printing fails quietly; the files still get written
        return;
    }
    if (pending_tmp[0]) unlink(pending_tmp);  // unlink, signal and raise may be called from a handler
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}
constexpr int HANDLED_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};  // what a run answers (the rest: as default)
inline void install_signal_handlers() {  // main() calls it first
    for (int sig : HANDLED_SIGNALS) std::signal(sig, on_signal);
}
// The pool's workers (--threads, engine/threads.hpp) start with these signals blocked and keep that mask: the handler
// always runs on the program's own thread, which reads what it wrote.
template <class Start>
inline void with_signals_blocked(Start&& start) {
    sigset_t blocked, before;
    sigemptyset(&blocked);
    for (int sig : HANDLED_SIGNALS) sigaddset(&blocked, sig);
    pthread_sigmask(SIG_BLOCK, &blocked, &before);
    start();
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
}
inline void enter_phase(Phase p) { run_phase = int(p); }

// The training loop asks after each step; evaluation and decoding between chunks. A signal that stopped
// training does not cut the evaluations after it short: they give the score of the step it stopped at.
inline bool training_stopped() { return stop_signal && stopped_in == int(Phase::training); }
inline bool evaluation_stopped() { return stop_signal && stopped_in == int(Phase::after_training); }

// How a stop is named in what the run prints, and the exit status it ends with (0: no signal came).
inline std::string signal_text(int sig) {
    return sig == SIGINT ? "Ctrl-C" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "signal " + std::to_string(sig);
}
inline int stopped_status() { return stop_signal ? 128 + stop_signal : 0; }
