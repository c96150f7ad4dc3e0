// SPDX-License-Identifier: Apache-2.0
// multihead export: a run in another library's layout.
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "multihead/tasks/export.h"

namespace multihead::cli {
namespace {

struct ExportOpts {
  std::string run, format = "hf", out;
};

}  // namespace

Command add_export(CLI::App& app) {
  auto o = std::make_shared<ExportOpts>();
  CLI::App* sub = app.add_subcommand(
      "export",
      "Write a run in another library's layout: --format hf, a run fine-tuned from a Hugging Face checkpoint (a "
      "BERT, RoBERTa, DistilBERT or ELECTRA classifier, a GPT-2 language model) as transformers' "
      "...ForSequenceClassification or GPT2LMHeadModel, which from_pretrained loads");
  sub->add_option("--run", o->run, "The run directory (or Hugging Face checkpoint) to export")
      ->required()
      ->check(kNotEmpty);
  sub->add_option("--format", o->format, "hf: Hugging Face transformers' layout");
  sub->add_option("--out", o->out, "A new directory to write (an empty one is used)")->required()->check(kNotEmpty);
  return {sub, [o] { fmt::print("{}\n", export_run(o->run, o->format, o->out)); }};
}

}  // namespace multihead::cli
