// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/jobs.h"

#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/io/output_path.h"
#include "multihead/train/distributed.h"
#include "multihead/train/fit.h"
#include "multihead/train/hf_checkpoint.h"
#include "multihead/train/run_dir.h"

namespace multihead {

namespace {

// The job of the alternative whose kTask is `task`, read from `config`.
template <std::size_t I = 0>
Job read_kind(const std::string& task, const nlohmann::json& config, const std::string& source) {
  if constexpr (I == std::variant_size_v<Job>) {
    throw ConfigError(fmt::format("{}: task must be one of {}, got '{}'", source, fmt::join(job_tasks(), ", "), task));
  } else {
    using Kind = std::variant_alternative_t<I, Job>;
    if (task == Kind::kTask) return Kind::from_json(config, source);
    return read_kind<I + 1>(task, config, source);
  }
}

template <std::size_t... I>
std::vector<KindInfo> kind_rows(std::index_sequence<I...>) {
  return {{std::variant_alternative_t<I, Job>::kTask, std::variant_alternative_t<I, Job>::kNoun,
           std::variant_alternative_t<I, Job>::kAnswers, std::variant_alternative_t<I, Job>::kModel}...};
}

}  // namespace

const char* job_task(const Job& job) {
  return std::visit([](const auto& j) { return std::decay_t<decltype(j)>::kTask; }, job);
}

int job_threads(const Job& job) {
  return std::visit([](const auto& j) { return j.threads; }, job);
}

const std::vector<KindInfo>& kinds() {
  static const std::vector<KindInfo> rows = kind_rows(std::make_index_sequence<std::variant_size_v<Job>>{});
  return rows;
}

const KindInfo& kind_of(std::string_view task) {
  for (const KindInfo& k : kinds())
    if (task == k.task) return k;
  throw ConfigError(fmt::format("task must be one of {}, got '{}'", fmt::join(job_tasks(), ", "), task));
}

const char* run_answers_name(RunAnswers a) {
  switch (a) {
    case RunAnswers::kNone: return "none";
    case RunAnswers::kClassify: return "classify";
    case RunAnswers::kGenerate: return "generate";
    case RunAnswers::kPronounce: return "pronounce";
  }
  return "?";
}

const char* model_family_name(ModelFamily m) {
  switch (m) {
    case ModelFamily::kSequenceClassifier: return "sequence_classifier";
    case ModelFamily::kLanguageModel: return "language_model";
    case ModelFamily::kVisionTransformer: return "vision_transformer";
    case ModelFamily::kEncoderDecoder: return "encoder_decoder";
  }
  return "?";
}

std::vector<std::string> job_tasks() {
  std::vector<std::string> names;
  for (const KindInfo& k : kinds()) names.emplace_back(k.task);
  return names;
}

Job job_from_json(const nlohmann::json& config, const std::string& source) {
  check<ConfigError>(config.is_object(), "{}: a job config is a JSON object", source);
  const auto it = config.find("task");
  // A text classifier's config may leave its task out (the default).
  std::string task = TextClassificationJob::kTask;
  if (it != config.end()) {
    check<ConfigError>(it->is_string(), "{}: task must be a string", source);
    task = it->get<std::string>();
  }
  return read_kind(task, config, source);
}

Job job_from_file(const std::string& path) { return job_from_json(ConfigReader::parse(read_file(path), path), path); }

nlohmann::json to_json(const Job& job) {
  return std::visit([](const auto& j) { return to_json(j); }, job);
}

namespace {

// Every path the job reads, with what it is (for errors): its data, the
// weights or run it starts from, and the run whose tokenizer it takes.
template <typename J, typename F>
void for_each_input(J& j, F&& f) {
  if constexpr (requires { j.data_path; }) f(j.data_path, "the data (data.path)");
  if constexpr (requires { j.data_dir; }) f(j.data_dir, "the data (data.path)");
  if constexpr (requires { j.text_path; }) f(j.text_path, "the data (data.path)");
  f(j.train.init_from, "the weights it starts from (train.init_from)");
  if constexpr (requires { j.tokenizer; }) f(j.tokenizer.from, "the run whose tokenizer it takes (tokenizer.from)");
}

// The job's data named by absolute path, so the run's config.json serves
// eval, inspect and predict from any directory.
Job with_absolute_data_path(Job job) {
  std::visit(
      [](auto& j) {
        for_each_input(j, [](std::string& p, const char*) {
          if (!p.empty()) p = std::filesystem::absolute(p).lexically_normal().string();
        });
      },
      job);
  return job;
}

// A job that starts from another run's weights reads text with that run's
// tokenizer unless it names another; the tokenizer section then describes
// the tokenizer taken (its kind and size are the source run's). A run that
// resumes from its checkpoint has its own copy, and needs the source no
// more: one that is gone leaves the section as the job has it.
Job with_source_tokenizer(Job job, bool resumes) {
  std::visit(
      [resumes](auto& j) {
        if constexpr (requires { j.tokenizer; }) {
          TokenizerConfig& t = j.tokenizer;
          if (t.from.empty() && std::filesystem::is_directory(j.train.init_from)) t.from = j.train.init_from;
          // A state_dict has no tokenizer: one trained afresh would number the tokens otherwise than its
          // embeddings learned them, silently.
          check<ConfigError>(resumes || !t.from.empty() || j.train.init_from.empty(),
                             "{} is a state_dict, which carries no tokenizer; give --tokenizer-from RUN, the run "
                             "whose tokenizer its weights learned with (tokenizer.from)",
                             j.train.init_from);
          if (t.from.empty()) return;
          if (resumes && !std::filesystem::exists(std::filesystem::path(t.from) / "config.json")) return;
          const RunConfig source = read_run_config(t.from);
          check<ConfigError>(source.json.contains("tokenizer") && source.json["tokenizer"].is_object(),
                             "{}: the run has no tokenizer to take", source.path);
          const std::string from = t.from;
          ConfigReader reader(source.json["tokenizer"], source.path + ": tokenizer");
          TokenizerConfig::keys(reader, t);
          t.from = from;
        }
      },
      job);
  return job;
}

// A job that starts from a Hugging Face checkpoint, or from a run of its
// kind, has that model: its shape is the source's, not the job's to choose
// (the number of classes is still the data's), as the tokenizer is the
// source's (with_source_tokenizer). A run resuming from its own checkpoint
// recorded that model already.
Job with_source_model(Job job, bool resumes) {
  std::visit(
      [resumes](auto& j) {
        if constexpr (requires { j.model.pooling; }) {
          if (resumes) return;
          using J = std::decay_t<decltype(j)>;
          const std::filesystem::path run_config = std::filesystem::path(j.train.init_from) / "config.json";
          if (!j.train.init_from.empty() && std::filesystem::is_regular_file(run_config) &&
              !is_hf_checkpoint(j.train.init_from)) {
            const RunConfig source = read_run_config(j.train.init_from);
            if (source.json.value("task", std::string(TextClassificationJob::kTask)) != J::kTask ||
                !source.json.contains("model") || !source.json["model"].is_object())
              return;  // another kind's run: its parameters are matched by name, as a state_dict's
            const std::int64_t classes = j.model.num_classes;
            j.model = ModelConfig();
            ConfigReader reader(source.json["model"], source.path + ": model");
            ModelConfig::keys(reader, j.model);
            j.model.num_classes = classes;
            return;
          }
          if (!is_hf_checkpoint(j.train.init_from)) return;
          const HfCheckpoint c = read_hf_checkpoint(j.train.init_from);
          check<ConfigError>(c.job["task"] == J::kTask, "{} is a {} ({}); a {} job cannot start from it",
                             j.train.init_from, c.job["task"].get<std::string>(), c.architecture, J::kTask);
          const std::int64_t classes = j.model.num_classes;
          j.model = ModelConfig();
          ConfigReader reader(c.job["model"], c.config_path);
          ModelConfig::keys(reader, j.model);
          j.model.num_classes = classes;
        }
      },
      job);
  return job;
}

}  // namespace

std::vector<NamedInput> job_inputs(const Job& job) {
  std::vector<NamedInput> inputs;
  std::visit(
      [&](const auto& j) {
        for_each_input(j, [&](const std::string& p, const char* what) { inputs.push_back({what, p}); });
      },
      job);
  return inputs;
}

std::vector<std::string> train_job(const Job& given, const std::string& out, RunMode mode, Progress& progress,
                                   StopRequest* stop, const std::vector<NamedInput>& more_inputs) {
  namespace fs = std::filesystem;
  // Before anything is created, taken over or removed: a run never goes over what it reads.
  std::vector<NamedInput> inputs = job_inputs(given);
  inputs.insert(inputs.end(), more_inputs.begin(), more_inputs.end());
  check_output_apart(out, "--out", inputs);
  const bool resumes = mode == RunMode::kResume && fs::exists(last_checkpoint_path(out));
  const Job job = with_source_model(with_source_tokenizer(with_absolute_data_path(given), resumes), resumes);
  if (!process_group().primary()) {
    // Another rank under mpirun: it trains its share; rank 0 writes the run.
    RunDir follower(out, mode);
    try {
      std::visit([&](const auto& j) { run_job(j, follower, progress, stop); }, job);
    } catch (const FollowerFinished&) {
      return {};
    }
    throw Error("a rank other than 0 finished a job without training");
  }
  const bool existed = fs::exists(fs::symlink_status(out));
  std::vector<std::string> lines;
  // A refused directory is left as it was (it may be another run's).
  std::optional<RunDir> run(std::in_place, out, mode);
  if (!run->stale_lock_pid().empty())
    progress.log(
        fmt::format("note: {} was locked by process {}, which ended without releasing it (killed?); "
                    "this run takes it over",
                    out, clip_text(run->stale_lock_pid())));
  try {
    lines = std::visit([&](const auto& j) { return summary_lines(run_job(j, *run, progress, stop)); }, job);
    lines.push_back(fmt::format("report: {}", run->file("report.md")));
  } catch (...) {
    // Without a checkpoint nothing of the run can be resumed: what it wrote
    // goes (the directory too, when this run made it).
    std::error_code ec;
    const bool no_checkpoint = fs::is_empty(fs::path(out) / "checkpoints", ec) || ec;
    if (no_checkpoint) {
      std::vector<fs::path> written;
      for (const auto& e : fs::directory_iterator(out, ec))
        if (e.path().filename() != "run.lock") written.push_back(e.path());
      for (const fs::path& p : written) fs::remove_all(p, ec);
      run.reset();
      if (existed) fs::remove(fs::path(out) / "run.lock", ec);
      else fs::remove_all(out, ec);
    }
    // A stop's advice ("the same command with --resume") is not the same
    // command when it replaced a run: --resume excludes --overwrite.
    if (mode == RunMode::kOverwrite) {
      try {
        throw;
      } catch (const Interrupted& e) {
        std::string advice = e.what();
        const std::string with = "the same command with --resume";
        if (const std::size_t at = advice.find(with); at != std::string::npos)
          advice.insert(at + with.size(), " in place of --overwrite");
        throw Interrupted(e.signal(), advice);
      }
    }
    throw;
  }
  return lines;
}

ModelSample sample_run_model(const std::string& run_dir, const ModelSampleSettings& settings) {
  check<ConfigError>(settings.examples > 0 && settings.examples <= kMaxBatch, "examples must be in [1, {}], got {}",
                     kMaxBatch, settings.examples);
  const RunConfig cfg = read_run_config(run_dir);
  Job job = job_from_json(cfg.json, cfg.path);
  return std::visit(
      [&](auto& j) {
        // Training mode with dropout 0: the model is built without it (an encoder-decoder's settings are nested).
        if (settings.training) {
          if constexpr (requires { j.model.layer.dropout; }) j.model.layer.dropout = 0;
          else j.model.model.layer.dropout = 0;
        }
        return sample_model(j, run_dir, settings);
      },
      job);
}

TestTexts run_test_texts(const std::string& run_dir) {
  const RunConfig cfg = read_run_config(run_dir);
  const Job job = job_from_json(cfg.json, cfg.path);
  return std::visit(
      [&](const auto& j) -> TestTexts {
        if constexpr (requires { test_texts(j, run_dir); }) return test_texts(j, run_dir);
        else
          throw ConfigError(fmt::format(
              "test_texts needs a text classification or pronunciation run; this run's task is {}", job_task(job)));
      },
      job);
}

std::vector<std::string> evaluate_run(const std::string& run_dir, std::optional<Precision> precision,
                                      const EvalRequest& req) {
  check<ConfigError>(!req.data.empty() || (req.format.empty() && req.text_column.empty() && req.label_column.empty()),
                     "--source, --text-column and --label-column describe the --data file; give --data too");
  // The report folder may lie inside the run (runs/X/eval), never be or hold it or the data.
  if (!req.out.empty())
    check_output_apart(req.out, "--out", {{"the run (--run)", run_dir}, {"the data (--data)", req.data}},
                       OutputPlacement::kMayLieInside);
  const RunConfig cfg = read_run_config(run_dir);
  Job job = job_from_json(cfg.json, cfg.path);
  return std::visit(
      [&](auto& j) {
        if (precision) j.train.precision = *precision;
        if constexpr (requires { evaluate_run(j, run_dir, req); }) {
          return evaluate_run(j, run_dir, req);
        } else {
          const bool asked = !req.data.empty() || !req.out.empty() || !req.format.empty() || !req.text_column.empty() ||
                             !req.label_column.empty();
          check<ConfigError>(!asked,
                             "--data, --out, --source and the column flags evaluate text classifiers and language "
                             "models; this run's task is {}",
                             job_task(job));
          return evaluate_run(j, run_dir);
        }
      },
      job);
}

}  // namespace multihead
