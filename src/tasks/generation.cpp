// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/generation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace multihead {

namespace {
// The sampling streams of generation: row r of a batch draws from kGenerationStream + r.
constexpr std::uint64_t kGenerationStream = 0x9e4e7a7e;
}  // namespace

std::int64_t sample_token(const float* logits, std::int64_t V, const SamplingConfig& cfg, Rng& rng) {
  check<ConfigError>(cfg.temperature >= 0, "temperature must be >= 0, got {}", cfg.temperature);
  check<ConfigError>(cfg.top_p > 0 && cfg.top_p <= 1, "top_p must be in (0, 1], got {}", cfg.top_p);
  check<ConfigError>(cfg.top_k >= 0, "top_k must be >= 0, got {}", cfg.top_k);
  if (cfg.temperature == 0) return std::max_element(logits, logits + V) - logits;
  std::vector<std::int64_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties by id, so sampling is reproducible.
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return logits[a] > logits[b]; });
  std::int64_t keep = cfg.top_k > 0 ? std::min(cfg.top_k, V) : V;
  const double mx = logits[order[0]];
  std::vector<double> p(static_cast<std::size_t>(keep));
  double sum = 0;
  for (std::int64_t i = 0; i < keep; ++i)
    sum += p[static_cast<std::size_t>(i)] =
        std::exp((logits[order[static_cast<std::size_t>(i)]] - mx) / cfg.temperature);
  if (cfg.top_p < 1) {
    double mass = 0;
    std::int64_t n = 0;
    while (n < keep && mass < cfg.top_p * sum) mass += p[static_cast<std::size_t>(n++)];
    keep = std::max<std::int64_t>(n, 1);
    sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  double u = static_cast<double>(rng.uniform()) * sum;
  for (std::int64_t i = 0; i < keep; ++i) {
    u -= p[static_cast<std::size_t>(i)];
    if (u < 0) return order[static_cast<std::size_t>(i)];
  }
  return order[static_cast<std::size_t>(keep - 1)];
}

std::vector<std::int64_t> generate(LanguageModel& model, const std::vector<std::int64_t>& prompt, std::int64_t count,
                                   const SamplingConfig& cfg, std::int64_t context, Precision precision) {
  return generate_batch(model, {prompt}, count, cfg, context, precision).front();
}

std::vector<std::vector<std::int64_t>> generate_batch(LanguageModel& model,
                                                      const std::vector<std::vector<std::int64_t>>& prompts,
                                                      std::int64_t count, const SamplingConfig& cfg,
                                                      std::int64_t context, Precision precision) {
  check<ConfigError>(!prompts.empty(), "generation needs at least one prompt");
  const std::size_t P = prompts.front().size();
  for (const auto& p : prompts) {
    check<ConfigError>(!p.empty(), "generation needs a prompt of at least one token");
    check<ConfigError>(p.size() == P, "prompts generated together need equal lengths, got {} and {} tokens", P,
                       p.size());
  }
  check<ConfigError>(count >= 0 && count <= kMaxGeneratedTokens, "tokens to generate must be in [0, {}], got {}",
                     kMaxGeneratedTokens, count);
  check<ConfigError>(context == 0 || context >= 2, "context must be 0 (unbounded) or at least 2, got {}", context);
  const auto B = static_cast<std::int64_t>(prompts.size());
  // A prompt longer than the context keeps its end.
  const std::size_t fed = context > 0 ? std::min(P, static_cast<std::size_t>(context)) : P;
  const std::int64_t capacity = context > 0 ? context : static_cast<std::int64_t>(fed) + count;
  if (model.config().positions == PositionKind::kSinusoidal || model.config().positions == PositionKind::kLearned)
    check<ConfigError>(capacity <= model.config().max_len,
                       "prompt and continuation ({} tokens) exceed the model's max_len ({})", capacity,
                       model.config().max_len);
  std::vector<Rng> rngs;
  for (std::int64_t r = 0; r < B; ++r) rngs.emplace_back(cfg.seed, kGenerationStream + static_cast<std::uint64_t>(r));
  std::vector<std::vector<std::int64_t>> out = prompts;
  // ids (B, T): the tokens each row feeds next, the last `n` of each row's output.
  const auto feed = [&](std::size_t n) {
    std::vector<std::int64_t> v;
    for (const auto& row : out) v.insert(v.end(), row.end() - static_cast<std::ptrdiff_t>(n), row.end());
    return Tensor::from_i64({B, static_cast<std::int64_t>(n)}, v);
  };
  std::vector<KvCache> caches;
  Tensor ids = feed(fed);
  const std::int64_t V = model.config().vocab_size;
  for (std::int64_t step = 0; step < count; ++step) {
    if (context > 0 && !caches.empty() && caches[0].length + ids.dim(1) > context) {
      // Restart from the recent half of the window (the new token included).
      caches.clear();
      ids = feed(static_cast<std::size_t>(context / 2));
    }
    Tensor logits = model.forward_cached(ids, caches, capacity, precision);  // (B, T, V)
    const std::int64_t T = logits.dim(1);
    for (std::int64_t r = 0; r < B; ++r) {
      const float* last = logits.f32() + (r * T + T - 1) * V;
      out[static_cast<std::size_t>(r)].push_back(sample_token(last, V, cfg, rngs[static_cast<std::size_t>(r)]));
    }
    ids = feed(1);
  }
  return out;
}

}  // namespace multihead
