// fuzz/targets.cpp -- libFuzzer targets: every reader of outside input, fed bytes a fuzzer makes up.
//
// One file, five targets, one binary: `make fuzz` builds fuzz/fuzz with clang -fsanitize=fuzzer,address,undefined,
// then runs each target (FUZZ_TARGET=<target>) for FUZZ_SECONDS (default 60) from its seed corpus in
// fuzz/corpus/<target>/. A target passes when no input crashes, hangs, leaks or trips a sanitizer:
// a bad input may only end in the UsageError whose one line main() prints.
//   checkpoint   read_checkpoint: the --load file (float64 and quantized: tiny-q4.txt, tiny-q8.txt; a LoRA run under
//                way, its adapters and their running means: tiny-lora.txt)
//   adapters     read_adapters: the --adapters file (LoRA, chapter 12), onto the base it was saved from
//                (fuzz/corpus/checkpoint/tiny.txt, read once; its adapters on W_q W_v and on every matrix)
//   train_data   read_train_data: the --train-data file
//   options      parse_options: a command line (the input's words, split at NUL or newline)
//   pictures     a model read from a checkpoint, then every picture drawn from it: the terminal
//                heatmaps, --trace-shapes, --params and the SVG documents (weights may be huge); a quantized
//                model decodes in integers (engine/integers.hpp), its scales and whole numbers fuzzed
#include "../workbench/checkpoint.hpp"  // read_checkpoint
#include "../workbench/files.hpp"       // read_train_data
#include "../workbench/inspect.hpp"     // trace_shapes, print_params
#include "../workbench/lora.hpp"        // read_adapters
#include "../workbench/options.hpp"     // parse_options, print_help
#include "../workbench/svg.hpp"         // attention_svg, positions_svg
#include "../workbench/terminal.hpp"    // print_attention, print_positions

#include <cstdio>
#include <cstdlib>  // getenv
#include <fstream>

// A checkpoint read as --load reads it; its data settings into `data`, the training state it carries dropped.
Transformer checkpoint_from(std::istream& in, const std::string& what, DataConfig& data) {
    TrainConfig train;
    TrainState state(train, 1);
    Origin origin;
    return read_checkpoint(in, what, data, train, state, origin);
}

// Each target: one reader of outside input, fed the fuzzer's bytes.
void fuzz_checkpoint(const std::string& input) {
    std::istringstream in(input);
    DataConfig data;
    checkpoint_from(in, "--load fuzz", data);
}
void fuzz_adapters(const std::string& input) {
    static const Transformer base = [] {  // the base the seeds' adapters were saved on, read once
        const std::string path = "fuzz/corpus/checkpoint/tiny.txt";
        std::ifstream file = open_input(path, "--load " + path);
        DataConfig data;
        return checkpoint_from(file, "--load " + path, data);
    }();
    Transformer model = base;
    std::istringstream in(input);
    read_adapters(in, "--adapters fuzz", "tiny.txt", model);
}
void fuzz_train_data(const std::string& input) {
    std::istringstream in(input);
    DataConfig data;
    data.min_len = 1;  // variable lengths, so that more lines are valid
    read_train_data(in, data, "--train-data fuzz");
}
void fuzz_options(const std::string& input) {
    std::vector<std::string> words;
    std::string word;
    for (char ch : input) {
        if (ch == '\0' || ch == '\n') {
            words.push_back(word);
            word.clear();
        } else {
            word += ch;
        }
    }
    words.push_back(word);
    Options o = parse_options(words);
    variant_text(o);
    print_help();
}
void fuzz_pictures(const std::string& input) {
    std::istringstream in(input);
    DataConfig data;
    Transformer model = checkpoint_from(in, "--load fuzz", data);
    Rng rng(1);
    Example e = make_example(random_digits(rng, data), data);
    std::vector<int> output = greedy_decode_cached(model, {e.source}, data.seq_len)[0];
    std::vector<AttentionMap> maps = attention_maps(model, e.source, output);
    print_attention(maps, true);
    print_positions(model, true);
    trace_shapes(model, {e});
    print_params(model);
    attention_svg(maps, model.config.n_heads, "fuzz");
    if (const Matrix* table = model.embed.position_table()) positions_svg(*table, "fuzz");
}

// One binary for the five (one compile, not five): FUZZ_TARGET names the target a run fuzzes.
const std::vector<std::pair<std::string, void (*)(const std::string&)>> TARGETS = {
    {"checkpoint", fuzz_checkpoint}, {"adapters", fuzz_adapters}, {"train_data", fuzz_train_data},
    {"options", fuzz_options}, {"pictures", fuzz_pictures}};
void (*target)(const std::string&) = nullptr;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* name = std::getenv("FUZZ_TARGET");
    for (const auto& [known, run] : TARGETS)
        if (name && known == name) target = run;
    if (!target) {
        std::string names;
        for (const auto& known : TARGETS) names += " " + known.first;
        std::fprintf(stderr, "fuzz: set FUZZ_TARGET to one of%s (make fuzz does)\n", names.c_str());
        std::exit(2);
    }
    if (!std::freopen("/dev/null", "w", stdout)) return 1;  // the pictures print; only a crash matters
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
    try {
        target(std::string(reinterpret_cast<const char*>(bytes), size));
    } catch (const UsageError&) {
        // a clear refusal is the right answer to a bad input
    }
    return 0;
}
