// workbench/checkpoint_lines.hpp -- the settings' lines of a checkpoint (checkpoint.hpp): one table for the header and
// one for the training section, which writing and reading both walk, a row a line, each with the format version
// that brought it; and the version a model is written as. Tests: checkpoint_test.cpp, with the rest of the format.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "files.hpp"
#include "settings.hpp"  // is_todays

constexpr int TODAYS_VERSION = 6;  // the version that brought today's blocks (settings.hpp's is_todays)
constexpr int FINE_TUNED_VERSION = 9;  // the version that keeps a fine-tuned model's first data (trained_task ...)
constexpr int LORA_VERSION = 10;       // the version that keeps a LoRA run under way: its adapters (lora_rank ...)
// Two data settings the same: the task and the lengths (the digits a model reads are its vocabulary's).
inline bool same_data(const DataConfig& a, const DataConfig& b) {
    return a.task == b.task && a.seq_len == b.seq_len && a.min_len == b.min_len && a.max_digit == b.max_digit;
}

// The values of the settings' lines in one place, so that a row of the tables below can point at each by member
// pointer: flags.hpp's member() reaches s.model, s.data and s.train (as it does Options'), the one below the rest.
struct Settings {
    ModelConfig model;
    DataConfig data;
    TrainConfig train;
    long seed = -1, planned_steps = -1;                         // Origin's: -1 unknown, written "unknown"
    long updates = 0;                                           // where training stands: TrainState's
    uint64_t draws = 0, position_draws = 0, dropout_draws = 0;  // the generators' states
    DataConfig trained_on;                                      // Origin's: the data it was first trained on
    int lora_rank = 0;                                          // a LoRA run under way's adapters (0: none), their
    double lora_scale = 0.0;                                    //   scale s = alpha / R, and where they sit
    LoraOn lora_on = LoraOn::qv;                                //   (chapter 12)
    int version = 0;                                            // the file's, as it is read
};
template <typename S, typename T> auto& member(S& s, T Settings::*m) { return s.*m; }
// One line, "name value": a new setting is one row of a table below, which writing and reading both walk.
struct SettingRow {
    std::string name;
    int version;                                       // the first format version with the line
    std::function<std::string(const Settings&)> text;  // the value, as written
    std::function<void(Settings&, WordReader&)> read;  // reads the line, its value checked
    std::function<int(const Settings&)> needs = {};    // the version a file of this value must have (none: any)
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
template <typename E, typename C> SettingRow model_choice_setting(const char* name, int version,
                                                                  const std::vector<std::string>& names, E C::*m) {
    return {name, version, [=](const Settings& s) { return names[int(s.model.*m)]; },
            [=](Settings& s, WordReader& r) {
                E value = s.model.*m = E(r.choice(name, names));
                if (is_todays(value) && s.version < TODAYS_VERSION)
                    r.error(fmt("%s %s came in version %d, and this file says version %d (a model that uses it is "
                                "saved as version %d)", name, names[int(value)].c_str(), TODAYS_VERSION, s.version,
                                TODAYS_VERSION));
            },
            [=](const Settings& s) { return is_todays(s.model.*m) ? TODAYS_VERSION : 0; }};
}
// A switch of the model's whose line came in `version`: a model with it on is saved as that version at least.
template <typename C> SettingRow model_switch_setting(const char* name, int version, bool C::*m) {
    SettingRow row = whole_setting(name, version, 0, 1, m);
    row.needs = [=](const Settings& s) { return s.model.*m ? version : 0; };
    return row;
}

// A choice of the model's whose line came in `version`: a model with any value but the first (the default) is saved
// as that version at least, so a default model's file keeps the bytes it had before the line came.
template <typename E, typename C>
SettingRow model_choice_since(const char* name, int version, const std::vector<std::string>& names, E C::*m) {
    SettingRow row = choice_setting(name, version, names, m);
    row.needs = [=](const Settings& s) { return int(s.model.*m) != 0 ? version : 0; };
    return row;
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
        model_switch_setting("rms_norm", 6, &M::rms_norm),
        model_choice_setting("arch", 6, ARCH_NAMES, &M::arch),
        {"kv_heads", 6, [](const Settings& s) { return std::to_string(s.model.key_value_heads()); },
         [](Settings& s, WordReader& r) {  // n_heads is read: as many is multi-head attention, kept as 0
             s.model.kv_heads_asked = int(r.whole("kv_heads", 1, MAX_HEADS));
             if (s.model.kv_heads_asked == s.model.n_heads) s.model.kv_heads_asked = 0;
         },
         [](const Settings& s) { return s.model.key_value_heads() != s.model.n_heads ? 6 : 0; }},
        model_choice_since("attention", 7, ATTENTION_NAMES, &M::attention),  // flash: version 7
        model_switch_setting("no_bias", 7, &M::no_bias),
        {"bits", 7, [](const Settings& s) { return std::to_string(s.model.bits); },
         [](Settings& s, WordReader& r) {  // 0: float64; 2 to 8: quantized (quantize.hpp)
             s.model.bits = int(r.whole("bits", 0, 8));
             if (s.model.bits == 1) r.error("bits 1: a quantized model has 2 to 8 bits (0: float64)");
         },
         [](const Settings& s) { return s.model.bits > 0 ? 7 : 0; }},
        // Version 8: a mixture of experts (chapter 11). A model without experts is written as before, without these.
        {"experts", 8, [](const Settings& s) { return std::to_string(s.model.experts); },
         [](Settings& s, WordReader& r) { s.model.experts = int(r.whole("experts", 0, MAX_EXPERTS)); },
         [](const Settings& s) { return s.model.experts > 0 ? 8 : 0; }},
        {"top_k", 8, [](const Settings& s) { return std::to_string(s.model.top_k()); },
         [](Settings& s, WordReader& r) {  // experts is read: its default (2, or 1 of 1) is kept as 0
             s.model.top_k_asked = int(r.whole("top_k", 0, MAX_EXPERTS));
             if (s.model.top_k_asked == std::min(2, s.model.experts)) s.model.top_k_asked = 0;
         }},
        whole_setting("shared_experts", 8, 0, MAX_SHARED_EXPERTS, &M::shared_experts),
        number_setting("balance", 8, 0, MAX_BALANCE, &M::balance),
        // Version 10: a LoRA run under way (chapter 12) keeps its adapters apart from the base, so that --finish trains
        // on bit for bit: these lines, then the adapters' tensors after the base's. Any other model (a finished LoRA
        // run's is merged: workbench/lora.hpp's save_fine_tuned) is written as before, without them. The scale itself
        // is kept, not alpha: alpha / R worked out again from s R could differ from s in its last bit.
        {"lora_rank", LORA_VERSION, [](const Settings& s) { return std::to_string(s.lora_rank); },
         [](Settings& s, WordReader& r) { s.lora_rank = int(r.whole("lora_rank", 0, MAX_LORA_RANK)); },
         [](const Settings& s) { return s.lora_rank > 0 ? LORA_VERSION : 0; }},
        number_setting("lora_scale", LORA_VERSION, 0, MAX_LORA_ALPHA, &Settings::lora_scale),
        choice_setting("lora_on", LORA_VERSION, LORA_ON_NAMES, &Settings::lora_on),
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
        // Version 9: a model fine-tuned on other data (--load with --task, --seq-len, --min-len; chapter 12) keeps the
        // data it was first trained on, so that both held-out sets stay unseen. Another model is written as before.
        {"trained_task", 9, [](const Settings& s) { return TASK_NAMES[int(s.trained_on.task)]; },
         [](Settings& s, WordReader& r) { s.trained_on.task = Task(r.choice("trained_task", TASK_NAMES)); }},
        {"trained_seq_len", 9, [](const Settings& s) { return std::to_string(s.trained_on.seq_len); },
         [](Settings& s, WordReader& r) { s.trained_on.seq_len = int(r.whole("trained_seq_len", 1, MAX_SEQ_LEN)); }},
        {"trained_min_len", 9, [](const Settings& s) { return std::to_string(s.trained_on.min_len); },
         [](Settings& s, WordReader& r) { s.trained_on.min_len = int(r.whole("trained_min_len", 1, MAX_SEQ_LEN)); }},
    };
    return table;
}
// A table's lines in a file of format `version`: a row of version 3 only in a file of version 3 or later.
inline void write_settings(FILE* f, const std::vector<SettingRow>& table, const Settings& s, int version) {
    for (const SettingRow& row : table)
        if (row.version <= version) std::fprintf(f, "%s %s\n", row.name.c_str(), row.text(s).c_str());
}
// A line the file's version does not have, in its place, says which version brought it.
inline void read_settings(WordReader& r, const std::vector<SettingRow>& table, Settings& s, int version) {
    s.version = version;
    for (const SettingRow& row : table) {
        if (row.version > version) continue;
        const std::string w = r.next();
        r.put_back(w);
        for (const SettingRow& later : table)
            if (w == later.name && later.version > version)
                r.error(fmt("the line '%s' came in version %d, and this file says version %d (a file with it is "
                            "version %d or later: its first line 'sorter-checkpoint %d')", w.c_str(), later.version,
                            version, later.version, later.version));
        row.read(s, r);
    }
}

// The newest version, the newest row's; versions 1 to it are read. A model of the 2017 paper's blocks is written as
// version 5, the same bytes as before today's blocks came; a model that uses one of them, as the version its rows say
// it needs (6 for today's: their lines rms_norm, arch, kv_heads, and rope, alibi or swiglu named).
inline int newest_version() {
    int newest = 0;
    for (const auto* table : {&header_table(), &training_table()})
        for (const SettingRow& row : *table) newest = std::max(newest, row.version);
    return newest;
}
inline int version_for(const Settings& s) {
    int version = 5;
    for (const SettingRow& row : header_table())
        if (row.needs) version = std::max(version, row.needs(s));
    return version;
}
