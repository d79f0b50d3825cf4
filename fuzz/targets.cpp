// fuzz/targets.cpp -- libFuzzer targets: every reader of outside input, fed bytes a fuzzer makes up.
//
// One file, four targets; `make fuzz` builds each with clang -fsanitize=fuzzer,address,undefined
// and -DFUZZ_<TARGET>, then runs it for FUZZ_SECONDS (default 60) from its seed corpus in
// fuzz/corpus/<target>/. A target passes when no input crashes, hangs, leaks or trips a sanitizer:
// a bad input may only end in the UsageError whose one line main() prints.
//   checkpoint   read_checkpoint: the --load file (float64 and quantized: tiny-q4.txt, tiny-q8.txt; a LoRA run under
//                way, its adapters and their running means: tiny-lora.txt)
//   train_data   read_train_data: the --train-data file
//   options      parse_options: a command line (the input's words, split at NUL or newline)
//   pictures     a model read from a checkpoint, then every picture drawn from it: the terminal
//                heatmaps, --trace-shapes, --params and the SVG documents (weights may be huge); a quantized
//                model decodes in integers (engine/kernels.hpp), its scales and whole numbers fuzzed
#include "../workbench/checkpoint.hpp"  // read_checkpoint
#include "../workbench/files.hpp"       // read_train_data
#include "../workbench/inspect.hpp"     // trace_shapes, print_params
#include "../workbench/options.hpp"     // parse_options, print_help
#include "../workbench/svg.hpp"         // attention_svg, positions_svg
#include "../workbench/terminal.hpp"    // print_attention, print_positions

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (!std::freopen("/dev/null", "w", stdout)) return 1;  // the pictures print; only a crash matters
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
    std::string input(reinterpret_cast<const char*>(bytes), size);
    std::istringstream in(input);
    try {
#if defined(FUZZ_CHECKPOINT)
        DataConfig data;
        TrainConfig train;
        TrainState state(train, 1);
        Origin origin;
        read_checkpoint(in, "--load fuzz", data, train, state, origin);
#elif defined(FUZZ_TRAIN_DATA)
        DataConfig data;
        data.min_len = 1;  // variable lengths, so that more lines are valid
        read_train_data(in, data, "--train-data fuzz");
#elif defined(FUZZ_OPTIONS)
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
#elif defined(FUZZ_PICTURES)
        DataConfig data;
        TrainConfig train;
        TrainState state(train, 1);
        Origin origin;
        Transformer model = read_checkpoint(in, "--load fuzz", data, train, state, origin);
        Rng rng(1);
        Example e = make_example(random_digits(rng, data), data);
        std::vector<int> output = greedy_decode(model, {e.source}, data.seq_len)[0];
        std::vector<AttentionMap> maps = attention_maps(model, e.source, output);
        print_attention(maps, true);
        print_positions(model, true);
        trace_shapes(model, {e});
        print_params(model);
        attention_svg(maps, model.config.n_heads, "fuzz");
        if (const Matrix* table = model.embed.position_table()) positions_svg(*table, "fuzz");
#else
#error "build with one of -DFUZZ_CHECKPOINT, -DFUZZ_TRAIN_DATA, -DFUZZ_OPTIONS, -DFUZZ_PICTURES"
#endif
    } catch (const UsageError&) {
        // a clear refusal is the right answer to a bad input
    }
    return 0;
}
