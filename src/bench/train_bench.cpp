// SPDX-License-Identifier: Apache-2.0
#include "multihead/bench/train_bench.h"

#include <array>
#include <chrono>

#include "multihead/bench/attention_bench.h"
#include "multihead/core/allocator.h"
#include "multihead/core/context.h"
#include "multihead/core/step_profile.h"
#include "multihead/core/threading.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/io/json_config.h"
#include "multihead/train/distributed.h"
#include "multihead/train/initial_weights.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/trainer.h"
#include "timing.h"

namespace multihead {

using bench::median;

double train_step_flops(const TrainBenchConfig& c) {
  const double tokens = static_cast<double>(c.batch * c.seq_len), d = static_cast<double>(c.d_model);
  const double per_layer = 2 * tokens * d * (3 * d)                                       // in-projection
                           + 2 * tokens * d * d                                           // out-projection
                           + 2 * 2 * tokens * d * static_cast<double>(c.dim_feedforward)  // feed-forward
                           + 2 * 2 * tokens * static_cast<double>(c.seq_len) * d;         // Q K^T and P V
  const double head = 2 * static_cast<double>(c.batch) * d * static_cast<double>(c.num_classes);
  return 3 * (static_cast<double>(c.num_layers) * per_layer + head);
}

namespace {

ModelConfig pretrained_model(const std::string& dir) {
  const RunConfig rc = read_run_config(dir);
  check<ConfigError>(rc.json.contains("model") && rc.json["model"].is_object(), "{}: no model to time", rc.path);
  ModelConfig mc;
  ConfigReader reader(rc.json["model"], rc.path);
  ModelConfig::keys(reader, mc);
  return mc;
}

}  // namespace

TrainBenchConfig with_pretrained_shape(TrainBenchConfig c) {
  if (c.pretrained.empty()) return c;
  const ModelConfig mc = pretrained_model(c.pretrained);
  c.d_model = mc.layer.d_model, c.num_heads = mc.layer.nhead, c.num_layers = mc.num_layers;
  c.dim_feedforward = mc.layer.dim_feedforward, c.vocab_size = mc.vocab_size, c.dropout = mc.layer.dropout;
  return c;
}

TrainBenchResult run_train_bench(const TrainBenchConfig& c_in) {
  const TrainBenchConfig c = with_pretrained_shape(c_in);
  check<ConfigError>(c.iters > 0 && c.warmup >= 0, "iters must be positive and warmup non-negative");
  ModelConfig mc = c.pretrained.empty() ? ModelConfig() : pretrained_model(c.pretrained);
  if (c.pretrained.empty()) {
    mc.vocab_size = c.vocab_size;
    mc.num_layers = c.num_layers;
    mc.layer.d_model = c.d_model;
    mc.layer.nhead = c.num_heads;
    mc.layer.dim_feedforward = c.dim_feedforward;
    mc.layer.dropout = c.dropout;
    mc.max_len = c.seq_len;
  }
  mc.num_classes = c.num_classes;
  TrainConfig tc;
  tc.schedule.base_lr = 1e-4;
  tc.clip_grad_norm = 1.0;
  tc.batch = c.batch;
  tc.seq_len = c.seq_len;
  tc.precision = training_precision(c.precision, "bench train: --precision");
  tc.loss_scaling = c.precision == Precision::kF16;
  tc.allreduce_overlap = c.allreduce_overlap;
  check<ConfigError>(c.batch > 0 && c.seq_len > 0, "batch and seq-len must be positive");

  ParamStore store;
  SequenceClassifier model(store, mc);
  store.finalize();
  Rng rng(0);
  model.init(rng);
  if (!c.pretrained.empty()) apply_initial_weights(store, read_initial_weights(c.pretrained), "");
  model.encoder().set_checkpointing(c.checkpoint_layers);
  Trainer trainer(store, tc);

  // This rank's rows of the batch (all of it in one process).
  ProcessGroup& group = process_group();
  check<ConfigError>(c.batch % group.size() == 0, "batch ({}) must be a multiple of the {} ranks", c.batch,
                     group.size());
  const std::int64_t rows = c.batch / group.size();
  Tensor ids({rows, c.seq_len}, DType::kI64), labels({rows}, DType::kI64);
  for (std::int64_t i = 0; i < ids.numel(); ++i) ids.data<std::int64_t>()[i] = rng.next_u32() % c.vocab_size;
  for (std::int64_t b = 0; b < rows; ++b) labels.data<std::int64_t>()[b] = (group.rank() * rows + b) % c.num_classes;
  auto micro = [&](std::int64_t, const ForwardContext& ctx, double scale) {
    Tensor logits = model.forward(ids, nullptr, ctx);
    Tensor dlogits = Tensor::empty(logits.shape());
    auto ce =
        cross_entropy(dlogits.f32(), logits.f32(), labels.data<std::int64_t>(), rows, c.num_classes, -100, 0.0, scale);
    model.backward(dlogits);
    model.release_saved();
    return ce.loss;
  };

  TrainBenchResult r;
  r.threads = num_threads();
  r.ranks = group.size();
  r.allreduce_bytes = group.size() > 1 ? store.numel() * static_cast<std::int64_t>(sizeof(float)) : 0;
  r.param_count = store.numel();
  trainer.step(micro);  // first step allocates the optimizer's lazily touched pages
  const std::int64_t base = memory_stats().current_bytes;
  {
    const PeakMeter memory;
    trainer.step(micro);
    r.peak_bytes = memory.peak_bytes();
  }
  r.peak_activation_bytes = r.peak_bytes - base;
  for (int i = 0; i < c.warmup; ++i) trainer.step(micro);
  std::array<std::vector<double>, kStepParts> parts_ms;
  std::vector<double> other_ms, allreduce_ms, wait_ms;
  StepProfile profile;
  RuntimeContext profiled = context();
  profiled.profile = &profile;
  const ContextBinding bound(profiled);
  for (int i = 0; i < c.iters; ++i) {
    profile.reset();
    group.reset_reduce_seconds();
    auto t0 = std::chrono::steady_clock::now();
    trainer.step(micro);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.samples_ms.push_back(ms);
    const auto parts = profile.seconds();
    double accounted = 0;
    for (int p = 0; p < kStepParts; ++p) parts_ms[p].push_back(parts[p] * 1e3), accounted += parts[p] * 1e3;
    allreduce_ms.push_back(group.reduce_seconds() * 1e3);
    wait_ms.push_back(group.reduce_wait_seconds() * 1e3);
    other_ms.push_back(ms - accounted - wait_ms.back());
  }
  r.ms = median(r.samples_ms);
  r.tokens_per_s = static_cast<double>(c.batch * c.seq_len) / (r.ms / 1e3);
  r.gemm_ms = median(parts_ms[static_cast<int>(StepPart::kGemm)]);
  r.attention_ms = median(parts_ms[static_cast<int>(StepPart::kAttention)]);
  r.optimizer_ms = median(parts_ms[static_cast<int>(StepPart::kOptimizer)]);
  r.other_ms = median(other_ms);
  r.allreduce_ms = median(allreduce_ms);
  r.allreduce_wait_ms = median(wait_ms);
  r.flops_per_step = train_step_flops(c);
  r.gflops = r.flops_per_step / (r.ms / 1e3) / 1e9;
  double sgemm = run_gemm_bench(4096, 1536, 512, 10).gflops;
  group.sum(std::span<double>(&sgemm, 1));  // the ranks measure side by side
  r.sgemm_gflops = sgemm;
  r.sgemm_fraction = r.gflops / r.sgemm_gflops;
  return r;
}

}  // namespace multihead
