# SPDX-License-Identifier: Apache-2.0
"""multihead.load_run on runs that `multihead train` (the CLI) wrote: a classifier's predictions
and attention, a language model's samples, and clear errors."""

import json
import random
import os
import subprocess

import numpy as np
import pytest

import multihead

CLI = os.environ.get("MULTIHEAD_CLI", "build/multihead")


def train(tmp_path, name, *args):
    out = tmp_path / name
    subprocess.run([CLI, "train", "--quiet", "--threads", "1", "--out", str(out), *args], check=True,
                   capture_output=True)
    return out


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("classifier")
    with open(tmp / "tiny.csv", "w") as f:
        f.write("text,label\n")
        pos = ["good great fine", "great good day", "fine good nice", "nice great good"]
        neg = ["bad awful poor", "poor bad day", "awful poor bad", "bad poor nasty"]
        for r in range(12):
            f.write(f"{pos[r % 4]},pos\n{neg[r % 4]},neg\n")
    return train(tmp, "run", "--source", "csv", "--data", str(tmp / "tiny.csv"), "--tokenizer", "word",
                 "--vocab-size", "64", "--epochs", "8", "--d-model", "16", "--num-heads", "2", "--num-layers", "1",
                 "--batch", "4", "--max-len", "8", "--lr", "0.01")


def test_a_classifier_predicts_with_its_labels_and_shows_its_attention(classifier_run):
    run = multihead.load_run(classifier_run, threads=1)
    assert run.task == "text_classification"
    assert run.labels == json.load(open(classifier_run / "results.json"))["labels"]
    assert sorted(run.labels) == ["neg", "pos"]
    preds = run.predict(["good great fine", "bad awful poor"])
    assert [p["label"] for p in preds] == ["pos", "neg"]
    for p in preds:
        assert set(p["probabilities"]) == {"pos", "neg"}
        assert sum(p["probabilities"].values()) == pytest.approx(1.0)
        assert p["probabilities"][p["label"]] == max(p["probabilities"].values())
        assert "truncated" not in p
    # More words than the model's 8 tokens: read from the first ones, and said so, as predict --json does.
    long_text = "good great fine " * 10
    (cut,) = run.predict([long_text])
    assert cut["truncated"] is True
    assert cut["probabilities"] == pytest.approx(run.predict(["good great fine good great fine good"])[0]["probabilities"])
    att = run.attention("good great day", max_tokens=8)
    assert att["tokens"] == ["<cls>", "good", "great", "day"]
    w = att["weights"]
    assert isinstance(w, np.ndarray) and w.shape == (1, 2, 4, 4) and w.dtype == np.float32
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    assert att["prediction"] in ("pos", "neg")
    with pytest.raises(ValueError, match="generate needs a language model run"):
        run.generate("good")
    with pytest.raises(ValueError, match="has no text"):
        run.predict([""])
    with pytest.raises(ValueError, match="has no text"):  # NUL alone is no more a text than a space
        run.predict(["\x00"])
    with pytest.raises(ValueError, match="has no text"):
        run.predict([" \t "])
    assert run.warnings == []


def test_a_classifier_gives_its_test_split_as_text(classifier_run):
    run = multihead.load_run(classifier_run, threads=1)
    texts, labels = run.test_texts()
    written = [line.rsplit(",", 1) for line in (classifier_run.parent / "tiny.csv").read_text().splitlines()[1:]]
    assert 0 < len(texts) == len(labels) < len(written)  # a split of the 24 rows
    assert all([t, label] in written for t, label in zip(texts, labels))
    # The split the run was tested on: its accuracy over these texts is the one results.json records.
    right = sum(p["label"] == label for p, label in zip(run.predict(texts), labels))
    assert right / len(texts) == pytest.approx(json.load(open(classifier_run / "results.json"))["test_accuracy"])


def test_a_classifier_answers_many_texts_as_it_answers_each(classifier_run):
    # Texts of every length, and far past max_len (8 tokens: only the first 7 are read), in batches
    # sorted by length: each answer is that text's alone, in the order given; a bad text among them
    # is reported, whichever batch it falls in.
    run = multihead.load_run(classifier_run, threads=2)
    rng = random.Random(4)
    words = ["good", "great", "fine", "bad", "awful", "poor", "day", "film"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(300)]
    texts += ["good " * 7 + "bad " * 100000, b"good " * 7 + b"\xff"]  # the rest unread, but checked as UTF-8
    together = run.predict(texts[:-1])
    for text, got in zip(texts[:-1], together):
        alone = run.predict([text])[0]
        assert got["label"] == alone["label"]
        assert got["probabilities"] == pytest.approx(alone["probabilities"], rel=1e-5, abs=1e-6)
    assert together[-1]["probabilities"] == pytest.approx(run.predict(["good " * 7])[0]["probabilities"], rel=1e-5)
    with pytest.raises(ValueError, match="a text to classify: invalid UTF-8 at byte 35"):
        run.predict(texts)


def test_a_language_model_generates(tmp_path):
    with open(tmp_path / "tiny.txt", "w") as f:
        f.write("the whale swam on. the sea was calm.\n" * 60)
    out = train(tmp_path, "lm", "--preset", "moby-dick", "--data", str(tmp_path / "tiny.txt"), "--steps", "20",
                "--d-model", "16", "--num-heads", "2", "--num-layers", "1", "--batch", "4", "--max-len", "16")
    run = multihead.load_run(out, threads=1)
    assert run.task == "language_modeling"
    text = run.generate("the wh", tokens=12, temperature=0)
    assert text.startswith("the wh") and len(text) == len("the wh") + 12
    assert run.generate("the wh", tokens=12, temperature=0) == text  # greedy is deterministic
    # A length past the bound is refused at once (2**62 never returned).
    with pytest.raises(ValueError, match=r"tokens to generate must be in \[0, 65536\], got 4611686018427387904"):
        run.generate("the wh", tokens=2**62)
    att = run.attention("the whale", max_tokens=5)
    assert att["weights"].shape == (1, 2, 5, 5)
    assert att["prediction"] is None
    np.testing.assert_allclose(np.triu(att["weights"][0, 0], 1), 0.0)  # causal
    with pytest.raises(ValueError, match="a language_modeling run has no classes"):
        run.labels


def test_a_pronunciation_model_pronounces_words(tmp_path):
    sounds = {"A": "AE1", "B": "B", "C": "K", "D": "D"}
    dict_words = sorted({a + b + c + d for a in "ABCD" for b in "ABCD" for c in "ABCD" for d in "ABCD"})[:120]
    with open(tmp_path / "dict.txt", "w") as f:
        for w in dict_words:
            f.write(w + "  " + " ".join(sounds[c] for c in w) + "\n")
    out = train(tmp_path, "words", "--preset", "cmudict", "--data", str(tmp_path / "dict.txt"), "--epochs", "1",
                "--d-model", "16", "--num-heads", "2", "--num-layers", "1", "--batch", "16")
    run = multihead.load_run(out, threads=1)
    assert run.task == "pronunciation"
    got = run.pronounce(["abcd", "DCBA"], n_best=3)
    assert len(got) == 2 and all(len(alternatives) == 3 for alternatives in got)
    scores = [a["score"] for a in got[0]]
    assert scores == sorted(scores, reverse=True)
    assert all(isinstance(p, str) for p in got[0][0]["phonemes"])
    assert run.pronounce(["abcd"])[0][0]["phonemes"] == got[0][0]["phonemes"]  # the best of the n-best
    att = run.attention("CAB")
    assert att["tokens"] == ["C", "A", "B"] and att["weights"].shape == (1, 2, 3, 3)
    # Its test split and its vocabularies, as a benchmark or another framework reads them.
    words, answers = run.test_texts()
    assert 0 < len(words) < len(dict_words) and all(answers[i] == " ".join(sounds[c] for c in w).replace("1", "")
                                                    for i, w in enumerate(words))
    tok = run.tokenizer
    assert tok.encode("cab") == tok.encode("CAB") and len(tok.encode("CAB")) == 3
    assert [tok.letters[i - 2] for i in tok.encode("CAB")] == ["C", "A", "B"]
    assert tok.encode("CAZ")[2] == 1  # a letter no training word has
    assert tok.decode([3 + tok.phonemes.index("K"), 3 + tok.phonemes.index("B")]) == ["K", "B"]
    assert (tok.pad_id, tok.start_id, tok.end_id) == (0, 1, 2)
    with pytest.raises(ValueError, match="the model reads at most"):
        run.pronounce(["A" * 500])
    with pytest.raises(ValueError, match="pronounce needs a pronunciation run"):
        multihead.load_run(train(tmp_path, "lm", "--preset", "moby-dick", "--data", str(tmp_path / "dict.txt"),
                                 "--steps", "2", "--d-model", "16", "--num-heads", "2", "--max-len", "8")
                           ).pronounce(["abc"])


def test_runs_that_cannot_be_loaded_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="cannot open"):
        multihead.load_run(tmp_path / "nothing")
    # A sequence task's run loads (its config, weights and to_torch), and answers no text.
    out = train(tmp_path, "seq", "--preset", "reverse", "--steps", "2", "--d-model", "16", "--num-heads", "2")
    run = multihead.load_run(out)
    assert run.task == "sequence_task" and run.tokenizer is None and run.warnings == []
    with pytest.raises(ValueError, match="test_texts needs a text classification or pronunciation run; this run's "
                                        "task is sequence_task"):
        run.test_texts()
    for call in (lambda: run.predict(["1 2"]), lambda: run.generate("1"), lambda: run.attention("1"),
                 lambda: run.labels):
        with pytest.raises(ValueError, match="this run's task is sequence_task"):
            call()
