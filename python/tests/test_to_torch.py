# SPDX-License-Identifier: Apache-2.0
"""Run.to_torch(): every job kind, and every kind of positions and attention, as a plain PyTorch
module whose outputs on a batch of the run's own data are multihead's (fp32, relative 1e-4), in
eval mode and in training mode with dropout 0; the export of a classifier and a language model to
ONNX passes onnx.checker."""

import io
import json
import os
import random
import struct
import subprocess

import pytest
import torch

import multihead
from multihead import modules

CLI = os.environ.get("MULTIHEAD_CLI", "build/multihead")

TINY = {"d_model": 16, "nhead": 4, "num_layers": 2, "dim_feedforward": 24, "dropout": 0.1}
TRAIN = {"batch": 4, "lr": 0.01, "max_steps": 3, "warmup_steps": 0}  # jobs in epochs
STEPS = {"batch": 4, "lr": 0.01, "steps": 3, "warmup_steps": 0}  # jobs in steps


def train(tmp_path, name, config):
    (tmp_path / f"{name}.json").write_text(json.dumps(config))
    out = tmp_path / name
    subprocess.run([CLI, "train", "--quiet", "--threads", "1", "--config", str(tmp_path / f"{name}.json"), "--out",
                    str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Small files of every kind of data the jobs read."""
    d = tmp_path_factory.mktemp("data")
    rng = random.Random(5)
    words = ["good", "great", "fine", "nice", "bad", "awful", "poor", "nasty", "day", "film", "plot", "cast"]
    with open(d / "reviews.csv", "w") as f:
        f.write("text,label\n")
        for r in range(80):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(3, 14))) + f",{'pos' if r % 2 else 'neg'}\n")
    (d / "story.txt").write_text("the whale swam on and on. the sea was calm, the sky was grey.\n" * 40)
    letters = "ABCDEFGHIKLMNOPRSTU"
    phonemes = {"A": "AH0", "B": "B", "C": "K", "D": "D", "E": "EH1", "F": "F", "G": "G", "H": "HH", "I": "IH2",
                "K": "K", "L": "L", "M": "M", "N": "N", "O": "OW1", "P": "P", "R": "R", "S": "S", "T": "T",
                "U": "UW0"}
    with open(d / "dict.txt", "w") as f:
        seen = set()
        while len(seen) < 160:
            w = "".join(rng.choice(letters) for _ in range(rng.randint(3, 7))) + "EA"
            if w not in seen:
                seen.add(w)
                f.write(w + "  " + " ".join(phonemes[c] for c in w[:-2]) + " IY1 AH0\n")
    images = d / "images"
    images.mkdir()
    for split, n in (("train", 40), ("t10k", 10)):
        pixels = bytes(rng.randrange(256) for _ in range(n * 8 * 8))
        (images / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, n, 8, 8) + pixels)
        labels = bytes(rng.randrange(3) for _ in range(n))
        (images / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, n) + labels)
    return d


def classifier(data, **model):
    return {"task": "text_classification", "max_len": 12,
            "data": {"source": "csv", "path": str(data / "reviews.csv")},
            "tokenizer": {"kind": "word", "vocab_size": 64}, "model": dict(TINY, **model), "train": TRAIN}


def language_model(data, **model):
    return {"task": "language_modeling", "data": {"path": str(data / "story.txt")}, "tokenizer": {"kind": "char"},
            "eval_every": 3, "eval_windows": 2, "sample": {"tokens": 4}, "model": dict(TINY, **model),
            "train": dict(STEPS, seq_len=16)}


# Every kind of positions and attention, in the kinds that carry them.
RUNS = {
    "classifier-sinusoidal": lambda d: classifier(d),
    "classifier-learned-cls-prenorm-gelu": lambda d: classifier(d, positions="learned", pooling="cls",
                                                                norm_first=True, activation="gelu"),
    "classifier-relative-sliding": lambda d: classifier(d, positions="relative", relative_clip=3,
                                                        attention="sliding_window", window_left=2, window_right=1),
    "classifier-relative-keys-block-sparse": lambda d: classifier(d, positions="relative", relative_values=False,
                                                                  attention="block_sparse", sparse_block=4,
                                                                  global_tokens=1),
    "classifier-rope-gqa": lambda d: classifier(d, positions="rope", num_kv_heads=2),
    "classifier-alibi-3-heads": lambda d: classifier(d, positions="alibi", d_model=18, nhead=3),
    "classifier-linear": lambda d: classifier(d, positions="none", attention="linear"),
    "classifier-rope-linear-mqa": lambda d: classifier(d, positions="rope", attention="linear", num_kv_heads=1),
    "lm-sinusoidal-tied": lambda d: language_model(d, tie_embeddings=True),
    "lm-alibi-sliding": lambda d: language_model(d, positions="alibi", attention="sliding_window", window_left=5,
                                                 window_right=0),
    "lm-rope-linear": lambda d: language_model(d, positions="rope", attention="linear"),
    "lm-learned-block-sparse-gqa": lambda d: language_model(d, positions="learned", attention="block_sparse",
                                                            sparse_block=4, num_kv_heads=2),
    "lm-relative": lambda d: language_model(d, positions="relative", relative_clip=4),
    "lm-rope-gqa-prenorm": lambda d: language_model(d, positions="rope", num_kv_heads=2, norm_first=True),
    "lm-alibi": lambda d: language_model(d, positions="alibi"),
    # Heads GroupQueryAttention's CPU kernel takes (16 wide with RoPE, 8 without): the decoding
    # step's export written around it.
    "lm-rope-gqa-prenorm-wide": lambda d: language_model(d, d_model=64, positions="rope", num_kv_heads=2,
                                                         norm_first=True),
    "lm-learned-gelu-wide": lambda d: language_model(d, d_model=32, positions="learned", activation="gelu"),
    "image": lambda d: {"task": "image_classification",
                        "data": {"path": str(d / "images"), "validation_examples": 8},
                        "model": {"image_size": 8, "patch": 4, "num_layers": 2, "num_classes": 3, "d_model": 16,
                                  "nhead": 2, "dim_feedforward": 24, "dropout": 0.1, "norm_first": True},
                        "train": TRAIN},
    "sequence-task-rope": lambda d: {"task": "sequence_task",
                                     "data": {"kind": "reverse", "symbols": 6, "min_len": 2, "max_len": 6,
                                              "test_lengths": [6], "eval_batches": 1},
                                     "model": dict(TINY, positions="rope"), "train": STEPS},
    "pronunciation-sinusoidal": lambda d: {"task": "pronunciation", "eval_batch": 16,
                                           "data": {"path": str(d / "dict.txt"), "validation_words": 4,
                                                    "validation_fraction": 0.05, "test_fraction": 0.1},
                                           "decode": {"beam": 1}, "model": dict(TINY, max_len=32),
                                           "train": TRAIN},
    "pronunciation-relative-gqa-prenorm": lambda d: {"task": "pronunciation", "eval_batch": 16, "decoder_layers": 1,
                                                     "data": {"path": str(d / "dict.txt"), "validation_words": 4,
                                                              "validation_fraction": 0.05, "test_fraction": 0.1},
                                                     "decode": {"beam": 1},
                                                     "model": dict(TINY, max_len=32, positions="relative",
                                                                   relative_clip=3, num_kv_heads=2, norm_first=True),
                                                     "train": TRAIN},
    "pronunciation-rope-gqa-prenorm": lambda d: {"task": "pronunciation", "eval_batch": 16,
                                                 "data": {"path": str(d / "dict.txt"), "validation_words": 4,
                                                          "validation_fraction": 0.05, "test_fraction": 0.1},
                                                 "decode": {"beam": 1, "max_len": 12},
                                                 "model": dict(TINY, max_len=32, positions="rope", num_kv_heads=2,
                                                               norm_first=True),
                                                 "train": TRAIN},
    "pronunciation-rope-prenorm-wide": lambda d: {"task": "pronunciation", "eval_batch": 16,
                                                  "data": {"path": str(d / "dict.txt"), "validation_words": 4,
                                                           "validation_fraction": 0.05, "test_fraction": 0.1},
                                                  "decode": {"beam": 1, "max_len": 12},
                                                  "model": dict(TINY, d_model=64, max_len=32, positions="rope",
                                                                norm_first=True),
                                                  "train": TRAIN},
    "word-stress-learned": lambda d: {"task": "word_stress", "eval_batch": 16,
                                      "data": {"path": str(d / "dict.txt"), "test_fraction": 0.2},
                                      "model": dict(TINY, positions="learned", max_len=16), "train": TRAIN},
}


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    return {name: train(out, name, make(data)) for name, make in RUNS.items()}


def assert_matches(got, want):
    scale = want.abs().max().item()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * max(scale, 1.0))


@pytest.mark.parametrize("name", list(RUNS))
def test_the_module_computes_what_multihead_computes(runs, name):
    run = multihead.load_run(runs[name], threads=1)
    module = run.to_torch()
    assert set(module.state_dict()) == set(run.state_dict())  # the checkpoint's names, nothing else
    inputs, want = run.sample(6)
    assert want.shape[0] == next(iter(inputs.values())).shape[0]
    with torch.no_grad():
        assert_matches(module(**inputs), want)
    # Training mode, dropout 0: the same numbers through the training paths of both.
    module = run.to_torch(dropout=0.0).train()
    inputs, want = run.sample(6, training=True)
    got = module(**inputs)
    assert_matches(got.detach(), want)
    got.sum().backward()  # and PyTorch can train it
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in module.parameters() if p.requires_grad)


def test_the_modules_use_pytorchs_own_layers_where_it_has_them(runs):
    plain = multihead.load_run(runs["classifier-sinusoidal"]).to_torch()
    assert all(isinstance(l, torch.nn.TransformerEncoderLayer) for l in plain.encoder.layers)
    assert all(isinstance(l, torch.nn.TransformerDecoderLayer)
               for l in multihead.load_run(runs["pronunciation-sinusoidal"]).to_torch().decoder.layers)
    rope = multihead.load_run(runs["classifier-rope-gqa"]).to_torch()
    assert all(isinstance(l, modules.EncoderLayer) for l in rope.encoder.layers)


def test_the_tokenizer_encodes_as_the_run_does(runs):
    run = multihead.load_run(runs["classifier-sinusoidal"], threads=1)
    inputs, _ = run.sample(3)
    tok = run.tokenizer
    assert tok.kind == "word" and tok.vocab_size <= 64 and tok.cls_id == 2 and tok.pad_id == 0
    for text in ("good film", "awful plot cast day"):
        ids = [tok.cls_id] + tok.encode(text)
        assert tok.decode(tok.encode(text)) == text
        logits = run.to_torch()(torch.tensor([ids]))
        probs = torch.softmax(logits, -1)[0]
        want = run.predict([text])[0]["probabilities"]
        assert [want[label] for label in run.labels] == pytest.approx(probs.tolist(), rel=1e-4)
    lm = multihead.load_run(runs["lm-sinusoidal-tied"], threads=1)
    assert lm.tokenizer.kind == "char"
    assert lm.tokenizer.decode(lm.tokenizer.encode("the whale")) == "the whale"
    assert multihead.load_run(runs["image"]).tokenizer is None


def test_a_run_without_answers_says_so(runs):
    run = multihead.load_run(runs["image"], threads=1)
    assert run.task == "image_classification"
    with pytest.raises(ValueError, match="predict needs a run of text classifiers, language models or pronunciation jobs"):
        run.predict(["x"])
    linear = multihead.load_run(runs["classifier-linear"], threads=1)
    assert linear.predict(["good film"])[0]["label"] in ("pos", "neg")
    with pytest.raises(ValueError, match="attention is linear: it computes no attention weights to show"):
        linear.attention("good film")
    assert "computes no attention weights" in (runs["classifier-linear"] / "report.md").read_text()


@pytest.mark.parametrize("name", ["lm-sinusoidal-tied", "lm-rope-gqa-prenorm", "lm-alibi"])
def test_decoding_with_a_kv_cache_gives_the_whole_sequences_logits(runs, name):
    run = multihead.load_run(runs[name], threads=1)
    module = run.to_torch()
    inputs, want = run.sample(3)
    ids = inputs["ids"][:, :12]
    with torch.no_grad():
        whole = module(ids)
        assert_matches(whole, want[:, :12])
        # A prompt of five, two tokens in one step, then one at a time.
        parts, cache = [], None
        for a, b in ((0, 5), (5, 7)) + tuple((t, t + 1) for t in range(7, 12)):
            logits, cache = module.forward_cached(ids[:, a:b], cache)
            parts.append(logits)
    assert_matches(torch.cat(parts, dim=1), whole)
    assert len(cache) == 2 and cache[0][0].shape[2] == 12


def test_greedy_generation_matches_multiheads_alone_and_in_a_batch(runs):
    run = multihead.load_run(runs["lm-rope-gqa-prenorm"], threads=1)
    prompts = ["the wha", "the sea", "sky was"]  # 7 characters each; 7 + 8 stays in the 16-token window
    alone = [run.generate(p, tokens=8, temperature=0) for p in prompts]
    assert run.generate(prompts, tokens=8, temperature=0) == alone
    tok = run.tokenizer
    with torch.no_grad():
        got = run.to_torch().generate(torch.tensor([tok.encode(p) for p in prompts]), 8)
    assert [tok.decode(row.tolist()) for row in got] == alone
    # Sampled, each row draws from its own stream, the first from what generating it alone draws from.
    sampled = run.generate(prompts, tokens=8, temperature=1.0, top_p=1.0, seed=3)
    assert sampled[0] == run.generate(prompts[0], tokens=8, temperature=1.0, top_p=1.0, seed=3)
    assert all(s.startswith(p) and len(s) == 15 for s, p in zip(sampled, prompts))
    with pytest.raises(ValueError, match="prompts generated together need equal lengths, got 7 and 3 tokens"):
        run.generate(["the wha", "sky"], tokens=2)
    with pytest.raises(ValueError, match="step \\(a KV cache\\) takes full attention"):
        multihead.load_run(runs["lm-alibi-sliding"]).to_torch().forward_cached(torch.tensor([[1, 2]]))


@pytest.mark.parametrize("name", ["pronunciation-sinusoidal", "pronunciation-rope-gqa-prenorm"])
def test_an_encoder_decoder_decodes_with_caches_as_multihead_pronounces(runs, name):
    # The first on PyTorch's own layers (their nn.MultiheadAttention stepped), the second on ours.
    run = multihead.load_run(runs[name], threads=1)
    module = run.to_torch()
    inputs, want = run.sample(3)
    source, padding, target = inputs["source"], inputs["source_padding"], inputs["target"]
    with torch.no_grad():
        whole = module(source, padding, target)
        assert_matches(whole, want)
        memory = module.encode(source, padding)
        parts, cache = [], None
        T = target.shape[1]
        for a, b in ((0, 2),) + tuple((t, t + 1) for t in range(2, T)):
            logits, cache = module.decode_cached(target[:, a:b], memory, padding, cache)
            parts.append(logits)
    assert_matches(torch.cat(parts, dim=1), whole)
    # Greedy decoding of test words of every length, together (padded) and alone, as multihead's beam 1.
    words, answers = run.test_texts()
    assert len(words) == len(answers) > 4 and all(a.split() for a in answers)
    words = sorted(words[:12], key=len)
    tok = run.tokenizer
    ids = [tok.encode(w) for w in words]
    L = max(len(i) for i in ids)
    batch = torch.tensor([i + [tok.pad_id] * (L - len(i)) for i in ids])
    max_len = run.config.get("decode", {}).get("max_len", 40)
    with torch.no_grad():
        together = module.generate(batch, batch == tok.pad_id, tok.start_id, tok.end_id, max_len)
        alone = [module.generate(torch.tensor([i]), None, tok.start_id, tok.end_id, max_len)[0] for i in ids]

    def cut(row):
        row = row.tolist()
        return tok.decode(row[:row.index(tok.end_id)] if tok.end_id in row else row)

    want = [p[0]["phonemes"] for p in run.pronounce(words, beam=1)]
    assert [cut(r) for r in together] == want
    assert [cut(r) for r in alone] == want


@pytest.mark.parametrize("name, inputs", [("classifier-sinusoidal", ("ids", "padding")),
                                          ("lm-rope-linear", ("ids",))])
def test_onnx_export_passes_the_checker(runs, name, inputs):
    import onnx  # Debian's python3-onnx (scripts/setup.sh)
    run = multihead.load_run(runs[name], threads=1)
    module = run.to_torch()
    sample, _ = run.sample(2)
    args = tuple(sample[k] for k in inputs)
    axes = {k: {0: "batch", 1: "length"} for k in inputs}
    axes["logits"] = {0: "batch"} if len(inputs) == 2 else {0: "batch", 1: "length"}
    f = io.BytesIO()
    torch.onnx.export(module, args, f, input_names=list(inputs), output_names=["logits"], dynamic_axes=axes,
                      opset_version=14)
    model = onnx.load_from_string(f.getvalue())
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == list(inputs)


def ort_session(path):
    ort = pytest.importorskip("onnxruntime")  # the project's .venv (python/requirements.txt)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", ["classifier-sinusoidal", "classifier-learned-cls-prenorm-gelu"])
def test_an_exported_classifier_is_what_onnx_runtimes_optimizer_fuses(runs, name, tmp_path):
    pytest.importorskip("onnxruntime")  # and its transformer optimizer: the .venv only
    from multihead.onnx_export import fuse_classifier
    run = multihead.load_run(runs[name], threads=1)
    (path,) = run.export_onnx(tmp_path)
    ops = fuse_classifier(path, tmp_path / "fused.onnx", num_heads=4, hidden_size=16)
    # Each of the 2 layers: one Attention, and its two residual sums in SkipLayerNormalization
    # (post-norm; pre-norm has the next layer's, or the final, norm after each sum); GELU's bias in it.
    assert ops.get("Attention") == 2 and ops.get("SkipLayerNormalization", 0) >= 3, ops
    if "gelu" in name:
        assert ops.get("BiasGelu") == 2, ops
    inputs, want = run.sample(4)
    inputs["padding"][1, -3:] = True  # a padded row among them
    with torch.no_grad():
        want = run.to_torch()(**inputs)
    feed = {k: v.numpy() for k, v in inputs.items()}
    for graph in (path, tmp_path / "fused.onnx"):
        assert_matches(torch.from_numpy(ort_session(graph).run(None, feed)[0]), want)


@pytest.mark.parametrize("name", ["lm-rope-gqa-prenorm", "lm-rope-gqa-prenorm-wide", "lm-learned-gelu-wide"])
def test_an_exported_language_model_decodes_with_its_cache_and_a_rope_table(runs, name, tmp_path):
    import onnx
    run = multihead.load_run(runs[name], threads=1)
    (path,) = run.export_onnx(tmp_path)
    ops = [n.op_type for n in onnx.load(path).graph.node]
    assert not set(ops) & {"Cos", "Sin", "Exp"}, "RoPE's angles are gathered from a table, not computed at each step"
    if "wide" in name:  # written around ONNX Runtime's decoding op: one a layer, and little else
        assert ops.count("GroupQueryAttention") == 2 and len(ops) < 50, ops
    else:  # heads 4 wide: traced
        assert "GroupQueryAttention" not in ops
    step = ort_session(path)
    module = run.to_torch()
    ids = torch.tensor([run.tokenizer.encode(p) for p in ("the wha", "sky was")])
    with torch.no_grad():
        want = module.generate(ids, 6)
        logits, _ = module.forward_cached(ids[:1])
    names = [i.name for i in step.get_inputs()[1:]]
    kv_heads, head_dim = step.get_inputs()[1].shape[1], step.get_inputs()[1].shape[3]

    def empty(batch):
        return {n: torch.zeros(batch, kv_heads, 0, head_dim).numpy() for n in names}

    feed, got = dict(empty(2), ids=ids.numpy()), [ids]
    for _ in range(6):
        out = step.run(None, feed)
        nxt = torch.from_numpy(out[0][:, -1].argmax(-1))[:, None]
        got.append(nxt)
        feed = dict(zip(names, out[1:]), ids=nxt.numpy())
    assert torch.equal(torch.cat(got, dim=1), want)
    # Several new tokens after a cache (batch 1): the logits the whole prompt gives them.
    cached = step.run(None, dict(empty(1), ids=ids[:1, :4].numpy()))
    out = step.run(None, dict(zip(names, cached[1:]), ids=ids[:1, 4:].numpy()))
    assert_matches(torch.from_numpy(out[0]), logits[:, 4:])


@pytest.mark.parametrize("name", ["pronunciation-rope-gqa-prenorm", "pronunciation-rope-prenorm-wide",
                                  "pronunciation-sinusoidal"])
def test_an_exported_encoder_decoder_pronounces_as_the_module_does(runs, name, tmp_path):
    import onnx
    run = multihead.load_run(runs[name], threads=1)
    encoder_path, step_path = run.export_onnx(tmp_path)
    ops = [n.op_type for n in onnx.load(step_path).graph.node]
    if "wide" in name:  # each of the 2 decoder layers' self- and cross-attention: ONNX Runtime's ops
        assert ops.count("GroupQueryAttention") == 2 and ops.count("MultiHeadAttention") == 2, ops
    else:  # RoPE in 4-wide heads, or grouped key/value heads: traced
        assert "GroupQueryAttention" not in ops
    # The encoder's 2 self-attentions: MultiHeadAttention, RoPE turned by RotaryEmbedding; traced
    # with grouped key/value heads, which MultiHeadAttention does not take.
    ops = [n.op_type for n in onnx.load(encoder_path).graph.node]
    if "gqa" in name:
        assert "MultiHeadAttention" not in ops
    else:
        assert ops.count("MultiHeadAttention") == 2 and ops.count("SkipLayerNormalization") >= 2, ops
        assert ops.count("RotaryEmbedding") == (4 if "rope" in name else 0), ops
    encoder, step = ort_session(encoder_path), ort_session(step_path)
    module = run.to_torch()
    vocab = run.tokenizer
    words = [vocab.encode(w) for w in ("BADEA", "STORMEA")]
    source = torch.full((2, 7), vocab.pad_id)
    for i, w in enumerate(words):
        source[i, :len(w)] = torch.tensor(w)
    padding = source == vocab.pad_id
    with torch.no_grad():
        want = module.generate(source, padding, vocab.start_id, vocab.end_id, max_len=8)
    memory = dict(zip([o.name for o in encoder.get_outputs()], encoder.run(None, {"source": source.numpy(),
                                                                                   "padding": padding.numpy()})))
    with torch.no_grad():  # the memory each decoder layer's cross-attention reads, at the letters
        for i, (key, value) in enumerate(module.encode(source, padding)):
            for kind, t in (("key", key), ("value", value)):
                letters = ~padding[:, None, :, None].expand_as(t)
                assert_matches(torch.from_numpy(memory[f"memory_{kind}_{i}"])[letters], t[letters])
    past = [i for i in step.get_inputs() if i.name.startswith("past_")]
    feed = {i.name: torch.zeros(2, i.shape[1], 0, i.shape[3]).numpy() for i in past}
    nxt, got = torch.full((2, 1), vocab.start_id), []
    for _ in range(want.shape[1]):
        out = step.run(None, dict(feed, ids=nxt.numpy(), padding=padding.numpy(), **memory))
        nxt = torch.from_numpy(out[0][:, -1].argmax(-1))[:, None]
        got.append(nxt)
        feed = dict(zip([i.name for i in past], out[1:]))
    got = torch.cat(got, dim=1)
    ended = torch.cumsum(got == vocab.end_id, 1) - (got == vocab.end_id).long() > 0  # after the end: free
    assert torch.equal(got[~ended], want[~ended])
    # A first step of three target tokens: the logits the module gives them.
    target = torch.tensor([[vocab.start_id, 5, 6]] * 2)
    with torch.no_grad():
        logits, _ = module.decode_cached(target, module.encode(source, padding), padding)
    empty = {i.name: torch.zeros(2, i.shape[1], 0, i.shape[3]).numpy() for i in past}
    out = step.run(None, dict(empty, ids=target.numpy(), padding=padding.numpy(), **memory))
    assert_matches(torch.from_numpy(out[0]), logits)


def test_the_export_command_writes_a_runs_graphs_and_refuses_in_one_line(runs, tmp_path):
    import sys

    def export(*args):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        return subprocess.run([sys.executable, "-m", "multihead.onnx_export", *args], capture_output=True, text=True,
                              env=env)

    out = tmp_path / "lm"
    done = export("--run", str(runs["lm-rope-gqa-prenorm-wide"]), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote {out / 'lm_step.onnx'}\n" and (out / "lm_step.onnx").stat().st_size > 0
    for args, message in ((["--run", str(runs["lm-alibi"]), "--fuse"], "--fuse takes a classifier's run; "),
                          (["--run", str(tmp_path / "missing")], str(tmp_path / "missing"))):
        refused = export(*args, "--out", str(tmp_path / "refused"))
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr.startswith("error: ") and message in refused.stderr
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert not (tmp_path / "refused").exists()  # nothing written
    pytest.importorskip("onnxruntime")  # the fusion: the .venv only
    fused = export("--run", str(runs["classifier-sinusoidal"]), "--out", str(tmp_path / "cls"), "--fuse")
    assert fused.returncode == 0, fused.stderr
    assert (tmp_path / "cls" / "classifier.fused.onnx").exists() and "classifier.fused.onnx" in fused.stdout


def test_a_run_with_no_onnx_graph_says_so(runs, tmp_path):
    with pytest.raises(ValueError, match="export_onnx exports classifiers, language models and encoder-decoders, "
                                         "not image_classification"):
        multihead.load_run(runs["image"]).export_onnx(tmp_path)


def test_weights_changed_in_pytorch_fine_tune_in_multihead_and_come_back(runs, data, tmp_path):
    import hashlib
    source_dir = runs["classifier-rope-gqa"]
    source = multihead.load_run(source_dir, threads=1)
    module = source.to_torch(dropout=0.0).train()
    inputs, _ = source.sample(6)
    opt = torch.optim.SGD(module.parameters(), lr=0.5)
    torch.nn.functional.cross_entropy(module(**inputs), torch.tensor([0, 1, 0, 1, 0, 1])).backward()
    opt.step()
    weights = tmp_path / "from_pytorch.safetensors"
    multihead.save_state_dict(module.state_dict(), weights)
    # A step too small to move anything: the run holds PyTorch's weights, under its tokenizer.
    config = classifier(data, positions="rope", num_kv_heads=2)
    config["tokenizer"] = {"from": str(source_dir)}
    config["train"] = dict(TRAIN, max_steps=1, lr=1e-12, weight_decay=0.0)
    config["train"]["init_from"] = str(weights)
    tuned = multihead.load_run(train(tmp_path, "tuned", config), threads=1)
    assert tuned.config["train"]["init_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert tuned.tokenizer.encode("good film") == source.tokenizer.encode("good film")
    got = tuned.state_dict()
    for name, w in module.state_dict().items():
        torch.testing.assert_close(got[name], w, rtol=0, atol=1e-6)
    # And back in PyTorch, the same outputs as multihead's.
    inputs, want = tuned.sample(6)
    with torch.no_grad():
        assert_matches(tuned.to_torch()(**inputs), want)


def test_the_registry_of_kinds_is_the_librarys():
    # The Python package reads the kinds from the library (tasks/kinds.h), so a kind added there is
    # known here with nothing else to change.
    from multihead import _multihead
    kinds = {k["task"]: (k["answers"], k["model"]) for k in _multihead.kinds()}
    assert kinds == {"text_classification": ("classify", "sequence_classifier"),
                     "language_modeling": ("generate", "language_model"),
                     "image_classification": ("none", "vision_transformer"),
                     "sequence_task": ("none", "language_model"),
                     "pronunciation": ("pronounce", "encoder_decoder"),
                     "word_stress": ("none", "sequence_classifier")}
