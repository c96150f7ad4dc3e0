// SPDX-License-Identifier: Apache-2.0
// Checkpoints of a job's run directory, and picking a run up from its last
// one. A checkpoint holds the weights, the optimizer, the step and how many
// metrics records were written; the data position is a function of
// (seed, step), so a resumed run goes on exactly as the uninterrupted one
// would have, bit for bit.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/data/tokenizer.h"
#include "multihead/train/progress.h"
#include "multihead/train/described_config.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/trainer.h"

namespace multihead {

// The run's tokenizer: a resumed run loads the one its checkpoint was
// trained with from tokenizer/; a fresh one takes cfg.from's (another run's)
// or trains it on `texts`, and saves it there.
std::unique_ptr<Tokenizer> run_tokenizer(const RunDir& run, const TokenizerConfig& cfg,
                                         const std::vector<std::string>& texts, Progress* progress = nullptr);

// Starts a job's training. A fresh run starts from the weights its config's
// train.init_from names, if any (recording their SHA-256 in the config),
// writes config.json, removes a checkpoint a former run left in the
// directory, and returns no records.
// A resumed one checks `config` against the run's config.json (the keys
// its key list marks may_change_on_resume may differ: threads,
// checkpoint_every and the like, and the length; a key the run's config
// lacks has its default; anything else is a ConfigError naming the key),
// restores the trainer from the checkpoint, trims metrics.jsonl to the
// records written before it, and returns those. A run resumed with another
// length than it had (a finished run continued past its end) restarts its
// decay at the checkpoint's step (train/schedule.h), which config.json then
// records as train.restart_step and train.restart_lr.
// A checkpoint of an older format (resumed from, or started from) is named
// in a warning on `progress`, when given.
std::vector<nlohmann::json> start_or_resume(RunDir& run, const DescribedConfig& config, Trainer& trainer,
                                            Progress* progress = nullptr);

// Writes checkpoints/last.safetensors with the metrics count and `extra`.
void save_run_checkpoint(RunDir& run, const Trainer& trainer, const std::map<std::string, std::string>& extra = {});

// After each step: appends its record to metrics.jsonl, logs a step skipped
// for a non-finite loss (loss scaling's overflow skips are routine and only
// recorded), and writes a checkpoint when train.checkpoint_every asks for
// one. Jobs that checkpoint after an epoch's evaluation anyway pass
// may_checkpoint = false for the epoch's last step, so that a resumed run
// never skips that evaluation.
void finish_step(RunDir& run, Progress& progress, const Trainer& trainer, const StepStats& st,
                 const nlohmann::json& record, bool may_checkpoint = true);

}  // namespace multihead
