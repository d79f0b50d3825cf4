// workbench/checkpoint.hpp -- --save and --load: a model, its data settings and its training state in one plain-text
// file. Sections: writing; reading, every value checked with files.hpp's WordReader (a corrupt file is one line naming
// its line number, never a crash). The settings' lines, which both walk, are checkpoint_lines.hpp's.
#pragma once

#include "checkpoint_lines.hpp"  // the settings' lines, and which version a model is written as
#include "files.hpp"
#include "quantize.hpp"          // a quantized model's tensors
#include "settings.hpp"          // the one check of the settings

// What a checkpoint keeps besides the model's tensors, as the run holds it (main.cpp): the data settings, the training
// settings (not --steps), where training stands (train.hpp's TrainState) and the --train-data file, in plain text
// (docs/checkpoints.md shows a whole file, and what each version added); "%.17g" reads back to the same bits, and the
// sinusoidal table is computed, not stored. A setting's first version is in its row (checkpoint_lines.hpp).

// Every value a checkpoint holds is at most MAX_STORED in size: far beyond any trained model's (a run stops
// when its loss is no longer finite), and small enough that the square of one never overflows.
constexpr double MAX_STORED = 1e100;
// Adam's running means always satisfy m^2 <= (1 - beta1)^2 / ((1 - beta2) (1 - beta1^2 / beta2)) s, about
// 2.88 s (Cauchy-Schwarz over the two weighted sums of past gradients); a file is allowed 3 s, for rounding.
constexpr double ADAM_M_SQUARED_OVER_S = 3.0;

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------
inline void write_matrix(FILE* f, const Matrix& m) {  // one line per row
    for (int r = 0; r < m.rows; r++)
        for (int c = 0; c < m.cols; c++) std::fprintf(f, "%.17g%c", m.at(r, c), c + 1 == m.cols ? '\n' : ' ');
}
inline void write_checkpoint(FILE* f, Transformer& model, const DataConfig& d, const TrainConfig& t,
                             const TrainState& state, const Origin& origin) {  // the whole file
    Settings s;
    s.model = model.config, s.data = d, s.train = t, s.seed = origin.seed, s.updates = state.updates;
    s.planned_steps = origin.planned_steps, s.draws = state.batch_draws.state;
    s.position_draws = model.position_draws.state, s.dropout_draws = model.dropout_draws.state;
    s.trained_on = origin.fine_tuned ? origin.trained_on : d;
    const ParamList adapters = adapters_of(model);  // a LoRA run under way's (chapter 12), or none
    if (!adapters.empty()) {
        s.lora_rank = adapters[0].second->value.cols;
        s.lora_scale = adapters_scale(model), s.lora_on = adapters_on(model);
    }
    const int version = std::max(version_for(s), origin.fine_tuned ? FINE_TUNED_VERSION : 0);
    const Optimizer& opt = state.optimizer;
    s.train.optimizer = opt.kind;  // the optimizer training holds
    std::fprintf(f, "sorter-checkpoint %d\n", version);
    write_settings(f, header_table(), s, version);
    const ParamList params = parameters_and_adapters(model), trained = trained_parameters(model);
    std::fprintf(f, "tensors %zu\n", params.size());
    for (auto& [name, p] : params) {
        std::fprintf(f, "tensor %s %d %d\n", name.c_str(), p->value.rows, p->value.cols);
        const auto integers = model.integers.find(name);  // a quantized model's (chapter 09)
        if (integers == model.integers.end()) write_matrix(f, p->value);
        else write_quantized(f, *integers->second);
    }
    std::fprintf(f, "training\n");
    write_settings(f, training_table(), s, version);
    if (origin.train_lines > 0)  // only after --train-data: files of generated data are as they were
        std::fprintf(f, "train_data %ld %llu\n", origin.train_lines, (unsigned long long)origin.train_fingerprint);
    // The running means of what trains: none before the first update; none for a quantized model, which never trains,
    // but for the adapters a quantized base trains (chapter 12).
    const bool kept = opt.running_means() > 0 && (model.config.bits == 0 || !adapters.empty());
    for (std::size_t k = 0; k < opt.m.size() && kept; k++) {
        std::fprintf(f, "m %s\n", trained[k].first.c_str());
        write_matrix(f, opt.m[k]);
        if (opt.running_means() < 2) continue;
        std::fprintf(f, "s %s\n", trained[k].first.c_str());
        write_matrix(f, opt.s[k]);
    }
    std::fprintf(f, "end\n");
}
// What a checkpoint could not hold ("tensor 'out.b' holds nan or inf"), or "". --load rejects nan, inf and values
// beyond MAX_STORED, so a diverged model is refused rather than written unreadable.
inline std::string unstorable(Transformer& model) {
    for (auto& [name, p] : model.parameters())
        for (double v : p->value.data)
            if (!std::isfinite(v) || std::fabs(v) > MAX_STORED)
                return "tensor '" + name + "' holds " +
                       (std::isfinite(v) ? fmt("a value beyond %g", MAX_STORED) : "nan or inf");
    return "";
}
inline void save_checkpoint(const std::string& path, Transformer& model, const DataConfig& d, const TrainConfig& t,
                            const TrainState& state, const Origin& origin) {  // --save FILE
    std::string what = unstorable(model);
    if (!what.empty()) fail("--save " + path + ": " + what + " (training diverged); not saved");
    write_atomically(path, "--save", [&](FILE* f) { write_checkpoint(f, model, d, t, state, origin); });
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------
// How many values a model holds: the sizes of its own parameter list, so no shape is restated here.
inline long parameter_count(Transformer& model) {
    long values = 0;
    for (auto& [name, p] : model.parameters()) values += long(p->value.data.size());
    return values;
}

// The m.data.size() values of `what` (a tensor, or an optimizer's running mean of one), into m. Each is
// a finite number of at most MAX_STORED in size, and passes `check` (which returns what is wrong, or "").
inline void read_values(WordReader& r, const std::string& what, Matrix& m,
                        const std::function<std::string(std::size_t i, double v)>& check = nullptr) {
    for (std::size_t i = 0; i < m.data.size(); i++) {
        std::string v = r.next();
        if (v.empty())
            r.error("the file ends early (truncated): " + what + " has " + std::to_string(i) + " of its " +
                    std::to_string(m.data.size()) + " values");
        if (parse_finite(v, m.data[i])) {
            std::string problem = std::fabs(m.data[i]) > MAX_STORED ? fmt("is beyond %g in size", MAX_STORED)
                                  : check ? check(i, m.data[i]) : "";
            if (problem.empty()) continue;
            r.error(what + fmt(" value %zu: ", i) + v + " " + problem);
        }
        if (r.in.peek() == EOF) r.error("the file ends early (truncated) inside " + what);
        r.error(what + fmt(" value %zu: '", i) + v + "' is not a finite number");
    }
}

// Version 2's training section, after the tensors: its lines (training_table), the train_data line of a
// --train-data run, and the optimizer's running means (none for SGD, none before the first update).
inline void read_training(WordReader& r, Transformer& model, TrainConfig& t, TrainState& state, Origin& origin,
                          int version) {
    Settings s;
    s.train = t, s.dropout_draws = model.dropout_draws.state;  // what the file does not list stays as it was
    read_settings(r, training_table(), s, version);
    if (s.train.lr * s.train.weight_decay >= 1.0) r.error("weight_decay: lr x weight_decay must stay below 1");
    if (s.planned_steps >= 0 && s.planned_steps < s.updates)
        r.error(fmt("planned_steps %ld is below updates %ld: a run cannot have made more steps than it planned",
                    s.planned_steps, s.updates));
    t = s.train, origin.seed = s.seed, state.updates = s.updates, state.batch_draws.state = s.draws;
    origin.planned_steps = s.planned_steps, origin.trained_on = s.trained_on;
    model.position_draws.state = s.position_draws, model.dropout_draws.state = s.dropout_draws;
    Optimizer& opt = state.optimizer = Optimizer(t.optimizer, t.weight_decay, t.clip);
    std::string w = r.next();
    r.put_back(w);
    if (w == "train_data") {  // only a model trained on a --train-data file: its size and fingerprint
        origin.train_lines = r.whole("train_data", 1, MAX_TRAIN_LINES);
        origin.train_fingerprint = r.whole_u64("", r.line);
    }
    if (state.updates == 0 || opt.running_means() == 0 || (model.config.bits > 0 && adapters_of(model).empty()))
        return;  // (quantized: never kept, but for the adapters over it)
    for (auto& [name, p] : trained_parameters(model)) {
        opt.m.emplace_back(p->value.rows, p->value.cols);
        if (opt.running_means() == 2) opt.s.emplace_back(p->value.rows, p->value.cols);
        for (const char* which : {"m", "s"}) {
            if (which[0] == 's' && opt.running_means() < 2) continue;
            std::string w = r.expect(std::string(which) + " of '" + name + "'");
            if (w == "end")
                r.error(fmt("the optimizer's running means are missing: after %ld updates, %s keeps ", state.updates,
                            OPTIMIZERS[int(opt.kind)].title.c_str()) +
                        (opt.running_means() == 2 ? "'m' and 's'" : "'m'") + " for every tensor, from '" +
                        which + " " + name + "' on");
            std::string got = r.expect("a tensor name");
            if (w != which || got != name)
                r.error("expected '" + std::string(which) + " " + name + "', found '" + w + " " + got + "'");
            const Matrix& m = opt.m.back();
            read_values(r, std::string(which) + " of '" + name + "'", which[0] == 'm' ? opt.m.back() : opt.s.back(),
                        [&](std::size_t i, double v) -> std::string {  // what Adam's s and m always satisfy
                            if (which[0] == 'm') return "";
                            if (v < 0) return "is negative: a second moment is a running mean of squares";
                            return m.data[i] * m.data[i] <= ADAM_M_SQUARED_OVER_S * v ? ""
                                   : fmt("is too small for its first moment %g (Adam keeps m^2 <= %.2f s)",
                                         m.data[i], ADAM_M_SQUARED_OVER_S);
                        });
        }
    }
}

// The header (header_table) into s, then the values that must agree.
inline void read_header(WordReader& r, Settings& s, int version) {
    read_settings(r, header_table(), s, version);  // what the file does not list stays as it was
    const ModelConfig& c = s.model;
    const DataConfig& d = s.data;
    std::string header = r.where + " header: ";  // two header values that disagree
    SettingsProblem problem = settings_problem(c);  // said as the lines say them: "n_heads 3 with d_model 16: ..."
    std::string named;
    for (std::size_t k = 0; k < problem.settings.size(); k++)
        for (const SettingRow& row : header_table())
            if (row.name == problem.settings[k]) named += (k == 0 ? "" : k == 1 ? " with " : ", ") + row.name + " " +
                                                         row.text(s);
    if (!problem.settings.empty()) fail(header + named + ": " + problem.why);
    if (d.min_len > d.seq_len) fail(header + fmt("min_len %d is above seq_len %d", d.min_len, d.seq_len));
    if (c.vocab != vocab_size(d))
        fail(header + fmt("vocab %d does not match max_digit %d (vocab = max_digit + 2)", c.vocab, d.max_digit));
    if (c.max_len < positions_read(c, d.seq_len))
        fail(header + fmt("max_len %d is below seq_len %d", c.max_len, d.seq_len) +
             (has_encoder(c.arch) ? "" : fmt(" x 2 (%s: the source and the answer, one sequence)",
                                             ARCH_NAMES[int(c.arch)].c_str())));
}

// Every value takes at least two bytes (a digit and a space or newline), so a file too short for the
// model its header describes is refused before a value is read. A pipe cannot tell its length: it skips this (the
// caps on every size bound the model built), and its stream is left as it was.
inline void check_room_for(WordReader& r, Transformer& model) {
    std::streampos here = r.in.tellg();
    if (here < 0) {  // not a file: tellg failed and set failbit, which the reading below must not see
        r.in.clear();
        return;
    }
    r.in.seekg(0, std::ios::end);
    std::streamoff left = r.in.tellg() - here;
    r.in.clear();
    r.in.seekg(here);
    const long values = parameter_count(model);
    if (left >= 0 && left < 2 * values)
        r.error(fmt("the file ends early (truncated): this header describes %ld values, and only %lld bytes follow",
                    values, (long long)left));
}

// The tensors, which must match the model the header describes, name by name and shape by shape.
inline void read_tensors(WordReader& r, Transformer& model, long count) {
    auto params = parameters_and_adapters(model);  // a LoRA run under way's adapters after the base's (chapter 12)
    if (count != long(params.size()))
        r.error(fmt("the header lists %ld tensors; this configuration has %zu", count, params.size()));
    for (auto& [name, p] : params) {
        Matrix& m = p->value;
        std::string w = r.next(), tensor = "tensor '" + name + "'";
        if (w.empty() || r.cut_inside(w, "tensor"))
            r.error("the file ends early (truncated): " + tensor + " is missing");
        if (w != "tensor") r.error(tensor + " is missing (found '" + w + "' where it should start)");
        std::string got = r.expect("the name of " + tensor);
        if (r.cut_inside(got, name)) r.error("the file ends early (truncated) inside the name of " + tensor);
        if (got != name && std::any_of(params.begin(), params.end(), [&](auto& q) { return q.first == got; }))
            r.error(tensor + " is missing (found '" + got + "' in its place)");
        if (got != name) r.error("unknown tensor '" + got + "'");
        long rows = 0, cols = 0;
        std::string rw = r.expect("the rows of " + name), cw = r.expect("the columns of " + name);
        if (!parse_whole(rw, 0, 1000000000, rows) || !parse_whole(cw, 0, 1000000000, cols) || rows != m.rows ||
            cols != m.cols)
            r.error(tensor + " has shape (" + rw + ", " + cw + "); this configuration needs " + shape_text(m));
        if (model.config.bits > 0 && is_product_matrix(name)) read_quantized(r, model, name, *p, model.config.bits);
        else read_values(r, tensor, m);
    }
}

// The model a checkpoint holds; its data settings, training settings and state and its training file into the
// other arguments. `where` begins every message.
inline Transformer read_checkpoint(std::istream& in, const std::string& where, DataConfig& d, TrainConfig& t,
                                   TrainState& state, Origin& origin) {
    WordReader r{in, where, 1, ""};
    std::string magic = r.next();
    if (magic != "sorter-checkpoint")
        r.error("not a sorter checkpoint (the first word should be 'sorter-checkpoint', found '" + magic + "')");
    const std::string word = r.expect("the format version");
    long version = 0;  // a number: version 10 came after 9
    if (!parse_whole(word, 1, newest_version(), version) || word != std::to_string(version))
        r.error("format version " + word + fmt(" is not supported (this program reads versions 1 to %d)",
                                               newest_version()));
    Settings s;
    s.data = d;
    read_header(r, s, int(version));
    d = s.data;
    long count = r.whole("tensors", 1, 1000);
    Transformer model(s.model, 0);
    if (s.lora_rank > 0) {  // a LoRA run under way: its adapters, whose values come after the base's tensors
        Rng unused(1);
        add_adapters(model, s.lora_rank, s.lora_scale * s.lora_rank, s.lora_on, unused);
        each_adaptable<Transformer, Linear>(model, LoraOn::all, [&](const std::string&, Linear& linear) {
            if (adapted(linear)) frozen(linear).s = s.lora_scale;  // as kept (alpha / R again might round otherwise)
        });
    }
    check_room_for(r, model);
    read_tensors(r, model, count);
    multiply_in_integers(model);  // a quantized model's Linears multiply by its integers (chapter 09)
    t = TrainConfig(), state = TrainState(t, 1), origin = Origin();  // version 1 keeps no training: --steps starts
                                                                     // afresh with the training flags' defaults
    std::string w = r.next(), last = version == 1 ? "'end'" : "'training'";
    if (w.empty() || r.cut_inside(w, version == 1 ? "end" : "training"))
        r.error("the file ends early (truncated): expected " + last);
    if (w == "tensor") {
        std::string extra = r.next();
        if (extra.empty()) r.error("the file ends early (truncated): expected " + last);
        r.error("unknown tensor '" + extra + "' after the last one this configuration has");
    }
    if (version != 1 && w != "training") r.error("expected 'training' after the last tensor, found '" + w + "'");
    if (version != 1) read_training(r, model, t, state, origin, int(version));
    if (version < FINE_TUNED_VERSION) origin.trained_on = d;  // trained on its own data
    origin.trained_on.max_digit = d.max_digit;  // (one vocabulary: fine-tuning keeps the digits)
    origin.fine_tuned = !same_data(origin.trained_on, d);
    if (origin.fine_tuned && origin.trained_on.min_len > origin.trained_on.seq_len)
        r.error(fmt("trained_min_len %d is above trained_seq_len %d", origin.trained_on.min_len,
                    origin.trained_on.seq_len));
    if (version != 1) w = r.expect("'end'");
    if (r.cut_inside(w, "end")) r.error("the file ends early (truncated): expected 'end'");
    if (w != "end") r.error("expected 'end', found '" + w + "'");
    w = r.next();
    if (!w.empty()) r.error("unexpected '" + w + "' after 'end'");
    return model;
}
inline Transformer load_checkpoint(const std::string& path, DataConfig& d, TrainConfig& t, TrainState& state,
                                   Origin& origin) {  // --load FILE
    std::ifstream in = open_input(path, "--load " + path);
    return read_checkpoint(in, "--load " + path, d, t, state, origin);
}
