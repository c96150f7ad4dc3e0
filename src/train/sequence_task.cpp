#include "multihead/train/sequence_task.h"

#include <algorithm>
#include <chrono>

#include "multihead/core/threading.h"
#include "multihead/io/json_config.h"
#include "multihead/io/plots.h"
#include "multihead/io/state_dict.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/train/resume.h"

namespace multihead {

using json = nlohmann::json;

SequenceTaskJob::SequenceTaskJob() {
  task.min_len = 1;
  task.max_len = 16;
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

json to_json(const SequenceTaskJob& j) {
  const char* kind = j.task.kind == SyntheticKind::kCopy ? "copy" : j.task.kind == SyntheticKind::kSort ? "sort" : "reverse";
  return json{{"task", "sequence_task"},
              {"data",
               {{"kind", kind},
                {"symbols", j.task.symbols},
                {"min_len", j.task.min_len},
                {"max_len", j.task.max_len},
                {"test_lengths", j.test_lengths},
                {"eval_batches", j.eval_batches}}},
              {"model", model_config_json(j.model)},
              {"train", train_config_json(j.train)},
              {"threads", j.threads},
              {"title", j.report_title}};
}

SequenceTaskJob sequence_task_job_from_json(const json& root, const std::string& src) {
  SequenceTaskJob job;
  ConfigReader r(root, src);
  check<ConfigError>(r.get_string("task") == "sequence_task", "{}: task must be sequence_task", src);
  job.threads = static_cast<int>(r.get_int("threads", 0));
  job.report_title = r.get_string("title", job.report_title);
  const json data = r.get_object("data");
  ConfigReader d(data, src + ": data");
  job.task.kind = parse_synthetic_kind(d.get_string("kind", std::string("reverse")));
  job.task.symbols = d.get_int("symbols", job.task.symbols);
  job.task.min_len = d.get_int("min_len", job.task.min_len);
  job.task.max_len = d.get_int("max_len", job.task.max_len);
  job.eval_batches = d.get_int("eval_batches", job.eval_batches);
  job.test_lengths = d.get_positive_ints("test_lengths", job.test_lengths);
  d.finish();
  job.model = read_model_section(r, src, job.task.vocab_size());
  const json train = r.get_object("train");
  ConfigReader t(train, src + ": train");
  job.train = read_train_config(t);
  t.finish();
  r.finish();
  return job;
}

namespace {

LengthAccuracy evaluate_length(LanguageModel& model, const SyntheticTask& train_task, std::int64_t length,
                               std::int64_t batches, std::int64_t batch, std::uint64_t seed, Precision precision) {
  SyntheticTask t = train_task;
  t.min_len = t.max_len = length;
  std::int64_t tokens = 0, right = 0, seqs = 0, seqs_right = 0;
  for (std::int64_t i = 0; i < batches; ++i) {
    // Test batches use their own seed stream, apart from training's.
    SyntheticBatch b = synthetic_batch(t, batch, seed ^ 0x7e57ull, static_cast<std::uint64_t>(i));
    Tensor logits = model.forward(b.ids, eval_context(precision));
    model.clear_cache();
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

std::vector<LengthAccuracy> evaluate_sequence_task_run(const std::string& run_dir, int threads,
                                                       std::optional<Precision> precision) {
  const RunConfig cfg = read_run_config(run_dir);
  SequenceTaskJob job = sequence_task_job_from_json(cfg.json, cfg.path);
  set_num_threads(threads);
  if (precision) job.train.precision = *precision;
  ParamStore store;
  LanguageModel model(store, job.model);
  store.finalize();
  load_state_dict_file(store, last_checkpoint_path(run_dir), true);
  std::vector<LengthAccuracy> out;
  for (auto L : job.test_lengths)
    out.push_back(evaluate_length(model, job.task, L, job.eval_batches, job.train.batch, job.train.seed,
                                  job.train.precision));
  return out;
}

SequenceTaskResult run_sequence_task(const SequenceTaskJob& job_in, RunDir& run, Progress& progress) {
  SequenceTaskJob job = job_in;
  set_num_threads(job.threads);
  job.model.vocab_size = job.task.vocab_size();
  std::int64_t longest = job.task.max_tokens();
  for (auto L : job.test_lengths) longest = std::max(longest, 2 * L + 2);
  job.model.max_len = std::max(job.model.max_len, longest);
  job.train.schedule.total_steps = job.train.steps;
  job.model.validate();
  ParamStore store;
  LanguageModel model(store, job.model);
  store.finalize();
  Rng rng(job.train.seed);
  model.init(rng);
  model.encoder().set_checkpointing(job.train.checkpoint_layers);
  Trainer trainer(store, job.train);
  const std::vector<json> records = start_or_resume(run, to_json(job), trainer);
  progress.set_total(job.train.steps);
  progress.log(fmt::format("task: {} of {} symbols, trained on lengths {}..{}; model: {} positions, {} parameters",
                           to_json(job)["data"]["kind"].get<std::string>(), job.task.symbols, job.task.min_len,
                           job.task.max_len, position_kind_name(job.model.positions), store.numel()));
  TrainingCurves curves;
  for (const json& rec : records) curves.add_record(rec);
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t first = trainer.steps_done();
  progress.resume_at(first);
  for (std::int64_t s = first; s < job.train.steps; ++s) {
    SyntheticBatch b = synthetic_batch(job.task, job.train.batch, job.train.seed, static_cast<std::uint64_t>(s));
    StepStats st = trainer.step([&](std::int64_t, const ForwardContext& ctx, double scale) {
      Tensor logits = model.forward(b.ids, ctx);
      Tensor dl = Tensor::empty(logits.shape());
      auto ce = cross_entropy(dl.f32(), logits.f32(), b.targets.data<std::int64_t>(), b.targets.numel(),
                              logits.dim(2), kIgnoreIndex, 0.0, scale);
      model.backward(dl);
      model.clear_cache();
      return ce.loss;
    });
    curves.add_step(st);
    finish_step(run, progress, trainer, st, step_json(st, job.train.loss_scaling));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    progress.update(s + 1, 1, st.loss, static_cast<double>(s + 1 - first) / secs, "steps/s");
  }
  progress.finish();
  SequenceTaskResult r;
  r.steps = trainer.steps_done();
  r.skipped_steps = trainer.skipped_steps();
  r.losses = curves.loss;
  r.peak_activation_bytes = curves.memory.max_activation_bytes();
  r.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.ms_per_step = 1e3 * r.train_seconds / static_cast<double>(std::max<std::int64_t>(r.steps - first, 1));
  save_run_checkpoint(run, trainer);
  std::vector<double> lx, la;
  for (auto L : job.test_lengths) {
    r.by_length.push_back(evaluate_length(model, job.task, L, job.eval_batches, job.train.batch, job.train.seed,
                                                job.train.precision));
    lx.push_back(static_cast<double>(L));
    la.push_back(r.by_length.back().sequence_accuracy);
    run.append_metrics({{"test_length", L}, {"token_accuracy", r.by_length.back().token_accuracy},
                        {"sequence_accuracy", r.by_length.back().sequence_accuracy}});
  }
  json res = {{"steps", r.steps},
              {"skipped_steps", r.skipped_steps},
              {"train_seconds", r.train_seconds},
              {"ms_per_step", r.ms_per_step},
              {"by_length", json::array()}};
  for (const auto& a : r.by_length)
    res["by_length"].push_back({{"length", a.length}, {"token_accuracy", a.token_accuracy}, {"sequence_accuracy", a.sequence_accuracy}});
  run.write_results(res);
  line_plot_png(run.file("plots/loss.png"), "Training loss", "step", "cross-entropy",
                {{"train", curves.step, curves.loss}});
  line_plot_png(run.file("plots/accuracy_by_length.png"), "Sequence accuracy by length", "length", "accuracy",
                {{"test", lx, la}});
  std::string md = fmt::format("# {}\n\n{} positions, trained on lengths {} to {} for {} steps ({:.1f} ms a step).\n\n",
                               job.report_title, position_kind_name(job.model.positions), job.task.min_len,
                               job.task.max_len, r.steps, r.ms_per_step);
  md += "| length | token accuracy | sequence accuracy |\n|---|---|---|\n";
  for (const auto& a : r.by_length)
    md += fmt::format("| {} | {:.2f}% | {:.2f}% |\n", a.length, 100 * a.token_accuracy, 100 * a.sequence_accuracy);
  md += "\n![loss](plots/loss.png)\n\n![accuracy by length](plots/accuracy_by_length.png)\n";
  run.write_report(md);
  return r;
}

}  // namespace multihead
