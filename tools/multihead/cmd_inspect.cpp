// multihead inspect: attention heatmaps of a trained model for one input.
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "multihead/tasks/inspect.h"

namespace multihead::cli {

Command add_inspect(CLI::App& app) {
  struct Opts {
    std::string run, text, out;
    std::int64_t max_tokens = 48;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("inspect", "Per-layer, per-head attention heatmaps (PNG) of a trained model");
  sub->add_option("--run", o->run, "Run directory of multihead train")->required();
  sub->add_option("--text", o->text, "Input text")->required();
  sub->add_option("--out", o->out, "Folder for the PNGs (default <run>/inspect)");
  sub->add_option("--max-tokens", o->max_tokens, "Tokens to show")->capture_default_str();
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  return {sub, [o] {
            const std::string out = o->out.empty() ? o->run + "/inspect" : o->out;
            InspectResult r = inspect_run(o->run, o->text, out, o->max_tokens, o->threads);
            fmt::print("tokens: {}\n", fmt::join(r.tokens, " | "));
            if (!r.prediction.empty()) fmt::print("predicted class: {}\n", r.prediction);
            fmt::print("wrote {} heatmaps to {}\n", r.files.size(), out);
          }};
}

}  // namespace multihead::cli
