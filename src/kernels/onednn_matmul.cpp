// SPDX-License-Identifier: Apache-2.0
#include "onednn_matmul.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "multihead/core/error.h"

namespace multihead {
namespace {

// One cached primitive per product shape (MatmulKey: the types, the strides,
// alpha and beta as an output scale and a sum post-op, whether a bias row is
// added).
struct MatmulKeyHash {
  std::size_t operator()(const MatmulKey& k) const noexcept {
    std::size_t h = 0;
    auto mix = [&](std::uint64_t v) {
      h ^= std::hash<std::uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    };
    for (std::int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc}) mix(static_cast<std::uint64_t>(v));
    std::uint32_t a, b;
    std::memcpy(&a, &k.alpha, 4);
    std::memcpy(&b, &k.beta, 4);
    mix((std::uint64_t{a} << 32) | b);
    mix((k.ta ? 1u : 0u) | (k.tb ? 2u : 0u) | (k.bias ? 4u : 0u) | (k.packed_b ? 8u : 0u));
    mix((std::uint64_t{static_cast<std::uint32_t>(k.a_type)} << 32) ^
        (std::uint64_t{static_cast<std::uint32_t>(k.b_type)} << 16) ^ static_cast<std::uint32_t>(k.c_type));
    return h;
  }
};

struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, bias;  // bias: (1, N), or empty
  std::size_t scratchpad_bytes = 0;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Strides of a row-major (rows, cols) operand or of its transpose stored
// (cols, rows) with row stride ld.
dnnl::memory::desc operand_desc(std::int64_t rows, std::int64_t cols, std::int64_t ld, bool transposed,
                                dnnl_data_type_t type) {
  const auto dt = static_cast<dnnl::memory::data_type>(type);
  const dnnl::memory::dims strides = transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc({rows, cols}, dt, strides);
}

std::shared_ptr<const Matmul> create_matmul(const MatmulKey& k) {
  using dt = dnnl::memory::data_type;
  auto m = std::make_shared<Matmul>();
  m->a = operand_desc(k.M, k.K, k.lda, k.ta, k.a_type);
  // Packed: oneDNN picks B's layout (any), the primitive's pd says which.
  m->b = k.packed_b ? dnnl::memory::desc({k.K, k.N}, static_cast<dnnl::memory::data_type>(k.b_type),
                                         dnnl::memory::format_tag::any)
                    : operand_desc(k.K, k.N, k.ldb, k.tb, k.b_type);
  m->c = operand_desc(k.M, k.N, k.ldc, false, k.c_type);
  dnnl::primitive_attr attr;
  // The caller's threads may run products side by side: each call brings its
  // own scratchpad rather than sharing the library's.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
  if (k.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(k.beta);
    attr.set_post_ops(ops);
  }
  if (k.bias) m->bias = dnnl::memory::desc({1, k.N}, dt::f32, dnnl::memory::dims{k.N, 1});
  const dnnl::matmul::primitive_desc pd(
      k.bias ? dnnl::matmul::desc(m->a, m->b, m->bias, m->c) : dnnl::matmul::desc(m->a, m->b, m->c), attr,
      cpu_engine());
  m->scratchpad_bytes = pd.scratchpad_desc().get_size();
  m->b = pd.weights_desc();
  m->primitive = dnnl::matmul(pd);
  return m;
}

std::shared_ptr<const Matmul> cached_matmul(const MatmulKey& k) {
  static std::mutex mutex;
  static std::unordered_map<MatmulKey, std::shared_ptr<const Matmul>, MatmulKeyHash> cache;
  const std::lock_guard lock(mutex);
  if (auto it = cache.find(k); it != cache.end()) return it->second;
  // A model uses a few dozen shapes; a stream of new ones (varying sequence
  // lengths) starts the cache over rather than growing it without bound.
  if (cache.size() >= 1024) cache.clear();
  try {
    return cache.emplace(k, create_matmul(k)).first->second;
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN matmul unavailable for M={} N={} K={} ({} x {} -> {}): {}", k.M, k.N, k.K,
                            dnnl_dt2str(k.a_type), dnnl_dt2str(k.b_type), dnnl_dt2str(k.c_type), e.what()));
  }
}

// A primitive bound to its memory objects, for one thread: a call only
// points them at the operands. Attention runs thousands of small products a
// step, where creating the memory objects and the argument map each call
// would cost about as much as the product.
struct BoundMatmul {
  std::shared_ptr<const Matmul> matmul;
  dnnl::memory a, b, c, bias, scratchpad;
  std::unordered_map<int, dnnl::memory> args;
};

BoundMatmul bind(const MatmulKey& k) {
  BoundMatmul bm;
  bm.matmul = cached_matmul(k);
  dnnl::engine& engine = cpu_engine();
  bm.a = dnnl::memory(bm.matmul->a, engine, nullptr);
  bm.b = dnnl::memory(bm.matmul->b, engine, nullptr);
  bm.c = dnnl::memory(bm.matmul->c, engine, nullptr);
  bm.args = {{DNNL_ARG_SRC, bm.a}, {DNNL_ARG_WEIGHTS, bm.b}, {DNNL_ARG_DST, bm.c}};
  if (k.bias) {
    bm.bias = dnnl::memory(bm.matmul->bias, engine, nullptr);
    bm.args.emplace(DNNL_ARG_BIAS, bm.bias);
  }
  if (bm.matmul->scratchpad_bytes > 0) {
    bm.scratchpad = dnnl::memory(dnnl::memory::desc({static_cast<dnnl::memory::dim>(bm.matmul->scratchpad_bytes)},
                                                    dnnl::memory::data_type::u8, dnnl::memory::format_tag::x),
                                 engine, nullptr);
    bm.args.emplace(DNNL_ARG_SCRATCHPAD, bm.scratchpad);
  }
  return bm;
}

}  // namespace

void onednn_matmul(const MatmulKey& k, const void* A, const void* B, void* C, const float* bias) {
  thread_local std::unordered_map<MatmulKey, BoundMatmul, MatmulKeyHash> bound;
  thread_local dnnl::stream stream(cpu_engine());
  thread_local std::vector<std::uint8_t> scratchpad;
  auto it = bound.find(k);
  if (it == bound.end()) {
    if (bound.size() >= 1024) bound.clear();  // as the shared cache: a stream of new shapes starts over
    it = bound.emplace(k, bind(k)).first;
  }
  BoundMatmul& bm = it->second;
  // oneDNN takes non-const handles; it only reads the sources.
  bm.a.set_data_handle(const_cast<void*>(A));
  bm.b.set_data_handle(const_cast<void*>(B));
  bm.c.set_data_handle(C);
  if (k.bias) bm.bias.set_data_handle(const_cast<float*>(bias));
  if (bm.matmul->scratchpad_bytes > 0) {
    if (scratchpad.size() < bm.matmul->scratchpad_bytes) scratchpad.resize(bm.matmul->scratchpad_bytes);
    bm.scratchpad.set_data_handle(scratchpad.data());
  }
  bm.matmul->primitive.execute(stream, bm.args);
  stream.wait();
}

dnnl_memory_desc_t onednn_packed_b_layout(const MatmulKey& k) { return cached_matmul(k)->b.data; }

std::size_t onednn_packed_b_bytes(const MatmulKey& k) { return cached_matmul(k)->b.get_size(); }

void onednn_pack_b(const MatmulKey& k, const void* B, void* packed) {
  const std::shared_ptr<const Matmul> m = cached_matmul(k);
  dnnl::engine& engine = cpu_engine();
  dnnl::memory plain(operand_desc(k.K, k.N, k.ldb, k.tb, k.b_type), engine, const_cast<void*>(B));
  dnnl::memory into(m->b, engine, packed);
  dnnl::stream stream(engine);
  dnnl::reorder(plain, into).execute(stream, plain, into);
  stream.wait();
}

}  // namespace multihead
