// Looking inside a trained model: the attention weights of every layer and
// head for one input, as heatmap PNGs with token labels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "multihead/nn/encoder.h"

namespace multihead {

// Heatmaps of the attention weights that the layers from first_layer on
// captured (set_capture_weights) for batch item 0: one PNG per layer and
// head, dir/{prefix}{layer}_head{head}.png, titled "layer l, head h" and
// title_suffix, with the tokens as labels. Returns the file names.
std::vector<std::string> attention_heatmaps(TransformerEncoder& encoder, std::int64_t first_layer,
                                            const std::vector<std::string>& tokens, const std::string& dir,
                                            const std::string& prefix, const std::string& title_suffix = "");

struct InspectResult {
  std::vector<std::string> files;  // the PNGs written
  std::vector<std::string> tokens;
  std::string prediction;          // classifiers: the predicted label
};

// run_dir: a run of `multihead train` (classifier or language model).
// Writes out_dir/layer{l}_head{h}.png for the first max_tokens tokens of text.
InspectResult inspect_run(const std::string& run_dir, const std::string& text, const std::string& out_dir,
                          std::int64_t max_tokens, int threads);

}  // namespace multihead
