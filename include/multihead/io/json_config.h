// SPDX-License-Identifier: Apache-2.0
// Strict reading of JSON configs: every value is type-checked, and a key the
// reader never asked for is an error (a typo must not be silently ignored).
//
// A settings struct is described once, as a list of its keys, a static
// member template that every visitor runs: ConfigReader reads it,
// ConfigWriter writes it, ConfigChecker checks its bounds (the struct's
// validate()), ConfigDescriber lists it (docs/CONFIG.md, `train --help`):
//
//   struct Settings {
//     std::int64_t count = 4;
//     double rate = 0.5;
//     template <class Keys, class S>  // S: Settings to read, const Settings otherwise
//     static void keys(Keys& k, S& s) {
//       k("count", s.count, between(1, 64)).doc("how many");  // bounds and what it sets
//       k("rate", s.rate, positive()).doc("the rate");
//       k.required("width", s.width, between(1, 4096)).doc("..."); // no default: must be given
//       k.or_null("kdim", s.kdim, 0).doc("...");            // null (None) reads as 0
//       k.named("shape", s.shape, shape_name, parse_shape).doc("...");  // bounds: its names
//       k.section("inner", [&](auto& inner) { inner("depth", s.depth).doc("..."); });
//     }
//   };
//
// Reading, a key that is absent keeps the member's value, so the struct's
// own initialisers are the config's defaults; with_default gives the few
// whose default follows another key (dim_feedforward: 4 x d_model). A
// key's bounds are checked where it is read; what spans keys (nhead
// divides d_model) is the struct's validate(). The declarations a key list
// needs, without the JSON library, are io/config_keys.h.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/core/error.h"
#include "multihead/io/config_keys.h"

namespace multihead {

class ConfigReader {
 public:
  // `source` names the file (or flag) in error messages.
  ConfigReader(const nlohmann::json& obj, std::string source);
  static nlohmann::json parse(std::string_view text, const std::string& source);

  bool has(const std::string& key) const;
  std::string get_string(const std::string& key, std::optional<std::string> fallback = std::nullopt);
  std::int64_t get_int(const std::string& key, std::optional<std::int64_t> fallback = std::nullopt);
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
  // The same, then checked against its bounds.
  ConfigReader& operator()(const std::string& key, std::int64_t& value, const Range& range);
  ConfigReader& operator()(const std::string& key, int& value, const Range& range);
  ConfigReader& operator()(const std::string& key, double& value, const Range& range);
  // A key whose default follows other keys: absent, value = fallback.
  // `default_text` says so in the key's description.
  template <typename T>
  ConfigReader& with_default(const std::string& key, T& value, const T& fallback, const Range& range,
                             const char* /*default_text*/) {
    if (!has(key)) {
      value = fallback;
      used_.insert(key);
      return *this;
    }
    return (*this)(key, value, range);
  }
  template <typename T>
  ConfigReader& with_default(const std::string& key, T& value, const T& fallback, const char* /*default_text*/) {
    if (!has(key)) value = fallback;
    return (*this)(key, value);
  }
  // A key that must be given (the struct's value is no default).
  template <typename T, typename... Bounds>
  ConfigReader& required(const std::string& key, T& value, const Bounds&... range) {
    check<ConfigError>(has(key), "{}: missing required key '{}'", source_, key);
    return (*this)(key, value, range...);
  }
  // An integer that may be null (PyTorch's None), read as `null_value`.
  ConfigReader& or_null(const std::string& key, std::int64_t& value, std::int64_t null_value);
  // A pair of numbers kept as a two-element array (PyTorch's betas).
  ConfigReader& pair(const std::string& key, double& first, double& second);
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
  // What the key before sets (the describer's; nothing to read).
  ConfigReader& doc(const char* /*what*/) { return *this; }
  ConfigReader& may_change_on_resume() { return *this; }

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
  mutable std::set<std::string> asked_;  // every key looked for: what an unknown key may have meant
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
  template <typename T>
  ConfigWriter& operator()(const std::string& key, const T& value, const Range& /*range*/) {
    return (*this)(key, value);
  }
  template <typename T, typename... Rest>
  ConfigWriter& with_default(const std::string& key, const T& value, const T& /*fallback*/, const Rest&...) {
    return (*this)(key, value);
  }
  template <typename T, typename... Bounds>
  ConfigWriter& required(const std::string& key, const T& value, const Bounds&... /*range*/) {
    return (*this)(key, value);
  }
  ConfigWriter& or_null(const std::string& key, std::int64_t value, std::int64_t null_value) {
    out_[key] = value == null_value ? nlohmann::json(nullptr) : nlohmann::json(value);
    return *this;
  }
  ConfigWriter& pair(const std::string& key, double first, double second) {
    out_[key] = {first, second};
    return *this;
  }
  template <typename E, typename Name, typename Parse>
  ConfigWriter& named(const std::string& key, const E& value, Name to_name, Parse /*from_name*/) {
    out_[key] = std::string(to_name(value));
    return *this;
  }
  ConfigWriter& section(const std::string& key, const std::function<void(ConfigWriter&)>& keys);
  ConfigWriter& doc(const char* /*what*/) { return *this; }
  ConfigWriter& may_change_on_resume() { return *this; }

 protected:
  nlohmann::json& out_;  // the object written into
};

// The key list's side of documentation: a row a key (KeyDescription,
// io/config_keys.h), in the list's order.
class ConfigDescriber {
 public:
  // A struct's own rows (the defaults are its values).
  template <typename T>
  ConfigDescriber& operator()(const std::string& key, const T& value) {
    return add(key, type_name<T>(), nlohmann::json(value).dump(), "");
  }
  template <typename T>
  ConfigDescriber& operator()(const std::string& key, const T& value, const Range& range) {
    return add(key, type_name<T>(), nlohmann::json(value).dump(), range.text());
  }
  template <typename T>
  ConfigDescriber& with_default(const std::string& key, const T& /*value*/, const T& /*fallback*/, const Range& range,
                                const char* default_text) {
    return add(key, type_name<T>(), default_text, range.text());
  }
  template <typename T>
  ConfigDescriber& with_default(const std::string& key, const T& /*value*/, const T& /*fallback*/,
                                const char* default_text) {
    return add(key, type_name<T>(), default_text, "");
  }
  template <typename T>
  ConfigDescriber& required(const std::string& key, const T& /*value*/, const Range& range = {}) {
    return add(key, type_name<T>(), "required", range.text());
  }
  ConfigDescriber& or_null(const std::string& key, std::int64_t value, std::int64_t null_value) {
    return add(key, "integer or null", value == null_value ? "null" : nlohmann::json(value).dump(), "");
  }
  ConfigDescriber& pair(const std::string& key, double first, double second) {
    return add(key, "pair of numbers", nlohmann::json({first, second}).dump(), "");
  }
  // Its bounds are the names from_name takes back: the enum's values from 0
  // up, as long as each one's name reads back as itself.
  template <typename E, typename Name, typename Parse>
  ConfigDescriber& named(const std::string& key, const E& value, Name to_name, Parse from_name) {
    std::string names;
    for (int i = 0; i < 64; ++i) {
      const E e = static_cast<E>(i);
      std::string name;
      try {
        name = to_name(e);
        if (from_name(name) != e) break;
      } catch (const Error&) {
        break;
      }
      names += (names.empty() ? "one of " : ", ") + name;
    }
    return add(key, "name", nlohmann::json(std::string(to_name(value))).dump(), names);
  }
  ConfigDescriber& section(const std::string& key, const std::function<void(ConfigDescriber&)>& keys);
  // What the key declared just before sets: its row's description.
  ConfigDescriber& doc(const char* what);
  // The key declared just before may differ between a run and its resume
  // (KeyDescription::may_change_on_resume).
  ConfigDescriber& may_change_on_resume();

  const std::vector<KeyDescription>& rows() const { return rows_; }

 private:
  template <typename T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, bool>) return "boolean";
    else if constexpr (std::is_integral_v<T>) return "integer";
    else if constexpr (std::is_floating_point_v<T>) return "number";
    else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return "list of integers";
    else return "string";
  }
  ConfigDescriber& add(const std::string& key, std::string type, std::string default_value, std::string bounds);

  std::string prefix_;
  std::vector<KeyDescription> rows_;
  std::size_t last_ = static_cast<std::size_t>(-1);  // the row doc() describes: the last key added here
};

}  // namespace multihead
