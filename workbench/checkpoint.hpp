// workbench/checkpoint.hpp -- --save and --load: a model, its data settings and its training state in one plain-text
// file. Sections: the settings' lines (one table for the header and one for the training section, which writing and
// reading both walk); writing; reading, every value checked with files.hpp's WordReader (a corrupt file is one line
// naming its line number, never a crash).
#pragma once

#include "files.hpp"
#include "settings.hpp"  // version_for asks uses_todays_blocks; the one check of the settings

constexpr int TODAYS_VERSION = 6;  // the version that brought today's blocks (settings.hpp's is_todays)

// What a checkpoint keeps besides the model's tensors, as the run holds it (main.cpp): the data settings, the training
// settings (not --steps), where training stands (train.hpp's TrainState) and the --train-data file, in plain text
// (docs/checkpoints.md shows a whole file, and what each version added); "%.17g" reads back to the same bits, and the
// sinusoidal table is computed, not stored. A setting's first version is in its row below.

// Every value a checkpoint holds is at most MAX_STORED in size: far beyond any trained model's (a run stops
// when its loss is no longer finite), and small enough that the square of one never overflows.
constexpr double MAX_STORED = 1e100;
// Adam's running means always satisfy m^2 <= (1 - beta1)^2 / ((1 - beta2) (1 - beta1^2 / beta2)) s, about
// 2.88 s (Cauchy-Schwarz over the two weighted sums of past gradients); a file is allowed 3 s, for rounding.
constexpr double ADAM_M_SQUARED_OVER_S = 3.0;

// ---------------------------------------------------------------------------------------------
// The settings' lines
// ---------------------------------------------------------------------------------------------

// The values of the settings' lines in one place, so that a row of the tables below can point at each by member
// pointer: flags.hpp's member() reaches s.model, s.data and s.train (as it does Options'), the one below the rest.
struct Settings {
    ModelConfig model;
    DataConfig data;
    TrainConfig train;
    long seed = -1, planned_steps = -1;                         // Origin's: -1 unknown, written "unknown"
    long updates = 0;                                           // where training stands: TrainState's
    uint64_t draws = 0, position_draws = 0, dropout_draws = 0;  // the generators' states
    int version = 0;                                            // the file's, as it is read
};
template <typename S, typename T> auto& member(S& s, T Settings::*m) { return s.*m; }
// One line, "name value": a new setting is one row of a table below, which writing and reading both walk.
struct SettingRow {
    std::string name;
    int version;                                       // the first format version with the line
    std::function<std::string(const Settings&)> text;  // the value, as written
    std::function<void(Settings&, WordReader&)> read;  // reads the line, its value checked
};

// Row builders, one for each kind of value. A whole number prints as %d and %ld do (a switch is one from 0 to 1;
// a generator's state is below 2^64), a number as %.17g, a choice as its name.
template <typename C, typename T> SettingRow whole_setting(const char* name, int version, long lo, long hi, T C::*m) {
    return {name, version, [=](const Settings& s) { return std::to_string(member(s, m)); },
            [=](Settings& s, WordReader& r) { member(s, m) = T(r.whole(name, lo, hi)); }};
}
inline SettingRow draws_setting(const char* name, int version, uint64_t Settings::*m) {
    return {name, version, [=](const Settings& s) { return std::to_string(s.*m); },
            [=](Settings& s, WordReader& r) { s.*m = r.whole_u64(name); }};
}
// A value that a file saved again after --load of an older one does not know: -1, written "unknown".
inline SettingRow known_setting(const char* name, int version, long hi, long Settings::*m) {
    return {name, version, [=](const Settings& s) { return s.*m < 0 ? std::string("unknown") : std::to_string(s.*m); },
            [=](Settings& s, WordReader& r) {
                std::string w = r.value_of(name);
                s.*m = w == "unknown" ? -1 : whole_or_fail(r.at() + ": " + name, w, 0, hi);
            }};
}
template <typename C> SettingRow number_setting(const char* name, int version, double lo, double hi, double C::*m) {
    return {name, version, [=](const Settings& s) { return fmt("%.17g", member(s, m)); },
            [=](Settings& s, WordReader& r) { member(s, m) = r.number(name, lo, hi); }};
}
// A choice, its value written as its name.
template <typename C, typename E>
SettingRow choice_setting(const char* name, int version, const std::vector<std::string>& names, E C::*m) {
    return {name, version, [=](const Settings& s) { return names[int(member(s, m))]; },
            [=](Settings& s, WordReader& r) { member(s, m) = E(r.choice(name, names)); }};
}
// A choice of the model's, whose values that are today's blocks (is_todays, settings.hpp) came in TODAYS_VERSION:
// an older file may not name them.
template <typename E> SettingRow model_choice_setting(const char* name, int version, const std::vector<std::string>&
                                                      names, E ModelConfig::*m) {
    return {name, version, [=](const Settings& s) { return names[int(s.model.*m)]; },
            [=](Settings& s, WordReader& r) {
                E value = s.model.*m = E(r.choice(name, names));
                if (is_todays(value) && s.version < TODAYS_VERSION)
                    r.error(fmt("%s %s came in version %d, and this file says version %d (a model that uses it is "
                                "saved as version %d)", name, names[int(value)].c_str(), TODAYS_VERSION, s.version,
                                TODAYS_VERSION));
            }};
}

// The header, after the format's version line; read_header then checks the values that must agree.
inline const std::vector<SettingRow>& header_table() {
    using M = ModelConfig; using D = DataConfig;  // short: rows fit
    static const std::vector<SettingRow> table = {
        whole_setting("vocab", 1, 3, MAX_DIGIT + 2, &M::vocab),
        whole_setting("max_len", 1, 1, RANDOM_POSITION_SPAN * 2 * MAX_SEQ_LEN, &M::max_len),  // 2: decoder-only
        whole_setting("d_model", 1, 1, MAX_D_MODEL, &M::d_model),
        whole_setting("n_heads", 1, 1, MAX_HEADS, &M::n_heads),
        whole_setting("d_ff", 1, 1, MAX_D_FF, &M::d_ff),
        whole_setting("enc_layers", 1, 0, MAX_LAYERS, &M::enc_layers),  // 0: decoder-only (version 6)
        whole_setting("dec_layers", 1, 1, MAX_LAYERS, &M::dec_layers),
        model_choice_setting("norm", 1, NORM_PLACE_NAMES, &M::norm_place),
        model_choice_setting("positions", 1, POSITION_NAMES, &M::positions),  // rope, alibi: TODAYS_VERSION
        model_choice_setting("activation", 1, ACTIVATION_NAMES, &M::activation),  // swiglu: TODAYS_VERSION
        whole_setting("embed_scale", 1, 0, 1, &M::embed_scale),
        whole_setting("tie_embeddings", 3, 0, 1, &M::tie_embeddings),
        number_setting("dropout", 3, 0, MAX_FRACTION, &M::dropout),
        number_setting("attn_dropout", 3, 0, MAX_FRACTION, &M::attn_dropout),
        whole_setting("rms_norm", 6, 0, 1, &M::rms_norm),
        model_choice_setting("arch", 6, ARCH_NAMES, &M::arch),
        {"kv_heads", 6, [](const Settings& s) { return std::to_string(s.model.key_value_heads()); },
         [](Settings& s, WordReader& r) {  // n_heads is read: as many is multi-head attention, kept as 0
             s.model.kv_heads_asked = int(r.whole("kv_heads", 1, MAX_HEADS));
             if (s.model.kv_heads_asked == s.model.n_heads) s.model.kv_heads_asked = 0;
         }},
        choice_setting("task", 1, TASK_NAMES, &D::task),
        whole_setting("seq_len", 1, 1, MAX_SEQ_LEN, &D::seq_len),
        whole_setting("min_len", 1, 1, MAX_SEQ_LEN, &D::min_len),
        whole_setting("max_digit", 1, 1, MAX_DIGIT, &D::max_digit),
    };
    return table;
}
// The training section, after the line "training" (version 2 on); read_training then checks lr x weight_decay.
inline const std::vector<SettingRow>& training_table() {
    using R = TrainConfig; using S = Settings;
    static const std::vector<SettingRow> table = {
        choice_setting("optimizer", 2, OPTIMIZER_NAMES, &R::optimizer),
        {"lr", 2, [](const Settings& s) { return fmt("%.17g", s.train.lr); },
         [](Settings& s, WordReader& r) {  // a range open at 0: a message of its own
             std::string lr = r.value_of("lr");
             if (!parse_finite(lr, s.train.lr) || s.train.lr <= 0 || s.train.lr > MAX_LR)
                 r.error("lr " + lr + fmt(": expected above 0 and at most %g", MAX_LR));
         }},
        choice_setting("schedule", 2, SCHEDULE_NAMES, &R::schedule),
        whole_setting("warmup", 2, 1, MAX_STEPS, &R::warmup),
        whole_setting("batch", 2, 1, MAX_BATCH, &R::batch),
        known_setting("seed", 4, MAX_SEED, &S::seed),
        whole_setting("updates", 2, 0, MAX_STEPS * 1000, &S::updates),
        known_setting("planned_steps", 5, MAX_STEPS * 1000, &S::planned_steps),
        draws_setting("draws", 2, &S::draws),
        draws_setting("position_draws", 2, &S::position_draws),
        draws_setting("dropout_draws", 3, &S::dropout_draws),
        number_setting("label_smoothing", 3, 0, MAX_FRACTION, &R::label_smoothing),
        number_setting("clip", 3, 0, MAX_CLIP, &R::clip),
        number_setting("weight_decay", 3, 0, MAX_WEIGHT_DECAY, &R::weight_decay),
    };
    return table;
}
// A table's lines in a file of format `version`: a row of version 3 only in a file of version 3 or later.
inline void write_settings(FILE* f, const std::vector<SettingRow>& table, const Settings& s, int version) {
    for (const SettingRow& row : table)
        if (row.version <= version) std::fprintf(f, "%s %s\n", row.name.c_str(), row.text(s).c_str());
}
inline void read_settings(WordReader& r, const std::vector<SettingRow>& table, Settings& s, int version) {
    s.version = version;
    for (const SettingRow& row : table)
        if (row.version <= version) row.read(s, r);
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------
inline void write_matrix(FILE* f, const Matrix& m) {  // one line per row
    for (int r = 0; r < m.rows; r++)
        for (int c = 0; c < m.cols; c++) std::fprintf(f, "%.17g%c", m.at(r, c), c + 1 == m.cols ? '\n' : ' ');
}
// The newest version; versions 1 to it are read. A new row takes the next version, and this follows it
// (a test checks that the newest row's version is this one). A model of the 2017 paper's blocks is written as
// version 5, the same bytes as before today's blocks came; a model that uses one of them, as version 6, whose
// header adds their lines (rms_norm, arch, kv_heads) and whose choices may name rope, alibi or swiglu.
constexpr int CHECKPOINT_VERSION = 6;
inline int version_for(const ModelConfig& c) { return uses_todays_blocks(c) ? TODAYS_VERSION : 5; }
inline void write_checkpoint(FILE* f, Transformer& model, const DataConfig& d, const TrainConfig& t,
                             const TrainState& state, const Origin& origin) {  // the whole file
    const int version = version_for(model.config);
    Settings s;
    s.model = model.config, s.data = d, s.train = t, s.seed = origin.seed, s.updates = state.updates;
    s.planned_steps = origin.planned_steps, s.draws = state.batch_draws.state;
    s.position_draws = model.position_draws.state, s.dropout_draws = model.dropout_draws.state;
    const Optimizer& opt = state.optimizer;
    s.train.optimizer = opt.kind;  // the optimizer training holds
    std::fprintf(f, "sorter-checkpoint %d\n", version);
    write_settings(f, header_table(), s, version);
    auto params = model.parameters();
    std::fprintf(f, "tensors %zu\n", params.size());
    for (auto& [name, p] : params) {
        std::fprintf(f, "tensor %s %d %d\n", name.c_str(), p->value.rows, p->value.cols);
        write_matrix(f, p->value);
    }
    std::fprintf(f, "training\n");
    write_settings(f, training_table(), s, version);
    if (origin.train_lines > 0)  // only after --train-data: files of generated data are as they were
        std::fprintf(f, "train_data %ld %llu\n", origin.train_lines, (unsigned long long)origin.train_fingerprint);
    for (std::size_t k = 0; k < opt.m.size() && opt.running_means() > 0; k++) {  // none before the first update
        std::fprintf(f, "m %s\n", params[k].first.c_str());
        write_matrix(f, opt.m[k]);
        if (opt.running_means() < 2) continue;
        std::fprintf(f, "s %s\n", params[k].first.c_str());
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
    origin.planned_steps = s.planned_steps;
    model.position_draws.state = s.position_draws, model.dropout_draws.state = s.dropout_draws;
    Optimizer& opt = state.optimizer = Optimizer(t.optimizer, t.weight_decay, t.clip);
    std::string w = r.next();
    r.put_back(w);
    if (w == "train_data") {  // only a model trained on a --train-data file: its size and fingerprint
        origin.train_lines = r.whole("train_data", 1, MAX_TRAIN_LINES);
        origin.train_fingerprint = r.whole_u64("", r.line);
    }
    if (state.updates == 0 || opt.running_means() == 0) return;
    for (auto& [name, p] : model.parameters()) {
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

// The header (header_table), then the values that must agree.
inline void read_header(WordReader& r, ModelConfig& c, DataConfig& d, int version) {
    Settings s;
    s.model = c, s.data = d;  // what the file does not list stays as it was
    read_settings(r, header_table(), s, version);
    c = s.model, d = s.data;
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
    auto params = model.parameters();
    if (count != long(params.size()))
        r.error(fmt("the header lists %ld tensors; this configuration has %zu", count, params.size()));
    for (auto& [name, p] : params) {
        Matrix& m = p->value;
        std::string w = r.next(), tensor = "tensor '" + name + "'";
        if (w.empty()) r.error("the file ends early (truncated): " + tensor + " is missing");
        if (w != "tensor") r.error(tensor + " is missing (found '" + w + "' where it should start)");
        std::string got = r.expect("a tensor name");
        if (got != name && std::any_of(params.begin(), params.end(), [&](auto& q) { return q.first == got; }))
            r.error(tensor + " is missing (found '" + got + "' in its place)");
        if (got != name) r.error("unknown tensor '" + got + "'");
        long rows = 0, cols = 0;
        std::string rw = r.expect("the rows of " + name), cw = r.expect("the columns of " + name);
        if (!parse_whole(rw, 0, 1000000000, rows) || !parse_whole(cw, 0, 1000000000, cols) || rows != m.rows ||
            cols != m.cols)
            r.error(tensor + " has shape (" + rw + ", " + cw + "); this configuration needs " + shape_text(m));
        read_values(r, tensor, m);
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
    std::string version = r.expect("the format version");
    if (version.size() != 1 || version[0] < '1' || version[0] > '0' + CHECKPOINT_VERSION)
        r.error("format version " + version + fmt(" is not supported (this program reads versions 1 to %d)",
                                                  CHECKPOINT_VERSION));
    ModelConfig c;
    read_header(r, c, d, std::stoi(version));
    long count = r.whole("tensors", 1, 1000);
    Transformer model(c, 0);
    check_room_for(r, model);
    read_tensors(r, model, count);
    t = TrainConfig(), state = TrainState(t, 1), origin = Origin();  // version 1 keeps no training: --steps starts
                                                                     // afresh with the training flags' defaults
    std::string w = r.next(), last = version == "1" ? "'end'" : "'training'";
    if (w.empty()) r.error("the file ends early (truncated): expected " + last);
    if (w == "tensor") r.error("unknown tensor '" + r.next() + "' after the last one this configuration has");
    if (version != "1" && w != "training") r.error("expected 'training' after the last tensor, found '" + w + "'");
    if (version != "1") read_training(r, model, t, state, origin, std::stoi(version));
    if (version != "1") w = r.expect("'end'");
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
