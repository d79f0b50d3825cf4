// workbench/step_dump_test.cpp -- tests of step_dump.hpp: --dump-step writes the first step, bit for bit.
#include "test_helpers.hpp"
#include "step_dump.hpp"

TEST_CASE("--dump-step: the first step, bit for bit") {
    DataConfig d = few_digits();
    Transformer model(small_model(d), 5);
    std::vector<Example> batch = batch_of(d, 10, 3, 4, 3);
    TempDir dir("dump");
    const Kept kept{d};
    dump_step(dir.file("step.txt"), model, batch, 0.25, kept.data, kept.train, kept.state, kept.origin);
    std::istringstream in(read_all(dir.file("step.txt")));
    std::string word, loss_text;
    in >> word >> word;
    CHECK(word == "1");
    double lr = 0;
    int examples = 0;
    in >> word >> lr >> word >> examples;
    CHECK(lr == 0.25);
    REQUIRE(examples == 3);
    for (int i = 0; i < examples; i++) {
        std::string line;
        std::getline(in >> std::ws, line);
        CHECK(line == "example " + std::to_string(i));
        std::getline(in, line);
        CHECK(line == "source " + ids_text(batch[i].source));
        std::getline(in, line);
        CHECK(line == "target_in " + ids_text(batch[i].target_in));
        std::getline(in, line);
        CHECK(line == "target " + ids_text(batch[i].target));
        int rows = 0, cols = 0;
        in >> word >> rows >> cols;
        Matrix logits = model.forward({batch[i].source}, {batch[i].target_in});
        REQUIRE(rows == logits.rows);
        REQUIRE(cols == logits.cols);
        for (double expected : logits.data) {
            in >> word;
            CHECK(std::strtod(word.c_str(), nullptr) == expected);
        }
    }
    in >> word >> loss_text >> word;
    CHECK(word == "checkpoint");
    std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Kept loaded;
    std::istringstream checkpoint(rest);
    Transformer before = read_kept(checkpoint, "the dump", loaded);
    CHECK(before.parameters()[0].second->value.data == model.parameters()[0].second->value.data);
    CHECK(std::strtod(loss_text.c_str(), nullptr) == gradient_of(model, batch, 0.0).plain);

    // With label smoothing, "loss" is still the plain cross-entropy (the table's), and smoothed_loss follows it:
    // the loss training follows, to the last bit.
    Kept smoothed{d};
    smoothed.train.label_smoothing = 0.1;
    dump_step(dir.file("smoothed.txt"), model, batch, 0.25, smoothed.data, smoothed.train, smoothed.state,
              smoothed.origin);
    const std::string text = read_all(dir.file("smoothed.txt"));
    const Loss loss = gradient_of(model, batch, 0.1);
    CHECK(loss.followed > loss.plain);
    CHECK(contains(text, fmt("\nloss %.17g\nsmoothed_loss %.17g\ncheckpoint\n", loss.plain, loss.followed)));
    CHECK(!contains(read_all(dir.file("step.txt")), "smoothed_loss"));
    CHECK(!contains(read_all(dir.file("step.txt")), "adapters"));

    // Fine-tuning (chapter 12): the adapters before the step, as their file, and the later steps' batches, before
    // the checkpoint (the base, which still reads back).
    Rng draws(3);
    add_adapters(model, 2, 2.0, LoraOn::qv, draws);
    dump_step(dir.file("tuned.txt"), model, batch, 0.25, kept.data, kept.train, kept.state, kept.origin,
              {{2, 0.125, batch}});
    const std::string tuned = read_all(dir.file("tuned.txt"));
    CHECK(contains(tuned, "\nadapters\nsorter-adapters 1\n"));
    CHECK(contains(tuned, "tensor decoder.0.self_attn.W_v.lora_B 2 "));
    CHECK(contains(tuned, "end\nlater_steps 1\nstep 2 lr 0.125 examples 3\nsource " + ids_text(batch[0].source) +
                              "\ntarget_in " + ids_text(batch[0].target_in) + "\n"));
    const std::size_t at = tuned.find("\ncheckpoint\n");
    REQUIRE(at != std::string::npos);
    CHECK(tuned.find("later_steps") < at);
    std::istringstream base(tuned.substr(at + 12));
    Kept reread;
    CHECK(read_kept(base, "the dump", reread).parameters().size() == model.parameters().size());
}
