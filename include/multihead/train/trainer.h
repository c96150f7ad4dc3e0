// SPDX-License-Identifier: Apache-2.0
// The Trainer: one optimizer step, which fit (train/fit.h, the one training
// loop) takes once a step: gradient accumulation over micro-batches,
// clipping, the learning-rate schedule, the optimizer's update, and the
// checkpoints of its state that resume bit for bit.
//
// Randomness is counter-based and keyed by (seed, step, site), so the seed
// and the step are the whole RNG state: a resumed run draws exactly the
// dropout masks the uninterrupted run would have drawn.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/core/allocator.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct StepStats {
  std::int64_t step = 0;  // the step just taken (0-based)
  double loss = 0;        // mean over the micro-batches
  double grad_norm = 0;   // global L2 norm before clipping
  double lr = 0;
  bool skipped = false;  // an inf or NaN in the loss or gradients: no update was made
  double loss_scale = 1;
  // Memory, in bytes: the fixed parts, and the allocator's peak during the
  // step with activations = peak - (parameters + gradients + optimizer),
  // workspaces and batches included.
  std::int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;
  std::int64_t peak_bytes = 0, activation_peak_bytes = 0, current_bytes = 0;
  std::int64_t rss_bytes = 0;     // the process's resident memory after the step (-1: unknown)
  std::int64_t cached_bytes = 0;  // freed blocks the allocator holds for reuse (core/allocator.h)
};

// The record every job writes to metrics.jsonl for a step: step (1-based),
// loss, lr, grad_norm and memory; skipped when the step was; with loss
// scaling also loss_scale. Jobs add their own keys (epoch, throughput).
nlohmann::json step_json(const StepStats& s, bool loss_scaling);

// The memory of training steps, for logs, metrics and the report's plot.
class MemoryCurve {
 public:
  void add(const StepStats& s);
  // "peak 123 MiB: parameters 10, gradients 10, optimizer 20, activations 83"
  static std::string text(const StepStats& s);
  static nlohmann::json json(const StepStats& s);
  // The steps, and against them (MiB) the peak and each part, named.
  const std::vector<double>& steps() const { return step_; }
  std::vector<std::pair<std::string, const std::vector<double>*>> lines() const {
    return {{"peak", &peak_},
            {"activations", &act_},
            {"optimizer", &opt_},
            {"gradients", &grads_},
            {"parameters", &params_}};
  }
  std::int64_t max_activation_bytes() const { return max_activation_bytes_; }

 private:
  std::int64_t max_activation_bytes_ = 0;
  std::vector<double> step_, params_, grads_, opt_, act_, peak_;
};

// The series a job plots: the loss and memory of each step, and the
// validation loss and accuracy of each evaluation. A resumed run rebuilds
// them from the metrics records it keeps.
struct TrainingCurves {
  std::vector<double> step, loss, lr, grad_norm, eval_step, eval_loss, eval_accuracy;
  // Items per second since the run (or its resumption) began, at each step
  // that recorded it, named as the record names it ("tokens_per_s").
  std::vector<double> throughput_step, throughput;
  std::string throughput_key;
  MemoryCurve memory;
  void add_step(const StepStats& s);
  void add_eval(std::int64_t step, double loss, double accuracy = 0);
  void add_throughput(std::int64_t step, double per_s, const std::string& key);
  // A metrics.jsonl record: a step (it has "loss") or an evaluation
  // ("validation_loss"); others are ignored.
  void add_record(const nlohmann::json& record);
};

// The StepStats of a step record written by step_json.
StepStats step_stats_from_json(const nlohmann::json& record);

class Trainer {
 public:
  // fn(micro, ctx, grad_scale) runs forward and backward of micro-batch
  // `micro` of the step's micro_batches(), adding grad_scale *
  // d(loss)/d(params) into the gradients, and returns the micro-batch's
  // (unscaled) loss. grad_scale includes the loss scale when loss scaling
  // is on; the trainer unscales before clipping. Under mpirun each rank
  // runs its own grad_accumulation of the micro-batches and the step sums
  // the gradients over the ranks (train/distributed.h).
  using MicroStep = std::function<double(std::int64_t micro, const ForwardContext& ctx, double grad_scale)>;

  Trainer(ParamStore& store, const TrainConfig& cfg);

  // One step: accumulate (every micro-batch's forward and backward), reduce
  // (the gradients and loss summed over the ranks) and update (unscale,
  // skip a non-finite step, clip, the optimizer's step).
  StepStats step(const MicroStep& fn);
  std::int64_t steps_done() const { return step_; }
  // A step's micro-batches over all ranks: grad_accumulation × ranks.
  std::int64_t micro_batches() const;
  std::int64_t skipped_steps() const { return skipped_; }  // of steps_done(), those without an update
  const TrainConfig& config() const { return cfg_; }
  ParamStore& store() const { return *store_; }
  // A continued run's decay restarts at `step` from rate `lr` (train/schedule.h).
  void restart_decay(std::int64_t step, double lr) {
    cfg_.schedule.restart_step = step;
    cfg_.schedule.restart_lr = lr;
  }

  // A checkpoint holds the parameters under their state_dict names, the
  // optimizer state ("optimizer.*"), and metadata: step, seed, and the
  // caller's `extra` entries (such as the data position). Written atomically.
  void save_checkpoint(const std::string& path, const std::map<std::string, std::string>& extra = {}) const;
  // Restores parameters, optimizer and step; returns the metadata. Refuses
  // a checkpoint written by another number of ranks.
  std::map<std::string, std::string> load_checkpoint(const std::string& path);

 private:
  class GradientSum;  // the sum over the ranks, overlapped with the last backward
  // This rank's micro-batches, their gradients added into the store; the
  // sum of their losses.
  double accumulate(const MicroStep& fn, double loss_scale, GradientSum& sum);
  // Takes s's gradients to an update, or skips the step (s.skipped); s has
  // the loss, scale and learning rate.
  void update(StepStats& s);
  void skip(StepStats& s);
  // The step's memory, by part, into s.
  void report_memory(StepStats& s) const;

  ParamStore* store_;
  TrainConfig cfg_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<GradScaler> scaler_;  // when loss scaling is on
  PeakMeter memory_;                    // the peak of each step
  std::int64_t step_ = 0;
  std::int64_t skipped_ = 0, skipped_in_a_row_ = 0;
  // Past this many skipped steps in a row the weights are beyond repair (or
  // the loss scale has backed off by 2^25): the run stops.
  static constexpr std::int64_t kMaxSkippedInARow = 25;
};

}  // namespace multihead
