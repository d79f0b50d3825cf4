// chapters/00_choices_test.cpp -- Owned, the pointer a first-part block holds a later chapter's way by: a copied model
// owns copies of its ways, each of its own kind (a way that forgot its copy() would come back as the paper's), and
// what one copy saves or changes the other does not see.
#include <doctest/doctest.h>

#include <memory>
#include <typeinfo>

#include "../train.hpp"  // the tutorial, and through model.hpp every chapter and its ways

namespace choices_test {
template <typename T> void same_kind_apart(const Owned<T>& a, const Owned<T>& b) {
    REQUIRE(a.get() != nullptr);
    REQUIRE(b.get() != nullptr);
    const T &way_a = *a.get(), &way_b = *b.get();
    CHECK(&way_a != &way_b);                // a copy of its own, not the same way shared
    CHECK(typeid(way_a) == typeid(way_b));  // of the same kind
}
}  // namespace choices_test
using choices_test::same_kind_apart;

TEST_CASE("Owned: a model's copy holds copies of its ways, each of its own kind") {
    ModelConfig c;
    c.positions = Positions::alibi, c.attention = Attention::flash, c.rms_norm = true, c.activation = Activation::swiglu;
    c.tie_embeddings = true;
    Transformer model(c, 5);
    Owned<Product> integers = std::make_unique<IntegerProduct>(nullptr, std::make_unique<TransposedProduct>());
    Adapter& lora = frozen(model.decoder[0].self_attn.W_q);
    Rng rng(6);
    lora = Adapter(c.d_model, c.d_model, 2, 2.0, rng);
    const Transformer copy = model;
    same_kind_apart(model.decoder[0].self_attn.heads, copy.decoder[0].self_attn.heads);  // InTiles
    same_kind_apart(model.decoder[0].cross_attn.heads, copy.decoder[0].cross_attn.heads);
    same_kind_apart(model.decoder[0].self_attn.W_q.product, copy.decoder[0].self_attn.W_q.product);  // Adapted
    same_kind_apart(model.out.product, copy.out.product);                                            // Transposed
    same_kind_apart(model.decoder[0].ffn, copy.decoder[0].ffn);                                       // SwiGLU
    same_kind_apart(model.final_norm, copy.final_norm);                                               // RMSNorm
    const Owned<Product> integers_copy = integers;
    same_kind_apart(integers, integers_copy);
    const HeadAttention &self = *model.decoder[0].self_attn.heads, &cross = *model.decoder[0].cross_attn.heads;
    CHECK(typeid(self) == typeid(InTiles));
    CHECK(!dynamic_cast<const InTiles&>(self).alibi_slopes.empty());  // ALiBi in self-attention
    CHECK(typeid(cross) == typeid(InTiles));
    CHECK(dynamic_cast<const InTiles&>(cross).alibi_slopes.empty());  // tiles, and no positions across
    // The adapter is the copy's own: a change to one is not the other's.
    lora.B.value.at(0, 0) = 1.5;
    CHECK(adapter_of(copy.decoder[0].self_attn.W_q)->B.value.at(0, 0) == 0.0);
}

// Decoder-only's way of reading a batch (chapter 06) and shared K and V heads alone (chapter 04); the paper's model
// holds no Architecture.
TEST_CASE("Owned: a decoder-only model's copy holds an Architecture of its own; shared K and V heads stay shared") {
    ModelConfig c;
    c.arch = Arch::decoder_only, c.enc_layers = 0, c.max_len = 10, c.n_heads = 4, c.kv_heads_asked = 2;
    Transformer model(c, 5);
    const Transformer copy = model;
    same_kind_apart(model.architecture, copy.architecture);
    const Architecture& architecture = *copy.architecture;
    CHECK(typeid(architecture) == typeid(DecoderOnly));
    same_kind_apart(model.decoder[0].self_attn.heads, copy.decoder[0].self_attn.heads);
    const HeadAttention& heads = *copy.decoder[0].self_attn.heads;
    CHECK(typeid(heads) == typeid(SharedKeys));
    CHECK(heads.key_head(3) == 1);  // query heads 2 and 3 read K and V head 1
    CHECK(!Transformer(ModelConfig(), 5).architecture);
}
