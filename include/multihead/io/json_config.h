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
//       k("count", s.count, between(1, 64))("rate", s.rate, positive());
//       k.required("width", s.width, between(1, 4096));  // no default: must be given
//       k.or_null("kdim", s.kdim, 0);                     // null (None) reads as 0
//       k.named("shape", s.shape, shape_name, parse_shape);
//       k.section("inner", [&](auto& inner) { inner("depth", s.depth); });
//     }
//   };
//
// Reading, a key that is absent keeps the member's value, so the struct's
// own initialisers are the config's defaults; with_default gives the few
// whose default follows another key (dim_feedforward: 4 x d_model).
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

namespace multihead {

// The bounds of a numeric key: [lo, hi], either end open or unbounded. A
// floating-point value must also be finite.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;

  bool contains(double v) const;
  // "in [1, 65536]", ">= 0", "> 0", "in [0, 1)"
  std::string text() const;
  // ConfigError "{source}: {key} must be {text}, got {v}" when v is outside
  // (no source: none in the message).
  void check(const std::string& source, const std::string& key, double v) const;
};
constexpr Range between(double lo, double hi) { return {lo, hi, false, false}; }
constexpr Range at_least(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, false}; }
constexpr Range at_most(double hi) { return {-std::numeric_limits<double>::infinity(), hi, false, false}; }
constexpr Range positive() { return {0, std::numeric_limits<double>::infinity(), true, false}; }
constexpr Range below_one() { return {0, 1, false, true}; }  // [0, 1)

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

 protected:
  nlohmann::json& out_;  // the object written into
};

// The key list's side of validate(): every value within its bounds
// (ConfigError "{key} must be ..., got ..." otherwise).
class ConfigChecker {
 public:
  template <typename T>
  ConfigChecker& operator()(const std::string& /*key*/, const T& /*value*/) {
    return *this;
  }
  template <typename T>
  ConfigChecker& operator()(const std::string& key, const T& value, const Range& range) {
    range.check("", prefix_ + key, static_cast<double>(value));
    return *this;
  }
  template <typename T, typename... Rest>
  ConfigChecker& with_default(const std::string& key, const T& value, const T& /*fallback*/, const Range& range,
                              const Rest&...) {
    return (*this)(key, value, range);
  }
  template <typename T>
  ConfigChecker& with_default(const std::string& /*key*/, const T& /*value*/, const T& /*fallback*/,
                              const char* /*default_text*/) {
    return *this;
  }
  template <typename T, typename... Bounds>
  ConfigChecker& required(const std::string& key, const T& value, const Bounds&... range) {
    return (*this)(key, value, range...);
  }
  ConfigChecker& or_null(const std::string& /*key*/, std::int64_t /*value*/, std::int64_t /*null_value*/) {
    return *this;
  }
  ConfigChecker& pair(const std::string& /*key*/, double /*first*/, double /*second*/) { return *this; }
  template <typename E, typename Name, typename Parse>
  ConfigChecker& named(const std::string& /*key*/, const E& /*value*/, Name /*to_name*/, Parse /*from_name*/) {
    return *this;
  }
  ConfigChecker& section(const std::string& key, const std::function<void(ConfigChecker&)>& keys);

 private:
  std::string prefix_;  // "section." inside a section
};

// Checks a settings struct's bounds by its key list.
template <typename S>
void check_keys(const S& s) {
  ConfigChecker c;
  S::keys(c, s);
}

// The key list's side of documentation: a row a key, in the list's order.
struct KeyDescription {
  std::string path;  // "train.lr"
  // "integer", "number", "boolean", "string", "name", "list of integers", "pair of numbers", "integer or null"
  std::string type;
  std::string default_value;  // as JSON, what the default follows, or "required"
  std::string bounds;         // "in [1, 65536]", or empty
};

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
  template <typename E, typename Name, typename Parse>
  ConfigDescriber& named(const std::string& key, const E& value, Name to_name, Parse /*from_name*/) {
    return add(key, "name", nlohmann::json(std::string(to_name(value))).dump(), "");
  }
  ConfigDescriber& section(const std::string& key, const std::function<void(ConfigDescriber&)>& keys);

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
};

}  // namespace multihead
