// SPDX-License-Identifier: Apache-2.0
// The machine record that --version, run reports and benchmark lines carry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "multihead/core/context.h"
#include "multihead/core/threading.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/machine.h"

namespace multihead {
namespace {

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Machine, FollowsTheThreadCountAndTheGemmBackend) {
  const MachineInfo one = [] {
    const ContextScope scope(RuntimeContext{.threads = 1, .gemm = GemmBackend::kOpenBlas});
    return machine_info();
  }();
  const MachineInfo two = [] {
    const ContextScope scope(RuntimeContext{.threads = 2, .gemm = GemmBackend::kOneDnn});
    return machine_info();
  }();
  EXPECT_EQ(one.threads, 1);
  EXPECT_EQ(one.gemm_backend, "openblas");
  EXPECT_EQ(two.threads, 2);
  EXPECT_EQ(two.gemm_backend, "onednn");
  EXPECT_EQ(machine_summary(one).find("1 thread,"), one.cpu.size() + 2) << machine_summary(one);
  EXPECT_NE(machine_summary(two).find("2 threads"), std::string::npos);
  EXPECT_EQ(machine_summary(one).find(one.gemm_isa), std::string::npos);  // oneDNN's ISA only when it runs the GEMMs
  EXPECT_NE(machine_summary(two).find("GEMM onednn " + two.gemm_isa), std::string::npos);
}

TEST(Machine, AgreesWithTheCpuFlags) {
  const MachineInfo m = machine_info();
  EXPECT_FALSE(m.cpu.empty());
  EXPECT_NE(m.cpu, "unknown CPU");
  // The kernels' level is one the CPU has; AVX-512 wherever the CPU has it, unless oneDNN's ISA
  // is held below it (the portable build follows oneDNN's ceiling down).
  if (m.kernel_simd == "AVX-512") {
    EXPECT_TRUE(has(m.cpu_simd, "avx512f")) << m.kernel_target;
  } else {
    EXPECT_EQ(m.kernel_simd, "AVX2") << m.kernel_target;
    EXPECT_TRUE(has(m.cpu_simd, "avx2"));
    if (m.kernel_dispatch == "build time") EXPECT_FALSE(has(m.cpu_simd, "avx512f"));
  }
  if (m.kernel_dispatch == "run time") {
    EXPECT_EQ(m.kernel_simd, m.gemm_isa.rfind("avx512", 0) == 0 ? "AVX-512" : "AVX2")
        << m.kernel_target << " under oneDNN ISA " << m.gemm_isa;
  } else {
    EXPECT_EQ(m.kernel_dispatch, "build time");
  }
  // oneDNN's ceiling is the best the CPU offers unless ONEDNN_MAX_CPU_ISA lowers it.
  if (std::getenv("ONEDNN_MAX_CPU_ISA") == nullptr) {
    const std::string want = has(m.cpu_simd, "amx_bf16")      ? "avx512_core_amx"
                             : has(m.cpu_simd, "avx512_bf16") ? "avx512_core_bf16"
                             : has(m.cpu_simd, "avx512_vnni") ? "avx512_core_vnni"
                             : has(m.cpu_simd, "avx512f")     ? "avx512_core"
                                                              : "";
    if (!want.empty()) {
      EXPECT_EQ(m.gemm_isa, want);
    }
  }
}

TEST(Machine, GoesToJson) {
  const nlohmann::json j = machine_info();
  for (const char* key : {"cpu", "cpu_simd", "kernel_simd", "kernel_target", "kernel_dispatch", "gemm_backend",
                          "gemm_isa", "bf16_path", "int8_path", "threads"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["threads"].get<int>(), num_threads());
  EXPECT_TRUE(j["cpu_simd"].is_array());
}

}  // namespace
}  // namespace multihead
