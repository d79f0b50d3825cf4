// chapters/00_choices.hpp -- the choices a model is built with, and how the later chapters plug into the first part.
//
// Each choice is an enum with its names beside it. The paper's values come first (pre- or post-norm; sinusoidal,
// learned or no positions; ReLU); each later chapter adds values: random, rotary and ALiBi positions (05), GELU and
// SwiGLU (04), decoder-only (06), attention in tiles (08). The first part never tests a value: it asks a question,
// answered here once by a switch that names every value, so the compiler asks each question of a new value
// (-Wswitch). The program (workbench/) asks them too; those only it asks are in workbench/settings.hpp.
#pragma once

#include <string>
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
// Whether each input's position rows are drawn at random from a longer table (random), not 0, 1, 2, ...
inline bool draws_position_ids(Positions positions) {
    switch (positions) {
    case Positions::random: return true;
    case Positions::sinusoidal: case Positions::learned: case Positions::none: case Positions::rope:
    case Positions::alibi: return false;
    }
    return false;  // not reached
}
