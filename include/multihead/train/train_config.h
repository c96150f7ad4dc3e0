// The optimisation side of a training run, and how model and training
// configs are read from JSON (keys named as in PyTorch where PyTorch has a
// name for them).
#pragma once

#include <memory>
#include <string>

#include "multihead/core/distributed.h"
#include "multihead/core/error.h"
#include "multihead/data/tokenizer.h"
#include "multihead/io/json_config.h"
#include "multihead/nn/models.h"
#include "multihead/train/grad_scaler.h"
#include "multihead/train/optimizer.h"
#include "multihead/train/schedule.h"

namespace multihead {

// What a step whose loss or gradient is not finite (NaN or Inf, from the
// inputs, the weights or an overflow) does: stop the run with an error, or
// skip the update, recording the step as skipped.
enum class NonFinite { kStop, kSkip };
NonFinite parse_nonfinite(const std::string& s);
const char* nonfinite_name(NonFinite n);

enum class OptimizerKind { kAdamW, kSgd };
// "adamw" or "sgd"; anything else is a ConfigError.
OptimizerKind parse_optimizer(const std::string& s);
const char* optimizer_name(OptimizerKind k);

struct TrainConfig {
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  AdamWConfig adamw;
  SgdConfig sgd;
  LrSchedule schedule;
  double clip_grad_norm = 0.0;  // 0: no clipping
  std::int64_t grad_accumulation = 1;
  std::int64_t steps = 100;
  std::int64_t batch = 32;
  std::int64_t seq_len = 128;
  std::uint64_t seed = 0;
  bool checkpoint_layers = false;  // gradient checkpointing
  // Activation storage: fp32, bf16 or fp16 (core/precision.h).
  Precision precision = Precision::kF32;
  // Dynamic loss scaling (on by default with fp16): see grad_scaler.h.
  bool loss_scaling = false;
  GradScalerConfig scaler;
  NonFinite on_nonfinite = NonFinite::kStop;
  // Steps between checkpoints; 0: only where the job checkpoints anyway
  // (after each epoch or evaluation, and at the end).
  std::int64_t checkpoint_every = 0;
  // How gradients are summed when mpirun runs several ranks (core/distributed.h),
  // and whether the sums of a layer's gradients start as soon as its backward
  // is done, beside the rest of the backward pass.
  Allreduce allreduce = Allreduce::kMpi;
  bool allreduce_overlap = true;

  // Every value in its range (ConfigError naming the key otherwise): what
  // a job config and the command-line flags are both checked by.
  void validate() const;
};

// Reads and type-checks the keys; the caller calls r.finish() after reading
// everything it expects.
ModelConfig read_model_config(ConfigReader& r);
TrainConfig read_train_config(ConfigReader& r);

// The "tokenizer" and "model" sections of a job config: the tokenizer's
// vocabulary size stands in for the model's until a tokenizer is trained.
TokenizerConfig read_tokenizer_section(ConfigReader& job, const std::string& source, TokenizerConfig defaults);
ModelConfig read_model_section(ConfigReader& job, const std::string& source, std::int64_t vocab_size);
nlohmann::json tokenizer_config_json(const TokenizerConfig& t);

// The keys read_model_config / read_train_config read, with their values
// (vocab_size and num_classes are left to the job: they come from the data).
nlohmann::json model_config_json(const ModelConfig& m);
nlohmann::json train_config_json(const TrainConfig& t);
// How long a job that trains in epochs trains: every epoch in full, or
// max_steps steps when that is fewer (0: no cap; the last epoch trained is
// then cut short). Kept in the train section as "epochs" and "max_steps".
// A job's "threads" (0: all cores), checked (check_threads).
int read_threads(ConfigReader& job);

// A seed given as a signed number (flags or JSON), refused below 0 rather
// than wrapped to a huge unsigned one.
std::uint64_t checked_seed(std::int64_t seed);

// Bounds on step counts, checked before any arithmetic on them.
inline constexpr std::int64_t kMaxEpochs = 1'000'000, kMaxSteps = 1'000'000'000'000, kMaxBatch = 1 << 20;

struct EpochBudget {
  std::int64_t epochs = 3;
  std::int64_t max_steps = 0;
  void read(ConfigReader& train_section);
  void write(nlohmann::json& train_section) const;
  // ConfigError naming `where` for a value out of range.
  void validate(const std::string& where) const;
  // train.steps for `examples` training examples in batches of `batch`.
  std::int64_t steps(std::int64_t examples, std::int64_t batch) const;
};

// A job config's "train" section, every key checked: the training settings
// and, for jobs that train in epochs, their budget.
TrainConfig read_train_section(ConfigReader& job, const std::string& source, EpochBudget* budget = nullptr);

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& cfg, const ParamStore& store);

}  // namespace multihead
