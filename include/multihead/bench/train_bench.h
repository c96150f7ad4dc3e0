// SPDX-License-Identifier: Apache-2.0
// Training-step benchmark of an encoder classifier, as `multihead bench train`
// runs it. Under mpirun it is data-parallel: each rank trains its share of
// the batch and the step sums the gradients over the ranks (train/trainer.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "multihead/core/precision.h"

namespace multihead {

struct TrainBenchConfig {
  std::int64_t d_model = 256, num_heads = 8, num_layers = 4, seq_len = 256, batch = 32;
  std::int64_t dim_feedforward = 2048, vocab_size = 8000, num_classes = 2;  // 2048: PyTorch's default
  double dropout = 0.1;
  bool checkpoint_layers = false;
  Precision precision = Precision::kF32;  // activations; fp16 adds loss scaling
  bool allreduce_overlap = true;          // under mpirun: TrainConfig::allreduce_overlap
  int warmup = 1;
  int iters = 5;
  // A Hugging Face checkpoint (or a run) whose model is timed, with its
  // weights (a new 2-class head where it has none): its shape replaces the
  // sizes above (with_pretrained_shape), and its parts (BERT's input norm,
  // token types, pooler) come with it.
  std::string pretrained;
};

// c with the sizes of c.pretrained's model (c itself when it names none).
TrainBenchConfig with_pretrained_shape(TrainBenchConfig c);

struct TrainBenchResult {
  double ms = 0;                           // median per training step (forward, backward, AdamW)
  double tokens_per_s = 0;                 // batch * seq_len / step time: every rank's tokens
  int ranks = 1;                           // processes under mpirun, each with `threads` threads
  std::int64_t peak_bytes = 0;             // allocator peak during one step, everything live included
  std::int64_t peak_activation_bytes = 0;  // the same above the weights, gradients and optimizer state
  std::int64_t param_count = 0;
  int threads = 0;
  std::vector<double> samples_ms;
  // Model FLOPs of a step: 3 x the forward's matrix products (the forward
  // once, the backward twice: input and weight gradients), attention's
  // Q K^T and P V included, as model-FLOPs utilisation counts them.
  double flops_per_step = 0;
  double gflops = 0;  // flops_per_step / step time
  // This machine's fp32 sgemm rate, measured in the same run (bench gemm's
  // product): with several ranks, the sum of their rates measured side by side.
  double sgemm_gflops = 0;
  double sgemm_fraction = 0;  // gflops / sgemm_gflops
  // Median time per step in each part (core/step_profile.h); "other" is the
  // rest: norms, activations, dropout, the loss, copies.
  double gemm_ms = 0, attention_ms = 0, optimizer_ms = 0, other_ms = 0;
  // Median time per step summing gradients over the ranks (rank 0's), of it
  // the time the step waited for the sums (the rest ran beside the backward
  // pass; the wait is not in the parts above), and the bytes each rank
  // contributes.
  double allreduce_ms = 0, allreduce_wait_ms = 0;
  std::int64_t allreduce_bytes = 0;
};

// Model FLOPs of one training step of the benchmark's classifier (see TrainBenchResult).
double train_step_flops(const TrainBenchConfig& cfg);

TrainBenchResult run_train_bench(const TrainBenchConfig& cfg);

}  // namespace multihead
