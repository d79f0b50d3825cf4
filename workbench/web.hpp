// workbench/web.hpp -- the page's side of sorter (make web): what the browser asks of the program, and each
// answer as one JSON object. The page (workbench/web.html) runs this in a worker, compiled by em++ from the same
// sources as ./sorter: no second copy of the model or of training, only calls into them.
//
//   start(flags)         a new model and data from --help's flags (the page's form writes them)
//   train(n)             n steps of train_step, each step's loss, and each block's gradient size at the last one
//   evaluate()           one row of the training table: held-out exact match, token accuracy, held-out loss
//   watched()            the three held-out inputs the run watches, decoded now
//   attention(digits)    every layer's and head's attention map, for an input the learner chose
//   decode(digits, beam) greedy decoding, and a beam search's hypotheses
//   checkpoint()         the model as a checkpoint file's text; load(text) reads one back
//
// Page-only machinery: ./sorter never calls it. workbench/web_test.cpp runs it natively, in make test.
#pragma once

#include <memory>

#include "checkpoint.hpp"
#include "evaluate.hpp"
#include "files.hpp"
#include "history.hpp"
#include "options.hpp"
#include "terminal.hpp"

// ---------------------------------------------------------------------------------------------
// JSON, as little as the answers need
// ---------------------------------------------------------------------------------------------
inline std::string json_text(const std::string& s) {  // a JSON string: quotes, backslashes, control bytes escaped
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') out += '\\', out += char(c);
        else if (c < 0x20) out += fmt("\\u%04x", c);
        else out += char(c);
    }
    return out + "\"";
}
inline std::string json_number(double v) {  // JSON has no nan or inf: null
    return std::isfinite(v) ? fmt("%.9g", v) : "null";
}
template <class T, class F> std::string json_list(const std::vector<T>& items, F item) {
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); i++) out += (i ? "," : "") + item(items[i]);
    return out + "]";
}
inline std::string json_tokens(const std::vector<int>& tokens, const ModelConfig& c) {  // ["3","1","_"]
    return json_list(token_names(tokens, c), json_text);
}

// ---------------------------------------------------------------------------------------------
// The page's run: one model, its data and where its training stands
// ---------------------------------------------------------------------------------------------
// Flags that name files or end the run: the page has no files, and its own buttons do the rest.
const std::vector<std::string> PAGE_REFUSED = {"--save", "--load", "--report", "--svg", "--train-data", "--dump-step",
                                               "--sort", "--bench", "--speed", "--demo", "--help", "--save-every",
                                               "--finish", "--params", "--show-pe", "--trace-shapes", "--inspect",
                                               "--show-attention", "--test-len"};

struct Lab {
    Options options;
    std::unique_ptr<Transformer> model;  // held by pointer: History keeps pointers to its parameters
    std::unique_ptr<Dataset> data;
    std::unique_ptr<TrainState> state;
    Origin origin;
    History history;  // the watched inputs, the losses since the last evaluation, the gradient sizes
    long last = 0;    // the step training ends at (--steps)

    // What the page shows of a model once it is made or loaded.
    std::string describe() const {
        const ModelConfig& c = model->config;
        return fmt("{\"ok\":true,\"step\":%ld,\"last\":%ld,\"batch\":%d,\"parameters\":%ld,\"size\":%s,"
                   "\"blocks\":%s}", state->updates, last, options.train.batch, parameter_count(*model),
                   json_text(size_text(c, options.data)).c_str(), json_list(block_names(), json_text).c_str());
    }
    std::vector<std::string> block_names() const {
        std::vector<std::string> names;
        for (auto& [name, p] : model->parameters())
            if (names.empty() || names.back() != block_of(name)) names.push_back(block_of(name));
        return names;
    }
    // A new run takes the place of the one before only once all of it is made: a refusal keeps the old one whole.
    void adopt(const Options& o, std::unique_ptr<Transformer> m, std::unique_ptr<TrainState> s, const Origin& from,
               long last_step) {
        auto d = std::make_unique<Dataset>(o.data, std::vector<std::vector<int>>());
        if (d->held_out.empty()) fail("no held-out set is possible with these settings: raise seq-len");
        options = o, model = std::move(m), state = std::move(s), origin = from, data = std::move(d), last = last_step;
        history = History();  // (its pointers into the old model go with it)
        history.decoding = options.decode;
        history.watched = watched_examples(*data);
    }

    std::string start(const std::string& flags) {
        std::vector<std::string> words = split_words(flags);
        for (const std::string& w : words)
            if (std::find(PAGE_REFUSED.begin(), PAGE_REFUSED.end(), w) != PAGE_REFUSED.end())
                fail(w + " is not for the page: its buttons save, load and decode");
        Options o = parse_options(words);
        Origin from;
        from.seed = long(o.seed);
        adopt(o, std::make_unique<Transformer>(o.model, o.seed), std::make_unique<TrainState>(o.train, o.seed), from,
              o.train.steps);
        return describe();
    }

    // n steps (no further than the last), as train_run takes them; the losses, and the last step's gradient sizes.
    std::string train(long n) {
        std::vector<double> losses;
        std::string diverged;  // a loss that is not finite ends the slice, and the page says what to do
        for (long k = 0; k < n && state->updates < last && diverged.empty(); k++) {
            double loss = train_step(*model, *data, options.train, *state, last);
            if (!std::isfinite(loss))
                diverged = fmt("training diverged at step %ld (the loss is not a number): press Reset, with a smaller "
                               "lr than %g", state->updates, options.train.lr);
            else record_loss(options, history, loss, state->updates);
            losses.push_back(loss);
        }
        if (!losses.empty()) record_gradient_norms(*model, history);
        std::vector<double> norms;  // only the latest step's are kept
        if (!history.gradient_norms.empty()) norms = history.gradient_norms.back();
        history.gradient_norms.clear();
        if (!diverged.empty()) last = state->updates;  // nothing more to train: the weights are not numbers
        return fmt("{\"step\":%ld,\"last\":%ld,\"losses\":%s,\"gradients\":%s%s}", state->updates, last,
                   json_list(losses, json_number).c_str(), json_list(norms, json_number).c_str(),
                   diverged.empty() ? "" : (",\"diverged\":" + json_text(diverged)).c_str());
    }

    // One row of the training table (print_evaluation's figures).
    std::string evaluate_now() {
        Accuracy a = evaluate(*model, data->held_out, history.decoding);
        double held_out_loss = teacher_forced_loss(*model, data->held_out);
        double recent = history.recent_steps ? history.recent_loss / double(history.recent_steps) : NAN;
        history.recent_loss = 0.0;
        history.recent_steps = 0;
        return fmt("{\"step\":%ld,\"loss\":%s,\"held_out_loss\":%s,\"exact\":%s,\"token\":%s,\"right\":%d,"
                   "\"total\":%d}",
                   state->updates, json_number(recent).c_str(), json_number(held_out_loss).c_str(),
                   json_number(a.exact).c_str(), json_number(a.token).c_str(), a.exact_count, a.total);
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

    Example example_of(const std::string& digits) {
        return make_example(parse_sequence(split_words(digits), options.data, "the input " + digits), options.data);
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

    // The checkpoint, as ./sorter --save writes it (through a temporary file: write_checkpoint writes to a FILE).
    std::string checkpoint() {
        origin.planned_steps = last;
        std::FILE* f = std::tmpfile();
        if (!f) fail("cannot make a temporary file for the checkpoint");
        write_checkpoint(f, *model, options.data, options.train, *state, origin);
        std::string text(std::size_t(std::ftell(f)), '\0');
        std::rewind(f);
        const bool whole = std::fread(text.data(), 1, text.size(), f) == text.size();
        std::fclose(f);
        if (!whole) fail("could not read the checkpoint back");
        return text;
    }
    // A checkpoint's text, as ./sorter --load reads it. Training goes on `steps` more; with 0, to the steps its run
    // planned (as --finish does), or none when the file does not say.
    std::string load(const std::string& text, long steps) {
        std::istringstream in(text);
        Options o;
        auto s = std::make_unique<TrainState>(o.train, o.seed);
        Origin from;
        auto m = std::make_unique<Transformer>(read_checkpoint(in, "the checkpoint", o.data, o.train, *s, from));
        o.model = m->config;
        if (from.seed >= 0) o.seed = uint64_t(from.seed);
        const long updates = s->updates;
        adopt(o, std::move(m), std::move(s), from,
              steps > 0 ? updates + steps : std::max(updates, from.planned_steps));
        return describe();
    }
};

// Every choice flag's names and default, from the flag table, so that the page's form offers what the program
// takes: {"--act":{"names":["relu",...],"default":"relu"},...}.
inline std::string choices_json() {
    std::string json;
    for (const FlagGroup& g : flag_table())
        for (const Flag& f : g.flags) {
            if (f.value.find('|') == std::string::npos) continue;  // a choice's value lists its names: "relu|gelu|..."
            std::string names, given = f.as_given(DEFAULTS), value = f.value + "|";  // given: "--act relu"
            for (std::size_t at = 0, bar; (bar = value.find('|', at)) != std::string::npos; at = bar + 1)
                names += (names.empty() ? "" : ",") + json_text(value.substr(at, bar - at));
            json += fmt("%s%s:{\"names\":[%s],\"default\":%s}", json.empty() ? "" : ",", json_text(f.name).c_str(),
                        names.c_str(), json_text(given.substr(given.find(' ') + 1)).c_str());
        }
    return "{" + json + "}";
}

// ---------------------------------------------------------------------------------------------
// The one function the page calls (em++ exports it): web_call("train", "", 50) and the like. The answer is
// JSON, {"error": "..."} for a bad flag or input, and stays valid until the next call.
// ---------------------------------------------------------------------------------------------
inline std::string web_answer(Lab& lab, const std::string& command, const std::string& text, double number) {
    try {
        if (command == "start") return lab.start(text);
        if (command == "load") return lab.load(text, long(number));
        if (command == "choices") return choices_json();
        if (!lab.model) fail("no model yet: start or load one first");
        if (command == "train") return lab.train(long(number));
        if (command == "evaluate") return lab.evaluate_now();
        if (command == "watched") return lab.watched();
        if (command == "attention") return lab.attention(text);
        if (command == "decode") return lab.decode(text, int(number));
        if (command == "checkpoint") return fmt("{\"text\":%s}", json_text(lab.checkpoint()).c_str());
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
