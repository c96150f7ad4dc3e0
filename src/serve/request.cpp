// SPDX-License-Identifier: Apache-2.0
#include "multihead/serve/request.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "multihead/core/suggest.h"
#include "multihead/io/json_config.h"
#include "multihead/io/json_keys.h"

namespace multihead {
namespace {

[[noreturn]] void refuse(const std::string& why) { throw RequestError(400, why); }

// The names of the settings a request may carry, from their key list.
const std::set<std::string>& setting_names() {
  static const std::set<std::string> names = [] {
    ConfigDescriber d;
    const AnswerSettings settings;
    AnswerSettings::keys(d, settings, 1, 1);
    std::set<std::string> out;
    for (const KeyDescription& row : d.rows()) out.insert(row.path);
    return out;
  }();
  return names;
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
  PredictRequest r{{}, defaults};
  nlohmann::json settings = nlohmann::json::object();
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
    } else if (setting_names().count(key) != 0) {
      if (std::find(fields.begin(), fields.end(), key) == fields.end())
        refuse(fmt::format("'{}' does not apply to {} runs", key, task));
      settings[key] = v;
    } else {
      std::vector<std::string> known = fields;
      known.insert(known.begin(), "inputs");
      refuse(fmt::format("unknown field '{}'{}", clip_text(key), did_you_mean(key, known)));
    }
  }
  try {
    ConfigReader reader(settings, "the body");
    AnswerSettings::keys(reader, r.settings, limits.max_tokens, limits.max_beam);
  } catch (const ConfigError& e) {
    refuse(e.what());
  }
  if (!j.contains("inputs")) refuse("the body has no 'inputs' (an array of strings)");
  return r;
}

}  // namespace multihead
