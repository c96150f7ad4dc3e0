// SPDX-License-Identifier: Apache-2.0
#include "multihead/io/output_path.h"

#include <algorithm>
#include <filesystem>
#include <iterator>

#include <fmt/format.h>

#include "multihead/core/error.h"

namespace multihead {

namespace fs = std::filesystem;

namespace {

// The path as the filesystem resolves it: the longest existing prefix through
// its symbolic links, the rest lexically.
fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) r = fs::absolute(p).lexically_normal();
  // "a/b/" and "a/b" are one place.
  if (!r.has_filename() && r.has_parent_path() && r != r.root_path()) r = r.parent_path();
  return r;
}

// Whether `outer` is `inner` or one of its ancestors.
bool encloses(const fs::path& outer, const fs::path& inner) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end(); ++o, ++i)
    if (i == inner.end() || *o != *i) return false;
  return true;
}

}  // namespace

void check_output_apart(const std::string& out, const std::string& flag, const std::vector<NamedInput>& inputs,
                        OutputPlacement placement) {
  const fs::path o = resolved(out);
  for (const NamedInput& in : inputs) {
    if (in.path.empty()) continue;
    const fs::path i = resolved(in.path);
    const char* how = nullptr;
    if (o == i) how = "is";
    else if (encloses(o, i)) how = "contains";
    else if (placement == OutputPlacement::kApart && encloses(i, o)) how = "lies inside";
    if (!how) continue;
    throw ConfigError(
        fmt::format("{} {} {} {} ({}): an output never goes over what the command reads; choose "
                    "another {}",
                    flag, out, how, in.what, in.path, flag));
  }
}

void check_not_a_run_file(const std::string& out, const std::string& flag, const std::string& run_dir) {
  const fs::path o = resolved(out), run = resolved(run_dir);
  if (!encloses(run, o) || o == run) return;
  const fs::path inside = o.lexically_relative(run);
  const std::string first = inside.begin()->string();
  static constexpr const char* kFiles[] = {"config.json", "results.json", "report.md", "metrics.jsonl", "run.lock"};
  static constexpr const char* kFolders[] = {"checkpoints", "tokenizer", "plots"};
  const bool file = std::next(inside.begin()) == inside.end() &&
                    std::find(std::begin(kFiles), std::end(kFiles), first) != std::end(kFiles);
  const bool folder = std::next(inside.begin()) != inside.end() &&
                      std::find(std::begin(kFolders), std::end(kFolders), first) != std::end(kFolders);
  check<ConfigError>(!file && !folder,
                     "{} {} is one of the files of the run {}: an output never goes over what the "
                     "command reads; choose another {}",
                     flag, out, run_dir, flag);
}

}  // namespace multihead
