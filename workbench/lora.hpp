// workbench/lora.hpp -- --lora R: fine-tune a --load'ed model with low-rank adapters (chapters/12_lora.hpp holds
// the adapter, its backward and the merge); their file (--save-adapters, --adapters), and the merged --save.
// Tests: chapters/12_lora_test.cpp (the chapter), workbench/lora_test.cpp (the flags and files).
//
// Sections (the checks between its flags are options.hpp's, lora_flags_problem): adding the adapters to a loaded
// model; the adapters' file, which names the base it was trained on by a fingerprint of its weights; fine-tuning on
// other data; saving a fine-tuned run (merged, or the adapters alone).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "checkpoint.hpp"  // save_checkpoint, read_values, WordReader, set_quantized
#include "evaluate.hpp"    // the first task's held-out score, after fine-tuning
#include "inspect.hpp"     // reach_length

// ---------------------------------------------------------------------------------------------
// The adapters on a loaded model. R may not pass the smaller side of a W it sits on: A B's rank is at most
// min(d_in, d_out), and a larger R adds numbers and no freedom.
inline std::string rank_problem(Transformer& model, int R, LoraOn on) {
    std::string problem;
    each_adaptable<Transformer, Linear>(model, on, [&](const std::string& name, Linear& linear) {
        const int side = std::min(linear.W.value.rows, linear.W.value.cols);
        if (problem.empty() && R > side)
            problem = fmt("--lora %d: above the smaller side of %s %s (rank at most %d); choose R from 1 to %d", R,
                          name.c_str(), shape_text(linear.W.value).c_str(), side, side);
    });
    return problem;
}
// The adapters' own stream: the model's seed, salted, so that they draw nothing the model or training would.
inline Rng adapter_draws(uint64_t seed) { return Rng(seed ^ 0x4c6f5241ull); }  // "LoRA"
inline void add_lora(const Options& o, Transformer& model) {
    if (std::string problem = rank_problem(model, o.lora_rank, o.lora_on); !problem.empty()) fail(problem);
    Rng draws = adapter_draws(o.seed_unknown ? 1 : o.seed);
    add_adapters(model, o.lora_rank, o.lora_alpha > 0 ? o.lora_alpha : o.lora_rank, o.lora_on, draws);
}
inline long values_of(const ParamList& list) {
    long n = 0;
    for (auto& [name, p] : list) n += long(p->value.data.size());
    return n;
}
inline uint64_t base_fingerprint(Transformer& model) {
    uint64_t h = 1469598103934665603ull;
    for (auto& [name, p] : model.parameters())
        for (double v : p->value.data) {
            uint64_t bits = 0;
            std::memcpy(&bits, &v, sizeof bits);
            for (int k = 0; k < 8; k++) h = (h ^ ((bits >> (8 * k)) & 0xff)) * 1099511628211ull;
        }
    return h;
}
// "LoRA: rank 4, alpha 4 on W_q W_v: 16 matrices, 1,024 trainable parameters, 2.1% of the model's 49,000".
inline std::string lora_text(Transformer& model) {
    const ParamList adapters = adapters_of(model);
    if (adapters.empty()) return "";
    const long trained = values_of(adapters), base = values_of(model.parameters());
    const int R = adapters[0].second->value.cols;
    return fmt("LoRA: rank %d, alpha %g, on %s: %zu adapted matrices, %ld trainable parameters (%.2f%% of the "
               "model's %ld; the base frozen%s)\n", R, adapters_scale(model) * R,
               adapts_every_matrix(adapters_on(model)) ? "attention and feed-forward" : "W_q W_v", adapters.size() / 2,
               trained, 100.0 * trained / base, base,
               model.config.bits > 0 ? fmt(", %d bits", model.config.bits).c_str() : "");
}

// ---------------------------------------------------------------------------------------------
// The adapters' file: small, plain text, naming its base.
//   sorter-adapters 1
//   base FINGERPRINT        the base's weights, hashed (below): another base is refused
//   rank R  alpha X
//   tensors N               then N tensors as a checkpoint writes them, A then B of each adapted W
//   end
// The fingerprint: FNV-1a over the bits of every value of every base tensor, in the checkpoint's order (a quantized
// base: its dequantized values, which its integers and scales fix). Any change to the base changes it.
inline void write_adapters(FILE* f, Transformer& model, uint64_t fingerprint) {
    const ParamList adapters = adapters_of(model);
    const int R = adapters[0].second->value.cols;
    std::fprintf(f, "sorter-adapters 1\nbase %llu\nrank %d\nalpha %.17g\ntensors %zu\n",
                 (unsigned long long)fingerprint, R, adapters_scale(model) * R, adapters.size());
    for (auto& [name, p] : adapters) {
        std::fprintf(f, "tensor %s %d %d\n", name.c_str(), p->value.rows, p->value.cols);
        write_matrix(f, p->value);
    }
    std::fprintf(f, "end\n");
}
// --adapters FILE onto the --load base: checked word by word, as a checkpoint is (a cut file is one line). `what`
// names the input in messages ("--adapters FILE").
inline void read_adapters(std::istream& in, const std::string& what, const std::string& base_path, Transformer& model) {
    WordReader r{in, what, 1, ""};
    std::string magic = r.next();
    if (magic != "sorter-adapters")
        r.error("not a sorter adapters file (the first word should be 'sorter-adapters', found '" + magic +
                "'); a checkpoint is given to --load");
    if (r.expect("the format version") != "1") r.error("format version is not supported (this program reads 1)");
    const uint64_t fingerprint = r.whole_u64("base"), own = base_fingerprint(model);
    if (fingerprint != own)
        fail(fmt("%s was trained on another base (fingerprint %llu; --load %s is %llu): load the model "
                 "they were trained on", what.c_str(), (unsigned long long)fingerprint, base_path.c_str(),
                 (unsigned long long)own));
    const long R = r.whole("rank", 1, MAX_LORA_RANK);
    const double alpha = r.number("alpha", 1e-9, MAX_LORA_ALPHA);
    const long count = r.whole("tensors", 2, 1000);
    // The adapters go where the file's names say: on every place first, then those the file does not name taken off.
    if (std::string problem = rank_problem(model, int(R), LoraOn::all); !problem.empty()) r.error(problem);
    Rng unused(1);
    add_adapters(model, int(R), alpha, LoraOn::all, unused);
    ParamList all = adapters_of(model);
    std::vector<std::string> named, read;  // the adapted Ws the file names; its tensors
    for (long k = 0; k < count; k++) {
        std::string w = r.next();
        if (w.empty()) r.error(fmt("the file ends early (truncated): %ld of its %ld tensors", k, count));
        if (w != "tensor") r.error("expected 'tensor', found '" + w + "'");
        const std::string name = r.expect("a tensor's name");
        auto at = std::find_if(all.begin(), all.end(), [&](auto& q) { return q.first == name; });
        if (at == all.end()) r.error("'" + name + "' is no adapter this model can hold");
        long rows = 0, cols = 0;
        if (!parse_whole(r.expect("rows"), 0, 1000000, rows) || !parse_whole(r.expect("columns"), 0, 1000000, cols) ||
            rows != at->second->value.rows || cols != at->second->value.cols)
            r.error("tensor '" + name + "' has another shape than " + shape_text(at->second->value));
        read_values(r, "tensor '" + name + "'", at->second->value);
        named.push_back(name.substr(0, name.rfind('.')));
        read.push_back(name);
    }
    std::string w = r.next();
    if (w.empty()) r.error("the file ends early (truncated): expected 'end'");
    if (w != "end") r.error("expected 'end', found '" + w + "'");
    auto pairs = [&](LoraOn on) {  // the tensors --save-adapters writes for adapters on `on`, sorted
        std::vector<std::string> names;
        each_adaptable<Transformer, Linear>(model, on, [&](const std::string& name, Linear&) {
            names.push_back(name + ".lora_A"), names.push_back(name + ".lora_B");
        });
        std::sort(names.begin(), names.end());
        return names;
    };
    std::sort(read.begin(), read.end());  // (so that a checkpoint of a run under way can say where they sit: lora_on)
    if (read != pairs(LoraOn::qv) && read != pairs(LoraOn::all))
        r.error("its tensors are not A and B of each W_q and W_v, or of every matrix, once each, as --save-adapters "
                "writes them");
    each_adaptable<Transformer, Linear>(model, LoraOn::all, [&](const std::string& name, Linear& linear) {
        if (std::find(named.begin(), named.end(), name) == named.end()) frozen(linear) = Adapter();  // not in the file
    });
}
inline void read_adapters(const std::string& path, const std::string& base_path, Transformer& model) {
    std::ifstream in = open_input(path, "--adapters " + path);
    read_adapters(in, "--adapters " + path, base_path, model);
}

// ---------------------------------------------------------------------------------------------
// Fine-tuning on other data: --load FILE with --task, --seq-len or --min-len trains (or scores) the loaded model on
// that data, fully or with --lora. The checkpoint keeps the data it was first trained on (Origin's trained_on, lines
// trained_task .. of version 9), so that both held-out sets stay unseen by all its training (dataset_of, below).
// Returns whether the data changed from the checkpoint's.
inline bool tune_data(Options& o, Origin& origin, Transformer& model) {
    if (o.tune_task < 0 && o.tune_seq_len == 0 && o.tune_min_len == 0) return false;
    const DataConfig saved = o.data;
    if (origin.train_lines > 0)
        fail("--task, --seq-len and --min-len with --load " + o.load_path + ": it trained on a --train-data file, "
             "and fine-tuning draws generated data; fine-tune a model trained on generated data");
    if (o.tune_task >= 0) o.data.task = Task(o.tune_task);
    if (o.tune_seq_len > 0) o.data.seq_len = o.tune_seq_len;
    if (o.tune_min_len > 0) o.data.min_len = o.tune_min_len;
    if (o.data.min_len > o.data.seq_len)
        fail(fmt("--min-len %d: must be at most the sequence length %d (--load %s's, or --seq-len)", o.data.min_len,
                 o.data.seq_len, o.load_path.c_str()));
    reach_length(model, o.data.seq_len, o.load_path, "--seq-len");  // a computed position table, made longer
    origin.fine_tuned = !same_data(origin.trained_on, o.data);
    return !same_data(saved, o.data);
}
// A fine-tuning run (adapters, or other data) is a run of its own: its steps count from 1, its schedule runs over its
// own --steps, and its optimizer starts afresh (the loaded run's running means were the base's, not the adapters').
inline void start_fine_tuning(Options& o, TrainState& state, Origin& origin) {
    if (o.tune_lr > 0) o.train.lr = o.tune_lr;  // --lr: this run's rate
    const Optimizer& old = state.optimizer;
    state.optimizer = Optimizer(old.kind, old.weight_decay, old.clip);
    origin.loaded_updates = state.updates;
    state.updates = 0;
    origin.planned_steps = -1;
}
// After --load has read a checkpoint (and tune_data its data): the options say what it holds, the adapters go on
// (--lora R, --adapters FILE), and a fine-tuning run starts its own count. ./sorter and the page both call it.
inline void fine_tune_loaded(Options& o, Transformer& model, TrainState& state, Origin& origin, bool other_data) {
    o.model = model.config;
    o.seed_unknown = origin.seed < 0;
    if (!o.seed_unknown) o.seed = uint64_t(origin.seed);
    if (o.lora_rank > 0) add_lora(o, model);  // the base frozen, adapters beside it
    if (!o.adapters_path.empty()) read_adapters(o.adapters_path, o.load_path, model);
    if (other_data || has_adapters(o)) start_fine_tuning(o, state, origin);  // a run of its own, from step 1
    else if (o.tune_lr > 0)
        fail(fmt("--lr %g with --load %s: the checkpoint fixes its training; --lr sets the rate of a fine-tuning run "
                 "(--lora R, or --task, --seq-len, --min-len)", o.tune_lr, o.load_path.c_str()));
}
// The run's data: a fine-tuned model's held-out set leaves out every input its first training may have seen (of its
// first lengths, outside its first held-out set), and its training never draws the first held-out inputs, so that
// what is left of the first task is measured on inputs no training saw. Same lengths, another task: the two held-out
// sets are one (the held-out inputs depend on the lengths and digits alone), and nothing is left out.
inline Dataset dataset_of(const Options& o, const Origin& origin, std::vector<std::vector<int>> pool) {
    Dataset data(o.data, std::move(pool));
    if (!origin.fine_tuned) return data;
    const Dataset first(origin.trained_on);
    std::vector<Example> kept;
    for (const Example& e : data.held_out) {
        std::vector<int> digits = e.source;
        digits.erase(std::remove(digits.begin(), digits.end(), PAD), digits.end());
        const int n = int(digits.size());
        const bool of_first_lengths = n >= first.config.min_len && n <= first.config.seq_len;
        if (!of_first_lengths || first.held_out_sources.count(digits)) kept.push_back(e);  // not seen by the first
    }
    data.held_out = kept;
    data.held_out_sources.insert(first.held_out_sources.begin(), first.held_out_sources.end());
    return data;
}
// The line a fine-tuned model's run starts with, after the "loaded" line (which names the data it trains on now).
inline std::string first_task_text(const Origin& origin) {
    if (origin.loaded_updates < 0 && !origin.fine_tuned) return "";
    std::string text = origin.loaded_updates < 0 ? "fine-tuned" : "fine-tuning: a run of its own, from step 1";
    if (!origin.fine_tuned) return text + "\n";
    return text + fmt("; first trained on task %s, seq_len %d, min_len %d\n",
                      TASK_NAMES[int(origin.trained_on.task)].c_str(), origin.trained_on.seq_len,
                      origin.trained_on.min_len);
}
// After fine-tuning: the first task's held-out exact-match, what is left of it (forgetting).
inline void print_first_task(Transformer& model, const Origin& origin, const DecodeConfig& how) {
    if (!origin.fine_tuned) return;
    const Dataset first(origin.trained_on);
    const Accuracy a = evaluate(model, first.held_out, how);
    std::printf("first trained on: task %s, seq_len %d, min_len %d: held-out exact-match now %.1f%% (%d/%d)\n",
                TASK_NAMES[int(origin.trained_on.task)].c_str(), origin.trained_on.seq_len, origin.trained_on.min_len,
                100.0 * a.exact, a.exact_count, a.total);
}

// ---------------------------------------------------------------------------------------------
// Saving a fine-tuned run. --save-adapters FILE: the adapters alone. --save FILE: a run done, the model merged (W +
// s A B, one float checkpoint; a quantized base's merged matrices quantized again to its bits, which rounds the
// merge), which loads and runs with no flag; the merged file starts its own training count: the optimizer's running
// means were the adapters', not its weights'. A run under way (--save-every before its last step, or a signal that
// stopped it) cannot be merged and go on bit for bit (A and B are not to be had back from W + s A B, nor their running
// means used on it): its file keeps the base as loaded, the adapters apart from it and their running means (the
// checkpoint's version 10), and --finish trains on from it to the end, where the run saves the merged model.
inline bool run_under_way(const TrainState& state, const Origin& origin) {
    return state.updates < origin.planned_steps;
}
// A file of a LoRA run under way trains on (--finish, --steps N) or is scored as it is: new adapters, other data and
// --quantize are for the merged model the finished run saves. --save-adapters needs adapters, new or loaded.
inline void check_run_under_way(const Options& o, Transformer& model, const TrainState& state, const Origin& origin) {
    if (adapters_of(model).empty()) {
        if (!o.save_adapters_path.empty() && !has_adapters(o))
            fail("--save-adapters writes the adapters: add --lora R (--load " + o.load_path + " holds none)");
        return;
    }
    const std::string flag = o.lora_rank > 0 ? fmt("--lora %d", o.lora_rank) : !o.adapters_path.empty() ? "--adapters"
                             : o.tune_task >= 0 ? "--task" : o.tune_seq_len > 0 ? "--seq-len"
                             : o.tune_min_len > 0 ? "--min-len"
                             : o.quantize_bits > 0 ? fmt("--quantize %d", o.quantize_bits) : "";
    if (!flag.empty())
        fail(fmt("%s: --load %s holds a LoRA run under way (step %ld of %ld, its adapters apart from the base); finish "
                 "it (--load %s --finish --save FILE), then use the merged model it saves", flag.c_str(),
                 o.load_path.c_str(), state.updates, origin.planned_steps, o.load_path.c_str()));
}
inline Transformer merged_copy(Transformer& model) {
    Transformer merged = model;
    std::vector<std::string> adapted;
    for (auto& [name, p] : adapters_of(merged))
        if (last_part(name) == "lora_A") adapted.push_back(name.substr(0, name.rfind('.')));
    merge_adapters(merged);
    if (merged.config.bits > 0)
        for (auto& [name, p] : merged.parameters())
            if (std::find(adapted.begin(), adapted.end(), name) != adapted.end())
                set_quantized(merged, *p, name, quantize(transpose(p->value), merged.config.bits));
    multiply_in_integers(merged);
    return merged;
}
// The merged model, and the training state and origin its file keeps (the page's Download writes the same file).
struct MergedRun {
    Transformer model;
    TrainState state;
    Origin origin;
};
inline MergedRun merged_run(const Options& o, Transformer& model, const TrainState& state, const Origin& origin) {
    MergedRun merged{merged_copy(model), TrainState(o.train, 1), origin};
    merged.state.batch_draws = state.batch_draws;
    merged.origin.planned_steps = -1;
    return merged;
}
inline void save_fine_tuned(const Options& o, Transformer& model, const TrainState& state, const Origin& origin) {
    for (auto& [name, p] : adapters_of(model))
        for (double v : p->value.data)
            if (!std::isfinite(v) || std::fabs(v) > MAX_STORED)
                fail("--save: adapter '" + name + "' holds nan, inf or a value beyond 1e100 (training diverged)");
    if (!o.save_adapters_path.empty())
        write_atomically(o.save_adapters_path, "--save-adapters",
                         [&](FILE* f) { write_adapters(f, model, base_fingerprint(model)); });
    if (o.save_path.empty()) return;
    if (run_under_way(state, origin)) return save_checkpoint(o.save_path, model, o.data, o.train, state, origin);
    MergedRun merged = merged_run(o, model, state, origin);
    save_checkpoint(o.save_path, merged.model, o.data, o.train, merged.state, merged.origin);
}
