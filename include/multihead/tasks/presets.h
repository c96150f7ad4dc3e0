// SPDX-License-Identifier: Apache-2.0
// The jobs `multihead train --preset NAME` runs, which the experiments of
// `multihead experiment` start from too. Each is a job config like any
// other, kept in src/tasks/presets/NAME.json and compiled in.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "multihead/tasks/jobs.h"

namespace multihead {

// SpamAssassin ham against spam, headers stripped (the default job).
TextClassificationJob spam_preset();
// A character-level language model of Moby-Dick.
LanguageModelJob moby_dick_preset();
// A Vision Transformer on Fashion-MNIST.
ImageClassificationJob fashion_preset();

struct Preset {
  const char* name;
  const char* description;  // for --help
  std::string_view config;  // JSON
  Job make() const;
};
// spam, moby-dick, fashion-mnist, reverse, cmudict.
const std::vector<Preset>& presets();
// The preset's job; an unknown name is a ConfigError naming the known ones.
Job preset_job(const std::string& name);

}  // namespace multihead
