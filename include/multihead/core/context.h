// SPDX-License-Identifier: Apache-2.0
// The runtime context: the settings a computation runs under that are not
// the model's (its threads, the GEMM backend, where its step time is
// measured, the ranks it sums gradients over, a test aid). The library keeps
// no process-wide switch for any of them: an entry point (each CLI command,
// the server's threads, each Python call) makes a RuntimeContext and binds it to
// its thread with a ContextScope for as long as it calls the library, and
// the library reads it with context(). Two threads can so run under two
// contexts at once (a server's model thread beside a Python call), and a
// host process gets its own settings back when a call returns.
//
// Binding rather than a parameter on every forward and kernel: the context
// reaches every GEMM without a change to each signature in between. The
// cost is that a thread the library starts (a server's model thread, the
// workers of an OpenMP region that call a GEMM) must bind its starter's
// context itself (ContextBinding); a thread that binds none runs under the
// defaults.
#pragma once

namespace multihead {

class ProcessGroup;  // train/distributed.h
class StepProfile;   // core/step_profile.h

// Where float GEMMs run:
//   kOneDnn   oneDNN's sgemm (the default). It picks its kernels from the CPU
//             at run time, AVX-512 included, and threads through the same
//             OpenMP runtime as our kernels.
//   kOpenBlas OpenBLAS's cblas_sgemm, whose kernels follow OpenBLAS's own CPU
//             detection and the OPENBLAS_CORETYPE environment variable.
enum class GemmBackend { kOneDnn, kOpenBlas };

struct RuntimeContext {
  // OpenMP and BLAS threads (0: all cores), applied by ContextScope.
  int threads = 0;
  GemmBackend gemm = GemmBackend::kOneDnn;
  // Where a training step's time goes (`bench train`); null: not measured.
  StepProfile* profile = nullptr;
  // The ranks a data-parallel run sums its gradients over (the CLI's MPI
  // session); null: this process alone.
  ProcessGroup* group = nullptr;
  // New uninitialised tensors (Tensor::empty) filled with 0xFF bytes (NaN
  // for F32), so that a kernel reading what it never wrote fails in tests.
  bool poison_uninitialized = false;
};

// The calling thread's context: the innermost binding's, or the defaults.
const RuntimeContext& context() noexcept;

// Binds a context to the calling thread for its lifetime, and leaves thread
// counts alone: what a thread the library starts, or an OpenMP region's
// worker, uses to run under its starter's context. `ctx` must outlive it.
class ContextBinding {
 public:
  explicit ContextBinding(const RuntimeContext& ctx) noexcept;
  ~ContextBinding();
  ContextBinding(const ContextBinding&) = delete;
  ContextBinding& operator=(const ContextBinding&) = delete;

 private:
  const RuntimeContext* outer_;
};

// What an entry point makes: a copy of `ctx` bound to the calling thread,
// with its thread count applied to OpenMP and OpenBLAS; on destruction the
// outer binding and the thread counts there before come back. Checks the
// thread count (ConfigError).
class ContextScope {
 public:
  explicit ContextScope(const RuntimeContext& ctx);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  const RuntimeContext& get() const noexcept { return ctx_; }

 private:
  RuntimeContext ctx_;
  int saved_omp_, saved_blas_;
  const RuntimeContext* outer_;
};

}  // namespace multihead
