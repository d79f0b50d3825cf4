// chapters/00_choices.hpp -- how the later chapters plug into the first part: the questions asked of a choice.
//
// Each chapter adds a value to one of ModelConfig's choices (model.hpp): rotary or ALiBi positions, decoder-only,
// attention in tiles. The first part never tests a value; it asks a question, answered here once by a switch that
// names every value, so the compiler asks each question of a new value (-Wswitch). The blocks ask them where they
// are built; the program (workbench/) asks them too, and those only it asks are in workbench/settings.hpp: nothing
// else tests a choice.
#pragma once

#include "../model.hpp"  // ModelConfig (this file is read where model.hpp includes it)

// Whether the model has an encoder, whose output (the memory) each decoder block reads by cross-attention. Without
// one (decoder-only), the decoder reads the source itself: source, START and answer as one sequence.
inline bool has_encoder(Arch arch) {
    switch (arch) {
    case Arch::encoder_decoder: return true;
    case Arch::decoder_only: return false;
    }
    return true;  // not reached
}
// The positions one input of `length` tokens reads: a decoder-only model reads its source, START and the answer
// as one sequence, twice as long (every task's answer is as long as its input).
inline int positions_read(const ModelConfig& c, int length) {
    switch (c.arch) {
    case Arch::encoder_decoder: return length;
    case Arch::decoder_only: return 2 * length;
    }
    return length;  // not reached
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
inline bool draws_position_rows(Positions positions) {
    switch (positions) {
    case Positions::random: return true;
    case Positions::sinusoidal: case Positions::learned: case Positions::none: case Positions::rope:
    case Positions::alibi: return false;
    }
    return false;  // not reached
}
