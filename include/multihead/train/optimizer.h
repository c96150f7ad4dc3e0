// SPDX-License-Identifier: Apache-2.0
// Optimizers over the flat parameter and gradient buffers, with PyTorch's
// update rules (torch.optim.AdamW and torch.optim.SGD), so a step is one
// pass over memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "multihead/io/safetensors.h"
#include "multihead/nn/param_store.h"

namespace multihead {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate lr, from the gradients in the store, each
  // read as fl(g * grad_scale): gradient clipping folded into the update's
  // pass (grad_scale 1 reads them as they are).
  virtual void step(ParamStore& store, double lr, float grad_scale) = 0;
  std::int64_t steps() const { return steps_; }
  virtual std::int64_t state_bytes() const = 0;
  // State as tensors named "optimizer.<slot>.<parameter name>", plus the
  // step count in metadata; load_state restores exactly what save wrote.
  virtual void save_state(const ParamStore& store, TensorMap& out, std::map<std::string, std::string>& meta) const = 0;
  virtual void load_state(const ParamStore& store, const TensorMap& in,
                          const std::map<std::string, std::string>& meta) = 0;

 protected:
  std::int64_t steps_ = 0;
};

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

// p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
class AdamW : public Optimizer {
 public:
  AdamW(const ParamStore& store, const AdamWConfig& cfg);
  void step(ParamStore& store, double lr, float grad_scale) override;
  void save_state(const ParamStore& store, TensorMap& out, std::map<std::string, std::string>& meta) const override;
  void load_state(const ParamStore& store, const TensorMap& in,
                  const std::map<std::string, std::string>& meta) override;
  std::int64_t state_bytes() const override { return static_cast<std::int64_t>(m_.nbytes() + v_.nbytes()); }

 private:
  AdamWConfig cfg_;
  Tensor m_, v_;  // (numel)
};

struct SgdConfig {
  double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  // ConfigError for what torch.optim.SGD refuses too: a negative momentum or
  // weight decay, nesterov without momentum or with dampening.
  void validate() const;
};

// g += wd * p;  buf = momentum * buf + (1 - dampening) * g (buf = g at the
// first step);  p -= lr * (nesterov ? g + momentum * buf : buf)
class Sgd : public Optimizer {
 public:
  Sgd(const ParamStore& store, const SgdConfig& cfg);
  void step(ParamStore& store, double lr, float grad_scale) override;
  void save_state(const ParamStore& store, TensorMap& out, std::map<std::string, std::string>& meta) const override;
  void load_state(const ParamStore& store, const TensorMap& in,
                  const std::map<std::string, std::string>& meta) override;
  std::int64_t state_bytes() const override { return static_cast<std::int64_t>(buf_.nbytes()); }

 private:
  SgdConfig cfg_;
  Tensor buf_;  // (numel)
};

struct TrainConfig;  // train/train_config.h
// The optimizer cfg.optimizer names, with its settings, over store's parameters.
std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& cfg, const ParamStore& store);

}  // namespace multihead
