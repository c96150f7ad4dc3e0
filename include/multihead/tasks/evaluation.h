// SPDX-License-Identifier: Apache-2.0
// What `multihead eval` is asked beyond a run's own held-out data: another
// file to score, and a folder for the full report.
#pragma once

#include <string>

namespace multihead {

struct EvalRequest {
  // A file to score instead of the run's own test split (classifiers: a
  // labelled CSV, TSV or JSON Lines file; language models: a text file).
  std::string data;
  std::string format;                     // csv, tsv or jsonl; empty: by the file's extension
  std::string text_column, label_column;  // empty: the run's own
  // A folder for results.json, report.md and the figures (classifiers); empty: print only.
  std::string out;
};

}  // namespace multihead
