// SPDX-License-Identifier: Apache-2.0
#include "multihead/data/synthetic.h"

#include <algorithm>

#include "multihead/core/error.h"
#include "multihead/core/suggest.h"
#include "multihead/data/tokenizer.h"

namespace multihead {

SyntheticKind parse_synthetic_kind(std::string_view name) {
  if (name == "copy") return SyntheticKind::kCopy;
  if (name == "reverse") return SyntheticKind::kReverse;
  if (name == "sort") return SyntheticKind::kSort;
  throw ConfigError(fmt::format("synthetic task must be copy, reverse or sort, got \"{}\"{}", name,
                                did_you_mean(name, {"copy", "reverse", "sort"})));
}

const char* synthetic_kind_name(SyntheticKind kind) {
  switch (kind) {
    case SyntheticKind::kCopy: return "copy";
    case SyntheticKind::kSort: return "sort";
    case SyntheticKind::kReverse: break;
  }
  return "reverse";
}

SyntheticBatch synthetic_batch(const SyntheticTask& task, std::int64_t batch, std::uint64_t seed, std::uint64_t index) {
  check<ConfigError>(task.symbols > 0 && task.min_len > 0 && task.min_len <= task.max_len && batch > 0,
                     "synthetic task needs symbols > 0, 0 < min_len <= max_len and a positive batch");
  Rng rng(seed, 0x5e9000000ull + index);
  std::vector<std::vector<std::int64_t>> seqs;
  std::int64_t T = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t n =
        task.min_len +
        static_cast<std::int64_t>(rng.next_u32() % static_cast<std::uint32_t>(task.max_len - task.min_len + 1));
    std::vector<std::int64_t> x(static_cast<std::size_t>(n));
    for (auto& v : x) v = 4 + static_cast<std::int64_t>(rng.next_u32() % static_cast<std::uint32_t>(task.symbols));
    std::vector<std::int64_t> y = x;
    if (task.kind == SyntheticKind::kReverse) std::reverse(y.begin(), y.end());
    if (task.kind == SyntheticKind::kSort) std::sort(y.begin(), y.end());
    std::vector<std::int64_t> s = {kClsId};
    s.insert(s.end(), x.begin(), x.end());
    s.push_back(kEosId);
    s.insert(s.end(), y.begin(), y.end());
    s.push_back(kEosId);
    T = std::max<std::int64_t>(T, static_cast<std::int64_t>(s.size()) - 1);
    seqs.push_back(std::move(s));
  }
  SyntheticBatch out{Tensor({batch, T}, DType::kI64), Tensor({batch * T}, DType::kI64), 0};
  std::int64_t* ids = out.ids.data<std::int64_t>();
  std::int64_t* tgt = out.targets.data<std::int64_t>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto& s = seqs[static_cast<std::size_t>(b)];
    const std::int64_t n = (static_cast<std::int64_t>(s.size()) - 3) / 2;  // length of x
    for (std::int64_t t = 0; t < T; ++t) {
      const bool in = t + 1 < static_cast<std::int64_t>(s.size());
      ids[b * T + t] = in ? s[static_cast<std::size_t>(t)] : kPadId;
      // Position t predicts s[t + 1]; the answer starts after the first <eos> (at n + 1).
      const bool scored = in && t >= n + 1;
      tgt[b * T + t] = scored ? s[static_cast<std::size_t>(t + 1)] : kIgnoreIndex;
      out.scored += scored;
    }
  }
  return out;
}

}  // namespace multihead
