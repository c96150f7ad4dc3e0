// SPDX-License-Identifier: Apache-2.0
// fit: the one training loop every task shares.
//
//   data → batches → model → loss → optimizer → run directory
//
// A task (tasks/) says how it makes a batch, what its loss is and how it
// validates (TrainingTask); fit owns the rest: the step loop over epochs or
// steps, the split into micro-batches, the Trainer's step (gradient
// accumulation, loss scaling, clipping, the optimizer, non-finite steps),
// validation cadence, checkpoints and resume, metrics records, progress and
// memory curves. After fit the task adds its test results and report
// sections (write_run_report).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/core/rng.h"
#include "multihead/nn/state_dict.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/progress.h"
#include "multihead/train/described_config.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/trainer.h"

namespace multihead {

// A stop asked for from outside a job, as the CLI asks on SIGINT, SIGTERM and
// SIGUSR1. The entry point owns one and hands it to the job (train_job, run_job,
// fit): fit finishes the step under way, saves a checkpoint and throws
// Interrupted; the evaluation after training takes it at its stop points.
// request() is async-signal-safe; the library installs no handler itself.
// What StopRequest::request takes beside a signal number: a stop the
// program asked for (Python's on_step returning False).
inline constexpr int kStopAskedByCaller = 1 << 16;

class StopRequest {
 public:
  void request(int signal) noexcept { signal_.store(signal, std::memory_order_relaxed); }
  // The signal asked for and not yet taken (0: none); taking it clears it.
  int take() noexcept { return signal_.exchange(0, std::memory_order_relaxed); }

 private:
  static_assert(std::atomic<int>::is_always_lock_free, "request() runs in signal handlers");
  std::atomic<int> signal_{0};
};

// A point between batches of the evaluation that follows training (the
// test): a stop asked for of `stop` ends the job there with Interrupted; the
// trained model is saved, and --resume runs that evaluation again. With no
// stop (null: a validation inside fit, which takes a stop after the step
// under way and checkpoints it, or the evaluation of a finished run) it
// does nothing.
void stop_point(StopRequest* stop);

class Interrupted : public Error {
 public:
  Interrupted(int signal, const std::string& message) : Error(message), signal_(signal) {}
  int signal() const noexcept { return signal_; }

 private:
  int signal_;
};

// What fit throws, once training is done, on a rank other than 0 under
// mpirun: the test results, report and files after training are rank 0's
// (train_job catches it). Not an Error: no error handler should take it.
struct FollowerFinished {};

// A micro-batch's mean loss and how many items (tokens, images, sequences)
// it trained on, for the throughput.
struct MicroBatchLoss {
  double loss = 0;
  std::int64_t items = 0;
};

// A validation pass: its mean loss and, for classifiers, accuracy.
struct Validation {
  double loss = 0;
  std::optional<double> accuracy;
  std::int64_t examples = 0;  // 0 when read back from a resumed run's metrics
};

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;
  // The examples of step `step` (step-based plans): indices micro_step
  // understands, such as window starts or rows of a generated batch. A pure
  // function of (seed, step), so a resumed run reads the same data.
  virtual std::vector<std::int64_t> step_examples(std::int64_t step);
  // Forward and backward over one micro-batch: adds grad_scale times the
  // gradient of its mean loss into the parameters' gradients. Never called
  // with no examples.
  virtual MicroBatchLoss micro_step(std::span<const std::int64_t> examples, const ForwardContext& ctx,
                                    double grad_scale) = 0;
  // Validation during training, in eval mode (called when the plan says;
  // a plan without validation never calls it).
  virtual Validation validate();
};

struct FitPlan {
  // Epoch-based when set: the training examples, batched in an order
  // shuffled by (seed, epoch), validation after each epoch (and every
  // eval_every steps within one, when eval_every > 0), checkpoints noting
  // "data.epoch" (within an epoch, "data.step"). Otherwise step-based: the
  // task's step_examples, validation every eval_every steps and after the
  // last (0: none, and one checkpoint at the end), checkpoints noting
  // "data.step".
  std::vector<std::int64_t> epoch_examples;
  // When given (one per epoch example), each batch gathers examples of
  // similar length (length_grouped_batches), for tasks whose batches pad
  // to their longest example.
  std::vector<std::int64_t> example_lengths;
  std::int64_t eval_every = 0;
  // Progress shows micro_step's items per second in `unit` ("tok/s");
  // metrics records carry it under throughput_key when one is given.
  std::string unit = "tok/s";
  std::string throughput_key;
  // After validation losses in log lines (" nats/token").
  std::string loss_unit;
  // The curves so far (and whether the validation has an accuracy), at most
  // every 10 seconds of training and after each validation, on rank 0: a
  // task draws its report's curves with it, to be watched while it trains.
  // A failure is a warning, never the run's end.
  std::function<void(const TrainingCurves&, bool)> on_curves;
};

struct FitResult {
  TrainingCurves curves;                 // the whole run's, a resumed run's earlier part included
  std::optional<Validation> validation;  // the last one
  std::int64_t steps = 0, skipped_steps = 0;
  std::int64_t first_step = 0;  // where this process started (> 0: resumed)
  std::int64_t epochs = 0;      // epoch-based: epochs trained in, the last possibly cut short
  double seconds = 0;           // this process's training time
  double total_seconds = 0;     // the run's, over every invocation (RunDir::training_seconds)
  double items_per_s = 0;       // micro_step's items over `seconds`
  // Early stopping: the step of the best validation (its weights are the
  // store's when fit returns), and whether training stopped before its end.
  std::optional<std::int64_t> best_step;
  bool stopped_early = false;
  std::string unit;  // of items_per_s, as in the plan
  // "30 steps, 2 epochs, 12.1 s, 3100 tok/s" for the report (a resumed
  // run: "..., 12.1 s in all, steps 21-30 in this run: 4.0 s, 3100 tok/s").
  std::string summary() const;
  // "30 steps in 12.1 s (3100 tokens/s)", a resumed run's "30 steps in
  // 12.1 s (steps 21-30 in this run: 4.0 s, 3100 tokens/s)", with
  // skipped_steps_note after the count; `rate` (this run's) is optional.
  std::string steps_and_time(std::string_view rate = "") const;
};

// " (3 skipped: the loss or gradient was not finite)" after a step count,
// or nothing when no step was skipped.
std::string skipped_steps_note(std::int64_t skipped);

// Trains `store`'s parameters as `train` says (train.steps steps) in `run`:
// a fresh run writes `config` as config.json; a resumed one checks it
// against the run's and goes on from the last checkpoint (train/resume.h).
// Under mpirun every rank calls it: each trains on its share of every step
// (train.batch a multiple of ranks × grad_accumulation), rank 0 alone
// validates and writes, and the others end with FollowerFinished.
FitResult fit(TrainingTask& task, ParamStore& store, const TrainConfig& train, const FitPlan& plan,
              const DescribedConfig& config, RunDir& run, Progress& progress, StopRequest* stop = nullptr);

// A model of the job's config built in its own parameter store, given its
// initial weights from the run's seed and gradient checkpointing when asked,
// and named in the log ("model: " and its description): the setup every task
// makes before fit. The model points into the store: neither moves.
template <typename Model>
struct ModelToTrain {
  ParamStore store;
  Model model;

  template <typename Config>
  ModelToTrain(const Config& config, const TrainConfig& train, Progress& progress) : model(store, config) {
    store.finalize();
    Rng rng(train.seed);
    model.init(rng);
    model.encoder().set_checkpointing(train.checkpoint_layers);
    progress.log("model: " + config.describe(store.numel()));
  }
  ModelToTrain(const ModelToTrain&) = delete;
  ModelToTrain& operator=(const ModelToTrain&) = delete;
};

// A model of a finished run: built from its config, with the weights of the
// run directory's last checkpoint (what evaluating a run starts from), which
// it never changes (the store is frozen for the precision it will run in:
// bf16 inference reads a bf16 copy, int8 an int8 one).
template <typename Model>
struct TrainedModel {
  ParamStore store;
  Model model;

  template <typename Config>
  TrainedModel(const Config& config, const std::string& run_dir, Precision inference = Precision::kF32)
      : model(store, config) {
    store.finalize();
    load_run_weights(store, run_dir);
    store.freeze(inference);
  }
  TrainedModel(const TrainedModel&) = delete;
  TrainedModel& operator=(const TrainedModel&) = delete;
};

// A model's max_len is at least the longest sequence its job feeds: a
// smaller one (a config's or --set's) is raised to `needed`, and `progress`
// says so rather than change it without a word.
std::int64_t at_least_max_len(std::int64_t max_len, std::int64_t needed, Progress& progress);

// Softmax cross-entropy of logits (..., C) against one target a row (rows
// with kIgnoreIndex are left out), with label smoothing and class weights
// as PyTorch's (kernels/cross_entropy.h), mean over the rows, and its
// gradient times grad_scale.
struct CrossEntropyGrad {
  double loss = 0;
  Tensor dlogits;
};
CrossEntropyGrad cross_entropy_grad(const Tensor& logits, const std::int64_t* targets, double grad_scale,
                                    double label_smoothing = 0.0, const double* class_weights = nullptr);

// The end of every task's micro_step: the loss of `logits`, its gradient
// through the model, and the model's saved activations released.
template <typename Model>
double cross_entropy_backward(Model& model, const Tensor& logits, const std::int64_t* targets, double grad_scale,
                              double label_smoothing = 0.0, const double* class_weights = nullptr) {
  CrossEntropyGrad g = cross_entropy_grad(logits, targets, grad_scale, label_smoothing, class_weights);
  model.backward(g.dlogits);
  model.release_saved();
  return g.loss;
}

// Error naming `what` when a test result is not finite: the model's outputs
// are NaN or infinite (a run trained with on_nonfinite skip can end so), and
// train and eval fail rather than report it as a result.
void check_finite_result(const char* what, double value);

}  // namespace multihead
