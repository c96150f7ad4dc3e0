#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Load benchmark of `multihead serve`: batched against unbatched.

Starts `multihead serve --run RUN` on a free loopback port three times: with
batching (--max-batch B --max-wait-ms W), with batching and no wait (a batch is
what queued while the model was busy) and without (--max-batch 1), and drives
each with wrk (Debian's HTTP load generator) at several connection counts: each
connection POSTs one message per request to /v1/predict, the next as soon as
the answer came (a closed loop, keep-alive). The messages are real mails of the
run's SpamAssassin data, headers stripped, cut to --input-bytes. Each setting
is measured --repeats times, the servers' order alternating, and the table gives
medians of requests per second and of wrk's p50 and p99 latency, with the
batches the server formed (from GET /v1/health) and the CPU named. Any non-2xx
answer, timeout or socket error fails the benchmark.

    scripts/setup.sh --data
    build/multihead train --preset spam --out runs/spam
    /usr/bin/python3 bench/serve.py --run runs/spam
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import urllib.request

from torch_peer import cpu

ROOT = pathlib.Path(__file__).resolve().parent.parent

LUA = r"""
local bodies = {}
local i = 0
function init(args)
  for line in io.lines(args[1]) do bodies[#bodies + 1] = line end
end
function request()
  i = i % #bodies + 1
  return wrk.format("POST", "/v1/predict", {["Content-Type"] = "application/json"}, bodies[i])
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), e.connect + e.read + e.write + e.status + e.timeout))
end
"""


def mail_bodies(run, count, input_bytes):
    """Request bodies, one message each: mails of the run's data set, every
    k-th file so that spam and ham both appear, headers stripped."""
    data = pathlib.Path(json.loads((run / "config.json").read_text())["data"]["path"])
    files = json.loads((data / "file_list.json").read_text())
    step = max(1, len(files) // count)
    bodies = []
    for name in files[::step][:count]:
        raw = (data / name).read_bytes().decode("utf-8", errors="replace")
        text = raw.split("\n\n", 1)[-1].strip()
        cut = text.encode("utf-8")[:input_bytes].decode("utf-8", errors="ignore")
        bodies.append(json.dumps({"inputs": [cut]}))
    return bodies


class Server:
    def __init__(self, binary, run, threads, max_batch, max_wait_ms):
        self.proc = subprocess.Popen(
            [binary, "serve", "--run", str(run), "--port", "0", "--threads", str(threads), "--max-batch",
             str(max_batch), "--max-wait-ms", str(max_wait_ms)],
            stdout=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline()
        m = re.search(r"(http://[0-9.:]+)", first)
        if not m:
            self.proc.kill()
            sys.exit(f"serve did not start: {first.strip()!r}")
        self.url = m.group(1)

    def health(self):
        with urllib.request.urlopen(self.url + "/v1/health", timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.terminate()
        self.proc.communicate(timeout=30)


def wrk(url, lua, bodies_file, connections, seconds):
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", lua, url, "--",
         bodies_file], check=True, capture_output=True, text=True).stdout
    m = re.search(r"RESULT (\d+) (\d+) (\d+) (\d+) (\d+)", out)
    if not m:
        sys.exit(f"wrk gave no result:\n{out}")
    requests, duration_us, p50, p99, errors = map(int, m.groups())
    if errors:
        sys.exit(f"{errors} failed requests at {connections} connections:\n{out}")
    return {"rps": requests / (duration_us / 1e6), "p50_ms": p50 / 1e3, "p99_ms": p99 / 1e3, "requests": requests}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", required=True, type=pathlib.Path, help="a trained text-classifier run")
    ap.add_argument("--binary", default=str(ROOT / "build" / "multihead"))
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of the model")
    ap.add_argument("--connections", default="1,8,32,64")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--max-wait-ms", type=float, default=2)
    ap.add_argument("--input-bytes", type=int, default=1000, help="bytes of each message, at most")
    ap.add_argument("--messages", type=int, default=200)
    a = ap.parse_args()

    # name: (max batch, max wait ms). With no wait, a batch is what queued
    # while the model answered the previous one: no latency added when idle.
    modes = {f"batch {a.max_batch}, wait {a.max_wait_ms:g} ms": (a.max_batch, a.max_wait_ms),
             f"batch {a.max_batch}, no wait": (a.max_batch, 0), "unbatched": (1, 0)}
    conns = [int(c) for c in a.connections.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        lua = os.path.join(tmp, "post.lua")
        pathlib.Path(lua).write_text(LUA)
        bodies_file = os.path.join(tmp, "bodies.jsonl")
        pathlib.Path(bodies_file).write_text("\n".join(mail_bodies(a.run, a.messages, a.input_bytes)) + "\n")
        results = {(m, c): [] for m in modes for c in conns}
        for rep in range(a.repeats):
            order = list(modes) if rep % 2 == 0 else list(reversed(modes))  # alternating
            for mode in order:
                srv = Server(a.binary, a.run, a.threads, *modes[mode])
                try:
                    for c in conns:
                        before = srv.health()
                        r = wrk(srv.url, lua, bodies_file, c, a.seconds)
                        after = srv.health()
                        r["batches"] = after["batches"] - before["batches"]
                        r["answered"] = after["answered"] - before["answered"]
                        results[(mode, c)].append(r)
                        print(f"# {mode} c={c} rep {rep}: {r['rps']:.1f} req/s p50 {r['p50_ms']:.1f} ms "
                              f"p99 {r['p99_ms']:.1f} ms, {r['answered']} answered in {r['batches']} batches",
                              file=sys.stderr)
                finally:
                    srv.stop()

    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    print(f"CPU: {cpu()[0]}, {os.cpu_count()} cores; model threads {a.threads}, wrk 1 thread on the same cores; "
          f"messages of at most {a.input_bytes} bytes; {a.repeats} x {a.seconds} s per cell, medians\n")
    print("| connections | server | req/s | p50 ms | p99 ms | inputs per batch | req/s against unbatched |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for c in conns:
        base = med(results[("unbatched", c)], "rps")
        for mode in modes:
            rs = results[(mode, c)]
            per_batch = sum(r["answered"] for r in rs) / max(1, sum(r["batches"] for r in rs))
            print(f"| {c} | {mode} | {med(rs, 'rps'):.1f} | {med(rs, 'p50_ms'):.1f} | {med(rs, 'p99_ms'):.1f} "
                  f"| {per_batch:.1f} | {med(rs, 'rps') / base:.2f}x |")


if __name__ == "__main__":
    main()
