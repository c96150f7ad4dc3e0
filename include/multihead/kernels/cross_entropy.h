// SPDX-License-Identifier: Apache-2.0
// torch.nn.functional.cross_entropy with reduction "mean", ignore_index and
// label_smoothing:
//   loss_i = (1 - eps) * -log p_i[y_i] + eps * mean_c(-log p_i[c])
//   loss   = sum over rows with y_i != ignore_index, divided by their count.
// A batch with every row ignored has loss 0 and zero gradients (PyTorch
// returns NaN there).
#pragma once

#include <cstdint>

namespace multihead {

// PyTorch's default ignore_index: a target that is not scored.
inline constexpr std::int64_t kIgnoreIndex = -100;

struct CrossEntropyResult {
  double loss = 0;
  std::int64_t count = 0;  // rows that were not ignored
};

// logits (N, C); targets (N), each in [0, C) or ignore_index (else ShapeError).
// dlogits (N, C), when not null, receives d(loss)/d(logits) * grad_scale.
// weight (C), when not null, is PyTorch's `weight`: row i's loss counts
// w[y_i] times, the mean divides by the sum of w[y_i], and label smoothing's
// term is sum_c w_c (-log p_c) / C:
//   loss = sum_i [(1 - eps) w[y_i] (-log p_i[y_i]) + eps/C sum_c w_c (-log p_ic)] / sum_i w[y_i]
template <typename T>
CrossEntropyResult cross_entropy(T* dlogits, const T* logits, const std::int64_t* targets, std::int64_t N,
                                 std::int64_t C, std::int64_t ignore_index = kIgnoreIndex, double label_smoothing = 0.0,
                                 double grad_scale = 1.0, const double* weight = nullptr);

}  // namespace multihead
