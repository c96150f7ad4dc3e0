// Strict reading of JSON configs: every value is type-checked, and a key the
// reader never asked for is an error (a typo must not be silently ignored).
//
// A config section is best described once, as a list of its keys that
// ConfigReader and ConfigWriter both run:
//
//   template <class Keys, class S>  // S: Settings to read, const Settings to write
//   void settings_keys(Keys& k, S& s) {
//     k("count", s.count)("rate", s.rate);
//     k.named("shape", s.shape, shape_name, parse_shape);
//     k.section("inner", [&](auto& inner) { inner("depth", s.depth); });
//   }
//
// Reading, a key that is absent keeps the member's value, so the struct's
// own initialisers are the config's defaults.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/core/error.h"

namespace multihead {

class ConfigReader {
 public:
  // `source` names the file (or flag) in error messages.
  ConfigReader(const nlohmann::json& obj, std::string source);
  static nlohmann::json parse(std::string_view text, const std::string& source);

  bool has(const std::string& key) const;
  std::string get_string(const std::string& key, std::optional<std::string> fallback = std::nullopt);
  std::int64_t get_int(const std::string& key, std::optional<std::int64_t> fallback = std::nullopt);
  // A null value (PyTorch's None) gives the fallback.
  std::int64_t get_int_or_null(const std::string& key, std::int64_t fallback);
  double get_number(const std::string& key, std::optional<double> fallback = std::nullopt);
  bool get_bool(const std::string& key, std::optional<bool> fallback = std::nullopt);
  // A nested object (an empty one when the key is absent).
  nlohmann::json get_object(const std::string& key);
  // A non-empty array of positive integers.
  std::vector<std::int64_t> get_positive_ints(const std::string& key, std::vector<std::int64_t> fallback);
  // An array of exactly n numbers.
  std::vector<double> get_numbers(const std::string& key, std::size_t n, std::vector<double> fallback);
  // Throws ConfigError on the first key that was never read.
  void finish() const;
  const std::string& source() const { return source_; }

  // The key list's side of reading: `value` is the default and the result.
  // Unsigned integers refuse negative values; a vector of integers is
  // get_positive_ints's list.
  ConfigReader& operator()(const std::string& key, std::string& value);
  ConfigReader& operator()(const std::string& key, bool& value);
  ConfigReader& operator()(const std::string& key, double& value);
  ConfigReader& operator()(const std::string& key, std::int64_t& value);
  ConfigReader& operator()(const std::string& key, std::uint64_t& value);
  ConfigReader& operator()(const std::string& key, std::vector<std::int64_t>& value);
  // An enum kept as its name: from_name reads it (throwing ConfigError for
  // an unknown name), to_name writes it.
  template <typename E, typename Name, typename Parse>
  ConfigReader& named(const std::string& key, E& value, Name to_name, Parse from_name) {
    const std::string given = get_string(key, std::string(to_name(value)));
    try {
      value = from_name(given);
    } catch (const ConfigError& e) {
      throw in_source(e);
    }
    return *this;
  }
  // A nested object, read with its own reader (so its unknown keys are
  // errors too) by keys(ConfigReader&).
  ConfigReader& section(const std::string& key, const std::function<void(ConfigReader&)>& keys);

 private:
  const nlohmann::json& value(const std::string& key);
  // e, its message led by the source ("c.json: data: ...").
  ConfigError in_source(const ConfigError& e) const;
  template <typename T>
  T get_typed(const std::string& key, std::optional<T> fallback, bool (nlohmann::json::*is_type)() const noexcept,
              const char* type_name);

  const nlohmann::json& obj_;
  std::string source_;
  std::set<std::string> used_;
};

// The key list's side of writing: every key with its value.
class ConfigWriter {
 public:
  explicit ConfigWriter(nlohmann::json& out) : out_(out) {}

  template <typename T>
  ConfigWriter& operator()(const std::string& key, const T& value) {
    out_[key] = value;
    return *this;
  }
  template <typename E, typename Name, typename Parse>
  ConfigWriter& named(const std::string& key, const E& value, Name to_name, Parse /*from_name*/) {
    out_[key] = std::string(to_name(value));
    return *this;
  }
  ConfigWriter& section(const std::string& key, const std::function<void(ConfigWriter&)>& keys);

 protected:
  nlohmann::json& out_;  // the object written into
};

}  // namespace multihead
