// SPDX-License-Identifier: Apache-2.0
// Looking inside a trained model: the attention weights of every layer and
// head for one input, as arrays and as heatmap PNGs with token labels.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "multihead/core/precision.h"
#include "multihead/nn/encoder.h"

namespace multihead {

// Attention weights captured for one input (batch item 0), layers
// first_layer .. first_layer + layers - 1: self-attention (keys are the
// queries) or cross-attention (keys are another sequence).
struct AttentionMaps {
  std::string name = "self-attention";  // "encoder self-attention", "cross-attention", ...
  std::vector<std::string> tokens;      // T query labels
  std::vector<std::string> keys;        // S key labels (self-attention: the tokens)
  std::int64_t first_layer = 0, layers = 0, heads = 0, T = 0, S = 0;
  bool causal = false;         // keys after a query are masked
  std::vector<float> weights;  // (layers, heads, T, S): rows are queries, columns keys
  std::string prediction;      // classifiers: the predicted class
  // Classifiers, when asked: how much the predicted class's probability
  // falls with each head masked in turn (layers x heads; Michel et al.
  // 2019's ablation, on this one input). Empty otherwise.
  std::vector<double> ablation;
  const float* map(std::int64_t layer, std::int64_t head) const {
    return weights.data() + ((layer - first_layer) * heads + head) * T * S;
  }
};

// What the layers from first_layer on captured (set_capture_weights) in the
// last forward.
AttentionMaps captured_attention(TransformerEncoder& encoder, std::int64_t first_layer,
                                 std::vector<std::string> tokens);

// One PNG per layer and head, dir/{prefix}{layer}_head{head}.png, titled
// "layer l, head h" and title_suffix, with the tokens as labels. Returns the
// file names. Every target is checked (check_replaceable) and every map
// drawn before the first is written. With max_maps > 0 and more maps than
// that, only the first heads of layers evenly spaced from the first to the
// last, at most max_maps PNGs (a report's; inspect draws every one).
std::vector<std::string> write_heatmaps(const AttentionMaps& maps, const std::string& dir, const std::string& prefix,
                                        const std::string& title_suffix = "", std::int64_t max_maps = 0);
// The heatmaps a run's report draws at most: a model of hundreds of layers
// spent minutes on thousands of PNGs; its explorer page holds every head.
inline constexpr std::int64_t kReportHeatmaps = 32;

struct InspectResult {
  std::vector<std::string> files;  // the PNGs written
  std::vector<std::string> tokens;
  std::string prediction;  // classifiers: the predicted class
};

// run_dir: a run of `multihead train` (classifier, language model or
// pronunciation), run in `precision` (the run's own where none is given).
// Writes out_dir/layer{l}_head{h}.png for the first max_tokens tokens of text.
InspectResult inspect_run(const std::string& run_dir, const std::string& text, const std::string& out_dir,
                          std::int64_t max_tokens, std::optional<Precision> precision = std::nullopt);
// The same input as one attention explorer page (tasks/attention_explorer.h)
// at html_path, with every kind of attention the model has.
InspectResult inspect_run_html(const std::string& run_dir, const std::string& text, const std::string& html_path,
                               std::int64_t max_tokens, std::optional<Precision> precision = std::nullopt);

}  // namespace multihead
