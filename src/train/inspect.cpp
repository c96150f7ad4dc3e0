#include "multihead/train/inspect.h"

#include <algorithm>
#include <filesystem>

#include "multihead/core/threading.h"
#include "multihead/data/batching.h"
#include "multihead/data/text_datasets.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/io/plots.h"
#include "multihead/io/run_dir.h"
#include "multihead/io/state_dict.h"
#include "multihead/train/language_modeling.h"
#include "multihead/train/text_classification.h"

namespace multihead {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> heatmaps(TransformerEncoder& enc, const std::vector<std::string>& labels,
                                  const std::string& out_dir) {
  std::vector<std::string> files;
  for (std::int64_t l = 0; l < enc.num_layers(); ++l) {
    const Tensor& w = enc.layer(l).attention_weights();  // (1, H, T, T)
    const std::int64_t T = w.dim(2);
    for (std::int64_t h = 0; h < w.dim(1); ++h) {
      std::vector<float> m(w.f32() + h * T * T, w.f32() + (h + 1) * T * T);
      const std::string path = (fs::path(out_dir) / fmt::format("layer{}_head{}.png", l, h)).string();
      heatmap_png(path, fmt::format("layer {}, head {}", l, h), m, T, T, labels, labels);
      files.push_back(path);
    }
  }
  return files;
}

}  // namespace

InspectResult inspect_run(const std::string& run_dir, const std::string& text, const std::string& out_dir,
                          std::int64_t max_tokens, int threads) {
  check<ConfigError>(max_tokens > 1, "max tokens must be at least 2, got {}", max_tokens);
  check_utf8(text, "the text");
  const RunConfig cfg = read_run_config(run_dir);
  // A text classifier's config may leave its task out (the default).
  const std::string task = cfg.json.is_object() ? cfg.json.value("task", "text_classification") : "";
  check<ConfigError>(task == "text_classification" || task == "language_modeling",
                     "{}: inspect reads text classification and language model runs, this run's task is '{}'",
                     cfg.path, task);
  set_num_threads(threads);
  std::unique_ptr<Tokenizer> tok = Tokenizer::load((fs::path(run_dir) / "tokenizer").string());
  const std::string ckpt = last_checkpoint_path(run_dir);
  const TensorMap weights = SafetensorsFile::read(ckpt).all_tensors();
  std::vector<std::int64_t> ids = tok->encode(text);
  check<ConfigError>(!ids.empty(), "the input text has no tokens");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  check<IoError>(!ec, "cannot create '{}': {}", out_dir, ec.message());

  InspectResult r;
  const bool lm = task == "language_modeling";
  ParamStore store;
  if (lm) {
    LanguageModelJob job = language_model_job_from_json(cfg.json, cfg.path);
    LanguageModel model(store, job.model);
    store.finalize();
    load_state_dict(store, weights, ckpt, true);
    ids.resize(std::min<std::size_t>(ids.size(), static_cast<std::size_t>(max_tokens)));
    for (auto id : ids) r.tokens.push_back(tok->piece(id));
    model.encoder().set_capture_weights(true);
    model.forward(Tensor::from_i64({1, static_cast<std::int64_t>(ids.size())}, ids), ForwardContext{});
    r.files = heatmaps(model.encoder(), r.tokens, out_dir);
    return r;
  }
  TextClassificationJob job = text_classification_job_from_json(cfg.json, cfg.path);
  SequenceClassifier model(store, job.model);
  store.finalize();
  load_state_dict(store, weights, ckpt, true);
  TokenBatch tb = make_token_batch({&ids}, {0}, std::min(max_tokens, job.max_len), true);
  for (std::int64_t l = 0; l < tb.ids.dim(1); ++l) r.tokens.push_back(tok->piece(tb.ids.data<std::int64_t>()[l]));
  model.encoder().set_capture_weights(true);
  Tensor logits = model.forward(tb.ids, &tb.padding, ForwardContext{});
  const std::int64_t C = logits.dim(1);
  r.prediction = std::to_string(std::max_element(logits.f32(), logits.f32() + C) - logits.f32());
  r.files = heatmaps(model.encoder(), r.tokens, out_dir);
  return r;
}

}  // namespace multihead
