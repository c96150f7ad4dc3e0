// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/inspect.h"

#include <filesystem>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/report/plots.h"
#include "multihead/tasks/attention_explorer.h"
#include "multihead/tasks/trained_run.h"

namespace multihead {

namespace fs = std::filesystem;

AttentionMaps captured_attention(TransformerEncoder& encoder, std::int64_t first_layer,
                                 std::vector<std::string> tokens) {
  AttentionMaps maps;
  maps.tokens = std::move(tokens);
  maps.first_layer = first_layer;
  maps.layers = encoder.num_layers() - first_layer;
  for (std::int64_t l = first_layer; l < encoder.num_layers(); ++l) {
    const Tensor& w = encoder.layer(l).attention_weights();  // (B, H, T, T)
    check(w.defined() && w.ndim() == 4, "layer {} captured no attention weights", l);
    if (l == first_layer) maps.heads = w.dim(1), maps.T = w.dim(2), maps.S = w.dim(3);
    const std::int64_t n = maps.heads * maps.T * maps.S;
    maps.weights.insert(maps.weights.end(), w.f32(), w.f32() + n);
  }
  check<ShapeError>(static_cast<std::int64_t>(maps.tokens.size()) == maps.T && maps.T == maps.S,
                    "{} token labels for {} positions", maps.tokens.size(), maps.T);
  maps.keys = maps.tokens;
  return maps;
}

std::vector<std::string> write_heatmaps(const AttentionMaps& maps, const std::string& dir, const std::string& prefix,
                                        const std::string& title_suffix, std::int64_t max_maps) {
  // Past max_maps, the first heads of layers evenly spaced from the first to the last.
  std::int64_t heads = maps.heads;
  std::vector<std::int64_t> layers;
  if (max_maps <= 0 || maps.layers * maps.heads <= max_maps) {
    for (std::int64_t l = maps.first_layer; l < maps.first_layer + maps.layers; ++l) layers.push_back(l);
  } else {
    heads = std::min(heads, max_maps);
    const std::int64_t k = std::min(maps.layers, std::max<std::int64_t>(1, max_maps / heads));
    for (std::int64_t i = 0; i < k; ++i)
      layers.push_back(maps.first_layer + (k == 1 ? 0 : (i * (maps.layers - 1) + (k - 1) / 2) / (k - 1)));
  }
  // Every target checked, then every map drawn, before the first file is
  // written, so that a refusal (a folder or a link where a PNG would go)
  // leaves the folder as it was.
  std::vector<std::string> names, pngs;
  for (const std::int64_t l : layers)
    for (std::int64_t h = 0; h < heads; ++h) {
      names.push_back(fmt::format("{}{}_head{}.png", prefix, l, h));
      check_replaceable((fs::path(dir) / names.back()).string());
    }
  for (const std::int64_t l : layers)
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* m = maps.map(l, h);
      pngs.push_back(heatmap_png_bytes(fmt::format("layer {}, head {}{}", l, h, title_suffix),
                                       std::vector<float>(m, m + maps.T * maps.S), maps.T, maps.S, maps.tokens,
                                       maps.keys));
    }
  for (std::size_t i = 0; i < names.size(); ++i) write_file_atomic((fs::path(dir) / names[i]).string(), pngs[i]);
  return names;
}

InspectResult inspect_run(const std::string& run_dir, const std::string& text, const std::string& out_dir,
                          std::int64_t max_tokens, std::optional<Precision> precision) {
  const std::unique_ptr<TrainedRun> run = TrainedRun::load(run_dir, precision);
  const AttentionMaps maps = run->attention(text, max_tokens);
  std::error_code ec;
  const bool existed = fs::exists(fs::symlink_status(out_dir));
  fs::create_directories(out_dir, ec);
  check<IoError>(!ec, "cannot create '{}': {}", out_dir, ec.message());
  InspectResult r;
  r.tokens = maps.tokens;
  r.prediction = maps.prediction;
  try {
    for (const std::string& name : write_heatmaps(maps, out_dir, "layer"))
      r.files.push_back((fs::path(out_dir) / name).string());
  } catch (...) {
    if (!existed) fs::remove_all(out_dir, ec);  // a folder this call made goes with what it held
    throw;
  }
  return r;
}

InspectResult inspect_run_html(const std::string& run_dir, const std::string& text, const std::string& html_path,
                               std::int64_t max_tokens, std::optional<Precision> precision) {
  const std::unique_ptr<TrainedRun> run = TrainedRun::load(run_dir, precision);
  std::vector<AttentionMaps> views = run->attention_views(text, max_tokens);
  InspectResult r;
  r.tokens = views.front().tokens;
  r.prediction = views.front().prediction;
  std::string subtitle = fmt::format("{} tokens of \"{}\"", r.tokens.size(), text);
  if (!r.prediction.empty()) subtitle += fmt::format(", predicted: {}", r.prediction);
  subtitle += fmt::format(" (run {}, {})", run_dir, run->task());
  write_attention_explorer(html_path, {"Attention explorer", subtitle, std::move(views)});
  r.files = {html_path};
  return r;
}

}  // namespace multihead
