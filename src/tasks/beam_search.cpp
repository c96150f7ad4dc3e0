// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/beam_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace multihead {

void DecodeOptions::validate() const {
  check<ConfigError>(beam > 0, "the beam width must be positive, got {}", beam);
  check<ConfigError>(n_best > 0 && n_best <= beam, "n_best must be between 1 and the beam width {}, got {}", beam,
                     n_best);
  check<ConfigError>(max_len > 0, "the longest output must be positive, got {}", max_len);
  check<ConfigError>(std::isfinite(length_penalty) && length_penalty >= 0,
                     "the length penalty must be a non-negative number, got {}", length_penalty);
  check<ConfigError>(start_token >= 0 && end_token >= 0, "start and end tokens must be token ids");
}

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// log softmax of one row of logits, in double.
void log_softmax_row(const float* z, std::int64_t V, std::vector<double>& out) {
  out.resize(static_cast<std::size_t>(V));
  const double m = *std::max_element(z, z + V);
  double sum = 0;
  for (std::int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - m);
  const double lse = m + std::log(sum);
  for (std::int64_t v = 0; v < V; ++v) out[static_cast<std::size_t>(v)] = double(z[v]) - lse;
}

double penalised(double log_prob, std::size_t length, double alpha) {
  return alpha == 0 ? log_prob : log_prob / std::pow(static_cast<double>(std::max<std::size_t>(length, 1)), alpha);
}

// Every layer's cached keys and values, rows gathered (beam reordering):
// only the positions filled so far, not the whole capacity, are copied.
void reorder(std::vector<KvCache>& caches, std::span<const std::int64_t> rows) {
  for (KvCache& c : caches)
    for (Tensor* t : {&c.k, &c.v}) {
      Tensor out = Tensor::empty(t->shape(), t->dtype());  // (R, capacity, KE)
      const std::size_t row_bytes = t->nbytes() / static_cast<std::size_t>(t->dim(0));
      const std::size_t used = row_bytes / static_cast<std::size_t>(t->dim(1)) * static_cast<std::size_t>(c.length);
      for (std::size_t i = 0; i < rows.size(); ++i)
        std::memcpy(static_cast<char*>(out.raw()) + i * row_bytes,
                    static_cast<const char*>(t->raw()) + static_cast<std::size_t>(rows[i]) * row_bytes, used);
      *t = std::move(out);
    }
}

void check_source(const EncoderDecoder& model, const Tensor& source, const DecodeOptions& o) {
  o.validate();
  check<ShapeError>(source.ndim() == 2 && source.dim(0) > 0, "source ids have shape {}, expected (B, S)",
                    shape_text(source.shape()));
  const std::int64_t V = model.config().model.vocab_size;
  check<ConfigError>(o.start_token < V && o.end_token < V, "start and end tokens must be below the vocabulary of {}",
                     V);
}

}  // namespace

std::vector<Hypothesis> greedy_decode(EncoderDecoder& model, const Tensor& source, const Tensor* padding,
                                      const DecodeOptions& o) {
  check_source(model, source, o);
  const std::int64_t B = source.dim(0), V = model.config().model.vocab_size;
  const EncodedMemory memory = model.encode(source, padding, o.precision);
  std::vector<KvCache> caches;
  std::vector<Hypothesis> out(static_cast<std::size_t>(B));
  Tensor next = Tensor::from_i64({B, 1}, std::vector<std::int64_t>(static_cast<std::size_t>(B), o.start_token));
  std::vector<double> lp;
  for (std::int64_t t = 0; t < o.max_len; ++t) {
    const Tensor logits = model.decode_step(next, caches, memory, o.max_len, o.precision);
    bool all_ended = true;
    for (std::int64_t b = 0; b < B; ++b) {
      Hypothesis& h = out[static_cast<std::size_t>(b)];
      std::int64_t tok = o.end_token;
      if (!h.ended) {
        const float* z = logits.f32() + b * V;
        tok = std::max_element(z, z + V) - z;
        log_softmax_row(z, V, lp);
        h.log_prob += lp[static_cast<std::size_t>(tok)];
        if (tok == o.end_token) h.ended = true;
        else h.tokens.push_back(tok);
      }
      all_ended = all_ended && h.ended;
      next.data<std::int64_t>()[b] = tok;
    }
    if (all_ended) break;
  }
  for (Hypothesis& h : out) h.score = penalised(h.log_prob, h.tokens.size() + (h.ended ? 1 : 0), o.length_penalty);
  return out;
}

std::vector<std::vector<Hypothesis>> beam_search(EncoderDecoder& model, const Tensor& source, const Tensor* padding,
                                                 const DecodeOptions& o) {
  check_source(model, source, o);
  const std::int64_t B = source.dim(0), K = o.beam, V = model.config().model.vocab_size, R = B * K;
  // Row b K + k holds hypothesis k of input b.
  std::vector<std::int64_t> repeat(static_cast<std::size_t>(R));
  for (std::int64_t r = 0; r < R; ++r) repeat[static_cast<std::size_t>(r)] = r / K;
  const EncodedMemory memory = model.encode(source, padding, o.precision).select(repeat);
  std::vector<KvCache> caches;
  // Only hypothesis 0 is live at first: the K copies of the start are one.
  std::vector<double> live(static_cast<std::size_t>(R), kNegInf);
  for (std::int64_t b = 0; b < B; ++b) live[static_cast<std::size_t>(b * K)] = 0;
  std::vector<std::vector<std::int64_t>> tokens(static_cast<std::size_t>(R));
  std::vector<std::vector<Hypothesis>> finished(static_cast<std::size_t>(B));
  std::vector<bool> done(static_cast<std::size_t>(B), false);
  Tensor next = Tensor::from_i64({R, 1}, std::vector<std::int64_t>(static_cast<std::size_t>(R), o.start_token));
  struct Candidate {
    double log_prob;
    std::int64_t k, v;
  };
  std::vector<Candidate> cands;
  std::vector<double> lp;
  std::vector<std::int64_t> parents(static_cast<std::size_t>(R));
  for (std::int64_t step = 0; step < o.max_len; ++step) {
    const Tensor logits = model.decode_step(next, caches, memory, o.max_len, o.precision);
    std::vector<double> new_live(static_cast<std::size_t>(R), kNegInf);
    std::vector<std::vector<std::int64_t>> new_tokens(static_cast<std::size_t>(R));
    for (std::int64_t b = 0; b < B; ++b) {
      // A finished input's rows idle on the end token.
      for (std::int64_t k = 0; k < K; ++k) {
        parents[static_cast<std::size_t>(b * K + k)] = b * K + k;
        next.data<std::int64_t>()[b * K + k] = o.end_token;
      }
      if (done[static_cast<std::size_t>(b)]) continue;
      cands.clear();
      for (std::int64_t k = 0; k < K; ++k) {
        const double base = live[static_cast<std::size_t>(b * K + k)];
        if (base == kNegInf) continue;
        log_softmax_row(logits.f32() + (b * K + k) * V, V, lp);
        for (std::int64_t v = 0; v < V; ++v) cands.push_back({base + lp[static_cast<std::size_t>(v)], k, v});
      }
      const std::size_t keep = std::min(cands.size(), static_cast<std::size_t>(2 * K));
      // Best first; ties to the lower hypothesis, then the lower token, as greedy's arg max.
      std::partial_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(keep), cands.end(),
                        [](const Candidate& a, const Candidate& c) {
                          if (a.log_prob != c.log_prob) return a.log_prob > c.log_prob;
                          return a.k != c.k ? a.k < c.k : a.v < c.v;
                        });
      std::int64_t placed = 0;
      auto& fin = finished[static_cast<std::size_t>(b)];
      for (std::size_t i = 0; i < keep && placed < K; ++i) {
        const Candidate& c = cands[i];
        const auto& from = tokens[static_cast<std::size_t>(b * K + c.k)];
        if (c.v == o.end_token) {
          // Only the beam's best K candidates may finish.
          if (static_cast<std::int64_t>(i) < K)
            fin.push_back({from, c.log_prob, penalised(c.log_prob, from.size() + 1, o.length_penalty), true});
          continue;
        }
        const std::int64_t row = b * K + placed++;
        parents[static_cast<std::size_t>(row)] = b * K + c.k;
        new_live[static_cast<std::size_t>(row)] = c.log_prob;
        new_tokens[static_cast<std::size_t>(row)] = from;
        new_tokens[static_cast<std::size_t>(row)].push_back(c.v);
        next.data<std::int64_t>()[row] = c.v;
      }
      if (static_cast<std::int64_t>(fin.size()) >= K) done[static_cast<std::size_t>(b)] = true;
    }
    live = std::move(new_live);
    tokens = std::move(new_tokens);
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    reorder(caches, parents);
  }
  std::vector<std::vector<Hypothesis>> out(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    auto& fin = finished[static_cast<std::size_t>(b)];
    // Out of steps: the live hypotheses finish as they stand.
    if (!done[static_cast<std::size_t>(b)])
      for (std::int64_t k = 0; k < K; ++k) {
        const std::size_t r = static_cast<std::size_t>(b * K + k);
        if (live[r] != kNegInf)
          fin.push_back({tokens[r], live[r], penalised(live[r], tokens[r].size(), o.length_penalty), false});
      }
    std::stable_sort(fin.begin(), fin.end(),
                     [](const Hypothesis& a, const Hypothesis& c) { return a.score > c.score; });
    if (static_cast<std::int64_t>(fin.size()) > o.n_best) fin.resize(static_cast<std::size_t>(o.n_best));
    out[static_cast<std::size_t>(b)] = std::move(fin);
  }
  return out;
}

}  // namespace multihead
