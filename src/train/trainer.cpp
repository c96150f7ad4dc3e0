#include "multihead/train/trainer.h"

#include <cmath>
#include <limits>

#include "multihead/core/allocator.h"
#include "multihead/io/plots.h"
#include "multihead/io/state_dict.h"

namespace multihead {

namespace {
double mib(std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }
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
  return {{"peak_bytes", s.peak_bytes},          {"current_bytes", s.current_bytes},
          {"parameter_bytes", s.param_bytes},    {"gradient_bytes", s.grad_bytes},
          {"optimizer_bytes", s.optimizer_bytes}, {"activation_peak_bytes", s.activation_peak_bytes}};
}

nlohmann::json step_json(const StepStats& s, bool loss_scaling) {
  nlohmann::json j = {{"step", s.step + 1}, {"loss", s.loss}, {"lr", s.lr}, {"grad_norm", s.grad_norm},
                      {"memory", MemoryCurve::json(s)}};
  if (loss_scaling) j["loss_scale"] = s.loss_scale, j["skipped"] = s.skipped;
  return j;
}

void MemoryCurve::plot(const std::string& path) const {
  line_plot_png(path, "Memory per step (allocator peak)", "step", "MiB",
                {{"peak", step_, peak_},
                 {"activations", step_, act_},
                 {"optimizer", step_, opt_},
                 {"gradients", step_, grads_},
                 {"parameters", step_, params_}});
}

Trainer::Trainer(ParamStore& store, const TrainConfig& cfg)
    : store_(&store), cfg_(cfg), opt_(make_optimizer(cfg, store)) {
  if (cfg.loss_scaling) scaler_ = std::make_unique<GradScaler>(cfg.scaler);
}

StepStats Trainer::step(const MicroStep& fn) {
  StepStats s;
  s.step = step_;
  reset_peak_memory();
  // The memory report, filled in on each way out of the step.
  auto report_memory = [&] {
    const MemoryStats m = memory_stats();
    s.param_bytes = s.grad_bytes = store_->numel() * static_cast<std::int64_t>(sizeof(float));
    s.optimizer_bytes = opt_->state_bytes();
    s.peak_bytes = m.peak_bytes;
    s.current_bytes = m.current_bytes;
    s.activation_peak_bytes = m.peak_bytes - s.param_bytes - s.grad_bytes - s.optimizer_bytes;
  };
  store_->zero_grad();
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = cfg_.seed;
  ctx.precision = cfg_.precision;
  const std::int64_t micro = cfg_.grad_accumulation;
  s.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  for (std::int64_t m = 0; m < micro; ++m) {
    // Distinct dropout masks per micro-batch: the step counter advances by
    // micro-batch, so (step, micro) never repeats across the run.
    ctx.step = static_cast<std::uint64_t>(step_ * micro + m);
    s.loss += fn(m, ctx, s.loss_scale / static_cast<double>(micro));
  }
  s.loss /= static_cast<double>(micro);
  s.lr = cfg_.schedule.lr_at(step_);
  if (scaler_) {
    // Unscale first, so clipping and the optimizer see true gradients; an
    // overflow skips the update and backs the scale off.
    const bool finite = scaler_->unscale(store_->all_grads()) && std::isfinite(s.loss);
    scaler_->update(!finite);
    if (!finite) {
      s.skipped = true;
      s.grad_norm = std::numeric_limits<double>::infinity();
      ++step_;
      report_memory();
      return s;
    }
  }
  s.grad_norm = cfg_.clip_grad_norm > 0 ? clip_grad_norm(store_->all_grads(), cfg_.clip_grad_norm)
                                        : global_grad_norm(store_->all_grads());
  check<Error>(std::isfinite(s.loss) && std::isfinite(s.grad_norm),
               "training diverged at step {}: loss {}, gradient norm {}", step_, s.loss, s.grad_norm);
  opt_->step(*store_, s.lr);
  ++step_;
  report_memory();
  return s;
}

void Trainer::save_checkpoint(const std::string& path, const std::map<std::string, std::string>& extra) const {
  TensorMap tensors = state_dict(*store_);
  std::map<std::string, std::string> meta = extra;
  opt_->save_state(*store_, tensors, meta);
  meta["format"] = "multihead-checkpoint-1";
  meta["step"] = std::to_string(step_);
  meta["rng.seed"] = std::to_string(cfg_.seed);
  if (scaler_) scaler_->save_state(meta);
  write_safetensors(path, tensors, meta);
}

std::map<std::string, std::string> Trainer::load_checkpoint(const std::string& path) {
  SafetensorsFile f = SafetensorsFile::read(path);
  const auto& meta = f.metadata();
  auto fmt_it = meta.find("format");
  check<IoError>(fmt_it != meta.end() && fmt_it->second == "multihead-checkpoint-1",
                 "{}: not a multihead checkpoint", path);
  std::int64_t step = 0;
  try {
    step = std::stoll(meta.at("step"));
    check<IoError>(std::stoull(meta.at("rng.seed")) == cfg_.seed,
                   "{}: checkpoint was written with seed {}, this run uses {}", path, meta.at("rng.seed"), cfg_.seed);
  } catch (const std::out_of_range&) {
    throw IoError(path + ": checkpoint lacks its step or seed");
  } catch (const std::invalid_argument&) {
    throw IoError(path + ": checkpoint step or seed is not a number");
  }
  TensorMap tensors = f.all_tensors();
  TensorMap params;
  for (auto& [name, t] : tensors)
    if (!name.starts_with("optimizer.")) params.emplace(name, std::move(t));
  // The optimizer state loads into a fresh optimizer first, so a bad file
  // leaves this trainer untouched.
  std::unique_ptr<Optimizer> opt = make_optimizer(cfg_, *store_);
  opt->load_state(*store_, tensors, meta);
  std::unique_ptr<GradScaler> scaler;
  if (scaler_) {
    scaler = std::make_unique<GradScaler>(cfg_.scaler);
    scaler->load_state(meta);
  }
  load_state_dict(*store_, params, path);
  scaler_ = std::move(scaler);
  opt_ = std::move(opt);
  step_ = step;
  return meta;
}

}  // namespace multihead
