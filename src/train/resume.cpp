// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/resume.h"

#include <chrono>
#include <algorithm>
#include <filesystem>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/nn/state_dict.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/distributed.h"
#include "multihead/train/initial_weights.h"

namespace multihead {

using json = nlohmann::json;

namespace {

// A config as a resume compares it: a key the run's config lacks (written
// before the key existed) has its default, and the keys a resume may change
// are left out. Both from the key list (KeyDescription).
json comparable(json config, const std::vector<KeyDescription>& keys) {
  for (const KeyDescription& k : keys) {
    std::string pointer = "/" + k.path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    const json::json_pointer at(pointer);
    if (!config.contains(at.parent_pointer()) || !config[at.parent_pointer()].is_object()) continue;
    json& section = config[at.parent_pointer()];
    if (k.may_change_on_resume) {
      section.erase(at.back());
      continue;
    }
    // A default that is a value (not "required", nor a rule such as "steps").
    const json value = json::parse(k.default_value, nullptr, false);
    if (!section.contains(at.back()) && !value.is_discarded()) section[at.back()] = value;
  }
  return config;
}

// A new run whose config names weights to start from: they replace the
// model's initialisation, and config.json records the file's SHA-256 (a
// config that pins another is refused).
void start_from_weights(json& config, Trainer& trainer, Progress* progress) {
  const TrainConfig& t = trainer.config();
  if (t.init_from.empty()) return;
  const InitialWeights w = read_initial_weights(t.init_from);
  if (progress && !w.warning.empty()) progress->warn(w.warning);
  check<ConfigError>(t.init_sha256.empty() || t.init_sha256 == w.sha256,
                     "{} has SHA-256 {}, the config's init_sha256 is {}", w.file, w.sha256, t.init_sha256);
  apply_initial_weights(trainer.store(), w, t.init_skip);
  config["train"]["init_sha256"] = w.sha256;
}

// The schedule of a resumed run, in `config` (what config.json will say) and
// in the trainer. The same length as before: the run's own schedule,
// restart included. Another length (a finished run continued, or an
// unfinished one given more or fewer steps): the decay restarts at the step
// the checkpoint holds, from the rate of the step before it
// (train/schedule.h).
void continue_schedule(const TrainSection& before, TrainSection after, const std::string& path, json& config,
                       Trainer& trainer) {
  if (!after.present || !before.present) return;  // a config without a train section has no schedule to continue
  const TrainConfig& old = before.train;
  const TrainConfig given = after.train;
  TrainConfig& now = after.train;
  const std::int64_t done = trainer.steps_done();
  if (now.steps == old.steps) {
    now.schedule.restart_step = old.schedule.restart_step;
    now.schedule.restart_lr = old.schedule.restart_lr;
  } else {
    check<ConfigError>(now.steps >= done,
                       "cannot continue {}: it has trained {} steps, and this run would end after {}", path, done,
                       now.steps);
    now.schedule.restart_step = done;
    now.schedule.restart_lr = done > 0 ? old.schedule.lr_at(done - 1) : old.schedule.base_lr;
  }
  // config.json records the keys this changed, as the train section's key list writes them.
  json was_written = json::object(), now_written = json::object();
  ConfigWriter was_writer(was_written), now_writer(now_written);
  TrainConfig::keys(was_writer, given);
  TrainConfig::keys(now_writer, now);
  for (const auto& [key, value] : now_written.items())
    if (was_written[key] != value) config["train"][key] = value;
  trainer.restart_decay(now.schedule.restart_step, now.schedule.restart_lr);
}

// The training time the last of a resumed run's kept records noted (0 for
// records written before steps noted it). In the metrics, not the
// checkpoint, whose bytes stay the same from run to run.
double recorded_seconds(const std::vector<json>& records) {
  for (auto r = records.rbegin(); r != records.rend(); ++r)
    if (const auto it = r->find("train_seconds"); it != r->end() && it->is_number() && it->get<double>() >= 0)
      return it->get<double>();
  return 0;
}

// True when the run was asked to resume and has a checkpoint to resume from.
bool resumes_from_checkpoint(const RunDir& run) {
  return run.resume_requested() && std::filesystem::exists(last_checkpoint_path(run.path()));
}

}  // namespace

std::unique_ptr<Tokenizer> run_tokenizer(const RunDir& run, const TokenizerConfig& cfg,
                                         const std::vector<std::string>& texts, Progress* progress) {
  if (resumes_from_checkpoint(run)) return Tokenizer::load(run.file("tokenizer"));
  if (!cfg.from.empty()) {  // another run's, kept in this run too
    std::unique_ptr<Tokenizer> tok = load_tokenizer_of_run(cfg.from);
    if (run.writes()) tok->save(run.file("tokenizer"));
    return tok;
  }
  // Under mpirun rank 0 trains it and the others load what it saved: every
  // rank must hold the same vocabulary.
  ProcessGroup& group = process_group();
  if (!run.writes()) {
    group.max(0);  // rank 0 has saved it
    return Tokenizer::load(run.file("tokenizer"));
  }
  // SentencePiece trains for a minute or more on a large corpus, and says nothing meanwhile: said first.
  if (progress)
    progress->log(fmt::format("tokenizer: training a {} tokenizer of at most {} tokens on {} texts...",
                              tokenizer_kind_name(cfg.kind), cfg.vocab_size, texts.size()));
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Tokenizer> tok = train_tokenizer(cfg, texts);
  if (progress)
    progress->log(fmt::format("tokenizer: trained in {:.1f} s",
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  tok->save(run.file("tokenizer"));
  group.max(0);
  return tok;
}

std::vector<json> start_or_resume(RunDir& run, const DescribedConfig& described, Trainer& trainer, Progress* progress) {
  json config = described.json;
  if (!resumes_from_checkpoint(run)) {
    // A new run in a used directory replaces the run there: its checkpoint
    // goes too, so that a later --resume cannot pick up another run's weights.
    std::error_code ec;
    std::filesystem::remove(last_checkpoint_path(run.path()), ec);
    start_from_weights(config, trainer, progress);
    run.write_config(config);
    run.start_training_clock(0);
    return {};
  }
  const std::string path = run.file("config.json");
  const json before = json::parse(read_file(path), nullptr, false);
  check<IoError>(!before.is_discarded(), "{}: not JSON; cannot resume this run", path);
  const json had = comparable(before, described.keys), has = comparable(config, described.keys);
  if (const json patch = json::diff(had, has); !patch.empty()) {
    const std::string key = patch[0]["path"].get<std::string>();
    const json::json_pointer ptr(key);
    const std::string was = had.contains(ptr) ? had[ptr].dump() : "absent";
    const std::string now = has.contains(ptr) ? has[ptr].dump() : "absent";
    throw ConfigError(
        fmt::format("cannot resume {}: its run had {} = {}, this one has {}; resume with the same "
                    "settings or choose another --out",
                    run.path(), key, was, now));
  }
  const auto meta = trainer.load_checkpoint(last_checkpoint_path(run.path()));
  check_config_matches_checkpoint(before, path, meta, last_checkpoint_path(run.path()));
  if (const std::string w = checkpoint_format_warning(meta, last_checkpoint_path(run.path())); progress && !w.empty())
    progress->warn(w);
  std::int64_t records = 0;
  if (auto it = meta.find("metrics.records"); it != meta.end()) {
    try {
      records = std::stoll(it->second);
    } catch (const std::exception&) {
      throw IoError(fmt::format("{}: metrics.records is not a number", last_checkpoint_path(run.path())));
    }
  }
  // A finished run given another length that comes to no more steps (--steps
  // past an epoch job's epochs, which it only caps) would train nothing:
  // refused, with the flag that continues it. The same length again redoes
  // the results (a run stopped in its test).
  const TrainSection was = train_section(before, path), now = train_section(config, "the config");
  const std::int64_t done = trainer.steps_done();
  const bool other_length = was.budget.epochs != now.budget.epochs || was.budget.max_steps != now.budget.max_steps;
  if (other_length && done == now.train.steps && std::filesystem::exists(run.file("results.json"))) {
    const bool epochs = config.contains("train") && config["train"].contains("epochs");
    throw ConfigError(fmt::format(
        "{} has trained all {} steps its settings give: nothing to train; continue it with more {}", run.path(), done,
        epochs ? fmt::format("--epochs (it has {}; --steps only caps them)", now.budget.epochs) : "--steps"));
  }
  continue_schedule(was, now, path, config, trainer);
  // config.json is rewritten, so threads and the like show this run's values.
  run.write_config(config);
  std::vector<json> kept = run.keep_metrics(records);
  run.start_training_clock(recorded_seconds(kept));
  return kept;
}

void save_run_checkpoint(RunDir& run, const Trainer& trainer, const std::map<std::string, std::string>& extra) {
  if (!run.writes()) return;
  std::map<std::string, std::string> meta = extra;
  meta["metrics.records"] = std::to_string(run.metrics_records());
  meta[std::string(kCheckpointConfigKey)] = architecture_of(run.config()).dump();
  trainer.save_checkpoint(last_checkpoint_path(run.path()), meta);
  // The kept copy is written as every file here is, whole or not at all.
  if (trainer.config().keep_checkpoints)
    write_file_atomic(kept_checkpoint_path(run.path(), trainer.steps_done()),
                      read_file(last_checkpoint_path(run.path()), kMaxWeightsBytes));
}

void finish_step(RunDir& run, Progress& progress, const Trainer& trainer, const StepStats& st, const json& record,
                 bool may_checkpoint) {
  run.append_metrics(record);
  progress.record(record);
  if (st.skipped && !trainer.config().loss_scaling)
    progress.log(fmt::format("step {}: loss {}, gradient norm not finite; update skipped", st.step + 1, st.loss));
  const std::int64_t every = trainer.config().checkpoint_every;
  if (may_checkpoint && every > 0 && trainer.steps_done() % every == 0) save_run_checkpoint(run, trainer);
}

}  // namespace multihead
