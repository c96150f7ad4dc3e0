// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/context.h"

#include <cblas.h>
#include <omp.h>

#include "multihead/core/threading.h"

namespace multihead {
namespace {

const RuntimeContext kDefaults{};
// The one mutable variable behind the contexts: which one this thread runs
// under. Per thread, and set only by the scopes below.
thread_local const RuntimeContext* t_bound = nullptr;

}  // namespace

const RuntimeContext& context() noexcept { return t_bound != nullptr ? *t_bound : kDefaults; }

ContextBinding::ContextBinding(const RuntimeContext& ctx) noexcept : outer_(t_bound) { t_bound = &ctx; }

ContextBinding::~ContextBinding() { t_bound = outer_; }

ContextScope::ContextScope(const RuntimeContext& ctx)
    : ctx_(ctx), saved_omp_(omp_get_max_threads()), saved_blas_(openblas_get_num_threads()), outer_(t_bound) {
  set_num_threads(ctx_.threads);  // checks it first
  t_bound = &ctx_;
}

ContextScope::~ContextScope() {
  t_bound = outer_;
  omp_set_num_threads(saved_omp_);
  openblas_set_num_threads(saved_blas_);
}

}  // namespace multihead
