#include "multihead/train/language_modeling.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "multihead/core/threading.h"
#include "multihead/data/text_datasets.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/io/plots.h"
#include "multihead/io/state_dict.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/train/resume.h"

namespace multihead {

using json = nlohmann::json;
namespace fs = std::filesystem;

LanguageModelJob::LanguageModelJob() {
  tokenizer.kind = TokenizerKind::kChar;
  tokenizer.vocab_size = 256;
  model.positions = PositionKind::kRope;
  model.max_len = 4096;
}

json to_json(const LanguageModelJob& j) {
  return json{{"task", "language_modeling"},
              {"data", {{"path", j.text_path}, {"validation_fraction", j.validation_fraction}}},
              {"tokenizer", tokenizer_config_json(j.tokenizer)},
              {"model", model_config_json(j.model)},
              {"train", train_config_json(j.train)},
              {"eval_every", j.eval_every},
              {"eval_windows", j.eval_windows},
              {"sample",
               {{"prompt", j.prompt},
                {"tokens", j.sample_tokens},
                {"temperature", j.sampling.temperature},
                {"top_k", j.sampling.top_k},
                {"top_p", j.sampling.top_p},
                {"seed", j.sampling.seed}}},
              {"threads", j.threads},
              {"title", j.report_title}};
}

LanguageModelJob language_model_job_from_json(const json& root, const std::string& src) {
  LanguageModelJob job;
  ConfigReader r(root, src);
  check<ConfigError>(r.get_string("task") == "language_modeling", "{}: task must be language_modeling", src);
  job.eval_every = r.get_int("eval_every", job.eval_every);
  job.eval_windows = r.get_int("eval_windows", job.eval_windows);
  job.threads = static_cast<int>(r.get_int("threads", 0));
  job.report_title = r.get_string("title", job.report_title);
  const json data = r.get_object("data");
  ConfigReader d(data, src + ": data");
  job.text_path = d.get_string("path", std::string());
  job.validation_fraction = d.get_number("validation_fraction", job.validation_fraction);
  d.finish();
  job.tokenizer = read_tokenizer_section(r, src, job.tokenizer);
  job.model = read_model_section(r, src, job.tokenizer.vocab_size);
  const json train = r.get_object("train");
  ConfigReader tr(train, src + ": train");
  job.train = read_train_config(tr);
  tr.finish();
  const json sample = r.get_object("sample");
  ConfigReader s(sample, src + ": sample");
  job.prompt = s.get_string("prompt", job.prompt);
  job.sample_tokens = s.get_int("tokens", job.sample_tokens);
  job.sampling.temperature = s.get_number("temperature", job.sampling.temperature);
  job.sampling.top_k = s.get_int("top_k", job.sampling.top_k);
  job.sampling.top_p = s.get_number("top_p", job.sampling.top_p);
  job.sampling.seed = static_cast<std::uint64_t>(s.get_int("seed", 1));
  s.finish();
  r.finish();
  return job;
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

double validation_loss(LanguageModel& model, const std::vector<std::int64_t>& val, std::int64_t L, std::int64_t n,
                       Precision precision) {
  const std::int64_t span = static_cast<std::int64_t>(val.size()) - L - 1;
  check<IoError>(span > 0, "the validation text ({} tokens) is shorter than one window of {}", val.size(), L + 1);
  double total = 0;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; i += 16) {
    std::vector<std::int64_t> starts;
    for (std::int64_t k = i; k < std::min(n, i + 16); ++k) starts.push_back(span * k / std::max<std::int64_t>(n - 1, 1));
    Windows w = windows(val, starts, L);
    Tensor logits = model.forward(w.ids, eval_context(precision));
    model.clear_cache();
    const std::int64_t rows = w.targets.numel();
    total += cross_entropy<float>(nullptr, logits.f32(), w.targets.data<std::int64_t>(), rows, logits.dim(2)).loss *
             static_cast<double>(rows);
    count += rows;
  }
  return total / static_cast<double>(count);
}

}  // namespace

LanguageModelResult run_language_modeling(const LanguageModelJob& job_in, RunDir& run, Progress& progress) {
  LanguageModelJob job = job_in;
  set_num_threads(job.threads);
  check<ConfigError>(!job.text_path.empty(), "no text path given");
  const std::string text = load_text_corpus(job.text_path);
  const std::size_t cut = static_cast<std::size_t>(static_cast<double>(text.size()) * (1 - job.validation_fraction));
  // Cut at a line break, so no character is split.
  const std::size_t split = text.rfind('\n', cut) == std::string::npos ? cut : text.rfind('\n', cut);
  const std::string train_text = text.substr(0, split), val_text = text.substr(split);
  std::unique_ptr<Tokenizer> tok = run_tokenizer(run, job.tokenizer, {train_text});
  const std::vector<std::int64_t> train_ids = tok->encode(train_text), val_ids = tok->encode(val_text);
  progress.log(fmt::format("data: {} characters, {} training and {} validation tokens; tokenizer {} with {} tokens",
                           text.size(), train_ids.size(), val_ids.size(), tok->kind(), tok->vocab_size()));
  job.model.vocab_size = tok->vocab_size();
  job.model.max_len = std::max(job.model.max_len, job.train.seq_len + job.sample_tokens + 64);
  job.train.schedule.total_steps = job.train.steps;
  const std::int64_t L = job.train.seq_len;
  check<IoError>(static_cast<std::int64_t>(train_ids.size()) > L + 1, "the training text is shorter than one window");

  ParamStore store;
  LanguageModel model(store, job.model);
  store.finalize();
  Rng init_rng(job.train.seed);
  model.init(init_rng);
  model.encoder().set_checkpointing(job.train.checkpoint_layers);
  Trainer trainer(store, job.train);
  const std::vector<nlohmann::json> records = start_or_resume(run, to_json(job), trainer);
  progress.set_total(job.train.steps);
  progress.log(fmt::format("model: {} layers, d_model {}, {} heads, {} positions, {} parameters", job.model.num_layers,
                           job.model.layer.d_model, job.model.layer.nhead, position_kind_name(job.model.positions),
                           store.numel()));

  TrainingCurves curves;
  LanguageModelResult result;
  for (const auto& rec : records) curves.add_record(rec);
  if (!curves.eval_loss.empty()) result.validation_loss = curves.eval_loss.back();
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t span = static_cast<std::int64_t>(train_ids.size()) - L - 1;
  const std::int64_t first = trainer.steps_done();
  progress.resume_at(first);
  for (std::int64_t s = first; s < job.train.steps; ++s) {
    // Window starts are a function of (seed, step): a resumed run reads the same data.
    Rng data_rng(job.train.seed, 0xda7a0000ull + static_cast<std::uint64_t>(s));
    std::vector<std::int64_t> starts;
    for (std::int64_t b = 0; b < job.train.batch; ++b)
      starts.push_back(static_cast<std::int64_t>((static_cast<std::uint64_t>(data_rng.next_u32()) << 16 ^ data_rng.next_u32()) %
                                                 static_cast<std::uint64_t>(span)));
    StepStats st = trainer.step([&](std::int64_t micro, const ForwardContext& ctx, double scale) {
      const std::size_t parts = static_cast<std::size_t>(job.train.grad_accumulation);
      const std::vector<std::int64_t> mine(starts.begin() + static_cast<std::ptrdiff_t>(starts.size() * static_cast<std::size_t>(micro) / parts),
                                           starts.begin() + static_cast<std::ptrdiff_t>(starts.size() * static_cast<std::size_t>(micro + 1) / parts));
      if (mine.empty()) return 0.0;
      Windows w = windows(train_ids, mine, L);
      Tensor logits = model.forward(w.ids, ctx);
      Tensor dlogits = Tensor::empty(logits.shape());
      auto ce = cross_entropy(dlogits.f32(), logits.f32(), w.targets.data<std::int64_t>(), w.targets.numel(),
                              logits.dim(2), -100, 0.0, scale);
      model.backward(dlogits);
      model.clear_cache();
      return ce.loss;
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tps = static_cast<double>((s + 1 - first) * job.train.batch * L) / secs;
    curves.add_step(st);
    nlohmann::json rec = step_json(st, job.train.loss_scaling);
    rec["tokens_per_s"] = tps;
    const bool evaluates = (s + 1) % job.eval_every == 0 || s + 1 == job.train.steps;
    finish_step(run, progress, trainer, st, rec, !evaluates);
    progress.update(s + 1, 1, st.loss, tps, "tok/s", MemoryCurve::text(st));
    if (evaluates) {
      result.validation_loss = validation_loss(model, val_ids, L, job.eval_windows, job.train.precision);
      curves.add_eval(s + 1, result.validation_loss);
      run.append_metrics({{"step", s + 1}, {"validation_loss", result.validation_loss}});
      save_run_checkpoint(run, trainer, {{"data.step", std::to_string(s + 1)}});
      progress.log(fmt::format("step {}: validation loss {:.4f} nats/token", s + 1, result.validation_loss));
    }
  }
  progress.finish();
  result.steps = trainer.steps_done();
  result.skipped_steps = trainer.skipped_steps();
  result.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.tokens_per_s = static_cast<double>((result.steps - first) * job.train.batch * L) / result.train_seconds;
  result.sample = tok->decode(generate(model, tok->encode(job.prompt), job.sample_tokens, job.sampling, L));
  run.write_results({{"validation_loss", result.validation_loss},
                     {"steps", result.steps},
                     {"skipped_steps", result.skipped_steps},
                     {"train_seconds", result.train_seconds},
                     {"tokens_per_s", result.tokens_per_s},
                     {"sample", result.sample}});
  line_plot_png(run.file("plots/loss.png"), "Loss (nats per token)", "step", "cross-entropy",
                {{"train", curves.step, curves.loss}, {"validation", curves.eval_step, curves.eval_loss}});
  // Attention of the last layer's heads over the start of the sample.
  std::vector<std::int64_t> ids = tok->encode(result.sample);
  ids.resize(std::min<std::size_t>(ids.size(), 40));
  Tensor in = Tensor::from_i64({1, static_cast<std::int64_t>(ids.size())}, ids);
  const std::int64_t last = model.encoder().num_layers() - 1;
  model.encoder().layer(last).set_capture_weights(true);
  model.forward(in, ForwardContext{});
  model.encoder().layer(last).set_capture_weights(false);
  const Tensor& wts = model.encoder().layer(last).attention_weights();
  std::vector<std::string> labels;
  for (auto id : ids) labels.push_back(tok->piece(id) == " " ? "\u2423" : tok->piece(id));
  std::string md = fmt::format("# {}\n\n| | |\n|---|---|\n| validation loss | {:.4f} nats/token ({:.3f} bits) |\n",
                               job.report_title, result.validation_loss, result.validation_loss / std::log(2.0));
  md += fmt::format("| training | {} steps of {} x {} tokens, {:.1f} s, {:.0f} tokens/s |\n", result.steps,
                    job.train.batch, L, result.train_seconds, result.tokens_per_s);
  md += fmt::format("| model | {} layers, d_model {}, {} heads, {} positions, {} parameters |\n| data | {} |\n\n",
                    job.model.num_layers, job.model.layer.d_model, job.model.layer.nhead,
                    position_kind_name(job.model.positions), store.numel(), job.text_path);
  curves.memory.plot(run.file("plots/memory.png"));
  md += "## Loss\n\n![loss](plots/loss.png)\n\n## Memory\n\n![memory](plots/memory.png)\n\n";
  md += fmt::format("## Sample\n\nPrompt `{}`, temperature {}, top-p {}:\n\n```\n{}\n```\n\n## Attention\n\n",
                    job.prompt, job.sampling.temperature, job.sampling.top_p, result.sample);
  for (std::int64_t h = 0; h < wts.dim(1); ++h) {
    const std::int64_t T = wts.dim(2);
    std::vector<float> m(wts.f32() + h * T * T, wts.f32() + (h + 1) * T * T);
    const std::string name = fmt::format("plots/attention_layer{}_head{}.png", last, h);
    heatmap_png(run.file(name), fmt::format("layer {}, head {}", last, h), m, T, T, labels, labels);
    md += fmt::format("![{}]({})\n", name, name);
  }
  model.clear_cache();
  run.write_report(md);
  return result;
}

namespace {

struct LoadedLm {
  LanguageModelJob job;
  std::unique_ptr<Tokenizer> tok;
  ParamStore store;
  std::unique_ptr<LanguageModel> model;
};

std::unique_ptr<LoadedLm> load_lm_run(const std::string& run_dir) {
  auto r = std::make_unique<LoadedLm>();
  const RunConfig cfg = read_run_config(run_dir);
  r->job = language_model_job_from_json(cfg.json, cfg.path);
  r->tok = Tokenizer::load((fs::path(run_dir) / "tokenizer").string());
  r->job.model.vocab_size = r->tok->vocab_size();
  r->model = std::make_unique<LanguageModel>(r->store, r->job.model);
  r->store.finalize();
  load_state_dict_file(r->store, last_checkpoint_path(run_dir), true);
  return r;
}

}  // namespace

double evaluate_language_model_run(const std::string& run_dir, int threads, std::optional<Precision> precision) {
  set_num_threads(threads);
  auto r = load_lm_run(run_dir);
  if (precision) r->job.train.precision = *precision;
  const std::string text = load_text_corpus(r->job.text_path);
  const std::size_t cut = static_cast<std::size_t>(static_cast<double>(text.size()) * (1 - r->job.validation_fraction));
  const std::size_t split = text.rfind('\n', cut) == std::string::npos ? cut : text.rfind('\n', cut);
  return validation_loss(*r->model, r->tok->encode(text.substr(split)), r->job.train.seq_len, r->job.eval_windows,
                         r->job.train.precision);
}

std::string generate_from_run(const std::string& run_dir, const std::string& prompt, std::int64_t tokens,
                              const SamplingConfig& sampling, int threads, std::optional<Precision> precision) {
  check_utf8(prompt, "the prompt");
  set_num_threads(threads);
  auto r = load_lm_run(run_dir);
  if (precision) r->job.train.precision = *precision;
  std::vector<std::int64_t> ids = r->tok->encode(prompt);
  check<ConfigError>(!ids.empty(), "the prompt is empty");
  return r->tok->decode(generate(*r->model, ids, tokens, sampling, r->job.train.seq_len, r->job.train.precision));
}

}  // namespace multihead
