// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/suggest.h"
#include "multihead/train/train_config.h"

#include <algorithm>
#include <cmath>

namespace multihead {

NonFinite parse_nonfinite(const std::string& s) {
  if (s == "stop") return NonFinite::kStop;
  if (s == "skip") return NonFinite::kSkip;
  throw ConfigError(fmt::format("on_nonfinite must be stop or skip, got '{}'{}", s, did_you_mean(s, {"stop", "skip"})));
}

const char* nonfinite_name(NonFinite n) { return n == NonFinite::kSkip ? "skip" : "stop"; }

OptimizerKind parse_optimizer(const std::string& s) {
  if (s == "adamw") return OptimizerKind::kAdamW;
  if (s == "sgd") return OptimizerKind::kSgd;
  throw ConfigError(fmt::format("optimizer must be adamw or sgd, got \"{}\"{}", s, did_you_mean(s, {"adamw", "sgd"})));
}

const char* optimizer_name(OptimizerKind k) { return k == OptimizerKind::kSgd ? "sgd" : "adamw"; }

void TrainConfig::set_steps(std::int64_t n) {
  steps = n;
  schedule.total_steps = n;
  if (schedule.warmup_steps == 0 && schedule.warmup_ratio > 0 && n > 0)
    schedule.warmup_steps =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(schedule.warmup_ratio * static_cast<double>(n))));
}

void TrainConfig::validate() const {
  check_keys(*this);
  training_precision(precision, "precision");
  check<ConfigError>(adamw.beta1 >= 0 && adamw.beta1 < 1 && adamw.beta2 >= 0 && adamw.beta2 < 1,
                     "betas must be in [0, 1), got {} and {}", adamw.beta1, adamw.beta2);
  check<ConfigError>(sgd.weight_decay >= 0 && std::isfinite(sgd.weight_decay), "weight_decay must be >= 0, got {}",
                     sgd.weight_decay);
  if (optimizer == OptimizerKind::kSgd) sgd.validate();
  check<ConfigError>(init_skip.empty() || !init_from.empty(),
                     "init_skip names parameters that init_from's weights leave as initialised, and init_from is "
                     "empty (--init-skip needs --init-from)");
  check<ConfigError>(init_sha256.empty() || !init_from.empty(),
                     "init_sha256 pins the weights init_from names, and init_from is empty");
  check<ConfigError>(batch % grad_accumulation == 0 || grad_accumulation == 1,
                     "batch ({}) must be a multiple of grad_accumulation ({})", batch, grad_accumulation);
}

void EpochBudget::validate(const std::string& where) const {
  try {
    check_keys(*this);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", where, e.what()));
  }
}

std::int64_t EpochBudget::steps(std::int64_t examples, std::int64_t batch) const {
  validate("the job");
  check<ConfigError>(examples >= 0 && batch > 0, "{} examples in batches of {}", examples, batch);
  std::int64_t all = 0;
  check<ConfigError>(!__builtin_mul_overflow((examples + batch - 1) / batch, epochs, &all) && all <= kMaxSteps,
                     "{} epochs of {} steps exceed {} steps", epochs, (examples + batch - 1) / batch, kMaxSteps);
  return max_steps > 0 ? std::min(all, max_steps) : all;
}

}  // namespace multihead
