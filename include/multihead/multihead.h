// SPDX-License-Identifier: Apache-2.0
// multihead's core layer (multihead::core): tensors, the attention and
// layer kernels, the modules (attention, encoder and decoder layers, the
// models) over a ParamStore, and weights in and out as PyTorch's state_dict
// in safetensors files. Links oneDNN, OpenBLAS, Highway and OpenMP only.
#pragma once

#include "multihead/core/context.h"
#include "multihead/core/error.h"
#include "multihead/core/rng.h"
#include "multihead/core/tensor.h"
#include "multihead/core/threading.h"
#include "multihead/io/safetensors.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_ref.h"
#include "multihead/kernels/machine.h"
#include "multihead/nn/apply_module.h"
#include "multihead/nn/encoder.h"
#include "multihead/nn/encoder_decoder.h"
#include "multihead/nn/gradient_probe.h"
#include "multihead/nn/models.h"
#include "multihead/nn/multi_head_attention.h"
#include "multihead/nn/param_store.h"
#include "multihead/nn/state_dict.h"
#include "multihead/nn/transformer_layers.h"
#include "multihead/version.h"
