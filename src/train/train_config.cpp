#include "multihead/train/train_config.h"

#include <algorithm>
#include <cmath>

#include "multihead/core/threading.h"
#include "multihead/io/attention_config.h"

namespace multihead {

NonFinite parse_nonfinite(const std::string& s) {
  if (s == "stop") return NonFinite::kStop;
  if (s == "skip") return NonFinite::kSkip;
  throw ConfigError(fmt::format("on_nonfinite must be stop or skip, got '{}'", s));
}

const char* nonfinite_name(NonFinite n) { return n == NonFinite::kSkip ? "skip" : "stop"; }

OptimizerKind parse_optimizer(const std::string& s) {
  if (s == "adamw") return OptimizerKind::kAdamW;
  if (s == "sgd") return OptimizerKind::kSgd;
  throw ConfigError(fmt::format("optimizer must be adamw or sgd, got \"{}\"", s));
}

const char* optimizer_name(OptimizerKind k) { return k == OptimizerKind::kSgd ? "sgd" : "adamw"; }

ModelConfig read_model_config(ConfigReader& r) {
  ModelConfig m;
  m.vocab_size = r.get_int("vocab_size");
  m.num_layers = r.get_int("num_layers", 2);
  m.layer.d_model = r.get_int("d_model", 128);
  m.layer.nhead = r.get_int("nhead", 4);
  m.layer.dim_feedforward = r.get_int("dim_feedforward", 4 * m.layer.d_model);
  m.layer.dropout = r.get_number("dropout", 0.1);
  m.layer.activation = parse_activation(r.get_string("activation", std::string("relu")));
  m.layer.layer_norm_eps = r.get_number("layer_norm_eps", 1e-5);
  m.layer.norm_first = r.get_bool("norm_first", false);
  m.final_norm = r.get_bool("final_norm", true);
  m.positions = parse_position_kind(r.get_string("positions", std::string("sinusoidal")));
  m.max_len = r.get_int("max_len", 512);
  m.relative_clip = r.get_int("relative_clip", 16);
  m.relative_values = r.get_bool("relative_values", true);
  m.rope_theta = r.get_number("rope_theta", 10000.0);
  m.num_classes = r.get_int("num_classes", 2);
  m.pooling = parse_pooling(r.get_string("pooling", std::string("mean")));
  m.tie_embeddings = r.get_bool("tie_embeddings", false);
  m.init = r.get_string("init", std::string("pytorch"));
  read_attention_pattern(r, m.layer.pattern);
  m.validate();
  return m;
}

void TrainConfig::validate() const {
  check<ConfigError>(checkpoint_every >= 0, "checkpoint_every must be >= 0, got {}", checkpoint_every);
  check<ConfigError>(schedule.base_lr > 0 && std::isfinite(schedule.base_lr), "lr must be positive and finite, got {}",
                     schedule.base_lr);
  check<ConfigError>(schedule.warmup_steps >= 0, "warmup_steps must be >= 0, got {}", schedule.warmup_steps);
  check<ConfigError>(clip_grad_norm >= 0 && std::isfinite(clip_grad_norm), "clip_grad_norm must be >= 0, got {}",
                     clip_grad_norm);
  check<ConfigError>(adamw.weight_decay >= 0 && sgd.weight_decay >= 0 && std::isfinite(adamw.weight_decay) &&
                         std::isfinite(sgd.weight_decay),
                     "weight_decay must be >= 0, got {}", adamw.weight_decay);
  check<ConfigError>(grad_accumulation >= 1, "grad_accumulation must be >= 1, got {}", grad_accumulation);
  check<ConfigError>(steps >= 0 && batch > 0 && seq_len > 0, "steps, batch and seq_len must be positive");
  check<ConfigError>(steps <= kMaxSteps && schedule.total_steps <= kMaxSteps && schedule.warmup_steps <= kMaxSteps,
                     "steps, total_steps and warmup_steps must be at most {}", kMaxSteps);
  check<ConfigError>(batch <= kMaxBatch && seq_len <= kMaxLength, "batch must be at most {} and seq_len at most {}",
                     kMaxBatch, kMaxLength);
  check<ConfigError>(schedule.min_lr >= 0 && std::isfinite(schedule.min_lr), "min_lr must be >= 0, got {}",
                     schedule.min_lr);
  check<ConfigError>(adamw.beta1 >= 0 && adamw.beta1 < 1 && adamw.beta2 >= 0 && adamw.beta2 < 1,
                     "betas must be in [0, 1), got {} and {}", adamw.beta1, adamw.beta2);
  check<ConfigError>(adamw.eps > 0 && std::isfinite(adamw.eps), "eps must be positive and finite, got {}", adamw.eps);
  check<ConfigError>(sgd.momentum >= 0 && sgd.momentum < 1, "momentum must be in [0, 1), got {}", sgd.momentum);
  check<ConfigError>(batch % grad_accumulation == 0 || grad_accumulation == 1,
                     "batch ({}) must be a multiple of grad_accumulation ({})", batch, grad_accumulation);
}

TrainConfig read_train_config(ConfigReader& r) {
  TrainConfig t;
  t.optimizer = parse_optimizer(r.get_string("optimizer", std::string("adamw")));
  t.schedule.base_lr = r.get_number("lr", 1e-3);
  t.schedule.min_lr = r.get_number("min_lr", 0.0);
  t.schedule.warmup_steps = r.get_int("warmup_steps", 0);
  t.schedule.decay = parse_decay(r.get_string("schedule", std::string("constant")));
  const std::vector<double> betas = r.get_numbers("betas", 2, {0.9, 0.999});  // PyTorch's betas tuple
  t.adamw.beta1 = betas[0];
  t.adamw.beta2 = betas[1];
  t.adamw.eps = r.get_number("eps", 1e-8);
  t.adamw.weight_decay = r.get_number("weight_decay", t.optimizer == OptimizerKind::kAdamW ? 0.01 : 0.0);
  t.sgd.weight_decay = t.adamw.weight_decay;
  t.sgd.momentum = r.get_number("momentum", 0.0);
  t.sgd.nesterov = r.get_bool("nesterov", false);
  t.clip_grad_norm = r.get_number("clip_grad_norm", 0.0);
  t.grad_accumulation = r.get_int("grad_accumulation", 1);
  t.steps = r.get_int("steps", 100);
  t.schedule.total_steps = r.get_int("total_steps", t.steps);
  t.batch = r.get_int("batch", 32);
  t.seq_len = r.get_int("seq_len", 128);
  t.seed = checked_seed(r.get_int("seed", 0));
  t.checkpoint_layers = r.get_bool("checkpoint_layers", false);
  t.precision = parse_precision(r.get_string("precision", std::string("fp32")));
  // fp16 needs loss scaling to keep small gradients from flushing to zero.
  t.loss_scaling = r.get_bool("loss_scaling", t.precision == Precision::kF16);
  t.on_nonfinite = parse_nonfinite(r.get_string("on_nonfinite", std::string("stop")));
  t.checkpoint_every = r.get_int("checkpoint_every", 0);
  t.allreduce = parse_allreduce(r.get_string("allreduce", std::string("mpi")));
  t.allreduce_overlap = r.get_bool("allreduce_overlap", true);
  t.validate();
  return t;
}

TokenizerConfig read_tokenizer_section(ConfigReader& job, const std::string& source, TokenizerConfig t) {
  const nlohmann::json section = job.get_object("tokenizer");
  ConfigReader r(section, source + ": tokenizer");
  t.kind = parse_tokenizer_kind(r.get_string("kind", tokenizer_kind_name(t.kind)));
  t.model_type = r.get_string("model_type", t.model_type);
  t.vocab_size = r.get_int("vocab_size", t.vocab_size);
  r.finish();
  return t;
}

ModelConfig read_model_section(ConfigReader& job, const std::string& source, std::int64_t vocab_size) {
  nlohmann::json section = job.get_object("model");
  if (!section.contains("vocab_size")) section["vocab_size"] = vocab_size;
  ConfigReader r(section, source + ": model");
  ModelConfig m = read_model_config(r);
  r.finish();
  return m;
}

TrainConfig read_train_section(ConfigReader& job, const std::string& source, EpochBudget* budget) {
  const nlohmann::json section = job.get_object("train");
  ConfigReader r(section, source + ": train");
  if (budget) budget->read(r);
  TrainConfig t = read_train_config(r);
  r.finish();
  return t;
}

nlohmann::json tokenizer_config_json(const TokenizerConfig& t) {
  return {{"kind", tokenizer_kind_name(t.kind)}, {"model_type", t.model_type}, {"vocab_size", t.vocab_size}};
}

nlohmann::json model_config_json(const ModelConfig& m) {
  nlohmann::json j = {{"vocab_size", m.vocab_size},
          {"num_classes", m.num_classes},
          {"d_model", m.layer.d_model},
          {"nhead", m.layer.nhead},
          {"num_layers", m.num_layers},
          {"dim_feedforward", m.layer.dim_feedforward},
          {"dropout", m.layer.dropout},
          {"activation", m.layer.activation == Activation::kGelu ? "gelu" : "relu"},
          {"layer_norm_eps", m.layer.layer_norm_eps},
          {"norm_first", m.layer.norm_first},
          {"final_norm", m.final_norm},
          {"positions", std::string(position_kind_name(m.positions))},
          {"max_len", m.max_len},
          {"relative_clip", m.relative_clip},
          {"relative_values", m.relative_values},
          {"rope_theta", m.rope_theta},
          {"pooling", m.pooling == Pooling::kCls ? "cls" : "mean"},
          {"tie_embeddings", m.tie_embeddings},
          {"init", m.init}};
  write_attention_pattern(m.layer.pattern, j);
  return j;
}

void EpochBudget::read(ConfigReader& r) {
  epochs = r.get_int("epochs", epochs);
  max_steps = r.get_int("max_steps", 0);
}

void EpochBudget::write(nlohmann::json& j) const {
  j["epochs"] = epochs;
  j["max_steps"] = max_steps;
}

std::uint64_t checked_seed(std::int64_t seed) {
  check<ConfigError>(seed >= 0, "seed must be >= 0, got {}", seed);
  return static_cast<std::uint64_t>(seed);
}

int read_threads(ConfigReader& job) {
  const std::int64_t n = job.get_int("threads", 0);
  check_threads(n);
  return static_cast<int>(n);
}

void EpochBudget::validate(const std::string& where) const {
  check<ConfigError>(epochs > 0 && epochs <= kMaxEpochs, "{}: epochs must be in [1, {}], got {}", where, kMaxEpochs,
                     epochs);
  check<ConfigError>(max_steps >= 0 && max_steps <= kMaxSteps, "{}: max_steps must be in [0, {}] (0: no cap), got {}",
                     where, kMaxSteps, max_steps);
}

std::int64_t EpochBudget::steps(std::int64_t examples, std::int64_t batch) const {
  validate("the job");
  check<ConfigError>(examples >= 0 && batch > 0, "{} examples in batches of {}", examples, batch);
  std::int64_t all = 0;
  check<ConfigError>(!__builtin_mul_overflow((examples + batch - 1) / batch, epochs, &all) && all <= kMaxSteps,
                     "{} epochs of {} steps exceed {} steps", epochs, (examples + batch - 1) / batch, kMaxSteps);
  return max_steps > 0 ? std::min(all, max_steps) : all;
}

nlohmann::json train_config_json(const TrainConfig& t) {
  const char* decay = t.schedule.decay == Decay::kCosine        ? "cosine"
                      : t.schedule.decay == Decay::kLinear      ? "linear"
                      : t.schedule.decay == Decay::kInverseSqrt ? "inverse_sqrt"
                                                                : "constant";
  return {{"optimizer", optimizer_name(t.optimizer)},
          {"lr", t.schedule.base_lr},
          {"min_lr", t.schedule.min_lr},
          {"warmup_steps", t.schedule.warmup_steps},
          {"schedule", decay},
          {"betas", {t.adamw.beta1, t.adamw.beta2}},
          {"eps", t.adamw.eps},
          {"weight_decay", t.optimizer == OptimizerKind::kSgd ? t.sgd.weight_decay : t.adamw.weight_decay},
          {"momentum", t.sgd.momentum},
          {"nesterov", t.sgd.nesterov},
          {"clip_grad_norm", t.clip_grad_norm},
          {"grad_accumulation", t.grad_accumulation},
          {"steps", t.steps},
          {"total_steps", t.schedule.total_steps},
          {"batch", t.batch},
          {"seq_len", t.seq_len},
          {"seed", t.seed},
          {"checkpoint_layers", t.checkpoint_layers},
          {"precision", precision_name(t.precision)},
          {"loss_scaling", t.loss_scaling},
          {"on_nonfinite", nonfinite_name(t.on_nonfinite)},
          {"checkpoint_every", t.checkpoint_every},
          {"allreduce", allreduce_name(t.allreduce)},
          {"allreduce_overlap", t.allreduce_overlap}};
}

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& cfg, const ParamStore& store) {
  if (cfg.optimizer == OptimizerKind::kSgd) return std::make_unique<Sgd>(store, cfg.sgd);
  return std::make_unique<AdamW>(store, cfg.adamw);
}

}  // namespace multihead
