// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/sequence_task.h"

#include <algorithm>
#include <cstring>

#include "multihead/io/json_config.h"
#include "multihead/nn/state_dict.h"
#include "multihead/report/plots.h"
#include "multihead/report/run_report.h"
#include "multihead/train/fit.h"

namespace multihead {

using json = nlohmann::json;

SequenceTaskJob::SequenceTaskJob() {
  task.min_len = 1;
  task.max_len = 16;
  model.vocab_size = task.vocab_size();
  model.num_layers = 2;
  model.layer.d_model = 64;
  model.layer.nhead = 4;
  model.layer.dim_feedforward = 128;
  model.layer.dropout = 0.0;
  model.layer.norm_first = true;
  model.positions = PositionKind::kRope;
  model.max_len = 256;
  train.steps = 4000;  // reverse, lengths 1..16: 98.8% of sequences right at length 16 (17 s)
  train.batch = 32;
  train.schedule.base_lr = 1e-3;
  train.schedule.warmup_steps = 50;
  train.schedule.decay = Decay::kCosine;
  train.clip_grad_norm = 1.0;
}

void SequenceTaskJob::validate(const std::string& where) const {
  check<ConfigError>(task.symbols > 0 && task.min_len > 0 && task.min_len <= task.max_len,
                     "{}: the task needs symbols > 0 and 0 < min_len <= max_len", where);
  check<ConfigError>(eval_batches > 0, "{}: eval_batches must be positive, got {}", where, eval_batches);
  for (const std::int64_t L : test_lengths)
    check<ConfigError>(L >= 1 && L <= kMaxLength / 4, "{}: test_lengths must each be in [1, {}], got {}", where,
                       kMaxLength / 4, L);
}

namespace {

LengthAccuracy evaluate_length(LanguageModel& model, const SyntheticTask& train_task, std::int64_t length,
                               std::int64_t batches, std::int64_t batch, std::uint64_t seed, Precision precision,
                               StopRequest* stop = nullptr) {
  SyntheticTask t = train_task;
  t.min_len = t.max_len = length;
  std::int64_t tokens = 0, right = 0, seqs = 0, seqs_right = 0;
  for (std::int64_t i = 0; i < batches; ++i) {
    stop_point(stop);
    // Test batches use their own seed stream, apart from training's.
    SyntheticBatch b = synthetic_batch(t, batch, seed ^ 0x7e57ull, static_cast<std::uint64_t>(i));
    Tensor logits = model.forward(b.ids, eval_context(precision));
    model.release_saved();
    const std::int64_t T = b.ids.dim(1), V = logits.dim(2);
    for (std::int64_t r = 0; r < batch; ++r) {
      bool all = true;
      for (std::int64_t p = 0; p < T; ++p) {
        const std::int64_t want = b.targets.data<std::int64_t>()[r * T + p];
        if (want == kIgnoreIndex) continue;
        const float* z = logits.f32() + (r * T + p) * V;
        const bool ok = std::max_element(z, z + V) - z == want;
        ++tokens, right += ok;
        all = all && ok;
      }
      ++seqs, seqs_right += all;
    }
  }
  return {length, static_cast<double>(right) / static_cast<double>(tokens),
          static_cast<double>(seqs_right) / static_cast<double>(seqs)};
}

}  // namespace

namespace {

// "length 16: sequence accuracy 98.80%, token accuracy 99.90%".
std::string length_line(const LengthAccuracy& a) {
  return fmt::format("length {}: sequence accuracy {:.2f}%, token accuracy {:.2f}%", a.length,
                     100 * a.sequence_accuracy, 100 * a.token_accuracy);
}

}  // namespace

std::vector<std::string> evaluate_run(const SequenceTaskJob& job, const std::string& run_dir) {
  TrainedModel<LanguageModel> m(job.model, run_dir, job.train.precision);
  std::vector<std::string> lines;
  for (auto L : job.test_lengths)
    lines.push_back(length_line(
        evaluate_length(m.model, job.task, L, job.eval_batches, job.train.batch, job.train.seed, job.train.precision)));
  return lines;
}

ModelSample sample_model(const SequenceTaskJob& job, const std::string& run_dir, const ModelSampleSettings& settings) {
  TrainedModel<LanguageModel> m(job.model, run_dir);
  // The first test batch's sequences, of the training lengths.
  SyntheticBatch b = synthetic_batch(job.task, settings.examples, job.train.seed ^ 0x7e57ull, 0);
  Tensor logits = m.model.forward(b.ids, settings.context());
  m.model.release_saved();
  return std::move(ModelSample(std::move(logits)).input("ids", std::move(b.ids)));
}

std::vector<std::string> summary_lines(const SequenceTaskResult& r) {
  std::vector<std::string> lines;
  for (const auto& a : r.by_length) lines.push_back(length_line(a));
  lines.push_back(fmt::format("training: {}", r.trained));
  return lines;
}

namespace {

// Training: a generated batch a step, cross-entropy of the answer tokens.
class SequenceTrainingTask final : public TrainingTask {
 public:
  SequenceTrainingTask(LanguageModel& model, const SequenceTaskJob& job) : model_(model), job_(job) {}

  // The batch of step `step` (a function of seed and step); its examples are its rows.
  std::vector<std::int64_t> step_examples(std::int64_t step) override {
    batch_ = synthetic_batch(job_.task, job_.train.batch, job_.train.seed, static_cast<std::uint64_t>(step));
    std::vector<std::int64_t> rows(static_cast<std::size_t>(batch_.ids.dim(0)));
    for (std::size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<std::int64_t>(r);
    return rows;
  }

  MicroBatchLoss micro_step(std::span<const std::int64_t> rows, const ForwardContext& ctx, double grad_scale) override {
    auto train_on = [&](const SyntheticBatch& b) -> MicroBatchLoss {
      Tensor logits = model_.forward(b.ids, ctx);
      return {cross_entropy_backward(model_, logits, b.targets.data<std::int64_t>(), grad_scale), b.ids.dim(0)};
    };
    if (rows.size() == static_cast<std::size_t>(batch_.ids.dim(0))) return train_on(batch_);
    return train_on(sub_batch(rows.front(), static_cast<std::int64_t>(rows.size())));
  }

 private:
  // Rows [first, first + n) of the step's batch (micro-batches are contiguous).
  SyntheticBatch sub_batch(std::int64_t first, std::int64_t n) const {
    const std::int64_t T = batch_.ids.dim(1);
    SyntheticBatch b{Tensor({n, T}, DType::kI64), Tensor({n * T}, DType::kI64), 0};
    std::memcpy(b.ids.data<std::int64_t>(), batch_.ids.data<std::int64_t>() + first * T,
                sizeof(std::int64_t) * static_cast<std::size_t>(n * T));
    std::memcpy(b.targets.data<std::int64_t>(), batch_.targets.data<std::int64_t>() + first * T,
                sizeof(std::int64_t) * static_cast<std::size_t>(n * T));
    return b;
  }

  LanguageModel& model_;
  const SequenceTaskJob& job_;
  SyntheticBatch batch_;
};

}  // namespace

SequenceTaskResult run_job(const SequenceTaskJob& job_in, RunDir& run, Progress& progress, StopRequest* stop) {
  SequenceTaskJob job = job_in;
  job.model.vocab_size = job.task.vocab_size();
  std::int64_t longest = job.task.max_tokens();
  for (auto L : job.test_lengths) longest = std::max(longest, 2 * L + 2);
  job.model.max_len = at_least_max_len(job.model.max_len, longest, progress);
  job.train.set_steps(job.train.steps);
  job.model.validate();
  progress.log(fmt::format("task: {} of {} symbols, trained on lengths {}..{}", synthetic_kind_name(job.task.kind),
                           job.task.symbols, job.task.min_len, job.task.max_len));
  ModelToTrain<LanguageModel> m(job.model, job.train, progress);
  SequenceTrainingTask task(m.model, job);
  FitPlan plan;
  plan.on_curves = live_curves(run);  // plots/*.png redrawn as it trains
  plan.unit = "seq/s";
  const FitResult fitted = fit(task, m.store, job.train, plan, described_config(job), run, progress, stop);

  // No validation here: the last step's loss stands for the final weights.
  if (!fitted.curves.loss.empty()) check_finite_result("the last step's loss", fitted.curves.loss.back());
  SequenceTaskResult r;
  r.steps = fitted.steps;
  r.skipped_steps = fitted.skipped_steps;
  r.losses = fitted.curves.loss;
  r.peak_activation_bytes = fitted.curves.memory.max_activation_bytes();
  r.train_seconds = fitted.total_seconds;
  r.ms_per_step = 1e3 * fitted.seconds / static_cast<double>(std::max<std::int64_t>(r.steps - fitted.first_step, 1));
  r.trained = fitted.steps_and_time(fmt::format("{:.1f} ms a step", r.ms_per_step));
  std::vector<double> lx, la, lt;
  for (auto L : job.test_lengths) {
    r.by_length.push_back(evaluate_length(m.model, job.task, L, job.eval_batches, job.train.batch, job.train.seed,
                                          job.train.precision, stop));
    lx.push_back(static_cast<double>(L));
    la.push_back(r.by_length.back().sequence_accuracy);
    lt.push_back(r.by_length.back().token_accuracy);
    run.append_metrics({{"test_length", L},
                        {"token_accuracy", r.by_length.back().token_accuracy},
                        {"sequence_accuracy", r.by_length.back().sequence_accuracy}});
  }
  json res = {{"steps", r.steps},
              {"skipped_steps", r.skipped_steps},
              {"train_seconds", r.train_seconds},
              {"ms_per_step", r.ms_per_step},
              {"by_length", json::array()}};
  for (const auto& a : r.by_length)
    res["by_length"].push_back(
        {{"length", a.length}, {"token_accuracy", a.token_accuracy}, {"sequence_accuracy", a.sequence_accuracy}});
  run.write_results(res);
  // Test lengths double (16, 32, 64): a log axis spaces them evenly.
  PlotAxes fraction;
  fraction.y_floor = 0, fraction.y_ceiling = 1;
  fraction.log_x = true;
  line_plot_png(run.file("plots/accuracy_by_length.png"), "Test accuracy by length", "length", "accuracy",
                {{"sequences", lx, la}, {"tokens", lx, lt}}, fraction);
  RunReport report{job.report_title, {}, ""};
  report.rows = {
      {"task", fmt::format("{} of {} symbols, trained on lengths {} to {}", synthetic_kind_name(job.task.kind),
                           job.task.symbols, job.task.min_len, job.task.max_len)},
      {"training", fmt::format("{} ({:.1f} ms a step)", fitted.summary(), r.ms_per_step)},
      {"model", job.model.describe(m.store.numel())}};
  report.sections = "## Accuracy by length\n\n| length | token accuracy | sequence accuracy |\n|---|---|---|\n";
  for (const auto& a : r.by_length)
    report.sections +=
        fmt::format("| {} | {:.2f}% | {:.2f}% |\n", a.length, 100 * a.token_accuracy, 100 * a.sequence_accuracy);
  report.sections += "\n![accuracy by length](plots/accuracy_by_length.png)\n";
  write_run_report(run, fitted, report);
  return r;
}

}  // namespace multihead
