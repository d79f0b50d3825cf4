// workbench/files_test.cpp -- tests of --sort and --train-data input, and the atomic write (files.hpp).
#include "test_helpers.hpp"
#include "files.hpp"

TEST_CASE("--sort digits are checked against the data settings") {
    DataConfig d;  // seq_len 5, min_len 5, max_digit 9
    auto error = [&](const std::vector<std::string>& words) {
        try {
            parse_sequence(words, d, "--sort " + join(words, " "));
            return std::string();
        } catch (const UsageError& e) {
            return e.message;
        }
    };
    CHECK(error({"5", "3", "9", "1", "1"}) == "");
    CHECK(contains(error({"5", "3", "9", "1", "0"}), "'0' is not a digit from 1 to 9"));
    CHECK(contains(error({"5", "3", "9", "1", "10"}), "'10'"));
    CHECK(contains(error({"5", "3", "x", "1", "1"}), "'x'"));
    CHECK(contains(error({"5", "3", "-2", "1", "1"}), "'-2'"));
    CHECK(contains(error({"5", "3"}), "2 digits; expected exactly 5"));
    CHECK(contains(error({"1", "2", "3", "4", "5", "6"}), "6 digits"));
    d.min_len = 2;
    CHECK(error({"5", "3"}) == "");
    CHECK(contains(error({"5"}), "expected from 2 to 5"));
}

TEST_CASE("--train-data: sequences are read and every bad line is named") {
    DataConfig d;
    d.min_len = 3;
    auto read = [&](const std::string& text, std::vector<std::vector<int>>* out = nullptr) {
        std::istringstream in(text);
        try {
            auto seqs = read_train_data(in, d, "--train-data data.txt");
            if (out) *out = seqs;
            return std::string();
        } catch (const UsageError& e) {
            return e.message;
        }
    };
    std::vector<std::vector<int>> seqs;
    CHECK(read("# a comment\n5 3 9 1 1\n\n  2 2 7\r\n1 2 3 4\n", &seqs) == "");
    REQUIRE(seqs.size() == 3);
    CHECK(seqs[0] == std::vector<int>{5, 3, 9, 1, 1});
    CHECK(seqs[1] == std::vector<int>{2, 2, 7});
    CHECK(contains(read("5 3 9 1 1\n5 3 0 1 1\n"), "--train-data data.txt line 2: '0' is not a digit"));
    CHECK(contains(read("5 3 9 1 1\n5 3 1x 1 1\n"), "line 2: '1x'"));
    CHECK(contains(read("5 3 9 1 1\n\n5 3\n"), "line 3: 2 digits; expected from 3 to 5"));
    CHECK(contains(read("1 2 3 4 5 6\n"), "line 1: 6 digits"));
    CHECK(contains(read(""), "no sequences"));
    CHECK(contains(read("# only a comment\n\n"), "no sequences"));
    CHECK(contains(read(std::string(5000, '1') + "\n"), "line 1: longer than 4096 characters"));
    // A line with no end is rejected at the limit, not read to its end: the stream is left unread.
    std::istringstream endless(std::string(100000, '7'));
    CHECK_THROWS_AS(read_train_data(endless, d, "--train-data /dev/zero"), UsageError);
    CHECK(endless.tellg() < 5000);
    CHECK_THROWS_AS(load_train_data("/nonexistent/data.txt", d), UsageError);
    TempDir dir("train-data");
    try {
        load_train_data(dir.path.string(), d);
        FAIL("a directory was accepted as --train-data");
    } catch (const UsageError& e) {
        CHECK(contains(e.message, "is a directory"));
    }
}

TEST_CASE("atomic writes: a failed save leaves no file and no temporary behind") {
    ModelConfig c;
    DataConfig d;
    Transformer model(c, 1);
    TempDir dir("atomic");
    // The target is a directory: the write of the temporary succeeds, the rename fails.
    std::filesystem::create_directory(dir.path / "taken");
    CHECK_THROWS_AS(save_kept(dir.file("taken"), model, Kept{d}), UsageError);
    CHECK(dir.listing() == std::vector<std::string>{"taken"});
    // The directory does not exist: nothing can be written at all.
    try {
        save_kept(dir.file("missing/model.txt"), model, Kept{d});
        FAIL("saved into a missing directory");
    } catch (const UsageError& e) {
        CHECK(contains(e.message, "--save"));
        CHECK(contains(e.message, "cannot write"));
    }
    CHECK(dir.listing() == std::vector<std::string>{"taken"});
    // Overwriting an existing checkpoint replaces it whole.
    save_kept(dir.file("m.txt"), model, Kept{d});
    std::string first = read_all(dir.file("m.txt"));
    Transformer other(c, 2);
    save_kept(dir.file("m.txt"), other, Kept{d});
    CHECK(read_all(dir.file("m.txt")) != first);
    CHECK(read_all(dir.file("m.txt")) == checkpoint_text(other, Kept(d)));
}

// --dump-step writes what reference/torch_sorter.py recomputes: the batch, each example's logits
// and the loss, the same numbers train_step then uses (the loss to the last bit), and the
// weights before the step as a checkpoint that loads back.
// Only a regular file is replaced, and it keeps its mode; a link planted at the temporary's name is
// not followed. Before: --save onto a symlink or a FIFO replaced it with a regular file, a file of
// mode 600 came back 644, and a link at NAME.tmp-PID had its target overwritten.
TEST_CASE("atomic writes: links, pipes and modes") {
    Transformer model(ModelConfig(), 1);
    TempDir dir("links");
    std::ofstream(dir.file("target.txt")) << "keep me\n";
    std::filesystem::create_symlink(dir.file("target.txt"), dir.file("link.txt"));
    auto save_error = [&](const std::string& path) {
        try {
            save_kept(path, model, Kept{});
            return std::string();
        } catch (const UsageError& e) {
            return e.message;
        }
    };
    CHECK(contains(save_error(dir.file("link.txt")), "not a regular file"));
    REQUIRE(mkfifo(dir.file("pipe").c_str(), 0644) == 0);
    CHECK(contains(save_error(dir.file("pipe")), "not a regular file"));
    std::filesystem::create_symlink(dir.file("target.txt"),
                                    dir.file("m.txt") + ".tmp-" + std::to_string(long(getpid())));
    CHECK(contains(save_error(dir.file("m.txt")), "cannot write"));
    CHECK(read_all(dir.file("target.txt")) == "keep me\n");
    CHECK(std::filesystem::is_symlink(dir.file("link.txt")));

    std::ofstream(dir.file("private.txt")) << "old\n";
    REQUIRE(chmod(dir.file("private.txt").c_str(), 0600) == 0);
    save_kept(dir.file("private.txt"), model, Kept{});
    struct stat st{};
    REQUIRE(stat(dir.file("private.txt").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(read_all(dir.file("private.txt")) != "old\n");
}

