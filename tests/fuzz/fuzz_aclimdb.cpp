// SPDX-License-Identifier: Apache-2.0
// The aclImdb loader over a real folder built from the input: which of
// train/{pos,neg} exist (or are files instead), and the files in them, with
// names and contents taken from the input (names such as "7_x.txt",
// "_3.txt", "1_99.txt", ".txt", or bytes that are not UTF-8).
//
// Input: byte 0 holds the layout flags; then entries separated by 0x01,
// each a folder byte, a name up to 0x02, and the file's bytes.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "fuzz_target.h"
#include "multihead/data/text_datasets.h"

namespace fs = std::filesystem;

namespace {

// A name that stays inside its folder: no '/', no NUL, not "." or "..".
std::string safe_name(std::string name) {
  std::erase(name, '/');
  std::erase(name, '\0');
  if (name.size() > 64) name.resize(64);
  const bool special = name.empty() || name == "." || name == "..";
  return special ? std::string(1, 'x') : name;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  if (size == 0) return 0;
  const fs::path root = fs::temp_directory_path() / ("multihead_fuzz_aclimdb_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::uint8_t flags = data[0];
  const char* sides[] = {"pos", "neg"};
  for (int s = 0; s < 2; ++s) {
    const fs::path dir = root / "train" / sides[s];
    const int mode = (flags >> (2 * s)) & 3;  // 0, 1: a folder; 2: absent; 3: a file in its place
    if (mode <= 1) fs::create_directories(dir);
    if (mode == 3) {
      fs::create_directories(dir.parent_path());
      std::ofstream(dir) << "not a folder";
    }
  }
  const std::string rest = fuzz::bytes_of(data + 1, size - 1);
  std::size_t pos = 0;
  while (pos < rest.size()) {
    std::size_t end = rest.find('\x01', pos);
    if (end == std::string::npos) end = rest.size();
    const std::string entry = rest.substr(pos, end - pos);
    pos = end + 1;
    if (entry.empty()) continue;
    const std::size_t cut = std::min(entry.find('\x02', 1), entry.size());
    const std::string name = safe_name(entry.substr(1, cut - 1));
    const std::string body = cut < entry.size() ? entry.substr(cut + 1) : std::string();
    const fs::path dir = root / "train" / sides[static_cast<std::uint8_t>(entry[0]) & 1];
    if (!fs::is_directory(dir)) continue;
    std::ofstream(dir / name, std::ios::binary) << body;
  }
  fuzz::expect_clean([&] {
    const TextDataset ds = load_aclimdb(root.string(), "train");
    for (const auto& e : ds.examples)
      if (e.label < 0 || e.label > 1) __builtin_trap();
  });
  fs::remove_all(root);
  return 0;
}
