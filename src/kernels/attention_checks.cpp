// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/attention_checks.h"

#include "multihead/core/error.h"

namespace multihead {

void check_attention_dims(const AttentionDims& d, bool fp32_accumulators) {
  check<ShapeError>(d.B >= 0 && d.L >= 0 && d.S >= 0 && d.H >= 1 && d.D >= 1 && d.Dv >= 1,
                    "attention sizes must be B, L, S >= 0 and H, D, Dv >= 1, got B={} H={} L={} S={} D={} Dv={}", d.B,
                    d.H, d.L, d.S, d.D, d.Dv);
  if (fp32_accumulators)
    check<ShapeError>(d.L <= kMaxFp32AttentionPositions && d.S <= kMaxFp32AttentionPositions,
                      "attention takes at most {} query and key positions in one call (fp32 sums stay exact up to "
                      "there), got L={} S={}",
                      kMaxFp32AttentionPositions, d.L, d.S);
}

void check_heads_view(const char* name, const void* ptr, std::int64_t batch_stride, std::int64_t row_stride,
                      std::int64_t head_stride, std::int64_t rows, std::int64_t width) {
  if (rows == 0) return;
  check<ShapeError>(ptr != nullptr, "attention: {} has no data", name);
  check<ShapeError>(batch_stride >= 0 && row_stride >= 0 && head_stride >= 0,
                    "attention: {} has a negative stride (batch {}, row {}, head {})", name, batch_stride, row_stride,
                    head_stride);
  check<ShapeError>(row_stride >= width,
                    "attention: {}'s rows are {} elements apart, fewer than their {} features (an expanded or "
                    "overlapping view: copy it first)",
                    name, row_stride, width);
}

}  // namespace multihead
