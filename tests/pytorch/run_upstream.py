# SPDX-License-Identifier: Apache-2.0
"""Runs PyTorch's own attention tests twice, as PyTorch ships them and with multihead's drop-ins
substituted (multihead_substitute.py), and prints each test's outcome in both.

A test that passes under PyTorch alone and fails with multihead is a failure of multihead's unless
differences.txt lists it for this PyTorch series, with the reason (docs/SEMANTICS.md, "PyTorch's
own tests"). A test that fails under PyTorch alone says nothing about multihead (the tests come
from a source release near, not always equal to, the installed PyTorch) and is shown as such.

Usage: run_upstream.py --series 2.13 --tests DIR [--pythonpath P] -- FILE[::K_EXPR] ...
(run by the interpreter whose PyTorch is tested). Exit status 1 when a failure is neither fixed
nor listed, 2 on bad use.
"""

import argparse
import fnmatch
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent


def read_differences(path, series):
    """(glob, reason) for each line of differences.txt that names this series: 'SERIES GLOB REASON'."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) != 3:
            sys.exit(f"{path}:{number}: expected 'SERIES TEST-GLOB REASON', got {line!r}")
        if parts[0] == series:
            out.append((parts[1], parts[2]))
    return out


def outcomes(junit):
    """test id -> 'passed' | 'failed' | 'skipped' from a pytest junit XML file."""
    result = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "")
        test = f"{module}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            result[test] = "failed"
        elif "skipped" in kinds:
            result[test] = "skipped"
        else:
            result[test] = "passed"
    return result


def run_pytest(tests_dir, selection, substitute, pythonpath, log):
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        args = [sys.executable, "-m", "pytest", "--noconftest", "-p", "no:cacheprovider", "-q",
                f"--junitxml={junit}", "-o", "junit_family=xunit1"]
        if substitute:
            args += ["-p", "multihead_substitute"]
        files, expressions = [], []
        for item in selection:
            file, _, expression = item.partition("::")
            files.append(file)
            if expression:
                expressions.append(f"({expression})")
        args += files
        if expressions:
            args += ["-k", " or ".join(expressions)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + pythonpath + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("OMP_NUM_THREADS", "2")
        with open(log, "w") as out:
            subprocess.run(args, cwd=tests_dir, env=env, stdout=out, stderr=subprocess.STDOUT)
        if not junit.exists():
            sys.exit(f"pytest wrote no results; see {log}")
        return outcomes(junit)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", required=True, help="the PyTorch series differences.txt names (2.13, 1.13)")
    parser.add_argument("--tests", required=True, type=Path, help="PyTorch's test/ folder")
    parser.add_argument("--pythonpath", action="append", default=[], help="a folder to import from as well")
    parser.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()), help="where pytest's output goes")
    parser.add_argument("selection", nargs="+", help="FILE or FILE::K_EXPR, relative to --tests")
    options = parser.parse_args()
    if not options.tests.is_dir():
        parser.error(f"{options.tests} is not a folder")

    import torch

    differences = read_differences(HERE / "differences.txt", options.series)
    if not torch.__version__.startswith(options.series + "."):
        sys.exit(f"this interpreter has PyTorch {torch.__version__}, not {options.series}")
    options.logs.mkdir(parents=True, exist_ok=True)
    logs = {which: options.logs / f"pytorch-{options.series}-{which}.log" for which in ("torch", "multihead")}
    alone = run_pytest(options.tests, options.selection, False, options.pythonpath, logs["torch"])
    uncollected = [test for test, outcome in alone.items() if test.startswith("::") and outcome == "failed"]
    if uncollected:  # a file that does not import under this PyTorch: the selection is wrong, not multihead
        sys.exit(f"PyTorch {torch.__version__} cannot collect {', '.join(t[2:] for t in uncollected)}; "
                 f"see {logs['torch']}")
    substituted = run_pytest(options.tests, options.selection, True, options.pythonpath, logs["multihead"])

    counts = {"pass": 0, "documented": 0, "FAIL": 0, "not applicable": 0, "skipped": 0}
    used = set()
    print(f"PyTorch {torch.__version__}: PyTorch's own tests, alone and with multihead substituted")
    for test in sorted(set(alone) | set(substituted)):
        before, after = alone.get(test, "missing"), substituted.get(test, "missing")
        glob, reason = next(((g, r) for g, r in differences if fnmatch.fnmatchcase(test, g)), (None, None))
        if before == "skipped" and after == "skipped":
            verdict = "skipped"
        elif before != "passed":
            verdict = "not applicable"  # fails or is skipped under PyTorch alone
        elif after in ("passed", "skipped"):
            verdict = "pass"
        elif reason is not None:
            verdict = "documented"
            used.add(glob)
        else:
            verdict = "FAIL"
        counts[verdict] += 1
        note = f"  ({reason})" if verdict == "documented" else ""
        print(f"{verdict:>14}  torch {before:<7} multihead {after:<7} {test}{note}")
    for glob, _ in differences:
        if glob not in used:  # a listed difference that no test of this run showed: stale, or outside --fast
            print(f"{'listed':>14}  but no test of this run differs: {glob}")
    print(f"PyTorch {torch.__version__}: " + ", ".join(f"{n} {k}" for k, n in counts.items())
          + f"; logs {logs['torch']} and {logs['multihead']}")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
