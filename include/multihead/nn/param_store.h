// SPDX-License-Identifier: Apache-2.0
// All parameters of a model in one flat buffer, and their gradients in a
// second buffer of the same layout. zero_grad, optimizer steps, clipping and
// checkpointing are then single passes over memory.
//
// Use is two-phase: modules declare named parameters (PyTorch state_dict
// names) while they are constructed, then finalize() allocates both buffers
// and the modules' handles resolve to pointers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <string>
#include <string_view>
#include <vector>

#include "multihead/core/precision.h"
#include "multihead/core/tensor.h"
#include "multihead/kernels/gemm_int8.h"

namespace multihead {

class ParamStore {
 public:
  struct Entry {
    std::string name;  // state_dict name, e.g. "self_attn.in_proj_weight"
    Shape shape;
    std::int64_t offset = 0;  // into the flat buffers, in elements
    std::int64_t numel = 0;
  };
  using Handle = std::size_t;

  // Declares a parameter; throws on a duplicate name or after finalize().
  Handle add(std::string name, Shape shape);
  // Allocates the zeroed parameter and gradient buffers.
  void finalize();
  bool finalized() const noexcept { return finalized_; }

  float* data(Handle h);
  float* grad(Handle h);
  const float* data(Handle h) const;
  const float* grad(Handle h) const;
  std::span<float> data_span(Handle h);

  const std::vector<Entry>& entries() const noexcept { return entries_; }
  const Entry& entry(Handle h) const { return entries_.at(h); }
  std::optional<Handle> find(std::string_view name) const;

  // Final weights, for inference: freeze() rounds every parameter to bf16
  // once, where the CPU multiplies in bf16 (computes_in_bf16), and bf16(h)
  // gives that copy (null before, or without bf16 products): the products
  // of bf16 inference read it instead of rounding their weights at every
  // call, which in a decoding step of a few rows costs as much as the
  // products. The writers of parameters (data_span, all_data) refuse a
  // frozen store.
  //
  // Frozen for int8 inference (Precision::kInt8), every matrix parameter
  // (two dimensions: the products' weights, embedding tables among them) is
  // also quantized once, per row (kernels/gemm_int8.h), and int8(h) gives
  // it (null otherwise): the fp32 products of the layers read it instead.
  void freeze(Precision inference = Precision::kF32);
  bool frozen() const noexcept { return frozen_; }
  const BF16* bf16(Handle h) const;
  const Int8Weight* int8(Handle h) const;

  std::int64_t numel() const noexcept { return total_; }
  // A fresh id for a module's dropout site (see ForwardContext).
  std::uint32_t new_random_site() noexcept { return next_site_++; }
  std::span<float> all_data();
  std::span<float> all_grads();
  void zero_grad();

  // Gradients final before the backward pass ends. Parameters are laid out
  // in construction order, and every model builds its embeddings, then its
  // layers in order, then its heads, while backward runs the other way: so
  // once layer i's backward is done, no later part of the pass writes a
  // gradient at or after layer i's first parameter. The layer stacks
  // declare those offsets as they are built (add_grads_boundary, called
  // before a layer adds its parameters, returns the offset its first one
  // gets) and say when the pass reaches one (grads_final_from); data-parallel
  // training sums the gradients between boundaries over the ranks while the pass
  // goes on (train/trainer.cpp). The boundaries, not the calls, cut the
  // buffer, so every rank sums the same pieces even where one runs no
  // backward (an empty micro-batch).
  std::int64_t add_grads_boundary() {
    grads_boundaries_.push_back(total_);
    return total_;
  }
  // Ascending, 0 and numel() excluded.
  std::vector<std::int64_t> grads_boundaries() const;
  void set_grads_final_hook(std::function<void(std::int64_t offset)> hook) { grads_final_hook_ = std::move(hook); }
  void grads_final_from(std::int64_t offset) const {
    if (grads_final_hook_) grads_final_hook_(offset);
  }

 private:
  void require_finalized() const;

  std::vector<Entry> entries_;
  std::unordered_map<std::string, Handle> by_name_;  // find in constant time, however deep the model
  std::int64_t total_ = 0;
  bool finalized_ = false;
  bool frozen_ = false;
  std::uint32_t next_site_ = 1;
  std::function<void(std::int64_t)> grads_final_hook_;
  std::vector<std::int64_t> grads_boundaries_;
  Tensor data_;  // (numel)
  Tensor grad_;  // (numel)
  Tensor bf16_;  // (numel) BF16, once frozen on a CPU with bf16 products
  // Frozen for int8: the values (numel, at each parameter's offset), and a
  // scale and a row sum per row of each matrix; int8_[h] points into them.
  std::vector<std::int8_t> int8_values_;
  std::vector<float> int8_scales_;
  std::vector<std::int32_t> int8_row_sums_;
  std::shared_ptr<Int8Packs> int8_packs_;  // the matrices' copies in the int8 kernels' layout
  std::vector<std::optional<Int8Weight>> int8_;
};

}  // namespace multihead
