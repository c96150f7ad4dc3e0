// SPDX-License-Identifier: Apache-2.0
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
#include "multihead/tasks/answers.h"
#include "multihead/tasks/trained_run.h"

namespace multihead::cli {
namespace {

struct EmbedOpts {
  std::string run, precision;
  InputOptions input;
  bool json = false;
  int threads = 0;
};

// Texts go in chunks (answer_lines), each in batches of similar length
// (TrainedRun::embed), so that memory does not grow with the file.
std::vector<std::string> embed_lines(TrainedRun& run, const EmbedOpts& o, const std::vector<InputItem>& items) {
  return answer_lines<std::vector<std::vector<float>>>(
      items, o.input, o.json, [&](const std::vector<std::string>& texts) { return run.embed(texts); },
      [&](const InputItem& item, const std::vector<float>& v) {
        if (!o.json) return fmt::format("{}", fmt::join(v, " "));
        const nlohmann::json line = {{"line", item.line}, {"input", item.text}, {"embedding", v}};
        return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      });
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
  add_input_options(*sub, o->input, "texts");
  sub->add_flag("--json", o->json, "One JSON object a line: the input, its line number and its embedding");
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_option("--precision", o->precision,
                  fmt::format("fp32, bf16, fp16 or int8 (default: the run's own); {}", kInferencePrecisionCompute));
  return {sub, [o] {
            const std::vector<InputItem> items = read_inputs(o->input, o->run);
            const ContextScope context(command_context(o->threads));
            const auto run = load_for_answers(o->run, o->precision);
            for (const std::string& line : embed_lines(*run, *o, items)) fmt::print("{}\n", line);
          }};
}

}  // namespace multihead::cli
