# SPDX-License-Identifier: Apache-2.0
"""A run of `multihead train` as a PyTorch module, checked against multihead, and exported to ONNX.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/export.py runs/spam runs/spam.onnx
"""
import os
import sys

import onnx
import torch

import multihead

run_dir, onnx_path = sys.argv[1], sys.argv[2]
run = multihead.load_run(run_dir)
model = run.to_torch()                      # a torch.nn.Module: the run's weights, PyTorch's names
inputs, logits = run.sample(4)              # a batch of the run's own test data, and multihead's logits
with torch.no_grad():
    print("largest difference from multihead:", (model(**inputs) - logits).abs().max().item())

ids = [run.tokenizer.cls_id] + run.tokenizer.encode("Win a free cruise, reply now")  # [CLS] first, as the run reads
print("PyTorch says:", torch.softmax(model(torch.tensor([ids])), -1)[0].tolist(), "for", run.labels)

torch.save(model.state_dict(), os.path.splitext(onnx_path)[0] + ".pt")  # a plain PyTorch checkpoint
torch.onnx.export(model, (inputs["ids"], inputs["padding"]), onnx_path, input_names=["ids", "padding"],
                  output_names=["logits"], opset_version=14,
                  dynamic_axes={"ids": {0: "batch", 1: "tokens"}, "padding": {0: "batch", 1: "tokens"},
                                "logits": {0: "batch"}})
onnx.checker.check_model(onnx.load(onnx_path))
print("wrote", onnx_path)
