// SPDX-License-Identifier: Apache-2.0
// One golden case written by scripts/gen_golden.py: the four files of
// `multihead apply` in one folder.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "multihead/io/atomic_file.h"
#include "multihead/io/safetensors.h"
#include "test_paths.h"

namespace multihead::test {

struct GoldenCase {
  std::string name;
  std::filesystem::path dir;
  std::string module_json() const { return read_file((dir / "module.json").string()); }
  TensorMap weights() const { return SafetensorsFile::read((dir / "weights.safetensors").string()).all_tensors(); }
  TensorMap inputs() const { return SafetensorsFile::read((dir / "inputs.safetensors").string()).all_tensors(); }
  TensorMap expected() const { return SafetensorsFile::read((dir / "expected.safetensors").string()).all_tensors(); }
};

inline void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<GoldenCase> golden_cases(const std::string& family) {
  std::vector<GoldenCase> cases;
  for (const auto& e : std::filesystem::directory_iterator(golden_dir() / family))
    if (e.is_directory()) cases.push_back({e.path().filename().string(), e.path()});
  std::sort(cases.begin(), cases.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return cases;
}

}  // namespace multihead::test
