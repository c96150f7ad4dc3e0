// SPDX-License-Identifier: Apache-2.0
// A Hugging Face checkpoint directory read as a run: transformers'
// config.json, the weights in model.safetensors (or pytorch_model.bin, read
// without running its pickle: train/torch_pickle.h), and the tokenizer files
// beside them (data/hf_tokenizer.h). Every command that takes a run
// directory takes one: the job it is read as comes from config.json, its
// weights are renamed into multihead's parameters.
//
// Read: model_type "bert" (BERT, MiniLM), "roberta", "distilbert" and
// "electra" (the discriminator, its embeddings as wide as its layers), each
// as the encoder alone (BertModel, ...) or with its classification head
// (...ForSequenceClassification, labels from id2label). Each layer is
// torch.nn.TransformerEncoderLayer's post-LN layer with the config's
// activation and LayerNorm eps; the input adds learned positions (from
// RoBERTa's offset) and token type 0 and normalises; BERT's pooler (dense +
// tanh over [CLS]), RoBERTa's and ELECTRA's head dense layer or DistilBERT's
// pre-classifier is the classifier's "pre_classifier". "gpt2" is read as a
// language model (GPT2LMHeadModel): pre-LN layers, learned positions, a final
// norm, Conv1D weights transposed. Anything else is an IoError naming the key.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/data/tokenizer.h"
#include "multihead/io/safetensors.h"

namespace multihead {

// A directory whose config.json is transformers' (it names a "model_type").
bool is_hf_checkpoint(const std::string& dir);

struct HfCheckpoint {
  std::string dir, config_path, weights_path;
  std::string model_type, architecture;  // "bert", "BertForSequenceClassification"
  nlohmann::json config;                 // transformers' config.json
  nlohmann::json job;                    // the multihead job it is read as (config.json of a run)
  bool has_head = false;                 // a classification head: classifier.* is in the weights
  std::vector<std::string> labels;       // id2label in id order (LABEL_0, LABEL_1 where it has none)
};

// Reads and checks config.json (not the weights). IoError naming the file and
// key for anything not read here.
HfCheckpoint read_hf_checkpoint(const std::string& dir);

// The checkpoint's weights under multihead's names, in F32, each checked
// against the shape config.json implies (IoError naming the tensor). The
// heads of pre-training (BERT's "cls.*") are left out, as transformers leaves
// them out of the models read here.
TensorMap hf_model_tensors(const HfCheckpoint& c);

// A run written into the new directory `dir` in transformers' layout:
// config.json, model.safetensors, tokenizer.json and tokenizer_config.json.
// A text classifier of BERT's, RoBERTa's, DistilBERT's or ELECTRA's shape
// (as such a checkpoint is read: post-LN, learned positions, the embeddings'
// norm, a head over [CLS]; its tokenizer) is written as that architecture's
// ...ForSequenceClassification (labels as id2label); a language model of
// GPT-2's shape (pre-LN, learned positions, a final norm; byte-level BPE) as
// GPT2LMHeadModel. `job` is the run's config.json. A model of another shape
// is a ConfigError naming what differs. Written beside `dir` first and
// renamed into place: a failure leaves nothing. Returns the architecture
// written ("BertForSequenceClassification").
std::string write_hf_checkpoint(const std::string& dir, const nlohmann::json& job, const TensorMap& weights,
                                const std::vector<std::string>& labels, const Tokenizer& tokenizer);

// The parameters a checkpoint without a classification head leaves at
// their initialisation: a regex over names.
inline constexpr const char* kHfHeadParameters = "^(classifier|pre_classifier)\\.";

}  // namespace multihead
