// multihead embed: sentence embeddings of a text encoder, one text a line.
#include <cstdio>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "multihead/core/precision.h"
#include "multihead/core/error.h"
#include "multihead/core/threading.h"
#include "multihead/tasks/answers.h"
#include "multihead/tasks/trained_run.h"

namespace multihead::cli {
namespace {

struct EmbedOpts {
  std::string run, input = "-", precision;
  bool json = false;
  int threads = 0;
};

// Every line is made before any is printed: a bad text (named by its line)
// leaves no partial output. Texts go in chunks, each in batches of similar
// length (TrainedRun::embed), so that memory does not grow with the file.
std::vector<std::string> embed_lines(TrainedRun& run, const EmbedOpts& o,
                                     const std::vector<std::pair<std::int64_t, std::string>>& items) {
  std::vector<std::string> out;
  constexpr std::size_t kChunk = 2048;
  for (std::size_t i0 = 0; i0 < items.size(); i0 += kChunk) {
    const std::size_t i1 = std::min(items.size(), i0 + kChunk);
    std::vector<std::string> texts;
    for (std::size_t i = i0; i < i1; ++i) texts.push_back(items[i].second);
    std::vector<std::vector<float>> vectors;
    try {
      vectors = run.embed(texts);
    } catch (const InputError& e) {
      throw ConfigError(
          fmt::format("{} line {}: {}", o.input == "-" ? "input" : o.input, items[i0 + e.index].first, e.what()));
    }
    for (std::size_t i = i0; i < i1; ++i) {
      const std::vector<float>& v = vectors[i - i0];
      if (!o.json) {
        out.push_back(fmt::format("{}", fmt::join(v, " ")));
        continue;
      }
      const nlohmann::json line = {{"line", items[i].first}, {"input", items[i].second}, {"embedding", v}};
      out.push_back(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
  return out;
}

}  // namespace

Command add_embed(CLI::App& app) {
  auto o = std::make_shared<EmbedOpts>();
  CLI::App* sub = app.add_subcommand(
      "embed",
      "Sentence embeddings of a text encoder (a Hugging Face checkpoint or a classifier's run), one text a line: "
      "pooled and normalised as the checkpoint's sentence-transformers modules say (else mean over its tokens)");
  sub->add_option("--run", o->run, "A text classifier's run directory, or a Hugging Face checkpoint directory")
      ->required()
      ->check(kNotEmpty);
  sub->add_option("--input", o->input, "File of texts, one a line (default: standard input; empty lines skipped)")
      ->check(kNotEmpty);
  sub->add_flag("--json", o->json, "One JSON object a line: the input, its line number and its embedding");
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_option("--precision", o->precision,
                  fmt::format("fp32, bf16, fp16 or int8 (default: the run's own); {}", kInferencePrecisionCompute));
  return {sub, [o] {
            const auto run = load_for_answers(o->run, o->precision, o->threads);
            for (const std::string& line : embed_lines(*run, *o, read_items(o->input))) fmt::print("{}\n", line);
          }};
}

}  // namespace multihead::cli
