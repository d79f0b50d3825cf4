// chapters/00_choices.hpp -- the choices a model is built with, and how the later chapters plug into the first part.
//
// Each choice is an enum with its names beside it. The paper's values come first (pre- or post-norm; sinusoidal,
// learned or no positions; ReLU); each later chapter adds values: random, rotary and ALiBi positions (05), GELU and
// SwiGLU (04), decoder-only (06), attention in tiles (08). The first part never tests a value with == or !=: it
// switches over every value, or asks a question answered here once by such a switch, so the compiler asks each
// question of a new value (-Wswitch). The program (workbench/) asks them too; those only it asks are in
// workbench/settings.hpp. Then Owned, the pointer a first-part block holds a later chapter's way by; last, the later
// chapters' own choices, each chapter's in a struct of its own, which ModelConfig (model.hpp) inherits.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

// The choices, each with its names as the flags and the checkpoint file spell them, in the enum's order.
enum class NormPlace { pre, post };  // where a sublayer's norm goes
enum class Positions { sinusoidal, learned, none, random, rope, alibi };  // how a token's place is known: a table
                                                                          // the embeddings add, none, or in attention
enum class Activation { relu, gelu, swiglu };
enum class Arch { encoder_decoder, decoder_only };
enum class Attention { plain, flash };  // how training computes attention: the weights whole, or in tiles
const std::vector<std::string> NORM_PLACE_NAMES = {"pre", "post"};
const std::vector<std::string> POSITION_NAMES = {"sinusoidal", "learned", "none", "random", "rope", "alibi"};
const std::vector<std::string> ACTIVATION_NAMES = {"relu", "gelu", "swiglu"};
const std::vector<std::string> ARCH_NAMES = {"encoder-decoder", "decoder-only"};
const std::vector<std::string> ATTENTION_NAMES = {"plain", "flash"};

// Whether the model has an encoder, whose output (the memory) each decoder block reads by cross-attention. Without
// one (decoder-only), the decoder reads the source itself: source, START and answer as one sequence.
inline bool has_encoder(Arch arch) {
    switch (arch) {
    case Arch::encoder_decoder: return true;
    case Arch::decoder_only: return false;
    }
    return true;  // not reached
}
// Whether self-attention turns each head's queries and keys by position, in pairs of columns (rotary).
inline bool turns_queries_and_keys(Positions positions) {
    switch (positions) {
    case Positions::rope: return true;
    case Positions::sinusoidal: case Positions::learned: case Positions::none: case Positions::random:
    case Positions::alibi: return false;
    }
    return false;  // not reached
}
// Whether self-attention lowers each score by the distance between query and key (ALiBi).
inline bool lowers_scores_by_distance(Positions positions) {
    switch (positions) {
    case Positions::alibi: return true;
    case Positions::sinusoidal: case Positions::learned: case Positions::none: case Positions::random:
    case Positions::rope: return false;
    }
    return false;  // not reached
}
// Whether training computes attention tile by tile (flash), never holding a (T, S) matrix; outside training, and
// for the maps, attention is plain.
inline bool attends_in_tiles(Attention attention) {
    switch (attention) {
    case Attention::flash: return true;
    case Attention::plain: return false;
    }
    return false;  // not reached
}
// Which position table the embeddings add: the fixed (sinusoidal) one, a learned one, or none (no positions, or
// positions in attention). Random positions read rows of the fixed table.
enum class PositionTable { fixed, learned, none };
inline PositionTable position_table_of(Positions positions) {
    switch (positions) {
    case Positions::sinusoidal: case Positions::random: return PositionTable::fixed;
    case Positions::learned: return PositionTable::learned;
    case Positions::none: case Positions::rope: case Positions::alibi: return PositionTable::none;
    }
    return PositionTable::none;  // not reached
}
// Whether each input's position rows are drawn at random from a longer table (random), not 0, 1, 2, ...
inline bool draws_position_ids(Positions positions) {
    switch (positions) {
    case Positions::random: return true;
    case Positions::sinusoidal: case Positions::learned: case Positions::none: case Positions::rope:
    case Positions::alibi: return false;
    }
    return false;  // not reached
}

// How a block of the first part takes a later chapter's way of working (how heads attend, how a Linear multiplies, a
// layer's kind, how the whole model reads a batch):
// it holds the paper's way through this pointer, which copies what it points to when it is copied (each copy of a
// model owns its ways), and a chapter's way derives from the paper's and takes its place when the model is built,
// loaded, quantized or fine-tuned.
template <typename T>
struct Owned {
    std::unique_ptr<T> p = paper();  // (an abstract T has none: a Layer is given one; the paper has no Architecture)
    static std::unique_ptr<T> paper() {
        if constexpr (std::is_abstract_v<T>) return nullptr;
        else return std::make_unique<T>();
    }
    Owned() = default;
    template <typename U> Owned(std::unique_ptr<U> q) : p(std::move(q)) {}  // U: T, or a way derived from it
    Owned(const Owned& o) : p(o.p ? o.p->copy() : nullptr) {}
    Owned(Owned&&) = default;
    Owned& operator=(const Owned& o) { p = o.p ? o.p->copy() : nullptr; return *this; }
    Owned& operator=(Owned&&) = default;
    T* operator->() const { return p.get(); }
    T& operator*() const { return *p; }
    T* get() const { return p.get(); }
    explicit operator bool() const { return p != nullptr; }  // (false: no way, where the paper has none)
};

// ---------------------------------------------------------------------------------------------
// The later chapters' choices, each off (the paper's model) by default. ModelConfig derives from LaterChoices, so a
// choice reads c.rms_norm wherever it is asked. (Config is ModelConfig, whose n_heads the key-value heads divide.)
template <class Config>
struct TodaysBlocksChoices {  // chapter 04
    bool rms_norm = false;   // RMSNorm in place of every LayerNorm
    bool no_bias = false;    // no bias in the feed-forward and the output projection (Llama's; attention has none)
    int kv_heads_asked = 0;  // --kv-heads: key-value heads dividing n_heads (grouped-query attention); 0: n_heads
    int key_value_heads() const {  // how many there are
        return kv_heads_asked > 0 ? kv_heads_asked : static_cast<const Config&>(*this).n_heads;
    }
};
// The width of W_k and W_v, K and V: d_model, as the paper's; with grouped-query attention key_value_heads() d_k.
template <class Config> int key_value_width(const Config& c) { return c.key_value_heads() * (c.d_model / c.n_heads); }
struct DecoderOnlyChoices {  // chapter 06
    Arch arch = Arch::encoder_decoder;  // decoder-only: one causal stack of dec_layers blocks, no encoder
};
struct TilesChoices {  // chapter 08
    Attention attention = Attention::plain;  // flash: training's attention in tiles, the same numbers
};
struct EightBitsChoices {  // chapter 09
    int bits = 0;  // inference only: a quantized model's weight width; 0: float64
};
struct ExpertsChoices {  // chapter 11
    int experts = 0;         // --experts E: each feed-forward becomes E experts and a router; 0: one
    int top_k_asked = 0;     // --top-k K: experts kept a token; 0: min(2, E)
    int top_k() const { return top_k_asked > 0 ? top_k_asked : std::min(2, experts); }
    int shared_experts = 0;  // --shared-experts N: experts every token goes through, besides its K
    double balance = 0.01;   // --balance A: the experts' balance loss weight (Switch's alpha; 0: none)
};
template <class Config>
struct LaterChoices
    : TodaysBlocksChoices<Config>, DecoderOnlyChoices, TilesChoices, EightBitsChoices, ExpertsChoices {};
