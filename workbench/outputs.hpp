// workbench/outputs.hpp -- what a run shows and writes besides training, in the order main.cpp's run() asks for it:
// a look at the model without training (--params, --show-pe, --trace-shapes, an --svg of the untrained model); a
// loaded model's held-out score; after training, the --sort output, --show-attention, --inspect and --test-len on one
// example; then the files, the checkpoint first, so that a picture that fails to write cannot lose the model.
// Tests: run_test.cpp and signals_test.cpp, which run main.cpp whole.
#pragma once

#include "checkpoint.hpp"
#include "files.hpp"
#include "history.hpp"
#include "inspect.hpp"
#include "lora.hpp"  // a fine-tuned model saved merged, or its adapters alone
#include "options.hpp"
#include "report.hpp"
#include "signals.hpp"
#include "svg.hpp"
#include "terminal.hpp"

// Looking at the model without training: --params, --show-pe and --trace-shapes, in that order (and --svg).
inline void look_without_training(const Options& o, Transformer& model, const Dataset& data, const TrainState& state,
                                  const Example& example) {
    if (o.params) print_params(model);
    if (o.show_pe) {
        if (o.params) std::printf("\n");  // a blank line between two pictures
        print_positions(model, o.numbers);
    }
    if (o.trace_shapes) {
        if (o.params || o.show_pe) std::printf("\n");
        Rng batch_draws = state.batch_draws;  // a copy: the batch training would draw next
        trace_shapes(model, data.draw_batch(batch_draws, o.train.batch));
    }
    if (!o.svg_dir.empty()) write_pictures(o.svg_dir, model, example.source, nullptr, o.decode, data.held_out);
}


// A loaded model that trains no further: its held-out score.
inline void score_loaded(Transformer& model, const Dataset& data, History& history, bool print) {
    Accuracy a = evaluate(model, data.held_out, history.decoding);
    std::string cut = a.total < a.asked ? fmt(" (both on the first %d held-out sequences %s)", a.total,
                                              cut_short_text(a).c_str()) : "";
    history.final_line = a.total ? fmt("held-out: exact-match %.1f%% (%d/%d), token-accuracy %.1f%%%s\n",
                                       100 * a.exact, a.exact_count, a.total, 100 * a.token, cut.c_str())
                                 : "held-out: n/a (this model's data settings allow no held-out set)\n";
    if (print) std::printf("%s", history.final_line.c_str());
}

// The --sort digits' output (with a beam, every hypothesis), then --show-attention, --inspect and --test-len,
// all on the same example.
inline void show_after_training(const Options& o, Transformer& model, const Dataset& data, const Example& example,
                                bool sort_asked) {
    const ModelConfig& c = model.config;
    std::vector<int> guess = decode_outputs(model, {example.source}, o.data.seq_len, o.decode)[0];
    std::string input = digits_text(example.source, c), output = digits_text(guess, c);
    if (sort_asked)
        std::printf("\ninput  %s\noutput %s   (%s: %s%s)\n", input.c_str(), output.c_str(),
                    TASK_NAMES[int(o.data.task)].c_str(), digits_text(example.target, c).c_str(),
                    guess == example.target ? ", ok" : ", wrong");
    if (sort_asked && o.decode.beam > 1) {
        std::printf("beam search, beam %d, length penalty %g: the hypotheses, best score first\n", o.decode.beam,
                    o.decode.length_penalty);
        auto found = beam_search(model, {example.source}, o.data.seq_len, o.decode.beam, o.decode.length_penalty);
        for (const Hypothesis& h : found[0]) {
            double score = beam_score(h.log_prob, output_length(h.tokens), o.decode.length_penalty);
            std::printf("  %s   log P %9s   score %9s\n", digits_text(h.tokens, c).c_str(),
                        number_text(h.log_prob).c_str(), number_text(score).c_str());
        }
    }
    if (o.show_attention) {
        std::printf("\n--- attention for input %s, output %s ---\n", input.c_str(), output.c_str());
        if (!weights_note(c).empty()) std::printf("%s\n", weights_note(c).c_str());
        print_attention(attention_maps(model, example.source, guess), o.numbers);
    }
    if (o.inspect) inspect(model, data.held_out);
    if (o.test_len > 0) length_report(model, data, o.test_len, o.decode);
}

// The files asked for: the checkpoint first, so that a picture that fails to write cannot lose the model.
inline void write_outputs(const Options& o, Transformer& model, const Dataset& data, const TrainState& state,
                          const Origin& origin, const Example& example, bool sort_asked, History& history) {
    if (!o.save_path.empty() || !o.save_adapters_path.empty()) {  // (written already when training ended: train_run)
        const bool adapted = !adapters_of(model).empty(), merged = adapted && !run_under_way(state, origin);
        if (!history.checkpoint_kept && adapted) save_fine_tuned(o, model, state, origin);  // lora.hpp
        else if (!history.checkpoint_kept) save_checkpoint(o.save_path, model, o.data, o.train, state, origin);
        for (const std::string& path : {o.save_path, o.save_adapters_path})
            if (!path.empty())
                std::printf("saved %s%s%s\n", path.c_str(), path == o.save_path && merged ? " (merged)" : "",
                            history.checkpoint_kept && stop_signal ? " (written as training ended)" : "");
    }
    if (!o.svg_dir.empty())
        write_pictures(o.svg_dir, model, example.source, history.losses.empty() ? nullptr : &history, o.decode,
                       data.held_out);
    if (!o.report_path.empty()) {  // on the first watched input, or the --sort digits
        if (history.watched.empty()) history.watched = watched_examples(data);
        if (history.predictions.empty()) show_examples("the loaded model", model, history);
        std::vector<int> source =
            !sort_asked && !history.watched.empty() ? history.watched.front().source : example.source;
        std::string page = report_html(model, history, source, data.held_out);
        write_atomically(o.report_path, "--report", [&](FILE* f) { std::fputs(page.c_str(), f); });
        std::printf("wrote %s\n", o.report_path.c_str());
    }
}

