// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/trainer.h"

#include <cmath>
#include <limits>
#include <optional>

#include "multihead/core/allocator.h"
#include "multihead/core/process_memory.h"
#include "multihead/core/step_profile.h"
#include "multihead/nn/state_dict.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/distributed.h"

namespace multihead {

namespace {
double mib(std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }
// NaN's sign bit means nothing to a reader; fmt would print "-nan".
double nan_unsigned(double x) { return std::isnan(x) ? std::fabs(x) : x; }
}  // namespace

void MemoryCurve::add(const StepStats& s) {
  step_.push_back(static_cast<double>(s.step + 1));
  params_.push_back(mib(s.param_bytes));
  grads_.push_back(mib(s.grad_bytes));
  opt_.push_back(mib(s.optimizer_bytes));
  act_.push_back(mib(s.activation_peak_bytes));
  peak_.push_back(mib(s.peak_bytes));
  max_activation_bytes_ = std::max(max_activation_bytes_, s.activation_peak_bytes);
}

std::string MemoryCurve::text(const StepStats& s) {
  return fmt::format("peak {:.0f} MiB: parameters {:.0f}, gradients {:.0f}, optimizer {:.0f}, activations {:.0f}",
                     mib(s.peak_bytes), mib(s.param_bytes), mib(s.grad_bytes), mib(s.optimizer_bytes),
                     mib(s.activation_peak_bytes));
}

nlohmann::json MemoryCurve::json(const StepStats& s) {
  return {{"peak_bytes", s.peak_bytes},
          {"current_bytes", s.current_bytes},
          {"parameter_bytes", s.param_bytes},
          {"gradient_bytes", s.grad_bytes},
          {"optimizer_bytes", s.optimizer_bytes},
          {"activation_peak_bytes", s.activation_peak_bytes},
          {"rss_bytes", s.rss_bytes},
          {"cached_bytes", s.cached_bytes}};
}

nlohmann::json step_json(const StepStats& s, bool loss_scaling) {
  nlohmann::json j = {{"step", s.step + 1},
                      {"loss", s.loss},
                      {"lr", s.lr},
                      {"grad_norm", s.grad_norm},
                      {"memory", MemoryCurve::json(s)}};
  if (loss_scaling) j["loss_scale"] = s.loss_scale;
  if (loss_scaling || s.skipped) j["skipped"] = s.skipped;
  return j;
}

StepStats step_stats_from_json(const nlohmann::json& r) {
  StepStats s;
  s.step = r.value("step", std::int64_t{1}) - 1;
  // NaN and Inf are written as null.
  auto num = [&](const char* k) { return r.contains(k) && r[k].is_number() ? r[k].get<double>() : std::nan(""); };
  s.loss = num("loss");
  s.grad_norm = num("grad_norm");
  s.lr = num("lr");
  s.skipped = r.value("skipped", false);
  if (r.contains("loss_scale")) s.loss_scale = num("loss_scale");
  if (r.contains("memory") && r["memory"].is_object()) {
    const nlohmann::json& m = r["memory"];
    s.peak_bytes = m.value("peak_bytes", std::int64_t{0});
    s.current_bytes = m.value("current_bytes", std::int64_t{0});
    s.param_bytes = m.value("parameter_bytes", std::int64_t{0});
    s.grad_bytes = m.value("gradient_bytes", std::int64_t{0});
    s.optimizer_bytes = m.value("optimizer_bytes", std::int64_t{0});
    s.activation_peak_bytes = m.value("activation_peak_bytes", std::int64_t{0});
    s.rss_bytes = m.value("rss_bytes", std::int64_t{-1});
    s.cached_bytes = m.value("cached_bytes", std::int64_t{0});
  }
  return s;
}

void TrainingCurves::add_step(const StepStats& s) {
  step.push_back(static_cast<double>(s.step + 1));
  loss.push_back(s.loss);
  lr.push_back(s.lr);
  grad_norm.push_back(s.grad_norm);
  memory.add(s);
}

void TrainingCurves::add_throughput(std::int64_t at, double per_s, const std::string& key) {
  throughput_step.push_back(static_cast<double>(at));
  throughput.push_back(per_s);
  throughput_key = key;
}

void TrainingCurves::add_eval(std::int64_t at, double l, double accuracy) {
  eval_step.push_back(static_cast<double>(at));
  eval_loss.push_back(l);
  eval_accuracy.push_back(accuracy);
}

void TrainingCurves::add_record(const nlohmann::json& r) {
  if (r.contains("validation_loss"))
    add_eval(r.value("step", std::int64_t{0}), r.value("validation_loss", 0.0), r.value("validation_accuracy", 0.0));
  else if (r.contains("loss")) {
    add_step(step_stats_from_json(r));
    for (const auto& [key, v] : r.items())
      if (key.size() > 6 && key.ends_with("_per_s") && v.is_number())
        add_throughput(r.value("step", std::int64_t{0}), v.get<double>(), key);
  }
}

Trainer::Trainer(ParamStore& store, const TrainConfig& cfg)
    : store_(&store), cfg_(cfg), opt_(make_optimizer(cfg, store)) {
  if (cfg.loss_scaling) scaler_ = std::make_unique<GradScaler>(cfg.scaler);
}

std::int64_t Trainer::micro_batches() const { return cfg_.grad_accumulation * process_group().size(); }

// The gradients' sum over the ranks. Under mpirun with overlap, the last
// micro-batch's backward hands them to the sums piece by piece as they
// become final (ParamStore's hook), from the end of the buffer down; the
// rest goes when the pass is done. The pieces are cut at the store's
// boundaries, the same on every rank. Every rank then holds the same
// gradients and loss, and so makes the same decisions (skip, clip, scale)
// and the same update.
class Trainer::GradientSum {
 public:
  GradientSum(ProcessGroup& group, ParamStore& store, const TrainConfig& cfg)
      : group_(group),
        store_(store),
        cfg_(cfg),
        grads_(store.all_grads()),
        overlap_(group.size() > 1 && cfg.allreduce_overlap),
        unsummed_(store.numel()) {
    if (overlap_) cuts_ = store.grads_boundaries();
  }

  // Around the backward of the step's last micro-batch on this rank: the
  // store hands over what is final as it goes.
  void begin_last_backward() {
    if (!overlap_) return;
    sums_.emplace(group_, cfg_.allreduce);
    store_.set_grads_final_hook([this](std::int64_t offset) { hand_over_from(offset); });
  }
  void end_last_backward() {
    if (overlap_) store_.set_grads_final_hook(nullptr);
  }

  // The gradients summed, and the loss (this rank's sum) summed too.
  double finish(double loss) {
    if (group_.size() == 1) return loss;
    if (sums_) {
      hand_over_from(0);
      sums_->start(grads_.first(static_cast<std::size_t>(unsummed_)));
      sums_->wait();
    } else {
      group_.sum(grads_, cfg_.allreduce);
    }
    group_.sum(std::span<double>(&loss, 1));
    return loss;
  }

 private:
  void hand_over_from(std::int64_t offset) {
    while (!cuts_.empty() && cuts_.back() >= offset) {
      sums_->start(
          grads_.subspan(static_cast<std::size_t>(cuts_.back()), static_cast<std::size_t>(unsummed_ - cuts_.back())));
      unsummed_ = cuts_.back();
      cuts_.pop_back();
    }
  }

  ProcessGroup& group_;
  ParamStore& store_;
  const TrainConfig& cfg_;
  std::span<float> grads_;
  bool overlap_;
  std::optional<OverlappedSum> sums_;
  std::vector<std::int64_t> cuts_;  // ascending
  std::int64_t unsummed_;           // gradients [0, unsummed_) not yet handed over
};

StepStats Trainer::step(const MicroStep& fn) {
  StepStats s;
  s.step = step_;
  memory_.reset();
  store_->zero_grad();
  s.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  GradientSum sum(process_group(), *store_, cfg_);
  s.loss = sum.finish(accumulate(fn, s.loss_scale, sum)) / static_cast<double>(micro_batches());
  s.lr = cfg_.schedule.lr_at(step_);
  update(s);
  ++step_;
  report_memory(s);
  return s;
}

double Trainer::accumulate(const MicroStep& fn, double loss_scale, GradientSum& sum) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = cfg_.seed;
  ctx.precision = cfg_.precision;
  // Rank r of N takes micro-batches r*A .. r*A+A-1 of the step's N*A: the
  // same micro-batches, and dropout masks, as one process with N*A.
  const std::int64_t micro = micro_batches(), first = process_group().rank() * cfg_.grad_accumulation;
  const std::int64_t last = first + cfg_.grad_accumulation - 1;
  double loss = 0;
  for (std::int64_t m = first; m <= last; ++m) {
    // Distinct dropout masks per micro-batch: the step counter advances by
    // micro-batch, so (step, micro) never repeats across the run.
    ctx.step = static_cast<std::uint64_t>(step_ * micro + m);
    if (m == last) sum.begin_last_backward();
    struct EndLast {
      GradientSum& sum;
      bool on;
      ~EndLast() {
        if (on) sum.end_last_backward();
      }
    } end_last{sum, m == last};
    loss += fn(m, ctx, loss_scale / static_cast<double>(micro));
  }
  return loss;
}

void Trainer::update(StepStats& s) {
  if (scaler_) {
    // Unscale first, so clipping and the optimizer see true gradients; an
    // overflow skips the update and backs the scale off.
    const bool finite = scaler_->unscale(store_->all_grads()) && std::isfinite(s.loss);
    scaler_->update(!finite);
    if (!finite) return skip(s);
  }
  {
    const StepProfileScope profile(StepPart::kOptimizer);
    s.grad_norm = global_grad_norm(store_->all_grads());
  }
  if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
    check<Error>(cfg_.on_nonfinite == NonFinite::kSkip,
                 "training stopped at step {}: loss {}, gradient norm {} (not finite; on_nonfinite skip would skip "
                 "such steps)",
                 step_ + 1, nan_unsigned(s.loss), nan_unsigned(s.grad_norm));
    return skip(s);
  }
  skipped_in_a_row_ = 0;
  // Clipping is a factor the optimizer applies as it reads each gradient:
  // no pass of its own over the buffer.
  const StepProfileScope profile(StepPart::kOptimizer);
  opt_->step(*store_, s.lr, cfg_.clip_grad_norm > 0 ? clip_coefficient(s.grad_norm, cfg_.clip_grad_norm) : 1.0f);
}

// A step that cannot be taken: an overflow under loss scaling (expected now
// and then: the scale backs off), or a non-finite loss or gradient with
// on_nonfinite = skip. Either way no update is made and the record says so;
// a run where nothing but such steps happen stops.
void Trainer::skip(StepStats& s) {
  s.skipped = true;
  s.grad_norm = std::numeric_limits<double>::infinity();
  ++skipped_, ++skipped_in_a_row_;
  check<Error>(skipped_in_a_row_ < kMaxSkippedInARow,
               "training stopped at step {}: the last {} steps all had a non-finite loss or gradient", step_ + 1,
               kMaxSkippedInARow);
}

void Trainer::report_memory(StepStats& s) const {
  const MemoryStats m = memory_stats();
  s.param_bytes = s.grad_bytes = store_->numel() * static_cast<std::int64_t>(sizeof(float));
  s.optimizer_bytes = opt_->state_bytes();
  s.peak_bytes = memory_.peak_bytes();
  s.current_bytes = m.current_bytes;
  s.rss_bytes = current_rss_bytes();
  s.cached_bytes = m.cached_bytes;
  s.activation_peak_bytes = s.peak_bytes - s.param_bytes - s.grad_bytes - s.optimizer_bytes;
}

void Trainer::save_checkpoint(const std::string& path, const std::map<std::string, std::string>& extra) const {
  TensorMap tensors = state_dict(*store_);
  std::map<std::string, std::string> meta = extra;
  opt_->save_state(*store_, tensors, meta);
  meta["format"] = kCheckpointFormat;
  meta["step"] = std::to_string(step_);
  meta["rng.seed"] = std::to_string(cfg_.seed);
  meta["skipped_steps"] = std::to_string(skipped_);
  meta["distributed.ranks"] = std::to_string(process_group().size());
  if (scaler_) scaler_->save_state(meta);
  write_safetensors(path, tensors, meta);
}

std::map<std::string, std::string> Trainer::load_checkpoint(const std::string& path) {
  SafetensorsFile f = SafetensorsFile::read(path);
  const auto& meta = f.metadata();
  check_checkpoint_format(f);
  std::int64_t step = 0, skipped = 0;
  try {
    step = std::stoll(meta.at("step"));
    if (auto it = meta.find("skipped_steps"); it != meta.end()) skipped = std::stoll(it->second);
    check<IoError>(std::stoull(meta.at("rng.seed")) == cfg_.seed,
                   "{}: checkpoint was written with seed {}, this run uses {}", path, meta.at("rng.seed"), cfg_.seed);
    // The ranks split each step into their micro-batches: another count
    // would train the rest of the run on other micro-batches.
    const auto ranks = meta.find("distributed.ranks");
    const int was = ranks == meta.end() ? 1 : std::stoi(ranks->second), now = process_group().size();
    check<ConfigError>(was == now,
                       "{}: the run was trained by {} rank{} and this one has {}: resume it with mpirun -np {}{}", path,
                       was, was == 1 ? "" : "s", now, was, was == 1 ? " or without mpirun" : "");
  } catch (const std::out_of_range&) {
    throw IoError(path + ": checkpoint lacks its step or seed");
  } catch (const std::invalid_argument&) {
    throw IoError(path + ": checkpoint step or seed is not a number");
  }
  TensorMap tensors = f.all_tensors();
  const TensorMap params = take_model_tensors(tensors);
  // The optimizer state loads into a fresh optimizer first, so a bad file
  // leaves this trainer untouched.
  std::unique_ptr<Optimizer> opt = make_optimizer(cfg_, *store_);
  try {
    opt->load_state(*store_, tensors, meta);
  } catch (const IoError& e) {
    throw IoError(fmt::format("{}: {}", path, e.what()));
  }
  std::unique_ptr<GradScaler> scaler;
  if (scaler_) {
    scaler = std::make_unique<GradScaler>(cfg_.scaler);
    scaler->load_state(meta);
  }
  load_state_dict(*store_, params, path);
  scaler_ = std::move(scaler);
  opt_ = std::move(opt);
  step_ = step;
  skipped_ = skipped;
  skipped_in_a_row_ = 0;
  return meta;
}

}  // namespace multihead
