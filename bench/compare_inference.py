#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Side-by-side inference benchmark: multihead against the peers a deployer picks.

Three trained runs, each carried out of multihead by Run.to_torch() and exported by torch.onnx.export:
- a text classifier (default runs/spam: `multihead train --preset spam`), on its own test split;
- a language model (default runs/moby-dick: `multihead train --preset moby-dick`), greedy decoding;
- an encoder-decoder (default runs/cmudict: `multihead train --preset cmudict`), greedy decoding of
  words of its test split into phonemes.

    scripts/setup.sh                               # .venv: PyTorch 2.13 and ONNX Runtime (pip)
    multihead train --preset spam && multihead train --preset moby-dick && multihead train --preset cmudict
    /usr/bin/python3 bench/compare_inference.py --threads 2

The programs, each a fresh process per round, alternating, --rounds times:
- multihead, the library call (Python's multihead.load_run: predict(texts), generate(prompts),
  pronounce(words, beam=1)), fp32 and bf16 activations, and int8 products; and `multihead predict --input FILE` over
  the test texts and over the words (one a line); and `multihead serve` of the classifier and the
  encoder-decoder, one HTTP client sending the library cells' inputs (a batch of 32 a request);
- PyTorch (`--torch`: 2.13's official CPU wheel in the project's .venv by default; 2.6, Debian 13's
  in scripts/torch2-root.sh's root, as history), the to_torch() modules under
  torch.inference_mode(), eager and under torch.compile (default mode, with Inductor's freezing,
  which folds the weights into the graphs as its inference users set it; the first pass, which
  compiles, timed apart), fp32, bf16 with the weights cast once (`.to(torch.bfloat16)`) and under
  bf16 autocast (--no-bf16 leaves every bf16 program out, for a CPU without bf16 units, where no
  deployer would pick it), and int8 by torch.ao.quantization.quantize_dynamic (its Linear layers);
- ONNX Runtime (beside that PyTorch: PyPI's onnxruntime in .venv, or Debian 13's
  python3-onnxruntime in the 2.6 root), the graphs of Run.export_onnx (multihead.onnx_export,
  through the peer's torch.onnx.export) with every graph optimisation, intra-op threads =
  --threads, fp32 (its CPU provider has no bf16 kernels for these graphs), and int8 by
  onnxruntime.quantization.quantize_dynamic. The classifier goes through ONNX Runtime's transformer
  optimizer first (model_type bert: one Attention and two SkipLayerNormalization nodes a layer),
  as a deployer runs it; the language model is exported as its decoding step with its KV cache as
  inputs and outputs, the encoder-decoder as its encoder (the memory's cross-attention keys and
  values out) and its decoding step (those and the self-attention cache in, the cache out), each
  decoding step written around ONNX Runtime's GroupQueryAttention and MultiHeadAttention
  (multihead.onnx_decoding), the ops of its own decoding path. The graphs' node counts are
  printed, as exported and after ONNX Runtime's optimisations.
- --max-autotune adds torch.compile in max-autotune mode (fp32), --only runs some programs.

Cells: batch-1 latency of a short (about 20 tokens) and a long input (the model's whole window:
the classifier reads at most max_len tokens, the language model was trained on seq_len); the
classifier's throughput over its test set in batches of 32 sorted by length (real lengths, a
padding mask); generation tokens per second with a KV cache, greedy, at batch 1 and 8; the
encoder-decoder's batch-1 latency for a short and the longest word (the whole greedy decoding, to
the end token) and its throughput over WORDS test words in batches of 32 sorted by length (a
batch decodes until its every word has ended). multihead's library calls take texts (tokenisation
included); the peers take token ids. Before any timing, each program's outputs are checked
against multihead fp32's: class probabilities within 1e-4, the same greedy tokens and the same
pronunciations (bf16: the share that agree is printed).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from torch_peer import add_torch_argument, peers, print_header

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GEN_PROMPT, GEN_TOKENS, GEN_BATCH, SHORT, WORDS, SHORT_WORD = 20, 100, 8, 20, 1024, 6


def timed(f, repeats, min_s=0.0):
    """Median seconds of f() over `repeats` calls (after one untimed call), at least min_s of calls."""
    f()
    times, t_all = [], time.perf_counter()
    while len(times) < repeats or time.perf_counter() - t_all < min_s:
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def check(name, got_probs, got_gen, got_said, spec, exact):
    """The outputs of one program against multihead fp32's (class probabilities, greedy
    continuations, pronunciations): fails for an fp32 program that differs."""
    import numpy as np
    want = np.load(os.path.join(spec["dir"], "reference.npz"))
    diff = float(np.abs(got_probs - want["probs"]).max())
    agree = float((got_probs.argmax(1) == want["probs"].argmax(1)).mean())
    gen_equal = float(np.mean([list(a) == list(b) for a, b in zip(got_gen, want["generated"])]))
    said_equal = float(np.mean([a == b for a, b in zip(got_said, want["pronounced"])]))
    if exact and (diff > 1e-4 or gen_equal < 1.0 or said_equal < 1.0):
        sys.exit(f"{name}: outputs differ from multihead's: class probabilities by up to {diff:.2e}, "
                 f"{gen_equal:.0%} of greedy continuations and {said_equal:.2%} of pronunciations equal")
    return {"max_prob_diff": diff, "labels_agree": agree, "generations_equal": gen_equal,
            "pronunciations_equal": said_equal}


def time_cells(spec, classify, classify_all, greedy, pronounce, pronounce_all, x, read):
    """Every cell, timed alike in each program: classify(input) answers one input (x's cls_short,
    cls_long); classify_all() the whole test set; greedy(p, n) continues the prompts p by n tokens
    (x's first: one prompt, prompts: the batch of GEN_BATCH, long_prompt: the window's length);
    pronounce(word) decodes one word (x's short_word, long_word); pronounce_all() the word set.
    The single inputs' answers come back too, under "answers", for report() to hold against
    multihead fp32's (the batched cells' outputs are checked by check()): read["label"] reads
    classify's result as the class index, read["tokens"](result, prompt) greedy's as the new token
    ids, read["said"] pronounce's as the phonemes."""
    r = spec["repeats"]
    answers = {"cls_short_ms": read["label"](classify(x["cls_short"])),
               "cls_long_ms": read["label"](classify(x["cls_long"])),
               "lm_short_ms": read["tokens"](greedy(x["first"], 1), x["first"]),
               "lm_long_ms": read["tokens"](greedy(x["long_prompt"], 1), x["long_prompt"]),
               "gen1_tokens_per_s": read["tokens"](greedy(x["first"], GEN_TOKENS), x["first"]),
               "s2s_short_ms": read["said"](pronounce(x["short_word"])),
               "s2s_long_ms": read["said"](pronounce(x["long_word"]))}
    return {"cls_short_ms": timed(lambda: classify(x["cls_short"]), r, 1.0) * 1e3,
            "cls_long_ms": timed(lambda: classify(x["cls_long"]), r, 1.0) * 1e3,
            "cls_inputs_per_s": len(spec["texts"]) / timed(classify_all, 3),
            "lm_short_ms": timed(lambda: greedy(x["first"], 1), r, 1.0) * 1e3,
            "lm_long_ms": timed(lambda: greedy(x["long_prompt"], 1), r, 1.0) * 1e3,
            "gen1_tokens_per_s": GEN_TOKENS / timed(lambda: greedy(x["first"], GEN_TOKENS), 3),
            "gen8_tokens_per_s": GEN_BATCH * GEN_TOKENS / timed(lambda: greedy(x["prompts"], GEN_TOKENS), 3),
            "s2s_short_ms": timed(lambda: pronounce(x["short_word"]), r, 1.0) * 1e3,
            "s2s_long_ms": timed(lambda: pronounce(x["long_word"]), r, 1.0) * 1e3,
            "s2s_words_per_s": len(spec["words"]) / timed(pronounce_all, 3), "answers": answers}


def peer_reader(spec, end_of_prompt):
    """time_cells' read for a peer whose results are arrays: logits (1, classes); generated ids
    (1, n), after the prompt's own where end_of_prompt (the peer's generate gives them back too);
    phoneme ids (1, T)."""
    return {"label": lambda logits: int(logits[0].argmax()),
            "tokens": lambda ids, p: [int(t) for t in ids[0][p.shape[1] if end_of_prompt else 0:]],
            "said": lambda ids: phonemes(spec, [ids[0].tolist()])[0]}


def id_batches(x, prefix=""):
    """The test set's token ids (prefix "word_": the words' letter ids) in the order sorted by
    length, in batches of 32 cut to their longest: (rows, ids, padding) each, NumPy arrays."""
    order, lengths = x[prefix + "order"], x[prefix + "lengths"]
    batches = []
    for b in range(0, len(order), 32):
        rows = order[b:b + 32]
        L = int(lengths[rows].max())
        batches.append((rows, x[prefix + "ids"][rows, :L], x[prefix + "padding"][rows, :L]))
    return batches


def pronounce_batches(spec, word_batches, pronounce):
    """The word set's pronunciations by a peer, in the words' order: pronounce(ids, padding) decodes
    a batch of id_batches(x, "word_") into phoneme ids (B, T)."""
    out = [None] * len(spec["words"])
    for rows, w, p in word_batches:
        for i, said in zip(rows, phonemes(spec, pronounce(w, p).tolist())):
            out[i] = said
    return out


def phonemes(spec, rows):
    """Decoded phoneme ids (B, T) of a peer: each row's symbols before its end token, joined by spaces."""
    out = []
    for row in rows:
        row = list(row)
        row = row[:row.index(spec["end_id"])] if spec["end_id"] in row else row
        out.append(" ".join(spec["phonemes"][i - 3] if 3 <= i < 3 + len(spec["phonemes"]) else "<?>" for i in row))
    return out


# ---- the programs (children) ----

def child_multihead(spec, precision):
    import numpy as np
    import multihead
    cls = multihead.load_run(spec["classifier"], threads=spec["threads"], precision=precision)
    lm = multihead.load_run(spec["lm"], threads=spec["threads"], precision=precision)
    s2s = multihead.load_run(spec["s2s"], threads=spec["threads"], precision=precision)
    texts, order = spec["texts"], spec["order"]
    batches = [[texts[i] for i in order[b:b + 32]] for b in range(0, len(order), 32)]
    words, word_order = spec["words"], spec["word_order"]
    word_batches = [[words[i] for i in word_order[b:b + 32]] for b in range(0, len(word_order), 32)]
    prompts, labels = spec["prompts"], cls.labels

    def classify_all():
        out = [None] * len(texts)
        for b in range(0, len(order), 32):
            for i, p in zip(order[b:b + 32], cls.predict(batches[b // 32])):
                out[i] = [p["probabilities"][label] for label in labels]
        return np.array(out)

    def greedy(prompt_list, n):
        return lm.generate(prompt_list, tokens=n, temperature=0)

    def pronounce_all():
        out = [None] * len(words)
        for b in range(0, len(word_order), 32):
            for i, p in zip(word_order[b:b + 32], s2s.pronounce(word_batches[b // 32], beam=1)):
                out[i] = p[0]["phonemes"]
        return out

    probs = classify_all()
    gen = [lm.tokenizer.encode(s)[GEN_PROMPT:] for s in greedy(prompts, GEN_TOKENS)]
    said = [" ".join(p) for p in pronounce_all()]
    if spec.get("reference"):
        np.savez(os.path.join(spec["dir"], "reference.npz"), probs=probs, generated=np.array(gen),
                 pronounced=np.array(said))
    out = check(f"multihead {precision}", probs, gen, said, spec, exact=precision == "fp32")
    x = {"cls_short": spec["short_text"], "cls_long": spec["long_text"], "first": prompts[0], "prompts": prompts,
         "long_prompt": spec["long_prompt"], "short_word": spec["short_word"], "long_word": spec["long_word"]}

    def new_tokens(text, prompt):
        ids, prompt_ids = lm.tokenizer.encode(text), lm.tokenizer.encode(prompt)
        return ids[len(prompt_ids):] if ids[:len(prompt_ids)] == prompt_ids else ids

    read = {"label": lambda answers: labels.index(answers[0]["label"]), "tokens": new_tokens,
            "said": lambda got: " ".join(got[0][0]["phonemes"])}
    out.update(time_cells(spec, lambda t: cls.predict([t]), classify_all, greedy,
                          lambda w: s2s.pronounce([w], beam=1), pronounce_all, x, read))
    out["version"] = multihead.__version__
    return out


def load_modules(spec, export=False):
    """The to_torch() modules, rebuilt from their state_dicts by multihead/modules.py (PyTorch only)."""
    import torch
    modules = load_file(spec, "modules")
    made = {}
    for name in ("classifier", "lm", "s2s"):
        m = spec["models"][name]
        state = torch.load(os.path.join(spec["dir"], f"{name}.pt"))
        # For export, multihead.modules' own layers (Run.to_torch(pytorch_layers=False)): the graph
        # traced from nn.MultiheadAttention keeps the length it was traced with.
        if name == "classifier":
            module = modules.SequenceClassifier(m["model"], m["vocab"], m["classes"], pytorch_layers=not export)
        elif name == "lm":
            module = modules.LanguageModel(m["model"], m["vocab"], pytorch_layers=not export)
        else:
            module = modules.EncoderDecoder(m["model"], m["source_vocab"], m["vocab"], m["decoder_layers"],
                                            pytorch_layers=not export)
        module.load_state_dict(state)
        made[name] = module.eval()
    return made


def inputs(spec):
    import numpy as np
    d = np.load(os.path.join(spec["dir"], "inputs.npz"))
    return dict({k: d[k] for k in d.files}, dir=spec["dir"])


def child_torch(spec, precision, compiled):
    import contextlib
    import numpy as np
    import torch
    torch.set_num_threads(spec["threads"])
    # int8: dynamic quantization of the Linear layers, as torch.ao.quantization's users run it on a
    # CPU; over multihead.modules' own layers, as nn.TransformerEncoderLayer's fast-path check reads
    # linear1.weight as a tensor, which a quantized Linear's is not (an AttributeError in 2.13).
    m = load_modules(spec, export=precision == "int8")
    if precision == "int8":
        m = {k: torch.ao.quantization.quantize_dynamic(v, {torch.nn.Linear}, dtype=torch.qint8) for k, v in m.items()}
    elif precision == "bf16w":  # the weights cast to bf16 once, as a deployer keeps a bf16 model
        m = {k: v.to(torch.bfloat16) for k, v in m.items()}
    x = inputs(spec)
    cls, lm, s2s = m["classifier"], m["lm"], m["s2s"]
    first = {}
    if compiled:
        import torch._inductor.config
        torch._inductor.config.freezing = True
        mode = compiled if isinstance(compiled, str) else None  # "max-autotune": Inductor tries GEMM templates
        cls = torch.compile(cls, mode=mode)
        lm.forward_cached = torch.compile(lm.forward_cached, dynamic=True, mode=mode)
        s2s.encode = torch.compile(s2s.encode, dynamic=True, mode=mode)
        s2s.decode_cached = torch.compile(s2s.decode_cached, dynamic=True, mode=mode)
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else contextlib.nullcontext
    batches = [tuple(map(torch.from_numpy, b)) for b in id_batches(x)]
    word_batches = [tuple(map(torch.from_numpy, b)) for b in id_batches(x, "word_")]
    start, end, max_len = spec["start_id"], spec["end_id"], spec["decode_max_len"]

    def classify_all():
        out = torch.zeros(len(x["order"]), spec["models"]["classifier"]["classes"])
        with torch.inference_mode(), ctx():
            for rows, i, p in batches:
                out[rows] = torch.softmax(cls(i, p).float(), -1)
        return out.numpy().astype(np.float64)

    def classify_one(i):
        with torch.inference_mode(), ctx():
            return cls(i)

    prompts = torch.from_numpy(x["prompts"])

    def greedy(p, n):
        with torch.inference_mode(), ctx():
            return lm.generate(p, n)

    def pronounce(w, padding=None):
        with torch.inference_mode(), ctx():
            return s2s.generate(w, padding, start, end, max_len)

    def pronounce_all():
        return pronounce_batches(spec, word_batches, pronounce)

    t0 = time.perf_counter()
    probs = classify_all()  # a compiled model compiles here
    first["classify_first_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    gen = greedy(prompts, GEN_TOKENS)[:, GEN_PROMPT:].tolist()
    first["generate_first_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    said = pronounce_all()
    first["pronounce_first_s"] = time.perf_counter() - t0
    out = check("PyTorch", probs, gen, said, spec, exact=precision == "fp32")
    one = {k: torch.from_numpy(x[v])[None] for k, v in (("cls_short", "short_ids"), ("cls_long", "long_ids"),
                                                         ("long_prompt", "long_prompt"), ("short_word", "short_word"),
                                                         ("long_word", "long_word"))}
    one.update(first=prompts[:1], prompts=prompts)
    out.update(time_cells(spec, classify_one, classify_all, greedy, pronounce, pronounce_all, one,
                          peer_reader(spec, end_of_prompt=True)))
    out.update(first, version=torch.__version__)
    return out


def load_file(spec, name):
    """A module of multihead's Python package that needs only PyTorch (modules.py, onnx_export.py,
    onnx_decoding.py), loaded from the work folder as a package of its own there: the peer's
    interpreter may have no multihead installed."""
    import importlib
    import types
    if "mh_work" not in sys.modules:
        package = types.ModuleType("mh_work")
        package.__path__ = [spec["dir"]]
        sys.modules["mh_work"] = package
    return importlib.import_module(f"mh_work.{name}")


def node_counts(path):
    """The graph's node count, and after ONNX Runtime's own optimisations (ORT_ENABLE_ALL)."""
    import onnx
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    o.log_severity_level = 3
    o.optimized_model_filepath = path + ".optimized"
    ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
    after = len(onnx.load(o.optimized_model_filepath).graph.node)
    os.remove(o.optimized_model_filepath)
    return [len(onnx.load(path).graph.node), after]


def child_export(spec):
    """The ONNX graphs (multihead.onnx_export, through the peer's torch.onnx.export, from the
    to_torch() modules): the classifier, the language model's decoding step with its KV cache, the
    encoder-decoder's encoder and decoding step; then the classifier through ONNX Runtime's
    transformer optimizer (model_type bert, the raw 2-D mask so any padding stays right), as a
    deployer runs it. Node counts: as exported, after ORT_ENABLE_ALL, and (the classifier) after
    the transformer optimizer and ORT_ENABLE_ALL."""
    import numpy as np
    import torch
    m = load_modules(spec, export=True)
    export = load_file(spec, "onnx_export")
    x = inputs(spec)
    d = spec["dir"]
    export.export_module("classifier", m["classifier"], d, torch.from_numpy(x["ids"][:2, :24]),
                         torch.from_numpy(x["padding"][:2, :24]))
    export.export_module("lm", m["lm"], d, torch.from_numpy(x["prompts"]))
    export.export_module("s2s", m["s2s"], d, torch.from_numpy(x["word_ids"][:2, :6]),
                         torch.from_numpy(np.ascontiguousarray(x["word_padding"][:2, :6])))
    model = spec["models"]["classifier"]["model"]
    fused_ops = export.fuse_classifier(os.path.join(d, "classifier.onnx"), os.path.join(d, "classifier.fused.onnx"),
                                       model["nhead"], model["d_model"])
    nodes = {name: node_counts(os.path.join(d, f"{name}.onnx"))
             for name in ("classifier", "lm_step", "s2s_encoder", "s2s_step")}
    nodes["classifier"] += node_counts(os.path.join(d, "classifier.fused.onnx"))[1:]
    with torch.no_grad():
        _, cache = m["lm"].forward_cached(torch.from_numpy(x["prompts"][:1, :3]))
    return {"version": torch.__version__, "past_shape": list(cache[0][0].shape), "onnx_nodes": nodes,
            "fused_ops": fused_ops}


def ort_int8(spec):
    """The graphs quantized by ONNX Runtime's quantize_dynamic (int8 weights, uint8 activations
    per tensor), written beside them once."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    for name in ("classifier.fused", "lm_step", "s2s_encoder", "s2s_step"):
        fp32 = os.path.join(spec["dir"], f"{name}.onnx")
        int8 = os.path.join(spec["dir"], f"{name}.int8.onnx")
        if not os.path.exists(int8):
            # The fused graph's contrib ops (Attention, SkipLayerNormalization) leave ONNX's shape
            # inference without types: the weights' type named (ORT's own advice).
            quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return ".int8"


def child_ort(spec, precision=""):
    import numpy as np
    import onnxruntime as ort
    suffix = ort_int8(spec) if precision == "int8" else ""
    o = ort.SessionOptions()
    o.intra_op_num_threads, o.inter_op_num_threads = spec["threads"], 1
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    cls = ort.InferenceSession(os.path.join(spec["dir"], f"classifier.fused{suffix}.onnx"), o,
                               providers=["CPUExecutionProvider"])
    lm = ort.InferenceSession(os.path.join(spec["dir"], f"lm_step{suffix}.onnx"), o, providers=["CPUExecutionProvider"])
    enc = ort.InferenceSession(os.path.join(spec["dir"], f"s2s_encoder{suffix}.onnx"), o, providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(os.path.join(spec["dir"], f"s2s_step{suffix}.onnx"), o, providers=["CPUExecutionProvider"])
    x = inputs(spec)
    batches = id_batches(x)
    word_batches = id_batches(x, "word_")

    def classify_all():
        out = np.zeros((len(x["order"]), spec["models"]["classifier"]["classes"]))
        for rows, i, p in batches:
            z = cls.run(None, {"ids": i, "padding": p})[0].astype(np.float64)
            z = np.exp(z - z.max(1, keepdims=True))
            out[rows] = z / z.sum(1, keepdims=True)
        return out

    def classify_one(i):
        return cls.run(None, {"ids": i, "padding": np.zeros(i.shape, dtype=bool)})[0]

    past_names = [i.name for i in lm.get_inputs()[1:]]
    kv_heads, head_dim = spec["past_shape"][1], spec["past_shape"][3]

    def greedy(p, n):
        feed = {name: np.zeros((p.shape[0], kv_heads, 0, head_dim), dtype=np.float32) for name in past_names}
        feed["ids"], out = p, []
        for t in range(n):
            got = lm.run(None, feed)
            nxt = got[0][:, -1].argmax(-1)[:, None].astype(np.int64)
            out.append(nxt)
            feed = dict(zip(past_names, got[1:]), ids=nxt)
        return np.concatenate(out, axis=1)

    memory_names = [i.name for i in enc.get_outputs()]
    self_names = [i.name for i in dec.get_inputs()[2 + len(memory_names):]]
    start, end, max_len = spec["start_id"], spec["end_id"], spec["decode_max_len"]

    def pronounce(w, padding=None):
        """Greedy decoding, as EncoderDecoder.generate: (B, T) ids, a row's after its end all end."""
        padding = np.zeros(w.shape, dtype=bool) if padding is None else padding
        got = enc.run(None, {"source": w, "padding": padding})
        memory = dict(zip(memory_names, got))  # each (B, kv_heads, S, head_dim), as the self-attention's
        feed = {name: np.zeros((w.shape[0], got[0].shape[1], 0, got[0].shape[3]), dtype=np.float32)
                for name in self_names}
        nxt = np.full((w.shape[0], 1), start, dtype=np.int64)
        done = np.zeros((w.shape[0], 1), dtype=bool)
        out = []
        for _ in range(max_len):
            got = dec.run(None, dict(feed, ids=nxt, padding=padding, **memory))
            nxt = np.where(done, end, got[0][:, -1].argmax(-1)[:, None]).astype(np.int64)
            out.append(nxt)
            done |= nxt == end
            if done.all():
                break
            feed = dict(zip(self_names, got[1:]))
        return np.concatenate(out, axis=1)

    def pronounce_all():
        return pronounce_batches(spec, word_batches, pronounce)

    prompts = x["prompts"]
    probs = classify_all()
    out = check(f"ONNX Runtime {precision or 'fp32'}", probs, greedy(prompts, GEN_TOKENS).tolist(), pronounce_all(),
                spec, exact=precision != "int8")
    one = {"cls_short": x["short_ids"][None], "cls_long": x["long_ids"][None], "first": prompts[:1],
           "prompts": prompts, "long_prompt": x["long_prompt"][None], "short_word": x["short_word"][None],
           "long_word": x["long_word"][None]}
    out.update(time_cells(spec, classify_one, classify_all, greedy, pronounce, pronounce_all, one,
                          peer_reader(spec, end_of_prompt=False)))
    out["version"] = ort.__version__
    return out


def child_predict(spec, precision):
    """`multihead predict` over the test texts, one a line: wall time (the run's load included, and
    timed apart on one line) and peak resident memory; and over the words (greedy, beam 1)."""
    import resource
    import numpy as np
    cmd = [spec["bin"], "predict", "--run", spec["classifier"], "--threads", str(spec["threads"]), "--json",
           "--precision", precision, "--input"]
    one = os.path.join(spec["dir"], "one.txt")
    t0 = time.perf_counter()
    subprocess.run(cmd + [one], check=True, stdout=subprocess.DEVNULL)
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = subprocess.run(cmd + [os.path.join(spec["dir"], "texts.txt")], check=True, capture_output=True,
                         text=True).stdout
    wall = time.perf_counter() - t0
    answers = [json.loads(line) for line in got.splitlines()]
    labels = spec["labels"]
    probs = np.array([[a["probabilities"][l] for l in labels] for a in answers])
    want = np.load(os.path.join(spec["dir"], "reference.npz"))["probs"]
    diff = float(np.abs(probs - want).max())
    if precision == "fp32" and diff > 1e-4:
        sys.exit(f"multihead predict: class probabilities differ from the library's by up to {diff:.2e}")
    n = len(spec["texts"])
    out = {"max_prob_diff": diff, "cls_inputs_per_s": n / wall, "cls_inputs_per_s_unloaded": n / max(wall - load, 1e-9),
           "load_s": load, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}
    t0 = time.perf_counter()
    got = subprocess.run([spec["bin"], "predict", "--run", spec["s2s"], "--threads", str(spec["threads"]), "--json",
                          "--precision", precision, "--beam", "1", "--input", os.path.join(spec["dir"], "words.txt")],
                         check=True, capture_output=True, text=True).stdout
    out["s2s_words_per_s"] = len(spec["words"]) / (time.perf_counter() - t0)
    said = [json.loads(line)["pronunciations"][0]["phonemes"] for line in got.splitlines()]
    want = np.load(os.path.join(spec["dir"], "reference.npz"))["pronounced"]
    out["pronunciations_equal"] = float(np.mean([a == b for a, b in zip(said, want)]))
    if precision == "fp32" and out["pronunciations_equal"] < 1.0:
        sys.exit(f"multihead predict: {out['pronunciations_equal']:.2%} of pronunciations equal the library's")
    return out


def served(spec, run, precision, *extra):
    """A `multihead serve` of run on a free port, its inputs up to 1 MiB (its default cap refuses
    long e-mails), an idle connection kept an hour (the client holds one while the other server is
    timed): (process, a POST of {"inputs": [...]} over one keep-alive connection -> outputs)."""
    import http.client
    import re
    p = subprocess.Popen([spec["bin"], "serve", "--run", run, "--port", "0", "--threads", str(spec["threads"]),
                          "--precision", precision, "--max-input-bytes", str(2**20), "--idle-timeout-ms", "3600000", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"http://([\d.]+):(\d+)", p.stdout.readline())
    if not m:
        p.kill()
        sys.exit("multihead serve did not say where it listens")
    conn = http.client.HTTPConnection(m.group(1), int(m.group(2)))

    def post(items):
        conn.request("POST", "/v1/predict", json.dumps({"inputs": items}), {"Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            sys.exit(f"multihead serve answered {r.status}: {body[:300]!r}")
        return json.loads(body)["outputs"]
    return p, post


def child_serve(spec, precision):
    """`multihead serve` of the classifier and of the encoder-decoder (beam 1), one client sending
    the library cells' inputs as requests (a batch of 32 a request), one at a time."""
    import numpy as np
    texts, order, words, word_order = spec["texts"], spec["order"], spec["words"], spec["word_order"]
    labels = spec["labels"]
    cls_p, cls = served(spec, spec["classifier"], precision)
    s2s_p, s2s = served(spec, spec["s2s"], precision, "--beam", "1")
    try:
        def classify_all():
            out = [None] * len(texts)
            for b in range(0, len(order), 32):
                rows = order[b:b + 32]
                for i, a in zip(rows, cls([texts[i] for i in rows])):
                    out[i] = [a["probabilities"][label] for label in labels]
            return np.array(out)

        def pronounce_all():
            out = [None] * len(words)
            for b in range(0, len(word_order), 32):
                rows = word_order[b:b + 32]
                for i, a in zip(rows, s2s([words[i] for i in rows])):
                    out[i] = a["pronunciations"][0]["phonemes"]
            return out

        want = np.load(os.path.join(spec["dir"], "reference.npz"))
        probs, said = classify_all(), pronounce_all()
        out = {"max_prob_diff": float(np.abs(probs - want["probs"]).max()),
               "labels_agree": float((probs.argmax(1) == want["probs"].argmax(1)).mean()),
               "pronunciations_equal": float(np.mean([a == b for a, b in zip(said, want["pronounced"])]))}
        if precision == "fp32" and (out["max_prob_diff"] > 1e-4 or out["pronunciations_equal"] < 1.0):
            sys.exit(f"multihead serve: outputs differ from the library's: {out}")
        r = spec["repeats"]
        out.update({"cls_short_ms": timed(lambda: cls([spec["short_text"]]), r, 1.0) * 1e3,
                    "cls_long_ms": timed(lambda: cls([spec["long_text"]]), r, 1.0) * 1e3,
                    "cls_inputs_per_s": len(texts) / timed(classify_all, 3),
                    "s2s_short_ms": timed(lambda: s2s([spec["short_word"]]), r, 1.0) * 1e3,
                    "s2s_long_ms": timed(lambda: s2s([spec["long_word"]]), r, 1.0) * 1e3,
                    "s2s_words_per_s": len(words) / timed(pronounce_all, 3)})
        out["answers"] = {"cls_short_ms": labels.index(cls([spec["short_text"]])[0]["label"]),
                          "cls_long_ms": labels.index(cls([spec["long_text"]])[0]["label"]),
                          "s2s_short_ms": s2s([spec["short_word"]])[0]["pronunciations"][0]["phonemes"],
                          "s2s_long_ms": s2s([spec["long_word"]])[0]["pronunciations"][0]["phonemes"]}
        return out
    finally:
        for p in (cls_p, s2s_p):
            p.terminate()
            p.wait()


# ---- the parent ----

def prepare(a, work):
    """Every program's inputs, in the work folder: the texts, their token ids, the prompts, the
    modules' state_dicts and the reference outputs' spec."""
    import numpy as np
    import torch
    import multihead
    cls = multihead.load_run(a.classifier, threads=a.threads)
    lm = multihead.load_run(a.lm, threads=a.threads)
    s2s = multihead.load_run(a.s2s, threads=a.threads)
    # predict reads one text a line: every program reads the texts so, white space runs made one space.
    texts = [" ".join(t.split()) for t in cls.test_texts()[0]]
    texts = [t for t in texts if t]
    max_len = cls.config["max_len"]
    tok = cls.tokenizer
    whole = [tok.encode(t) for t in texts]
    seqs = [[tok.cls_id] + w[:max_len - 1] for w in whole]
    lengths = np.array([len(s) for s in seqs])
    full = np.array([len(w) + 1 for w in whole])  # before the cut to max_len
    ids = np.full((len(seqs), lengths.max()), tok.pad_id, dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
    padding = np.arange(lengths.max())[None, :] >= lengths[:, None]
    order = np.argsort(lengths, kind="stable")
    # Short: the test text of the token count nearest SHORT; long: the one nearest the window, whole
    # (a longer text is cut to it, and every program would read the same tokens of it).
    short = int(np.argmin(np.abs(full - SHORT)))
    long_ = int(np.argmin(np.abs(full - max_len)))
    # The language model's prompts: pieces of its own corpus's end (its test split).
    with open(lm.config["data"]["path"], encoding="utf-8") as f:
        corpus = f.read()[-200000:]
    window = lm.config["train"]["seq_len"]
    ltok = lm.tokenizer
    prompts = []
    at = 1000
    while len(prompts) < GEN_BATCH:
        p = " ".join(corpus[at:at + 4 * GEN_PROMPT].split())
        ids_p = ltok.encode(p)
        if len(ids_p) >= GEN_PROMPT:
            prompts.append(ltok.decode(ids_p[:GEN_PROMPT]))
        at += 9973
    long_ids = ltok.encode(" ".join(corpus[5000:5000 + 4 * window].split()))[:window]
    # The encoder-decoder's words: the first WORDS of its test split (a random draw of the dictionary).
    words = s2s.test_texts()[0][:WORDS]
    vocab = s2s.tokenizer
    letters = [vocab.encode(w) for w in words]
    word_lengths = np.array([len(w) for w in letters])
    word_ids = np.full((len(words), word_lengths.max()), vocab.pad_id, dtype=np.int64)
    for i, w in enumerate(letters):
        word_ids[i, :len(w)] = w
    short_word = int(np.argmin(np.abs(word_lengths - SHORT_WORD)))
    long_word = int(np.argmax(word_lengths))
    np.savez(os.path.join(work, "inputs.npz"), ids=ids, padding=padding, lengths=lengths, order=order,
             short_ids=ids[short, :lengths[short]], long_ids=ids[long_, :lengths[long_]],
             prompts=np.array([ltok.encode(p) for p in prompts]), long_prompt=np.array(long_ids),
             word_ids=word_ids, word_padding=word_ids == vocab.pad_id, word_lengths=word_lengths,
             word_order=np.argsort(word_lengths, kind="stable"), short_word=np.array(letters[short_word]),
             long_word=np.array(letters[long_word]))
    with open(os.path.join(work, "texts.txt"), "w") as f:
        f.write("\n".join(texts) + "\n")
    with open(os.path.join(work, "words.txt"), "w") as f:
        f.write("\n".join(words) + "\n")
    with open(os.path.join(work, "one.txt"), "w") as f:
        f.write(texts[short] + "\n")
    for name in ("modules.py", "onnx_export.py", "onnx_decoding.py"):
        shutil.copy(os.path.join(ROOT, "python", "multihead", name), work)
    models = {}
    for name, run in (("classifier", cls), ("lm", lm), ("s2s", s2s)):
        module = run.to_torch()
        torch.save(module.state_dict(), os.path.join(work, f"{name}.pt"))
        models[name] = {"model": module_config(run)}
    models["classifier"].update(vocab=cls.state_dict()["embedding.weight"].shape[0], classes=len(cls.labels))
    models["lm"]["vocab"] = lm.state_dict()["embedding.weight"].shape[0]
    w = s2s.state_dict()
    models["s2s"].update(source_vocab=w["source_embedding.weight"].shape[0], vocab=w["target_embedding.weight"].shape[0],
                         decoder_layers=s2s.config.get("decoder_layers", 0))
    return {"dir": work, "threads": a.threads, "repeats": a.repeats, "bin": os.path.abspath(a.bin),
            "classifier": os.path.abspath(a.classifier), "lm": os.path.abspath(a.lm), "s2s": os.path.abspath(a.s2s),
            "texts": texts, "labels": cls.labels, "order": order.tolist(), "short_text": texts[short],
            "long_text": texts[long_], "prompts": prompts, "long_prompt": ltok.decode(long_ids), "models": models,
            "words": words, "word_order": np.argsort(word_lengths, kind="stable").tolist(),
            "short_word": words[short_word], "long_word": words[long_word], "phonemes": vocab.phonemes,
            "start_id": vocab.start_id, "end_id": vocab.end_id,
            "decode_max_len": s2s.config.get("decode", {}).get("max_len", 32),
            "about": {"classifier": f"{len(texts)} test texts, {lengths.mean():.0f} tokens on average "
                                    f"(at most {max_len}); short {lengths[short]}, long {lengths[long_]} tokens",
                      "lm": f"prompts of {GEN_PROMPT} tokens, {GEN_TOKENS} generated; long prompt "
                            f"{len(long_ids)} tokens (its training window)",
                      "s2s": f"{len(words)} test words, {word_lengths.mean():.1f} letters on average; short "
                             f"'{words[short_word]}', long '{words[long_word]}'; greedy, at most "
                             f"{s2s.config.get('decode', {}).get('max_len', 32)} phonemes"}}


def module_config(run):
    """The model section to_torch() builds from (a learned table's length is its checkpoint's)."""
    model = dict(run.config["model"])
    w = run.state_dict()
    for table in ("pos_embedding.weight", "source_positions.weight"):
        if table in w:
            model["max_len"] = w[table].shape[0]
    return model


CELLS = [("cls_short_ms", "classify, batch 1, short input", "ms", False),
         ("cls_long_ms", "classify, batch 1, long input", "ms", False),
         ("cls_inputs_per_s", "classify the test set, batches of 32", "inputs/s", True),
         ("lm_short_ms", "language model, first token, short prompt", "ms", False),
         ("lm_long_ms", "language model, first token, long prompt", "ms", False),
         ("gen1_tokens_per_s", "generate, batch 1", "tokens/s", True),
         ("gen8_tokens_per_s", "generate, batch 8", "tokens/s", True),
         ("s2s_short_ms", "pronounce, batch 1, short word", "ms", False),
         ("s2s_long_ms", "pronounce, batch 1, longest word", "ms", False),
         ("s2s_words_per_s", "pronounce the words, batches of 32", "words/s", True)]


def use_this_build():
    """This checkout's build of the Python package, where there is one (else an installed multihead)."""
    if os.path.isdir(os.path.join(ROOT, "build", "python", "multihead")):
        sys.path.insert(0, os.path.join(ROOT, "build", "python"))


def arguments(description):
    """What every inference comparison takes: the CLI, the classifier and cmudict runs, threads, rounds."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "multihead"))
    ap.add_argument("--classifier", default=os.path.join(ROOT, "runs", "spam"))
    ap.add_argument("--s2s", default=os.path.join(ROOT, "runs", "cmudict"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    return ap


def main():
    use_this_build()
    ap = arguments(__doc__.splitlines()[0])
    ap.add_argument("--lm", default=os.path.join(ROOT, "runs", "moby-dick"))
    ap.add_argument("--repeats", type=int, default=20, help="timed calls of a latency cell (at least a second)")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="leave out torch.compile")
    ap.add_argument("--max-autotune", action="store_true",
                    help="torch.compile's max-autotune mode too (fp32; its compilation takes minutes)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (exported graphs, inputs)")
    ap.add_argument("--no-bf16", dest="bf16", action="store_false",
                    help="leave out the bf16 programs (a CPU without bf16 units)")
    ap.add_argument("--only", help="the programs to run, by name, comma-separated (every one by default; "
                    "multihead's fp32 reference runs always)")
    add_torch_argument(ap)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        with open(os.environ["MH_SPEC"]) as f:
            spec = json.load(f)
        kind, _, precision = a.child.partition(":")
        run = {"multihead": lambda: child_multihead(spec, precision),
               "predict": lambda: child_predict(spec, precision),
               "serve": lambda: child_serve(spec, precision),
               "torch": lambda: child_torch(spec, precision, False),
               "compiled": lambda: child_torch(spec, precision, True),
               "autotuned": lambda: child_torch(spec, precision, "max-autotune"),
               "export": lambda: child_export(spec), "ort": lambda: child_ort(spec, precision)}[kind]
        print(json.dumps(run()))
        return
    for path, preset in ((a.classifier, "spam"), (a.lm, "moby-dick"), (a.s2s, "cmudict")):
        if not os.path.isfile(os.path.join(path, "config.json")):
            sys.exit(f"no run in {path}: make it with `multihead train --preset {preset} --out {path}`")
    peer = peers(a.torch)[0]
    if peer.name == "1.13":
        sys.exit("--torch 1.13: PyTorch 1.13 has no torch.compile; the inference peers are 2.13 or 2.6")
    print_header(a.bin, a.threads, [peer])
    work = os.path.realpath(tempfile.mkdtemp(prefix="multihead-inference-"))
    os.environ["MULTIHEAD_TORCH2_SHARE"] = work  # bound writable in the PyTorch 2.6 root
    try:
        spec = prepare(a, work)
        spec_path = os.path.join(work, "spec.json")

        def save():
            with open(spec_path, "w") as f:
                json.dump(spec, f)

        save()
        me = [os.path.abspath(__file__)]
        env = dict(os.environ, MH_SPEC=spec_path)

        def ours(kind):
            r = subprocess.run([sys.executable] + me + ["--child", kind], capture_output=True, text=True, env=env)
            if r.returncode != 0:
                sys.exit(f"{kind} failed:\n{r.stderr[-3000:]}")
            return json.loads(r.stdout.strip().splitlines()[-1])

        def theirs(kind):
            return peer.run(me + ["--child", kind], a.threads, extra_env={"MH_SPEC": spec_path})

        spec["reference"] = True
        save()
        reference = ours("multihead:fp32")  # multihead fp32's outputs: what every program is checked against
        spec["reference"] = False
        spec.update(theirs("export"))
        save()
        programs = [("multihead", "multihead:fp32", ours), ("multihead bf16", "multihead:bf16", ours),
                    ("multihead int8", "multihead:int8", ours),
                    ("multihead predict", "predict:fp32", ours), ("multihead predict bf16", "predict:bf16", ours),
                    ("multihead serve", "serve:fp32", ours),
                    ("PyTorch eager", "torch:fp32", theirs), ("PyTorch eager bf16", "torch:bf16", theirs),
                    ("PyTorch bf16 weights", "torch:bf16w", theirs),
                    ("PyTorch int8 (quantize_dynamic)", "torch:int8", theirs)]
        if a.compile:
            programs += [("torch.compile", "compiled:fp32", theirs), ("torch.compile bf16", "compiled:bf16", theirs)]
            if a.max_autotune:
                programs += [("torch.compile max-autotune", "autotuned:fp32", theirs)]
        programs += [("ONNX Runtime", "ort", theirs), ("ONNX Runtime int8", "ort:int8", theirs)]
        if not a.bf16:
            programs = [p for p in programs if not p[1].endswith((":bf16", ":bf16w"))]
        if a.only:
            wanted = [w.strip() for w in a.only.split(",")]
            unknown = [w for w in wanted if w not in [p[0] for p in programs]]
            if unknown:
                sys.exit(f"--only: no program {unknown[0]!r}; the programs: {', '.join(p[0] for p in programs)}")
            programs = [p for p in programs if p[0] in wanted]
        results = {name: [] for name, _, _ in programs}
        for _ in range(a.rounds):
            for name, kind, how in programs:
                results[name].append(how(kind))
        report(a, spec, peer, results, reference["answers"])
    finally:
        if a.keep:
            print(f"\nwork folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def differs(runs, key, reference):
    """Whether a program's answer to a single-input cell differed from multihead fp32's in a round."""
    return any(key in r.get("answers", {}) and r["answers"][key] != reference[key] for r in runs)


def report(a, spec, peer, results, reference):
    print(f"classifier {a.classifier}: {spec['about']['classifier']}")
    print(f"language model {a.lm}: {spec['about']['lm']}")
    print(f"encoder-decoder {a.s2s}: {spec['about']['s2s']}")
    print(f"{a.threads} threads, {a.rounds} alternating rounds, each a fresh process per program; medians of rounds")
    ort_version = results['ONNX Runtime'][0]['version'] if 'ONNX Runtime' in results else 'not run'
    print(f"PyTorch {peer.version}; ONNX Runtime {ort_version}")
    nodes = spec["onnx_nodes"]
    counts = "; ".join(f"{name} {' -> '.join(str(n) for n in c)}" for name, c in nodes.items())
    print(f"ONNX nodes as exported -> after ORT_ENABLE_ALL (the classifier: -> after the transformer optimizer "
          f"too): {counts}; fused by the optimizer: {', '.join(f'{k} {v}' for k, v in spec['fused_ops'].items())}\n")
    names = list(results)
    print("| | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for key, label, unit, higher in CELLS:
        cells = []
        for n in names:
            vals = [r[key] for r in results[n] if key in r]
            mark = " (differs)" if differs(results[n], key, reference) else ""
            cells.append(f"{statistics.median(vals):.1f}{mark}" if vals else "")
        print(f"| {label} ({unit}) | " + " | ".join(cells) + " |")
    print()
    wrong = {n: [label for key, label, _, _ in CELLS if differs(results[n], key, reference)] for n in names}
    for n in [n for n in names if wrong[n]]:
        print(f"{n}: its answer differs from multihead fp32's on one input in: {'; '.join(wrong[n])} "
              f"(an fp32 program's ratio there is left out: it did other work)\n")
    def precision_of(name):
        return "int8" if "int8" in name else "bf16" if "bf16" in name else "fp32"

    for base in [n for n in ("multihead", "multihead bf16", "multihead int8") if n in results]:
        for n in names:  # like against like: each precision against the peers' of the same kind
            if n.startswith("multihead") or precision_of(n) != precision_of(base):
                continue
            parts = []
            for key, label, unit, higher in CELLS:
                ratios = [(m[key] / t[key]) if higher else (t[key] / m[key])
                          for m, t in zip(results[base], results[n]) if key in m and key in t]
                if ratios and precision_of(n) == "fp32" and (differs(results[base], key, reference)
                                                             or differs(results[n], key, reference)):
                    parts.append(f"{label}: output differs")
                elif ratios:
                    parts.append(f"{label} {statistics.median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})")
            print(f"{base} over {n}: " + "; ".join(parts))
    print()
    def span(rs, key, fmt):
        vals = sorted(r[key] for r in rs)
        return fmt.format(vals[0]) if vals[0] == vals[-1] else f"{fmt.format(vals[0])}-{fmt.format(vals[-1])}"

    for n in names:
        rs = results[n]
        checks = ", ".join(f"{k} {max(r[k] for r in rs) if k == 'max_prob_diff' else min(r[k] for r in rs):.3g}"
                           for k in ("max_prob_diff", "labels_agree", "generations_equal", "pronunciations_equal")
                           if k in rs[0])
        extra = ""
        if "peak_rss_bytes" in rs[0]:
            extra = (f"; peak RSS {span([{'m': r['peak_rss_bytes'] / 2**20} for r in rs], 'm', '{:.0f}')} MiB, load "
                     f"{span(rs, 'load_s', '{:.2f}')} s, {span(rs, 'cls_inputs_per_s_unloaded', '{:.0f}')} inputs/s "
                     f"less the load")
        if "classify_first_s" in rs[0]:
            extra = (f"; first pass {span(rs, 'classify_first_s', '{:.1f}')} s, first generation "
                     f"{span(rs, 'generate_first_s', '{:.1f}')} s, first pronunciations "
                     f"{span(rs, 'pronounce_first_s', '{:.1f}')} s")
        print(f"{n} (over the rounds): {checks}{extra}")


if __name__ == "__main__":
    main()
