# SPDX-License-Identifier: Apache-2.0
"""PyTorch at its best, for the side-by-side benchmarks: 2.13, and Debian's 1.13 and 2.6 as history.

The PyTorch peers (`--torch 2.13,1.13,2.6` or `all`; 2.13 by default):
- 2.13, PyTorch's official CPU wheel (pip's torch==2.13.0, with its own MKL and oneDNN), as a
  user installs it: the project's .venv, which scripts/setup.sh makes;
- 1.13, Debian 12's python3-torch, run by /usr/bin/python3;
- 2.6, Debian 13's python3-torch, in a Debian 13 root under chroot (scripts/torch2-root.sh makes
  and caches it).
PyTorch 2.x has a fused flash-attention CPU kernel behind scaled_dot_product_attention, forward and
backward, fp32 and bf16, which nn.MultiheadAttention and nn.TransformerEncoderLayer use when no
weights are asked for.

Debian's OpenBLAS, which PyTorch calls for its fp32 GEMMs, may not recognise
recent CPUs (0.3.21, under 1.13, takes Sapphire Rapids, Zen 4 and 5 for SSE3
Prescott). OPENBLAS_CORETYPE names the kernels to use instead: SkylakeX where
the CPU has AVX-512, Haswell where it has AVX2. Each peer's sgemm is timed
with that setting and with OpenBLAS's own detection, and the faster is kept
for that peer's process alone (multihead's default GEMMs are oneDNN's, which
choose their kernels by themselves); both programs' sgemm rates are printed,
so a reader sees that the peer ran on its best kernels.

PyTorch's CPU allocator takes its large buffers from glibc's malloc, which
maps each one fresh from the kernel and unmaps it when freed, so every
iteration pays page faults for its activations; multihead keeps freed blocks
in its own cache. Measured on an AMD EPYC VM, 2 threads, MultiheadAttention
E=512 H=8 B=8 L=512 forward: 390 ms with glibc's defaults, 62 ms with its
mmap and trim thresholds raised (memory kept in the heap for reuse, as the
usual advice of a caching malloc for PyTorch on CPUs gives). The PyTorch
processes get those thresholds too (GLIBC_TUNABLES).
"""
import json
import os
import subprocess
import sys

# The same product as `multihead bench gemm`'s default: the in-projection of
# an E=512 layer over 4096 tokens.
SGEMM_M, SGEMM_N, SGEMM_K = 4096, 1536, 512

_SGEMM_CHILD = r"""
import json, statistics, sys, time, torch
M, N, K, T, dtype = json.loads(sys.argv[1])
torch.set_num_threads(T)
a, b = torch.randn(M, K).to(getattr(torch, dtype)), torch.randn(K, N).to(getattr(torch, dtype))
# A fresh process's first products run slow (measured: about 100 ms for the
# first nine, then 20 ms), so warm up for a second, as multihead's bench does.
t0 = time.perf_counter()
while time.perf_counter() - t0 < 1.0:
    torch.mm(a, b)
times = []
for _ in range(10):
    t0 = time.perf_counter()
    torch.mm(a, b)
    times.append(time.perf_counter() - t0)
config = torch.__config__.show()
blas = next((l.split("BLAS_INFO=")[1].split(",")[0] for l in config.splitlines() if "BLAS_INFO=" in l), "?")
cap = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
print(json.dumps({"gflops": 2 * M * N * K / statistics.median(times) / 1e9, "version": torch.__version__,
                  "blas": blas, "mkldnn": torch.backends.mkldnn.is_available(), "capability": cap}))
"""


# The end of every timing child: step() timed the same way in each. The
# memory is the growth of the resident set (VmHWM after resetting it, minus
# VmRSS before) during the first step (the child warms the libraries up on a
# tiny shape before: later steps reuse what the first one took); the time the
# median of `iters` steps after a second of warm-up (a fresh process's first
# products run slow).
MEASURE_CHILD = r"""
def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024

def measure(step, iters):
    import statistics, time, torch
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss0 = _status("VmRSS:")
    step()
    peak = _status("VmHWM:") - rss0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 1.0:
        step()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"samples_ms": times, "ms": statistics.median(times), "peak_rss_delta_bytes": peak,
            "version": torch.__version__}
"""


# PyTorch 2.x's scaled_dot_product_attention held to one kernel, for timing
# children: "flash" (its fused flash-attention CPU kernel), "math" (the
# unfused one) or "auto" (PyTorch's own choice; 1.13 has no SDPA).
SDPA_KERNEL_CHILD = r"""
import contextlib
def sdpa_kernel_held(name):
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION if name == "flash" else SDPBackend.MATH])
"""
exec(SDPA_KERNEL_CHILD)  # the same function, for children that import this module


def run_fastest_kernel(peer, make_args, threads):
    """Runs a timing child once per SDPA kernel the peer has (make_args(kernel) gives its arguments) and
    returns the fastest's result, with the kernel named in "kernel" and "kernel_note" (which also names
    a kernel SDPA had none of for the child's inputs)."""
    best, unavailable = None, []
    kernels = ["auto"] if peer.name == "1.13" else ["flash", "math"]
    for k in kernels:
        r = peer.run(make_args(k), threads, unavailable_kernel_ok=len(kernels) > 1)
        if r is None:  # e.g. the flash kernel takes no dropout on the CPU
            unavailable.append(k)
            continue
        r["kernel"] = k
        if best is None or r["ms"] < best["ms"]:
            best = r
    if best is None:
        sys.exit(f"PyTorch {peer.name}: no SDPA kernel ran ({', '.join(unavailable)} unavailable)")
    note = best["kernel"] + "".join(f"; {k} unavailable" for k in unavailable)
    best["kernel_note"] = "" if best["kernel"] == "auto" else f" ({note})"
    return best


def cpu():
    """(model name, set of flags) from /proc/cpuinfo."""
    model, flags = "unknown CPU", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key == "flags" and not flags:
                flags = set(value.split())
    return model, flags


def best_openblas_coretype(flags):
    """OpenBLAS's best kernels for a CPU with these flags, or None for its own choice."""
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


# glibc's malloc keeps freed memory for reuse instead of returning it.
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295"


def torch_env(threads, coretype=None):
    """The environment of a PyTorch child: its thread count, the OpenBLAS kernels named (None: its own
    detection), a caching malloc."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               GLIBC_TUNABLES=MALLOC_TUNABLES)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    else:
        env.pop("OPENBLAS_CORETYPE", None)
    return env


TORCH2_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "torch2-root.sh")


class Peer:
    """One PyTorch: how to run its Python, and the OpenBLAS setting it runs best with."""

    def __init__(self, name, interpreter, where):
        self.name, self.interpreter, self.where = name, interpreter, where
        self.coretype = best_openblas_coretype(cpu()[1])
        self.info = None  # its sgemm child's JSON, after probe()

    def env(self, threads):
        return torch_env(threads, self.coretype)

    def run(self, args, threads, extra_env=None, unavailable_kernel_ok=False):
        """Runs the peer's Python with args; returns the last line of its output as JSON (None, with
        unavailable_kernel_ok, where SDPA had no kernel for what the child held it to)."""
        env = dict(self.env(threads), **(extra_env or {}))
        r = subprocess.run(self.interpreter + args, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            if unavailable_kernel_ok and "No available kernel" in r.stderr:
                return None
            sys.exit(f"PyTorch {self.name} child failed ({' '.join(args[:2])}...):\n{r.stderr[-3000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])

    def sgemm(self, threads, dtype="float32"):
        return self.run(["-c", _SGEMM_CHILD, json.dumps([SGEMM_M, SGEMM_N, SGEMM_K, threads, dtype])], threads)

    def probe(self, threads):
        """Times sgemm with the CPU's named OpenBLAS kernels and with OpenBLAS's own choice; keeps the faster."""
        named = self.coretype
        best = self.sgemm(threads)
        self.probed = {named or "(own detection)": best["gflops"]}
        if named:
            self.coretype = None
            own = self.sgemm(threads)
            self.probed["(own detection)"] = own["gflops"]
            if own["gflops"] > best["gflops"]:
                best = own
            else:
                self.coretype = named
        self.info = best
        return best

    @property
    def version(self):
        return self.info["version"] if self.info else self.name


def torch2_available():
    """Whether the PyTorch 2.6 root is made (scripts/torch2-root.sh --check; it needs root)."""
    if os.geteuid() != 0:
        return False
    return subprocess.run([TORCH2_ROOT, "--check"], capture_output=True).returncode == 0


VENV_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".venv", "bin", "python")
PEER_NAMES = ("2.13", "1.13", "2.6")


def add_torch_argument(ap):
    ap.add_argument("--torch", default="2.13",
                    help="the PyTorch peers, comma-separated, or 'all': 2.13 (PyTorch's official CPU wheel, the "
                         "project's .venv; the default), 1.13 (Debian 12's python3-torch), 2.6 (Debian 13's, "
                         "scripts/torch2-root.sh)")


def peers(choice):
    """The peers named by --torch, in the order named ('all': every one this machine has)."""
    names = [n.strip() for n in (choice or "2.13").split(",")]
    if names == ["all"]:
        names = [n for n in PEER_NAMES if n != "2.6" or torch2_available()]
    out = []
    for name in names:
        if name == "2.13":
            if not os.access(VENV_PYTHON, os.X_OK):
                sys.exit("PyTorch 2.13 runs from the project's .venv: run scripts/setup.sh first")
            out.append(Peer("2.13", [VENV_PYTHON], "PyTorch's official CPU wheel (pip), the project's .venv"))
        elif name == "1.13":
            out.append(Peer("1.13", ["/usr/bin/python3"], "Debian 12's python3-torch, /usr/bin/python3"))
        elif name == "2.6":
            if not torch2_available():
                sys.exit("PyTorch 2.6 needs its Debian 13 root: run scripts/torch2-root.sh (as root) first")
            out.append(Peer("2.6", [TORCH2_ROOT, "python3"], "Debian 13's python3-torch, in scripts/torch2-root.sh's root"))
        else:
            sys.exit(f"--torch: unknown PyTorch {name!r} (2.13, 1.13, 2.6 or all)")
    return out


# PyTorch's AdamW as its users run it at its best: fused (one kernel over every parameter) where
# the PyTorch has it on the CPU (2.4 and later), else its default; for timing children.
ADAMW_CHILD = r"""
def adamw(torch, params, lr):
    major, minor = (int(v) for v in torch.__version__.split(".")[:2])
    fused = {"fused": True} if (major, minor) >= (2, 4) else {}
    return torch.optim.AdamW(params, lr=lr, **fused)
"""
exec(ADAMW_CHILD)  # the same function, for children that import this module


def multihead_sgemm(binary, threads, gemm="onednn", precision="fp32"):
    """multihead's product rate (fp32 sgemm, or bf16 operands) on the same product, and its machine line."""
    out = subprocess.run([binary, "bench", "gemm", "--m", str(SGEMM_M), "--n", str(SGEMM_N), "--k", str(SGEMM_K),
                          "--threads", str(threads), "--gemm", gemm, "--precision", precision, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def print_header(binary, threads, peer_list, backends=("onednn",), bf16=False):
    """Prints the CPU, every program's sgemm rate (and bf16 product rate with bf16) and the environments;
    returns multihead's best rate in the precision compared."""
    model, flags = cpu()
    ours = {g: multihead_sgemm(binary, threads, g) for g in backends}
    m = next(iter(ours.values()))["machine"]
    print(f"CPU: {model}; multihead kernels {m['kernel_simd']} ({m['kernel_target']}), oneDNN ISA {m['gemm_isa']}; "
          f"{threads} threads")
    mn = f"M={SGEMM_M}, N={SGEMM_N}, K={SGEMM_K}"
    for g, r in ours.items():
        note = (f" (OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, as inherited)"
                if g == "openblas" else "")
        print(f"sgemm ({mn}): multihead on {g} {r['gflops']:.0f} GFLOP/s{note}")
    roof = max(r["gflops"] for r in ours.values())
    if bf16:
        r = multihead_sgemm(binary, threads, "onednn", "bf16")
        print(f"bf16 product ({mn}, fp32 accumulation): multihead ({r['gemm']}) {r['gflops']:.0f} GFLOP/s")
        roof = r["gflops"]
    for p in peer_list:
        info = p.probe(threads)
        tried = ", ".join(f"{k} {v:.0f}" for k, v in p.probed.items())
        print(f"sgemm ({mn}): PyTorch {info['version']} torch.mm {info['gflops']:.0f} GFLOP/s on {info['blas']} with "
              f"OPENBLAS_CORETYPE={p.coretype or '(unset: its own detection)'} (the faster of {tried}; its process "
              f"only); CPU capability {info['capability']}, oneDNN {'on' if info['mkldnn'] else 'off'}; {p.where}")
        if bf16:
            b = p.sgemm(threads, "bfloat16")
            print(f"bf16 product ({mn}): PyTorch {info['version']} torch.mm on bfloat16 {b['gflops']:.0f} GFLOP/s")
    print(f"PyTorch processes: GLIBC_TUNABLES={MALLOC_TUNABLES} (freed memory reused, not unmapped)")
    print()
    return roof
