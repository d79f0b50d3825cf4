// workbench/lora_test.cpp -- lora.hpp: the adapters' flags refused when they make no sense, R above a matrix's smaller
// side, the adapters' file (read back to the same bits; another base, a cut file and a checkpoint refused by one
// line), the merged checkpoint (loads with no flag, the same logits), on a quantized base too; fine-tuning on other
// data (the first data kept in the checkpoint, version 9; older files still load; both held-out sets unseen).
#include <doctest/doctest.h>

#include "lora.hpp"
#include "test_helpers.hpp"

namespace lora_workbench_test {
// A trained model's copy with adapters of rank R on every matrix, B moved off zero (as training would).
Transformer adapted(Transformer base, int R) {
    Rng rng(5);
    add_adapters(base, R, 2.0 * R, LoraOn::all, rng);
    for (auto& [name, p] : adapters_of(base))
        for (double& v : p->value.data) v += rng.uniform(-0.2, 0.2);
    return base;
}
Matrix logits_of(Transformer& model, const DataConfig& d) {
    const std::vector<Example> batch = batch_of(d, 20, 5, 3, 4);
    Inputs in = inputs_of(batch, 0, batch.size());
    return model.forward(in.sources, in.targets_in);
}
double largest_difference(const Matrix& a, const Matrix& b) {
    double worst = 0.0;
    for (std::size_t i = 0; i < a.data.size(); i++) worst = std::max(worst, std::fabs(a.data[i] - b.data[i]));
    return worst;
}
// The tuned model's adapters written to `path` (--save-adapters) and read back onto its base (--adapters): the same
// values, the same logits.
void check_adapters_read_back(Transformer& base, Transformer& tuned, const std::string& path, const DataConfig& d) {
    write_atomically(path, "--save-adapters", [&](FILE* f) { write_adapters(f, tuned, base_fingerprint(base)); });
    Transformer again = base;
    read_adapters(path, "m.txt", again);
    const ParamList want = adapters_of(tuned), got = adapters_of(again);
    REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < got.size(); k++) CHECK(got[k].second->value.data == want[k].second->value.data);
    CHECK(logits_of(again, d).data == logits_of(tuned, d).data);
}
}  // namespace lora_workbench_test

TEST_CASE("lora: flags that make no sense are one line naming the fix") {
    CHECK(contains(parse_error({"--lora", "4"}), "--lora 4 fine-tunes a trained model: add --load FILE"));
    CHECK(contains(parse_error({"--load", "m.txt", "--lora-alpha", "8"}), "--lora-alpha sets the adapters' scale: "
                                                                           "add --lora R"));
    CHECK(contains(parse_error({"--load", "m.txt", "--lora-on", "all"}), "add --lora R"));
    CHECK(contains(parse_error({"--save-adapters", "a.txt"}), "add --lora R"));
    // with --load, the file decides (a LoRA run under way holds adapters): signals_test.cpp has the refusal
    CHECK(parse_error({"--load", "m.txt", "--save-adapters", "a.txt"}) == "");
    CHECK(contains(parse_error({"--adapters", "a.txt"}), "add --load FILE, the model they were trained on"));
    CHECK(contains(parse_error({"--load", "m.txt", "--adapters", "a.txt", "--lora", "2"}), "not both"));
    CHECK(contains(parse_error({"--load", "m.txt", "--lora", "2", "--quantize", "8"}), "quantize the model first"));
    CHECK(parse_error({"--load", "m.txt", "--lora", "2", "--lora-on", "all", "--lora-alpha", "16"}) == "");
    // --dump-step records a fine-tuning step (the twin's, make reference); a loaded model's other steps, none.
    CHECK(parse_error({"--load", "m.txt", "--lora", "2", "--dump-step", "d.txt"}) == "");
    CHECK(parse_error({"--load", "m.txt", "--adapters", "a.txt", "--dump-step", "d.txt"}) == "");
    CHECK(contains(parse_error({"--load", "m.txt", "--dump-step", "d.txt"}), "cannot be combined with --load"));
    CHECK(parse_error({"--load", "m.txt", "--task", "reverse", "--seq-len", "7", "--steps", "10"}) == "");
}

TEST_CASE("lora: R above a matrix's smaller side is refused by name") {
    ModelConfig c;
    DataConfig d;
    Transformer model = small_trained_model(c, d);  // d_model 8
    CHECK(rank_problem(model, 8, LoraOn::qv) == "");
    CHECK(contains(rank_problem(model, 9, LoraOn::qv), "--lora 9: above the smaller side of encoder.0.self_attn.W_q "
                                                       "(8, 8) (rank at most 8); choose R from 1 to 8"));
}

TEST_CASE("lora: the adapters' file reads back to the same bits, on its base alone") {
    using namespace lora_workbench_test;
    ModelConfig c;
    DataConfig d;
    Transformer base = small_trained_model(c, d), tuned = adapted(base, 2);
    TempDir dir("lora-file");
    const std::string path = dir.file("a.txt");
    check_adapters_read_back(base, tuned, path, d);
    // Another base: one weight moved by one step of its last bit is refused, by one line naming the fix.
    Transformer other = base;
    other.parameters()[3].second->value.data[0] = std::nextafter(other.parameters()[3].second->value.data[0], 1.0);
    CHECK(contains(usage_error_of([&] { read_adapters(path, "other.txt", other); }),
                   "was trained on another base (fingerprint"));
    CHECK(contains(usage_error_of([&] { read_adapters(path, "other.txt", other); }), "load the model they were "
                                                                                      "trained on"));
    // Not A and B of each W_q and W_v, or of every matrix, once each (a tensor left out): one line.
    const std::string text = read_all(path);
    const std::size_t last = text.rfind("tensor ");
    const std::size_t tensors = adapters_of(tuned).size();
    const std::string count = fmt("tensors %zu\n", tensors);
    std::ofstream(dir.file("short.txt")) << replace_once(text.substr(0, last), count,
                                                         fmt("tensors %zu\n", tensors - 1)) + "end\n";
    Transformer short_of_one = base;
    CHECK(contains(usage_error_of([&] { read_adapters(dir.file("short.txt"), "m.txt", short_of_one); }),
                   "its tensors are not A and B of each W_q and W_v, or of every matrix, once each"));
    // Cut short anywhere: one line, never a crash.
    for (std::size_t cut : {std::size_t(5), text.size() / 3, text.size() / 2, text.size() - 5}) {
        std::ofstream(dir.file("cut.txt")) << text.substr(0, cut);
        Transformer fresh = base;
        const std::string error = usage_error_of([&] { read_adapters(dir.file("cut.txt"), "m.txt", fresh); });
        INFO(cut, ": ", error);
        CHECK(contains(error, "--adapters " + dir.file("cut.txt") + " line"));
        CHECK((contains(error, "truncated") || contains(error, "not a sorter adapters file")));
    }
}

TEST_CASE("lora: the merged checkpoint loads with no flag, with the adapted model's logits") {
    using namespace lora_workbench_test;
    ModelConfig c;
    DataConfig d;
    Transformer base = small_trained_model(c, d), tuned = adapted(base, 3);
    TempDir dir("lora-merged");
    Options o;
    o.save_path = dir.file("merged.txt"), o.data = d, o.lora_rank = 3;
    TrainState state(o.train, 1);
    save_fine_tuned(o, tuned, state, Origin());
    Kept k;
    Transformer merged = load_kept(o.save_path, k);
    CHECK(adapters_of(merged).empty());
    const double worst = largest_difference(logits_of(merged, d), logits_of(tuned, d));
    INFO("largest difference ", worst);
    CHECK(worst < 1e-12);
    CHECK(largest_difference(logits_of(base, d), logits_of(tuned, d)) > 1e-3);  // the adapters did change it
}

// A run under way (its planned steps not all made) is saved unmerged: the base as it was, the adapters apart with their
// scale itself (1/3 here, which alpha / R worked out again from s R need not give) and where they sit, and their
// optimizer's running means (version 10). Read back, it trains on to the same bits as the run that never stopped; on a
// quantized base too, whose integers stay as they were. A file that says where the adapters sit wrongly is one line.
TEST_CASE("lora: a run under way is saved with its adapters apart, and goes on to the same bits") {
    using namespace lora_workbench_test;
    for (int bits : {0, 8}) {
        INFO("bits ", bits);
        ModelConfig c;
        DataConfig d;
        Transformer tuned = small_trained_model(c, d);
        if (bits > 0) printed_by([&] { quantize_model(tuned, bits); });
        Rng rng(5);
        add_adapters(tuned, 3, 1.0, LoraOn::all, rng);
        Options o;
        o.data = d, o.train.optimizer = OptimizerKind::adam, o.train.lr = 0.01, o.train.batch = 4;
        const Dataset data(d, {}, 20, 5);
        TrainState state(o.train, 9);
        Origin origin;
        origin.planned_steps = 6;
        for (int step = 0; step < 3; step++) train_step(tuned, data, o.train, state, 6);
        TempDir dir("lora-under-way");
        o.save_path = dir.file("u.txt");
        save_fine_tuned(o, tuned, state, origin);
        const std::string text = read_all(o.save_path);
        CHECK(text.rfind("sorter-checkpoint 10\n", 0) == 0);
        CHECK(contains(text, "\nlora_rank 3\nlora_scale 0.33333333333333331\nlora_on all\n"));
        CHECK(contains(text, "\nupdates 3\nplanned_steps 6\n"));
        CHECK(contains(text, "\nm encoder.0.self_attn.W_q.lora_A\n"));  // the running means: the adapters' alone
        CHECK(!contains(text, "\nm embed.table\n"));
        Kept k(d);
        Transformer back = load_kept(o.save_path, k);
        CHECK(adapters_scale(back) == 1.0 / 3.0);
        CHECK(adapters_on(back) == LoraOn::all);
        CHECK(k.state.updates == 3);
        CHECK(k.origin.planned_steps == 6);
        CHECK(checkpoint_text(back, k) == text);  // saved again: the same bytes
        for (int step = 3; step < 6; step++) {
            train_step(tuned, data, o.train, state, 6);
            train_step(back, data, k.train, k.state, 6);
        }
        const ParamList want = adapters_of(tuned), got = adapters_of(back);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); i++) CHECK(got[i].second->value.data == want[i].second->value.data);
        Kept kept(d, o.train);
        kept.state = state, kept.origin = origin;
        CHECK(checkpoint_text(back, k) == checkpoint_text(tuned, kept));
        CHECK(contains(load_error(replace_once(text, "lora_on all", "lora_on qv")), "tensor"));
        CHECK(contains(load_error(replace_once(text, "sorter-checkpoint 10", "sorter-checkpoint 9")),
                       "the line 'lora_rank' came in version 10"));
        CHECK(contains(load_error(replace_once(text, "sorter-checkpoint 10", "sorter-checkpoint 010")),
                       "format version 010 is not supported (this program reads versions 1 to " +
                           std::to_string(newest_version()) + ")"));
    }
}

TEST_CASE("lora: on a quantized base, the merged model is quantized again to its bits") {
    using namespace lora_workbench_test;
    ModelConfig c;
    DataConfig d;
    Transformer base = small_trained_model(c, d);
    printed_by([&] { quantize_model(base, 8); });
    Transformer tuned = adapted(base, 2), merged = merged_copy(tuned);
    CHECK(merged.config.bits == 8);
    for (auto& [name, p] : merged.parameters())
        if (is_product_matrix(name)) CHECK(merged.integers.count(name) == 1);
    const double worst = largest_difference(logits_of(merged, d), logits_of(tuned, d));
    INFO("merged and requantized against float adapters over the 8-bit base: ", worst);
    CHECK(worst > 0.0);   // the merge is rounded to 8 bits again: the cost of keeping the model quantized
    CHECK(worst < 0.05);
}

TEST_CASE("lora: a fine-tuned checkpoint keeps its first data (version 9); older files load as before") {
    ModelConfig c;
    DataConfig d;
    Transformer model = small_trained_model(c, d);  // reverse, seq_len 4, min_len 2
    Kept k(d);
    const std::string plain = checkpoint_text(model, k);
    CHECK(!contains(plain, "trained_task"));  // not fine-tuned: the bytes as before
    k.origin.trained_on = d, k.origin.trained_on.task = Task::sort, k.origin.fine_tuned = true;
    const std::string text = checkpoint_text(model, k);
    CHECK(text.rfind("sorter-checkpoint 9\n", 0) == 0);
    CHECK(contains(text, "trained_task sort\ntrained_seq_len 4\ntrained_min_len 2\n"));
    std::istringstream in(text);
    Kept back;
    read_kept(in, "m.txt", back);
    CHECK(back.origin.fine_tuned);
    CHECK(back.origin.trained_on.task == Task::sort);
    CHECK(back.data.task == Task::reverse);
    std::istringstream old(plain);
    Kept before;
    read_kept(old, "m.txt", before);
    CHECK(!before.origin.fine_tuned);
    CHECK(same_data(before.origin.trained_on, d));
}

TEST_CASE("lora: fine-tuning on longer inputs keeps both held-out sets unseen") {
    DataConfig first;
    first.seq_len = 4, first.min_len = 2, first.max_digit = 4;
    Options o;
    o.data = first, o.data.seq_len = 6, o.data.min_len = 2;
    Origin origin;
    origin.trained_on = first, origin.fine_tuned = true;
    const Dataset data = dataset_of(o, origin, {}), first_data(first), plain(o.data);
    CHECK(data.held_out.size() < plain.held_out.size());  // some held-out inputs were of the first lengths
    for (const Example& e : data.held_out) {
        std::vector<int> digits = e.source;
        digits.erase(std::remove(digits.begin(), digits.end(), PAD), digits.end());
        if (int(digits.size()) <= first.seq_len) CHECK(first_data.held_out_sources.count(digits) == 1);
    }
    Rng draws(3);
    for (int i = 0; i < 2000; i++) {
        std::vector<int> digits = data.sample(draws).source;
        digits.erase(std::remove(digits.begin(), digits.end(), PAD), digits.end());
        CHECK(first_data.held_out_sources.count(digits) == 0);
    }
    origin.fine_tuned = false;
    CHECK(dataset_of(o, origin, {}).held_out.size() == plain.held_out.size());
}

// With experts (chapter 11), --lora-on all adapts each expert's feed-forward: the adapters' file holds them and reads
// back to the same bits; the merged checkpoint loads with no flag and scores the held-out set as the adapted model did.
TEST_CASE("lora: adapters on each expert, through their file and the merged checkpoint") {
    using namespace lora_workbench_test;
    ModelConfig c;
    DataConfig d;
    c.experts = 3, c.top_k_asked = 2, c.shared_experts = 1;
    Transformer base = small_trained_model(c, d), tuned = adapted(base, 2);
    REQUIRE(base.config.experts == 3);
    int on_experts = 0;
    for (auto& [name, p] : adapters_of(tuned)) on_experts += contains(name, ".ffn.experts.") || contains(name, ".shared.");
    CHECK(on_experts == 3 * (3 + 1) * 2 * 2);  // 3 layers, E + N experts, W_1 and W_2, A and B
    TempDir dir("lora-experts");
    const std::string path = dir.file("a.txt");
    check_adapters_read_back(base, tuned, path, d);
    CHECK(contains(read_all(path), "tensor encoder.0.ffn.experts.2.W_2.lora_B 2 8\n"));
    Options o;
    o.save_path = dir.file("merged.txt"), o.data = d, o.lora_rank = 2;
    TrainState state(o.train, 1);
    save_fine_tuned(o, tuned, state, Origin());
    Kept k;
    Transformer merged = load_kept(o.save_path, k);
    CHECK(merged.config.experts == 3);
    CHECK(adapters_of(merged).empty());
    const double worst = largest_difference(logits_of(merged, d), logits_of(tuned, d));
    INFO("largest difference ", worst);
    CHECK(worst < 1e-12);
    CHECK(largest_difference(logits_of(base, d), logits_of(tuned, d)) > 1e-3);  // the adapters did change it
    const Dataset data(d);
    const Accuracy unmerged = evaluate(tuned, data.held_out, {}), merged_a = evaluate(merged, data.held_out, {}),
                   base_a = evaluate(base, data.held_out, {});
    CHECK(unmerged.total == int(data.held_out.size()));
    CHECK(merged_a.exact_count == unmerged.exact_count);
    CHECK(merged_a.token == unmerged.token);
    CHECK(unmerged.token != base_a.token);  // the figures compared are the adapters', not the base's again
}
