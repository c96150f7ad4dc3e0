// multihead._multihead: the attention kernels for Python. The Python side
// (multihead/torch.py) checks every tensor (device, dtype, shape, strides)
// and passes raw pointers to memory that PyTorch owns, so nothing is copied;
// these functions only trust what it checked. Errors of the library arrive in
// Python as ValueError; the GIL is released while the kernels run. Trained
// runs (tasks/trained_run.h) are exposed as they are.
#include <cstdint>
#include <string>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "multihead/core/error.h"
#include "multihead/core/tensor.h"
#include "multihead/core/threading.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_ref.h"
#include "multihead/kernels/machine.h"
#include "multihead/tasks/trained_run.h"
#include "multihead/version.h"

namespace py = pybind11;

namespace multihead::python {
namespace {

// A (B, positions, H * head_dim) view whose last dimension is contiguous:
// (pointer, batch stride, row stride), strides in elements. Head h starts at
// h * head_dim.
struct View {
  std::uintptr_t ptr = 0;
  std::int64_t batch_stride = 0, row_stride = 0;
};

template <typename T>
HeadsView<T> heads(const View& v, std::int64_t head_dim) {
  return {reinterpret_cast<T*>(v.ptr), v.batch_stride, v.row_stride, head_dim, 1};
}

// Masks as the Python side passes them: pointers (0: none) with
// nn.MultiheadAttention's polarity (nonzero bool = masked, floats added).
struct Masks {
  std::uintptr_t key_padding_bool = 0, key_padding_add = 0, attn_bool = 0, attn_add = 0;
  bool attn_per_head = false, causal = false;
  std::int64_t masked_cols = -1;  // keys the masks cover (-1: all); later ones are never masked

  template <typename T>
  AttentionMasks<T> get() const {
    AttentionMasks<T> m;
    m.key_padding_bool = reinterpret_cast<const std::uint8_t*>(key_padding_bool);
    m.key_padding_add = reinterpret_cast<const T*>(key_padding_add);
    m.attn_bool = reinterpret_cast<const std::uint8_t*>(attn_bool);
    m.attn_add = reinterpret_cast<const T*>(attn_add);
    m.attn_per_head = attn_per_head;
    m.causal = causal ? CausalAlign::kTopLeft : CausalAlign::kNone;
    m.masked_cols = masked_cols;
    return m;
  }
};

AttentionDims dims_of(const std::vector<std::int64_t>& d) {
  check<ShapeError>(d.size() == 6, "dims are (B, H, L, S, D, Dv), got {} numbers", d.size());
  return {d[0], d[1], d[2], d[3], d[4], d[5]};
}

// dtype: "float32" or "bfloat16", the tensors' element type (the masks' floats are float32).
template <typename F>
void by_dtype(const std::string& dtype, F&& f) {
  if (dtype == "float32") f(float{});
  else if (dtype == "bfloat16") f(BF16{});
  else throw ShapeError("the fused kernels take float32 or bfloat16 tensors, got " + dtype);
}

void fused_forward(const std::string& dtype, const View& out, std::uintptr_t lse, const View& q, const View& k,
                   const View& v, const std::vector<std::int64_t>& dims, const Masks& masks, double scale,
                   double dropout_p, std::uint64_t seed) {
  const AttentionDims d = dims_of(dims);
  by_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    attention_fused_forward<T>(heads<T>(out, d.Dv), reinterpret_cast<float*>(lse), heads<const T>(q, d.D),
                               heads<const T>(k, d.D), heads<const T>(v, d.Dv),
                               masks.get<float>(), d, static_cast<float>(scale),
                               AttentionDropout{static_cast<float>(dropout_p), seed, 0});
  });
}

void fused_backward(const std::string& dtype, const View& dq, const View& dk, const View& dv, std::uintptr_t lse,
                    const View& out, const View& dout, const View& q, const View& k, const View& v,
                    const std::vector<std::int64_t>& dims, const Masks& masks, double scale, double dropout_p,
                    std::uint64_t seed) {
  const AttentionDims d = dims_of(dims);
  by_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    attention_fused_backward<T>(heads<float>(dq, d.D), heads<float>(dk, d.D),
                                heads<float>(dv, d.Dv), reinterpret_cast<const float*>(lse),
                                heads<const T>(out, d.Dv), heads<const float>(dout, d.Dv), heads<const T>(q, d.D),
                                heads<const T>(k, d.D), heads<const T>(v, d.Dv),
                                masks.get<float>(), d, static_cast<float>(scale),
                                AttentionDropout{static_cast<float>(dropout_p), seed, 0});
  });
}

void fused_weights(const std::string& dtype, std::uintptr_t weights, bool average_heads, std::uintptr_t lse,
                   const View& q, const View& k, const std::vector<std::int64_t>& dims, const Masks& masks,
                   double scale, double dropout_p, std::uint64_t seed) {
  const AttentionDims d = dims_of(dims);
  by_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    attention_fused_weights<T>(reinterpret_cast<float*>(weights), average_heads, reinterpret_cast<const float*>(lse),
                               heads<const T>(q, d.D), heads<const T>(k, d.D), masks.get<float>(), d,
                               static_cast<float>(scale), AttentionDropout{static_cast<float>(dropout_p), seed, 0});
  });
}

// float64: the reference kernels, which keep the (B, H, L, S) probabilities.
void ref_forward(const View& out, std::uintptr_t probs, const View& q, const View& k, const View& v,
                 const std::vector<std::int64_t>& dims, const Masks& masks, double scale, double dropout_p,
                 std::uint64_t seed) {
  const AttentionDims d = dims_of(dims);
  attention_ref_forward<double>(heads<double>(out, d.Dv), reinterpret_cast<double*>(probs), heads<const double>(q, d.D),
                                heads<const double>(k, d.D), heads<const double>(v, d.Dv),
                                masks.get<double>(), d, scale, AttentionDropout{static_cast<float>(dropout_p), seed, 0});
}

void ref_backward(const View& dq, const View& dk, const View& dv, std::uintptr_t probs, const View& dout,
                  const View& q, const View& k, const View& v, const std::vector<std::int64_t>& dims,
                  const Masks& masks, double scale, double dropout_p, std::uint64_t seed) {
  const AttentionDims d = dims_of(dims);
  attention_ref_backward<double>(heads<double>(dq, d.D), heads<double>(dk, d.D),
                                 heads<double>(dv, d.Dv), reinterpret_cast<const double*>(probs),
                                 heads<const double>(dout, d.Dv), heads<const double>(q, d.D),
                                 heads<const double>(k, d.D), heads<const double>(v, d.Dv),
                                 masks.get<double>(), d, scale,
                                 AttentionDropout{static_cast<float>(dropout_p), seed, 0});
}

void ref_weights(std::uintptr_t weights, std::uintptr_t probs, const std::vector<std::int64_t>& dims,
                 bool average_heads, double dropout_p, std::uint64_t seed) {
  attention_weights_from_probs<double>(reinterpret_cast<double*>(weights), reinterpret_cast<const double*>(probs),
                                       dims_of(dims), average_heads,
                                       AttentionDropout{static_cast<float>(dropout_p), seed, 0});
}

}  // namespace
}  // namespace multihead::python

PYBIND11_MODULE(_multihead, m) {
  using namespace multihead;
  using namespace multihead::python;
  m.doc() = "multihead's attention kernels (see multihead.torch for the PyTorch functions built on them)";
  py::register_exception<Error>(m, "Error", PyExc_ValueError);

  py::class_<View>(m, "View")
      .def(py::init<std::uintptr_t, std::int64_t, std::int64_t>(), py::arg("ptr"), py::arg("batch_stride"),
           py::arg("row_stride"));
  py::class_<Masks>(m, "Masks")
      .def(py::init<>())
      .def_readwrite("key_padding_bool", &Masks::key_padding_bool)
      .def_readwrite("key_padding_add", &Masks::key_padding_add)
      .def_readwrite("attn_bool", &Masks::attn_bool)
      .def_readwrite("attn_add", &Masks::attn_add)
      .def_readwrite("attn_per_head", &Masks::attn_per_head)
      .def_readwrite("causal", &Masks::causal)
      .def_readwrite("masked_cols", &Masks::masked_cols);

  const auto release = py::call_guard<py::gil_scoped_release>();
  m.def("fused_forward", &fused_forward, release);
  m.def("fused_backward", &fused_backward, release);
  m.def("fused_weights", &fused_weights, release);
  m.def("ref_forward", &ref_forward, release);
  m.def("ref_backward", &ref_backward, release);
  m.def("ref_weights", &ref_weights, release);
  py::class_<TrainedRun>(m, "TrainedRun", "A finished run of `multihead train` (multihead.load_run)")
      .def_property_readonly("task", &TrainedRun::task)
      .def_property_readonly("labels", &TrainedRun::labels, "A classifier's class names")
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
              out.append(py::dict(py::arg("label") = p.label, py::arg("probabilities") = probabilities));
            }
            return out;
          },
          py::arg("texts"),
          "Each text's predicted label and class probabilities: [{'label': ..., 'probabilities': {...}}]")
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
        return TrainedRun::load(path.string(), threads,
                                precision.empty() ? std::nullopt : std::optional<Precision>(parse_precision(precision)));
      },
      py::arg("path"), py::arg("threads") = 0, py::arg("precision") = "",
      "The trained model of a run directory of `multihead train` (a text classifier, a language model or a "
      "pronunciation model)");
  m.def("set_num_threads", &set_num_threads, py::arg("threads"),
        "Threads for the kernels (0: all cores), as the CLI's --threads");
  m.def("machine", [] { return machine_summary(machine_info()); }, "The CPU and the kernels it runs");
  m.attr("__version__") = MULTIHEAD_VERSION;
}
