// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/embedding.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/train/hf_checkpoint.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_object(const fs::path& path) { return ConfigReader::parse(read_file(path.string()), path.string()); }

EmbeddingPooling::Mode pooling_mode(const fs::path& config) {
  const json j = read_object(config);
  check<IoError>(j.is_object(), "{}: not a JSON object", config.string());
  using Mode = EmbeddingPooling::Mode;
  const std::pair<const char*, Mode> modes[] = {{"pooling_mode_mean_tokens", Mode::kMean},
                                                {"pooling_mode_cls_token", Mode::kCls},
                                                {"pooling_mode_max_tokens", Mode::kMax},
                                                {"pooling_mode_mean_sqrt_len_tokens", Mode::kMeanSqrtLen}};
  std::vector<Mode> on;
  for (const auto& [key, mode] : modes)
    if (j.value(key, false)) on.push_back(mode);
  for (const char* other : {"pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
    check<IoError>(!j.value(other, false), "{}: \"{}\" is not read here (mean, cls, max and mean_sqrt_len are)",
                   config.string(), other);
  check<IoError>(on.size() == 1, "{}: names {} pooling modes; one is read here", config.string(), on.size());
  return on.front();
}

}  // namespace

std::string EmbeddingPooling::describe() const {
  const char* name = mode == Mode::kMean  ? "mean"
                     : mode == Mode::kCls ? "cls"
                     : mode == Mode::kMax ? "max"
                                          : "mean_sqrt_len";
  return fmt::format("{} pooling{}", name, normalize ? ", normalised" : "");
}

EmbeddingPooling embedding_pooling(const std::string& dir, Pooling model_pooling) {
  EmbeddingPooling p;
  const fs::path modules = fs::path(dir) / "modules.json";
  if (!fs::exists(modules)) {
    if (!is_hf_checkpoint(dir) && model_pooling == Pooling::kCls) p.mode = EmbeddingPooling::Mode::kCls;
    return p;
  }
  const json list = read_object(modules);
  check<IoError>(list.is_array(), "{}: not a list of modules", modules.string());
  bool pooled = false;
  for (const json& m : list) {
    const std::string type = m.is_object() ? m.value("type", std::string()) : std::string();
    if (type == "sentence_transformers.models.Transformer") continue;
    if (type == "sentence_transformers.models.Pooling") {
      const std::string path = m.value("path", std::string());
      check<IoError>(!path.empty() && path.find("..") == std::string::npos,
                     "{}: the Pooling module's path is not a folder of the model", modules.string());
      p.mode = pooling_mode(fs::path(dir) / path / "config.json");
      pooled = true;
    } else if (type == "sentence_transformers.models.Normalize") {
      p.normalize = true;
    } else {
      throw IoError(fmt::format("{}: the module \"{}\" is not read here (Transformer, Pooling and Normalize are)",
                                modules.string(), type));
    }
  }
  check<IoError>(pooled, "{}: no Pooling module", modules.string());
  return p;
}

std::vector<std::vector<float>> pool_embeddings(const Tensor& h, const Tensor& padding, const EmbeddingPooling& p) {
  const std::int64_t B = h.dim(0), L = h.dim(1), d = h.dim(2);
  const std::uint8_t* pad = padding.data<std::uint8_t>();
  std::vector<std::vector<float>> out(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<double> acc(static_cast<std::size_t>(d),
                            p.mode == EmbeddingPooling::Mode::kMax ? -std::numeric_limits<double>::infinity() : 0.0);
    std::int64_t n = 0;
    for (std::int64_t l = 0; l < L; ++l) {
      if (pad[b * L + l] || (p.mode == EmbeddingPooling::Mode::kCls && l > 0)) continue;
      const float* x = h.f32() + (b * L + l) * d;
      for (std::int64_t e = 0; e < d; ++e) {
        double& a = acc[static_cast<std::size_t>(e)];
        a = p.mode == EmbeddingPooling::Mode::kMax ? std::max(a, double{x[e]}) : a + x[e];
      }
      ++n;
    }
    const double scale = p.mode == EmbeddingPooling::Mode::kMean
                             ? 1.0 / static_cast<double>(std::max<std::int64_t>(n, 1))
                         : p.mode == EmbeddingPooling::Mode::kMeanSqrtLen
                             ? 1.0 / std::sqrt(static_cast<double>(std::max<std::int64_t>(n, 1)))
                             : 1.0;
    double norm = 0;
    for (double& a : acc) {
      a *= scale;
      norm += a * a;
    }
    // sentence-transformers' Normalize: x / max(||x||, 1e-12).
    const double by = p.normalize ? std::max(std::sqrt(norm), 1e-12) : 1.0;
    auto& v = out[static_cast<std::size_t>(b)];
    for (double a : acc) v.push_back(static_cast<float>(a / by));
  }
  return out;
}

}  // namespace multihead
