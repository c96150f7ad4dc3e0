// Settings given on top of a job's preset or config (the flags of
// `multihead train`). Each task applies those that mean something for it
// and refuses the others by name, so no flag is silently ignored.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "multihead/data/tokenizer.h"
#include "multihead/nn/models.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct JobOverrides {
  std::optional<std::string> data, source, tokenizer, positions, attention, optimizer, schedule, precision,
      on_nonfinite, allreduce;
  std::optional<std::int64_t> epochs, steps, d_model, num_heads, num_layers, batch, max_len, vocab_size, warmup,
      grad_accumulation, num_kv_heads, window, block_size, checkpoint_every;
  std::optional<double> lr, clip_grad_norm, weight_decay, dropout;
  std::optional<std::int64_t> seed;  // signed, so that -1 is refused rather than wrapped
  std::optional<int> threads;
  std::optional<bool> allreduce_overlap;
  bool checkpoint_layers = false;

};

// ConfigError "--epochs and --source do not apply to <what>" naming those
// of `flags` that o gives; nothing when it gives none. The flags a job may
// refuse: --data, --source, --epochs, --positions, --tokenizer, --max-len
// and --vocab-size.
void refuse_flags(const JobOverrides& o, std::initializer_list<std::string_view> flags, const std::string& what);

// --epochs, and --steps as the cap, of a job that trains in epochs.
void apply_budget_overrides(const JobOverrides& o, EpochBudget& budget);

// What every job takes: the optimisation, seed, precision and checkpointing
// (into train), the layer's width, heads, dropout and attention pattern
// (into layer), the layer count and the threads. Validates train.
void apply_training_overrides(const JobOverrides& o, TrainConfig& train, TransformerLayerConfig& layer,
                              std::int64_t& num_layers, int& threads);

// The token models' part: the above, positions, tokenizer and vocabulary;
// validates the model.
void apply_token_model_overrides(const JobOverrides& o, ModelConfig& model, TrainConfig& train,
                                 TokenizerConfig& tokenizer, int& threads);

}  // namespace multihead
