// Training-step benchmark of an encoder classifier, as `multihead bench train` runs it.
#pragma once

#include <cstdint>
#include <vector>

#include "multihead/core/precision.h"

namespace multihead {

struct TrainBenchConfig {
  std::int64_t d_model = 256, num_heads = 8, num_layers = 4, seq_len = 256, batch = 32;
  std::int64_t dim_feedforward = 2048, vocab_size = 8000, num_classes = 2;  // 2048: PyTorch's default
  double dropout = 0.1;
  bool checkpoint_layers = false;
  Precision precision = Precision::kF32;  // activations; fp16 adds loss scaling
  int threads = 0;
  int warmup = 1;
  int iters = 5;
};

struct TrainBenchResult {
  double ms = 0;            // median per training step (forward, backward, AdamW)
  double tokens_per_s = 0;  // batch * seq_len / step time
  std::int64_t peak_bytes = 0;             // allocator peak during one step, everything live included
  std::int64_t peak_activation_bytes = 0;  // the same above the weights, gradients and optimizer state
  std::int64_t param_count = 0;
  int threads = 0;
  std::vector<double> samples_ms;
};

TrainBenchResult run_train_bench(const TrainBenchConfig& cfg);

}  // namespace multihead
