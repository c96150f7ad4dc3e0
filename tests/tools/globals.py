#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""No mutable global in the library: the runtime context (core/context.h) holds
what used to be process-wide switches. Fails on a variable of namespace scope,
a static member or local, or a thread_local that is not const, in include/ or
src/, unless it is one of the few listed below with the reason it stays."""
import pathlib
import re
import sys

# (file, variable): why it is not in the context.
ALLOWED = {
    ("src/core/context.cpp", "t_bound"): "which context this thread runs under: the binding itself",
    ("src/core/allocator.cpp", "g_current"): "the heap's live bytes: the heap is the process's",
    ("src/core/allocator.cpp", "g_peak"): "the heap's peak since the process started",
    ("src/core/allocator.cpp", "g_count"): "the heap's allocation count",
    ("src/core/allocator.cpp", "g_cache_mutex"): "the heap's block cache",
    ("src/core/allocator.cpp", "g_cache"): "the heap's block cache",
    ("src/core/allocator.cpp", "g_cached_bytes"): "the heap's block cache",
    ("src/core/allocator.cpp", "g_capacity"): "the heap's block cache",
    ("src/core/allocator.cpp", "g_meters_mutex"): "the PeakMeters that see every allocation",
    ("src/core/allocator.cpp", "g_meters"): "the PeakMeters that see every allocation",
    ("src/core/allocator.cpp", "g_meter_count"): "the PeakMeters that see every allocation",
    ("src/train/distributed.cpp", "alone"): "a thread's group of one, where its context names no ranks",
    ("src/kernels/onednn_matmul.cpp", "bound"): "per-thread cache of bound oneDNN primitives (scratch, no setting)",
    ("src/kernels/onednn_matmul.cpp", "stream"): "per-thread oneDNN stream (scratch, no setting)",
    ("src/kernels/onednn_matmul.cpp", "scratchpad"): "per-thread scratch",
    ("src/kernels/onednn_matmul.cpp", "engine"): "oneDNN's CPU engine, made once (no setting)",
    ("src/kernels/onednn_matmul.cpp", "mutex"): "the cache of compiled oneDNN primitives (no setting)",
    ("src/kernels/onednn_matmul.cpp", "cache"): "the cache of compiled oneDNN primitives (no setting)",
    ("src/kernels/gemm_int8.cpp", "q"): "per-thread scratch",
    ("src/kernels/gemm_int8.cpp", "scale"): "per-thread scratch",
    ("src/kernels/gemm_int8.cpp", "acc"): "per-thread scratch (with zero, declared beside it)",
    ("src/kernels/amx_tiles.cpp", "pads"): "per-thread scratch",
}

KEYWORDS = ("const ", "constexpr ", "static const ", "static constexpr ", "inline const ", "inline constexpr ",
            "thread_local const ", "static thread_local const ", "using ", "typedef ", "return ", "friend ",
            "template", "class ", "struct ", "enum ", "namespace ", "extern \"C\"", "#", "//", "case ", "else",
            "delete ", "throw ", "goto ", "co_")
# A declaration ending in ';' whose declarator is a plain name, optionally initialised.
DECL = re.compile(r"^(?P<spec>(?:static |inline |thread_local )*)[A-Za-z_][\w:<>, *&]*?[\s*&>]"
                  r"(?P<name>[A-Za-z_]\w*)\s*(?P<init>\{[^;]*\}|=[^;]*|\[[^;]*\][^;]*|\([^;]*\))?;\s*(?://.*)?$")
# const at the front, yet a pointer that can be pointed elsewhere: const T* name.
MUTABLE_POINTER = re.compile(r"\*\s*[A-Za-z_]\w*\s*(?:=[^;]*)?;$")


def violations(root, seen):
    found = []
    for path in sorted(list(root.glob("include/**/*.h")) + list(root.glob("src/**/*.h")) +
                       list(root.glob("src/**/*.cpp"))):
        rel = path.relative_to(root).as_posix()
        depth = 0  # braces open other than namespaces: inside a function or class
        stack = []
        starts = True  # whether this line starts a statement (the last one ended)
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = re.sub(r'"(\\.|[^"\\])*"', '""', line)
            code = re.sub(r"'(\\.|[^'\\])'", "' '", code)
            code = re.sub(r"//.*", "", code)
            s = code.strip()
            at_namespace = all(kind == "ns" for kind in stack)
            in_function = bool(stack) and stack[-1] == "fn"
            m = DECL.match(s) if starts else None
            if m and m.group("init") and m.group("init").startswith("("):
                # T name(args): a variable where only a variable can be (thread_local, or static in a function).
                spec = m.group("spec")
                if not ("thread_local" in spec or ("static" in spec and in_function)):
                    m = None
            if s:
                starts = s[-1] in ";{}" or s.startswith("#") or s.endswith(":")
            const_pointer = s.startswith(("const ", "static const ", "thread_local const ")) and MUTABLE_POINTER.search(s)
            if m and (not s.startswith(KEYWORDS) or const_pointer) and (
                    "(" not in s.split("=")[0] or (m.group("init") or "")[:1] == "("):
                spec, name = m.group("spec"), m.group("name")
                mutable_static = at_namespace or "static" in spec or "thread_local" in spec
                if mutable_static and (rel, name) in ALLOWED:
                    seen.add((rel, name))
                elif mutable_static:
                    found.append(f"{rel}:{n}: mutable {'global' if at_namespace else 'static'} '{name}': "
                                 "put it in the runtime context (core/context.h), or make it const")
            for ch in code:
                if ch == "{":
                    if re.match(r"^(inline )?namespace\b|^extern \"C\"", s):
                        stack.append("ns")
                    elif re.match(r"^(template\s*<.*>\s*)?(class|struct|union)\b", s):
                        stack.append("class")
                    else:
                        stack.append("fn")
                elif ch == "}" and stack:
                    stack.pop()
    return found


SELF_TEST = """namespace multihead {
namespace {
std::atomic<bool> g_on{false};
const int kFine = 3;
constexpr int kAlsoFine = 4;
}  // namespace
int counter = 0;
thread_local int depth = 0;
void f(int a,
       int b = 0);
struct S {
  int member = 0;
  static int shared;
  static S make(int n);
};
int g() {
  static int calls;
  static const int fine = 1;
  static std::mutex guard;
  thread_local std::vector<int> scratch(4);
  static const char* where = "x";
  static const char* const fixed = "y";
  int local = 2;
  return local;
}
}  // namespace multihead
"""


def self_test():
    """The check finds what it is for, and only that."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        (pathlib.Path(d) / "src").mkdir()
        (pathlib.Path(d) / "src" / "x.cpp").write_text(SELF_TEST)
        names = [re.search(r"'(\w+)'", f).group(1) for f in violations(pathlib.Path(d), set())]
    want = ["g_on", "counter", "depth", "shared", "calls", "guard", "scratch", "where"]
    if names != want:
        print(f"self-test: found {names}, expected {want}", file=sys.stderr)
        return 1
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    seen = set()
    found = violations(root, seen)
    for f in found:
        print(f, file=sys.stderr)
    stale = [f"{f}: {v}" for (f, v) in ALLOWED if (f, v) not in seen]
    for m in stale:
        print(f"allowed variable no longer there (remove it from ALLOWED): {m}", file=sys.stderr)
    return 1 if found or stale else 0


if __name__ == "__main__":
    sys.exit(main())
