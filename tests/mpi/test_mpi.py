# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training under mpirun (`mpirun -np N multihead train ...`), on this machine over loopback.

N ranks with grad_accumulation A run the step's N*A micro-batches that one process with grad_accumulation N*A
runs, with the same dropout masks: the losses agree within float rounding (the gradient sums differ in order).
The ordered reduction gives the same bits on every run. Resume needs the rank count the run had; a killed rank
ends the run with an error, and its last checkpoint resumes it; bad input ends every rank with one error line.
"""

import json
import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

CLI = os.environ.get("MULTIHEAD_CLI", "build/multihead")
MPIRUN = shutil.which("mpirun")

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (scripts/setup.sh installs openmpi-bin)")

ENV = dict(os.environ,
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",  # CI runs as root
           # Containers often forbid the cross-process memory attach Open MPI's shared-memory transport tries first.
           OMPI_MCA_btl_vader_single_copy_mechanism="none",
           OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")

# The synthetic reversal task: no data files, ~5 ms a step.
REVERSE = ["--preset", "reverse", "--threads", "1", "--batch", "24", "--d-model", "32"]


def mpirun(n, *args):
    return [MPIRUN, "-np", str(n), "--oversubscribe", "--bind-to", "none", CLI, *args]


def run(cmd, check=True, timeout=120):
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} exited {p.returncode}:\n{p.stderr}")
    return p


def train(n, out, *args, check=True):
    base = ["train", "--quiet", "--out", str(out), *args]
    return run(mpirun(n, *base) if n > 1 else [CLI, *base], check=check)


def steps(out):
    return [r for r in map(json.loads, open(out / "metrics.jsonl")) if "loss" in r and "step" in r]


def assert_same_losses(a, b, rel):
    sa, sb = steps(a), steps(b)
    assert [r["step"] for r in sa] == [r["step"] for r in sb]
    for x, y in zip(sa, sb):
        assert x["loss"] == pytest.approx(y["loss"], rel=rel), x["step"]
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=100 * rel), x["step"]


@pytest.mark.parametrize("ranks, accumulation", [(2, 1), (3, 1), (2, 2)])
def test_ranks_train_as_one_process_that_runs_their_micro_batches(tmp_path, ranks, accumulation):
    train(ranks, tmp_path / "ranks", *REVERSE, "--steps", "20", "--grad-accumulation", str(accumulation))
    train(1, tmp_path / "one", *REVERSE, "--steps", "20", "--grad-accumulation", str(ranks * accumulation))
    assert_same_losses(tmp_path / "ranks", tmp_path / "one", rel=1e-6)
    assert all(r["ranks"] == ranks for r in steps(tmp_path / "ranks"))
    res = json.load(open(tmp_path / "ranks" / "results.json"))
    one = json.load(open(tmp_path / "one" / "results.json"))
    assert res.pop("ranks") == ranks and "ranks" not in one
    del res["machine"], one["machine"]
    assert res.keys() == one.keys() and res["by_length"]
    for x, y in zip(res["by_length"], one["by_length"]):
        assert x == pytest.approx(y, abs=1e-3)  # accuracies of the same model, bar rounding
    assert f"{ranks} ranks (MPI" in (tmp_path / "ranks" / "report.md").read_text()
    # Rank 0 alone wrote the run: one record a step, nothing the other ranks made.
    assert len(steps(tmp_path / "ranks")) == 20
    assert sorted(p.name for p in (tmp_path / "ranks").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())


def test_dropout_masks_and_the_tokenizer_are_shared(tmp_path):
    csv = tmp_path / "tiny.csv"
    pos = ["good great fine", "great good day", "fine good nice", "nice great good"]
    neg = ["bad awful poor", "poor bad day", "awful poor bad", "bad poor nasty"]
    csv.write_text("text,label\n" + "".join(f"{pos[r % 4]},pos\n{neg[r % 4]},neg\n" for r in range(16)))
    job = ["--source", "csv", "--data", str(csv), "--tokenizer", "word", "--vocab-size", "64", "--epochs", "3",
           "--d-model", "16", "--num-heads", "2", "--num-layers", "1", "--batch", "8", "--max-len", "8",
           "--lr", "0.01", "--dropout", "0.2", "--threads", "1"]
    train(2, tmp_path / "ranks", *job)
    train(1, tmp_path / "one", *job, "--grad-accumulation", "2")
    assert_same_losses(tmp_path / "ranks", tmp_path / "one", rel=1e-6)
    # Rank 0 validates once an epoch, as one process does.
    evals = lambda out: [r for r in map(json.loads, open(out / "metrics.jsonl")) if "validation_loss" in r]
    assert len(evals(tmp_path / "ranks")) == len(evals(tmp_path / "one")) == 3
    for x, y in zip(evals(tmp_path / "ranks"), evals(tmp_path / "one")):
        assert x["validation_loss"] == pytest.approx(y["validation_loss"], rel=1e-5)


def regular_dictionary(path):
    """150 words in CMUdict's format, one phoneme a letter (as data/cmudict.h's regular_spelling_dictionary)."""
    sounds = ["AE1", "B", "K", "D", "IY0", "F"]
    lines = [";;; regular spellings"]
    for n in range(150):
        letters = [(n + 36) // 36 % 6, (n + 36) // 6 % 6, (n + 36) % 6] + [(n * 5 + i) % 6 for i in range(n % 3)]
        lines.append("".join(chr(65 + c) for c in letters) + "  " + " ".join(sounds[c] for c in letters))
    path.write_text("\n".join(lines) + "\n")


def job_of_every_model(tmp_path, kind):
    """Flags of a small job of each model kind: data written into tmp_path."""
    small = ["--d-model", "16", "--num-heads", "2", "--num-layers", "2", "--threads", "1"]
    if kind == "sequence task":
        return [*REVERSE, "--steps", "6"]
    if kind == "text classifier":
        pos, neg = ["good great fine", "great good day"], ["bad awful poor", "poor bad day"]
        (tmp_path / "tiny.csv").write_text("text,label\n" + "".join(f"{pos[r % 2]},pos\n{neg[r % 2]},neg\n" for r in range(16)))
        return ["--source", "csv", "--data", str(tmp_path / "tiny.csv"), "--tokenizer", "word", "--vocab-size", "64",
                "--epochs", "2", "--batch", "8", "--max-len", "8", "--dropout", "0.1", *small]
    if kind == "micro-batches left empty":
        # 32 micro-batches a step (2 ranks x 16). 65 training rows: the epoch's last batch holds one example, in
        # micro-batch 31, so rank 0 runs no backward in its last micro-batch and must still sum the same pieces.
        (tmp_path / "rows.csv").write_text("text,label\n" + "".join(f"word{r} good,pos\nword{r} bad,neg\n" for r in range(46)))
        return ["--source", "csv", "--data", str(tmp_path / "rows.csv"), "--tokenizer", "word", "--vocab-size", "128",
                "--epochs", "2", "--batch", "32", "--grad-accumulation", "16", "--max-len", "8", *small]
    if kind == "language model":
        (tmp_path / "text.txt").write_text("call me ishmael. some years ago never mind how long precisely. " * 20)
        return ["--preset", "moby-dick", "--data", str(tmp_path / "text.txt"), "--steps", "4", "--max-len", "32", *small]
    if kind == "vision transformer":
        def idx(path, dims, seed):
            data = bytes((i * 37 + seed) % 251 if len(dims) > 1 else (i * seed) % 10 for i in range(prod(dims)))
            path.write_bytes(bytes([0, 0, 8, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + data)
        prod = lambda d: d[0] * (d[1] * d[2] if len(d) == 3 else 1)
        d = tmp_path / "images"
        d.mkdir()
        idx(d / "train-images-idx3-ubyte", (64, 28, 28), 7)
        idx(d / "train-labels-idx1-ubyte", (64,), 3)
        idx(d / "t10k-images-idx3-ubyte", (8, 28, 28), 5)
        idx(d / "t10k-labels-idx1-ubyte", (8,), 7)
        return ["--preset", "fashion-mnist", "--data", str(d), "--epochs", "1", "--batch", "16", *small]
    assert kind == "encoder-decoder"
    regular_dictionary(tmp_path / "dict.txt")
    return ["--preset", "cmudict", "--data", str(tmp_path / "dict.txt"), "--epochs", "2", "--batch", "32", *small]


@pytest.mark.parametrize("kind", ["sequence task", "text classifier", "micro-batches left empty", "language model",
                                  "vision transformer", "encoder-decoder"])
def test_summing_each_layer_beside_the_backward_pass_changes_no_bit(tmp_path, kind):
    # With the ordered sum every element is summed in rank order however the buffer is cut, so handing each
    # layer's gradients over as soon as its backward is done must give the bits of summing after the pass:
    # a gradient handed over before it was final would show.
    job = job_of_every_model(tmp_path, kind)
    for overlap in ("true", "false"):
        train(2, tmp_path / overlap, *job, "--allreduce", "ordered", "--allreduce-overlap", overlap)
    assert_same_losses(tmp_path / "true", tmp_path / "false", rel=0)
    assert (tmp_path / "true/checkpoints/last.safetensors").read_bytes() == \
           (tmp_path / "false/checkpoints/last.safetensors").read_bytes()


def test_an_encoder_decoder_trains_on_ranks_as_in_one_process(tmp_path):
    # The pronunciation job: words of similar length batched together, the decoder's cross-attention,
    # validation by greedy decoding on rank 0.
    regular_dictionary(tmp_path / "dict.txt")
    job = ["--preset", "cmudict", "--data", str(tmp_path / "dict.txt"), "--epochs", "3", "--d-model", "16",
           "--num-heads", "2", "--num-layers", "1", "--batch", "32", "--threads", "1"]
    train(2, tmp_path / "ranks", *job)
    train(1, tmp_path / "one", *job, "--grad-accumulation", "2")
    assert_same_losses(tmp_path / "ranks", tmp_path / "one", rel=1e-5)
    res, one = (json.load(open(tmp_path / d / "results.json")) for d in ("ranks", "one"))
    assert res["ranks"] == 2
    assert res["test_wer"] == pytest.approx(one["test_wer"], abs=0.02)


def test_non_finite_steps_are_skipped_on_every_rank_as_in_one_process(tmp_path):
    # A learning rate of 1e38 turns the weights to Inf after one SGD step; every later gradient is NaN on every
    # rank's share, each step is skipped, and 25 in a row stop the run on every rank.
    job = [*REVERSE, "--steps", "40", "--optimizer", "sgd", "--clip-grad-norm", "0", "--lr", "1e38",
           "--on-nonfinite", "skip", "--checkpoint-every", "1"]
    ranks = train(2, tmp_path / "ranks", *job, check=False)
    one = train(1, tmp_path / "one", *job, "--grad-accumulation", "2", check=False)
    assert ranks.returncode == one.returncode == 2
    stop = "error: training stopped at step 26: the last 25 steps all had a non-finite loss or gradient"
    assert stop in one.stderr and stop in ranks.stderr, ranks.stderr
    a, b = steps(tmp_path / "ranks"), steps(tmp_path / "one")
    assert [r.get("skipped", False) for r in a] == [r.get("skipped", False) for r in b]
    assert sum(r.get("skipped", False) for r in a) == 24  # the 25th ends the run before its record


def test_the_ordered_sum_gives_the_same_bits_every_run(tmp_path):
    for name in ("a", "b"):
        train(3, tmp_path / name, *REVERSE, "--steps", "15", "--allreduce", "ordered")
    a, b = steps(tmp_path / "a"), steps(tmp_path / "b")
    assert [(r["loss"], r["grad_norm"]) for r in a] == [(r["loss"], r["grad_norm"]) for r in b]
    assert (tmp_path / "a/checkpoints/last.safetensors").read_bytes() == \
           (tmp_path / "b/checkpoints/last.safetensors").read_bytes()


def rank_pids(mpirun_pid):
    """{rank: pid} of the processes mpirun started on this machine."""
    ranks = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            env = dict(e.split("=", 1) for e in (d / "environ").read_bytes().decode(errors="replace").split("\0") if "=" in e)
        except (OSError, IndexError, ValueError):
            continue
        if "OMPI_COMM_WORLD_RANK" in env:
            ranks[int(env["OMPI_COMM_WORLD_RANK"])] = int(d.name)
    return ranks


# Long enough to be stopped part way: 300 steps, a checkpoint every 5.
STOPPABLE = [*REVERSE, "--steps", "300", "--checkpoint-every", "5", "--allreduce", "ordered"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    train(2, out, *STOPPABLE)
    return out


def start_and_stop_at_first_checkpoint(out, stop):
    """Starts 2 ranks on STOPPABLE, calls stop(mpirun's process) once the first checkpoint exists, and returns
    (mpirun's exit code, its stderr)."""
    p = subprocess.Popen(mpirun(2, "train", "--quiet", "--out", str(out), *STOPPABLE), env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        checkpoint = out / "checkpoints" / "last.safetensors"
        deadline = time.time() + 60
        while not checkpoint.exists() and time.time() < deadline and p.poll() is None:
            time.sleep(0.02)
        assert checkpoint.exists(), "no checkpoint appeared"
        stop(p)
        _, err = p.communicate(timeout=60)  # the ranks stop rather than wait for each other forever
    finally:
        if p.poll() is None:
            p.kill()
    assert len(steps(out)) < 300
    return p.returncode, err


def test_a_killed_rank_ends_the_run_and_its_checkpoint_resumes_with_the_same_ranks(tmp_path, uninterrupted):
    def kill_rank_1(p):
        pids = rank_pids(p.pid)
        assert sorted(pids) == [0, 1]
        os.kill(pids[1], signal.SIGKILL)

    out = tmp_path / "killed"
    code, err = start_and_stop_at_first_checkpoint(out, kill_rank_1)
    assert code != 0
    assert "signal 9" in err or "Killed" in err, err

    # Another rank count would split the steps into other micro-batches: refused, naming both counts.
    for n in (1, 3):
        r = train(n, out, *STOPPABLE, "--resume", check=False)
        assert r.returncode == 2
        assert "trained by 2 ranks and this one has" in r.stderr and "mpirun -np 2" in r.stderr, r.stderr
    train(2, out, *STOPPABLE, "--resume")
    assert_same_losses(out, uninterrupted, rel=0)
    assert (out / "checkpoints/last.safetensors").read_bytes() == \
           (uninterrupted / "checkpoints/last.safetensors").read_bytes()


def test_sigusr1_to_mpirun_stops_every_rank_after_one_step_with_a_checkpoint(tmp_path, uninterrupted):
    # mpirun ends the job itself on SIGINT and SIGTERM; SIGUSR1 it forwards to every rank.
    out = tmp_path / "stopped"
    code, err = start_and_stop_at_first_checkpoint(out, lambda p: p.send_signal(signal.SIGUSR1))
    assert code == 128 + signal.SIGUSR1, err
    stopped = [l for l in err.splitlines() if l.startswith("multihead: stopped by SIGUSR1 after step ")]
    assert len(stopped) == 1, err  # rank 0 speaks for the run
    at = int(stopped[0].split("after step ")[1].split(";")[0])
    assert len(steps(out)) == at
    train(2, out, *STOPPABLE, "--resume")
    assert_same_losses(out, uninterrupted, rel=0)
    assert (out / "checkpoints/last.safetensors").read_bytes() == \
           (uninterrupted / "checkpoints/last.safetensors").read_bytes()


def test_bad_input_ends_every_rank_with_one_error_line_and_leaves_nothing(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\na b,x\nc d\n")
    r = train(2, tmp_path / "run", "--source", "csv", "--data", str(bad), check=False)
    assert r.returncode == 2
    errors = [l for l in r.stderr.splitlines() if "error:" in l]
    assert errors and all(l.endswith("line 3: 1 fields, the header has 2") for l in errors), r.stderr
    assert not (tmp_path / "run").exists()


def test_a_batch_the_ranks_cannot_share_equally_is_refused(tmp_path):
    r = train(2, tmp_path / "run", "--preset", "reverse", "--batch", "25", "--steps", "2", check=False)
    assert r.returncode == 2
    assert "batch (25) must be a multiple of ranks × grad_accumulation (2 × 1)" in r.stderr, r.stderr


def test_commands_other_than_train_refuse_to_run_on_several_ranks(tmp_path):
    train(1, tmp_path / "run", *REVERSE, "--steps", "2")
    r = run(mpirun(2, "eval", "--run", str(tmp_path / "run")), check=False)
    assert r.returncode == 2
    assert "under mpirun only train and bench train run" in r.stderr
