// SPDX-License-Identifier: Apache-2.0
// Greedy and beam search over an EncoderDecoder: width 1 is greedy, cached
// decoding equals decoding by whole forward passes, and a wide enough beam
// finds the exhaustive search's best output.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "multihead/tasks/beam_search.h"
#include "small_encoder_decoder.h"

namespace multihead {
namespace {

constexpr std::int64_t kVocab = 6;

struct Fixture {
  ParamStore store;
  std::unique_ptr<EncoderDecoder> model;
  Tensor source = Tensor::from_i64({3, 4}, std::vector<std::int64_t>{1, 2, 3, 4, 4, 3, 0, 0, 2, 2, 1, 0});
  Tensor padding = Tensor::from_bool({3, 4}, std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1});

  explicit Fixture(PositionKind positions = PositionKind::kSinusoidal, std::uint64_t seed = 7) {
    model = std::make_unique<EncoderDecoder>(store, test::small_encoder_decoder(5, kVocab, positions));
    store.finalize();
    Rng rng(seed);
    model->init(rng);
  }

  // log p(next | source row b, prefix) for every token, by a whole forward pass.
  std::vector<double> next_log_probs(std::int64_t b, const std::vector<std::int64_t>& prefix) {
    const std::int64_t S = source.dim(1), T = static_cast<std::int64_t>(prefix.size());
    Tensor src = Tensor::from_i64({1, S}, std::span(source.data<std::int64_t>() + b * S, static_cast<std::size_t>(S)));
    Tensor pad =
        Tensor::from_bool({1, S}, std::span(padding.data<std::uint8_t>() + b * S, static_cast<std::size_t>(S)));
    Tensor tgt = Tensor::from_i64({1, T}, prefix);
    const Tensor logits = model->forward(src, &pad, tgt, eval_context(Precision::kF32));
    model->release_saved();
    const float* z = logits.f32() + (T - 1) * kVocab;
    double m = z[0], sum = 0;
    for (std::int64_t v = 1; v < kVocab; ++v) m = std::max(m, double(z[v]));
    for (std::int64_t v = 0; v < kVocab; ++v) sum += std::exp(double(z[v]) - m);
    std::vector<double> lp(kVocab);
    for (std::int64_t v = 0; v < kVocab; ++v) lp[static_cast<std::size_t>(v)] = double(z[v]) - m - std::log(sum);
    return lp;
  }
};

DecodeOptions options(std::int64_t beam, std::int64_t max_len = 8) {
  DecodeOptions o;
  o.beam = beam;
  o.max_len = max_len;
  o.start_token = 0;
  o.end_token = 1;
  return o;
}

TEST(BeamSearch, WidthOneIsGreedy) {
  for (const PositionKind p : {PositionKind::kSinusoidal, PositionKind::kRope, PositionKind::kRelative}) {
    Fixture f(p);
    const auto greedy = greedy_decode(*f.model, f.source, &f.padding, options(1));
    const auto beam = beam_search(*f.model, f.source, &f.padding, options(1));
    ASSERT_EQ(beam.size(), 3u);
    for (std::size_t b = 0; b < 3; ++b) {
      ASSERT_EQ(beam[b].size(), 1u);
      EXPECT_EQ(beam[b][0].tokens, greedy[b].tokens) << b;
      EXPECT_EQ(beam[b][0].ended, greedy[b].ended) << b;
      EXPECT_NEAR(beam[b][0].log_prob, greedy[b].log_prob, 1e-9) << b;
      EXPECT_NEAR(beam[b][0].score, greedy[b].score, 1e-9) << b;
    }
  }
}

// Greedy decoding with the caches picks what whole forward passes over each
// prefix pick, with the same log-probabilities.
TEST(BeamSearch, CachedGreedyEqualsUncachedGreedy) {
  Fixture f(PositionKind::kRope);
  const auto greedy = greedy_decode(*f.model, f.source, &f.padding, options(1, 6));
  for (std::int64_t b = 0; b < 3; ++b) {
    std::vector<std::int64_t> prefix = {0};
    double log_prob = 0;
    bool ended = false;
    for (int t = 0; t < 6 && !ended; ++t) {
      const auto lp = f.next_log_probs(b, prefix);
      const std::int64_t tok = std::max_element(lp.begin(), lp.end()) - lp.begin();
      log_prob += lp[static_cast<std::size_t>(tok)];
      ended = tok == 1;
      if (!ended) prefix.push_back(tok);
    }
    EXPECT_EQ(std::vector<std::int64_t>(prefix.begin() + 1, prefix.end()), greedy[static_cast<std::size_t>(b)].tokens);
    EXPECT_EQ(ended, greedy[static_cast<std::size_t>(b)].ended);
    EXPECT_NEAR(log_prob, greedy[static_cast<std::size_t>(b)].log_prob, 1e-4);
  }
}

// With every prefix kept (beam >= V^(max_len - 1)) and no length penalty,
// the best hypothesis is the most probable output of an exhaustive search:
// an ended one (tokens, then the end token) or one cut at max_len.
TEST(BeamSearch, WideBeamFindsTheExhaustiveBest) {
  Fixture f(PositionKind::kSinusoidal, 11);
  const std::int64_t max_len = 3;
  DecodeOptions o = options(kVocab * kVocab, max_len);
  o.length_penalty = 0;
  o.n_best = 4;
  const auto beam = beam_search(*f.model, f.source, &f.padding, o);
  for (std::int64_t b = 0; b < 3; ++b) {
    double best = -1e300;
    std::vector<std::int64_t> best_tokens;
    std::function<void(std::vector<std::int64_t>&, double)> walk = [&](std::vector<std::int64_t>& prefix,
                                                                       double lp_so_far) {
      const std::size_t produced = prefix.size() - 1;
      if (static_cast<std::int64_t>(produced) == max_len) {  // cut
        if (lp_so_far > best) best = lp_so_far, best_tokens.assign(prefix.begin() + 1, prefix.end());
        return;
      }
      const auto lp = f.next_log_probs(b, prefix);
      if (lp_so_far + lp[1] > best) best = lp_so_far + lp[1], best_tokens.assign(prefix.begin() + 1, prefix.end());
      for (std::int64_t v = 0; v < kVocab; ++v) {
        if (v == 1) continue;
        prefix.push_back(v);
        walk(prefix, lp_so_far + lp[static_cast<std::size_t>(v)]);
        prefix.pop_back();
      }
    };
    std::vector<std::int64_t> start = {0};
    walk(start, 0.0);
    const auto& hyps = beam[static_cast<std::size_t>(b)];
    ASSERT_EQ(hyps.size(), 4u);
    EXPECT_EQ(hyps[0].tokens, best_tokens) << b;
    EXPECT_NEAR(hyps[0].log_prob, best, 1e-4) << b;
    for (std::size_t i = 1; i < hyps.size(); ++i) EXPECT_GE(hyps[i - 1].score, hyps[i].score);
  }
}

// The length penalty divides the log-probability by the length to the alpha.
TEST(BeamSearch, ScoresFollowTheLengthPenalty) {
  Fixture f;
  DecodeOptions o = options(3, 5);
  o.length_penalty = 0.7;
  o.n_best = 3;
  for (const auto& hyps : beam_search(*f.model, f.source, &f.padding, o))
    for (const Hypothesis& h : hyps) {
      const double length = static_cast<double>(h.tokens.size() + (h.ended ? 1 : 0));
      EXPECT_NEAR(h.score, h.log_prob / std::pow(length, 0.7), 1e-12);
      EXPECT_LE(static_cast<std::int64_t>(h.tokens.size()), 5);
    }
}

TEST(BeamSearch, RejectsBadOptions) {
  Fixture f;
  DecodeOptions o = options(0);
  EXPECT_THROW(beam_search(*f.model, f.source, &f.padding, o), ConfigError);
  o = options(2);
  o.n_best = 3;
  EXPECT_THROW(beam_search(*f.model, f.source, &f.padding, o), ConfigError);
  o = options(2);
  o.end_token = kVocab;
  EXPECT_THROW(greedy_decode(*f.model, f.source, &f.padding, o), ConfigError);
  o = options(2);
  o.length_penalty = -1;
  EXPECT_THROW(greedy_decode(*f.model, f.source, &f.padding, o), ConfigError);
}

}  // namespace
}  // namespace multihead
