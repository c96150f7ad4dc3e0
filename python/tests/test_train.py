# SPDX-License-Identifier: Apache-2.0
"""multihead.train: the library's training loop from Python, with each record the run writes going
to on_step, a clean stop (on_step's False, Ctrl-C, an exception in on_step) that keeps the
checkpoint and resumes to the weights of an uninterrupted run, and the GIL released meanwhile."""

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

import multihead


def job(data_path, epochs=3):
    return {"task": "text_classification", "max_len": 8, "threads": 1,
            "data": {"source": "csv", "path": str(data_path)}, "tokenizer": {"kind": "word", "vocab_size": 32},
            "model": {"d_model": 16, "nhead": 2, "num_layers": 1, "dim_feedforward": 32},
            "train": {"epochs": epochs, "batch": 8, "lr": 0.01, "warmup_steps": 0}}


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "reviews.csv"
    with open(path, "w") as f:
        f.write("text,label\n")
        for _ in range(20):
            f.write("good great fine day,pos\nbad awful poor day,neg\n")
    return path


def steps_of(records):
    return [r["step"] for r in records if "loss" in r]


def weights(run):
    return {k: v.numpy() for k, v in run.state_dict().items()}


def test_a_job_trains_with_every_record_seen_and_returns_the_run(reviews, tmp_path):
    seen = []
    run = multihead.train(job(reviews), tmp_path / "run", on_step=seen.append)
    assert isinstance(run, multihead.Run) and not run.stopped
    assert run.task == "text_classification" and sorted(run.labels) == ["neg", "pos"]
    written = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert seen == [r for r in written if "test_loss" not in r]  # the steps' and validations' records
    steps = steps_of(seen)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 9
    assert all({"loss", "lr", "grad_norm"} <= set(r) for r in seen if "loss" in r)
    assert sum("validation_loss" in r for r in seen) == 3  # one an epoch
    assert run.predict(["good great fine day"])[0]["label"] in ("pos", "neg")
    # The same job from a file, and a preset's name that is no preset.
    (tmp_path / "job.json").write_text(json.dumps(job(reviews, epochs=1)))
    assert not multihead.train(str(tmp_path / "job.json"), tmp_path / "from-file").stopped
    with pytest.raises(multihead.ConfigError, match="unknown preset 'spma'"):
        multihead.train("spma", tmp_path / "nothing")
    with pytest.raises(multihead.ConfigError, match="train: unknown key 'epoch'"):
        multihead.train(dict(job(reviews), train={"epoch": 1}), tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()


def test_the_hosts_thread_count_is_restored_after_each_call(reviews, tmp_path):
    # The job asks for 1 thread and the loaded run for 2; the host's count (3 here) is what the
    # calling thread has again after train, load_run and every answer.
    from multihead import _multihead
    host = _multihead.num_threads()
    try:
        _multihead.set_num_threads(3)
        run = multihead.train(job(reviews, epochs=1), tmp_path / "run")
        assert _multihead.num_threads() == 3
        loaded = multihead.load_run(tmp_path / "run", threads=2)
        assert _multihead.num_threads() == 3
        loaded.predict(["good day"]), loaded.embed(["good day"]), loaded.attention("good day"), run.sample(2)
        assert _multihead.num_threads() == 3
        with _multihead.ThreadCount(1):
            assert _multihead.num_threads() == 1
        assert _multihead.num_threads() == 3
        with pytest.raises(multihead.ConfigError, match="threads must be in"):
            multihead.load_run(tmp_path / "run", threads=-1)
    finally:
        _multihead.set_num_threads(host)


@pytest.fixture(scope="module")
def uninterrupted(reviews, tmp_path_factory):
    return weights(multihead.train(job(reviews), tmp_path_factory.mktemp("whole") / "run"))


def test_on_step_stops_the_run_which_resumes_as_if_never_stopped(reviews, tmp_path, uninterrupted):
    out = tmp_path / "run"
    run = multihead.train(job(reviews), out, on_step=lambda r: r.get("step") != 4 or "loss" not in r)
    assert run.stopped
    assert steps_of(json.loads(line) for line in open(out / "metrics.jsonl")) == [1, 2, 3, 4]
    assert not (out / "results.json").exists()
    run.predict(["good day"])  # the checkpoint of step 4 answers
    resumed = multihead.train(job(reviews), out, resume=True)
    assert not resumed.stopped
    for name, w in weights(resumed).items():
        np.testing.assert_array_equal(w, uninterrupted[name], err_msg=name)


def test_ctrl_c_stops_the_run_and_raises_keyboard_interrupt(reviews, tmp_path, uninterrupted):
    out = tmp_path / "run"

    def interrupt(record):
        if record.get("step") == 3 and "loss" in record:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: Python's handler raises KeyboardInterrupt here

    with pytest.raises(KeyboardInterrupt):
        multihead.train(job(reviews), out, on_step=interrupt)
    assert steps_of(json.loads(line) for line in open(out / "metrics.jsonl")) == [1, 2, 3]
    resumed = multihead.train(job(reviews), out, resume=True)
    for name, w in weights(resumed).items():
        np.testing.assert_array_equal(w, uninterrupted[name], err_msg=name)


def test_an_exception_in_on_step_stops_the_run_and_is_raised(reviews, tmp_path):
    def fail(record):
        if record.get("step") == 2:
            raise RuntimeError("the dashboard is down")

    with pytest.raises(RuntimeError, match="the dashboard is down"):
        multihead.train(job(reviews), tmp_path / "run", on_step=fail)
    assert (tmp_path / "run" / "checkpoints" / "last.safetensors").exists()


def test_python_threads_run_while_a_step_computes(tmp_path):
    """A counter thread counts on while a step computes: between two steps' records it counts at
    least a third of what it counts alone in that time. Were the GIL held, it would count only in the
    few milliseconds the callbacks hand it over."""
    (tmp_path / "text.txt").write_text("the whale swam on and on. the sea was calm, the sky was grey.\n" * 200)
    lm = {"task": "language_modeling", "threads": 1, "data": {"path": str(tmp_path / "text.txt")},
          "tokenizer": {"kind": "char"}, "eval_every": 100, "eval_windows": 1, "sample": {"tokens": 1},
          "model": {"d_model": 128, "nhead": 4, "num_layers": 2},
          "train": {"steps": 4, "batch": 16, "seq_len": 128, "warmup_steps": 0}}
    ticks, done = [0], threading.Event()

    def count():
        while not done.is_set():
            ticks[0] += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        t0, c0 = time.monotonic(), ticks[0]
        time.sleep(0.2)
        rate = (ticks[0] - c0) / (time.monotonic() - t0)  # alone, with the GIL to itself
        marks = []
        multihead.train(lm, tmp_path / "run", on_step=lambda r: marks.append((time.monotonic(), ticks[0])))
    finally:
        done.set()
        t.join()
    (t2, c2), (t3, c3) = marks[1], marks[2]  # steps 2 and 3
    assert t3 - t2 > 0.02, "a step too short to tell"
    assert c3 - c2 > rate * (t3 - t2) / 3, (c3 - c2, rate * (t3 - t2))


def test_a_binary_runs_ranking_is_scikit_learns(tmp_path):
    """results.json's ROC and precision-recall curves, their areas and the positive class are
    scikit-learn's roc_curve, roc_auc_score and average_precision_score on the run's own test
    probabilities (data with label noise, so that the ranking is imperfect and ties occur)."""
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(5)
    words = ["good", "great", "fine", "bad", "awful", "poor", "day", "film", "plot", "acting"]
    path = tmp_path / "noisy.csv"
    with open(path, "w") as f:
        f.write("text,label\n")
        for _ in range(150):
            text = " ".join(rng.choice(words, size=4))
            positive = sum(w in ("good", "great", "fine") for w in text.split()) >= 1
            if rng.random() < 0.2:
                positive = not positive
            f.write(f"{text},{'yes' if positive else 'no'}\n")
    run = multihead.train(job(path, epochs=2), tmp_path / "run")
    test = json.load(open(tmp_path / "run" / "results.json"))["test"]
    positive = run.labels[1]
    assert test["positive_class"] == positive
    texts, truth = run.test_texts()
    scores = [a["probabilities"][positive] for a in run.predict(texts)]
    y = [t == positive for t in truth]
    assert 0 < sum(y) < len(y)
    assert test["roc_auc"] == pytest.approx(sklearn_metrics.roc_auc_score(y, scores), abs=1e-9)
    assert test["average_precision"] == pytest.approx(sklearn_metrics.average_precision_score(y, scores), abs=1e-9)
    fpr, tpr, thresholds = sklearn_metrics.roc_curve(y, scores, drop_intermediate=False)
    np.testing.assert_allclose(test["roc"]["fpr"], fpr, atol=1e-12)
    np.testing.assert_allclose(test["roc"]["tpr"], tpr, atol=1e-12)
    np.testing.assert_allclose(test["roc"]["thresholds"], thresholds[1:], atol=1e-6)  # sklearn's first is +inf
    # A threshold labels as the CLI's --threshold does: the positive class from it up.
    middle = sorted(scores)[len(scores) // 2]
    for a, s in zip(run.predict(texts, threshold=middle), scores):
        assert a["label"] == (positive if s >= middle else run.labels[0]) and a["threshold"] == middle
    with pytest.raises(multihead.ConfigError, match="a probability in"):
        run.predict(texts[:1], threshold=1.5)
    for chosen in json.load(open(tmp_path / "run" / "results.json"))["thresholds"]:  # on the validation split
        assert chosen["validation_precision"] >= chosen["precision_goal"]
    assert (tmp_path / "run" / "plots" / "roc.png").stat().st_size > 0
    assert (tmp_path / "run" / "plots" / "precision_recall.png").stat().st_size > 0
