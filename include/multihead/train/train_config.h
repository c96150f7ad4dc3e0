// SPDX-License-Identifier: Apache-2.0
// The optimisation side of a training run, with the keys of a job config's
// "train" section (named as in PyTorch where PyTorch has a name for them).
#pragma once

#include <memory>
#include <string>
#include <type_traits>

#include "multihead/core/error.h"
#include "multihead/core/precision.h"
#include "multihead/data/tokenizer.h"
#include "multihead/io/json_config.h"
#include "multihead/nn/models.h"
#include "multihead/train/distributed.h"
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

// Bounds on step counts, checked before any arithmetic on them.
inline constexpr std::int64_t kMaxEpochs = 1'000'000, kMaxSteps = 1'000'000'000'000, kMaxBatch = 1 << 20;

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
  // Every checkpoint also kept as checkpoints/step_N.safetensors (the
  // weights over training, for analysis; train/run_dir.h).
  bool keep_checkpoints = false;
  // How gradients are summed when mpirun runs several ranks (train/distributed.h),
  // and whether the sums of a layer's gradients start as soon as its backward
  // is done, beside the rest of the backward pass.
  Allreduce allreduce = Allreduce::kMpi;
  bool allreduce_overlap = true;
  // Where a new run's weights start (train/initial_weights.h): a run
  // directory or a safetensors file, "" for the model's own initialisation;
  // the parameters init_skip matches keep theirs. init_sha256: the file's
  // SHA-256, which a run records and a config may pin.
  std::string init_from, init_skip, init_sha256;
  // Early stopping: after this many validations in a row without a lower
  // validation loss, training stops (0: never). The best validation's
  // weights are kept as checkpoints/best.safetensors, evaluated at the end
  // and answered with (train/run_dir.h's answer_checkpoint_path).
  std::int64_t early_stopping = 0;

  // The keys of a job config's "train" section (io/json_config.h), named as
  // PyTorch's arguments where it has them (lr, betas, eps, weight_decay).
  // weight_decay is AdamW's and SGD's both.
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& t) {
    k.named("optimizer", t.optimizer, optimizer_name, parse_optimizer).doc("the optimizer: AdamW or SGD");
    k("lr", t.schedule.base_lr, positive()).doc("the peak learning rate, reached after the warmup");
    k("min_lr", t.schedule.min_lr, at_least(0)).doc("the learning rate the decay ends at");
    k("warmup_steps", t.schedule.warmup_steps, between(0, kMaxSteps))
        .doc("steps of linear warmup from 0 to lr; overrides warmup_ratio when above 0");
    k("warmup_ratio", t.schedule.warmup_ratio, between(0, 1))
        .doc("the warmup as a fraction of the run's steps (Hugging Face's warmup_ratio)")
        .may_change_on_resume();  // compared as the warmup_steps it came to (set_steps)
    k.named("schedule", t.schedule.decay, decay_name, parse_decay).doc("the decay after the warmup");
    k.pair("betas", t.adamw.beta1, t.adamw.beta2).doc("AdamW's moment decay rates, as PyTorch's betas");
    k("eps", t.adamw.eps, positive()).doc("AdamW's denominator term, as PyTorch's eps");
    k.with_default("weight_decay", t.adamw.weight_decay, t.optimizer == OptimizerKind::kAdamW ? 0.01 : 0.0, at_least(0),
                   "0.01 with adamw, 0 with sgd")
        .doc("decoupled weight decay (AdamW), or L2 added to the gradient (SGD)");
    if constexpr (!std::is_const_v<Self>) t.sgd.weight_decay = t.adamw.weight_decay;
    k("momentum", t.sgd.momentum, below_one()).doc("SGD's momentum");
    k("dampening", t.sgd.dampening, between(0, 1)).doc("SGD's dampening of the momentum");
    k("nesterov", t.sgd.nesterov).doc("SGD with Nesterov momentum");
    k("clip_grad_norm", t.clip_grad_norm, at_least(0)).doc("the gradient's largest global L2 norm (0: no clipping)");
    k("grad_accumulation", t.grad_accumulation, at_least(1))
        .doc("micro-batches summed into each step (batch is their total)");
    // The length, which a continued run changes (train/resume.h restarts the decay).
    k("steps", t.steps, between(0, kMaxSteps))
        .doc("optimizer steps, for jobs that train by steps")
        .may_change_on_resume();
    k.with_default("total_steps", t.schedule.total_steps, t.steps, at_most(kMaxSteps), "steps")
        .doc("the step the decay reaches min_lr at")
        .may_change_on_resume();
    k("restart_step", t.schedule.restart_step, between(0, kMaxSteps))
        .doc("the step a continued run's schedule restarts at (0: none)")
        .may_change_on_resume();
    k("restart_lr", t.schedule.restart_lr, at_least(0))
        .doc("the rate a continued run's decay restarts from (the rate of the step before)")
        .may_change_on_resume();
    k("batch", t.batch, between(1, kMaxBatch)).doc("examples per optimizer step");
    k("seq_len", t.seq_len, between(1, kMaxLength)).doc("tokens per training sequence (language models)");
    k("seed", t.seed).doc("the seed of the initialisation, the shuffling and dropout");
    k("checkpoint_layers", t.checkpoint_layers)
        .doc("gradient checkpointing: recompute each layer's activations in the backward pass");
    k.named("precision", t.precision, precision_name, parse_precision)
        .doc("the activations' storage; products in bf16 or fp16 accumulate in fp32");
    // fp16 needs loss scaling to keep small gradients from flushing to zero.
    k.with_default("loss_scaling", t.loss_scaling, t.precision == Precision::kF16, "true with fp16")
        .doc("dynamic loss scaling, against fp16 gradients flushing to zero");
    k.named("on_nonfinite", t.on_nonfinite, nonfinite_name, parse_nonfinite)
        .doc("what a step with a NaN or infinite loss or gradient does: stop with an error, or skip its update")
        .may_change_on_resume();
    k("checkpoint_every", t.checkpoint_every, at_least(0))
        .doc("steps between checkpoints (0: after each epoch or validation, and at the end)")
        .may_change_on_resume();
    k("keep_checkpoints", t.keep_checkpoints)
        .doc("keep every checkpoint as checkpoints/step_N.safetensors")
        .may_change_on_resume();
    k.named("allreduce", t.allreduce, allreduce_name, parse_allreduce)
        .doc("how ranks under mpirun sum their gradients");
    k("allreduce_overlap", t.allreduce_overlap).doc("start a layer's gradient sums while the backward pass goes on");
    k("init_from", t.init_from).doc("a run directory or safetensors file the weights start from (\"\": initialised)");
    k("init_skip", t.init_skip)
        .doc("a regular expression (ECMAScript, searched for) of the parameters that keep their initialisation");
    k("init_sha256", t.init_sha256)
        .doc("the SHA-256 init_from's file must have (recorded by a run)")
        .may_change_on_resume();
    k("early_stopping", t.early_stopping, between(0, kMaxSteps))
        .doc("validations in a row without a lower validation loss that end training (0: never)");
  }

  // The run's length, once known (from its epochs and data, or steps):
  // steps and the schedule's total, and a warmup given as a ratio turned
  // into steps (at least one when the ratio is not 0), which config.json
  // then records, so that a resumed or continued run keeps it.
  void set_steps(std::int64_t n);

  // Every value in its range (ConfigError naming the key otherwise): what
  // a job config and the command-line flags are both checked by.
  void validate() const;
};

// How long a job that trains in epochs trains: every epoch in full, or
// max_steps steps when that is fewer (0: no cap; the last epoch trained is
// then cut short). Kept in the train section as "epochs" and "max_steps".
struct EpochBudget {
  std::int64_t epochs = 3;
  std::int64_t max_steps = 0;
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& b) {
    k("epochs", b.epochs, between(1, kMaxEpochs)).doc("passes over the training data").may_change_on_resume();
    k("max_steps", b.max_steps, between(0, kMaxSteps))
        .doc("a cap on the steps, cutting the last epoch short (0: none)")
        .may_change_on_resume();
  }
  // ConfigError naming `where` for a value out of range.
  void validate(const std::string& where) const;
  // train.steps for `examples` training examples in batches of `batch`.
  std::int64_t steps(std::int64_t examples, std::int64_t batch) const;
};

}  // namespace multihead
