// workbench/settings.hpp -- what the program asks of a run's settings that the tutorial itself never asks: where the
// norm goes (for --trace-shapes' legend), how a schedule reads the run's plan and --warmup (the lines a run prints),
// which values of a choice are today's blocks (the checkpoint's version), the shapes a training step's memory is
// counted from (workbench/memory.hpp), the model's vocab and max_len from the data (fit_to_data), and the one check
// of the settings taken together, which the flags, the checkpoint reader and the page call. Each question is a switch
// that names every value, so a new value of an enum is asked it by the compiler; the questions the blocks ask too live
// in chapters/00_choices.hpp, beside the enums. Last, the model's sizes as the lines a run prints say them
// (layers_text, size_text). Tests: settings_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "../train.hpp"  // and model.hpp: the choices of the run and of the model
#include "text.hpp"      // fmt

// Whether a sublayer reads LN(x) (pre-norm) or x itself, its sum then normalised (post-norm).
inline bool norm_before_sublayer(NormPlace place) {
    switch (place) {
    case NormPlace::pre: return true;
    case NormPlace::post: return false;
    }
    return true;  // not reached
}
// Whether a step's rate depends on how long the run is planned to be (linear: it falls to 0 at the last step), so a
// resumed run that plans more steps trains at other rates than the saved run would have.
inline bool rate_follows_the_plan(Schedule schedule) {
    switch (schedule) {
    case Schedule::linear: return true;
    case Schedule::constant: case Schedule::warmup: return false;
    }
    return false;  // not reached
}
// Whether the schedule reads --warmup (the steps of its rise).
inline bool reads_warmup(Schedule schedule) {
    switch (schedule) {
    case Schedule::warmup: return true;
    case Schedule::constant: case Schedule::linear: return false;
    }
    return false;  // not reached
}
// Whether a choice is one of today's blocks (model.hpp's opening names them), which the 2017 paper's model and the
// exercises' variants do not have: a checkpoint names them from version 6 on.
inline bool is_todays(NormPlace place) {
    switch (place) {
    case NormPlace::pre: case NormPlace::post: return false;
    }
    return false;  // not reached
}
inline bool is_todays(Positions positions) {
    switch (positions) {
    case Positions::sinusoidal: case Positions::learned: case Positions::none: case Positions::random: return false;
    case Positions::rope: case Positions::alibi: return true;
    }
    return false;  // not reached
}
inline bool is_todays(Activation activation) {
    switch (activation) {
    case Activation::relu: case Activation::gelu: return false;
    case Activation::swiglu: return true;
    }
    return false;  // not reached
}
inline bool is_todays(Arch arch) {
    switch (arch) {
    case Arch::encoder_decoder: return false;
    case Arch::decoder_only: return true;
    }
    return false;  // not reached
}
// Whether the model learns a table of positions of its own (learned), which is a parameter.
inline bool learns_positions(Positions positions) {
    switch (positions) {
    case Positions::learned: return true;
    case Positions::sinusoidal: case Positions::none: case Positions::random: case Positions::rope:
    case Positions::alibi: return false;
    }
    return false;  // not reached
}
// The feed-forward's matrices of a product (ReLU's and GELU's W_1 and W_2; SwiGLU's W_1, W_2 and W_3) and their hidden
// width (d_ff; SwiGLU's 2 d_ff / 3): its parameters, and what it keeps for its backward (workbench/memory.hpp). Read
// off one of the model's own kind, built 1 wide (feed_forward_of), so a new kind needs no line here.
struct FeedForwardShape { int matrices, width; };
inline FeedForwardShape feed_forward_shape(const ModelConfig& c) {
    ModelConfig one = c;
    one.d_model = 1, one.experts = 0;  // one feed-forward: W_1 (1, width), W_2 (width, 1), ...
    Rng unused(1);
    const Owned<Layer> ffn = feed_forward_of(one, unused);  // kept while its parameters are read
    ParamList params;
    ffn->list_parameters("ffn", params);
    FeedForwardShape shape{0, 0};
    for (auto& [name, p] : params)
        if (name.rfind("ffn.W_", 0) == 0) shape.matrices++, shape.width = int(p->value.data.size());
    return shape;
}

// The model's vocab and max_len follow from the data: the digits' tokens, and the positions one input reads (a
// decoder-only model's source and answer are one sequence, chapter 06). The program may make max_len longer (options).
inline ModelConfig fit_to_data(ModelConfig m, const DataConfig& d) {
    m.vocab = vocab_size(d);
    m.max_len = positions_read(m, d.seq_len);
    return m;
}

// The one check of a model's settings taken together, for the flags, the checkpoint reader and the page (each
// range alone is checked where the value is read). `settings` names the settings that disagree, as ModelConfig and
// a checkpoint's header spell them; each caller says them in its own words (the flags, or the header's lines).
struct SettingsProblem {
    std::vector<std::string> settings;  // empty: no problem
    std::string why;                    // what is wrong and how to fix it, after the settings are named
};
inline SettingsProblem settings_problem(const ModelConfig& c) {
    const int d_k = c.n_heads > 0 ? c.d_model / c.n_heads : 0;
    if (c.n_heads <= 0 || c.d_model % c.n_heads != 0)  // every head takes d_k = d_model / n_heads columns
        return {{"n_heads", "d_model"}, "d_model must be a multiple of the number of heads"};
    if (c.n_heads % c.key_value_heads() != 0)
        return {{"kv_heads", "n_heads"}, "each key-value head serves the same number of query heads, so it must "
                                         "divide the heads"};
    if (turns_queries_and_keys(c.positions) && d_k % 2 != 0)
        return {{"positions", "d_model", "n_heads"},
                "rotary positions turn each head's columns in pairs, and d_k = d_model / n_heads = " +
                    std::to_string(c.d_model) + " / " + std::to_string(c.n_heads) + " = " + std::to_string(d_k) +
                    " is odd; choose an even d_k"};
    if ((c.enc_layers > 0) != has_encoder(c.arch))
        return {{"enc_layers", "arch"}, "a decoder-only model has none, an encoder-decoder at least 1"};
    if (c.experts > 0 && c.top_k() > c.experts)
        return {{"top_k", "experts"}, "a token keeps K of the E experts, so K must be at most E"};
    return {};
}

// The model's sizes as the lines a run prints say them (the header, --speed, --trace-shapes, a loaded model's line).
inline std::string layers_text(const ModelConfig& m) {  // "1+1" (encoder + decoder), or "2, decoder-only"
    return has_encoder(m.arch) ? fmt("%d+%d", m.enc_layers, m.dec_layers)
                               : fmt("%d, %s", m.dec_layers, ARCH_NAMES[int(m.arch)].c_str());
}
inline std::string size_text(const ModelConfig& m, const DataConfig& d) {  // the sizes, for a header line
    return fmt("d_model %d, heads %d, d_ff %d, layers %s, seq_len %d", m.d_model, m.n_heads, m.d_ff,
               layers_text(m).c_str(), d.seq_len);
}
