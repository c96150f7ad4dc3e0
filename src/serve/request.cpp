#include "multihead/serve/request.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "multihead/io/json_keys.h"

namespace multihead {
namespace {

[[noreturn]] void refuse(const std::string& why) { throw RequestError(400, why); }

std::int64_t integer(const nlohmann::json& v, const char* name, std::int64_t lo, std::int64_t hi) {
  if (!v.is_number_integer()) refuse(fmt::format("'{}' must be an integer, got {}", name, v.type_name()));
  // Unsigned values above int64's range read as such, not wrapped.
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    refuse(fmt::format("'{}' must be at most {}, got {}", name, hi, v.dump()));
  const std::int64_t x = v.get<std::int64_t>();
  if (x < lo || x > hi) refuse(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x));
  return x;
}

double number(const nlohmann::json& v, const char* name) {
  if (!v.is_number()) refuse(fmt::format("'{}' must be a number, got {}", name, v.type_name()));
  return v.get<double>();
}

}  // namespace

PredictRequest parse_predict_request(const std::string& body, const std::string& task,
                                     const std::vector<std::string>& fields, const AnswerSettings& defaults,
                                     const RequestLimits& limits) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) refuse("the body is not valid JSON");
  if (const std::optional<DuplicateKey> d = first_duplicate_key(body))
    refuse(fmt::format("'{}' is given twice", clip_text(d->path)));
  if (!j.is_object()) refuse(fmt::format("the body must be a JSON object, got {}", j.type_name()));
  const auto takes = [&](const std::string& key) {
    if (std::find(fields.begin(), fields.end(), key) == fields.end())
      refuse(fmt::format("'{}' does not apply to {} runs", key, task));
  };
  PredictRequest r{{}, defaults};
  for (const auto& [key, v] : j.items()) {
    if (key == "inputs") {
      if (!v.is_array()) refuse(fmt::format("'inputs' must be an array of strings, got {}", v.type_name()));
      if (v.empty()) refuse("'inputs' is empty");
      if (static_cast<std::int64_t>(v.size()) > limits.max_inputs)
        refuse(fmt::format("'inputs' has {} items; at most {} are taken in one request", v.size(), limits.max_inputs));
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string()) refuse(fmt::format("inputs[{}] must be a string, got {}", i, v[i].type_name()));
        const std::string& s = v[i].get_ref<const std::string&>();
        if (s.empty()) refuse(fmt::format("inputs[{}] is empty", i));
        if (static_cast<std::int64_t>(s.size()) > limits.max_input_bytes)
          refuse(fmt::format("inputs[{}] is {} bytes long; at most {} are taken", i, s.size(), limits.max_input_bytes));
        r.inputs.push_back(s);
      }
    } else if (key == "tokens" || key == "temperature" || key == "top_k" || key == "top_p" || key == "seed") {
      takes(key);
      if (key == "tokens") r.settings.tokens = integer(v, "tokens", 0, limits.max_tokens);
      if (key == "temperature") r.settings.sampling.temperature = number(v, "temperature");
      if (key == "top_p") r.settings.sampling.top_p = number(v, "top_p");
      if (key == "top_k") r.settings.sampling.top_k = integer(v, "top_k", 0, std::numeric_limits<std::int64_t>::max());
      if (key == "seed")
        r.settings.sampling.seed =
            static_cast<std::uint64_t>(integer(v, "seed", 0, std::numeric_limits<std::int64_t>::max()));
    } else if (key == "n_best" || key == "beam") {
      takes(key);
      if (key == "n_best") r.settings.n_best = integer(v, "n_best", 1, limits.max_beam);
      else r.settings.beam = integer(v, "beam", 0, limits.max_beam);
    } else {
      refuse(fmt::format("unknown field '{}'", clip_text(key)));
    }
  }
  if (!j.contains("inputs")) refuse("the body has no 'inputs' (an array of strings)");
  return r;
}

}  // namespace multihead
