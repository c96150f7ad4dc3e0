// SPDX-License-Identifier: Apache-2.0
// What a figure was measured on. Speed and even results differ between CPUs
// (the kernels and oneDNN pick their code from the CPU), so --version, run
// reports and benchmark lines carry this record.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace multihead {

struct MachineInfo {
  std::string cpu;                    // /proc/cpuinfo's model name, e.g. "AMD EPYC"
  std::vector<std::string> cpu_simd;  // the CPU's vector and matrix extensions: avx2, avx512f, avx512_bf16, amx_bf16
  std::string kernel_simd;            // our kernels' SIMD level, e.g. "AVX-512": the CPU's best that was compiled in
  std::string kernel_target;          // the Highway target the kernels dispatch to, e.g. "AVX3"
  std::string kernel_dispatch;        // "run time" (the portable build: the best of AVX2 and AVX-512 that the CPU
                                      // and oneDNN's ISA allow) or "build time" (-DMULTIHEAD_NATIVE=ON)
  std::string gemm_backend;           // "onednn" or "openblas"
  std::string gemm_isa;               // oneDNN's dispatch ceiling: "avx512_core_amx", "avx512_core_bf16", "avx2", ...
  std::string bf16_path;              // where bf16 products run: "amx", "avx512_bf16" or "fp32 (widened)"
  std::string int8_path;              // int8 products' activations: 8-bit with VNNI, else 7-bit (int8_path_name)
  int threads = 0;
};

// Reads the machine as the library runs on it now (thread count and GEMM
// backend as currently set; ONEDNN_MAX_CPU_ISA lowers gemm_isa).
MachineInfo machine_info();

// One line: "AMD EPYC, 2 threads, kernels AVX-512 (AVX3_DL), GEMM onednn
// avx512_core_bf16, bf16 products avx512_bf16".
std::string machine_summary(const MachineInfo& m);
// Several lines, for --version.
std::string machine_details(const MachineInfo& m);
void to_json(nlohmann::json& j, const MachineInfo& m);

}  // namespace multihead
