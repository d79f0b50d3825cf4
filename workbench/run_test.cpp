// workbench/run_test.cpp -- tests of main.cpp's run(): whole runs, with bad paths, outputs on one file, no
// held-out set, a diverging loss, a report, a --train-data file. (Real signals: signals_test.cpp.)
#include "test_runs.hpp"

TEST_CASE("run(): bad output paths and bad --sort digits stop before any work") {
    CHECK(contains(run_error({"--svg", "/nonexistent/dir", "--params"}), "--svg /nonexistent/dir: no such directory"));
    CHECK(contains(run_error({"--save", "/nonexistent/dir/m.txt", "--steps", "1"}), "--save /nonexistent/dir/m.txt"));
    CHECK(contains(run_error({"--sort", "1", "2", "3", "4", "12", "--params"}), "--sort 1 2 3 4 12: '12'"));
    CHECK(contains(run_error({"--load", "/nonexistent/model.txt"}), "--load /nonexistent/model.txt: cannot open"));
    CHECK(contains(run_error({"--train-data", "/nonexistent/data.txt", "--params"}), "--train-data /nonexistent"));
    TempDir dir("run-paths");
    CHECK(contains(run_error({"--save", dir.path.string(), "--steps", "1"}), "is a directory"));
    CHECK(contains(run_error({"--save", dir.file(std::string(250, 'm')), "--steps", "1"}), "file name is too long"));
    std::ofstream(dir.file("plain.txt")) << "not a directory\n";
    CHECK(contains(run_error({"--svg", dir.file("plain.txt"), "--params"}), "not a directory"));
    std::ofstream(dir.file("bad.txt")) << "5 3 9 1 1\n5 3 x 1 1\n";
    CHECK(contains(run_error({"--train-data", dir.file("bad.txt"), "--params"}), "bad.txt line 2: 'x'"));
    REQUIRE(mkfifo(dir.file("pipe").c_str(), 0644) == 0);  // refused at once, not after a million steps
    CHECK(contains(run_error({"--save", dir.file("pipe"), "--steps", "1000000"}), "not a regular file"));
    std::filesystem::create_directory(dir.file("read-only"));
    std::filesystem::permissions(dir.file("read-only"), std::filesystem::perms::owner_read |
                                                        std::filesystem::perms::owner_exec);
    if (geteuid() != 0) {  // root may write anywhere, so only another user can see this refusal
        CHECK(contains(run_error({"--save", dir.file("read-only/m.txt"), "--steps", "1"}), "cannot write into"));
        CHECK(contains(run_error({"--svg", dir.file("read-only"), "--params"}), "cannot write into this directory"));
    }
    std::filesystem::permissions(dir.file("read-only"), std::filesystem::perms::owner_all);
}


// A run that diverges stops at the step whose loss is not finite, names that step and what to try,
// and leaves nothing behind: before, --lr 1.5 --steps 6000 exited 0 with "loss nan" in its table.
// Output that cannot be written is an error: before, ./sorter > /dev/full exited 0.
// (/dev/full, whose every write fails, is Linux's: elsewhere that half is skipped, and says so.)
TEST_CASE("finish_output: a write error is reported with exit status 1") {
    if (std::FILE* full = std::fopen("/dev/full", "w")) {
        std::fputs("final: exact-match 100.0%\n", full);
        CHECK(finish_output(full, 0) == 1);
        std::fclose(full);
    } else {
        MESSAGE("skipped: this system has no /dev/full, so the failing write is not tried here");
    }
    std::FILE* fine = std::tmpfile();
    REQUIRE(fine != nullptr);
    std::fputs("final: exact-match 100.0%\n", fine);
    CHECK(finish_output(fine, 0) == 0);
    CHECK(finish_output(fine, 2) == 2);  // a usage error keeps its own status
    std::fclose(fine);
}

// With one possible input (digits 1..1, length 1) nothing can be held out: say so before training,
// instead of reporting "exact-match 0.0% (0/0)" as before.
TEST_CASE("run(): a configuration with no held-out set says so") {
    Options o;
    REQUIRE(parse_error({"--max-digit", "1", "--seq-len", "1", "--steps", "5"}, &o) == "");
    try {
        run(o);
        FAIL("trained without a held-out set");
    } catch (const UsageError& e) {
        CHECK(contains(e.message, "no held-out set is possible: --seq-len 1 --min-len 1 --max-digit 1 allow only 1 "
                                  "different input;"));
        CHECK(contains(e.message, "raise --seq-len or --max-digit"));
    }
}

TEST_CASE("training stops at the step it diverges, and writes nothing") {
    TempDir dir("diverge");
    Options o;
    REQUIRE(parse_error({"--lr", "10", "--steps", "300", "--save", dir.file("m.txt"), "--svg", dir.path.string()},
                        &o) == "");
    try {
        run(o);
        FAIL("a diverging run finished");
    } catch (const UsageError& e) {
        CHECK(contains(e.message, "training diverged at step 10 (loss nan)"));
        CHECK(contains(e.message, "try a smaller --lr than 10"));
    }
    CHECK(dir.listing().empty());
}

// With --save-every, a diverging run may have saved before its loss went wrong: the message says which step the --save
// file holds. A save comes only after its step's loss is known to be finite, and only of weights a checkpoint can
// hold. Before, the run said "Nothing was saved" over the checkpoint of step 10 (or, at --save-every 1, only that
// the model of step 11 was not saved).
TEST_CASE("a diverging run with --save-every says which checkpoint it left") {
    TempDir dir("diverge-every");
    const std::string m = dir.file("m.txt");
    const std::vector<std::pair<long, std::string>> plan = {  // --save-every, then the step the file must hold
        {5, "5"}, {6, "6"}, {1, "9"}, {1000, "none"}};
    for (const auto& step_kept : plan) {
        const long every = step_kept.first;  // (not a structured binding: INFO's lambda reads it)
        const std::string kept = step_kept.second;
        INFO("--save-every ", every);
        std::ofstream(m) << "old\n";
        std::string error =
            run_error({"--steps", "400", "--lr", "10", "--save-every", std::to_string(every), "--save", m});
        CHECK(contains(error, "try a smaller --lr than 10. "));
        if (every == 5 || every == 1) {  // step 10's loss is finite, but its update leaves weights no checkpoint may hold
            CHECK(contains(error, "training diverged at step 10 (after its update, tensor 'embed.table' holds a "
                                  "value beyond 1e+100)"));
        } else {  // the weights are only checked when saved: step 11's loss is nan, and nothing of it is written
            CHECK(contains(error, "training diverged at step 11 (loss nan)"));
        }
        if (kept == "none") {
            CHECK(contains(error, "Nothing was saved or drawn"));
            CHECK(read_all(m) == "old\n");
        } else {
            CHECK(contains(error, m + " holds the checkpoint of step " + kept + " (--save-every " +
                                  std::to_string(every) + "), the last before the loss went wrong; nothing else was "
                                  "saved or drawn"));
            CHECK(contains(read_all(m), "\nupdates " + kept + "\n"));
        }
    }
    CHECK(dir.listing() == std::vector<std::string>{"m.txt"});
}

TEST_CASE("a diverged run (nan or inf loss) still draws, and is not saved") {
    History h;
    h.losses = {2.0, 1.0, std::numeric_limits<double>::infinity(), std::nan("")};
    h.evals = {{4, std::nan(""), 0.0, 0.0, std::nan("")}};
    std::string svg = training_svg(h);
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(!contains(svg, "nan"));
    CHECK(!contains(svg, "inf"));
    print_loss_plot(h.losses);  // must return, not loop or crash
    h.losses = {std::nan(""), std::nan("")};
    CHECK(contains(training_svg(h), "not finite"));
    print_loss_plot(h.losses);

    ModelConfig c;
    DataConfig d;
    Transformer model(c, 1);
    model.out.b.value.at(0, 3) = std::nan("");
    TempDir dir("diverged");
    try {
        save_kept(dir.file("m.txt"), model, Kept{d});
        FAIL("a model holding nan was saved");
    } catch (const UsageError& e) {
        CHECK(contains(e.message, "tensor 'out.b' holds nan or inf"));
    }
    CHECK(dir.listing().empty());
}

// The report of a run, and of a loaded model: one page, whole, well-formed, with every section; with
// --load there are no curves. The default run's page is under 1 MB (its size, measured: docs/performance.md).

TEST_CASE("--report: one self-contained page of the run, and of a loaded model") {
    TempDir dir("report");
    Options o;
    REQUIRE(parse_error({"--steps", "200", "--eval-every", "100", "--save", dir.file("m.txt"), "--report",
                         dir.file("run.html")}, &o) == "");
    run(o);
    REQUIRE(parse_error({"--load", dir.file("m.txt"), "--report", dir.file("loaded.html")}, &o) == "");
    run(o);
    for (const char* name : {"run.html", "loaded.html"}) {
        std::string page = read_all(dir.file(name));
        INFO(name);
        CHECK(markup_problem(page) == "");
        CHECK(page.size() < 1000000u);
        for (const char* id : {"run", "curves", "attention", "replay", "positions", "mistakes"})
            CHECK(contains(page, "<section id=\"" + std::string(id) + "\">"));
        CHECK(contains(page, "step 1: the decoder has read S and writes"));
        CHECK(contains(page, "of the 1000 held-out sequences are wrong"));
        for (const char* fetch : {"src=", "href=\"http", "url(", "@import"})
            CHECK(!contains(page, fetch));  // everything inline, nothing fetched
        CHECK(!contains(page, "nan"));
    }
    CHECK(contains(read_all(dir.file("run.html")), "<section id=\"gradients\">"));
    CHECK(contains(read_all(dir.file("run.html")), "Gradient flow"));
    CHECK(!contains(read_all(dir.file("loaded.html")), "<section id=\"gradients\">"));
    CHECK(contains(read_all(dir.file("loaded.html")), "Not trained in this run"));
    CHECK(dir.listing() == std::vector<std::string>{"loaded.html", "m.txt", "run.html"});
}


// Two outputs on one file would leave one of them lost, and an output on the --load file would replace
// the model: before, --save m.txt --report m.txt left a page and no model, with exit status 0. Each is
// refused before any work; only --save may name the --load file (training on in place).
TEST_CASE("run(): two outputs naming one file, or an output naming the --load file, are refused") {
    TempDir dir("same-file");
    std::string m = dir.file("m.txt");
    CHECK(run_error({"--steps", "3", "--save", m, "--report", m}) ==
          "--save " + m + " and --report " + m + " name the same file, so one would overwrite the other; give each "
          "output its own name");
    CHECK(dir.listing().empty());
    CHECK(contains(run_error({"--steps", "3", "--save", m, "--dump-step", dir.path.string() + "/./m.txt"}),
                   "name the same file"));
    CHECK(contains(run_error({"--steps", "3", "--save", dir.file("attention.svg"), "--svg", dir.path.string()}),
                   "--svg " + dir.file("attention.svg") + " name the same file"));
    REQUIRE(run_error({"--steps", "3", "--save", m}) == "");
    const std::string model = read_all(m);
    CHECK(run_error({"--load", m, "--report", m}) ==
          "--report " + m + " is the file given to --load: writing it would replace the model; choose another name "
          "(only --save may name the --load file, to train on in place)");
    CHECK(contains(run_error({"--load", m, "--svg", dir.path.string(), "--report", dir.file("pe.svg")}),
                   "name the same file"));
    CHECK(read_all(m) == model);
    CHECK(run_error({"--load", m, "--steps", "2", "--save", m}) == "");  // training on in place
    CHECK(contains(read_all(m), "updates 5"));
}

// --svg checks each file it will write, before training, as --save is checked: before, a directory
// named pe.svg, or a link in its place, was found only after the whole run.
TEST_CASE("run(): each picture --svg will write is checked before training") {
    TempDir dir("svg-files");
    std::filesystem::create_directory(dir.file("pe.svg"));
    CHECK(run_error({"--svg", dir.path.string(), "--steps", "1000000"}) == "--svg " + dir.file("pe.svg") +
                                                                              ": is a directory");
    std::filesystem::remove(dir.file("pe.svg"));
    std::filesystem::create_symlink(dir.file("elsewhere"), dir.file("training.svg"));
    CHECK(contains(run_error({"--svg", dir.path.string(), "--steps", "1000000"}), "training.svg: not a regular file"));
    CHECK(dir.listing() == std::vector<std::string>{"training.svg"});
}

// A model trained on a --train-data file goes on only with that file: before, --load m.txt --steps 10
// trained on every source and scored on 13 "held-out" sequences, two of them lines of the file. The
// checkpoint keeps the file's fingerprint; the same file gives the same held-out set, any other is refused.
TEST_CASE("run(): a model trained on a --train-data file goes on with that file and its held-out set") {
    TempDir dir("pool");
    std::ofstream(dir.file("pool.txt")) << "1 2 3\n3 2 1\n2 2 1\n1 1 1\n3 3 2\n";
    std::ofstream(dir.file("other.txt")) << "# the same lines, one changed\n1 2 3\n3 2 1\n2 2 1\n1 1 1\n3 3 3\n";
    std::string m = dir.file("m.txt");
    std::string first = run_output({"--max-digit", "3", "--seq-len", "3", "--train-data", dir.file("pool.txt"),
                                 "--steps", "50", "--save", m});
    REQUIRE(contains(first, "held-out: 11 sequences that training never draws"));
    CHECK(contains(read_all(m), "\ntrain_data 5 "));
    CHECK(contains(run_output({"--load", m, "--steps", "10"}), "this model trained on a --train-data file of 5 "
                                                             "sequences; give the file again"));
    CHECK(contains(run_output({"--load", m, "--steps", "10", "--train-data", dir.file("other.txt")}),
                   "not the file the model in " + m + " trained on"));
    std::string again = run_output({"--load", m, "--steps", "10", "--train-data", dir.file("pool.txt")});
    CHECK(contains(again, "training data: 5 sequences"));
    CHECK(contains(again, "held-out: 11 sequences that training never draws"));
    CHECK(contains(run_output({"--load", m, "--sort", "3", "1", "2"}), "input  [3, 1, 2]"));  // no data needed
    // Saved again without the file (it sorts, so it needs none), quantized or not, the model keeps its fingerprint:
    // before, the train_data line was dropped, and the copy was scored on another held-out set and refused the file.
    const std::string line = read_all(m).substr(read_all(m).find("\ntrain_data 5 "));
    const std::string kept_line = line.substr(0, line.find('\n', 1) + 1);
    for (const std::vector<std::string>& extra : {std::vector<std::string>{}, {"--quantize", "8"}}) {
        std::vector<std::string> args = {"--load", m, "--save", dir.file("again.txt"), "--sort", "3", "1", "2"};
        args.insert(args.end(), extra.begin(), extra.end());
        REQUIRE(contains(run_output(args), "saved"));
        CHECK(contains(read_all(dir.file("again.txt")), kept_line));
        CHECK(contains(run_output({"--load", dir.file("again.txt"), "--train-data", dir.file("pool.txt")}),
                       "/11), token-accuracy"));  // the held-out set of its training file: 11 inputs
        CHECK(contains(run_output({"--load", dir.file("again.txt")}), "this model trained on a --train-data file"));
    }
    REQUIRE(contains(run_output({"--steps", "5", "--save", dir.file("plain.txt")}), "saved"));
    CHECK(contains(run_output({"--load", dir.file("plain.txt"), "--train-data", dir.file("pool.txt")}),
                   "that model trained on generated data"));
}

// One Dataset per run: --inspect scores on the held-out set training used. Before, with --train-data,
// --inspect built its own without the file (13 "held-out" inputs here, some of them training lines,
// where training held out 11), so its "none off" score disagreed with the run's final line.
TEST_CASE("run(): with --train-data, --inspect scores the run's own held-out set") {
    TempDir dir("one-dataset");
    std::ofstream(dir.file("pool.txt")) << "1 2 3\n3 2 1\n2 2 1\n1 1 1\n3 3 2\n";
    std::string text = run_output({"--max-digit", "3", "--seq-len", "3", "--train-data", dir.file("pool.txt"),
                                   "--steps", "300", "--inspect"});
    INFO(text);
    std::size_t final_at = text.find("final: exact-match "), none_at = text.find("(none off: ");
    REQUIRE(final_at != std::string::npos);
    REQUIRE(none_at != std::string::npos);
    std::string final_score = text.substr(final_at + 19, text.find('%', final_at) - final_at - 19);
    std::string inspect_score = text.substr(none_at + 11, text.find('%', none_at) - none_at - 11);
    CHECK(contains(text, "/11), token-accuracy"));  // training held out 11 inputs
    CHECK(final_score == inspect_score);
}

// The paper's extras in whole runs. A beam: the header says so, --sort prints the K hypotheses (the first is
// the output line's), the report's replay lists the beams; a loaded model takes --beam (a choice of each run,
// not of the checkpoint). The regularisers: on the variant line and in a version 3 checkpoint that --load
// reads back; the same seed gives the same file.
TEST_CASE("run(): beam search, and the regularisers, in whole runs") {
    TempDir dir("run-extras");
    std::string trained = run_output({"--steps", "150", "--beam", "3", "--sort", "5", "3", "9", "1", "1", "--report",
                                      dir.file("r.html"), "--save", dir.file("m.txt")});
    CHECK(contains(trained, "decoding: beam search, beam 3, length penalty 0.6\n"));
    std::string output = trained.substr(trained.find("output [") + 7, 15);
    std::string hypotheses = trained.substr(trained.find("the hypotheses, best score first\n"));
    hypotheses = hypotheses.substr(0, hypotheses.find("saved"));
    CHECK(std::count(hypotheses.begin(), hypotheses.end(), '\n') == 4);  // the title and 3 hypotheses
    CHECK(hypotheses.find("\n  " + output) != std::string::npos);
    CHECK(contains(read_all(dir.file("r.html")), "beam search (beam 3, length penalty 0.6) keeps:"));
    std::string loaded = run_output({"--load", dir.file("m.txt"), "--beam", "2", "--length-penalty", "0", "--sort",
                                     "5", "3", "9", "1", "1"});
    CHECK(contains(loaded, "beam search, beam 2, length penalty 0: the hypotheses, best score first\n"));
    CHECK(!contains(read_all(dir.file("m.txt")), "beam"));  // a beam is not kept

    std::vector<std::string> regularised = {"--steps", "40", "--dropout", "0.1", "--attn-dropout", "0.1",
                                            "--label-smoothing", "0.1", "--tie-embeddings", "--clip", "1",
                                            "--weight-decay", "0.1", "--save"};
    std::vector<std::string> once = regularised, twice = regularised;
    once.push_back(dir.file("a.txt")), twice.push_back(dir.file("b.txt"));
    std::string printed = run_output(once);
    CHECK(contains(printed, "variant: --tie-embeddings --dropout 0.1 --attn-dropout 0.1 --label-smoothing 0.1 "
                            "--clip 1 --weight-decay 0.1\n"));
    CHECK(contains(printed, "label smoothing: the losses below are the plain cross-entropy"));
    run_output(twice);
    CHECK(read_all(dir.file("a.txt")) == read_all(dir.file("b.txt")));
    CHECK(read_all(dir.file("a.txt")).rfind("sorter-checkpoint 5\n", 0) == 0);
    std::string again = run_output({"--load", dir.file("a.txt"), "--steps", "5"});
    CHECK(contains(again, "variant: --tie-embeddings --dropout 0.1"));
    CHECK(contains(run_error({"--load", dir.file("a.txt"), "--dropout", "0.2"}), "--dropout cannot be combined"));
    std::string maps = run_output({"--load", dir.file("a.txt"), "--show-attention", "--sort", "3", "1", "2", "2", "1"});
    CHECK(contains(maps, "attention dropout (0.1) acts in training only: these are the weights before it"));
}

// The length lab on a saved model: --test-len only decodes, so it goes with --load. A sinusoidal table is
// computed to the longest length asked for; a learned table is as long as the model trained it, and a length
// past it is refused with that reason. A resumed linear schedule says on stderr how its rate jumps.
TEST_CASE("run(): --test-len with --load, and a resumed linear schedule's note") {
    TempDir dir("test-len");
    REQUIRE(run_error({"--steps", "30", "--save", dir.file("sin.txt")}) == "");
    std::string lab = run_output({"--load", dir.file("sin.txt"), "--test-len", "7"});
    CHECK(contains(lab, "--- held-out exact-match by input length (trained on lengths 5 to 5) ---"));
    CHECK(contains(lab, "  length  7: "));
    REQUIRE(run_error({"--steps", "30", "--pos", "learned", "--save", dir.file("learned.txt")}) == "");
    CHECK(contains(run_error({"--load", dir.file("learned.txt"), "--test-len", "7"}),
                   "--test-len 7 with --load " + dir.file("learned.txt") + ": this model's learned position table "
                   "has 5 rows"));
    CHECK(run_error({"--load", dir.file("learned.txt"), "--test-len", "5"}) == "");

    std::string note;
    {
        std::FILE* f = std::tmpfile();
        REQUIRE(f);
        std::FILE* saved_stderr = stderr;
        stderr = f;
        run_output({"--load", dir.file("sin.txt"), "--steps", "30"});
        stderr = saved_stderr;
        std::rewind(f);
        for (int ch; (ch = std::fgetc(f)) != EOF;) note += char(ch);
        std::fclose(f);
    }
    // steps 31 to 60 at lr 0.2: step 31's rate 0.2 (1 - 30 / 60) = 0.1; step 30's, had its schedule ended there,
    // 0.2 / 30
    CHECK(contains(note, "sorter: note: the linear schedule now runs to step 60, so step 31 trains at rate 0.1, 15x "
                         "the 0.00667 of step 30 if the saved run's schedule ended there"));
}

// A checkpoint keeps the seed its model was made with (version 4): a resumed run's header and the loaded
// line say it. A file from before version 4 did not keep it: "unknown", and so it stays when saved again.
TEST_CASE("run(): a loaded model's seed, kept in the checkpoint or unknown") {
    TempDir dir("seed");
    REQUIRE(run_error({"--steps", "20", "--seed", "7", "--save", dir.file("s7.txt")}) == "");
    CHECK(contains(read_all(dir.file("s7.txt")), "\nseed 7\n"));
    std::string resumed = run_output({"--load", dir.file("s7.txt"), "--steps", "10"});
    CHECK(contains(resumed, "; seed 7, 20 updates made\n"));
    CHECK(contains(resumed, "steps 21 to 30, seed 7\n"));
    std::ofstream(dir.file("v3.txt")) << as_version(read_all(dir.file("s7.txt")), 3);
    std::string old = run_output({"--load", dir.file("v3.txt"), "--steps", "10", "--save", dir.file("again.txt")});
    CHECK(contains(old, "steps 21 to 30, seed unknown\n"));
    CHECK(contains(read_all(dir.file("again.txt")), "\nseed unknown\n"));
    CHECK(contains(run_output({"--load", dir.file("again.txt"), "--sort", "1", "2", "3", "4", "5"}),
                   "; seed unknown, 30 updates"));
}

// A decoder-only model reads source and answer as one sequence, so its position table is twice as long: at the
// longest inputs with random positions, 4 x 2 x 32 = 256 rows. Before, such a model saved and then failed to load
// ("max_len 256: expected a whole number from 1 to 128").
TEST_CASE("run(): the longest decoder-only model with random positions saves and loads") {
    TempDir dir("long-decoder-only");
    std::string m = dir.file("m.txt");
    REQUIRE(run_error({"--arch", "decoder-only", "--pos", "random", "--seq-len", "32", "--d-model", "8", "--steps", "1",
                       "--eval-every", "1000", "--save", m}) == "");
    CHECK(contains(read_all(m), "\nmax_len 256\n"));
    std::vector<std::string> args = {"--load", m, "--sort"};
    for (int k = 0; k < 32; k++) args.push_back(std::to_string(1 + k % 9));  // 32 digits, the longest input
    CHECK(run_error(args) == "");
}

// Fine-tuning with adapters (chapter 12, workbench/lora.hpp), whole runs: on an Adam checkpoint, whose running means
// are the base's, the adapters train from step 1 with their own; the merged file and the adapters on their base
// score the same; the same bits on 1 and 2 threads; --lr only for a fine-tuning run; --finish with --lora refused
// (a killed LoRA run's --finish: signals_test.cpp).
TEST_CASE("lora: a fine-tuning run on an Adam checkpoint, merged and unmerged, on 1 and 2 threads") {
    TempDir dir("lora-run");
    const std::string base = dir.file("m.txt"), adapters = dir.file("a.txt");
    REQUIRE(run_error({"--optimizer", "adam", "--steps", "30", "--save", base}) == "");
    std::vector<std::string> files;
    for (const char* threads : {"1", "2"}) {
        const std::string tuned = dir.file(std::string("t") + threads + ".txt");
        const std::string out = run_output({"--load", base, "--lora", "2", "--lora-on", "all", "--task", "reverse",
                                            "--lr", "0.01", "--steps", "20", "--threads", threads, "--save", tuned,
                                            "--save-adapters", adapters});
        CHECK(contains(out, "30 updates made\nfine-tuning: a run of its own, from step 1; first trained on task sort"));
        CHECK(contains(out, "first trained on: task sort, seq_len 5, min_len 5: held-out exact-match now"));
        CHECK(contains(out, "saved " + tuned + " (merged)\nsaved " + adapters + "\n"));
        files.push_back(read_all(tuned));
    }
    CHECK(files[0] == files[1]);
    CHECK(files[0].rfind("sorter-checkpoint 9\n", 0) == 0);
    auto last_line = [](const std::string& text) { return text.substr(text.rfind("held-out:")); };
    const std::string merged = run_output({"--load", dir.file("t1.txt")});
    const std::string unmerged = run_output({"--load", base, "--adapters", adapters, "--task", "reverse"});
    CHECK(last_line(merged) == last_line(unmerged));
    CHECK(contains(run_error({"--load", base, "--lr", "0.1", "--steps", "1"}), "--lr 0.1 with --load " + base +
                                                                                ": the checkpoint fixes its training"));
    CHECK(run_error({"--load", base, "--lora", "2", "--finish", "--save", base}) ==
          "--finish trains the rest of the run saved in " + base + " with the adapters, data and rate it keeps: drop "
          "--lora");
}
