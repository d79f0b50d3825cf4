// workbench/signals_test.cpp -- tests of signals.hpp and of what main.cpp's run() does with each signal, sent
// for real to a child process: Ctrl-C, kill (SIGTERM) and a closed terminal (SIGHUP) during training and after
// it, SIGKILL with --save-every, and --finish.
#include "test_runs.hpp"

#include <cstdlib>  // posix_openpt, grantpt, unlockpt, ptsname (POSIX): a terminal the test can close

// Whether the file at `path` is a whole checkpoint that loads: returns its updates, or -1.
long updates_in(const std::string& path) {
    try {
        DataConfig d;
        TrainConfig t;
        TrainState state(t, 1);
        Origin origin;
        load_checkpoint(path, d, t, state, origin);
        return state.updates;
    } catch (const UsageError&) {
        return -1;
    }
}
bool whole_page(const std::string& path) { return contains(read_all(path), "</html>\n"); }

// Ctrl-C during training: the first SIGINT stops training after the current step, the run evaluates, saves a
// checkpoint that goes on from that step, says how to finish the run, and exits with status 130; a second SIGINT
// quits at once and leaves no file. Before, the first SIGINT quit at once and every step was lost.
TEST_CASE("signals: a first Ctrl-C stops training and keeps what was learned; a second quits at once") {
    TempDir dir("sigint");
    std::string m = dir.file("m.txt"), log = dir.file("log");
    pid_t pid = start_run({"--steps", "1000000", "--eval-every", "1000000", "--save", m}, log);
    REQUIRE(wait_for_text(pid, log, "held-out loss"));  // the table's head: training has begun
    usleep(200000);
    kill(pid, SIGINT);
    CHECK(exit_status(pid) == 130);
    std::string out = read_all(log);
    CHECK(contains(out, "interrupted at step "));
    CHECK(contains(out, " of 1000000 (Ctrl-C): training stops here"));
    CHECK(contains(out, "final (stopped at step "));
    CHECK(contains(out, "saved " + m));
    CHECK(contains(out, "to finish the run's 1000000 steps later: ./sorter --load " + m + " --finish --save " + m));
    long step = std::atol(out.substr(out.find("interrupted at step ") + 20).c_str());
    CHECK(step > 0);
    CHECK(step < 1000000);
    CHECK(updates_in(m) == step);
    CHECK(contains(read_all(m), "\nplanned_steps 1000000\n"));

    std::string big = dir.file("big.txt");
    log = dir.file("log2");
    // Both come inside one training step, which takes a second or more at this size: 0.3 s apart, so that the run
    // has heard the first before the second comes, even on a busy machine (two signals sent before the run is next
    // on a core would arrive as one).
    pid = start_run({"--steps", "1000000", "--d-model", "256", "--d-ff", "1024", "--batch", "512", "--save", big}, log);
    REQUIRE(wait_for_text(pid, log, "held-out loss"));
    kill(pid, SIGINT);
    usleep(300000);
    kill(pid, SIGINT);
    CHECK(exit_status(pid) == -SIGINT);
    CHECK(dir.listing() == std::vector<std::string>{"log", "log2", "m.txt"});
}

// SIGHUP and SIGQUIT, like SIGTERM and SIGINT, remove the temporary file of a write under way: before,
// a hang-up during --save left FILE.tmp-PID behind. (Before training, every signal quits at once.)
TEST_CASE("signals: HUP, QUIT, TERM and INT during a write leave no temporary file") {
    TempDir dir("sighup");
    for (int sig : {SIGHUP, SIGQUIT, SIGTERM, SIGINT}) {
        std::string tmp = dir.file("m.txt.tmp-" + std::to_string(sig));
        pid_t pid = fork();
        if (pid == 0) {
            rlimit no_core{0, 0};
            setrlimit(RLIMIT_CORE, &no_core);  // SIGQUIT's default action would dump core
            install_signal_handlers();
            enter_phase(Phase::before_training);  // as run() starts: not the phase an earlier test's run ended in
            std::ofstream(tmp) << "half a checkpoint";
            std::snprintf(pending_tmp, sizeof pending_tmp, "%s", tmp.c_str());
            raise(sig);
            _exit(0);  // not reached
        }
        INFO("signal ", sig);
        CHECK(exit_status(pid) == -sig);
        CHECK(!std::filesystem::exists(tmp));
    }
}

// kill (SIGTERM) and a closed terminal (SIGHUP) stop training as Ctrl-C does: every output is written, and the
// run exits with 143 and 129. Before, both quit at once and lost everything. The hang-up comes with the run's
// terminal closed, as when a laptop's lid shuts on an ssh session: printing then fails, and must not stop the run.
TEST_CASE("signals: SIGTERM and SIGHUP during training keep the model, the report and the pictures") {
    TempDir dir("sigterm");
    for (int sig : {SIGTERM, SIGHUP}) {
        INFO("signal ", sig);
        std::string name = std::to_string(sig), m = dir.file("m" + name + ".txt"), report = dir.file("r" + name + ".html");
        std::string svg = dir.file("svg" + name), log = dir.file("log" + name);
        std::filesystem::create_directory(svg);
        std::vector<std::string> args = {"--steps", "1000000", "--eval-every", "1000000", "--save", m, "--report",
                                         report, "--svg", svg};
        int terminal = -1, slave = -1;
        if (sig == SIGHUP) {  // the run's output goes to a terminal (a pseudo-terminal) that the test closes
            terminal = posix_openpt(O_RDWR | O_NOCTTY);
            REQUIRE(terminal >= 0);
            REQUIRE((grantpt(terminal) == 0 && unlockpt(terminal) == 0));
            slave = open(ptsname(terminal), O_RDWR | O_NOCTTY);
            REQUIRE(slave >= 0);
        }
        pid_t pid = start_run(args, log, slave);
        if (sig == SIGHUP) {
            close(slave);
            std::string seen;
            char buffer[4096];
            while (!contains(seen, "held-out loss")) {  // the table's head: training has begun
                ssize_t n = read(terminal, buffer, sizeof buffer);
                REQUIRE(n > 0);
                seen.append(buffer, std::size_t(n));
            }
        } else {
            REQUIRE(wait_for_text(pid, log, "held-out loss"));
        }
        usleep(100000);
        kill(pid, sig);
        if (terminal >= 0) close(terminal);  // the terminal is gone: what the run prints from now on goes nowhere
        CHECK(exit_status(pid) == 128 + sig);
        CHECK(updates_in(m) > 0);
        CHECK(whole_page(report));
        for (const std::string& picture : {ATTENTION_SVG, POSITIONS_SVG, TRAINING_SVG})
            CHECK(contains(read_all(svg + "/" + picture), "</svg>"));
        if (sig == SIGTERM) CHECK(contains(read_all(log), " (SIGTERM): training stops here"));
    }
    CHECK(dir.listing() == std::vector<std::string>{"log1", "log15", "m1.txt", "m15.txt", "r1.html", "r15.html",
                                                    "svg1", "svg15"});
}

// After training the checkpoint is already written; a signal then stops the evaluation or decoding under way
// (here the final evaluation of a larger model, and --test-len's lengths), and every output is written from what
// is known, saying where it was cut short. Before, a Ctrl-C once "final:" was printed lost the model.
TEST_CASE("signals: a Ctrl-C after training cuts the evaluation short and keeps every output") {
    TempDir dir("sigafter");
    std::string m = dir.file("m.txt"), report = dir.file("r.html"), log = dir.file("log");
    pid_t pid = start_run({"--steps", "5", "--d-model", "64", "--heads", "4", "--d-ff", "256", "--enc-layers", "2",
                           "--dec-layers", "2", "--save", m, "--report", report, "--test-len", "12"}, log);
    REQUIRE(wait_for_text(pid, log, "(step)", 600, 5));  // the loss curve is drawn: the final evaluation is under way
    kill(pid, SIGINT);
    CHECK(exit_status(pid) == 130);
    std::string out = read_all(log);
    CHECK(contains(out, "(both on the first "));
    CHECK(contains(out, " held-out sequences of 1000: Ctrl-C cut the evaluation short), loss "));
    CHECK(contains(out, "(Ctrl-C came after training: the figures marked as cut short are partial)\n"));
    CHECK(contains(out, ": not scored (Ctrl-C cut the evaluation short)"));
    CHECK(!contains(out, "interrupted at step"));  // training had ended
    CHECK(updates_in(m) == 5);
    CHECK(whole_page(report));
    CHECK(contains(read_all(report), "Ctrl-C cut the decoding short"));
    CHECK(dir.listing() == std::vector<std::string>{"log", "m.txt", "r.html"});
}

// A loaded model that trains no further is after training from the moment it starts scoring: a signal during its
// held-out score, --inspect or --test-len cuts that short, and the report is written from what is known, saying
// where it was cut. Before, such a run never left "before training", and the signal ended it with no report.
TEST_CASE("signals: a loaded model's scoring, --inspect and --test-len are cut short as after training") {
    TempDir dir("sigloaded");
    std::string m = dir.file("m.txt");
    REQUIRE(run_error({"--steps", "5", "--d-model", "32", "--heads", "4", "--d-ff", "128", "--enc-layers", "2",
                       "--dec-layers", "2", "--save", m}).empty());  // large enough that each phase lasts
    const std::vector<std::pair<int, std::string>> plan = {  // the signal, and the line it comes after
        {SIGTERM, "seed 1, 5 updates made"}, {SIGINT, "--- inspect: held-out"},
        {SIGHUP, "--- held-out exact-match by"}};
    for (const auto& signal_after : plan) {
        const int sig = signal_after.first;  // (not a structured binding: INFO's lambda reads it)
        const std::string after = signal_after.second;
        INFO("signal ", sig, " after '", after, "'");
        std::string name = std::to_string(sig), report = dir.file("r" + name + ".html"), log = dir.file("log" + name);
        pid_t pid = start_run({"--load", m, "--inspect", "--test-len", "12", "--report", report}, log);
        REQUIRE(wait_for_text(pid, log, after, 600, 5));
        kill(pid, sig);
        CHECK(exit_status(pid) == 128 + sig);
        std::string out = read_all(log), page = read_all(report);
        CHECK(whole_page(report));
        CHECK(contains(page, signal_text(sig) + " cut the decoding short"));
        CHECK(contains(out, "(" + signal_text(sig) + " came as the loaded model was scored: the figures marked as cut "
                            "short are partial)\n"));
        if (sig == SIGTERM) {
            CHECK(contains(out, " held-out sequences of 1000: SIGTERM cut the evaluation short)\n"));
            CHECK(contains(page, " held-out sequences of 1000: SIGTERM cut the evaluation short)"));
        }
        if (sig == SIGINT) CHECK(contains(out, "(Ctrl-C cut --inspect short here)"));
        if (sig == SIGHUP) CHECK(contains(out, "not scored (SIGHUP cut the evaluation short)"));
    }
    CHECK(dir.listing() == std::vector<std::string>{"log1", "log15", "log2", "m.txt", "r1.html", "r15.html",
                                                    "r2.html"});
}

// The cut itself, without a real signal: after training, a stop ends an evaluation after its first chunk, and
// says how many of how many it scored; --test-len scores no length more. A stop during training does not cut.
TEST_CASE("signals: an evaluation cut short scores its first chunk and says so") {
    DataConfig d = few_digits();
    Transformer model(small_model(d), 3);
    Dataset data(d, {}, 400, 5);
    const std::size_t chunk = chunk_size(model.config, d.seq_len);
    REQUIRE(data.held_out.size() > chunk);
    const Accuracy whole = evaluate(model, data.held_out);
    CHECK(whole.total == int(data.held_out.size()));
    CHECK(whole.asked == whole.total);
    stop_signal = SIGTERM, stopped_in = int(Phase::training);
    CHECK(evaluate(model, data.held_out).total == whole.total);  // a stop in training: the step's score is whole
    stopped_in = int(Phase::after_training);
    Accuracy cut = evaluate(model, data.held_out);
    CHECK(cut.total == int(chunk));
    CHECK(cut.asked == whole.total);
    CHECK(cut_short_text(cut) == fmt("of %d: SIGTERM cut the evaluation short", whole.total));
    std::string lengths = printed_by([&] { length_report(model, data, 6, DecodeConfig()); });
    CHECK(contains(lengths, "  length 1 to 6: not scored (SIGTERM cut the evaluation short)\n"));
    stop_signal = 0, stopped_in = 0;
    CHECK(evaluate(model, data.held_out).total == whole.total);
}

// --save-every N writes the checkpoint every N steps and changes nothing the run computes; the checkpoint keeps
// the steps the run was planned for. A run killed outright (SIGKILL: nothing can be saved at that moment), then
// finished with --finish, ends with the same bytes as the run never stopped: with dropout, Adam and the linear
// schedule, whose rate depends on the planned end.
TEST_CASE("--save-every and --finish: a killed run finishes with the same bits") {
    TempDir dir("finish");
    const std::vector<std::string> run = {"--steps", "800", "--dropout", "0.1", "--optimizer", "adam",
                                          "--d-model", "8", "--d-ff", "16", "--eval-every", "1000000"};
    auto with = [&](std::vector<std::string> more) {
        more.insert(more.begin(), run.begin(), run.end());
        return more;
    };
    std::string whole = dir.file("whole.txt"), every = dir.file("every.txt"), killed = dir.file("killed.txt");
    REQUIRE(run_error(with({"--save", whole})).empty());
    std::string out = run_output(with({"--save", every, "--save-every", "50"}));
    CHECK(contains(out, "checkpoint: " + every + " every 50 steps and at the end; if the run is cut short, finish it "
                        "with\n  ./sorter --load " + every + " --finish --save " + every + " --save-every 50\n"));
    CHECK(read_all(every) == read_all(whole));
    CHECK(contains(read_all(whole), "\nupdates 800\nplanned_steps 800\n"));

    pid_t pid = start_run(with({"--save", killed, "--save-every", "50"}), dir.file("log"));
    for (int i = 0; i < 6000 && updates_in(killed) < 100; i++) usleep(1000);  // some steps in, then kill -9
    kill(pid, SIGKILL);
    CHECK(exit_status(pid) == -SIGKILL);
    long kept = updates_in(killed);
    INFO("killed after the checkpoint of step ", kept);
    CHECK(kept % 50 == 0);
    CHECK(kept >= 100);
    for (const std::string& name : dir.listing())  // a SIGKILL during a save leaves its temporary: remove it
        if (contains(name, ".tmp-")) std::filesystem::remove(dir.file(name));
    if (kept < 800) {
        std::string finished = run_output({"--load", killed, "--finish", "--save", killed});
        CHECK(contains(finished, fmt("steps %ld to 800", kept + 1)));
    }
    CHECK(read_all(killed) == read_all(whole));
    CHECK(contains(run_error({"--load", whole, "--finish", "--save", whole}),
                   "the run in " + whole + " made all 800 of its planned steps; to train it further, give --steps N"));
}

// A fine-tuning run killed outright and finished with --finish ends with the bytes of the run that never stopped, as a
// run from scratch does: adapters on a float base and on an 8-bit base, and every weight fine-tuned on longer inputs;
// each killed on 1 thread and finished on 2 (the base's batch of 64 and d_ff of 64 make the feed-forward's products
// large enough to be cut between threads: engine/kernels.hpp's PARALLEL_WORK). Before its end a LoRA run's file keeps
// the base as loaded, the adapters apart from it and their running means (version 10); at its end, the model merged.
TEST_CASE("--save-every and --finish: a killed fine-tuning run finishes with the same bits") {
    TempDir dir("finish-tuning");
    const std::string base = dir.file("base.txt"), q8 = dir.file("q8.txt");
    REQUIRE(run_error({"--steps", "50", "--optimizer", "adam", "--d-model", "8", "--d-ff", "64", "--batch", "64",
                       "--save", base}) == "");
    REQUIRE(run_error({"--load", base, "--quantize", "8", "--save", q8}) == "");
    struct Tuning {
        std::string name;
        std::vector<std::string> flags;
        bool adapters;
    };
    const std::vector<Tuning> tunings = {
        {"lora", {"--load", base, "--lora", "2", "--lora-on", "all", "--lr", "0.01"}, true},
        {"lora8", {"--load", q8, "--lora", "2", "--task", "reverse"}, true},
        {"full", {"--load", base, "--seq-len", "6", "--min-len", "4", "--lr", "0.003"}, false}};
    for (const Tuning& tuning : tunings) {
        INFO(tuning.name);
        auto with = [&](std::vector<std::string> more) {
            more.insert(more.begin(), tuning.flags.begin(), tuning.flags.end());
            for (const char* w : {"--steps", "200", "--eval-every", "1000000", "--threads", "1"}) more.push_back(w);
            return more;
        };
        const std::string whole = dir.file(tuning.name + "-whole.txt"), killed = dir.file(tuning.name + "-killed.txt");
        REQUIRE(run_error(with({"--save", whole})) == "");
        pid_t pid = start_run(with({"--save", killed, "--save-every", "25"}), dir.file(tuning.name + ".log"));
        for (int i = 0; i < 6000 && updates_in(killed) < 50; i++) usleep(1000);  // some steps in, then kill -9
        kill(pid, SIGKILL);
        CHECK(exit_status(pid) == -SIGKILL);
        for (const std::string& name : dir.listing())  // a SIGKILL during a save leaves its temporary: remove it
            if (contains(name, ".tmp-")) std::filesystem::remove(dir.file(name));
        const std::string cut = read_all(killed);
        const long kept = updates_in(killed);
        INFO("killed after the checkpoint of step ", kept);
        if (contains(cut, "\nplanned_steps 200\n") && kept < 200) {  // (else the run had ended: nothing to finish)
            CHECK(kept % 25 == 0);
            CHECK(kept >= 50);
            CHECK(contains(cut, "\nlora_rank 2\n") == tuning.adapters);  // the adapters apart, with their scale
            CHECK(cut.rfind(tuning.adapters ? "sorter-checkpoint 10\n" : "sorter-checkpoint 9\n", 0) == 0);
            const std::string finished = run_output({"--load", killed, "--finish", "--save", killed, "--threads", "2"});
            CHECK(contains(finished, fmt("steps %ld to 200", kept + 1)));
            CHECK(contains(finished, tuning.adapters ? "saved " + killed + " (merged)\n" : "saved " + killed + "\n"));
        }
        CHECK(read_all(killed) == read_all(whole));
    }
}

TEST_CASE("--finish and --save-every: one-line refusals") {
    TempDir dir("finish-refused");
    std::string m = dir.file("m.txt"), old = dir.file("old.txt");
    REQUIRE(run_error({"--steps", "5", "--save", m}).empty());
    std::ofstream(old) << as_version(read_all(m), 4);
    CHECK(contains(run_error({"--load", old, "--finish", "--save", old}),
                   "does not say how many steps its run planned (it comes from a checkpoint older than version 5); "
                   "give --steps N"));
    CHECK(contains(run_error({"--finish"}), "--finish trains on the run a checkpoint was saved from; add --load FILE"));
    CHECK(contains(run_error({"--load", m, "--finish", "--steps", "3"}), "give --finish or --steps N, not both"));
    CHECK(contains(run_error({"--save-every", "10"}), "--save-every 10 writes the checkpoint to the --save file; add "
                                                      "--save FILE"));
    CHECK(contains(run_error({"--load", m, "--finish"}),
                   "--finish trains the rest of a run: add --save FILE to keep it"));
    // a model loaded from an older file and saved again does not know its plan: "unknown", and so it stays
    REQUIRE(run_error({"--load", old, "--sort", "1", "2", "3", "4", "5", "--save", dir.file("again.txt")}).empty());
    CHECK(contains(read_all(dir.file("again.txt")), "\nplanned_steps unknown\n"));
    // trained on from it, the plan is known again: the steps made and those asked for
    REQUIRE(run_error({"--load", old, "--steps", "4", "--save", dir.file("on.txt")}).empty());
    CHECK(contains(read_all(dir.file("on.txt")), "\nupdates 9\nplanned_steps 9\n"));
}

// A LoRA run's file before its end holds its adapters: it goes on (--finish, or --steps N, and is saved merged at its
// end) or is scored as it is. New adapters, other data and --quantize on it are one line, exit 2; so is a fine-tuning
// flag with --finish, whatever its value (the file keeps the run's own), and --save-adapters without adapters.
TEST_CASE("--finish of a LoRA run: one-line refusals") {
    TempDir dir("finish-lora-refused");
    const std::string base = dir.file("base.txt"), under_way = dir.file("u.txt"), a = dir.file("a.txt");
    REQUIRE(run_error({"--steps", "20", "--d-model", "8", "--d-ff", "16", "--save", base}) == "");
    pid_t pid = start_run({"--load", base, "--lora", "2", "--steps", "1000000", "--eval-every", "1000000", "--save",
                           under_way, "--save-every", "10"}, dir.file("log"));
    for (int i = 0; i < 6000 && updates_in(under_way) < 10; i++) usleep(1000);
    kill(pid, SIGKILL);
    CHECK(exit_status(pid) == -SIGKILL);
    for (const std::string& name : dir.listing())
        if (contains(name, ".tmp-")) std::filesystem::remove(dir.file(name));
    const long step = updates_in(under_way);
    REQUIRE(step >= 10);
    const std::string holds = fmt(": --load %s holds a LoRA run under way (step %ld of 1000000, its adapters apart "
                                  "from the base); finish it (--load %s --finish --save FILE), then use the merged "
                                  "model it saves", under_way.c_str(), step, under_way.c_str());
    CHECK(run_error({"--load", under_way, "--lora", "2", "--steps", "5"}) == "--lora 2" + holds);
    CHECK(run_error({"--load", under_way, "--task", "reverse", "--steps", "5"}) == "--task" + holds);
    CHECK(run_error({"--load", under_way, "--quantize", "8", "--save", dir.file("q.txt")}) == "--quantize 8" + holds);
    const std::vector<std::vector<std::string>> tunings = {{"--lora", "2"}, {"--lora-on", "all"}, {"--task", "reverse"},
                                                           {"--seq-len", "6"}, {"--lr", "0.1"}, {"--adapters", a}};
    for (const std::vector<std::string>& flag : tunings) {
        std::vector<std::string> args = {"--load", under_way, "--finish", "--save", under_way};
        args.insert(args.end(), flag.begin(), flag.end());
        CHECK(run_error(args) == "--finish trains the rest of the run saved in " + under_way + " with the adapters, "
                                 "data and rate it keeps: drop " + flag[0]);
    }
    CHECK(run_error({"--load", base, "--save-adapters", a}) == "--save-adapters writes the adapters: add --lora R "
                                                               "(--load " + base + " holds none)");
    CHECK(contains(run_output({"--load", under_way}), "LoRA: rank 2, alpha 2, on W_q W_v: "));  // scored as it is
    const std::string merged = dir.file("m.txt");
    const std::string out = run_output({"--load", under_way, "--steps", "3", "--save", merged, "--save-adapters", a});
    CHECK(contains(out, fmt("steps %ld to %ld", step + 1, step + 3)));
    CHECK(contains(out, "saved " + merged + " (merged)\nsaved " + a + "\n"));
    CHECK(run_error({"--load", merged, "--finish", "--save", merged}) ==
          "--finish: " + merged + " holds no run under way (no update made, no steps planned: a fine-tuned model saved "
          "merged starts a count of its own); give --steps N to train it");
}
