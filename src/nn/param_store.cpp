// SPDX-License-Identifier: Apache-2.0
#include "multihead/nn/param_store.h"

#include <unistd.h>

#include <algorithm>
#include <limits>

#include "multihead/kernels/gemm_bf16.h"

namespace multihead {

ParamStore::Handle ParamStore::add(std::string name, Shape shape) {
  check(!finalized_, "cannot add parameter '{}' after the parameter store is finalized", name);
  check(!by_name_.contains(name), "duplicate parameter name '{}'", name);
  Entry e{name, std::move(shape), total_, 0};
  e.numel = shape_numel(e.shape);
  check<MemoryError>(e.numel <= std::numeric_limits<std::int64_t>::max() - total_, "parameter '{}' overflows the store",
                     name);
  total_ += e.numel;
  entries_.push_back(std::move(e));
  by_name_.emplace(std::move(name), entries_.size() - 1);
  return entries_.size() - 1;
}

void ParamStore::finalize() {
  check(!finalized_, "parameter store is already finalized");
  // Weights and gradients, before the optimizer's state: a model that
  // cannot fit is refused here rather than failing somewhere in training.
  const double need = 8.0 * static_cast<double>(total_);
  const double have = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  check<MemoryError>(have <= 0 || need <= have,
                     "the model's {} parameters need {:.1f} GiB for weights and gradients; this machine has {:.1f} GiB",
                     total_, need / (1ull << 30), have / (1ull << 30));
  data_ = Tensor({total_});
  grad_ = Tensor({total_});
  finalized_ = true;
}

void ParamStore::require_finalized() const { check(finalized_, "parameter store used before finalize()"); }

float* ParamStore::data(Handle h) {
  require_finalized();
  return data_.f32() + entries_.at(h).offset;
}
float* ParamStore::grad(Handle h) {
  require_finalized();
  return grad_.f32() + entries_.at(h).offset;
}
const float* ParamStore::data(Handle h) const {
  require_finalized();
  return data_.f32() + entries_.at(h).offset;
}
const float* ParamStore::grad(Handle h) const {
  require_finalized();
  return grad_.f32() + entries_.at(h).offset;
}
std::span<float> ParamStore::data_span(Handle h) {
  check(!frozen_, "parameter '{}' written after the parameter store was frozen", entries_.at(h).name);
  return {data(h), static_cast<std::size_t>(entries_.at(h).numel)};
}

void ParamStore::freeze(Precision inference) {
  require_finalized();
  frozen_ = true;
  if (inference == Precision::kInt8) {
    std::int64_t rows = 0;
    for (const Entry& e : entries_)
      if (e.shape.size() == 2) rows += e.shape[0];
    int8_values_.resize(static_cast<std::size_t>(total_));
    int8_scales_.resize(static_cast<std::size_t>(rows));
    int8_row_sums_.resize(static_cast<std::size_t>(rows));
    int8_.assign(entries_.size(), std::nullopt);
    int8_packs_ = make_int8_packs();
    std::int64_t row = 0;
    for (std::size_t h = 0; h < entries_.size(); ++h) {
      const Entry& e = entries_[h];
      if (e.shape.size() != 2) continue;
      std::int8_t* q = int8_values_.data() + e.offset;
      quantize_weight_rows(data_.f32() + e.offset, e.shape[0], e.shape[1], q, int8_scales_.data() + row,
                           int8_row_sums_.data() + row);
      int8_[h] = Int8Weight{q, int8_scales_.data() + row, int8_row_sums_.data() + row, int8_packs_.get()};
      row += e.shape[0];
    }
  }
  if (!computes_in_bf16(DType::kBF16) || total_ == 0 || inference == Precision::kInt8) return;
  bf16_ = Tensor({total_}, DType::kBF16);
  to_bf16(bf16_.data<BF16>(), data_.f32(), total_);
}

const BF16* ParamStore::bf16(Handle h) const {
  return bf16_.defined() ? bf16_.data<BF16>() + entries_.at(h).offset : nullptr;
}

const Int8Weight* ParamStore::int8(Handle h) const {
  if (int8_.empty()) return nullptr;
  const std::optional<Int8Weight>& w = int8_.at(h);
  return w ? &*w : nullptr;
}

std::optional<ParamStore::Handle> ParamStore::find(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::span<float> ParamStore::all_data() {
  require_finalized();
  check(!frozen_, "parameters written after the parameter store was frozen");
  return data_.span_f32();
}
std::span<float> ParamStore::all_grads() {
  require_finalized();
  return grad_.span_f32();
}
void ParamStore::zero_grad() {
  require_finalized();
  // Shared between the threads: one core writes a large model's gradients
  // (tens of MB) at well under the memory's bandwidth.
  constexpr std::int64_t kBlock = std::int64_t{1} << 16;
  float* g = grad_.f32();
  const std::int64_t blocks = (total_ + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 4)
  for (std::int64_t b = 0; b < blocks; ++b) std::fill(g + b * kBlock, g + std::min(total_, (b + 1) * kBlock), 0.0f);
}

std::vector<std::int64_t> ParamStore::grads_boundaries() const {
  std::vector<std::int64_t> b;
  for (std::int64_t o : grads_boundaries_)
    if (o > 0 && o < total_) b.push_back(o);
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}

}  // namespace multihead
