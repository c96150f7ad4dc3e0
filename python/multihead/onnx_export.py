# SPDX-License-Identifier: Apache-2.0
"""ONNX graphs of the modules of multihead.modules (Run.to_torch(pytorch_layers=False)), made for
ONNX Runtime: needs PyTorch (and its ONNX exporter), and the onnx package for the decoding steps
written op by op (multihead.onnx_decoding).

- classifier (ids, padding) -> logits;
- a language model's decoding step with its KV cache: (ids, past_key_i, past_value_i ...) ->
  (logits, present_key_i, present_value_i ...), each cache (B, kv_heads, length, head_dim);
- an encoder-decoder's encoder (source, padding) -> (memory_key_i, memory_value_i ...), the
  memory's cross-attention keys and values for each decoder layer, and its decoding step (ids,
  padding, memory_*, past_*) -> (logits, present_*).

Every axis but the model's own is dynamic. While torch.onnx.export traces them, multihead.modules'
attention takes the shape ONNX Runtime's transformer optimizer fuses (separate Q, K and V
projections, MatMul / Div / an additive mask / Softmax / MatMul, the attention first in its residual
sum), and RoPE reads its cos and sin from a table by position:

    fuse_classifier("classifier.onnx", "classifier.fused.onnx", num_heads=H, hidden_size=E)

runs ONNX Runtime's optimizer over it (model_type bert), which turns each encoder layer of a
classifier into one Attention and two SkipLayerNormalization nodes (and BiasGelu where the
activation is GELU). No optimizer of ONNX Runtime fuses a traced decoding step, so those are
written op by op around its decoding ops (multihead.onnx_decoding) where they compute the layers.
"""
import inspect
import os

import torch

OPSET = 17


def export(module, args, path, **kwargs):
    """torch.onnx.export with the TorchScript-based exporter (PyTorch 2.9 and later default to the
    dynamo one, whose graphs ONNX Runtime's optimizer does not match), in eval mode, no gradients."""
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    with torch.no_grad():
        torch.onnx.export(module, args, path, opset_version=OPSET, **kwargs)
    return path


def export_classifier(classifier, path, ids, padding):
    """classifier (a SequenceClassifier) as (ids, padding) -> logits, traced on ids (B, L) and
    padding (B, L) bool."""
    axes = {"ids": {0: "batch", 1: "length"}, "padding": {0: "batch", 1: "length"}, "logits": {0: "batch"}}
    return export(classifier, (ids, padding), path, input_names=["ids", "padding"], output_names=["logits"],
                  dynamic_axes=axes)


def _flat(cache):
    return tuple(t for kv in cache for t in kv)


def _pairs(flat, first, count):
    return [(flat[2 * (first + i)], flat[2 * (first + i) + 1]) for i in range(count)]


def _cache_names(layers):
    return [f"{kind}_{i}" for i in range(layers) for kind in ("key", "value")]


class _LanguageModelStep(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm, self.layers = lm, len(lm.encoder.layers)

    def forward(self, ids, *past):
        logits, cache = self.lm.forward_cached(ids, _pairs(past, 0, self.layers))
        return (logits,) + _flat(cache)


def export_language_model_step(lm, path, prompt):
    """lm's decoding step (a LanguageModel) with its KV cache. Where ONNX Runtime's
    GroupQueryAttention computes its layers (onnx_decoding.supports), the graph written op by op
    around it, right for a first prompt, for one new token a row at any batch, and for more after
    a cache at batch 1 (the op's own domain). Otherwise traced on prompt (1, P >= 5): its tokens 3
    and 4 after the first three cached (the general path, a mask), right for every number of new
    and cached tokens."""
    from . import onnx_decoding
    if onnx_decoding.supports(lm):
        return onnx_decoding.export_language_model_step(lm, path)
    with torch.no_grad():
        _, cache = lm.forward_cached(prompt[:1, :3])
    names = _cache_names(len(lm.encoder.layers))
    axes = {"ids": {0: "batch", 1: "new"}, "logits": {0: "batch", 1: "new"}}
    axes.update({f"past_{n}": {0: "batch", 2: "cached"} for n in names})
    axes.update({f"present_{n}": {0: "batch", 2: "length"} for n in names})
    return export(_LanguageModelStep(lm), (prompt[:1, 3:5],) + _flat(cache), path,
                  input_names=["ids"] + [f"past_{n}" for n in names],
                  output_names=["logits"] + [f"present_{n}" for n in names], dynamic_axes=axes)


class _Encode(torch.nn.Module):
    def __init__(self, s2s):
        super().__init__()
        self.s2s = s2s

    def forward(self, source, padding):
        return _flat(self.s2s.encode(source, padding))


class _DecodeStep(torch.nn.Module):
    def __init__(self, s2s):
        super().__init__()
        self.s2s, self.layers = s2s, len(s2s.decoder.layers)

    def forward(self, ids, padding, *kv):
        logits, cache = self.s2s.decode_cached(ids, _pairs(kv, 0, self.layers), padding,
                                               _pairs(kv, self.layers, self.layers))
        return (logits,) + _flat(cache)


def export_encoder_decoder(s2s, encoder_path, step_path, source, padding):
    """s2s (an EncoderDecoder) as its encoder and its decoding step. Each written op by op around
    ONNX Runtime's own ops where they compute its layers (onnx_decoding.supports_encoder: the
    encoder's self-attention a MultiHeadAttention; supports_decoder: the step's a
    GroupQueryAttention, its domain as for a language model), else traced: the encoder on source
    (B, S) ids and padding (B, S) bool, the step on two target tokens after three cached."""
    from . import onnx_decoding
    names = _cache_names(len(s2s.decoder.layers))
    if onnx_decoding.supports_encoder(s2s):
        onnx_decoding.export_encoder(s2s, encoder_path)
    else:
        enc_axes = {"source": {0: "batch", 1: "letters"}, "padding": {0: "batch", 1: "letters"}}
        enc_axes.update({f"memory_{n}": {0: "batch", 2: "letters"} for n in names})
        export(_Encode(s2s), (source, padding), encoder_path, input_names=["source", "padding"],
               output_names=[f"memory_{n}" for n in names], dynamic_axes=enc_axes)
    if onnx_decoding.supports_decoder(s2s):
        return encoder_path, onnx_decoding.export_decoder_step(s2s, step_path)
    with torch.no_grad():
        memory = s2s.encode(source, padding)
        _, cache = s2s.decode_cached(torch.tensor([[1, 5, 6]] * source.shape[0]), memory, padding)
    axes = {"ids": {0: "batch", 1: "new"}, "padding": {0: "batch", 1: "letters"}, "logits": {0: "batch", 1: "new"}}
    axes.update({f"memory_{n}": {0: "batch", 2: "letters"} for n in names})
    axes.update({f"past_{n}": {0: "batch", 2: "cached"} for n in names})
    axes.update({f"present_{n}": {0: "batch", 2: "length"} for n in names})
    args = (torch.tensor([[7, 8]] * source.shape[0]), padding) + _flat(memory) + _flat(cache)
    export(_DecodeStep(s2s), args, step_path,
           input_names=["ids", "padding"] + [f"memory_{n}" for n in names] + [f"past_{n}" for n in names],
           output_names=["logits"] + [f"present_{n}" for n in names], dynamic_axes=axes)
    return encoder_path, step_path


def fuse_classifier(path, fused_path, num_heads, hidden_size):
    """ONNX Runtime's transformer optimizer (onnxruntime.transformers, imported here) over a
    classifier's graph: model_type bert, with its raw 2-D mask so that any padding stays right
    (its default, a length a row, assumes padding on the right). Writes fused_path; returns the
    counts of the operators it fused, those it made none of left out."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model
    options = FusionOptions("bert")
    options.use_raw_attention_mask(True)
    fused = optimize_model(str(path), model_type="bert", num_heads=num_heads, hidden_size=hidden_size,
                           optimization_options=options)
    fused.save_model_to_file(str(fused_path))
    return {op: n for op, n in fused.get_fused_operator_statistics().items() if n}


# The kind of graphs a run exports (Run.export_onnx), by its model family (the registry of kinds,
# multihead._multihead.kinds()); a Vision Transformer's run exports none.
FAMILY_GRAPHS = {"sequence_classifier": "classifier", "language_model": "lm", "encoder_decoder": "s2s"}


def graph_kind(task):
    """The kind of graphs ("classifier", "lm", "s2s") a run of task exports, or None."""
    from . import _multihead
    family = next((k["model"] for k in _multihead.kinds() if k["task"] == task), None)
    return FAMILY_GRAPHS.get(family)


def graph_files(kind):
    """The file names export_run writes for a model kind ("classifier", "lm", "s2s")."""
    return {"classifier": ["classifier.onnx"], "lm": ["lm_step.onnx"],
            "s2s": ["s2s_encoder.onnx", "s2s_step.onnx"]}[kind]


def export_module(kind, module, directory, ids, padding=None):
    """module's graphs into directory (graph_files(kind)), traced on ids (B, L) (and padding for a
    classifier or an encoder-decoder's source); returns their paths."""
    paths = [os.path.join(directory, f) for f in graph_files(kind)]
    if kind == "classifier":
        export_classifier(module, paths[0], ids, padding)
    elif kind == "lm":
        export_language_model_step(module, paths[0], ids)
    else:
        export_encoder_decoder(module, paths[0], paths[1], ids, padding)
    return paths


def main(argv=None):
    """python -m multihead.onnx_export --run DIR --out DIR [--fuse]: a run's ONNX graphs
    (Run.export_onnx) from the command line; --fuse also writes a classifier's graph through ONNX
    Runtime's transformer optimizer (classifier.fused.onnx). Bad input: one line on stderr and exit
    code 2."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog="python -m multihead.onnx_export",
                                 description="Write a run's model as ONNX graphs (Run.export_onnx).")
    ap.add_argument("--run", required=True, help="the run directory (or Hugging Face checkpoint)")
    ap.add_argument("--out", required=True, help="the directory to write the graphs into (created if missing)")
    ap.add_argument("--fuse", action="store_true",
                    help="a classifier's graph also through ONNX Runtime's transformer optimizer")
    a = ap.parse_args(argv)
    import multihead
    try:
        run = multihead.load_run(a.run)
        if a.fuse and graph_kind(run.task) != "classifier":
            raise ValueError(f"--fuse takes a classifier's run; {a.run} is a {run.task} run")
        if a.fuse:  # before anything is written
            import onnxruntime.transformers.optimizer  # noqa: F401
        paths = run.export_onnx(a.out)
        if a.fuse:
            attn = run.to_torch(pytorch_layers=False).encoder.layers[0].self_attn
            fused = os.path.join(a.out, "classifier.fused.onnx")
            fuse_classifier(paths[0], fused, attn.num_heads, attn.embed_dim)
            paths.append(fused)
    except (ValueError, OSError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
