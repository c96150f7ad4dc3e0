# SPDX-License-Identifier: Apache-2.0
"""multihead.load_run: a run directory of `multihead train`, for answers and for PyTorch."""

import json
import os

from . import _multihead as _mh

# The registry of kinds, by task: what each kind's loaded run answers ("none", "classify",
# "generate", "pronounce") and the model it holds (tasks/kinds.h).
_KINDS = {k["task"]: k for k in _mh.kinds()}


class Run:
    """A finished run of `multihead train`: its job (config), its weights, its tokenizer, and its
    model as a torch.nn.Module (to_torch). Classifiers predict, language models generate,
    pronunciation runs pronounce, and those three show their attention.

    threads: the kernels' threads (0: all cores); precision: "fp32", "bf16" or "fp16" activations, or
    "int8" products (weights per output channel, activations per row); "" the run's own.
    """

    def __init__(self, path, threads=0, precision=""):
        self.path = os.fspath(path)
        self.stopped = False  # multihead.train: stopped before its end
        self.config = json.loads(_mh.run_config(self.path))
        self.task = self.config.get("task", next(iter(_KINDS)))
        if self.task not in _KINDS:
            raise ValueError(f"{self.path}: task must be one of {', '.join(_KINDS)}, got '{self.task}'")
        self._kind = _KINDS[self.task]
        self._threads = threads  # for each call of the kernels; the host's own count is restored after
        _mh.ThreadCount(threads)  # checks it now
        answers = self._kind["answers"]
        self._answers = _mh.load_run(self.path, threads, precision) if answers != "none" else None
        if answers in ("classify", "generate"):  # text read by the run's tokenizer
            self.tokenizer = _mh.run_tokenizer(self.path, self.config["model"]["vocab_size"])
        elif answers == "pronounce":  # words to letter ids, phoneme ids to symbols
            self.tokenizer = _mh.run_pronunciation_vocab(self.path)
        else:
            self.tokenizer = None

    def __repr__(self):
        return f"multihead.Run({self.path!r}, task={self.task!r})"

    def _compute(self, what, method, *args):
        """The loaded run's method, on the run's threads."""
        run = self._answering(what)
        with _mh.ThreadCount(self._threads):
            return getattr(run, method)(*args)

    def _answering(self, what):
        if self._answers is None:
            nouns = [k["noun"] for k in _KINDS.values() if k["answers"] != "none"]
            raise ValueError(f"{what} needs a run of {', '.join(nouns[:-1])} or {nouns[-1]}; this "
                             f"run's task is {self.task}")
        return self._answers

    @property
    def labels(self):
        """A classifier's class names, in the order of its logits."""
        return self._answering("labels").labels

    @property
    def warnings(self):
        """What the load noticed and worked around (a classifier without results.json)."""
        return self._answers.warnings if self._answers is not None else []

    def predict(self, texts, threshold=None):
        """Each text's label and class probabilities: [{'label': ..., 'probabilities': {...}}].
        threshold (two-class runs): the second class, the positive one, is the label from this
        probability up, as `predict --threshold` and serve's "threshold" label (results.json's
        "thresholds" gives those that reach a precision on the validation split)."""
        answers = self._compute("predict", "predict", texts)
        if threshold is None:
            return answers
        labels = self.labels
        if len(labels) != 2 or not 0 <= threshold <= 1:
            raise _mh.ConfigError(f"threshold applies to two-class classifiers, a probability in [0, 1]; this run has "
                              f"{len(labels)} classes and the threshold is {threshold}")
        for a in answers:
            a["label"] = labels[1] if a["probabilities"][labels[1]] >= threshold else labels[0]
            a["threshold"] = threshold
        return answers

    def save_pretrained(self, path):
        """Writes the run in transformers' layout (config.json, model.safetensors, tokenizer.json)
        into the new directory `path`, for from_pretrained: a classifier fine-tuned from a BERT,
        RoBERTa, DistilBERT or ELECTRA checkpoint as its ...ForSequenceClassification, a language
        model fine-tuned from GPT-2 as GPT2LMHeadModel."""
        return _mh.export_run(self.path, "hf", os.fspath(path))

    def embed(self, texts):
        """Each text's sentence embedding, an array (len(texts), d_model) of float32: pooled and
        normalised as a checkpoint's sentence-transformers modules say (else mean over its tokens)."""
        return self._compute("embed", "embed", list(texts))

    def generate(self, prompt, tokens=200, temperature=0.8, top_k=0, top_p=0.95, seed=0):
        """A language model's continuation of prompt (temperature 0: greedy). A list of prompts of
        equal token count is continued together, a batch row each (one product per layer for all
        at each step), and gives a list; the first is what that prompt alone gives."""
        if isinstance(prompt, (list, tuple)):
            return self._compute("generate", "generate_batch", list(prompt), tokens, temperature, top_k, top_p, seed)
        return self._compute("generate", "generate", prompt, tokens, temperature, top_k, top_p, seed)

    def pronounce(self, words, n_best=1, beam=0):
        """A pronunciation run's n_best pronunciations of each word, best first."""
        return self._compute("pronounce", "pronounce", words, n_best, beam)

    def attention(self, text, max_tokens=64):
        """Every layer's and head's attention over text: {'tokens', 'weights' (layers, heads, T, T),
        'prediction'}."""
        return self._compute("attention", "attention", text, max_tokens)

    def state_dict(self):
        """The last checkpoint's weights by PyTorch state_dict name, as torch tensors."""
        import torch
        return {name: torch.from_numpy(w) for name, w in _mh.run_weights(self.path).items()}

    def to_torch(self, dropout=None, pytorch_layers=True):
        """The run's model as a torch.nn.Module (multihead.modules) holding its weights under the
        same names, in eval mode. It needs nothing but PyTorch: save it, fine-tune it, export it.
        dropout: instead of the run's (0: training mode computes what eval mode does).
        pytorch_layers=False: multihead.modules' own layers throughout, even where PyTorch's
        nn.TransformerEncoderLayer would compute the same; export to ONNX so, since the graph
        torch.onnx.export traces from nn.MultiheadAttention keeps the length it was traced with."""
        from . import modules
        weights = self.state_dict()
        model = dict(self.config["model"])
        if dropout is not None:
            model["dropout"] = dropout
        for table in ("pos_embedding.weight", "source_positions.weight"):
            if table in weights:  # a learned table's length is its checkpoint's
                model["max_len"] = weights[table].shape[0]
        family = self._kind["model"]
        if family == "sequence_classifier":
            module = modules.SequenceClassifier(model, weights["embedding.weight"].shape[0],
                                                weights["classifier.weight"].shape[0], pytorch_layers)
        elif family == "language_model":
            module = modules.LanguageModel(model, weights["embedding.weight"].shape[0], pytorch_layers)
        elif family == "vision_transformer":
            module = modules.VisionTransformer(model, pytorch_layers)
        elif family == "encoder_decoder":
            module = modules.EncoderDecoder(model, weights["source_embedding.weight"].shape[0],
                                            weights["target_embedding.weight"].shape[0],
                                            self.config.get("decoder_layers", 0), pytorch_layers)
        else:
            raise ValueError(f"to_torch does not know the model family {family} of {self.task}")
        module.load_state_dict(weights)
        return module.eval()

    def export_onnx(self, directory):
        """The run's model as ONNX graphs in directory (created if missing), traced from
        to_torch(pytorch_layers=False) in the shape ONNX Runtime's transformer optimizer fuses
        (multihead.onnx_export): a classifier's (ids, padding) -> logits "classifier.onnx"; a
        language model's decoding step with its KV cache "lm_step.onnx"; an encoder-decoder's
        encoder "s2s_encoder.onnx" and decoding step "s2s_step.onnx", each replacing a file of its
        name there. Returns their paths."""
        import torch
        from . import onnx_export
        kind = onnx_export.FAMILY_GRAPHS.get(self._kind["model"])
        if kind is None:
            raise ValueError(f"export_onnx exports classifiers, language models and encoder-decoders, not {self.task}")
        module = self.to_torch(pytorch_layers=False)
        vocab = (module.source_embedding if kind == "s2s" else module.embedding).weight.shape[0]
        rows, length = (1, 5) if kind == "lm" else (2, 6)
        ids = torch.randint(0, vocab, (rows, length), generator=torch.Generator().manual_seed(0))
        padding = torch.zeros(rows, length, dtype=torch.bool)
        if kind != "lm":
            padding[1, length - 2:] = True  # traced with padding: the masked path
        os.makedirs(directory, exist_ok=True)
        return onnx_export.export_module(kind, module, directory, ids, padding)

    def test_texts(self):
        """The run's test split, as its training split it (the data must still be where the run read
        it): a text classifier's (texts, label names); a pronunciation run's (words, each word's first
        pronunciation, phonemes joined by spaces)."""
        inputs, answers = _mh.run_test_texts(self.path)
        return list(inputs), list(answers)

    def sample(self, examples=8, training=False):
        """A batch of the run's own test data as its model reads it, and multihead's fp32 logits for
        it: (inputs, logits), inputs a dict of torch tensors named as to_torch()'s forward arguments.
        training: in training mode with dropout 0. What to check a module from to_torch() against."""
        import torch
        with _mh.ThreadCount(self._threads):
            inputs, logits = _mh.sample_run_model(self.path, examples, training)
        return {k: torch.from_numpy(v) for k, v in inputs.items()}, torch.from_numpy(logits)


def save_state_dict(state_dict, path):
    """Writes a PyTorch state_dict (name -> tensor) as a safetensors file of float32 tensors, which
    `multihead train --init-from PATH` starts from (safetensors.torch.save_file writes the same)."""
    _mh.save_state_dict(os.fspath(path), {name: t.detach().cpu().float().contiguous().numpy()
                                          for name, t in state_dict.items()})


def train(config, out, on_step=None, resume=False, overwrite=False, quiet=True):
    """Trains a job with the library's training loop, as `multihead train` does, into the run
    directory `out`, and returns the run loaded (multihead.Run).

    config: a dict in the JSON job format (docs/CONFIG.md), a preset's name ("spam", "reverse", ...)
    or the path of a JSON file. resume: go on from the run in `out` (or continue it past its end
    with more steps); overwrite: replace it. quiet=False prints the progress as the CLI does.
    on_step(record) sees each record the run writes to metrics.jsonl, as a dict: a step's (step,
    loss, lr, grad_norm, memory, ...) or a validation's (step, validation_loss, ...). Returning False
    stops the run after that step with its checkpoint kept, as Ctrl-C does (which then raises
    KeyboardInterrupt); resume=True goes on from there. The run's `stopped` says whether it stopped
    before its end. Python threads run while it computes (the GIL is released).
    """
    if isinstance(config, dict):
        kind, text = "json", json.dumps(config)
    elif isinstance(config, (str, os.PathLike)) and (os.path.isfile(config) or os.fspath(config).endswith(".json")):
        kind, text = "file", os.fspath(config)
    elif isinstance(config, str):
        kind, text = "preset", config
    else:
        raise TypeError(f"config must be a dict, a preset name or a file, got {type(config).__name__}")
    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other")
    mode = "resume" if resume else "overwrite" if overwrite else "new"
    stopped = _mh.train(kind, text, os.fspath(out), mode, on_step, quiet)
    run = Run(out)
    run.stopped = stopped
    return run


def load_run(path, threads=0, precision=""):
    """The run directory of `multihead train` at path (multihead.Run)."""
    return Run(path, threads, precision)
