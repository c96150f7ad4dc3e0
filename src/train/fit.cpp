// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/fit.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>

#include <fmt/format.h>
#include <zlib.h>

#include "multihead/core/error.h"
#include "multihead/data/batching.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/io/atomic_file.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/distributed.h"
#include "multihead/train/resume.h"

namespace multihead {

namespace {

const char* signal_name(int sig) {
  if (sig == kStopAskedByCaller) return "the caller";
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

}  // namespace

void stop_point(StopRequest* stop) {
  const int sig = stop ? stop->take() : 0;
  if (sig == 0) return;
  throw Interrupted(sig, fmt::format("stopped by {} in the test after training; the trained model is saved: the same "
                                     "command with --resume runs the test again",
                                     signal_name(sig)));
}

using json = nlohmann::json;

std::vector<std::int64_t> TrainingTask::step_examples(std::int64_t) {
  throw Error("this task trains in epochs: its examples come from the plan, not step_examples");
}

Validation TrainingTask::validate() {
  throw Error("this task does not validate during training: its plan has no validation");
}

namespace {

// The loop's state for one fit() call.
class Loop {
 public:
  Loop(TrainingTask& task, ParamStore& store, const TrainConfig& train, const FitPlan& plan, RunDir& run,
       Progress& progress, StopRequest* stop)
      : task_(task),
        train_(train),
        plan_(plan),
        run_(run),
        progress_(progress),
        stop_(stop),
        store_(store),
        trainer_(store, train) {}

  FitResult run(const DescribedConfig& config) {
    for (const json& rec : start_or_resume(run_, config, trainer_, &progress_)) {
      result_.curves.add_record(rec);
      if (rec.contains("validation_loss")) {
        result_.validation = validation_of(rec);
        track_best(rec["step"].get<std::int64_t>(), rec["validation_loss"].get<double>());  // where a resumed run stood
      }
    }
    result_.unit = plan_.unit;
    result_.first_step = trainer_.steps_done();
    progress_.set_total(train_.steps);
    progress_.resume_at(result_.first_step);
    t0_ = std::chrono::steady_clock::now();
    if (result_.stopped_early) progress_.log(fmt::format("the run stopped early at step {}", trainer_.steps_done()));
    else if (!plan_.epoch_examples.empty()) run_epochs();
    else run_steps();
    progress_.finish();
    // The ranks took the same steps from the same weights; a mismatch would
    // mean the runs diverged (a reduction that gave ranks different bits).
    if (group_.size() > 1) group_.check_same(weights_crc(), "the trained weights (CRC-32)");
    // The best validation's weights are the model's from here on: the job (rank 0's) tests them.
    if (result_.best_step && group_.primary() && std::filesystem::exists(best_checkpoint_path(run_.path())))
      load_checkpoint_weights(store_, best_checkpoint_path(run_.path()));
    result_.steps = trainer_.steps_done();
    result_.skipped_steps = trainer_.skipped_steps();
    result_.seconds = seconds();
    result_.total_seconds = run_.training_seconds();
    result_.items_per_s = static_cast<double>(items_) / result_.seconds;
    // A plan without validation has had no checkpoint after its last step
    // (a resumed run that trained none has it already).
    if (plan_.epoch_examples.empty() && plan_.eval_every == 0 && result_.steps > result_.first_step)
      save_run_checkpoint(run_, trainer_);
    if (!group_.primary()) throw FollowerFinished();
    return std::move(result_);
  }

 private:
  static Validation validation_of(const json& rec) {
    Validation v;
    v.loss = rec.value("validation_loss", 0.0);
    if (rec.contains("validation_accuracy")) v.accuracy = rec.value("validation_accuracy", 0.0);
    return v;
  }

  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

  // Batches of train.batch shuffled by (seed, epoch), grouped by length when
  // the plan gives lengths; a resumed run starts in the epoch, and at the
  // batch, its checkpoint reached.
  void run_epochs() {
    const std::int64_t n = static_cast<std::int64_t>(plan_.epoch_examples.size());
    const std::int64_t per_epoch = (n + train_.batch - 1) / train_.batch;
    // train.steps <= per_epoch * epochs; less when a step cap cuts the last epoch short.
    for (std::int64_t epoch = trainer_.steps_done() / per_epoch;
         epoch * per_epoch < train_.steps && !result_.stopped_early; ++epoch) {
      const auto batches =
          plan_.example_lengths.empty()
              ? epoch_batches(plan_.epoch_examples, train_.batch, train_.seed, epoch, true)
              : length_grouped_batches(plan_.epoch_examples, plan_.example_lengths, train_.batch, train_.seed, epoch);
      for (std::size_t bi = static_cast<std::size_t>(trainer_.steps_done() - epoch * per_epoch);
           bi < batches.size() && trainer_.steps_done() < train_.steps && !result_.stopped_early; ++bi) {
        const StepStats st = step(batches[bi]);
        // The epoch's validation checkpoints after its last step anyway.
        const bool last = bi + 1 == batches.size() || trainer_.steps_done() == train_.steps;
        const bool within = !last && plan_.eval_every > 0 && trainer_.steps_done() % plan_.eval_every == 0;
        record(st, epoch, !last && !within);
        if (within) validate(epoch, false), agree_on_early_stop();
        if (!last) stop_if_asked();
      }
      if (!result_.stopped_early) validate(epoch, true), agree_on_early_stop();
      stop_if_asked(true);
    }
    result_.epochs = (trainer_.steps_done() + per_epoch - 1) / per_epoch;
  }

  void run_steps() {
    for (std::int64_t s = trainer_.steps_done(); s < train_.steps && !result_.stopped_early; ++s) {
      const StepStats st = step(task_.step_examples(s));
      const bool validates = plan_.eval_every > 0 && ((s + 1) % plan_.eval_every == 0 || s + 1 == train_.steps);
      record(st, std::nullopt, !validates);
      if (validates) validate(std::nullopt, false), agree_on_early_stop();
      stop_if_asked();
    }
  }

  // One optimizer step over `examples`: micro-batch m of the trainer's
  // micro_batches() is the m-th contiguous share (under mpirun each rank
  // runs its own; every rank knows the whole batch, as a function of the
  // seed and step, and reads only its share).
  StepStats step(const std::vector<std::int64_t>& examples) {
    const std::span<const std::int64_t> all(examples);
    double items = 0;
    const StepStats st = trainer_.step([&](std::int64_t micro, const ForwardContext& ctx, double grad_scale) {
      const std::size_t parts = static_cast<std::size_t>(trainer_.micro_batches());
      const std::size_t lo = all.size() * static_cast<std::size_t>(micro) / parts;
      const std::size_t hi = all.size() * static_cast<std::size_t>(micro + 1) / parts;
      if (lo == hi) return 0.0;
      const MicroBatchLoss m = task_.micro_step(all.subspan(lo, hi - lo), ctx, grad_scale);
      items += static_cast<double>(m.items);
      return m.loss;
    });
    group_.sum(std::span<double>(&items, 1));  // the throughput counts every rank's
    items_ += static_cast<std::int64_t>(items);
    return st;
  }

  // CRC-32 of the parameters' bytes.
  std::uint64_t weights_crc() {
    const std::span<const float> w = store_.all_data();
    return crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(w.data()), w.size_bytes());
  }

  void record(const StepStats& st, std::optional<std::int64_t> epoch, bool may_checkpoint) {
    const double per_s = static_cast<double>(items_) / seconds();
    result_.curves.add_step(st);
    json rec = step_json(st, train_.loss_scaling);
    if (epoch) rec["epoch"] = *epoch;
    if (!plan_.throughput_key.empty()) {
      rec[plan_.throughput_key] = per_s;
      result_.curves.add_throughput(st.step + 1, per_s, plan_.throughput_key);
    }
    if (group_.size() > 1) rec["ranks"] = group_.size();
    rec["train_seconds"] = run_.training_seconds();  // the whole run's, a resumed one's earlier time included
    finish_step(run_, progress_, trainer_, st, rec, may_checkpoint);
    progress_.update(st.step + 1, epoch.value_or(0) + 1, st.loss, per_s, plan_.unit.c_str(), MemoryCurve::text(st));
    draw_curves(false);
  }

  // The curves for watching (FitPlan::on_curves): every 10 s, and after a validation.
  void draw_curves(bool validated) {
    if (!plan_.on_curves || !group_.primary()) return;
    const auto now = std::chrono::steady_clock::now();
    if (!validated && now - last_drawn_ < std::chrono::seconds(10)) return;
    last_drawn_ = now;
    try {
      plan_.on_curves(result_.curves, result_.validation && result_.validation->accuracy);
    } catch (const std::exception& e) {
      if (!draw_failed_) progress_.warn(fmt::format("the training curves could not be drawn: {}", e.what()));
      draw_failed_ = true;
    }
  }

  // After a step: when a stop was asked for, a checkpoint of where the run
  // stands (unless the epoch's validation just wrote one), then Interrupted.
  void stop_if_asked(bool checkpointed = false) {
    // Every rank stops after the same step: a signal any rank took counts.
    const int sig = static_cast<int>(group_.max(stop_ ? stop_->take() : 0));
    if (sig == 0) return;
    if (!checkpointed) save_run_checkpoint(run_, trainer_, {{"data.step", std::to_string(trainer_.steps_done())}});
    throw Interrupted(sig, fmt::format("stopped by {} after step {}; its checkpoint is saved: the same command with "
                                       "--resume goes on from there",
                                       signal_name(sig), trainer_.steps_done()));
  }

  // Validation, its metrics record, a checkpoint that notes where the data
  // stands (an epoch's end, or a step), and a log line.
  // Rank 0 validates alone (the others go on to the next step and wait for
  // it in its reduction): nothing in the loop depends on the outcome.
  void validate(std::optional<std::int64_t> epoch, bool epoch_end) {
    if (!group_.primary()) return;
    const std::int64_t at = trainer_.steps_done();
    const Validation v = task_.validate();
    result_.curves.add_eval(at, v.loss, v.accuracy.value_or(0.0));
    result_.validation = v;
    json rec = {{"step", at}, {"validation_loss", v.loss}};
    if (epoch) rec["epoch"] = *epoch;
    if (v.accuracy) rec["validation_accuracy"] = *v.accuracy;
    run_.append_metrics(rec);
    progress_.record(rec);
    if (epoch_end) save_run_checkpoint(run_, trainer_, {{"data.epoch", std::to_string(*epoch + 1)}});
    else save_run_checkpoint(run_, trainer_, {{"data.step", std::to_string(at)}});
    if (track_best(at, v.loss) && run_.writes())  // this checkpoint is the best so far: kept as such
      write_file_atomic(best_checkpoint_path(run_.path()),
                        read_file(last_checkpoint_path(run_.path()), kMaxWeightsBytes));
    std::string line = epoch_end ? fmt::format("epoch {}", *epoch + 1)
                       : epoch   ? fmt::format("epoch {} step {}", *epoch + 1, at)
                                 : fmt::format("step {}", at);
    line += fmt::format(": validation loss {:.4f}{}", v.loss, plan_.loss_unit);
    if (v.accuracy) line += fmt::format(", accuracy {:.2f}%", 100 * *v.accuracy);
    progress_.log(line);
    draw_curves(true);
    if (result_.stopped_early)
      progress_.log(
          fmt::format("early stopping: the validation loss has not fallen below {:.4f} (step {}) in {} "
                      "validations; training stops, and the job goes on with step {}'s weights",
                      best_loss_, *result_.best_step, train_.early_stopping, *result_.best_step));
  }

  // Rank 0 validates alone: under mpirun every rank learns whether it stopped
  // training, and all leave the loop after the same step.
  void agree_on_early_stop() {
    if (train_.early_stopping > 0 && group_.size() > 1) result_.stopped_early = group_.max(result_.stopped_early) != 0;
  }

  // Early stopping's record of a validation: whether it is the best yet (a
  // lower loss), and the run stopped after train.early_stopping that are not.
  bool track_best(std::int64_t step, double loss) {
    if (train_.early_stopping == 0) return false;
    if (!result_.best_step || loss < best_loss_) {
      best_loss_ = loss, result_.best_step = step, worse_ = 0;
      return true;
    }
    if (++worse_ >= train_.early_stopping) result_.stopped_early = true;
    return false;
  }

  TrainingTask& task_;
  const TrainConfig& train_;
  const FitPlan& plan_;
  RunDir& run_;
  Progress& progress_;
  StopRequest* stop_;  // may be null: no stop is asked for
  ParamStore& store_;
  Trainer trainer_;
  ProcessGroup& group_ = process_group();
  FitResult result_;
  std::int64_t items_ = 0;
  std::chrono::steady_clock::time_point t0_;
  std::chrono::steady_clock::time_point last_drawn_ = std::chrono::steady_clock::now();
  bool draw_failed_ = false;
  double best_loss_ = 0;    // early stopping: the lowest validation loss
  std::int64_t worse_ = 0;  // and the validations since it
};

}  // namespace

FitResult fit(TrainingTask& task, ParamStore& store, const TrainConfig& train, const FitPlan& plan,
              const DescribedConfig& config, RunDir& run, Progress& progress, StopRequest* stop) {
  check<ConfigError>(train.steps >= 0 && train.batch > 0, "steps must be >= 0 and batch positive");
  const std::int64_t ranks = process_group().size(), shares = ranks * train.grad_accumulation;
  check<ConfigError>(ranks == 1 || train.batch % shares == 0,
                     "batch ({}) must be a multiple of ranks × grad_accumulation ({} × {}) so that every rank "
                     "trains on an equal share",
                     train.batch, ranks, train.grad_accumulation);
  // A warmup as long as the run keeps the rate below its peak throughout: said once, at the start.
  if (train.steps > 0 && train.schedule.warmup_steps >= train.steps && process_group().primary())
    progress.log(
        fmt::format("note: the warmup ({} steps) is as long as the run ({} steps): the learning rate never "
                    "reaches its peak ({}); set fewer with --warmup-steps",
                    train.schedule.warmup_steps, train.steps, train.schedule.base_lr));
  return Loop(task, store, train, plan, run, progress, stop).run(config);
}

std::string skipped_steps_note(std::int64_t skipped) {
  return skipped ? fmt::format(" ({} skipped: the loss or gradient was not finite)", skipped) : "";
}

namespace {

// "" for a run trained in one invocation; else what this one trained.
std::string this_run(const FitResult& r) {
  if (r.first_step == 0) return "";
  if (r.steps == r.first_step) return "none in this run";
  return fmt::format("steps {}-{} in this run: {:.1f} s", r.first_step + 1, r.steps, r.seconds);
}

}  // namespace

std::string FitResult::summary() const {
  std::string s = fmt::format("{} steps", steps);
  if (stopped_early)
    s += fmt::format(" (stopped early: the best validation at step {}, whose weights are tested)", *best_step);
  if (epochs) s += fmt::format(", {} epochs", epochs);
  const std::string part = this_run(*this);
  if (part.empty()) return s + fmt::format(", {:.1f} s, {:.0f} {}", seconds, items_per_s, unit);
  return s + fmt::format(", {:.1f} s in all, {}, {:.0f} {}", total_seconds, part, items_per_s, unit);
}

std::string FitResult::steps_and_time(std::string_view rate) const {
  std::string part = this_run(*this);
  if (stopped_early)
    part = fmt::format("stopped early; the best validation at step {}{}{}", *best_step, part.empty() ? "" : ", ", part);
  if (!rate.empty()) part += (part.empty() ? "" : ", ") + std::string(rate);
  return fmt::format("{} steps{} in {:.1f} s{}", steps, skipped_steps_note(skipped_steps), total_seconds,
                     part.empty() ? "" : " (" + part + ")");
}

CrossEntropyGrad cross_entropy_grad(const Tensor& logits, const std::int64_t* targets, double grad_scale,
                                    double label_smoothing, const double* class_weights) {
  const std::int64_t C = logits.dim(logits.ndim() - 1), rows = logits.numel() / C;
  CrossEntropyGrad g{0.0, Tensor::empty(logits.shape())};
  g.loss = cross_entropy(g.dlogits.f32(), logits.f32(), targets, rows, C, kIgnoreIndex, label_smoothing, grad_scale,
                         class_weights)
               .loss;
  return g;
}

void check_finite_result(const char* what, double value) {
  check<Error>(std::isfinite(value), "{} is {}: the model's outputs are not finite, so there is no result to report",
               what, value);
}

std::int64_t at_least_max_len(std::int64_t max_len, std::int64_t needed, Progress& progress) {
  if (max_len >= needed) return max_len;
  progress.log(
      fmt::format("note: model.max_len {} is raised to {}, the longest sequence the job feeds", max_len, needed));
  return needed;
}

}  // namespace multihead
