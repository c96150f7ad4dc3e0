// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/optimizer.h"

#include <cmath>
#include <cstring>

#include "multihead/train/train_config.h"

namespace multihead {
namespace {

// Per-parameter views of a flat state buffer, under PyTorch-style names.
void save_slot(const ParamStore& store, const Tensor& flat, const std::string& slot, TensorMap& out) {
  for (const auto& e : store.entries()) {
    Tensor t = Tensor::empty(e.shape);
    std::memcpy(t.f32(), flat.f32() + e.offset, sizeof(float) * static_cast<std::size_t>(e.numel));
    out.emplace("optimizer." + slot + "." + e.name, std::move(t));
  }
}

void load_slot(const ParamStore& store, Tensor& flat, const std::string& slot, const TensorMap& in) {
  for (const auto& e : store.entries()) {
    const std::string name = "optimizer." + slot + "." + e.name;
    auto it = in.find(name);
    check<IoError>(it != in.end(), "checkpoint lacks optimizer state '{}'", name);
    check<IoError>(it->second.shape() == e.shape && it->second.dtype() == DType::kF32,
                   "checkpoint optimizer state '{}' has shape {}, expected {}", name, shape_text(it->second.shape()),
                   shape_text(e.shape));
    std::memcpy(flat.f32() + e.offset, it->second.f32(), sizeof(float) * static_cast<std::size_t>(e.numel));
  }
}

std::int64_t meta_int(const std::map<std::string, std::string>& meta, const std::string& key) {
  auto it = meta.find(key);
  check<IoError>(it != meta.end(), "checkpoint lacks '{}'", key);
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    throw IoError(fmt::format("checkpoint value '{}' of '{}' is not an integer", it->second, key));
  }
}

}  // namespace

AdamW::AdamW(const ParamStore& store, const AdamWConfig& cfg) : cfg_(cfg), m_({store.numel()}), v_({store.numel()}) {
  check<ConfigError>(cfg.beta1 >= 0 && cfg.beta1 < 1 && cfg.beta2 >= 0 && cfg.beta2 < 1,
                     "AdamW betas must be in [0, 1), got ({}, {})", cfg.beta1, cfg.beta2);
  check<ConfigError>(cfg.eps > 0 && cfg.weight_decay >= 0, "AdamW eps must be positive and weight_decay >= 0");
}

void AdamW::step(ParamStore& store, double lr, float grad_scale) {
  ++steps_;
  const float b1 = static_cast<float>(cfg_.beta1), b2 = static_cast<float>(cfg_.beta2);
  const float decay = static_cast<float>(1.0 - lr * cfg_.weight_decay);
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(steps_));
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(cfg_.eps);
  float* p = store.all_data().data();
  const float* g = store.all_grads().data();
  float* m = m_.f32();
  float* v = v_.f32();
  const std::int64_t n = store.numel();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    p[i] *= decay;
    m[i] = m[i] * b1 + gi * (1.0f - b1);
    v[i] = v[i] * b2 + gi * gi * (1.0f - b2);
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
  }
}

void AdamW::save_state(const ParamStore& store, TensorMap& out, std::map<std::string, std::string>& meta) const {
  save_slot(store, m_, "exp_avg", out);
  save_slot(store, v_, "exp_avg_sq", out);
  meta["optimizer"] = "AdamW";
  meta["optimizer.step"] = std::to_string(steps_);
}

void AdamW::load_state(const ParamStore& store, const TensorMap& in, const std::map<std::string, std::string>& meta) {
  auto it = meta.find("optimizer");
  check<IoError>(it != meta.end() && it->second == "AdamW", "checkpoint holds no AdamW state");
  load_slot(store, m_, "exp_avg", in);
  load_slot(store, v_, "exp_avg_sq", in);
  steps_ = meta_int(meta, "optimizer.step");
}

void SgdConfig::validate() const {
  check<ConfigError>(momentum >= 0 && weight_decay >= 0, "SGD momentum and weight_decay must be >= 0");
  check<ConfigError>(!nesterov || (momentum > 0 && dampening == 0),
                     "nesterov needs a momentum and no dampening (as torch.optim.SGD), got momentum {} and "
                     "dampening {}",
                     momentum, dampening);
}

Sgd::Sgd(const ParamStore& store, const SgdConfig& cfg) : cfg_(cfg), buf_({store.numel()}) { cfg.validate(); }

void Sgd::step(ParamStore& store, double lr, float grad_scale) {
  const bool first = steps_ == 0;
  ++steps_;
  const float mu = static_cast<float>(cfg_.momentum), damp = static_cast<float>(1.0 - cfg_.dampening);
  const float wd = static_cast<float>(cfg_.weight_decay), flr = static_cast<float>(lr);
  const bool momentum = cfg_.momentum != 0.0, nesterov = cfg_.nesterov;
  float* p = store.all_data().data();
  const float* g = store.all_grads().data();
  float* buf = buf_.f32();
  const std::int64_t n = store.numel();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (std::int64_t i = 0; i < n; ++i) {
    // g * grad_scale rounded on its own, as when the buffer is clipped
    // first: the explicit fma leaves the compiler no add to fuse it into.
    float d = std::fma(wd, p[i], g[i] * grad_scale);
    if (momentum) {
      buf[i] = first ? d : mu * buf[i] + damp * d;
      d = nesterov ? d + mu * buf[i] : buf[i];
    }
    p[i] -= flr * d;
  }
}

void Sgd::save_state(const ParamStore& store, TensorMap& out, std::map<std::string, std::string>& meta) const {
  save_slot(store, buf_, "momentum_buffer", out);
  meta["optimizer"] = "SGD";
  meta["optimizer.step"] = std::to_string(steps_);
}

void Sgd::load_state(const ParamStore& store, const TensorMap& in, const std::map<std::string, std::string>& meta) {
  auto it = meta.find("optimizer");
  check<IoError>(it != meta.end() && it->second == "SGD", "checkpoint holds no SGD state");
  load_slot(store, buf_, "momentum_buffer", in);
  steps_ = meta_int(meta, "optimizer.step");
}

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& cfg, const ParamStore& store) {
  if (cfg.optimizer == OptimizerKind::kSgd) return std::make_unique<Sgd>(store, cfg.sgd);
  return std::make_unique<AdamW>(store, cfg.adamw);
}

}  // namespace multihead
