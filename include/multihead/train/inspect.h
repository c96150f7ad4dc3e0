// Looking inside a trained model: the attention weights of every layer and
// head for one input, as heatmap PNGs with token labels.
#pragma once

#include <string>
#include <vector>

namespace multihead {

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
