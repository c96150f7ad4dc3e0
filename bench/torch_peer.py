"""PyTorch at its best, for the side-by-side benchmarks.

PyTorch 1.13 from Debian runs its fp32 GEMMs on Debian's OpenBLAS 0.3.21,
which does not recognise recent CPUs (Sapphire Rapids, Zen 4 and 5) and falls
back to its SSE3 (Prescott) kernels there. OPENBLAS_CORETYPE names the
kernels to use instead: SkylakeX where the CPU has AVX-512, Haswell where it
has AVX2. The benchmarks set it for the PyTorch process alone (multihead's
default GEMMs are oneDNN's, which choose their kernels by themselves), and
print PyTorch's own measured sgemm rate beside multihead's, so a reader sees
that the peer ran on its best kernels.

PyTorch's CPU allocator takes its large buffers from glibc's malloc, which
maps each one fresh from the kernel and unmaps it when freed, so every
iteration pays page faults for its activations; multihead keeps freed blocks
in its own cache. Measured on an AMD EPYC VM, 2 threads, MultiheadAttention
E=512 H=8 B=8 L=512 forward: 390 ms with glibc's defaults, 62 ms with its
mmap and trim thresholds raised (memory kept in the heap for reuse, as the
usual advice of a caching malloc for PyTorch on CPUs gives). The PyTorch
process gets those thresholds too (GLIBC_TUNABLES).
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
M, N, K, T = json.loads(sys.argv[1])
torch.set_num_threads(T)
a, b = torch.randn(M, K), torch.randn(K, N)
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
print(json.dumps({"gflops": 2 * M * N * K / statistics.median(times) / 1e9, "version": torch.__version__}))
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


def torch_env(threads):
    """The environment of a PyTorch child: its thread count, its best OpenBLAS kernels, a caching malloc."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               GLIBC_TUNABLES=MALLOC_TUNABLES)
    coretype = best_openblas_coretype(cpu()[1])
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    else:
        env.pop("OPENBLAS_CORETYPE", None)
    return env


def torch_sgemm(threads):
    """PyTorch's own fp32 matmul rate on the benchmark's product, in its benchmark environment."""
    out = subprocess.run([sys.executable, "-c", _SGEMM_CHILD, json.dumps([SGEMM_M, SGEMM_N, SGEMM_K, threads])],
                         check=True, capture_output=True, text=True, env=torch_env(threads)).stdout
    return json.loads(out.strip().splitlines()[-1])


def multihead_sgemm(binary, threads, gemm="onednn"):
    """multihead's sgemm rate on the same product, and the machine line of its JSON."""
    out = subprocess.run([binary, "bench", "gemm", "--m", str(SGEMM_M), "--n", str(SGEMM_N), "--k", str(SGEMM_K),
                          "--threads", str(threads), "--gemm", gemm, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def print_header(binary, threads, backends=("onednn",)):
    """Prints the CPU, both programs' sgemm rates and the environments; returns multihead's best rate."""
    model, flags = cpu()
    theirs = torch_sgemm(threads)
    ours = {g: multihead_sgemm(binary, threads, g) for g in backends}
    env = torch_env(threads)
    m = next(iter(ours.values()))["machine"]
    print(f"CPU: {model}; multihead kernels {m['kernel_simd']} ({m['kernel_target']}), oneDNN ISA {m['gemm_isa']}; "
          f"{threads} threads")
    print(f"PyTorch {theirs['version']} on OpenBLAS with OPENBLAS_CORETYPE="
          f"{env.get('OPENBLAS_CORETYPE', '(unset: its own detection)')} (chosen from the CPU's flags, its process "
          f"only) and GLIBC_TUNABLES={env['GLIBC_TUNABLES']} (freed memory reused, not unmapped)")
    mn = f"M={SGEMM_M}, N={SGEMM_N}, K={SGEMM_K}"
    for g, r in ours.items():
        note = (f" (OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, as inherited)"
                if g == "openblas" else "")
        print(f"sgemm ({mn}): multihead on {g} {r['gflops']:.0f} GFLOP/s{note}")
    print(f"sgemm ({mn}): PyTorch torch.mm {theirs['gflops']:.0f} GFLOP/s")
    print()
    return max(r["gflops"] for r in ours.values()), theirs
