// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/machine.h"

#include <oneapi/dnnl/dnnl.h>

#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "multihead/core/threading.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/gemm_int8.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/machine.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {
// The target a kernel call runs on: asked through the dispatch itself.
const char* dispatched_target() { return hwy::TargetName(HWY_TARGET); }
}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {
namespace {

// The /proc/cpuinfo flags that decide which kernels can run, in order.
constexpr const char* kSimdFlags[] = {"sse4_2",      "avx2",        "avx512f",  "avx512_vnni",
                                      "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"};

void read_cpuinfo(MachineInfo& m) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  bool have_name = false, have_flags = false;
  while ((!have_name || !have_flags) && std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    if (key == "model name" && !have_name) {
      m.cpu = value, have_name = true;
    } else if (key == "flags" && !have_flags) {
      std::istringstream words(value);
      std::set<std::string> flags;
      for (std::string w; words >> w;) flags.insert(w);
      for (const char* f : kSimdFlags)
        if (flags.count(f)) m.cpu_simd.emplace_back(f);
      have_flags = true;
    }
  }
  if (m.cpu.empty()) m.cpu = "unknown CPU";
}

HWY_EXPORT(dispatched_target);
#if HWY_COMPILE_ONLY_STATIC
constexpr const char* kKernelDispatch = "build time";
#else
constexpr const char* kKernelDispatch = "run time";
#endif

// Highway's target in the usual words.
std::string simd_level(std::string_view target) {
  if (target.rfind("AVX3", 0) == 0) return "AVX-512";
  if (target == "AVX2") return "AVX2";
  if (target == "SSE4" || target == "SSSE3") return "SSE4";
  return std::string(target);
}

const char* onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_sse41: return "sse41";
    default: return "other";
  }
}

}  // namespace

void cap_kernel_targets() {
  // Every x86 target better than AVX2 has a lower bit than HWY_AVX2's.
  if (!onednn_has_avx512()) hwy::DisableTargets(HWY_AVX2 - 1);
}

MachineInfo machine_info() {
  MachineInfo m;
  read_cpuinfo(m);
  m.kernel_target = MULTIHEAD_DISPATCH(dispatched_target)();
  m.kernel_simd = simd_level(m.kernel_target);
  m.kernel_dispatch = kKernelDispatch;
  m.gemm_backend = gemm_backend_name(context().gemm);
  m.gemm_isa = onednn_isa_name(dnnl_get_effective_cpu_isa());
  m.bf16_path = bf16_path_name(bf16_path());
  m.int8_path = int8_path_name();
  m.threads = num_threads();
  return m;
}

std::string machine_summary(const MachineInfo& m) {
  return fmt::format("{}, {} thread{}, kernels {} ({}), GEMM {}{}, bf16 products {}, int8 products {}", m.cpu,
                     m.threads, m.threads == 1 ? "" : "s", m.kernel_simd, m.kernel_target, m.gemm_backend,
                     m.gemm_backend == "onednn" ? " " + m.gemm_isa : std::string(), m.bf16_path, m.int8_path);
}

std::string machine_details(const MachineInfo& m) {
  return fmt::format(
      "cpu: {} ({})\nkernels: {} (Highway target {}, chosen {})\n"
      "gemm: {}, oneDNN ISA {} (chosen at run time; ONEDNN_MAX_CPU_ISA lowers it)\n"
      "bf16 products: {} (fp16 always computes in fp32)\nint8 products: {}\nthreads: {}",
      m.cpu, m.cpu_simd.empty() ? std::string("no SIMD flags found") : fmt::format("{}", fmt::join(m.cpu_simd, " ")),
      m.kernel_simd, m.kernel_target,
      m.kernel_dispatch == "run time" ? "at run time, at most oneDNN's ISA" : "at build time (-march=native)",
      m.gemm_backend, m.gemm_isa, m.bf16_path, m.int8_path, m.threads);
}

void to_json(nlohmann::json& j, const MachineInfo& m) {
  j = {{"cpu", m.cpu},
       {"cpu_simd", m.cpu_simd},
       {"kernel_simd", m.kernel_simd},
       {"kernel_target", m.kernel_target},
       {"kernel_dispatch", m.kernel_dispatch},
       {"gemm_backend", m.gemm_backend},
       {"gemm_isa", m.gemm_isa},
       {"bf16_path", m.bf16_path},
       {"int8_path", m.int8_path},
       {"threads", m.threads}};
}

}  // namespace multihead
#endif  // HWY_ONCE
