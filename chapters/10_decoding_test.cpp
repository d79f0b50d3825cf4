// chapters/10_decoding_test.cpp -- decoding with the cache gives the tokens of train.hpp's greedy decoding, which runs
// the whole input again at every step (each position's logits against one teacher-forced pass: tests.cpp).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "10_decoding.hpp"

// In both architectures, with every kind of position and with one K and V head shared by all (GQA): weights jittered
// off their start, so that the outputs differ from source to source and end at different places.
TEST_CASE("decoding: greedy_decode_cached gives greedy_decode's tokens") {
    DataConfig d;
    d.seq_len = 4, d.min_len = 2, d.max_digit = 5;
    int outputs = 0, ended_early = 0;
    for (Arch arch : {Arch::encoder_decoder, Arch::decoder_only})
        for (Positions positions : {Positions::sinusoidal, Positions::learned, Positions::random, Positions::rope,
                                    Positions::alibi})
            for (int kv_heads : {2, 1}) {
                ModelConfig c;
                c.arch = arch, c.enc_layers = arch == Arch::decoder_only ? 0 : 1, c.dec_layers = 2;
                c.positions = positions, c.kv_heads_asked = kv_heads;
                c.vocab = vocab_size(d), c.max_len = positions_read(c, d.seq_len);  // decoder-only: S + T
                if (positions == Positions::random) c.max_len += 3;  // rows to draw from
                Transformer model(c, 5);
                Rng rng(6);
                for (auto& [name, p] : model.parameters())
                    for (double& v : p->value.data) v += rng.uniform(-0.5, 0.5);
                const Dataset data(d, {}, 40, 7);
                const Inputs in = inputs_of(data.held_out, 0, data.held_out.size());
                const std::vector<std::vector<int>> plain = greedy_decode(model, in.sources, d.seq_len);
                INFO(ARCH_NAMES[int(arch)] << ", " << POSITION_NAMES[int(positions)] << ", kv heads " << kv_heads);
                CHECK(greedy_decode_cached(model, in.sources, d.seq_len) == plain);
                for (const std::vector<int>& out : plain) outputs++, ended_early += out.back() == PAD;
            }
    CHECK(outputs == 2 * 5 * 2 * 40);
    CHECK(ended_early > 0);  // some outputs stop before seq_len: the PAD rule is exercised
    CHECK(ended_early < outputs);
}
