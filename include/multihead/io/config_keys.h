// SPDX-License-Identifier: Apache-2.0
// The JSON-free half of the key lists (io/json_config.h): what a settings
// struct's `keys` template needs to be declared and checked, so that the
// core layer's headers, which declare key lists, do not pull in the JSON
// library. Each key is declared once, with its bounds and what it sets:
//
//   k("rate", s.rate, positive()).doc("the learning rate");
//
// ConfigReader (reading, and the bounds checked there), ConfigWriter and
// ConfigDescriber (docs/CONFIG.md, `multihead keys`) are in json_config.h;
// ConfigChecker, the bounds alone (a struct's validate()), is here.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

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
  ConfigChecker& doc(const char* /*what*/) { return *this; }
  ConfigChecker& may_change_on_resume() { return *this; }

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
  std::string bounds;         // "in [1, 65536]", "one of a, b", or empty
  std::string description;    // what it sets, from the key list's doc()
  // A resumed run may give it another value than its run had: it changes
  // neither the data nor the arithmetic of what is left to train, or the
  // resume deals with it (the length). From may_change_on_resume().
  bool may_change_on_resume = false;
};

}  // namespace multihead
