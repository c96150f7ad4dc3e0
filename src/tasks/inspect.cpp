#include "multihead/tasks/inspect.h"

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
#include "multihead/tasks/jobs.h"

namespace multihead {

namespace fs = std::filesystem;

std::vector<std::string> attention_heatmaps(TransformerEncoder& encoder, std::int64_t first_layer,
                                            const std::vector<std::string>& tokens, const std::string& dir,
                                            const std::string& prefix, const std::string& title_suffix) {
  std::vector<std::string> names;
  for (std::int64_t l = first_layer; l < encoder.num_layers(); ++l) {
    const Tensor& w = encoder.layer(l).attention_weights();  // (B, H, T, T)
    const std::int64_t T = w.dim(2);
    for (std::int64_t h = 0; h < w.dim(1); ++h) {
      const std::vector<float> m(w.f32() + h * T * T, w.f32() + (h + 1) * T * T);
      names.push_back(fmt::format("{}{}_head{}.png", prefix, l, h));
      heatmap_png((fs::path(dir) / names.back()).string(), fmt::format("layer {}, head {}{}", l, h, title_suffix), m,
                  T, T, tokens, tokens);
    }
  }
  return names;
}

InspectResult inspect_run(const std::string& run_dir, const std::string& text, const std::string& out_dir,
                          std::int64_t max_tokens, int threads) {
  check<ConfigError>(max_tokens > 1, "max tokens must be at least 2, got {}", max_tokens);
  check_utf8(text, "the text");
  const RunConfig cfg = read_run_config(run_dir);
  const Job job = job_from_json(cfg.json, cfg.path);
  const auto* lm_job = std::get_if<LanguageModelJob>(&job);
  const auto* classifier_job = std::get_if<TextClassificationJob>(&job);
  check<ConfigError>(lm_job || classifier_job,
                     "{}: inspect reads text classification and language model runs, this run's task is '{}'",
                     cfg.path, job_task(job));
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
  auto draw = [&](TransformerEncoder& encoder) {
    for (const std::string& name : attention_heatmaps(encoder, 0, r.tokens, out_dir, "layer"))
      r.files.push_back((fs::path(out_dir) / name).string());
  };
  ParamStore store;
  if (lm_job) {
    LanguageModel model(store, lm_job->model);
    store.finalize();
    load_state_dict(store, weights, ckpt, true);
    ids.resize(std::min<std::size_t>(ids.size(), static_cast<std::size_t>(max_tokens)));
    for (auto id : ids) r.tokens.push_back(tok->piece(id));
    model.encoder().set_capture_weights(true);
    model.forward(Tensor::from_i64({1, static_cast<std::int64_t>(ids.size())}, ids), ForwardContext{});
    draw(model.encoder());
    return r;
  }
  SequenceClassifier model(store, classifier_job->model);
  store.finalize();
  load_state_dict(store, weights, ckpt, true);
  TokenBatch tb = make_token_batch({&ids}, {0}, std::min(max_tokens, classifier_job->max_len), true);
  for (std::int64_t l = 0; l < tb.ids.dim(1); ++l) r.tokens.push_back(tok->piece(tb.ids.data<std::int64_t>()[l]));
  model.encoder().set_capture_weights(true);
  Tensor logits = model.forward(tb.ids, &tb.padding, ForwardContext{});
  const std::int64_t C = logits.dim(1);
  r.prediction = std::to_string(std::max_element(logits.f32(), logits.f32() + C) - logits.f32());
  draw(model.encoder());
  return r;
}

}  // namespace multihead
