// SPDX-License-Identifier: Apache-2.0
// multihead inspect: attention heatmaps of a trained model for one input, as
// PNGs or as one attention explorer page (--html).
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "multihead/core/precision.h"
#include "multihead/io/output_path.h"
#include "multihead/tasks/inspect.h"

namespace multihead::cli {

Command add_inspect(CLI::App& app) {
  struct Opts {
    std::string run, text, out, html, precision;
    std::int64_t max_tokens = 48;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "inspect", "Per-layer, per-head attention of a trained model: heatmaps (PNG), or an explorer page (--html)");
  sub->add_option("--run", o->run, "Run directory of multihead train")->required();
  sub->add_option("--text", o->text, "Input text")->required();
  sub->add_option("--out", o->out, "Folder for the PNGs (default <run>/inspect; with --html, only when given)")
      ->check(kNotEmpty);
  sub->add_option("--html", o->html,
                  "Write one self-contained HTML page to explore every layer and head (opens from disk, no network)");
  sub->add_option("--max-tokens", o->max_tokens, "Tokens to show")->capture_default_str();
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_option("--precision", o->precision,
                  fmt::format("fp32, bf16, fp16 or int8 (default: the run's own); {}", kInferencePrecisionCompute));
  return {sub, [o] {
            std::vector<std::string> wrote;
            InspectResult r;
            const ContextScope context(command_context(o->threads));
            warn_about_run(o->run);
            std::optional<Precision> precision;
            if (!o->precision.empty()) precision = parse_precision(o->precision);
            if (!o->html.empty()) {
              check_output_apart(o->html, "--html", {{"the run (--run)", o->run}}, OutputPlacement::kMayLieInside);
              check_not_a_run_file(o->html, "--html", o->run);
              r = inspect_run_html(o->run, o->text, o->html, o->max_tokens, precision);
              wrote.push_back(fmt::format("wrote the attention explorer to {}", o->html));
            }
            if (o->html.empty() || !o->out.empty()) {
              const std::string out = o->out.empty() ? o->run + "/inspect" : o->out;
              r = inspect_run(o->run, o->text, out, o->max_tokens, precision);
              wrote.push_back(fmt::format("wrote {} heatmaps to {}", r.files.size(), out));
            }
            fmt::print("tokens: {}\n", fmt::join(r.tokens, " | "));
            if (!r.prediction.empty()) fmt::print("predicted: {}\n", r.prediction);
            for (const std::string& line : wrote) fmt::print("{}\n", line);
          }};
}

}  // namespace multihead::cli
