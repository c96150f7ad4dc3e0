// SPDX-License-Identifier: Apache-2.0
#include "multihead/nn/gradient_probe.h"

#include <cstring>

#include "multihead/core/error.h"
#include "multihead/nn/transformer_layers.h"

namespace multihead {

void GradientProbe::stack_begins(const Tensor& dy, std::size_t layers) {
  first_sublayer.clear();
  first_sublayer.resize(layers);
  head_gram.assign(layers, {});
  residual_only = dy.clone();
}

// What reaches this layer's output is carried to its input along the
// residual path; what the layer's backward adds beyond that entered a
// sublayer here first. The parts already split off above ride the residual
// path down too.
void GradientProbe::before_layer(std::size_t l, const TransformerEncoderLayer& layer, const Tensor& dy) {
  check(l < first_sublayer.size(), "GradientProbe: layer {} of a stack of {}", l, first_sublayer.size());
  layer_ = &layer;
  index_ = l;
  along_residual_ = layer.residual_gradient(dy);
  residual_only = layer.residual_gradient(residual_only);
  for (std::size_t j = l + 1; j < first_sublayer.size(); ++j)
    first_sublayer[j] = layer.residual_gradient(first_sublayer[j]);
}

void GradientProbe::after_layer(std::size_t l, const TransformerEncoderLayer&, const Tensor& dx) {
  Tensor& entered = first_sublayer[l] = dx.clone();
  float* e = entered.f32();
  const float* r = along_residual_.f32();
  for (std::int64_t k = 0; k < entered.numel(); ++k) e[k] -= r[k];
  along_residual_ = Tensor();
  layer_ = nullptr;
}

// The inner products of the heads' shares, each first carried back to the
// layer's input: (H * H) row-major.
void GradientProbe::head_shares(const MultiheadAttention&, const Tensor& shares) {
  check(layer_ != nullptr, "GradientProbe: the heads' shares came outside a layer's backward");
  const std::int64_t H = shares.dim(0), n = shares.numel() / H, d = shares.dim(shares.ndim() - 1);
  std::vector<Tensor> rows;
  rows.reserve(static_cast<std::size_t>(H));
  for (std::int64_t h = 0; h < H; ++h) {
    Tensor r = Tensor::empty({n / d, d});
    std::memcpy(r.f32(), shares.f32() + h * n, sizeof(float) * static_cast<std::size_t>(n));
    rows.push_back(layer_->attention_input_gradient(r));
  }
  std::vector<double> g(static_cast<std::size_t>(H * H));
  for (std::int64_t a = 0; a < H; ++a)
    for (std::int64_t b = a; b < H; ++b) {
      double dot = 0;
      const float *x = rows[static_cast<std::size_t>(a)].f32(), *y = rows[static_cast<std::size_t>(b)].f32();
      for (std::int64_t i = 0; i < n; ++i) dot += static_cast<double>(x[i]) * y[i];
      g[static_cast<std::size_t>(a * H + b)] = g[static_cast<std::size_t>(b * H + a)] = dot;
    }
  head_gram[index_] = std::move(g);
}

}  // namespace multihead
