// chapters/07_llama_layer_test.cpp -- the Llama layer in one place (06_llama_layer.hpp) against the model's own
// DecoderBlock, built by --llama's recipe: the same outputs, input gradient and parameter gradients, bit for bit.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../train.hpp"  // the tutorial, and through model.hpp the chapter under test

// How many entries of a and b differ (compared with ==); a shape that differs counts every entry.
static int entries_differing(const Matrix& a, const Matrix& b) {
    if (a.rows != b.rows || a.cols != b.cols) return int(a.data.size() + b.data.size()) + 1;
    int differing = 0;
    for (std::size_t i = 0; i < a.data.size(); i++) differing += a.data[i] == b.data[i] ? 0 : 1;
    return differing;
}

// One decoder-only block of a --llama model (RMSNorm, SwiGLU, rotary positions, kv_heads = n_heads / 2, no biases),
// every weight and every gradient drawn at random (gammas too, so the norms' scale counts; gradients too, so a
// backward that assigns where it should add fails). Two copies: the model's way (chapter 06's decoder_only_forward and
// decoder_only_backward) runs on one, llama_layer_forward and llama_layer_backward on the other. n_seq sequences of
// L = S + T rows, each source with PADs where it has them, masked by the model's own rule, Mask(true, sources).
TEST_CASE("llama layer: the layer in one place is the model's DecoderBlock, bit for bit") {
    struct Case { int n_heads, n_seq; std::vector<std::vector<int>> sources; int T; };
    const std::vector<Case> cases = {
        {4, 2, {{3, 1, PAD, PAD}, {5, 2, 7, PAD}}, 3},             // kv_heads 2: two query heads a key/value head
        {2, 3, {{9, 8, 7, 6, 5}, {4, PAD, PAD, PAD, PAD}, {2, 6, 1, PAD, PAD}}, 5},  // kv_heads 1: multi-query
    };
    for (const Case& k : cases) {
        ModelConfig c;
        c.d_model = 16, c.n_heads = k.n_heads, c.d_ff = 40, c.enc_layers = 0, c.dec_layers = 1;
        c.arch = Arch::decoder_only, c.rms_norm = true, c.activation = Activation::swiglu;
        c.positions = Positions::rope, c.no_bias = true, c.embed_scale = false;
        c.kv_heads_asked = c.n_heads / 2;
        c.max_len = int(k.sources[0].size()) + k.T;
        Transformer model(c, 7);
        DecoderBlock model_block = model.decoder[0];
        Rng rng(11);
        ParamList listed;
        decoder_only_parameters(model_block, "decoder.0", listed);
        for (auto& [name, param] : listed) {
            for (double& v : param->value.data) v = rng.uniform(-1.0, 1.0);
            for (double& v : param->grad.data) v = rng.uniform(-1.0, 1.0);
        }
        DecoderBlock layer_block = model_block;  // the same weights and gradients
        std::vector<Matrix> drawn;               // the gradients as drawn, before either backward
        for (auto& [name, param] : listed) drawn.push_back(param->grad);
        const int L = int(k.sources[0].size()) + k.T, rows = k.n_seq * L;
        Matrix x(rows, c.d_model), G(rows, c.d_model);  // the input, and the upstream gradient dL/d(out)
        for (double& v : x.data) v = rng.uniform(-2.0, 2.0);
        for (double& v : G.data) v = rng.uniform(-1.0, 1.0);
        const Mask mask(true, k.sources);  // DecoderOnly's: causal, and no PAD of the sequence's source
        CAPTURE(k.n_heads);
        CAPTURE(k.n_seq);

        // forward: the decoder-only block (chapter 06: Sublayer, MultiHeadAttention, RMSNorm, SwiGLU) and the layer
        const Matrix model_out = decoder_only_forward(model_block, x, mask, k.n_seq);
        LlamaLayerSaved saved;
        const Matrix layer_out = llama_layer_forward(layer_block, x, mask, k.n_seq, saved);
        CHECK(entries_differing(model_out, layer_out) == 0);
        // the masks hid something: some weights are exactly 0 (a PAD key, a key after its query)
        int hidden = 0;
        for (const Matrix& P : saved.P) for (double p : P.data) hidden += p == 0.0 ? 1 : 0;
        CHECK(hidden > 0);

        // backward: the input's gradient, then every parameter's, by name
        const Matrix model_dx = decoder_only_backward(model_block, G);
        const Matrix layer_dx = llama_layer_backward(layer_block, G, saved);
        CHECK(entries_differing(model_dx, layer_dx) == 0);
        ParamList model_params, layer_params;
        decoder_only_parameters(model_block, "decoder.0", model_params);
        decoder_only_parameters(layer_block, "decoder.0", layer_params);
        REQUIRE(model_params.size() == 9);  // norm1.gamma, W_q W_k W_v W_o, norm2.gamma, W_1 W_2 W_3: no bias
        for (std::size_t i = 0; i < model_params.size(); i++) {
            CAPTURE(model_params[i].first);
            CHECK(model_params[i].first == layer_params[i].first);
            CHECK(entries_differing(model_params[i].second->grad, layer_params[i].second->grad) == 0);
            CHECK(entries_differing(model_params[i].second->grad, drawn[i]) > 0);  // and backward added into it
        }
    }
}
