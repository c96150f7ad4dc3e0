#include "multihead/tasks/overrides.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "multihead/core/error.h"
#include "multihead/core/threading.h"
#include "multihead/io/attention_config.h"

namespace multihead {

void refuse_flags(const JobOverrides& o, std::initializer_list<std::string_view> flags, const std::string& what) {
  const std::pair<std::string_view, bool> all[] = {
      {"--data", o.data.has_value()},         {"--source", o.source.has_value()},
      {"--epochs", o.epochs.has_value()},     {"--positions", o.positions.has_value()},
      {"--tokenizer", o.tokenizer.has_value()}, {"--max-len", o.max_len.has_value()},
      {"--vocab-size", o.vocab_size.has_value()}};
  std::vector<std::string_view> given;
  for (std::string_view flag : flags) {
    const auto it = std::find_if(std::begin(all), std::end(all), [&](const auto& f) { return f.first == flag; });
    if (it == std::end(all)) throw std::invalid_argument(fmt::format("refuse_flags: no flag {}", flag));
    if (it->second) given.push_back(flag);
  }
  if (given.empty()) return;
  const std::string_view last = given.back();
  given.pop_back();
  const std::string names = given.empty() ? std::string(last) : fmt::format("{} and {}", fmt::join(given, ", "), last);
  throw ConfigError(fmt::format("{} {} not apply to {}", names, given.empty() ? "does" : "do", what));
}

void apply_budget_overrides(const JobOverrides& o, EpochBudget& budget) {
  if (o.epochs) budget.epochs = *o.epochs;
  if (o.steps) budget.max_steps = *o.steps;
}

void apply_training_overrides(const JobOverrides& o, TrainConfig& t, TransformerLayerConfig& layer,
                              std::int64_t& num_layers, int& threads) {
  if (o.optimizer) t.optimizer = parse_optimizer(*o.optimizer);
  if (o.schedule) t.schedule.decay = parse_decay(*o.schedule);
  if (o.warmup) t.schedule.warmup_steps = *o.warmup;
  if (o.lr) t.schedule.base_lr = *o.lr;
  if (o.clip_grad_norm) t.clip_grad_norm = *o.clip_grad_norm;
  if (o.weight_decay) t.adamw.weight_decay = t.sgd.weight_decay = *o.weight_decay;
  if (o.grad_accumulation) t.grad_accumulation = *o.grad_accumulation;
  if (o.batch) t.batch = *o.batch;
  if (o.checkpoint_every) t.checkpoint_every = *o.checkpoint_every;
  if (o.on_nonfinite) t.on_nonfinite = parse_nonfinite(*o.on_nonfinite);
  if (o.allreduce) t.allreduce = parse_allreduce(*o.allreduce);
  if (o.allreduce_overlap) t.allreduce_overlap = *o.allreduce_overlap;
  if (o.seed) t.seed = checked_seed(*o.seed);
  if (o.checkpoint_layers) t.checkpoint_layers = true;
  if (o.precision) {
    t.precision = parse_precision(*o.precision);
    t.loss_scaling = t.precision == Precision::kF16;
  }
  t.validate();
  if (o.d_model) layer.d_model = *o.d_model;
  if (o.num_heads) layer.nhead = *o.num_heads;
  if (o.dropout) layer.dropout = *o.dropout;
  AttentionPattern& p = layer.pattern;
  if (o.attention) p.variant = parse_attention_variant(*o.attention);
  if (o.num_kv_heads) p.num_kv_heads = *o.num_kv_heads;
  if (o.window) p.window_left = p.window_right = *o.window;
  if (o.block_size) p.sparse_block = *o.block_size;
  if (o.num_layers) num_layers = *o.num_layers;
  if (o.threads) {
    check_threads(*o.threads);
    threads = *o.threads;
  }
}

void apply_token_model_overrides(const JobOverrides& o, ModelConfig& m, TrainConfig& t, TokenizerConfig& tok,
                                 int& threads) {
  apply_training_overrides(o, t, m.layer, m.num_layers, threads);
  if (o.positions) m.positions = parse_position_kind(*o.positions);
  if (o.tokenizer) tok.kind = parse_tokenizer_kind(*o.tokenizer);
  if (o.vocab_size) tok.vocab_size = *o.vocab_size;
  m.vocab_size = tok.vocab_size;
  m.validate();
}

}  // namespace multihead
