// SPDX-License-Identifier: Apache-2.0
// multihead's training layer (multihead::train, over multihead::core):
// datasets, tokenizers and batching, the training loop and its optimizers,
// schedules and loss scaling, run directories and checkpoints, data-parallel
// training over MPI. Links SentencePiece and Open MPI besides the core's.
#pragma once

#include "multihead/multihead.h"

#include "multihead/data/batching.h"
#include "multihead/data/hf_tokenizer.h"
#include "multihead/data/text_datasets.h"
#include "multihead/data/tokenizer.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/distributed.h"
#include "multihead/train/fit.h"
#include "multihead/train/hf_checkpoint.h"
#include "multihead/train/optimizer.h"
#include "multihead/train/resume.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/schedule.h"
#include "multihead/train/train_config.h"
#include "multihead/train/trainer.h"
