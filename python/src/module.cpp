// SPDX-License-Identifier: Apache-2.0
// multihead._multihead: the attention kernels for Python. They take the
// torch tensors themselves and use PyTorch's memory in place (nothing is
// copied); multihead/torch.py arranges the layouts. Errors of the library
// arrive in Python as multihead.Error (a ValueError) and its kinds; the GIL
// is released while the kernels run. Trained runs (tasks/trained_run.h) are
// exposed as they are.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "multihead/core/error.h"
#include "multihead/core/tensor.h"
#include "multihead/core/context.h"
#include "multihead/core/threading.h"
#include "multihead/kernels/attention_checks.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_ref.h"
#include "multihead/kernels/machine.h"
#include "multihead/nn/attention_kernel.h"
#include "multihead/data/text_datasets.h"
#include "multihead/data/tokenizer.h"
#include "multihead/io/safetensors.h"
#include "multihead/tasks/export.h"
#include "multihead/tasks/jobs.h"
#include "multihead/tasks/presets.h"
#include "multihead/tasks/pronunciation.h"
#include "multihead/tasks/text_classification.h"
#include "multihead/train/fit.h"
#include "multihead/train/progress.h"
#include "multihead/tasks/trained_run.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/run_dir.h"
#include "multihead/version.h"

namespace py = pybind11;

namespace multihead::python {
namespace {

// Every tensor is read from the torch.Tensor itself (pointer, shape,
// strides, dtype), never from numbers the caller states, and checked against
// what the kernel will do with it: a tensor that does not fit is a ValueError,
// never memory read out of bounds. The Python objects stay referenced for the
// call, so their memory lives while the kernels run without the GIL.
struct TensorArg {
  std::uintptr_t ptr = 0;
  std::vector<std::int64_t> shape, strides;
  std::string dtype;  // "float32", "bfloat16", "float64", "uint8", ...

  std::int64_t dim() const { return static_cast<std::int64_t>(shape.size()); }
  bool contiguous() const {
    std::int64_t expect = 1;
    for (std::int64_t i = dim() - 1; i >= 0; --i) {
      if (shape[static_cast<std::size_t>(i)] != 1 && strides[static_cast<std::size_t>(i)] != expect) return false;
      expect *= shape[static_cast<std::size_t>(i)];
    }
    return true;
  }
  std::string shape_text() const { return fmt::format("({})", fmt::join(shape, ", ")); }
};

TensorArg tensor_arg(py::handle t, const char* name) {
  check<ShapeError>(py::hasattr(t, "data_ptr") && py::hasattr(t, "stride") && py::hasattr(t, "dtype"),
                    "{} must be a torch.Tensor", name);
  check<ShapeError>(py::str(t.attr("device").attr("type")).cast<std::string>() == "cpu", "{} must be on the CPU", name);
  check<ShapeError>(py::str(t.attr("layout")).cast<std::string>() == "torch.strided", "{} must be a dense tensor",
                    name);
  TensorArg a;
  a.ptr = t.attr("data_ptr")().cast<std::uintptr_t>();
  a.shape = t.attr("shape").cast<std::vector<std::int64_t>>();
  a.strides = t.attr("stride")().cast<std::vector<std::int64_t>>();
  std::string dtype = py::str(t.attr("dtype")).cast<std::string>();
  a.dtype = dtype.rfind("torch.", 0) == 0 ? dtype.substr(6) : dtype;
  for (const std::int64_t st : a.strides) check<ShapeError>(st >= 0, "{} has a negative stride", name);
  return a;
}

void expect_dtype(const TensorArg& a, const char* name, const std::string& dtype) {
  check<ShapeError>(a.dtype == dtype, "{} must be {}, got {}", name, dtype, a.dtype);
}

void expect_shape(const TensorArg& a, const char* name, const std::vector<std::int64_t>& shape) {
  const TensorArg want{0, shape, {}, ""};
  check<ShapeError>(a.shape == shape, "{} must be {}, got {}", name, want.shape_text(), a.shape_text());
}

// A (B, positions, H * head_dim) tensor whose last dimension is contiguous,
// as the kernels read heads from it: head h starts at h * head_dim.
template <typename T>
HeadsView<T> heads(const TensorArg& a, const char* name, std::int64_t H) {
  check<ShapeError>(a.dim() == 3, "{} must be 3-D (batch, positions, heads * features), got {}", name, a.shape_text());
  check<ShapeError>(a.shape[2] % H == 0 && a.shape[2] > 0, "{}'s {} features do not split into {} heads", name,
                    a.shape[2], H);
  check<ShapeError>(a.strides[2] == 1 || a.shape[2] == 1, "{}'s last dimension must be contiguous", name);
  return {reinterpret_cast<T*>(a.ptr), a.strides[0], a.strides[1], a.shape[2] / H, 1};
}

// A tensor of exactly this dtype and shape, contiguous: an output the kernel
// writes whole (no two elements share memory), a saved statistic or a mask it
// reads by plain offsets.
template <typename T>
T* dense(const TensorArg& a, const char* name, const std::string& dtype, const std::vector<std::int64_t>& shape) {
  expect_dtype(a, name, dtype);
  expect_shape(a, name, shape);
  check<ShapeError>(a.contiguous(), "{} must be contiguous", name);
  return reinterpret_cast<T*>(a.ptr);
}

// Masks with nn.MultiheadAttention's polarity (nonzero uint8 = masked, floats
// added): torch tensors, or None.
struct Masks {
  py::object key_padding_bool = py::none(), key_padding_add = py::none(), attn_bool = py::none(), attn_add = py::none();
  bool attn_per_head = false, causal = false;
  std::int64_t masked_cols = -1;  // keys the masks cover (-1: all); later ones are never masked

  // Checked against the call's sizes: key padding (B, cols), attn (L, cols) or (B*H, L, cols), contiguous.
  template <typename T>
  AttentionMasks<T> get(const AttentionDims& d, const std::string& float_dtype) const {
    check<ShapeError>(masked_cols >= -1 && masked_cols <= d.S, "masked_cols must be in [-1, {}], got {}", d.S,
                      masked_cols);
    const std::int64_t cols = masked_cols < 0 ? d.S : masked_cols;
    const std::vector<std::int64_t> padding{d.B, cols};
    const std::vector<std::int64_t> attn =
        attn_per_head ? std::vector<std::int64_t>{d.B * d.H, d.L, cols} : std::vector<std::int64_t>{d.L, cols};
    auto mask = [](const py::object& t, const char* name, const std::string& dtype,
                   const std::vector<std::int64_t>& shape) -> std::uintptr_t {
      if (t.is_none()) return 0;
      const TensorArg a = tensor_arg(t, name);
      return reinterpret_cast<std::uintptr_t>(dense<char>(a, name, dtype, shape));
    };
    AttentionMasks<T> m;
    m.key_padding_bool =
        reinterpret_cast<const std::uint8_t*>(mask(key_padding_bool, "key_padding_mask", "uint8", padding));
    m.key_padding_add = reinterpret_cast<const T*>(mask(key_padding_add, "key_padding_mask", float_dtype, padding));
    m.attn_bool = reinterpret_cast<const std::uint8_t*>(mask(attn_bool, "attn_mask", "uint8", attn));
    m.attn_add = reinterpret_cast<const T*>(mask(attn_add, "attn_mask", float_dtype, attn));
    m.attn_per_head = attn_per_head;
    m.causal = causal ? CausalAlign::kTopLeft : CausalAlign::kNone;
    m.masked_cols = masked_cols;
    return m;
  }
};

// The sizes of a call, from q (B, L, H*D), k (B, S, H*D) and v (B, S, H*Dv).
AttentionDims dims_of(const TensorArg& q, const TensorArg& k, const TensorArg& v, std::int64_t H) {
  check<ShapeError>(H >= 1, "heads must be at least 1, got {}", H);
  check<ShapeError>(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
                    "query, key and value must be 3-D (batch, positions, features), got {}, {} and {}", q.shape_text(),
                    k.shape_text(), v.shape_text());
  check<ShapeError>(
      k.shape[0] == q.shape[0] && v.shape[0] == q.shape[0] && v.shape[1] == k.shape[1] && k.shape[2] == q.shape[2],
      "key must be ({}, S, {}) and value ({}, S, Ev), got {} and {}", q.shape[0], q.shape[2], q.shape[0],
      k.shape_text(), v.shape_text());
  check<ShapeError>(q.shape[2] % H == 0 && v.shape[2] % H == 0 && q.shape[2] > 0 && v.shape[2] > 0,
                    "the features of query ({}) and value ({}) must split into {} heads", q.shape[2], v.shape[2], H);
  return {q.shape[0], H, q.shape[1], k.shape[1], q.shape[2] / H, v.shape[2] / H};
}

// dtype: float32 or bfloat16, the fused kernels' element types.
template <typename F>
void by_dtype(const std::string& dtype, F&& f) {
  if (dtype == "float32") f(float{});
  else if (dtype == "bfloat16") f(BF16{});
  else throw ShapeError("the fused kernels take float32 or bfloat16 tensors, got " + dtype);
}

struct Call {
  TensorArg q, k, v;
  AttentionDims d;
  Call(py::handle q_, py::handle k_, py::handle v_, std::int64_t H)
      : q(tensor_arg(q_, "query")), k(tensor_arg(k_, "key")), v(tensor_arg(v_, "value")) {
    d = dims_of(q, k, v, H);
    check<ShapeError>(k.dtype == q.dtype && v.dtype == q.dtype,
                      "query, key and value must have one dtype, got {}, "
                      "{} and {}",
                      q.dtype, k.dtype, v.dtype);
  }
  std::vector<std::int64_t> lse_shape() const { return {d.B, d.H, d.L}; }
  std::vector<std::int64_t> weights_shape(bool average) const {
    return average ? std::vector<std::int64_t>{d.B, d.L, d.S} : std::vector<std::int64_t>{d.B, d.H, d.L, d.S};
  }
};

void fused_forward(py::handle out, py::handle lse, py::handle q, py::handle k, py::handle v, std::int64_t heads_n,
                   const Masks& masks, double scale, double dropout_p, std::uint64_t seed) {
  const Call c(q, k, v, heads_n);
  const TensorArg o = tensor_arg(out, "out");
  float* lse_p = dense<float>(tensor_arg(lse, "lse"), "lse", "float32", c.lse_shape());
  by_dtype(c.q.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out_p = dense<T>(o, "out", c.q.dtype, {c.d.B, c.d.L, c.d.H * c.d.Dv});
    const HeadsView<T> out_v{out_p, c.d.L * c.d.H * c.d.Dv, c.d.H * c.d.Dv, c.d.Dv, 1};
    const AttentionMasks<float> m = masks.get<float>(c.d, "float32");
    const py::gil_scoped_release unlocked;
    attention_stored_forward<T>(out_v, lse_p, heads<const T>(c.q, "query", c.d.H), heads<const T>(c.k, "key", c.d.H),
                                heads<const T>(c.v, "value", c.d.H), m, c.d, static_cast<float>(scale),
                                AttentionDropout{static_cast<float>(dropout_p), seed, 0});
  });
}

// The gradients dq, dk, dv: contiguous float32 (float64 for the reference
// kernels) of q's, k's and v's shapes.
template <typename G>
struct Grads {
  HeadsView<G> dq, dk, dv;
  Grads(py::handle dq_, py::handle dk_, py::handle dv_, const Call& c, const std::string& dtype) {
    const AttentionDims& d = c.d;
    dq = {dense<G>(tensor_arg(dq_, "dq"), "dq", dtype, c.q.shape), d.L * d.H * d.D, d.H * d.D, d.D, 1};
    dk = {dense<G>(tensor_arg(dk_, "dk"), "dk", dtype, c.k.shape), d.S * d.H * d.D, d.H * d.D, d.D, 1};
    dv = {dense<G>(tensor_arg(dv_, "dv"), "dv", dtype, c.v.shape), d.S * d.H * d.Dv, d.H * d.Dv, d.Dv, 1};
  }
};

// dout (B, L, H*Dv) in the gradients' dtype, last dimension contiguous.
template <typename G>
HeadsView<const G> dout_view(py::handle dout, const Call& c, const std::string& dtype) {
  const TensorArg a = tensor_arg(dout, "dout");
  expect_dtype(a, "dout", dtype);
  expect_shape(a, "dout", {c.d.B, c.d.L, c.d.H * c.d.Dv});
  return heads<const G>(a, "dout", c.d.H);
}

void fused_backward(py::handle dq, py::handle dk, py::handle dv, py::handle lse, py::handle out, py::handle dout,
                    py::handle q, py::handle k, py::handle v, std::int64_t heads_n, Masks masks, double scale,
                    double dropout_p, std::uint64_t seed) {
  const Call c(q, k, v, heads_n);
  const Grads<float> g(dq, dk, dv, c, "float32");
  const float* lse_p = dense<float>(tensor_arg(lse, "lse"), "lse", "float32", c.lse_shape());
  const HeadsView<const float> dout_v = dout_view<float>(dout, c, "float32");
  const TensorArg o = tensor_arg(out, "out");
  by_dtype(c.q.dtype, [&](auto tag) {
    using T = decltype(tag);
    expect_dtype(o, "out", c.q.dtype);
    expect_shape(o, "out", {c.d.B, c.d.L, c.d.H * c.d.Dv});
    const AttentionMasks<float> m = masks.get<float>(c.d, "float32");
    const py::gil_scoped_release unlocked;
    attention_stored_backward<T>(g.dq, g.dk, g.dv, lse_p, heads<const T>(o, "out", c.d.H), dout_v,
                                 heads<const T>(c.q, "query", c.d.H), heads<const T>(c.k, "key", c.d.H),
                                 heads<const T>(c.v, "value", c.d.H), m, c.d, static_cast<float>(scale),
                                 AttentionDropout{static_cast<float>(dropout_p), seed, 0});
  });
}

void fused_weights(py::handle weights, bool average_heads, py::handle lse, py::handle q, py::handle k,
                   std::int64_t heads_n, Masks masks, double scale, double dropout_p, std::uint64_t seed) {
  const Call c(q, k, k, heads_n);
  float* w = dense<float>(tensor_arg(weights, "weights"), "weights", "float32", c.weights_shape(average_heads));
  const float* lse_p = dense<float>(tensor_arg(lse, "lse"), "lse", "float32", c.lse_shape());
  by_dtype(c.q.dtype, [&](auto tag) {
    using T = decltype(tag);
    const AttentionMasks<float> m = masks.get<float>(c.d, "float32");
    const py::gil_scoped_release unlocked;
    attention_fused_weights<T>(w, average_heads, lse_p, heads<const T>(c.q, "query", c.d.H),
                               heads<const T>(c.k, "key", c.d.H), m, c.d, static_cast<float>(scale),
                               AttentionDropout{static_cast<float>(dropout_p), seed, 0});
  });
}

// float64: the reference kernels, which keep the (B, H, L, S) probabilities.
void ref_forward(py::handle out, py::handle probs, py::handle q, py::handle k, py::handle v, std::int64_t heads_n,
                 const Masks& masks, double scale, double dropout_p, std::uint64_t seed) {
  const Call c(q, k, v, heads_n);
  expect_dtype(c.q, "query", "float64");
  const AttentionDims& d = c.d;
  double* out_p = dense<double>(tensor_arg(out, "out"), "out", "float64", {d.B, d.L, d.H * d.Dv});
  double* p = dense<double>(tensor_arg(probs, "probs"), "probs", "float64", {d.B, d.H, d.L, d.S});
  const AttentionMasks<double> m = masks.get<double>(d, "float64");
  const py::gil_scoped_release unlocked;
  attention_ref_forward<double>({out_p, d.L * d.H * d.Dv, d.H * d.Dv, d.Dv, 1}, p,
                                heads<const double>(c.q, "query", d.H), heads<const double>(c.k, "key", d.H),
                                heads<const double>(c.v, "value", d.H), m, d, scale,
                                AttentionDropout{static_cast<float>(dropout_p), seed, 0});
}

void ref_backward(py::handle dq, py::handle dk, py::handle dv, py::handle probs, py::handle dout, py::handle q,
                  py::handle k, py::handle v, std::int64_t heads_n, const Masks& masks, double scale, double dropout_p,
                  std::uint64_t seed) {
  const Call c(q, k, v, heads_n);
  expect_dtype(c.q, "query", "float64");
  const AttentionDims& d = c.d;
  const Grads<double> g(dq, dk, dv, c, "float64");
  const double* p = dense<double>(tensor_arg(probs, "probs"), "probs", "float64", {d.B, d.H, d.L, d.S});
  const HeadsView<const double> dout_v = dout_view<double>(dout, c, "float64");
  const AttentionMasks<double> m = masks.get<double>(d, "float64");
  const py::gil_scoped_release unlocked;
  attention_ref_backward<double>(g.dq, g.dk, g.dv, p, dout_v, heads<const double>(c.q, "query", d.H),
                                 heads<const double>(c.k, "key", d.H), heads<const double>(c.v, "value", d.H), m, d,
                                 scale, AttentionDropout{static_cast<float>(dropout_p), seed, 0});
}

void ref_weights(py::handle weights, py::handle probs, bool average_heads, double dropout_p, std::uint64_t seed) {
  const TensorArg pa = tensor_arg(probs, "probs");
  check<ShapeError>(pa.dim() == 4, "probs must be 4-D (B, H, L, S), got {}", pa.shape_text());
  const AttentionDims d{pa.shape[0], pa.shape[1], pa.shape[2], pa.shape[3], 1, 1};
  const double* p = dense<double>(pa, "probs", "float64", pa.shape);
  const std::vector<std::int64_t> shape =
      average_heads ? std::vector<std::int64_t>{d.B, d.L, d.S} : std::vector<std::int64_t>{d.B, d.H, d.L, d.S};
  double* w = dense<double>(tensor_arg(weights, "weights"), "weights", "float64", shape);
  const py::gil_scoped_release unlocked;
  attention_weights_from_probs<double>(w, p, d, average_heads,
                                       AttentionDropout{static_cast<float>(dropout_p), seed, 0});
}

// Python's `with ThreadCount(n):`, a context with n threads bound over the
// block (a call from Python runs under no other: the host's thread counts
// come back after).
class ThreadCount {
 public:
  explicit ThreadCount(int threads) : threads_(threads) { check_threads(threads); }
  void enter() { scope_.emplace(RuntimeContext{.threads = threads_}); }
  void exit() { scope_.reset(); }

 private:
  int threads_;
  std::optional<ContextScope> scope_;
};

// multihead.train: the library's one training loop (train_job) on a job
// given as JSON text, a preset's name or a file, into `out`. The GIL is
// released while it computes and taken for each record the run writes,
// which goes to on_step as a dict: a False answer stops the run after that
// step, its checkpoint kept, as SIGINT does the CLI; so does Ctrl-C
// (KeyboardInterrupt, raised again when the run has stopped), and an
// exception on_step raises (raised again the same way). Returns whether
// the run stopped before its end.
bool train(const std::string& kind, const std::string& config, const std::filesystem::path& out,
           const std::string& mode, const py::object& on_step, bool quiet) {
  const Job job = kind == "json"     ? job_from_json(ConfigReader::parse(config, "the config"), "the config")
                  : kind == "preset" ? preset_job(config)
                                     : job_from_file(config);
  check<ConfigError>(mode == "new" || mode == "resume" || mode == "overwrite",
                     "mode must be new, resume or overwrite, got '{}'", mode);
  const RunMode run_mode = mode == "resume"      ? RunMode::kResume
                           : mode == "overwrite" ? RunMode::kOverwrite
                                                 : RunMode::kNew;
  const ContextScope context(RuntimeContext{.threads = job_threads(job)});  // the host's counts come back after
  StopRequest stop;
  std::optional<py::error_already_set> raised;  // by on_step, or KeyboardInterrupt
  const py::object loads = py::module_::import("json").attr("loads");
  Progress progress(0, stderr, quiet);
  progress.set_observer([&](const nlohmann::json& record) {
    const py::gil_scoped_acquire gil;
    if (raised) return;
    try {
      // Ctrl-C arrives as Python's KeyboardInterrupt, where Python code can run.
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (on_step.is_none()) return;
      const py::object answer = on_step(loads(record.dump()));
      if (!answer.is_none() && !py::bool_(answer)) stop.request(kStopAskedByCaller);
    } catch (py::error_already_set& e) {
      raised.emplace(std::move(e));
      stop.request(kStopAskedByCaller);
    }
  });
  bool stopped = false;
  {
    const py::gil_scoped_release unlocked;
    try {
      train_job(job, out.string(), run_mode, progress, &stop);
    } catch (const Interrupted&) {
      stopped = true;
    }
  }
  progress.set_observer(nullptr);
  if (raised) throw std::move(*raised);
  return stopped;
}

// A copy of t as a NumPy array of its dtype (F32, I64 or BOOL).
py::array to_numpy(const Tensor& t) {
  const std::vector<std::int64_t> shape(t.shape().begin(), t.shape().end());
  auto copy = [&](auto tag) {
    using T = decltype(tag);
    py::array_t<T> a(shape);
    std::memcpy(a.mutable_data(), t.raw(), t.nbytes());
    return py::array(a);
  };
  switch (t.dtype()) {
    case DType::kF32: return copy(float{});
    case DType::kI64: return copy(std::int64_t{});
    case DType::kBool: return copy(bool{});
    default: throw ShapeError(fmt::format("a {} tensor has no NumPy form here", dtype_name(t.dtype())));
  }
}

}  // namespace
}  // namespace multihead::python

PYBIND11_MODULE(_multihead, m) {
  using namespace multihead;
  using namespace multihead::python;
  m.doc() = "multihead's attention kernels (see multihead.torch for the PyTorch functions built on them)";
  // The library's errors as Python exceptions: multihead.Error (a ValueError)
  // and its kinds; the standard ones (std::bad_alloc, std::invalid_argument,
  // ...) go through pybind11's own translations. The most derived are
  // registered last, so that they are tried first.
  auto error = py::register_exception<Error>(m, "Error", PyExc_ValueError);
  py::register_exception<ShapeError>(m, "ShapeError", error.ptr());
  py::register_exception<ConfigError>(m, "ConfigError", error.ptr());
  py::register_exception<IoError>(m, "IoError", error.ptr());
  // pybind11's translator type takes the pointer by value.
  py::register_exception_translator([](std::exception_ptr p) {  // NOLINT(performance-unnecessary-value-param)
    try {
      if (p) std::rethrow_exception(p);
    } catch (const MemoryError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });

  py::class_<Masks>(m, "Masks",
                    "Masks with nn.MultiheadAttention's polarity: uint8 tensors (nonzero: masked) "
                    "or float tensors (added), or None")
      .def(py::init<>())
      .def_readwrite("key_padding_bool", &Masks::key_padding_bool)
      .def_readwrite("key_padding_add", &Masks::key_padding_add)
      .def_readwrite("attn_bool", &Masks::attn_bool)
      .def_readwrite("attn_add", &Masks::attn_add)
      .def_readwrite("attn_per_head", &Masks::attn_per_head)
      .def_readwrite("causal", &Masks::causal)
      .def_readwrite("masked_cols", &Masks::masked_cols);

  const auto release = py::call_guard<py::gil_scoped_release>();
  using py::arg;
  m.def("fused_forward", &fused_forward, arg("out"), arg("lse"), arg("query"), arg("key"), arg("value"), arg("heads"),
        arg("masks"), arg("scale"), arg("dropout_p"), arg("seed"));
  m.def("fused_backward", &fused_backward, arg("dq"), arg("dk"), arg("dv"), arg("lse"), arg("out"), arg("dout"),
        arg("query"), arg("key"), arg("value"), arg("heads"), arg("masks"), arg("scale"), arg("dropout_p"),
        arg("seed"));
  m.def("fused_weights", &fused_weights, arg("weights"), arg("average_heads"), arg("lse"), arg("query"), arg("key"),
        arg("heads"), arg("masks"), arg("scale"), arg("dropout_p"), arg("seed"));
  m.def("ref_forward", &ref_forward, arg("out"), arg("probs"), arg("query"), arg("key"), arg("value"), arg("heads"),
        arg("masks"), arg("scale"), arg("dropout_p"), arg("seed"));
  m.def("ref_backward", &ref_backward, arg("dq"), arg("dk"), arg("dv"), arg("probs"), arg("dout"), arg("query"),
        arg("key"), arg("value"), arg("heads"), arg("masks"), arg("scale"), arg("dropout_p"), arg("seed"));
  m.def("ref_weights", &ref_weights, arg("weights"), arg("probs"), arg("average_heads"), arg("dropout_p"), arg("seed"));
  py::class_<TrainedRun>(m, "TrainedRun", "A finished run of `multihead train` (multihead.load_run)")
      .def_property_readonly("task", &TrainedRun::task)
      .def_property_readonly("labels", &TrainedRun::labels, "A classifier's class names")
      .def_property_readonly("warnings", &TrainedRun::warnings,
                             "What the load noticed and worked around (a classifier without results.json)")
      .def(
          "predict",
          [](TrainedRun& run, const std::vector<std::string>& texts) {
            std::vector<Prediction> predictions;
            {
              py::gil_scoped_release unlocked;
              predictions = run.predict(texts);
            }
            const std::vector<std::string> labels = run.labels();
            py::list out;
            for (const Prediction& p : predictions) {
              py::dict probabilities;
              for (std::size_t c = 0; c < labels.size(); ++c) probabilities[py::str(labels[c])] = p.probabilities[c];
              py::dict answer(py::arg("label") = p.label, py::arg("probabilities") = probabilities);
              if (p.truncated) answer["truncated"] = true;  // as predict --json says it
              out.append(std::move(answer));
            }
            return out;
          },
          py::arg("texts"),
          "Each text's predicted label and class probabilities: [{'label': ..., 'probabilities': {...}}], "
          "with 'truncated': True for a text cut to the model's length")
      .def(
          "embed",
          [](TrainedRun& run, const std::vector<std::string>& texts) {
            std::vector<std::vector<float>> vectors;
            {
              py::gil_scoped_release unlocked;
              vectors = run.embed(texts);
            }
            const auto d = static_cast<py::ssize_t>(vectors.empty() ? 0 : vectors.front().size());
            py::array_t<float> out({static_cast<py::ssize_t>(vectors.size()), d});
            for (std::size_t i = 0; i < vectors.size(); ++i)
              std::copy(vectors[i].begin(), vectors[i].end(), out.mutable_data(static_cast<py::ssize_t>(i), 0));
            return out;
          },
          py::arg("texts"), "Each text's sentence embedding: an array (len(texts), d_model) of float32")
      .def(
          "generate",
          [](TrainedRun& run, const std::string& prompt, std::int64_t tokens, double temperature, std::int64_t top_k,
             double top_p, std::uint64_t seed) {
            return run.generate(prompt, tokens, SamplingConfig{temperature, top_k, top_p, seed});
          },
          py::arg("prompt"), py::arg("tokens") = 200, py::arg("temperature") = 0.8, py::arg("top_k") = 0,
          py::arg("top_p") = 0.95, py::arg("seed") = 0, release,
          "A language model's continuation of prompt (temperature 0: greedy)")
      .def(
          "generate_batch",
          [](TrainedRun& run, const std::vector<std::string>& prompts, std::int64_t tokens, double temperature,
             std::int64_t top_k, double top_p, std::uint64_t seed) {
            return run.generate_batch(prompts, tokens, SamplingConfig{temperature, top_k, top_p, seed});
          },
          py::arg("prompts"), py::arg("tokens") = 200, py::arg("temperature") = 0.8, py::arg("top_k") = 0,
          py::arg("top_p") = 0.95, py::arg("seed") = 0, release,
          "Prompts of equal token count continued together, a batch row each")
      .def(
          "pronounce",
          [](TrainedRun& run, const std::vector<std::string>& words, std::int64_t n_best, std::int64_t beam) {
            std::vector<std::vector<Pronounced>> got;
            {
              py::gil_scoped_release unlocked;
              got = run.pronounce(words, n_best, beam);
            }
            py::list out;
            for (const auto& word : got) {
              py::list alternatives;
              for (const Pronounced& p : word)
                alternatives.append(py::dict(py::arg("phonemes") = p.phonemes, py::arg("log_prob") = p.log_prob,
                                             py::arg("score") = p.score, py::arg("ended") = p.ended));
              out.append(alternatives);
            }
            return out;
          },
          py::arg("words"), py::arg("n_best") = 1, py::arg("beam") = 0,
          "A pronunciation run's n_best pronunciations of each word, best first (beam 0: the run's width): "
          "[[{'phonemes': [...], 'log_prob': ..., 'score': ..., 'ended': ...}, ...], ...]")
      .def(
          "attention",
          [](TrainedRun& run, const std::string& text, std::int64_t max_tokens) {
            AttentionMaps maps;
            {
              py::gil_scoped_release unlocked;
              maps = run.attention(text, max_tokens);
            }
            py::array_t<float> weights({maps.layers, maps.heads, maps.T, maps.S});
            std::copy(maps.weights.begin(), maps.weights.end(), weights.mutable_data());
            py::dict out(py::arg("tokens") = maps.tokens, py::arg("weights") = weights);
            out["prediction"] = maps.prediction.empty() ? py::object(py::none()) : py::object(py::str(maps.prediction));
            return out;
          },
          py::arg("text"), py::arg("max_tokens") = 64,
          "Every layer's and head's attention over text: {'tokens': [...], 'weights': array (layers, heads, T, T), "
          "'prediction': a classifier's label or None}");
  m.def(
      "load_run",
      [](const std::filesystem::path& path, int threads, const std::string& precision) {
        const ContextScope context(RuntimeContext{.threads = threads});
        return TrainedRun::load(
            path.string(), precision.empty() ? std::nullopt : std::optional<Precision>(parse_precision(precision)));
      },
      py::arg("path"), py::arg("threads") = 0, py::arg("precision") = "",
      "The trained model of a run directory of `multihead train` (a text classifier, a language model or a "
      "pronunciation model)");
  py::class_<Tokenizer>(m, "Tokenizer", "A run's tokenizer: text to token ids and back, as the run reads its data")
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, std::optional<std::size_t> max_tokens) {
            return max_tokens ? t.encode_prefix(text, *max_tokens) : t.encode(text);
          },
          py::arg("text"), py::arg("max_tokens") = py::none(),
          "The text's token ids (no <cls> or <eos> added); with max_tokens, the first max_tokens of them, "
          "as a run cuts a long input (reading only as much of the text as they need)")
      .def("decode", &Tokenizer::decode, py::arg("ids"), "The text of token ids")
      .def("piece", &Tokenizer::piece, py::arg("id"), "A printable label of one id")
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("kind", &Tokenizer::kind, "sentencepiece, char, word, wordpiece, hf_bpe or hf_unigram")
      .def_static(
          "load", [](const std::filesystem::path& dir) { return Tokenizer::load(dir.string()); }, py::arg("dir"),
          "The tokenizer in a folder: a run's tokenizer/, or a Hugging Face checkpoint's tokenizer.json or vocab.txt")
      .def_property_readonly(
          "frame",
          [](const Tokenizer& t) {
            const TokenFrame f = t.frame();
            return py::dict(py::arg("before") = f.before, py::arg("after") = f.after, py::arg("pad") = f.pad,
                            py::arg("unk") = f.unk);
          },
          "The ids each input is framed with ({'before': [CLS]'s, 'after': [SEP]'s}) and padded with")
      .def_property_readonly_static("pad_id", [](const py::object&) { return kPadId; })
      .def_property_readonly_static("unk_id", [](const py::object&) { return kUnkId; })
      .def_property_readonly_static("cls_id", [](const py::object&) { return kClsId; })
      .def_property_readonly_static("eos_id", [](const py::object&) { return kEosId; });
  m.def(
      "export_run",
      [](const std::filesystem::path& run, const std::string& format, const std::filesystem::path& out) {
        return export_run(run.string(), format, out.string());
      },
      py::arg("run"), py::arg("format"), py::arg("out"), release,
      "Writes the run in another library's layout (format 'hf': transformers' BertForSequenceClassification)");
  m.def(
      "run_config", [](const std::filesystem::path& path) { return read_run_config(path.string()).json.dump(); },
      py::arg("path"), release, "The job of a run directory, as config.json holds it (JSON text)");
  m.def(
      "run_tokenizer",
      [](const std::filesystem::path& path, std::int64_t vocab_size) {
        return load_run_tokenizer(path.string(), vocab_size);
      },
      py::arg("path"), py::arg("vocab_size"), release,
      "A run directory's tokenizer, checked against the vocabulary size its config records");
  m.def(
      "run_weights",
      [](const std::filesystem::path& path) {
        TensorMap weights;
        {
          py::gil_scoped_release unlocked;
          weights = run_weights(path.string());
        }
        py::dict out;
        for (const auto& [name, t] : weights) out[py::str(name)] = to_numpy(t);
        return out;
      },
      py::arg("path"), "The weights of a run's last checkpoint by state_dict name, as NumPy arrays");
  m.def(
      "run_test_texts",
      [](const std::filesystem::path& path) {
        TestTexts test;
        {
          py::gil_scoped_release unlocked;
          test = run_test_texts(path.string());
        }
        return py::make_tuple(test.inputs, test.answers);  // Python objects: with the GIL
      },
      py::arg("path"),
      "A text classification or pronunciation run's test split: (texts, their labels' names) or (words, their "
      "first pronunciations)");
  py::class_<PronunciationVocab>(m, "PronunciationVocab",
                                 "A pronunciation run's vocabularies: a word's letters to ids, phoneme ids to symbols")
      .def(
          "encode",
          [](const PronunciationVocab& v, const std::string& word) {
            check_utf8(word, "a word");
            return v.encode_word(cmudict_spelling(word));
          },
          py::arg("word"), "The word's letter ids as the model reads them (ASCII upper-cased; unknown letters as 1)")
      .def("decode", &PronunciationVocab::decode_phonemes, py::arg("ids"),
           "The phoneme symbols of ids (no start or end id)")
      .def_readonly("letters", &PronunciationVocab::letters, "The letters of ids 2, 3, ...")
      .def_readonly("phonemes", &PronunciationVocab::phonemes, "The phonemes of ids 3, 4, ...")
      .def_property_readonly_static("pad_id", [](const py::object&) { return PronunciationVocab::kPad; })
      .def_property_readonly_static("start_id", [](const py::object&) { return PronunciationVocab::kStart; })
      .def_property_readonly_static("end_id", [](const py::object&) { return PronunciationVocab::kEnd; });
  m.def(
      "run_pronunciation_vocab", [](const std::filesystem::path& path) { return load_run_vocab(path.string()); },
      py::arg("path"), release, "A pronunciation run's vocabularies (its vocab.json)");
  m.def(
      "sample_run_model",
      [](const std::filesystem::path& path, std::int64_t examples, bool training) {
        std::optional<ModelSample> sample;
        {
          py::gil_scoped_release unlocked;
          sample.emplace(sample_run_model(path.string(), ModelSampleSettings{examples, training}));
        }
        py::dict inputs;
        for (const auto& [name, t] : sample->inputs) inputs[py::str(name)] = to_numpy(t);
        return py::make_tuple(inputs, to_numpy(sample->logits));
      },
      py::arg("path"), py::arg("examples") = 8, py::arg("training") = false,
      "A batch of the run's own test data as the model reads it, and the model's fp32 logits for it: "
      "(inputs by name, logits); training: training mode with dropout 0");
  m.def(
      "save_state_dict",
      [](const std::filesystem::path& path, const py::dict& tensors) {
        TensorMap out;
        for (const auto& [key, value] : tensors) {
          const auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(value);
          const std::string name = py::str(key);
          check<ShapeError>(static_cast<bool>(a), "'{}' is not an array of numbers", name);
          Tensor t(Shape(a.shape(), a.shape() + a.ndim()));
          std::memcpy(t.raw(), a.data(), t.nbytes());
          out.emplace(name, std::move(t));
        }
        py::gil_scoped_release unlocked;
        write_safetensors(path.string(), out);
      },
      py::arg("path"), py::arg("tensors"), "Writes arrays by name as a safetensors file of F32 tensors (atomically)");
  m.def("train", &train, py::arg("kind"), py::arg("config"), py::arg("out"), py::arg("mode"), py::arg("on_step"),
        py::arg("quiet"),
        "Trains the job (kind: json, preset or file) into out; returns whether it stopped before its end "
        "(multihead.train)");
  m.def("set_num_threads", &set_num_threads, py::arg("threads"),
        "Threads for the kernels (0: all cores), as the CLI's --threads, from now on in this thread");
  m.def("num_threads", &num_threads, "The calling thread's OpenMP thread count");
  py::class_<ThreadCount>(m, "ThreadCount",
                          "with ThreadCount(n): the kernels called inside run on n threads (0: all cores); the "
                          "thread's OpenMP and OpenBLAS counts are the host's again after")
      .def(py::init<int>(), py::arg("threads"))
      .def("__enter__", [](ThreadCount& t) { t.enter(); })
      .def("__exit__", [](ThreadCount& t, const py::args&) { t.exit(); });
  m.def(
      "machine", [] { return machine_summary(machine_info()); }, "The CPU and the kernels it runs");
  m.def(
      "kinds",
      [] {
        py::list out;
        for (const KindInfo& k : kinds())
          out.append(py::dict(py::arg("task") = k.task, py::arg("noun") = k.noun,
                              py::arg("answers") = run_answers_name(k.answers),
                              py::arg("model") = model_family_name(k.model)));
        return out;
      },
      "The registry of kinds (tasks/kinds.h): each kind's task, noun, what its loaded run answers "
      "(none, classify, generate, pronounce) and its model family");
  m.attr("__version__") = MULTIHEAD_VERSION;
}
