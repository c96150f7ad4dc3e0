// SPDX-License-Identifier: Apache-2.0
#include "multihead/data/batching.h"

#include <algorithm>
#include <numeric>

#include "multihead/core/rng.h"
#include "multihead/data/tokenizer.h"

namespace multihead {

TokenBatch make_token_batch(const std::vector<const std::vector<std::int64_t>*>& seqs,
                            const std::vector<std::int64_t>& labels, std::int64_t max_len, const TokenFrame& frame) {
  check<ShapeError>(!seqs.empty() && seqs.size() == labels.size(),
                    "a batch needs as many labels ({}) as sequences ({})", labels.size(), seqs.size());
  const auto framing = static_cast<std::int64_t>(frame.before.size() + frame.after.size());
  check<ConfigError>(max_len > framing, "max_len must leave room for a token beside the {} that frame it, got {}",
                     framing, max_len);
  const std::int64_t B = static_cast<std::int64_t>(seqs.size());
  // Each sequence's own tokens, cut to fit within max_len with its frame.
  auto kept = [&](const std::vector<std::int64_t>& s) {
    return std::min(max_len - framing, static_cast<std::int64_t>(s.size()));
  };
  std::int64_t L = 1;
  for (const auto* s : seqs) L = std::max(L, kept(*s) + framing);
  TokenBatch t{Tensor({B, L}, DType::kI64), Tensor({B, L}, DType::kBool), Tensor({B}, DType::kI64), 0};
  std::int64_t* ids = t.ids.data<std::int64_t>();
  std::uint8_t* pad = t.padding.data<std::uint8_t>();
  for (std::int64_t b = 0; b < B; ++b) {
    const auto& s = *seqs[static_cast<std::size_t>(b)];
    std::int64_t* row = ids + b * L;
    std::int64_t pos = 0;
    for (std::int64_t id : frame.before) row[pos++] = id;
    for (std::int64_t i = 0; i < kept(s); ++i) row[pos++] = s[static_cast<std::size_t>(i)];
    for (std::int64_t id : frame.after) row[pos++] = id;
    if (pos == 0) row[pos++] = frame.unk;  // an empty text still has one (unknown) token to attend to
    t.tokens += pos;
    for (; pos < L; ++pos) row[pos] = frame.pad, pad[b * L + pos] = 1;
    t.labels.data<std::int64_t>()[b] = labels[static_cast<std::size_t>(b)];
  }
  return t;
}

namespace {

// Fisher-Yates over `v` with the generator of (seed, stream).
template <typename T>
void shuffle_in_place(std::vector<T>& v, std::uint64_t seed, std::uint64_t stream) {
  Rng rng(seed, stream);
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.next_u32() % i]);
}

constexpr std::uint64_t kOrderStream = 0xba7c0000ull, kBatchOrderStream = 0xba7d0000ull;

std::vector<std::vector<std::int64_t>> cut_into_batches(const std::vector<std::int64_t>& order, std::int64_t batch) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t i = 0; i < order.size(); i += static_cast<std::size_t>(batch))
    out.emplace_back(
        order.begin() + static_cast<std::ptrdiff_t>(i),
        order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), i + static_cast<std::size_t>(batch))));
  return out;
}

}  // namespace

std::vector<std::vector<std::int64_t>> epoch_batches(const std::vector<std::int64_t>& indices, std::int64_t batch,
                                                     std::uint64_t seed, std::int64_t epoch, bool shuffle) {
  check<ConfigError>(batch > 0, "batch size must be positive, got {}", batch);
  std::vector<std::int64_t> order = indices;
  if (shuffle) shuffle_in_place(order, seed, kOrderStream + static_cast<std::uint64_t>(epoch));
  return cut_into_batches(order, batch);
}

std::vector<std::vector<std::int64_t>> length_grouped_batches(const std::vector<std::int64_t>& indices,
                                                              const std::vector<std::int64_t>& lengths,
                                                              std::int64_t batch, std::uint64_t seed,
                                                              std::int64_t epoch, std::int64_t pool_batches) {
  check<ConfigError>(batch > 0 && pool_batches > 0, "batch ({}) and pool ({}) must be positive", batch, pool_batches);
  check<ShapeError>(lengths.size() == indices.size(), "{} lengths for {} examples", lengths.size(), indices.size());
  // Positions into indices/lengths, shuffled as epoch_batches shuffles indices.
  std::vector<std::size_t> pos(indices.size());
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = i;
  shuffle_in_place(pos, seed, kOrderStream + static_cast<std::uint64_t>(epoch));
  const std::size_t pool = static_cast<std::size_t>(batch * pool_batches);
  for (std::size_t lo = 0; lo < pos.size(); lo += pool)
    std::stable_sort(pos.begin() + static_cast<std::ptrdiff_t>(lo),
                     pos.begin() + static_cast<std::ptrdiff_t>(std::min(pos.size(), lo + pool)),
                     [&](std::size_t a, std::size_t b) { return lengths[a] < lengths[b]; });
  std::vector<std::int64_t> order(pos.size());
  for (std::size_t i = 0; i < pos.size(); ++i) order[i] = indices[pos[i]];
  auto batches = cut_into_batches(order, batch);
  shuffle_in_place(batches, seed, kBatchOrderStream + static_cast<std::uint64_t>(epoch));
  return batches;
}

std::vector<std::vector<std::int64_t>> length_sorted_batches(const std::vector<std::int64_t>& lengths,
                                                             std::int64_t tokens) {
  check<ConfigError>(tokens > 0, "a batch's token budget must be positive, got {}", tokens);
  std::vector<std::int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return lengths[static_cast<std::size_t>(a)] < lengths[static_cast<std::size_t>(b)];
  });
  std::vector<std::vector<std::int64_t>> batches;
  for (const std::int64_t i : order) {
    // Ascending order: the newcomer is the batch's longest.
    const std::int64_t longest = lengths[static_cast<std::size_t>(i)];
    if (batches.empty() || static_cast<std::int64_t>(batches.back().size() + 1) * longest > tokens)
      batches.emplace_back();
    batches.back().push_back(i);
  }
  return batches;
}

}  // namespace multihead
