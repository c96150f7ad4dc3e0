#include "multihead/train/text_classification.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "multihead/core/threading.h"
#include "multihead/data/batching.h"
#include "multihead/data/text_datasets.h"
#include "multihead/io/json_config.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/plots.h"
#include "multihead/io/state_dict.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/train/resume.h"

namespace multihead {

using json = nlohmann::json;

nlohmann::json to_json(const TextClassificationJob& j) {
  json train = train_config_json(j.train);
  train["epochs"] = j.epochs;
  train["max_steps"] = j.max_steps;
  return json{{"task", "text_classification"},
              {"data",
               {{"source", j.source},
                {"path", j.data_path},
                {"strip_headers", j.strip_headers},
                {"text_column", j.text_column},
                {"label_column", j.label_column},
                {"validation_fraction", j.validation_fraction},
                {"test_fraction", j.test_fraction}}},
              {"tokenizer", tokenizer_config_json(j.tokenizer)},
              {"model", model_config_json(j.model)},
              {"train", train},
              {"max_len", j.max_len},
              {"threads", j.threads},
              {"title", j.report_title}};
}

TextClassificationJob text_classification_job_from_json(const json& root, const std::string& src) {
  TextClassificationJob job;
  ConfigReader r(root, src);
  check<ConfigError>(r.get_string("task", std::string("text_classification")) == "text_classification",
                     "{}: task must be text_classification", src);
  job.max_len = r.get_int("max_len", job.max_len);
  job.threads = static_cast<int>(r.get_int("threads", 0));
  job.report_title = r.get_string("title", job.report_title);
  // Sections are read with their own readers, so their unknown keys are errors too.
  const json data = r.get_object("data");
  ConfigReader d(data, src + ": data");
  job.source = d.get_string("source", job.source);
  job.data_path = d.get_string("path", std::string());
  job.strip_headers = d.get_bool("strip_headers", true);
  job.text_column = d.get_string("text_column", job.text_column);
  job.label_column = d.get_string("label_column", job.label_column);
  job.validation_fraction = d.get_number("validation_fraction", job.validation_fraction);
  job.test_fraction = d.get_number("test_fraction", job.test_fraction);
  d.finish();
  job.tokenizer = read_tokenizer_section(r, src, job.tokenizer);
  job.model = read_model_section(r, src, job.tokenizer.vocab_size);
  const json train = r.get_object("train");
  ConfigReader trr(train, src + ": train");
  job.epochs = trr.get_int("epochs", job.epochs);
  job.max_steps = trr.get_int("max_steps", 0);
  check<ConfigError>(job.max_steps >= 0, "{}: max_steps must be >= 0 (0: no cap), got {}", src, job.max_steps);
  job.train = read_train_config(trr);
  trr.finish();
  r.finish();
  check<ConfigError>(job.epochs > 0, "{}: epochs must be positive, got {}", src, job.epochs);
  check<ConfigError>(job.max_len > 1, "{}: max_len must be at least 2, got {}", src, job.max_len);
  return job;
}

namespace {

struct PreparedData {
  TextDataset dataset;
  std::vector<std::int64_t> train, validation, test;
};

PreparedData load_and_split(const TextClassificationJob& job) {
  PreparedData p;
  check<ConfigError>(!job.data_path.empty(), "no data path given for source '{}'", job.source);
  if (job.source == "aclimdb") {
    TextDataset tr = load_aclimdb(job.data_path, "train"), te = load_aclimdb(job.data_path, "test");
    SplitIndices s = split_indices(static_cast<std::int64_t>(tr.examples.size()), job.validation_fraction, 0.0,
                                   job.train.seed);
    p.dataset = std::move(tr);
    p.train = std::move(s.train);
    p.validation = std::move(s.validation);
    const std::int64_t base = static_cast<std::int64_t>(p.dataset.examples.size());
    for (auto& e : te.examples) p.dataset.examples.push_back(std::move(e));
    for (std::int64_t i = base; i < static_cast<std::int64_t>(p.dataset.examples.size()); ++i) p.test.push_back(i);
    return p;
  }
  if (job.source == "spamassassin") p.dataset = load_spamassassin(job.data_path, job.strip_headers);
  else if (job.source == "csv") p.dataset = load_delimited(job.data_path, ',', job.text_column, job.label_column);
  else if (job.source == "tsv") p.dataset = load_delimited(job.data_path, '\t', job.text_column, job.label_column);
  else throw ConfigError(fmt::format("data source must be spamassassin, aclimdb, csv or tsv, got '{}'", job.source));
  SplitIndices s = split_indices(static_cast<std::int64_t>(p.dataset.examples.size()), job.validation_fraction,
                                 job.test_fraction, job.train.seed);
  p.train = std::move(s.train), p.validation = std::move(s.validation), p.test = std::move(s.test);
  check<IoError>(!p.train.empty() && !p.test.empty(), "{}: too few examples ({}) for the requested splits",
                 job.data_path, p.dataset.examples.size());
  return p;
}

// Accuracy and mean loss over the sequences seqs[i] with labels[i], in batches.
ClassificationMetrics evaluate_sequences(SequenceClassifier& model,
                                         const std::vector<const std::vector<std::int64_t>*>& seqs,
                                         const std::vector<std::int64_t>& labels, std::int64_t batch,
                                         std::int64_t max_len, Precision precision) {
  ClassificationMetrics m;
  const ForwardContext ctx = eval_context(precision);
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (std::size_t b0 = 0; b0 < seqs.size(); b0 += static_cast<std::size_t>(batch)) {
    const std::size_t b1 = std::min(seqs.size(), b0 + static_cast<std::size_t>(batch));
    const std::vector<const std::vector<std::int64_t>*> part(seqs.begin() + static_cast<std::ptrdiff_t>(b0),
                                                             seqs.begin() + static_cast<std::ptrdiff_t>(b1));
    const std::vector<std::int64_t> part_labels(labels.begin() + static_cast<std::ptrdiff_t>(b0),
                                                labels.begin() + static_cast<std::ptrdiff_t>(b1));
    TokenBatch tb = make_token_batch(part, part_labels, max_len, true);
    Tensor logits = model.forward(tb.ids, &tb.padding, ctx);
    const std::int64_t B = logits.dim(0), C = logits.dim(1);
    loss_sum += cross_entropy<float>(nullptr, logits.f32(), tb.labels.data<std::int64_t>(), B, C).loss * B;
    for (std::int64_t r = 0; r < B; ++r) {
      const float* z = logits.f32() + r * C;
      if (std::max_element(z, z + C) - z == part_labels[static_cast<std::size_t>(r)]) ++correct;
    }
    model.clear_cache();
    m.examples += B;
  }
  m.loss = m.examples ? loss_sum / static_cast<double>(m.examples) : 0.0;
  m.accuracy = m.examples ? static_cast<double>(correct) / static_cast<double>(m.examples) : 0.0;
  return m;
}

// Accuracy over the examples idx of a dataset.
ClassificationMetrics evaluate(SequenceClassifier& model, const std::vector<std::vector<std::int64_t>>& encoded,
                               const TextDataset& ds, const std::vector<std::int64_t>& idx, std::int64_t batch,
                               std::int64_t max_len, Precision precision) {
  std::vector<const std::vector<std::int64_t>*> seqs;
  std::vector<std::int64_t> labels;
  for (std::int64_t i : idx) {
    seqs.push_back(&encoded[static_cast<std::size_t>(i)]);
    labels.push_back(ds.examples[static_cast<std::size_t>(i)].label);
  }
  return evaluate_sequences(model, seqs, labels, batch, max_len, precision);
}

}  // namespace

ClassificationMetrics evaluate_classifier(SequenceClassifier& model, const std::vector<std::vector<std::int64_t>>& tokens,
                                          const std::vector<std::int64_t>& labels, std::int64_t batch,
                                          std::int64_t max_len, Precision precision) {
  std::vector<const std::vector<std::int64_t>*> seqs;
  for (const auto& t : tokens) seqs.push_back(&t);
  return evaluate_sequences(model, seqs, labels, batch, max_len, precision);
}

namespace {

std::vector<std::vector<std::int64_t>> encode_all(const Tokenizer& tok, const TextDataset& ds) {
  std::vector<std::vector<std::int64_t>> out(ds.examples.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (std::size_t i = 0; i < ds.examples.size(); ++i) out[i] = tok.encode(ds.examples[i].text);
  return out;
}

// Per-layer, per-head attention heatmaps of one example, into plots/.
std::vector<std::string> write_heatmaps(SequenceClassifier& model, const Tokenizer& tok,
                                        const std::vector<std::int64_t>& tokens, std::int64_t label,
                                        const std::vector<std::string>& label_names, RunDir& run, std::int64_t max_tokens) {
  std::vector<const std::vector<std::int64_t>*> seqs = {&tokens};
  TokenBatch tb = make_token_batch(seqs, {label}, max_tokens, true);
  model.encoder().set_capture_weights(true);
  ForwardContext ctx;
  Tensor logits = model.forward(tb.ids, &tb.padding, ctx);
  model.encoder().set_capture_weights(false);
  const std::int64_t L = tb.ids.dim(1);
  std::vector<std::string> labels;
  for (std::int64_t l = 0; l < L; ++l) labels.push_back(tok.piece(tb.ids.data<std::int64_t>()[l]));
  std::vector<std::string> files;
  for (std::int64_t layer = 0; layer < model.encoder().num_layers(); ++layer) {
    const Tensor& w = model.encoder().layer(layer).attention_weights();  // (1, H, L, L)
    for (std::int64_t h = 0; h < w.dim(1); ++h) {
      std::vector<float> m(w.f32() + h * L * L, w.f32() + (h + 1) * L * L);
      const std::string name = fmt::format("plots/attention_layer{}_head{}.png", layer, h);
      heatmap_png(run.file(name),
                  fmt::format("layer {}, head {} (label: {})", layer, h, label_names[static_cast<std::size_t>(label)]),
                  m, L, L, labels, labels);
      files.push_back(name);
    }
  }
  model.clear_cache();
  return files;
}

}  // namespace

TextClassificationResult run_text_classification(const TextClassificationJob& job_in, RunDir& run,
                                                 Progress& progress) {
  TextClassificationJob job = job_in;
  set_num_threads(job.threads);
  PreparedData data = load_and_split(job);
  progress.log(fmt::format("data: {} examples ({} train, {} validation, {} test), labels {}",
                           data.dataset.examples.size(), data.train.size(), data.validation.size(), data.test.size(),
                           fmt::join(data.dataset.label_names, "/")));
  for (const auto& e : data.dataset.examples)
    check<IoError>(e.label >= 0 && e.label < static_cast<std::int64_t>(data.dataset.label_names.size()),
                   "{}: label {} is out of range", job.data_path, e.label);

  std::vector<std::string> train_texts;
  for (std::int64_t i : data.train) train_texts.push_back(data.dataset.examples[static_cast<std::size_t>(i)].text);
  std::unique_ptr<Tokenizer> tok = run_tokenizer(run, job.tokenizer, train_texts);
  const std::vector<std::vector<std::int64_t>> encoded = encode_all(*tok, data.dataset);
  progress.log(fmt::format("tokenizer: {} with {} tokens", tok->kind(), tok->vocab_size()));

  job.model.vocab_size = tok->vocab_size();
  job.model.num_classes = static_cast<std::int64_t>(data.dataset.label_names.size());
  job.model.max_len = std::max(job.model.max_len, job.max_len);
  const std::int64_t steps_per_epoch =
      (static_cast<std::int64_t>(data.train.size()) + job.train.batch - 1) / job.train.batch;
  job.train.steps = epoch_job_steps(steps_per_epoch, job.epochs, job.max_steps);
  job.train.schedule.total_steps = job.train.steps;
  progress.set_total(job.train.steps);

  ParamStore store;
  SequenceClassifier model(store, job.model);
  store.finalize();
  Rng init_rng(job.train.seed);
  model.init(init_rng);
  model.encoder().set_checkpointing(job.train.checkpoint_layers);
  Trainer trainer(store, job.train);
  const std::vector<json> records = start_or_resume(run, to_json(job), trainer);
  progress.log(fmt::format("model: {} layers, d_model {}, {} heads, {} positions, {} parameters", job.model.num_layers,
                           job.model.layer.d_model, job.model.layer.nhead, position_kind_name(job.model.positions),
                           store.numel()));

  TrainingCurves curves;
  TextClassificationResult result;
  for (const json& rec : records) curves.add_record(rec);
  if (!curves.eval_loss.empty()) result.validation = {curves.eval_loss.back(), curves.eval_accuracy.back(), 0};
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t tokens = 0;
  // Batches are a function of (seed, epoch): a resumed run starts in the
  // epoch and at the batch its checkpoint reached.
  const std::int64_t first = trainer.steps_done();
  progress.resume_at(first);
  // job.train.steps <= steps_per_epoch * epochs; less when max_steps cuts the last epoch short.
  for (std::int64_t epoch = first / steps_per_epoch; epoch * steps_per_epoch < job.train.steps; ++epoch) {
    const auto batches = epoch_batches(data.train, job.train.batch, job.train.seed, epoch, true);
    for (std::size_t bi = static_cast<std::size_t>(trainer.steps_done() - epoch * steps_per_epoch);
         bi < batches.size() && trainer.steps_done() < job.train.steps; ++bi) {
      const auto& b = batches[bi];
      StepStats st = trainer.step([&](std::int64_t micro, const ForwardContext& ctx, double scale) {
        // Micro-batch `micro` of grad_accumulation: a contiguous share of the batch.
        const std::size_t parts = static_cast<std::size_t>(job.train.grad_accumulation);
        const std::size_t lo = b.size() * static_cast<std::size_t>(micro) / parts;
        const std::size_t hi = b.size() * static_cast<std::size_t>(micro + 1) / parts;
        std::vector<const std::vector<std::int64_t>*> seqs;
        std::vector<std::int64_t> labels;
        for (std::size_t k = lo; k < hi; ++k) {
          seqs.push_back(&encoded[static_cast<std::size_t>(b[k])]);
          labels.push_back(data.dataset.examples[static_cast<std::size_t>(b[k])].label);
        }
        if (seqs.empty()) return 0.0;
        TokenBatch tb = make_token_batch(seqs, labels, job.max_len, true);
        tokens += tb.tokens;
        Tensor logits = model.forward(tb.ids, &tb.padding, ctx);
        Tensor dlogits = Tensor::empty(logits.shape());
        auto ce = cross_entropy(dlogits.f32(), logits.f32(), tb.labels.data<std::int64_t>(), logits.dim(0),
                                logits.dim(1), -100, 0.0, scale);
        model.backward(dlogits);
        model.clear_cache();
        return ce.loss;
      });
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      curves.add_step(st);
      nlohmann::json rec = step_json(st, job.train.loss_scaling);
      rec["epoch"] = epoch, rec["tokens_per_s"] = tokens / secs;
      finish_step(run, progress, trainer, st, rec, bi + 1 < batches.size() && trainer.steps_done() < job.train.steps);
      progress.update(st.step + 1, epoch + 1, st.loss, static_cast<double>(tokens) / secs, "tok/s",
                      MemoryCurve::text(st));
    }
    ClassificationMetrics v = evaluate(model, encoded, data.dataset, data.validation, job.eval_batch, job.max_len, job.train.precision);
    curves.add_eval(trainer.steps_done(), v.loss, v.accuracy);
    result.validation = v;
    run.append_metrics({{"step", trainer.steps_done()}, {"epoch", epoch}, {"validation_loss", v.loss},
                        {"validation_accuracy", v.accuracy}});
    save_run_checkpoint(run, trainer, {{"data.epoch", std::to_string(epoch + 1)}});
    progress.log(fmt::format("epoch {}: validation loss {:.4f}, accuracy {:.2f}%", epoch + 1, v.loss,
                             100 * v.accuracy));
  }
  progress.finish();
  result.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.steps = trainer.steps_done();
  result.skipped_steps = trainer.skipped_steps();
  result.tokens_per_s = static_cast<double>(tokens) / result.train_seconds;
  result.test = evaluate(model, encoded, data.dataset, data.test, job.eval_batch, job.max_len, job.train.precision);
  run.append_metrics({{"step", result.steps}, {"test_loss", result.test.loss}, {"test_accuracy", result.test.accuracy}});
  run.write_results({{"test_accuracy", result.test.accuracy},
                     {"test_loss", result.test.loss},
                     {"validation_accuracy", result.validation.accuracy},
                     {"train_seconds", result.train_seconds},
                     {"steps", result.steps},
                     {"skipped_steps", result.skipped_steps},
                     {"tokens_per_s", result.tokens_per_s}});

  // Report: curves, then the attention of the first test example.
  line_plot_png(
      run.file("plots/loss.png"), "Loss", "step", "cross-entropy",
      {{"train (per step)", curves.step, curves.loss}, {"validation (per epoch)", curves.eval_step, curves.eval_loss}});
  line_plot_png(run.file("plots/accuracy.png"), "Validation accuracy", "step", "accuracy",
                {{"validation", curves.eval_step, curves.eval_accuracy}});
  curves.memory.plot(run.file("plots/memory.png"));
  result.peak_activation_bytes = curves.memory.max_activation_bytes();
  const std::int64_t ex = data.test.front();
  const std::vector<std::string> heatmaps =
      write_heatmaps(model, *tok, encoded[static_cast<std::size_t>(ex)], data.dataset.examples[static_cast<std::size_t>(ex)].label,
                     data.dataset.label_names, run, std::min<std::int64_t>(job.max_len, 48));
  std::string md = fmt::format("# {}\n\n", job.report_title);
  md += fmt::format("| | |\n|---|---|\n| test accuracy | {:.2f}% ({} examples) |\n| test loss | {:.4f} |\n",
                    100 * result.test.accuracy, result.test.examples, result.test.loss);
  const std::int64_t epochs_run = (result.steps + steps_per_epoch - 1) / steps_per_epoch;  // the last may be cut short
  md += fmt::format("| validation accuracy | {:.2f}% |\n| training | {} steps, {} epochs, {:.1f} s, {:.0f} tokens/s |\n",
                    100 * result.validation.accuracy, result.steps, epochs_run, result.train_seconds,
                    result.tokens_per_s);
  md += fmt::format("| model | {} layers, d_model {}, {} heads, {} positions, {} parameters |\n", job.model.num_layers,
                    job.model.layer.d_model, job.model.layer.nhead, position_kind_name(job.model.positions),
                    store.numel());
  md += fmt::format("| data | {} ({}), {} train / {} validation / {} test |\n| tokenizer | {} ({} tokens) |\n\n",
                    job.source, job.data_path, data.train.size(), data.validation.size(), data.test.size(),
                    tok->kind(), tok->vocab_size());
  md += "## Training curves\n\n![loss](plots/loss.png)\n\n![accuracy](plots/accuracy.png)\n\n";
  md += "## Memory\n\nAllocator peak per step, and its parts.\n\n![memory](plots/memory.png)\n\n";
  md += "## Attention\n\nSelf-attention weights of every head for the first test example (first 48 tokens; rows "
        "are queries, columns keys).\n\n";
  for (const auto& f : heatmaps) md += fmt::format("![{}]({})\n", f, f);
  md += "\nThe full configuration is in `config.json`, the per-step metrics in `metrics.jsonl`.\n";
  run.write_report(md);
  return result;
}

std::unique_ptr<LoadedTextClassifier> load_text_classification_run(const std::string& run_dir, int threads) {
  namespace fs = std::filesystem;
  const RunConfig cfg = read_run_config(run_dir);
  auto r = std::make_unique<LoadedTextClassifier>();
  r->job = text_classification_job_from_json(cfg.json, cfg.path);
  set_num_threads(threads);
  PreparedData data = load_and_split(r->job);
  r->tokenizer = Tokenizer::load((fs::path(run_dir) / "tokenizer").string());
  r->job.model.vocab_size = r->tokenizer->vocab_size();
  r->job.model.num_classes = static_cast<std::int64_t>(data.dataset.label_names.size());
  r->model = std::make_unique<SequenceClassifier>(r->store, r->job.model);
  r->store.finalize();
  load_state_dict_file(r->store, last_checkpoint_path(run_dir), true);
  for (std::int64_t i : data.test) {
    r->test_tokens.push_back(r->tokenizer->encode(data.dataset.examples[static_cast<std::size_t>(i)].text));
    r->test_labels.push_back(data.dataset.examples[static_cast<std::size_t>(i)].label);
  }
  return r;
}

ClassificationMetrics evaluate_text_classification_run(const std::string& run_dir, int threads,
                                                      std::optional<Precision> precision) {
  auto r = load_text_classification_run(run_dir, threads);
  if (precision) r->job.train.precision = *precision;
  return evaluate_classifier(*r->model, r->test_tokens, r->test_labels, r->job.eval_batch, r->job.max_len,
                             r->job.train.precision);
}

}  // namespace multihead
