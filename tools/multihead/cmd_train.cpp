// SPDX-License-Identifier: Apache-2.0
// multihead train | eval | generate: runs from a preset, a JSON config and flags.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "multihead/tasks/job_flags.h"
#include "multihead/tasks/jobs.h"
#include "multihead/tasks/presets.h"
#include "multihead/train/distributed.h"
#include "multihead/train/fit.h"

namespace multihead::cli {
namespace {

struct TrainOpts {
  std::string preset = "spam", config, out;
  std::vector<JobSetting> settings;  // flags and --set, in the order given
  bool quiet = false, resume = false, overwrite = false, preset_given = false;
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
  explicit StopOnSignals(StopRequest& stop) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &signals_, &old_mask_);
    waiter_ = std::thread([this, &stop] {
      for (bool asked = false;;) {
        int sig = 0;
        if (sigwait(&signals_, &sig) != 0) continue;
        if (done_.load()) return;
        if (!asked) {
          asked = true;
          stop.request(sig);
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
    // Wakes the waiter, whose sigwait takes this signal: it ends no thread.
    pthread_kill(waiter_.native_handle(), SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread)
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

// Whether the flags name data of the user's (--data or --source): the job
// then starts from a text classifier's defaults, the one recipe a config
// file and multihead.train start from, unless a preset is named.
bool own_data(const TrainOpts& o) {
  return std::any_of(o.settings.begin(), o.settings.end(),
                     [](const JobSetting& s) { return s.flag == "--data" || s.flag == "--source"; });
}

// The job a config file, a preset, the defaults (own data), or (resuming
// without either) the run in `out` describes.
Job job_to_train(const TrainOpts& o, const std::string& out) {
  if (!o.config.empty()) return job_from_file(o.config);
  const std::string recorded = out + "/config.json";
  if (o.resume && !o.preset_given && std::filesystem::exists(recorded)) return job_from_file(recorded);
  // Read from an empty config, as a config file's absent keys are (the model section's defaults are its reader's).
  if (!o.preset_given && own_data(o)) return job_from_json(nlohmann::json::object(), "the defaults");
  return preset_job(o.preset);
}

// --out's default: runs/<preset>, runs/<data file's stem> or runs/job.
std::string default_out(const TrainOpts& o) {
  if (!o.config.empty()) return "runs/job";
  if (o.preset_given || !own_data(o)) return "runs/" + o.preset;
  for (auto s = o.settings.rbegin(); s != o.settings.rend(); ++s)
    if (s->flag == "--data") {
      const std::string stem = std::filesystem::path(s->value).stem().string();
      if (!stem.empty() && stem != "." && stem != "..") return "runs/" + stem;
    }
  return "runs/job";
}

void run_train(const TrainOpts& o) {
  const std::string out = !o.out.empty() ? o.out : default_out(o);
  Job job = apply_settings(job_to_train(o, out), o.settings);
  const ContextScope context(command_context(job_threads(job)));
  // Under mpirun rank 0 speaks for the run.
  Progress progress(0, stderr, o.quiet || !process_group().primary());
  progress.set_warnings(process_group().primary());
  StopRequest stop;
  const StopOnSignals stop_on_signals(stop);
  const RunMode mode = o.resume ? RunMode::kResume : o.overwrite ? RunMode::kOverwrite : RunMode::kNew;
  for (const std::string& line : train_job(job, out, mode, progress, &stop, {{"the config (--config)", o.config}}))
    fmt::print("{}\n", line);
}

std::string preset_help() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.push_back(fmt::format("{} ({})", p.name, p.description));
  return "Built-in job: " + fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

Command add_train(CLI::App& app) {
  auto o = std::make_shared<TrainOpts>();
  CLI::App* sub = app.add_subcommand(
      "train",
      "Train a model (text or image classifier, language model, sequence task) and write a run directory with its "
      "report");
  sub->add_option("--preset", o->preset,
                  preset_help() +
                      "; with --data or --source and no preset, a text classifier with the defaults "
                      "a config file has (docs/CONFIG.md)")
      ->capture_default_str()
      ->each([o](const std::string&) { o->preset_given = true; });
  sub->add_option("--config", o->config, "JSON job config (overrides the preset); flags override it")->check(kNotEmpty);
  sub->add_option("--out", o->out, "Run directory (default runs/<preset>, or runs/<the data file's name> with --data)")
      ->check(kNotEmpty);
  // Each flag sets the config keys it aliases (tasks/job_flags.h), in the order given, after the config is read;
  // its value is named by the type of the first of them.
  std::map<std::string, std::string> key_types;
  for (const JobKeyRow& r : job_key_rows()) key_types[r.key.path] = r.key.type;
  for (const JobFlag& f : job_flags()) {
    const std::string flag(f.flag);
    const std::string& type = key_types[std::string(f.keys.front().second)];
    const char* value_name = type == "integer"   ? "INT"
                             : type == "number"  ? "FLOAT"
                             : type == "boolean" ? "BOOL"
                                                 : "TEXT";
    if (f.is_switch)
      sub->add_flag_function(
             flag,
             [o, flag](std::int64_t) {
               o->settings.push_back({flag, "true"});
             },
             std::string(f.help))
          ->trigger_on_parse();
    else {
      CLI::Option* opt = sub->add_option_function<std::string>(
                                flag,
                                [o, flag](const std::string& v) {
                                  o->settings.push_back({flag, v});
                                },
                                std::string(f.help))
                             ->type_name(value_name)
                             ->trigger_on_parse();
      // A path flag's empty value is refused, never read as "none" (--init-from '' started from no weights).
      const std::string_view key = f.keys.front().second;
      if (key == "data.path" || key == "train.init_from" || key == "tokenizer.from") opt->check(kNotEmpty);
    }
  }
  sub->add_option_function<std::string>(
         "--set",
         [o](const std::string& v) {
           o->settings.push_back({"--set", v});
         },
         "Set any config key: --set model.rope_theta=500000 (repeatable; the keys "
         "are listed below)")
      ->type_name("PATH=VALUE")
      ->trigger_on_parse()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->footer([] { return job_keys_text(); });  // made only when --help prints it
  sub->add_flag("--resume", o->resume,
                "Continue the run in --out from its last checkpoint, or start it: with the settings its config.json "
                "records unless --preset or --config is given; more --steps or --epochs continue a finished run "
                "past its end (cosine and linear decay restart from the rate it stopped at)");
  sub->add_flag("--overwrite", o->overwrite,
                "Replace the run in --out (without this, train refuses a directory that holds one)")
      ->excludes("--resume");
  sub->add_flag("--quiet", o->quiet, "No progress output");
  return {sub, [o] { run_train(*o); }};
}

Command add_keys(CLI::App& app) {
  auto markdown = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand(
      "keys", "List every key of a job config: its type, default and bounds, and the flag that sets it");
  sub->add_flag("--markdown", *markdown, "As docs/CONFIG.md: Markdown tables");
  return {sub, [markdown] { fmt::print("{}", *markdown ? job_keys_markdown() : job_keys_text()); }};
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
  sub->add_option("--seed", o->sampling.seed, "Sampling seed")->check(kUnsigned64)->capture_default_str();
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_option("--precision", o->precision,
                  fmt::format("fp32, bf16, fp16 or int8 (default: the run's own; the key/value cache in fp32 for "
                              "int8); {}",
                              kInferencePrecisionCompute));
  return {sub, [o] {
            std::optional<Precision> precision;
            if (!o->precision.empty()) precision = parse_precision(o->precision);
            const ContextScope context(command_context(o->threads));
            warn_about_run(o->run);
            fmt::print("{}\n", generate_from_run(o->run, o->prompt, o->tokens, o->sampling, precision));
          }};
}

Command add_eval(CLI::App& app) {
  struct EvalOpts {
    std::string run, precision;
    EvalRequest req;
    int threads = 0;
  };
  auto o = std::make_shared<EvalOpts>();
  CLI::App* sub = app.add_subcommand(
      "eval",
      "Evaluate a trained run: a classifier's accuracy, per-class precision, recall and F1, confusion matrix and "
      "calibration on its test split or a new labelled file; a language model's loss and perplexity; a sequence "
      "task's accuracy by length");
  sub->add_option("--run", o->run, "Run directory written by multihead train")->required()->check(kNotEmpty);
  sub->add_option("--data", o->req.data,
                  "Score this file instead of the run's held-out split: a classifier's labelled CSV, TSV or JSON Lines "
                  "(classes named as in the run), a language model's text")
      ->check(kNotEmpty);
  sub->add_option("--source", o->req.format, "The --data file's format: csv, tsv or jsonl (default: by its extension)")
      ->check(CLI::IsMember({"csv", "tsv", "jsonl"}));
  sub->add_option("--text-column", o->req.text_column, "The --data file's text column or key (default: the run's)");
  sub->add_option("--label-column", o->req.label_column, "The --data file's label column or key (default: the run's)");
  sub->add_option("--out", o->req.out,
                  "Write the evaluation here: results.json, report.md (with the most confident mistakes), "
                  "plots/confusion.png and plots/reliability.png (classifiers)")
      ->check(kNotEmpty);
  sub->add_option("--threads", o->threads, "Threads (0: all cores)")->capture_default_str();
  sub->add_option("--precision", o->precision,
                  fmt::format("fp32, bf16, fp16 or int8 (default: the run's own); {}", kInferencePrecisionCompute));
  return {sub, [o] {
            std::optional<Precision> precision;
            if (!o->precision.empty()) precision = parse_precision(o->precision);
            const ContextScope context(command_context(o->threads));
            warn_about_run(o->run);
            // Every line is computed (and the report written) before any is printed.
            for (const std::string& line : evaluate_run(o->run, precision, o->req)) fmt::print("{}\n", line);
          }};
}

}  // namespace multihead::cli
