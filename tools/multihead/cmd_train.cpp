// multihead train | eval | generate: runs from a preset, a JSON config and flags.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "multihead/core/distributed.h"
#include "multihead/tasks/jobs.h"
#include "multihead/tasks/presets.h"
#include "multihead/train/fit.h"

namespace multihead::cli {
namespace {

struct TrainOpts {
  std::string preset = "spam", config, out;
  JobOverrides flags;
  bool quiet = false, resume = false, overwrite = false;
};

// SIGINT and SIGTERM ask fit to stop after the step under way (it saves a
// checkpoint); a second signal ends the process at once, as by default.
// SIGUSR1 does the same: mpirun forwards it to every rank, where it ends a
// job on SIGINT and SIGTERM, after a short grace, itself.
// No handler runs on a computing thread: both signals are blocked in every
// thread (threads inherit the mask, and none exist yet) and one thread takes
// them with sigwait. An asynchronous handler would write its frame below
// the interrupted stack pointer, and oneDNN 2.6's AVX-512 sgemm kernels
// point that register into the heap while they run (oneDNN issue 4845):
// a Ctrl-C there corrupted the heap.
class StopOnSignals {
 public:
  StopOnSignals() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &signals_, &old_mask_);
    waiter_ = std::thread([this] {
      for (bool asked = false;;) {
        int sig = 0;
        if (sigwait(&signals_, &sig) != 0) continue;
        if (done_.load()) return;
        if (!asked) {
          asked = true;
          request_stop(sig);
          continue;
        }
        // The second: the default action, here and now.
        std::signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
        std::raise(sig);
      }
    });
  }
  ~StopOnSignals() {
    done_.store(true);
    pthread_kill(waiter_.native_handle(), SIGTERM);  // wakes the sigwait
    waiter_.join();
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  sigset_t signals_{}, old_mask_{};
  std::atomic<bool> done_{false};
  std::thread waiter_;
};

void run_train(const TrainOpts& o) {
  Job job = o.config.empty() ? preset_job(o.preset) : job_from_file(o.config);
  apply_overrides(job, o.flags);
  const std::string out = !o.out.empty() ? o.out : o.config.empty() ? "runs/" + o.preset : "runs/job";
  // Under mpirun rank 0 speaks for the run.
  Progress progress(0, stderr, o.quiet || !process_group().primary());
  const StopOnSignals stop_on_signals;
  const RunMode mode = o.resume ? RunMode::kResume : o.overwrite ? RunMode::kOverwrite : RunMode::kNew;
  for (const std::string& line : train_job(job, out, mode, progress)) fmt::print("{}\n", line);
}

std::string preset_help() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.push_back(fmt::format("{} ({})", p.name, p.description));
  return "Built-in job: " + fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

Command add_train(CLI::App& app) {
  auto o = std::make_shared<TrainOpts>();
  JobOverrides& f = o->flags;
  CLI::App* sub = app.add_subcommand(
      "train",
      "Train a model (text or image classifier, language model, sequence task) and write a run directory with its "
      "report");
  sub->add_option("--preset", o->preset, preset_help())->capture_default_str();
  sub->add_option("--config", o->config, "JSON job config (overrides the preset); flags override it")->check(kNotEmpty);
  sub->add_option("--out", o->out, "Run directory (default runs/<preset>)")->check(kNotEmpty);
  sub->add_option("--source", f.source, "Data source: spamassassin, aclimdb, csv or tsv");
  sub->add_option("--data", f.data, "Data path (folder or file)");
  sub->add_option("--epochs", f.epochs, "Passes over the training split (classification)");
  sub->add_option("--steps", f.steps, "Training steps (for epoch jobs: a cap that cuts the last epoch short)");
  sub->add_option("--d-model", f.d_model, "Model width");
  sub->add_option("--num-heads", f.num_heads, "Attention heads");
  sub->add_option("--num-layers", f.num_layers, "Encoder layers");
  sub->add_option("--batch", f.batch, "Sequences per step");
  sub->add_option("--max-len", f.max_len, "Tokens per example (classification) or window (language models)");
  sub->add_option("--vocab-size", f.vocab_size, "Tokenizer vocabulary");
  sub->add_option("--tokenizer", f.tokenizer, "sentencepiece, char or word");
  sub->add_option("--lr", f.lr, "Peak learning rate");
  sub->add_option("--optimizer", f.optimizer, "adamw or sgd");
  sub->add_option("--schedule", f.schedule, "After warmup: constant, cosine, linear or inverse_sqrt");
  sub->add_option("--warmup-steps", f.warmup, "Linear warmup steps");
  sub->add_option("--clip-grad-norm", f.clip_grad_norm, "Clip the global gradient norm (0: off)");
  sub->add_option("--weight-decay", f.weight_decay, "Weight decay");
  sub->add_option("--dropout", f.dropout, "Dropout in every layer");
  sub->add_option("--grad-accumulation", f.grad_accumulation, "Micro-batches per step");
  sub->add_option("--positions", f.positions, "none, sinusoidal, learned, relative, rope or alibi");
  sub->add_option("--attention", f.attention, "full, sliding_window, block_sparse or linear");
  sub->add_option("--num-kv-heads", f.num_kv_heads, "Key/value heads (grouped-query attention; 1: multi-query)");
  sub->add_option("--window", f.window, "Sliding window: keys on each side of a query (-1: unlimited)");
  sub->add_option("--block-size", f.block_size, "Block-sparse: positions per block");
  sub->add_option("--seed", f.seed, "Seed of the splits, initialisation, shuffling and dropout");
  sub->add_option("--threads", f.threads, "Threads (0: all cores)");
  sub->add_flag("--checkpoint-layers", f.checkpoint_layers, "Gradient checkpointing per layer");
  sub->add_option("--precision", f.precision,
                  fmt::format("Activations kept in fp32, bf16 or fp16 (weights stay fp32; fp16 turns on loss "
                              "scaling); {}",
                              kPrecisionCompute));
  sub->add_option("--checkpoint-every", f.checkpoint_every,
                  "Steps between checkpoints (0: after each epoch or evaluation and at the end)");
  sub->add_flag("--resume", o->resume,
                "Continue the run in --out from its last checkpoint (with the same settings), or start it");
  sub->add_flag("--overwrite", o->overwrite, "Replace the run in --out (without this, train refuses a directory that holds one)")
      ->excludes("--resume");
  sub->add_option("--allreduce", f.allreduce,
                  "Under mpirun, how gradients are summed over the ranks: mpi (MPI_Allreduce, default) or ordered (a "
                  "fixed-order sum, the same bits on every run)");
  sub->add_option("--allreduce-overlap", f.allreduce_overlap,
                  "Under mpirun, start summing a layer's gradients as soon as its backward is done (default true)");
  sub->add_option("--on-nonfinite", f.on_nonfinite, "A NaN or Inf loss or gradient: stop (default) or skip the update");
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
            for (const std::string& line : evaluate_run(o->run, o->threads, precision)) fmt::print("{}\n", line);
          }};
}

}  // namespace multihead::cli
