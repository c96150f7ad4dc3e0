// SPDX-License-Identifier: Apache-2.0
// Sentence embeddings: an encoder's hidden states pooled into one vector a
// text, as sentence-transformers pools them.
//
// A sentence-transformers model directory says how in modules.json: its
// Pooling module's config (mean over the tokens that are not padding, the
// [CLS] token's state, the largest value of each feature, or the mean times
// sqrt(tokens)) and whether a Normalize module follows (unit length). Any
// other checkpoint pools by mean over the tokens that are not padding and
// does not normalise; a multihead run pools as its model pools (mean or [CLS]).
#pragma once

#include <string>
#include <vector>

#include "multihead/core/tensor.h"
#include "multihead/nn/models.h"

namespace multihead {

struct EmbeddingPooling {
  enum class Mode : std::uint8_t { kMean, kCls, kMax, kMeanSqrtLen };
  Mode mode = Mode::kMean;
  bool normalize = false;
  // "mean pooling, normalised", for messages and the server's model description.
  std::string describe() const;
};

// How the run or checkpoint in `dir` pools (above); `model_pooling` is the
// model's own. A modules.json naming a module of a kind not read here (a
// Dense layer after pooling, say) is an IoError naming it.
EmbeddingPooling embedding_pooling(const std::string& dir, Pooling model_pooling);

// The vectors (B, d) of hidden states h (B, L, d) with padding (B, L), true at padding.
std::vector<std::vector<float>> pool_embeddings(const Tensor& h, const Tensor& padding, const EmbeddingPooling& p);

}  // namespace multihead
