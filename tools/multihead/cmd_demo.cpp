// SPDX-License-Identifier: Apache-2.0
// multihead demo: one self-attention layer, forward and backward, with its
// head-averaged attention drawn in the terminal.
#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "multihead/core/allocator.h"
#include "multihead/nn/multi_head_attention.h"

namespace multihead::cli {
namespace {

struct DemoOpts {
  std::int64_t batch = 2, seq_len = 12, embed_dim = 64, num_heads = 4;
  std::uint64_t seed = 0;
  bool causal = false;
  std::int64_t pad = 0;
};

// One character per weight, darker for more attention.
void draw_weights(const float* w, std::int64_t L, std::int64_t S) {
  static const char* kShades[] = {" ", "\u2591", "\u2592", "\u2593", "\u2588"};
  fmt::print("      keys 0..{}\n", S - 1);
  for (std::int64_t i = 0; i < L; ++i) {
    std::string row;
    float sum = 0.0f;
    for (std::int64_t j = 0; j < S; ++j) {
      float x = w[i * S + j];
      sum += x;
      // sqrt spreads the small weights of long rows over more shades.
      int level = static_cast<int>(std::lround(std::sqrt(std::clamp(x, 0.0f, 1.0f)) * 4.0f));
      row += kShades[level];
      row += kShades[level];
    }
    fmt::print("  q{:<3}|{}| sum {:.3f}\n", i, row, sum);
  }
}

void run_demo(const DemoOpts& o) {
  MultiheadAttentionConfig cfg;
  cfg.embed_dim = o.embed_dim;
  cfg.num_heads = o.num_heads;
  check<ConfigError>(o.batch > 0 && o.seq_len > 0, "--batch and --seq-len must be positive");
  check<ConfigError>(o.pad >= 0 && o.pad <= o.seq_len, "--pad must be between 0 and --seq-len ({})", o.seq_len);
  ParamStore store;
  MultiheadAttention mha(store, "", cfg);
  store.finalize();
  Rng rng(o.seed);
  mha.init(rng);

  Tensor x({o.batch, o.seq_len, o.embed_dim});
  for (float& v : x.span_f32()) v = rng.normal();
  // The last `pad` keys of batch element 0 are padding.
  Tensor kpm({o.batch, o.seq_len}, DType::kBool);
  for (std::int64_t j = o.seq_len - o.pad; j < o.seq_len; ++j) kpm.data<std::uint8_t>()[j] = 1;

  MultiheadAttentionCall call;
  call.causal = o.causal ? CausalAlign::kTopLeft : CausalAlign::kNone;
  auto t0 = std::chrono::steady_clock::now();
  MultiheadAttentionOutput out = mha.forward_self(x, &kpm, nullptr, call);
  auto t1 = std::chrono::steady_clock::now();
  Tensor grad_out({o.batch, o.seq_len, o.embed_dim});
  grad_out.fill(1.0f);
  MultiheadAttentionGrads g = mha.backward(grad_out);
  auto t2 = std::chrono::steady_clock::now();

  double out_sq = 0, grad_sq = 0, param_grad_sq = 0;
  for (float v : out.output.span_f32()) out_sq += double(v) * v;
  for (float v : g.query.span_f32()) grad_sq += double(v) * v;
  for (float v : store.all_grads()) param_grad_sq += double(v) * v;
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };

  fmt::print("MultiheadAttention embed_dim={} num_heads={} head_dim={} ({} parameters)\n", cfg.embed_dim, cfg.num_heads,
             cfg.head_dim(), store.numel());
  fmt::print("input (B, L, E) = ({}, {}, {}){}{}\n", o.batch, o.seq_len, o.embed_dim, o.causal ? ", causal" : "",
             o.pad ? fmt::format(", last {} keys of batch 0 padded", o.pad) : "");
  fmt::print("forward  {:8.3f} ms   |output|     = {:.6f}\n", ms(t0, t1), std::sqrt(out_sq));
  fmt::print("backward {:8.3f} ms   |grad input| = {:.6f}   |grad params| = {:.6f}\n", ms(t1, t2), std::sqrt(grad_sq),
             std::sqrt(param_grad_sq));
  MemoryStats m = memory_stats();
  fmt::print("memory: current {} bytes, peak {} bytes\n", m.current_bytes, m.peak_bytes);
  fmt::print("head-averaged attention weights, batch 0:\n");
  draw_weights(out.weights.f32(), o.seq_len, o.seq_len);
}

}  // namespace

Command add_demo(CLI::App& app) {
  auto o = std::make_shared<DemoOpts>();
  CLI::App* sub = app.add_subcommand("demo", "Run one self-attention layer forward and backward and draw its weights");
  sub->add_option("--batch", o->batch, "Batch size")->capture_default_str();
  sub->add_option("--seq-len", o->seq_len, "Sequence length")->capture_default_str();
  sub->add_option("--embed-dim", o->embed_dim, "Embedding size")->capture_default_str();
  sub->add_option("--num-heads", o->num_heads, "Number of heads")->capture_default_str();
  sub->add_option("--pad", o->pad, "Mask the last N keys of batch element 0 as padding")->capture_default_str();
  sub->add_option("--seed", o->seed, "Random seed")->check(kUnsigned64)->capture_default_str();
  sub->add_flag("--causal", o->causal, "Causal (top-left) mask");
  return {sub, [o] { run_demo(*o); }};
}

}  // namespace multihead::cli
