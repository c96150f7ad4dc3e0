#include "multihead/tasks/generation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace multihead {

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
    sum += p[static_cast<std::size_t>(i)] = std::exp((logits[order[static_cast<std::size_t>(i)]] - mx) / cfg.temperature);
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

std::vector<std::int64_t> generate(LanguageModel& model, const std::vector<std::int64_t>& prompt_in,
                                   std::int64_t count, const SamplingConfig& cfg, std::int64_t context,
                                   Precision precision) {
  check<ConfigError>(!prompt_in.empty(), "generation needs a prompt of at least one token");
  check<ConfigError>(count >= 0, "token count must be >= 0, got {}", count);
  check<ConfigError>(context == 0 || context >= 2, "context must be 0 (unbounded) or at least 2, got {}", context);
  // A prompt longer than the context keeps its end.
  const std::vector<std::int64_t> prompt =
      context > 0 && static_cast<std::int64_t>(prompt_in.size()) > context
          ? std::vector<std::int64_t>(prompt_in.end() - context, prompt_in.end())
          : prompt_in;
  const std::int64_t capacity = context > 0 ? context : static_cast<std::int64_t>(prompt.size()) + count;
  if (model.config().positions == PositionKind::kSinusoidal || model.config().positions == PositionKind::kLearned)
    check<ConfigError>(capacity <= model.config().max_len,
                       "prompt and continuation ({} tokens) exceed the model's max_len ({})", capacity,
                       model.config().max_len);
  Rng rng(cfg.seed, 0x9e4e7a7e);
  std::vector<KvCache> caches;
  std::vector<std::int64_t> out = prompt_in;
  Tensor ids = Tensor::from_i64({1, static_cast<std::int64_t>(prompt.size())}, prompt);
  const std::int64_t V = model.config().vocab_size;
  for (std::int64_t step = 0; step < count; ++step) {
    if (context > 0 && !caches.empty() && caches[0].length + ids.dim(1) > context) {
      // Restart from the recent half of the window (the new token included).
      const std::int64_t keep = context / 2;
      std::vector<std::int64_t> tail(out.end() - keep, out.end());
      caches.clear();
      ids = Tensor::from_i64({1, keep}, tail);
    }
    Tensor logits = model.forward_cached(ids, caches, capacity, precision);
    const float* last = logits.f32() + (logits.dim(1) - 1) * V;
    const std::int64_t next = sample_token(last, V, cfg, rng);
    out.push_back(next);
    ids = Tensor::from_i64({1, 1}, std::vector<std::int64_t>{next});
  }
  return out;
}

}  // namespace multihead
