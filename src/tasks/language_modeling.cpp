// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/language_modeling.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "multihead/data/text_datasets.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/nn/state_dict.h"
#include "multihead/report/run_report.h"
#include "multihead/tasks/attention_explorer.h"
#include "multihead/tasks/loaded_run.h"
#include "multihead/tasks/trained_run.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/fit.h"
#include "multihead/train/resume.h"

namespace multihead {

using json = nlohmann::json;
namespace fs = std::filesystem;

// results.json
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LanguageModelResult, validation_loss, validation_perplexity, steps, skipped_steps,
                                   train_seconds, tokens_per_s, sample)

LanguageModelJob::LanguageModelJob() {
  tokenizer.kind = TokenizerKind::kChar;
  tokenizer.vocab_size = 256;
  model.vocab_size = tokenizer.vocab_size;  // until the tokenizer is trained
  model.positions = PositionKind::kRope;
  model.max_len = 4096;
}

void LanguageModelJob::validate(const std::string& where) const {
  check<ConfigError>(eval_every > 0 && eval_windows > 0,
                     "{}: eval_every and eval_windows must be positive, got {} and {}", where, eval_every,
                     eval_windows);
  check<ConfigError>(validation_fraction > 0 && validation_fraction < 1,
                     "{}: validation_fraction must be between 0 and 1, got {}", where, validation_fraction);
  check<ConfigError>(sample_tokens >= 0, "{}: sample tokens must be >= 0, got {}", where, sample_tokens);
}

namespace {

// Window w of the token stream: inputs (B, L) and next-token targets (B*L).
struct Windows {
  Tensor ids, targets;
};

Windows windows(const std::vector<std::int64_t>& tokens, const std::vector<std::int64_t>& starts, std::int64_t L) {
  const std::int64_t B = static_cast<std::int64_t>(starts.size());
  Windows w{Tensor({B, L}, DType::kI64), Tensor({B * L}, DType::kI64)};
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t l = 0; l < L; ++l) {
      const std::size_t at = static_cast<std::size_t>(starts[static_cast<std::size_t>(b)] + l);
      w.ids.data<std::int64_t>()[b * L + l] = tokens[at];
      w.targets.data<std::int64_t>()[b * L + l] = tokens[at + 1];
    }
  return w;
}

// Where the validation text starts: at the line break before the cut, so
// that no character is split.
std::size_t validation_split(const std::string& text, double validation_fraction) {
  const std::size_t cut = static_cast<std::size_t>(static_cast<double>(text.size()) * (1 - validation_fraction));
  const std::size_t at = text.rfind('\n', cut);
  return at == std::string::npos ? cut : at;
}

// The starts of n windows of L tokens (and the next one) spread evenly over
// `tokens` tokens of validation text, first and last ends included.
std::vector<std::int64_t> spread_windows(std::size_t tokens, std::int64_t L, std::int64_t n) {
  const std::int64_t span = static_cast<std::int64_t>(tokens) - L - 1;
  check<IoError>(span > 0, "the validation text ({} tokens) is shorter than one window of {}", tokens, L + 1);
  std::vector<std::int64_t> starts;
  for (std::int64_t k = 0; k < n; ++k) starts.push_back(span * k / std::max<std::int64_t>(n - 1, 1));
  return starts;
}

// The validation text of the job's data, tokenised.
std::vector<std::int64_t> validation_tokens(const LanguageModelJob& job, const Tokenizer& tok) {
  const std::string text = load_text_corpus(job.text_path);
  return tok.encode(text.substr(validation_split(text, job.validation_fraction)));
}

double validation_loss(LanguageModel& model, const std::vector<std::int64_t>& val, std::int64_t L, std::int64_t n,
                       Precision precision) {
  const std::vector<std::int64_t> all_starts = spread_windows(val.size(), L, n);
  double total = 0;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; i += 16) {
    const std::vector<std::int64_t> starts(all_starts.begin() + i, all_starts.begin() + std::min(n, i + 16));
    Windows w = windows(val, starts, L);
    Tensor logits = model.forward(w.ids, eval_context(precision));
    model.release_saved();
    const std::int64_t rows = w.targets.numel();
    total += cross_entropy<float>(nullptr, logits.f32(), w.targets.data<std::int64_t>(), rows, logits.dim(2)).loss *
             static_cast<double>(rows);
    count += rows;
  }
  return total / static_cast<double>(count);
}

}  // namespace

namespace {

// Training: random windows of train.seq_len tokens, next-token cross-entropy.
class LanguageModelTask final : public TrainingTask {
 public:
  LanguageModelTask(LanguageModel& model, const LanguageModelJob& job, const std::vector<std::int64_t>& train_ids,
                    const std::vector<std::int64_t>& val_ids)
      : model_(model), job_(job), train_ids_(train_ids), val_ids_(val_ids) {}

  // Window starts, a function of (seed, step).
  std::vector<std::int64_t> step_examples(std::int64_t step) override {
    const std::uint64_t span = train_ids_.size() - static_cast<std::size_t>(job_.train.seq_len) - 1;
    Rng data_rng(job_.train.seed, 0xda7a0000ull + static_cast<std::uint64_t>(step));
    std::vector<std::int64_t> starts;
    for (std::int64_t b = 0; b < job_.train.batch; ++b)
      starts.push_back(static_cast<std::int64_t>(
          (static_cast<std::uint64_t>(data_rng.next_u32()) << 16 ^ data_rng.next_u32()) % span));
    return starts;
  }

  MicroBatchLoss micro_step(std::span<const std::int64_t> starts, const ForwardContext& ctx,
                            double grad_scale) override {
    Windows w = windows(train_ids_, {starts.begin(), starts.end()}, job_.train.seq_len);
    Tensor logits = model_.forward(w.ids, ctx);
    return {cross_entropy_backward(model_, logits, w.targets.data<std::int64_t>(), grad_scale), w.targets.numel()};
  }

  Validation validate() override {
    return {validation_loss(model_, val_ids_, job_.train.seq_len, job_.eval_windows, job_.train.precision), {}, 0};
  }

 private:
  LanguageModel& model_;
  const LanguageModelJob& job_;
  const std::vector<std::int64_t>& train_ids_;
  const std::vector<std::int64_t>& val_ids_;
};

// The last layer's attention over the start of the sample (spaces shown as
// a visible mark), into plots/.
std::vector<std::string> write_heatmaps(LanguageModel& model, const Tokenizer& tok, const std::string& sample,
                                        RunDir& run) {
  std::vector<std::int64_t> ids = tok.encode(sample);
  ids.resize(std::min<std::size_t>(ids.size(), 40));
  AttentionMaps maps = language_model_attention(model, tok, ids, model.encoder().num_layers() - 1, Precision::kF32);
  for (std::string& t : maps.tokens)
    if (t == " ") t = "\u2423";
  return write_heatmaps(maps, run.file("plots"), "attention_layer", "", kReportHeatmaps);
}

}  // namespace

LanguageModelResult run_job(const LanguageModelJob& job_in, RunDir& run, Progress& progress, StopRequest* stop) {
  LanguageModelJob job = job_in;
  check<ConfigError>(!job.text_path.empty(), "no text path given");
  check<IoError>(fs::exists(job.text_path), "{}: no such text; run scripts/setup.sh --data for Moby-Dick",
                 job.text_path);
  const std::string text = load_text_corpus(job.text_path);
  const std::size_t split = validation_split(text, job.validation_fraction);
  const std::string train_text = text.substr(0, split), val_text = text.substr(split);
  std::unique_ptr<Tokenizer> tok = run_tokenizer(run, job.tokenizer, {train_text}, &progress);
  const std::vector<std::int64_t> train_ids = tok->encode(train_text), val_ids = tok->encode(val_text);
  progress.log(fmt::format("data: {} characters, {} training and {} validation tokens; tokenizer {} with {} tokens",
                           text.size(), train_ids.size(), val_ids.size(), tok->kind(), tok->vocab_size()));
  job.model.vocab_size = tok->vocab_size();
  // Learned positions are weights (a checkpoint's table keeps its size): the windows must fit them, and the
  // sample, generated within a window's context, does.
  job.model.max_len = at_least_max_len(
      job.model.max_len,
      job.train.seq_len + (job.model.positions == PositionKind::kLearned ? 0 : job.sample_tokens + 64), progress);
  job.train.set_steps(job.train.steps);
  const std::int64_t L = job.train.seq_len;
  check<IoError>(static_cast<std::int64_t>(train_ids.size()) > L + 1, "the training text is shorter than one window");

  ModelToTrain<LanguageModel> m(job.model, job.train, progress);
  LanguageModelTask task(m.model, job, train_ids, val_ids);
  FitPlan plan;
  plan.on_curves = live_curves(run);  // plots/*.png redrawn as it trains
  plan.eval_every = job.eval_every;
  plan.throughput_key = "tokens_per_s";
  plan.loss_unit = " nats/token";
  const FitResult fitted = fit(task, m.store, job.train, plan, described_config(job), run, progress, stop);

  LanguageModelResult result;
  if (fitted.validation) result.validation_loss = fitted.validation->loss;
  check_finite_result("the validation loss", result.validation_loss);
  result.validation_perplexity = std::exp(result.validation_loss);
  result.steps = fitted.steps;
  result.skipped_steps = fitted.skipped_steps;
  result.train_seconds = fitted.total_seconds;
  result.trained = fitted.steps_and_time(fmt::format("{:.0f} tokens/s", fitted.items_per_s));
  result.tokens_per_s = fitted.items_per_s;
  result.sample = tok->decode(generate(m.model, tok->encode(job.prompt), job.sample_tokens, job.sampling, L));
  run.write_results(result);
  RunReport report{job.report_title, {}, ""};
  report.rows = {{"validation loss", loss_text(result.validation_loss)},
                 {"training", fitted.summary()},
                 {"batches", fmt::format("{} windows of {} tokens", job.train.batch, L)},
                 {"model", job.model.describe(m.store.numel())},
                 {"data", job.text_path}};
  report.sections = fmt::format("## Sample\n\nPrompt `{}`, temperature {}, top-p {}:\n\n```\n{}\n```\n\n", job.prompt,
                                job.sampling.temperature, job.sampling.top_p, result.sample);
  if (!job.model.layer.pattern.has_weights()) {
    report.sections += kNoAttentionWeights;
  } else {
    report.sections += "## Attention\n\n";
    std::vector<std::int64_t> ids = tok->encode(result.sample);
    ids.resize(std::min<std::size_t>(ids.size(), 128));
    AttentionMaps all = language_model_attention(m.model, *tok, ids, 0, Precision::kF32);
    report.sections += report_explorer(
        run, {job.report_title, fmt::format("the first {} tokens of the sample", all.T), {std::move(all)}});
    report.sections +=
        "The last layer's heads over the sample's start (colours from 0 to each head's largest weight):\n\n";
    for (const auto& f : write_heatmaps(m.model, *tok, result.sample, run))
      report.sections += fmt::format("![{0}](plots/{0})\n", f);
  }
  write_run_report(run, fitted, report);
  return result;
}

std::string loss_text(double nats) {
  return fmt::format("{:.4f} nats/token ({:.3f} bits, perplexity {:.3f})", nats, nats / std::log(2.0), std::exp(nats));
}

std::vector<std::string> summary_lines(const LanguageModelResult& r) {
  return {"validation loss: " + loss_text(r.validation_loss), fmt::format("training: {}", r.trained),
          fmt::format("sample:\n{}", r.sample)};
}

std::vector<std::string> evaluate_run(const LanguageModelJob& job, const std::string& run_dir, const EvalRequest& req) {
  check<ConfigError>(req.out.empty() && req.format.empty() && req.text_column.empty() && req.label_column.empty(),
                     "--out, --source, --text-column and --label-column are for classifiers; a language model's "
                     "eval prints its loss");
  LoadedRun<LanguageModelJob, LanguageModel> r(job, run_dir);
  if (req.data.empty()) {
    const double loss = validation_loss(r.model(), validation_tokens(r.job, *r.tokenizer), r.job.train.seq_len,
                                        r.job.eval_windows, r.job.train.precision);
    check_finite_result("the validation loss", loss);
    return {"validation loss: " + loss_text(loss)};
  }
  const std::vector<std::int64_t> tokens = r.tokenizer->encode(load_text_corpus(req.data));
  check<IoError>(static_cast<std::int64_t>(tokens.size()) > r.job.train.seq_len,
                 "{}: {} tokens, fewer than one window of {} + 1", req.data, tokens.size(), r.job.train.seq_len);
  const double loss =
      validation_loss(r.model(), tokens, r.job.train.seq_len, r.job.eval_windows, r.job.train.precision);
  check_finite_result("the loss", loss);
  return {fmt::format("{} loss: {} ({} windows of {} tokens spread over its {} tokens)",
                      std::filesystem::path(req.data).filename().string(), loss_text(loss), r.job.eval_windows,
                      r.job.train.seq_len, tokens.size())};
}

ModelSample sample_model(const LanguageModelJob& job, const std::string& run_dir, const ModelSampleSettings& settings) {
  LoadedRun<LanguageModelJob, LanguageModel> r(job, run_dir);
  const std::vector<std::int64_t> val = validation_tokens(r.job, *r.tokenizer);
  // Windows spread over the validation text, as the validation loss reads it.
  const std::int64_t L = r.job.train.seq_len;
  Windows w = windows(val, spread_windows(val.size(), L, settings.examples), L);
  Tensor logits = r.model().forward(w.ids, settings.context());
  r.model().release_saved();
  return std::move(ModelSample(std::move(logits)).input("ids", std::move(w.ids)));
}

std::string generate_from_run(const std::string& run_dir, const std::string& prompt, std::int64_t tokens,
                              const SamplingConfig& sampling, std::optional<Precision> precision) {
  return TrainedRun::load(run_dir, precision)->generate(prompt, tokens, sampling);
}

}  // namespace multihead
