// multihead train | eval | generate: runs from a preset, a JSON config and flags.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "commands.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/train/presets.h"

namespace multihead::cli {
namespace {

struct TrainOpts {
  std::string preset = "spam", config, out, data;
  std::int64_t epochs = 0, steps = 0, d_model = 0, num_heads = 0, num_layers = 0, batch = 0, max_len = 0,
               vocab_size = 0;
  double lr = 0, clip = -1, weight_decay = -1, dropout = -1;
  std::int64_t warmup = -1, grad_accumulation = 0;
  std::string positions, tokenizer, source, optimizer, schedule, attention, precision;
  std::int64_t num_kv_heads = 0, window = -2, block_size = 0;
  std::int64_t seed = -1;
  std::optional<std::int64_t> checkpoint_every;
  std::string on_nonfinite;
  int threads = 0;
  bool quiet = false, checkpoint_layers = false, resume = false;
};

// Training flags every kind of job takes: optimisation, seed, precision,
// checkpointing.
void apply_optimisation(const TrainOpts& o, TrainConfig& t, TransformerLayerConfig& layer) {
  if (!o.optimizer.empty()) {
    check<ConfigError>(o.optimizer == "adamw" || o.optimizer == "sgd", "--optimizer must be adamw or sgd, got '{}'",
                       o.optimizer);
    t.optimizer = parse_optimizer(o.optimizer);
  }
  if (!o.schedule.empty()) t.schedule.decay = parse_decay(o.schedule);
  if (o.warmup >= 0) t.schedule.warmup_steps = o.warmup;
  if (o.clip >= 0) t.clip_grad_norm = o.clip;
  if (o.weight_decay >= 0) t.adamw.weight_decay = t.sgd.weight_decay = o.weight_decay;
  if (o.grad_accumulation > 0) t.grad_accumulation = o.grad_accumulation;
  if (o.dropout >= 0) layer.dropout = o.dropout;
  if (o.checkpoint_every) {
    check<ConfigError>(*o.checkpoint_every >= 0, "--checkpoint-every must be >= 0, got {}", *o.checkpoint_every);
    t.checkpoint_every = *o.checkpoint_every;
  }
  if (!o.on_nonfinite.empty()) t.on_nonfinite = parse_nonfinite(o.on_nonfinite);
  if (o.seed >= 0) t.seed = static_cast<std::uint64_t>(o.seed);
  if (o.checkpoint_layers) t.checkpoint_layers = true;
  if (!o.precision.empty()) {
    t.precision = parse_precision(o.precision);
    t.loss_scaling = t.precision == Precision::kF16;
  }
  check<ConfigError>(t.batch % t.grad_accumulation == 0 || t.grad_accumulation == 1,
                     "--batch ({}) must be a multiple of --grad-accumulation ({})", t.batch, t.grad_accumulation);
}

// Flags override the config or preset, in the parts every job shares.
void apply_common(const TrainOpts& o, ModelConfig& m, TrainConfig& t, TokenizerConfig& tok, int& threads) {
  apply_optimisation(o, t, m.layer);
  if (o.d_model) m.layer.d_model = o.d_model;
  if (o.num_heads) m.layer.nhead = o.num_heads;
  if (o.num_layers) m.num_layers = o.num_layers;
  if (o.batch) t.batch = o.batch;
  if (o.vocab_size) tok.vocab_size = o.vocab_size;
  if (o.lr > 0) t.schedule.base_lr = o.lr;
  if (!o.positions.empty()) m.positions = parse_position_kind(o.positions);
  AttentionPattern& p = m.layer.pattern;
  if (!o.attention.empty()) p.variant = parse_attention_variant(o.attention);
  if (o.num_kv_heads) p.num_kv_heads = o.num_kv_heads;
  if (o.window >= -1) p.window_left = p.window_right = o.window;
  if (o.block_size) p.sparse_block = o.block_size;
  if (!o.tokenizer.empty()) tok.kind = parse_tokenizer_kind(o.tokenizer);
  if (o.threads) threads = o.threads;
  m.vocab_size = tok.vocab_size;
  m.validate();
}

// Either job, resolved from the preset or config, then the flags.
struct ResolvedJob {
  bool language_model = false, image = false, sequence = false;
  SequenceTaskJob seq;
  TextClassificationJob classification;
  LanguageModelJob lm;
  ImageClassificationJob vision;
};

ResolvedJob resolve(const TrainOpts& o) {
  ResolvedJob r;
  if (!o.config.empty()) {
    const nlohmann::json j = ConfigReader::parse(read_file(o.config), o.config);
    const std::string task = j.is_object() ? j.value("task", "") : "";
    r.language_model = task == "language_modeling";
    r.image = task == "image_classification";
    r.sequence = task == "sequence_task";
    if (r.sequence) r.seq = sequence_task_job_from_json(j, o.config);
    else if (r.language_model) r.lm = language_model_job_from_json(j, o.config);
    else if (r.image) r.vision = image_classification_job_from_json(j, o.config);
    else r.classification = text_classification_job_from_json(j, o.config);
  } else if (o.preset == "spam") {
    r.classification = spam_preset();
  } else if (o.preset == "moby-dick") {
    r.language_model = true;
    r.lm = moby_dick_preset();
  } else if (o.preset == "reverse") {
    r.sequence = true;  // reverse sequences: trained on lengths 1..16, tested up to 64
  } else if (o.preset == "fashion-mnist") {
    r.image = true;
    r.vision = fashion_preset();
  } else {
    throw ConfigError(fmt::format("unknown preset '{}' (known: spam, moby-dick, fashion-mnist, reverse)", o.preset));
  }
  if (r.sequence) {
    SequenceTaskJob& j = r.seq;
    if (o.steps) j.train.steps = o.steps;
    TokenizerConfig unused;
    check<ConfigError>(o.epochs == 0 && o.source.empty() && o.data.empty() && o.tokenizer.empty(),
                       "--epochs, --source, --data and --tokenizer do not apply to synthetic sequence tasks");
    apply_common(o, j.model, j.train, unused, j.threads);
    j.model.vocab_size = j.task.vocab_size();
    return r;
  }
  if (r.image) {
    ImageClassificationJob& j = r.vision;
    if (!o.data.empty()) j.data_dir = o.data;
    if (o.epochs) j.epochs = o.epochs;
    if (o.d_model) j.model.layer.d_model = o.d_model;
    if (o.num_heads) j.model.layer.nhead = o.num_heads;
    if (o.num_layers) j.model.num_layers = o.num_layers;
    if (o.batch) j.train.batch = o.batch;
    if (o.lr > 0) j.train.schedule.base_lr = o.lr;
    if (o.threads) j.threads = o.threads;
    apply_optimisation(o, j.train, j.model.layer);
    if (o.steps) j.max_steps = o.steps;
    check<ConfigError>(o.source.empty() && o.positions.empty() && o.tokenizer.empty() && o.max_len == 0 &&
                           o.vocab_size == 0,
                       "--source, --positions, --tokenizer, --max-len and --vocab-size do not apply to image jobs");
    j.model.validate();
  } else if (r.language_model) {
    LanguageModelJob& j = r.lm;
    if (!o.data.empty()) j.text_path = o.data;
    if (o.steps) j.train.steps = o.steps;
    if (o.max_len) j.train.seq_len = o.max_len;
    check<ConfigError>(o.epochs == 0 && o.source.empty(), "--epochs and --source apply to classification jobs");
    apply_common(o, j.model, j.train, j.tokenizer, j.threads);
  } else {
    TextClassificationJob& j = r.classification;
    if (!o.data.empty()) j.data_path = o.data;
    if (!o.source.empty()) j.source = o.source;
    if (o.epochs) j.epochs = o.epochs;
    if (o.max_len) j.max_len = o.max_len;
    if (o.steps) j.max_steps = o.steps;
    apply_common(o, j.model, j.train, j.tokenizer, j.threads);
  }
  return r;
}

// "length 16: sequence accuracy 98.80%, token accuracy 99.90%", as train and eval print it.
std::string length_accuracy_line(const LengthAccuracy& a) {
  return fmt::format("length {}: sequence accuracy {:.2f}%, token accuracy {:.2f}%", a.length,
                     100 * a.sequence_accuracy, 100 * a.token_accuracy);
}

// " (3 skipped: ...)" after the step count when any step was skipped.
std::string skipped_note(std::int64_t skipped) {
  return skipped ? fmt::format(" ({} skipped: the loss or gradient was not finite)", skipped) : "";
}

void run_train(const TrainOpts& opts) {
  const ResolvedJob resolved = resolve(opts);
  TrainOpts o = opts;
  if (o.out.empty()) o.out = o.config.empty() ? "runs/" + o.preset : "runs/job";
  const TextClassificationJob& job = resolved.classification;
  if (!resolved.language_model && !resolved.image && !resolved.sequence && job.source == "spamassassin" && !std::filesystem::is_directory(job.data_path))
    throw IoError(fmt::format("{}: the SpamAssassin corpus is not there; run scripts/setup.sh --data first",
                              job.data_path));
  if (resolved.language_model && !std::filesystem::exists(resolved.lm.text_path))
    throw IoError(fmt::format("{}: no such text; run scripts/setup.sh --data for Moby-Dick", resolved.lm.text_path));
  // A run that fails before its first checkpoint leaves nothing behind; one
  // that fails later keeps its checkpoints, which are worth resuming from.
  namespace fs = std::filesystem;
  const bool existed = fs::exists(o.out);
  std::unique_ptr<RunDir> run_ptr;
  TextClassificationResult r;
  LanguageModelResult lr;
  ImageClassificationResult ir;
  SequenceTaskResult sr;
  try {
    run_ptr = std::make_unique<RunDir>(o.out, o.resume);
    Progress progress(0, stderr, o.quiet);
    if (resolved.sequence) sr = run_sequence_task(resolved.seq, *run_ptr, progress);
    else if (resolved.language_model) lr = run_language_modeling(resolved.lm, *run_ptr, progress);
    else if (resolved.image) ir = run_image_classification(resolved.vision, *run_ptr, progress);
    else r = run_text_classification(job, *run_ptr, progress);
  } catch (...) {
    std::error_code ec;
    const bool no_checkpoint = fs::is_empty(fs::path(o.out) / "checkpoints", ec) || ec;
    run_ptr.reset();
    if (!existed && no_checkpoint) fs::remove_all(o.out, ec);
    throw;
  }
  RunDir& run = *run_ptr;
  if (resolved.sequence) {
    for (const auto& a : sr.by_length) fmt::print("{}\n", length_accuracy_line(a));
    fmt::print("training: {} steps{} in {:.1f} s ({:.1f} ms a step)\n", sr.steps, skipped_note(sr.skipped_steps),
               sr.train_seconds, sr.ms_per_step);
    fmt::print("report: {}\n", run.file("report.md"));
    return;
  }
  if (resolved.image) {
    fmt::print("test accuracy: {:.2f}%, test loss {:.4f}\n", 100 * ir.test_accuracy, ir.test_loss);
    fmt::print("training: {} steps{} in {:.1f} s\n", ir.steps, skipped_note(ir.skipped_steps), ir.train_seconds);
    fmt::print("report: {}\n", run.file("report.md"));
    return;
  }
  if (resolved.language_model) {
    fmt::print("validation loss: {:.4f} nats/token\n", lr.validation_loss);
    fmt::print("training: {} steps{} in {:.1f} s ({:.0f} tokens/s)\n", lr.steps, skipped_note(lr.skipped_steps),
               lr.train_seconds, lr.tokens_per_s);
    fmt::print("sample:\n{}\n", lr.sample);
    fmt::print("report: {}\n", run.file("report.md"));
    return;
  }
  fmt::print("test accuracy: {:.2f}% ({} examples), test loss {:.4f}\n", 100 * r.test.accuracy, r.test.examples,
             r.test.loss);
  fmt::print("training: {} steps{} in {:.1f} s ({:.0f} tokens/s)\n", r.steps, skipped_note(r.skipped_steps),
             r.train_seconds, r.tokens_per_s);
  fmt::print("report: {}\n", run.file("report.md"));
}

}  // namespace

Command add_train(CLI::App& app) {
  auto o = std::make_shared<TrainOpts>();
  CLI::App* sub = app.add_subcommand("train", "Train a model (text or image classifier, language model, sequence task) and write a run directory with its report");
  sub->add_option("--preset", o->preset,
                  "Built-in job: spam (SpamAssassin ham against spam), moby-dick (character language model) or "
                  "fashion-mnist (Vision Transformer) or reverse (length extrapolation)")
      ->capture_default_str();
  sub->add_option("--config", o->config, "JSON job config (overrides the preset); flags override it");
  sub->add_option("--out", o->out, "Run directory (default runs/<preset>)");
  sub->add_option("--source", o->source, "Data source: spamassassin, aclimdb, csv or tsv");
  sub->add_option("--data", o->data, "Data path (folder or file)");
  sub->add_option("--epochs", o->epochs, "Passes over the training split (classification)");
  sub->add_option("--steps", o->steps, "Training steps (for epoch jobs: a cap that cuts the last epoch short)");
  sub->add_option("--d-model", o->d_model, "Model width");
  sub->add_option("--num-heads", o->num_heads, "Attention heads");
  sub->add_option("--num-layers", o->num_layers, "Encoder layers");
  sub->add_option("--batch", o->batch, "Sequences per step");
  sub->add_option("--max-len", o->max_len, "Tokens per example (classification) or window (language models)");
  sub->add_option("--vocab-size", o->vocab_size, "Tokenizer vocabulary");
  sub->add_option("--tokenizer", o->tokenizer, "sentencepiece, char or word");
  sub->add_option("--lr", o->lr, "Peak learning rate");
  sub->add_option("--optimizer", o->optimizer, "adamw or sgd");
  sub->add_option("--schedule", o->schedule, "After warmup: constant, cosine, linear or inverse_sqrt");
  sub->add_option("--warmup-steps", o->warmup, "Linear warmup steps");
  sub->add_option("--clip-grad-norm", o->clip, "Clip the global gradient norm (0: off)");
  sub->add_option("--weight-decay", o->weight_decay, "Weight decay");
  sub->add_option("--dropout", o->dropout, "Dropout in every layer");
  sub->add_option("--grad-accumulation", o->grad_accumulation, "Micro-batches per step");
  sub->add_option("--positions", o->positions, "none, sinusoidal, learned, relative, rope or alibi");
  sub->add_option("--attention", o->attention, "full, sliding_window, block_sparse or linear");
  sub->add_option("--num-kv-heads", o->num_kv_heads, "Key/value heads (grouped-query attention; 1: multi-query)");
  sub->add_option("--window", o->window, "Sliding window: keys on each side of a query (-1: unlimited)");
  sub->add_option("--block-size", o->block_size, "Block-sparse: positions per block");
  sub->add_option("--seed", o->seed, "Seed of the splits, initialisation, shuffling and dropout");
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_flag("--checkpoint-layers", o->checkpoint_layers, "Gradient checkpointing per layer");
  sub->add_option("--precision", o->precision,
                  fmt::format("Activations kept in fp32, bf16 or fp16 (weights stay fp32; fp16 turns on loss "
                              "scaling); {}",
                              kPrecisionCompute));
  sub->add_option("--checkpoint-every", o->checkpoint_every,
                  "Steps between checkpoints (0: after each epoch or evaluation and at the end)");
  sub->add_flag("--resume", o->resume,
                "Continue the run in --out from its last checkpoint (with the same settings), or start it");
  sub->add_option("--on-nonfinite", o->on_nonfinite,
                  "A NaN or Inf loss or gradient: stop (default) or skip the update");
  sub->add_flag("--quiet", o->quiet, "No progress output");
  return {sub, [o] { run_train(*o); }};
}

Command add_generate(CLI::App& app) {
  struct GenOpts {
    std::string run, prompt = "Call me", precision;
    std::int64_t tokens = 200;
    SamplingConfig sampling;
    int threads = 0;
  };
  auto o = std::make_shared<GenOpts>();
  o->sampling.temperature = 0.8;
  o->sampling.top_p = 0.95;
  CLI::App* sub = app.add_subcommand("generate", "Continue a prompt with a trained language model (KV-cached)");
  sub->add_option("--run", o->run, "Run directory of a language-model job")->required();
  sub->add_option("--prompt", o->prompt, "Text to continue")->capture_default_str();
  sub->add_option("--tokens", o->tokens, "Tokens to generate")->capture_default_str();
  sub->add_option("--temperature", o->sampling.temperature, "0: greedy")->capture_default_str();
  sub->add_option("--top-k", o->sampling.top_k, "Sample among the k most likely (0: all)")->capture_default_str();
  sub->add_option("--top-p", o->sampling.top_p, "Nucleus: the smallest set with this mass")->capture_default_str();
  sub->add_option("--seed", o->sampling.seed, "Sampling seed")->capture_default_str();
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_option("--precision", o->precision,
                  fmt::format("Activations and key/value cache in fp32, bf16 or fp16 (default: the run's own); {}",
                              kPrecisionCompute));
  return {sub, [o] {
            std::optional<Precision> precision;
            if (!o->precision.empty()) precision = parse_precision(o->precision);
            fmt::print("{}\n", generate_from_run(o->run, o->prompt, o->tokens, o->sampling, o->threads, precision));
          }};
}

Command add_eval(CLI::App& app) {
  struct EvalOpts {
    std::string run, precision;
    int threads = 0;
  };
  auto o = std::make_shared<EvalOpts>();
  CLI::App* sub = app.add_subcommand(
      "eval",
      "Evaluate a trained run: test accuracy of a classifier, validation loss of a language model, accuracy by "
      "length of a sequence task");
  sub->add_option("--run", o->run, "Run directory written by multihead train")->required();
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_option("--precision", o->precision, fmt::format("Activations in fp32, bf16 or fp16 (default: the run's own); {}", kPrecisionCompute));
  return {sub, [o] {
            std::optional<Precision> precision;
            if (!o->precision.empty()) precision = parse_precision(o->precision);
            const nlohmann::json cfg = read_run_config(o->run).json;
            const std::string task = cfg.is_object() ? cfg.value("task", "") : "";
            if (task == "language_modeling") {
              fmt::print("validation loss: {:.4f} nats/token\n", evaluate_language_model_run(o->run, o->threads, precision));
            } else if (task == "image_classification") {
              fmt::print("test accuracy: {:.2f}%\n", 100 * evaluate_image_run(o->run, o->threads, precision));
            } else if (task == "sequence_task") {
              for (const auto& a : evaluate_sequence_task_run(o->run, o->threads, precision))
                fmt::print("{}\n", length_accuracy_line(a));
            } else {
              ClassificationMetrics m = evaluate_text_classification_run(o->run, o->threads, precision);
              fmt::print("test accuracy: {:.2f}% ({} examples), test loss {:.4f}\n", 100 * m.accuracy, m.examples,
                         m.loss);
            }
          }};
}

}  // namespace multihead::cli
