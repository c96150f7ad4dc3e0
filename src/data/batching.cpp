#include "multihead/data/batching.h"

#include <algorithm>

#include "multihead/core/rng.h"
#include "multihead/data/tokenizer.h"

namespace multihead {

TokenBatch make_token_batch(const std::vector<const std::vector<std::int64_t>*>& seqs,
                            const std::vector<std::int64_t>& labels, std::int64_t max_len, bool add_cls) {
  check<ShapeError>(!seqs.empty() && seqs.size() == labels.size(), "a batch needs as many labels ({}) as sequences ({})",
                    labels.size(), seqs.size());
  check<ConfigError>(max_len > (add_cls ? 1 : 0), "max_len must leave room for a token, got {}", max_len);
  const std::int64_t B = static_cast<std::int64_t>(seqs.size());
  const std::int64_t extra = add_cls ? 1 : 0;
  std::int64_t L = 1;
  for (const auto* s : seqs) L = std::max(L, std::min(max_len, static_cast<std::int64_t>(s->size()) + extra));
  TokenBatch t{Tensor({B, L}, DType::kI64), Tensor({B, L}, DType::kBool), Tensor({B}, DType::kI64), 0};
  std::int64_t* ids = t.ids.data<std::int64_t>();
  std::uint8_t* pad = t.padding.data<std::uint8_t>();
  for (std::int64_t b = 0; b < B; ++b) {
    const auto& s = *seqs[static_cast<std::size_t>(b)];
    std::int64_t n = std::min(L, static_cast<std::int64_t>(s.size()) + extra);
    if (n == 0) n = 1;  // an empty text still has one (unknown) token to attend to
    std::int64_t pos = 0;
    if (add_cls) ids[b * L + pos++] = kClsId;
    for (std::size_t i = 0; pos < n && i < s.size(); ++i) ids[b * L + pos++] = s[i];
    if (pos < n) ids[b * L + pos++] = kUnkId;
    for (std::int64_t l = n; l < L; ++l) ids[b * L + l] = kPadId, pad[b * L + l] = 1;
    t.labels.data<std::int64_t>()[b] = labels[static_cast<std::size_t>(b)];
    t.tokens += n;
  }
  return t;
}

std::vector<std::vector<std::int64_t>> epoch_batches(const std::vector<std::int64_t>& indices, std::int64_t batch,
                                                     std::uint64_t seed, std::int64_t epoch, bool shuffle) {
  check<ConfigError>(batch > 0, "batch size must be positive, got {}", batch);
  std::vector<std::int64_t> order = indices;
  if (shuffle) {
    Rng rng(seed, 0xba7c0000ull + static_cast<std::uint64_t>(epoch));
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next_u32() % i]);
  }
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t i = 0; i < order.size(); i += static_cast<std::size_t>(batch))
    out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i),
                     order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), i + static_cast<std::size_t>(batch))));
  return out;
}

}  // namespace multihead
