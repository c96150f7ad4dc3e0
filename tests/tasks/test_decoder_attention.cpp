// SPDX-License-Identifier: Apache-2.0
// The decoder's attention maps of a pronunciation model: its causal
// self-attention over the phonemes read and its cross-attention over the
// letters, row by row as it decodes.
#include <gtest/gtest.h>

#include <numeric>

#include "multihead/tasks/pronunciation.h"
#include "small_encoder_decoder.h"

namespace multihead {
namespace {

struct Fixture {
  PronunciationVocab vocab{{"A", "B", "C", "D"}, {"AE", "B", "K", "D", "IY"}};
  ParamStore store;
  std::unique_ptr<EncoderDecoder> model;

  explicit Fixture(PositionKind positions) {
    EncoderDecoderConfig c = test::small_encoder_decoder(2 + 4, 3 + 5, positions);  // the vocabulary's sizes
    c.model.relative_clip = 3;
    model = std::make_unique<EncoderDecoder>(store, c);
    store.finalize();
    Rng rng(11);
    model->init(rng);
  }

  DecoderAttentionMaps maps(const std::vector<std::string>& phonemes) {
    return decoder_attention_maps(*model, vocab, vocab.encode_word("CABD"), {"C", "A", "B", "D"},
                                  vocab.encode_phonemes(phonemes), Precision::kF32);
  }
};

class DecoderAttention : public ::testing::TestWithParam<PositionKind> {};

TEST_P(DecoderAttention, SelfAttentionIsCausalAndRowsAreDistributions) {
  Fixture f(GetParam());
  const DecoderAttentionMaps m = f.maps({"K", "AE", "B", "D"});
  const std::vector<std::string> rows = {"<s>", "K", "AE", "B", "D"};
  EXPECT_EQ(m.self.name, "decoder self-attention");
  EXPECT_EQ(m.cross.name, "cross-attention");
  EXPECT_EQ(m.self.tokens, rows);
  EXPECT_EQ(m.self.keys, rows);
  EXPECT_EQ(m.cross.tokens, rows);
  EXPECT_EQ(m.cross.keys, (std::vector<std::string>{"C", "A", "B", "D"}));
  EXPECT_TRUE(m.self.causal);
  EXPECT_FALSE(m.cross.causal);
  ASSERT_EQ(m.self.layers, 2);
  ASSERT_EQ(m.self.heads, 2);
  ASSERT_EQ(m.self.T, 5);
  ASSERT_EQ(m.self.S, 5);
  ASSERT_EQ(m.self.weights.size(), 2u * 2 * 5 * 5);
  ASSERT_EQ(m.cross.S, 4);
  bool spread = false;  // some row past the first puts weight on an earlier position
  for (std::int64_t l = 0; l < 2; ++l)
    for (std::int64_t h = 0; h < 2; ++h) {
      const float* s = m.self.map(l, h);
      const float* c = m.cross.map(l, h);
      for (std::int64_t t = 0; t < 5; ++t) {
        double visible = 0;
        for (std::int64_t k = 0; k < 5; ++k) {
          const float w = s[t * 5 + k];
          if (k > t) {
            EXPECT_EQ(w, 0.0f) << "layer " << l << " head " << h << " row " << t << " key " << k;
          } else {
            EXPECT_GE(w, 0.0f);
            visible += w;
            if (k < t && w > 1e-3f) spread = true;
          }
        }
        EXPECT_NEAR(visible, 1.0, 1e-5) << "layer " << l << " head " << h << " row " << t;
        EXPECT_NEAR(std::accumulate(c + t * 4, c + t * 4 + 4, 0.0), 1.0, 1e-5);
      }
    }
  EXPECT_TRUE(spread);
}

// A row depends only on the phonemes up to it: the maps of a prefix are the
// first rows of the whole word's.
TEST_P(DecoderAttention, APrefixGivesTheFirstRows) {
  Fixture f(GetParam());
  const DecoderAttentionMaps whole = f.maps({"K", "AE", "B", "D"});
  const DecoderAttentionMaps prefix = f.maps({"K", "AE"});
  ASSERT_EQ(prefix.self.T, 3);
  for (std::int64_t l = 0; l < 2; ++l)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t t = 0; t < 3; ++t) {
        for (std::int64_t k = 0; k < 3; ++k)
          EXPECT_NEAR(prefix.self.map(l, h)[t * 3 + k], whole.self.map(l, h)[t * 5 + k], 1e-6)
              << "layer " << l << " head " << h << " row " << t << " key " << k;
        for (std::int64_t k = 0; k < 4; ++k)
          EXPECT_NEAR(prefix.cross.map(l, h)[t * 4 + k], whole.cross.map(l, h)[t * 4 + k], 1e-6);
      }
}

INSTANTIATE_TEST_SUITE_P(Kinds, DecoderAttention,
                         ::testing::Values(PositionKind::kSinusoidal, PositionKind::kRope, PositionKind::kAlibi,
                                           PositionKind::kRelative),
                         [](const auto& p) { return std::string(position_kind_name(p.param)); });

}  // namespace
}  // namespace multihead
