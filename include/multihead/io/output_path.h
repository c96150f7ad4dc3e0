// SPDX-License-Identifier: Apache-2.0
// Where a command may write: never over what it reads. A run directory that
// is replaced (train --overwrite), or cleared after a failed start, must not
// be, contain or lie inside any of its inputs, and a file written must not be
// one of them; the check runs before anything is created or removed.
#pragma once

#include <string>
#include <vector>

namespace multihead {

// An input of a command, as its error names it: what it is ("the data
// (data.path)") and its path. Inputs with an empty path are skipped.
struct NamedInput {
  std::string what;
  std::string path;
};

// How an output may sit beside the inputs.
enum class OutputPlacement {
  kApart,        // neither is, contains nor lies inside an input
  kMayLieInside  // may lie inside an input (eval's report folder inside its run), not be or contain one
};

// ConfigError naming the first input that `out` is, contains or lies inside
// (as `placement` forbids), compared as the filesystem resolves both: through
// symbolic links, "..", and paths relative to the working directory, whether
// or not they exist yet. `flag` names the output in the message ("--out").
void check_output_apart(const std::string& out, const std::string& flag, const std::vector<NamedInput>& inputs,
                        OutputPlacement placement = OutputPlacement::kApart);

// ConfigError when writing the file `out` would replace one of the files of
// the run in run_dir (config.json, results.json, report.md, metrics.jsonl,
// run.lock, or anything under checkpoints/, tokenizer/ or plots/): a page a
// command writes may go beside them, never over them.
void check_not_a_run_file(const std::string& out, const std::string& flag, const std::string& run_dir);

}  // namespace multihead
