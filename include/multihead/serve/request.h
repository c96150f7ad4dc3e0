// SPDX-License-Identifier: Apache-2.0
// The body of a `POST /v1/predict` request, read and checked before any work:
//   {"inputs": ["text", ...]}                      every job kind
//   + "tokens", "temperature", "top_k", "top_p", "seed"   language models
//   + "n_best", "beam"                                     pronunciation runs
// Settings left out are the server's (those of `multihead predict`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "multihead/core/error.h"
#include "multihead/tasks/answers.h"

namespace multihead {

// A request the server refuses, with the HTTP status that says why (400 a
// malformed or invalid body, 413 one too large) and a message naming the problem.
class RequestError : public Error {
 public:
  RequestError(int http_status, const std::string& why) : Error(why), status(http_status) {}
  int status;
};

struct RequestLimits {
  std::int64_t max_inputs = 256;  // inputs in one request
  // Bytes in one input: a safety bound far above a long e-mail (tens of
  // KiB). Longer texts than the model reads are answered from their first
  // tokens, as predict answers them, and say "truncated".
  std::int64_t max_input_bytes = 256 << 10;
  std::int64_t max_tokens = 1024;  // language models: tokens one input may ask for
  std::int64_t max_beam = 64;      // pronunciation runs: n_best and beam
};

struct PredictRequest {
  std::vector<std::string> inputs;
  AnswerSettings settings;
};

// Parses and checks a body for a run of the given task that takes `fields`
// beyond "inputs" (a TrainedRun's task() and request_fields()): RequestError
// on anything malformed, mistyped, unknown, not for this run or beyond the
// limits. It touches no model, so any thread may call it; the settings'
// finer checks are answer()'s, in the thread that runs the model.
PredictRequest parse_predict_request(const std::string& body, const std::string& task,
                                     const std::vector<std::string>& fields, const AnswerSettings& defaults,
                                     const RequestLimits& limits);

}  // namespace multihead
