// workbench/web.hpp -- the page's side of sorter (make web): what the browser asks of the program, and each
// answer as one JSON object. The page (workbench/web.html) runs this in a worker, compiled by em++ from the same
// sources as ./sorter: no second copy of the model or of training, only calls into them.
//
//   form()               the page's form: the flag table's rows the page takes, group by group (web_form.hpp)
//   settings(flags)      what a command line sets, flag by flag, and the same command with only the flags that matter
//   start(flags)         a new model and data from --help's flags (the page's form writes them)
//   train(n)             n steps of train_step: each step's loss and each block's gradient size; a loss that is not
//                        finite ends the run, by ./sorter's rule (record_loss) and with its words, and nothing of it
//                        is downloaded, as ./sorter saves nothing
//   plan(n)              a loaded model trains n steps on from where it was loaded, as --load FILE --steps n
//   evaluate()           one row of the training table: held-out exact match, token accuracy, held-out loss
//   watched()            the three held-out inputs the run watches, decoded now
//   attention(digits)    every layer's and head's attention map, for an input the learner chose
//   decode(digits, beam) greedy decoding, and a beam search's hypotheses
//   checkpoint()         the model as a checkpoint file's text (a fine-tuned one merged, as --save writes it);
//                        adapters(), the adapters alone, as --save-adapters writes them
//   load(text)           ./sorter --load FILE FLAGS: a checkpoint's text read back, to train --steps more, or to
//                        fine-tune (--lora R, --task, --seq-len, ...); a quantized one, ./sorter --load m8.txt,
//                        evaluates and decodes in integers, and trains adapters alone
//   quantize(bits)       the model in whole numbers, as ./sorter --load FILE --quantize BITS: the same integers
//
// Page-only machinery: ./sorter never calls it. workbench/web_test.cpp runs it natively, in make test.
#pragma once

#include <memory>

#include "checkpoint.hpp"
#include "evaluate.hpp"
#include "files.hpp"
#include "history.hpp"
#include "lora.hpp"  // fine-tuning an opened checkpoint (chapter 12)
#include "terminal.hpp"
#include "web_form.hpp"  // the form, and the flags the page takes

// ---------------------------------------------------------------------------------------------
// JSON, as little as the answers need (json_text, json_number and json_list: text.hpp)
// ---------------------------------------------------------------------------------------------
inline std::string json_tokens(const std::vector<int>& tokens, const ModelConfig& c) {  // ["3","1","_"]
    return json_list(token_names(tokens, c), json_text);
}
// A file's text as a writer of ./sorter's writes it (write_checkpoint, write_adapters write to a FILE).
inline std::string written(const std::function<void(std::FILE*)>& write) {
    std::FILE* f = std::tmpfile();
    if (!f) fail("cannot make a temporary file for the download");
    write(f);
    std::string text(std::size_t(std::ftell(f)), '\0');
    std::rewind(f);
    const bool whole = std::fread(text.data(), 1, text.size(), f) == text.size();
    std::fclose(f);
    if (!whole) fail("could not read the download back");
    return text;
}

// ---------------------------------------------------------------------------------------------
// The page's run: one model, its data and where its training stands
// ---------------------------------------------------------------------------------------------
struct Lab {
    Options options;
    std::unique_ptr<Transformer> model;  // held by pointer: History keeps pointers to its parameters
    std::unique_ptr<Dataset> data;
    std::unique_ptr<TrainState> state;
    Origin origin;
    History history;  // the watched inputs, the losses since the last evaluation, the gradient sizes
    long first = 0;   // the updates made when the model was made or loaded
    long last = 0;    // the step training ends at (--steps, counted from `first`)
    std::string diverged;  // why training stopped at a loss that is not a number ("" while it has not)
    bool quantized_here = false;  // quantized on the page (quantize()), not opened so

    // What the page shows of a model once it is made or loaded: where it stands, its size, its blocks, the
    // command line of its settings, for a quantized model its bits and why it does not train, and for a fine-tuning
    // run ./sorter's lines about it (lora_text: the trainable parameters and their share).
    std::string describe() const {
        const ModelConfig& c = model->config;
        std::string tuning = first_task_text(origin) + lora_text(*model);
        if (!tuning.empty()) tuning.pop_back();  // (its last newline)
        return fmt("{\"ok\":true,\"step\":%ld,\"last\":%ld,\"batch\":%d,\"parameters\":%ld,\"trainable\":%ld,"
                   "\"adapters\":%zu,\"tuning\":%s,\"size\":%s,\"arch\":%s,\"blocks\":%s,\"command\":%s,\"bits\":%d,"
                   "\"experts\":%d%s}", state->updates, last, options.train.batch, parameter_count(*model),
                   values_of(trained_parameters(*model)), adapters_of(*model).size(), json_text(tuning).c_str(),
                   json_text(size_text(c, options.data)).c_str(), json_text(ARCH_NAMES[int(c.arch)]).c_str(),
                   json_list(block_names(), json_text).c_str(), json_text(join(command_of(options), " ")).c_str(),
                   c.bits, c.experts, frozen() ? (",\"cannot_train\":" + json_text(cannot_train())).c_str() : "");
    }
    // A quantized model trains adapters alone (chapter 12): without them it is frozen.
    bool frozen() const { return model->config.bits > 0 && adapters_of(*model).empty(); }
    // ./sorter's refusal to train a quantized model, the opened file (or the page's model) named as the page names it.
    std::string cannot_train() const {
        return cannot_train_text(quantized_here ? "the page's model" : "the checkpoint", model->config.bits);
    }
    std::vector<std::string> block_names() const {
        std::vector<std::string> names;
        for (auto& [name, p] : model->parameters())
            if (names.empty() || names.back() != block_of(name)) names.push_back(block_of(name));
        return names;
    }
    // A new run takes the place of the one before only once all of it is made: a refusal keeps the old one whole.
    void adopt(const Options& o, std::unique_ptr<Transformer> m, std::unique_ptr<TrainState> s, const Origin& from,
               long steps) {
        auto d = std::make_unique<Dataset>(dataset_of(o, from, {}));  // (fine-tuned: both held-out sets unseen)
        if (d->held_out.empty()) fail("no held-out set is possible with these settings: raise seq-len");
        options = o, model = std::move(m), state = std::move(s), origin = from, data = std::move(d);
        first = state->updates, last = first + steps, diverged.clear(), quantized_here = false;
        history = History();  // (its pointers into the old model go with it)
        history.decoding = options.decode;
        history.watched = watched_examples(*data);
    }

    std::string start(const std::string& flags) {
        Options o = page_options(split_words(flags));
        Origin from;
        from.seed = long(o.seed);
        adopt(o, std::make_unique<Transformer>(o.model, o.seed), std::make_unique<TrainState>(o.train, o.seed), from,
              o.train.steps);
        return describe();
    }
    // A loaded model's plan, as --load FILE --steps n: n steps on from where it was loaded (not below where it is).
    std::string plan(long n) {
        if (n < 0 || n > MAX_STEPS) fail(fmt("steps %ld: expected 0 to %ld", n, MAX_STEPS));
        if (n > 0 && frozen()) fail(cannot_train());
        last = std::max(state->updates, first + n);
        return describe();
    }

    // n steps (no further than the last), as train_run takes them: each step's loss and each block's gradient size.
    // A loss that is not finite ends the run as it ends ./sorter's, by record_loss, with its message.
    // The run that diverged keeps its plan (the page says "step 11 of 2000") and trains no more; ./sorter's words
    // say what went wrong, and the page's ending says what it kept: the charts drew every step, Download is off.
    std::string train(long n) {
        if (n > 0 && frozen()) fail(cannot_train());
        if (n > 0 && !diverged.empty()) fail(diverged);
        std::vector<double> losses;
        std::vector<std::vector<double>> norms;  // [step][block]
        for (long k = 0; k < n && state->updates < last && diverged.empty(); k++) {
            double loss = train_step(*model, *data, options.train, *state, last);
            losses.push_back(loss);
            record_gradient_norms(*model, history);
            history.recent_balance += balance_loss_of(*model);  // the experts' (chapter 11), as ./sorter's table has it
            try {
                record_loss(options, history, loss, state->updates);
            } catch (const UsageError&) {  // (its message ends "Nothing was saved or drawn": the page drew)
                diverged = divergence_text(options, state->updates, loss_trouble(loss)) +
                           " The charts show every step up to it; Download is off: ./sorter saves nothing of a run "
                           "that diverged.";
            }
        }
        norms.swap(history.gradient_norms);  // only the page keeps them
        return fmt("{\"step\":%ld,\"last\":%ld,\"losses\":%s,\"gradients\":%s%s}", state->updates, last,
                   json_list(losses, json_number).c_str(),
                   json_list(norms, [](const std::vector<double>& v) { return json_list(v, json_number); }).c_str(),
                   diverged.empty() ? "" : (",\"diverged\":" + json_text(diverged)).c_str());
    }

    // One row of the training table: print_evaluation's figures, and its line as ./sorter prints it; with experts
    // (chapter 11) the balance loss's mean over the same steps, its column (null without experts).
    std::string evaluate_now() {
        Accuracy a = evaluate(*model, data->held_out, history.decoding);
        double held_out_loss = teacher_forced_loss(*model, data->held_out);
        double recent = history.recent_steps ? history.recent_loss / double(history.recent_steps) : NAN;
        double balance = model->config.experts > 0 ? history.recent_balance / double(history.recent_steps) : NAN;
        history.recent_loss = history.recent_balance = 0.0;
        history.recent_steps = 0;
        return fmt("{\"step\":%ld,\"loss\":%s,\"held_out_loss\":%s,\"exact\":%s,\"token\":%s,\"right\":%d,"
                   "\"total\":%d,\"balance\":%s,\"line\":%s}",
                   state->updates, json_number(recent).c_str(), json_number(held_out_loss).c_str(),
                   json_number(a.exact).c_str(), json_number(a.token).c_str(), a.exact_count, a.total,
                   json_number(balance).c_str(),
                   json_text(evaluation_line(state->updates, recent, held_out_loss, a) +
                             balance_column(model->config, balance)).c_str());
    }

    std::string watched() {
        const ModelConfig& c = model->config;
        return json_list(history.watched, [&](const Example& e) {
            std::vector<int> guess = decode_outputs(*model, {e.source}, int(e.target.size()), history.decoding)[0];
            return fmt("{\"input\":%s,\"output\":%s,\"answer\":%s,\"ok\":%s}", json_tokens(e.source, c).c_str(),
                       json_tokens(guess, c).c_str(), json_tokens(e.target, c).c_str(),
                       guess == e.target ? "true" : "false");
        });
    }

    // A typed input: digits apart, by spaces or by commas as ./sorter prints them ("1, 7, 4, 1, 5" or [1, 7, 4]).
    Example example_of(const std::string& digits) {
        std::string spaced = digits;
        for (char& ch : spaced)
            if (ch == ',' || ch == '[' || ch == ']') ch = ' ';
        return make_example(parse_sequence(split_words(spaced), options.data, "the input " + digits), options.data);
    }
    std::string attention(const std::string& digits) {
        Example e = example_of(digits);
        std::vector<int> guess = decode_outputs(*model, {e.source}, options.data.seq_len, DecodeConfig())[0];
        return json_list(attention_maps(*model, e.source, guess), [](const AttentionMap& m) {
            std::vector<double> weights = m.P.data;  // (queries, keys), row after row
            return fmt("{\"layer\":%s,\"head\":%d,\"queries\":%s,\"keys\":%s,\"rows\":%d,\"cols\":%d,\"P\":%s}",
                       json_text(m.layer).c_str(), m.head, json_list(m.queries, json_text).c_str(),
                       json_list(m.keys, json_text).c_str(), m.P.rows, m.P.cols,
                       json_list(weights, json_number).c_str());
        });
    }
    std::string decode(const std::string& digits, int beam) {
        const ModelConfig& c = model->config;
        Example e = example_of(digits);
        std::vector<int> greedy = decode_outputs(*model, {e.source}, options.data.seq_len, DecodeConfig())[0];
        std::vector<Hypothesis> found =
            beam_search(*model, {e.source}, options.data.seq_len, std::max(1, beam), options.decode.length_penalty)[0];
        return fmt("{\"input\":%s,\"answer\":%s,\"greedy\":%s,\"beam\":%s}", json_tokens(e.source, c).c_str(),
                   json_tokens(e.target, c).c_str(), json_tokens(greedy, c).c_str(),
                   json_list(found, [&](const Hypothesis& h) {
                       return fmt("{\"output\":%s,\"log_prob\":%s}", json_tokens(h.tokens, c).c_str(),
                                  json_number(h.log_prob).c_str());
                   }).c_str());
    }

    // The checkpoint, as ./sorter --save writes it; with adapters (--lora), the model merged, as --save writes a
    // fine-tuned run (lora.hpp's merged_run). A run that diverged is not written, as ./sorter --save writes nothing of
    // it (and never weights that are not numbers: save_checkpoint's refusal, in its words).
    std::string checkpoint() {
        if (!diverged.empty()) fail(diverged);
        origin.planned_steps = last;
        auto file = [&](Transformer& m, const TrainState& s, const Origin& from) {
            const std::string what = unstorable(m);
            if (!what.empty()) fail("Download: " + what + " (training diverged); not saved");
            return written([&](std::FILE* f) { write_checkpoint(f, m, options.data, options.train, s, from); });
        };
        if (adapters_of(*model).empty()) return file(*model, *state, origin);
        MergedRun merged = merged_run(options, *model, *state, origin);
        return file(merged.model, merged.state, merged.origin);
    }
    // The adapters alone, as --save-adapters writes them: small, naming their base by a fingerprint of its weights.
    std::string adapters() {
        if (adapters_of(*model).empty()) fail("no adapters: fine-tune an opened checkpoint with --lora R first");
        if (!diverged.empty()) fail(diverged);
        return written([&](std::FILE* f) { write_adapters(f, *model, base_fingerprint(*model)); });
    }
    // ./sorter --load NAME FLAGS, `opened` being "NAME\nFLAGS\nthe file's text": the flags checked as ./sorter
    // checks them, then the checkpoint read as build_or_load reads it (fine_tune_loaded: the data fine-tuning trains
    // on, the adapters, a run of its own from step 1). A quantized model without adapters is opened to evaluate and
    // decode only: no steps are planned, and describe() says why.
    std::string load(const std::string& opened) {
        const std::size_t name_end = opened.find('\n'), flags_end = opened.find('\n', name_end + 1);
        if (flags_end == std::string::npos) fail("load: expected a file's name, a line of flags, then the file");
        Options o = page_options(split_words(opened.substr(name_end + 1, flags_end - name_end - 1)),
                                 opened.substr(0, name_end));
        std::istringstream in(opened.substr(flags_end + 1));
        auto s = std::make_unique<TrainState>(o.train, o.seed);
        Origin from;
        const long steps = o.train.steps;  // (the checkpoint's settings take the place of the flags' in o)
        auto m = std::make_unique<Transformer>(read_checkpoint(in, "the checkpoint", o.data, o.train, *s, from));
        o.train.steps = steps;
        const bool other_data = tune_data(o, from, *m);
        if (m->config.bits > 0 && !has_adapters(o)) o.train.steps = 0;
        if (o.train.steps > 0)
            if (std::string problem = step_memory_problem(m->config, o.data, o.train, 1, o.load_path); !problem.empty())
                fail(problem);
        fine_tune_loaded(o, *m, *s, from, other_data);
        adopt(o, std::move(m), std::move(s), from, o.train.steps);
        return describe();
    }
    // The model in `bits`-bit whole numbers, as ./sorter --load FILE --quantize BITS quantizes the float model FILE
    // holds: quantize_model, which prints each matrix's largest error (the page shows those lines). It then
    // evaluates and decodes in integers and trains no more; its checkpoint is the file --save writes there.
    std::string quantize(int bits) {
        if (!valid_bits(bits)) fail(fmt("quantize %d: expected 2 to 8 bits", bits));
        if (model->config.bits > 0)
            fail(fmt("quantize %d: the model is quantized already (%d bits); quantize the float model it came from",
                     bits, model->config.bits));
        if (!diverged.empty()) fail(diverged);
        Options asked = options;  // ./sorter's refusal of --quantize with --lora, in its words
        asked.quantize_bits = bits;
        if (std::string problem = lora_flags_problem(asked, false, false); !problem.empty()) fail(problem);
        const std::string what = unstorable(*model);
        if (!what.empty()) fail(fmt("quantize %d: ", bits) + what + " (training diverged)");
        quantize_model(*model, bits);
        options.model = model->config, quantized_here = true;
        first = last = state->updates;  // (as --load FILE --quantize BITS: no steps; it cannot train)
        return describe();
    }
};

// ---------------------------------------------------------------------------------------------
// The one function the page calls (em++ exports it): web_call("train", "", 50) and the like. The answer is
// JSON, {"error": "..."} for a bad flag or input, and stays valid until the next call.
// ---------------------------------------------------------------------------------------------
inline std::string web_answer(Lab& lab, const std::string& command, const std::string& text, double number) {
    try {
        if (command == "start") return lab.start(text);
        if (command == "load") return lab.load(text);
        if (command == "form") return form_json();
        if (command == "settings") return settings_json(text);
        if (!lab.model) fail("no model yet: start or load one first");
        if (command == "train") return lab.train(long(number));
        if (command == "plan") return lab.plan(long(number));
        if (command == "evaluate") return lab.evaluate_now();
        if (command == "watched") return lab.watched();
        if (command == "attention") return lab.attention(text);
        if (command == "decode") return lab.decode(text, int(number));
        if (command == "checkpoint") return fmt("{\"text\":%s}", json_text(lab.checkpoint()).c_str());
        if (command == "adapters") return fmt("{\"text\":%s}", json_text(lab.adapters()).c_str());
        if (command == "quantize") return lab.quantize(int(number));
        fail("unknown command " + command);
    } catch (const UsageError& e) {
        return fmt("{\"error\":%s}", json_text(e.message).c_str());
    } catch (const std::exception& e) {  // out of memory, say: the page says so and carries on
        return fmt("{\"error\":%s}", json_text(std::string("error: ") + e.what()).c_str());
    }
}

#ifdef __EMSCRIPTEN__
extern "C" const char* web_call(const char* command, const char* text, double number) {
    static Lab lab;
    static std::string answer;
    answer = web_answer(lab, command, text, number);
    return answer.c_str();
}
#endif
