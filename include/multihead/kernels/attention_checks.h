// SPDX-License-Identifier: Apache-2.0
// What every attention kernel checks at its entry, before any parallel region
// (an exception cannot leave an OpenMP region: it would end the process):
// sizes, views that a GEMM can read, and sequence lengths its accumulators
// keep exact. The kernels' callers (the modules, the Python package) arrange
// their tensors to pass; anything else is a ShapeError naming the view.
#pragma once

#include <cstdint>

#include "multihead/kernels/attention_types.h"

namespace multihead {

// The longest query or key sequence of one call in kernels that accumulate in
// fp32. A row's softmax sum and weighted values, and backward's dK and dV over
// the queries, add one term a position: past 2^24 terms an fp32 sum of equal
// terms stops growing (a key of 2^31 ones gave 1/128 for 1). float64 kernels
// have no such limit.
inline constexpr std::int64_t kMaxFp32AttentionPositions = std::int64_t{1} << 24;

// B, L, S >= 0; H, D, Dv >= 1; L and S at most kMaxFp32AttentionPositions
// when the kernel accumulates in fp32.
void check_attention_dims(const AttentionDims& d, bool fp32_accumulators);

// A view of `rows` (batch x positions) rows of `width` elements: when it has
// any, non-null, with non-negative strides and rows at least `width` apart (a
// GEMM's leading dimension; an expanded view, row stride 0, is refused).
void check_heads_view(const char* name, const void* ptr, std::int64_t batch_stride, std::int64_t row_stride,
                      std::int64_t head_stride, std::int64_t rows, std::int64_t width);

template <typename T>
void check_heads_view(const char* name, const HeadsView<T>& v, std::int64_t rows, std::int64_t width) {
  check_heads_view(name, static_cast<const void*>(v.ptr), v.batch_stride, v.row_stride, v.head_stride, rows, width);
}

// The views of one forward call: q (B, L, H, D), k (B, S, H, D), v and out.
template <typename Out, typename In>
void check_attention_views(const AttentionDims& d, const HeadsView<Out>& out, const HeadsView<In>& q,
                           const HeadsView<In>& k, const HeadsView<In>& v) {
  check_heads_view("out", out, d.B * d.L, d.Dv);
  check_heads_view("query", q, d.B * d.L, d.D);
  check_heads_view("key", k, d.B * d.S, d.D);
  check_heads_view("value", v, d.B * d.S, d.Dv);
}

}  // namespace multihead
