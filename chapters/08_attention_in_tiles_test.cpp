// chapters/08_attention_in_tiles_test.cpp -- what attention in tiles asks of the mask, tile by tile (the chapter's
// numbers against plain attention, and its gradients, are checked in tests.cpp, beside the first part's).
#include <doctest/doctest.h>

#include <vector>

#include "../model.hpp"  // the first part, and through it the chapter under test

// The rule asked tile by tile: a tile wholly after its queries (causal) or wholly of PAD keys is skipped, and is
// never skipped when a row of its queries sees nothing (that row's equal weights need every key).
TEST_CASE("attention in tiles: which tiles a mask hides") {
    Mask causal(true, {});
    CHECK(tile_sight(causal, 0, 200, 0, 32, 64, 128) == TileSight::none);  // keys 64.. after queries ..31
    CHECK(tile_sight(causal, 0, 200, 64, 96, 0, 64) == TileSight::all);    // keys ..63 before queries 64..
    CHECK(tile_sight(causal, 0, 200, 32, 64, 0, 64) == TileSight::some);   // the diagonal
    std::vector<int> source(70, 3);
    for (int j = 64; j < 70; j++) source[j] = PAD;
    Mask pads(false, {source});
    CHECK(tile_sight(pads, 0, 5, 0, 5, 64, 70) == TileSight::none);
    CHECK(tile_sight(pads, 0, 5, 0, 5, 0, 64) == TileSight::all);
    CHECK(rows_seeing_nothing(pads, 0, 5, 70, 0, 5) == std::vector<char>(5, 0));
    Matrix written(2, 3, 1.0);
    written.at(1, 0) = written.at(1, 1) = written.at(1, 2) = 0.0;
    CHECK(rows_seeing_nothing(Mask(written), 0, 2, 3, 0, 2) == std::vector<char>{0, 1});
}
