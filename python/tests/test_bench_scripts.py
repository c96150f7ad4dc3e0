# SPDX-License-Identifier: Apache-2.0
"""The side-by-side benchmark scripts (bench/) end to end on tiny shapes: they run, name every peer,
and their ratios are the quotients of the times they print. The peers here are PyTorch 1.13
(Debian's python3) and, by default, PyTorch 2.13 (the project's .venv); the 2.6 root is a cached
Debian 13 root that a fresh machine lacks, and asking for 2.6 without it is a clear error."""

import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.__version__.startswith("1.13"):
    pytest.skip(f"the scripts start their peers themselves, each in its own interpreter: run once, under Debian's "
                f"python3 (PyTorch 1.13); this interpreter's is {torch.__version__}", allow_module_level=True)

CLI = os.path.abspath(os.environ.get("MULTIHEAD_CLI", "build/multihead"))
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


def bench(script, *args, env=None):
    r = subprocess.run([sys.executable, os.path.join(BENCH, script), "--bin", CLI, "--threads", "1", *args],
                       capture_output=True, text=True, env=env, timeout=300)
    return r


def table_rows(out):
    """The Markdown table's header and body rows, as lists of cells."""
    lines = [l for l in out.splitlines() if l.startswith("| ")]
    rows = [[c.strip() for c in l.strip("|").split("|")] for l in lines]
    return rows[0], rows[1:]


def number(cell):
    return float(re.match(r"[0-9.]+", cell).group(0))


def test_compare_torch_prints_ratios_of_the_times_it_measured():
    r = bench("compare_torch.py", "--torch", "1.13", "--shapes", "4x256", "--embed-dim", "64", "--num-heads", "4",
              "--iters", "3", "--precision", "bf16")
    assert r.returncode == 0, r.stderr
    assert re.search(r"sgemm \(M=4096, N=1536, K=512\): PyTorch 1\.13\S* torch\.mm [0-9]+ GFLOP/s", r.stdout)
    assert re.search(r"bf16 product .*: PyTorch 1\.13\S* torch\.mm on bfloat16 [0-9]+ GFLOP/s", r.stdout)
    assert "multihead --precision bf16" in r.stdout
    head, rows = table_rows(r.stdout)
    assert [row[1] for row in rows] == ["fwd", "fwd+bwd"]
    ours, speedup = head.index("multihead ms"), head.index("speedup over 1.13")
    theirs = speedup - 1
    assert head[theirs].startswith("PyTorch 1.13") and head[theirs].endswith(" ms")
    for row in rows:
        # Times printed to 0.1 ms: their quotient agrees with the speed-up to that rounding.
        t, o = number(row[theirs]), number(row[ours])
        assert t > 0 and o > 0
        assert (t - 0.05) / (o + 0.05) - 0.01 <= number(row[speedup]) <= (t + 0.05) / (o - 0.05) + 0.01
    assert not any("2.6" in h for h in head)


def test_compare_torch_train_names_each_round():
    r = bench("compare_torch_train.py", "--torch", "1.13", "--rounds", "2", "--iters", "1",
              "--d-model", "32", "--num-heads", "2", "--num-layers", "1", "--dim-feedforward", "64", "--seq-len", "16",
              "--batch", "2", "--vocab-size", "50", "--profile")
    assert r.returncode == 0, r.stderr
    assert "threads, fp32, median of 1 steps a run, 2 alternating rounds" in r.stdout
    # --profile: each side's step by part, the parts summing to PyTorch's profiled step, and the
    # operators that took the most of it.
    table = {line.split("|")[1].strip(): [float(x) for x in line.split("|")[2:-1]]
             for line in r.stdout.splitlines() if re.match(r"\| (GEMM|attention|optimizer|other|step) \|", line)}
    assert set(table) == {"GEMM", "attention", "optimizer", "other", "step"}, r.stdout
    assert all(len(v) == 2 for v in table.values())
    assert table["step"][0] > 0 and table["step"][1] > 0
    assert sum(table[k][1] for k in ("GEMM", "attention", "optimizer", "other")) == pytest.approx(table["step"][1], abs=0.3)
    assert re.search(r"PyTorch 1\.13 \(auto SDPA\), the operators of most self time a step: \S.* [0-9.]+ ms, ", r.stdout)
    m = re.search(r"speedup with onednn GEMMs over PyTorch 1\.13\S*: ([0-9.]+)x \(median of rounds: ([0-9., ]+)\)",
                  r.stdout)
    assert m, r.stdout
    rounds = [float(x) for x in m.group(2).split(",")]
    assert len(rounds) == 2 and float(m.group(1)) == pytest.approx(sum(rounds) / 2, abs=0.011)


def test_pytorch_2_6_without_its_root_is_a_clear_error_and_2_13_is_the_default(tmp_path):
    env = dict(os.environ, MULTIHEAD_TORCH2_CACHE=str(tmp_path / "none"))
    r = bench("compare_torch.py", "--torch", "2.6", "--shapes", "1x8", env=env)
    assert r.returncode != 0
    assert "PyTorch 2.6 needs its Debian 13 root: run scripts/torch2-root.sh (as root) first" in r.stderr
    r = bench("compare_torch.py", "--torch", "2.5", "--shapes", "1x8", env=env)
    assert r.returncode != 0 and "unknown PyTorch '2.5'" in r.stderr
    # Left to its default, the peer is PyTorch 2.13's CPU wheel from the project's .venv.
    r = bench("compare_torch.py", "--shapes", "1x8", "--embed-dim", "16", "--num-heads", "2", "--iters", "1", env=env)
    venv = os.path.join(BENCH, "..", ".venv", "bin", "python")
    if os.access(venv, os.X_OK):
        assert r.returncode == 0, r.stderr
        assert re.search(r"PyTorch 2\.13\.0\S* torch\.mm [0-9]+ GFLOP/s on mkl", r.stdout), r.stdout
        head, _ = table_rows(r.stdout)
        assert "speedup over 2.13" in head and not any("1.13" in h for h in head)
    else:
        assert r.returncode != 0 and "run scripts/setup.sh first" in r.stderr
