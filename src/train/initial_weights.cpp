// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/initial_weights.h"

#include <openssl/evp.h>

#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/nn/state_dict.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/hf_checkpoint.h"
#include "multihead/train/run_dir.h"

namespace multihead {

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  check(EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) == 1,
        "SHA-256 could not be computed");
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

InitialWeights read_initial_weights(const std::string& from) {
  namespace fs = std::filesystem;
  InitialWeights w;
  if (is_hf_checkpoint(from)) {
    const HfCheckpoint c = read_hf_checkpoint(from);
    w.file = c.weights_path;
    w.tensors = hf_model_tensors(c);
    // A new head for new labels: one the checkpoint lacks, or has for another number of classes, starts afresh.
    w.optional = kHfHeadParameters;
  } else if (fs::is_directory(from)) {
    w.file = answer_checkpoint_path(from);  // the weights the run answers with: its best, when it kept one
    w.tensors = run_weights(from);
    w.warning = run_checkpoint_warning(from);
  } else {
    check<IoError>(fs::is_regular_file(from), "{}: no run directory or safetensors file there", from);
    w.file = from;
    const SafetensorsFile f = SafetensorsFile::read(from);
    // A multihead checkpoint is checked as one; a state_dict from elsewhere has no format.
    if (f.metadata().contains("format")) w.warning = checkpoint_format_warning(f.metadata(), from);
    TensorMap all = f.all_tensors();
    w.tensors = take_model_tensors(all);
  }
  w.sha256 = sha256_hex(read_file(w.file, kMaxWeightsBytes));
  return w;
}

std::vector<std::string> apply_initial_weights(ParamStore& store, const InitialWeights& w, const std::string& skip) {
  std::optional<std::regex> pattern;
  if (!skip.empty()) {
    try {
      pattern.emplace(skip, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw ConfigError(fmt::format("init_skip '{}' is not a regular expression: {}", skip, e.what()));
    }
  }
  auto skipped = [&](const std::string& name) { return pattern && std::regex_search(name, *pattern); };
  const std::optional<std::regex> optional =
      w.optional.empty() ? std::nullopt : std::optional<std::regex>(std::regex(w.optional, std::regex::ECMAScript));
  auto fits = [&](const ParamStore::Entry& e) {
    const auto it = w.tensors.find(e.name);
    return it != w.tensors.end() && it->second.shape() == e.shape;
  };
  // Everything is checked before any weight is copied: a refused file leaves the model as it was.
  std::vector<std::pair<const ParamStore::Entry*, const Tensor*>> copies;
  std::vector<std::string> kept;
  for (const ParamStore::Entry& e : store.entries()) {
    if (skipped(e.name) || (optional && std::regex_search(e.name, *optional) && !fits(e))) {
      kept.push_back(e.name);
      continue;
    }
    const auto it = w.tensors.find(e.name);
    check<ConfigError>(it != w.tensors.end(),
                       "{} has no tensor '{}' of shape {} that the model has (skip it with "
                       "--init-skip to keep its initialisation)",
                       w.file, e.name, shape_text(e.shape));
    check<ConfigError>(it->second.shape() == e.shape,
                       "{}: '{}' has shape {}, the model's has {} (skip it with "
                       "--init-skip to train it afresh)",
                       w.file, e.name, shape_text(it->second.shape()), shape_text(e.shape));
    check<ConfigError>(it->second.dtype() == DType::kF32, "{}: '{}' is {}; weights are read as F32", w.file, e.name,
                       dtype_name(it->second.dtype()));
    check_finite_weights(it->second, w.file, e.name);
    copies.emplace_back(&e, &it->second);
  }
  for (const auto& [name, t] : w.tensors)
    check<ConfigError>(store.find(name) || skipped(name) || (optional && std::regex_search(name, *optional)),
                       "{}: '{}' of shape {} is no parameter of the model", w.file, name, shape_text(t.shape()));
  for (const auto& [e, t] : copies) std::copy(t->f32(), t->f32() + e->numel, store.all_data().data() + e->offset);
  return kept;
}

}  // namespace multihead
