// SPDX-License-Identifier: Apache-2.0
#include "multihead/io/json_config.h"

#include <cmath>
#include <limits>

#include "multihead/core/error.h"
#include "multihead/core/suggest.h"
#include "multihead/io/json_keys.h"

namespace multihead {

using json = nlohmann::json;

namespace {

// 65536, not 65536.0; 1e-08 as it is.
std::string bound_str(double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 1e18)
    return fmt::format("{}", static_cast<std::int64_t>(v));
  return fmt::format("{}", v);
}

}  // namespace

bool Range::contains(double v) const {
  if (!std::isfinite(v)) return false;
  return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string Range::text() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi)
    return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", bound_str(lo), bound_str(hi), hi_open ? ")" : "]");
  if (has_lo) return fmt::format("{} {}", lo_open ? ">" : ">=", bound_str(lo));
  if (has_hi) return fmt::format("{} {}", hi_open ? "<" : "<=", bound_str(hi));
  return "";
}

void Range::check(const std::string& source, const std::string& key, double v) const {
  if (contains(v)) return;
  throw ConfigError(
      fmt::format("{}{} must be {}, got {}", source.empty() ? "" : source + ": ", key, text(), bound_str(v)));
}

ConfigReader::ConfigReader(const json& obj, std::string source) : obj_(obj), source_(std::move(source)) {
  check<ConfigError>(obj_.is_object(), "{}: expected a JSON object", source_);
}

json ConfigReader::parse(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    // e.what() is one line: "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    throw ConfigError(fmt::format("{}: invalid JSON ({})", source, e.what()));
  }
  if (const std::optional<DuplicateKey> d = first_duplicate_key(text))
    throw ConfigError(fmt::format("{}: '{}' is given twice", source, d->path));
  return j;
}

bool ConfigReader::has(const std::string& key) const {
  asked_.insert(key);
  return obj_.contains(key);
}

const json& ConfigReader::value(const std::string& key) {
  used_.insert(key);
  return obj_.at(key);
}

template <typename T>
T ConfigReader::get_typed(const std::string& key, std::optional<T> fallback, bool (json::*is_type)() const noexcept,
                          const char* type_name) {
  if (!has(key)) {
    check<ConfigError>(fallback.has_value(), "{}: missing required key '{}'", source_, key);
    return *fallback;
  }
  const json& v = value(key);
  check<ConfigError>((v.*is_type)(), "{}: '{}' must be {}", source_, key, type_name);
  return v.get<T>();
}

std::string ConfigReader::get_string(const std::string& key, std::optional<std::string> fallback) {
  return get_typed<std::string>(key, std::move(fallback), &json::is_string, "a string");
}

std::int64_t ConfigReader::get_int(const std::string& key, std::optional<std::int64_t> fallback) {
  // An unsigned value above int64's range is refused as such, not wrapped.
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  if (has(key) && obj_.at(key).is_number_unsigned())
    check<ConfigError>(obj_.at(key).get<std::uint64_t>() <= static_cast<std::uint64_t>(kMax),
                       "{}: '{}' must be at most {}, got {}", source_, key, kMax, obj_.at(key).dump());
  return get_typed<std::int64_t>(key, fallback, &json::is_number_integer, "an integer");
}

ConfigReader& ConfigReader::or_null(const std::string& key, std::int64_t& value, std::int64_t null_value) {
  if (has(key) && obj_.at(key).is_null()) {
    used_.insert(key);
    value = null_value;
  } else {
    value = get_int(key, value);
  }
  return *this;
}

double ConfigReader::get_number(const std::string& key, std::optional<double> fallback) {
  return get_typed<double>(key, fallback, &json::is_number, "a number");
}

bool ConfigReader::get_bool(const std::string& key, std::optional<bool> fallback) {
  return get_typed<bool>(key, fallback, &json::is_boolean, "true or false");
}

std::vector<double> ConfigReader::get_numbers(const std::string& key, std::size_t n, std::vector<double> fallback) {
  if (!has(key)) return fallback;
  const json& v = value(key);
  check<ConfigError>(v.is_array() && v.size() == n, "{}: '{}' must be an array of {} numbers", source_, key, n);
  std::vector<double> out;
  for (const json& x : v) {
    check<ConfigError>(x.is_number(), "{}: '{}' must be an array of {} numbers", source_, key, n);
    out.push_back(x.get<double>());
  }
  return out;
}

std::vector<std::int64_t> ConfigReader::get_positive_ints(const std::string& key, std::vector<std::int64_t> fallback) {
  if (!has(key)) return fallback;
  const json& v = value(key);
  check<ConfigError>(v.is_array() && !v.empty(), "{}: '{}' must be a list of positive integers", source_, key);
  std::vector<std::int64_t> out;
  for (const json& x : v) {
    check<ConfigError>(x.is_number_integer() && x.get<std::int64_t>() > 0,
                       "{}: '{}' must be a list of positive integers", source_, key);
    out.push_back(x.get<std::int64_t>());
  }
  return out;
}

json ConfigReader::get_object(const std::string& key) {
  if (!has(key)) return json::object();
  const json& v = value(key);
  check<ConfigError>(v.is_object(), "{}: '{}' must be an object", source_, key);
  return v;
}

ConfigReader& ConfigReader::operator()(const std::string& key, std::string& value) {
  value = get_string(key, value);
  return *this;
}

ConfigReader& ConfigReader::operator()(const std::string& key, bool& value) {
  value = get_bool(key, value);
  return *this;
}

ConfigReader& ConfigReader::operator()(const std::string& key, double& value) {
  value = get_number(key, value);
  return *this;
}

ConfigReader& ConfigReader::operator()(const std::string& key, std::int64_t& value) {
  value = get_int(key, value);
  return *this;
}

ConfigReader& ConfigReader::operator()(const std::string& key, std::uint64_t& value) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  check<ConfigError>(value <= kMax, "{}: the default of '{}' is out of range", source_, key);
  const std::int64_t v = get_int(key, static_cast<std::int64_t>(value));
  check<ConfigError>(v >= 0, "{}: '{}' must be >= 0, got {}", source_, key, v);
  value = static_cast<std::uint64_t>(v);
  return *this;
}

ConfigReader& ConfigReader::operator()(const std::string& key, std::vector<std::int64_t>& value) {
  value = get_positive_ints(key, value);
  return *this;
}

ConfigReader& ConfigReader::operator()(const std::string& key, std::int64_t& value, const Range& range) {
  (*this)(key, value);
  range.check(source_, key, static_cast<double>(value));
  return *this;
}

ConfigReader& ConfigReader::operator()(const std::string& key, int& value, const Range& range) {
  std::int64_t v = value;
  (*this)(key, v, range);
  value = static_cast<int>(v);
  return *this;
}

ConfigReader& ConfigReader::operator()(const std::string& key, double& value, const Range& range) {
  (*this)(key, value);
  range.check(source_, key, value);
  return *this;
}

ConfigReader& ConfigReader::pair(const std::string& key, double& first, double& second) {
  const std::vector<double> v = get_numbers(key, 2, {first, second});
  first = v[0];
  second = v[1];
  return *this;
}

ConfigError ConfigReader::in_source(const ConfigError& e) const {
  return ConfigError(fmt::format("{}: {}", source_, e.what()));
}

ConfigReader& ConfigReader::section(const std::string& key, const std::function<void(ConfigReader&)>& keys) {
  const json obj = get_object(key);
  ConfigReader r(obj, source_ + ": " + key);
  keys(r);
  r.finish();
  return *this;
}

ConfigWriter& ConfigWriter::section(const std::string& key, const std::function<void(ConfigWriter&)>& keys) {
  ConfigWriter w(out_[key] = json::object());
  keys(w);
  return *this;
}

ConfigChecker& ConfigChecker::section(const std::string& key, const std::function<void(ConfigChecker&)>& keys) {
  ConfigChecker inner;
  inner.prefix_ = prefix_ + key + ".";
  keys(inner);
  return *this;
}

ConfigDescriber& ConfigDescriber::section(const std::string& key, const std::function<void(ConfigDescriber&)>& keys) {
  ConfigDescriber inner;
  inner.prefix_ = prefix_ + key + ".";
  keys(inner);
  rows_.insert(rows_.end(), inner.rows_.begin(), inner.rows_.end());
  last_ = static_cast<std::size_t>(-1);  // a section is described by its keys
  return *this;
}

ConfigDescriber& ConfigDescriber::add(const std::string& key, std::string type, std::string default_value,
                                      std::string bounds) {
  rows_.push_back({prefix_ + key, std::move(type), std::move(default_value), std::move(bounds), ""});
  last_ = rows_.size() - 1;
  return *this;
}

ConfigDescriber& ConfigDescriber::doc(const char* what) {
  check<Error>(last_ < rows_.size() && rows_[last_].description.empty(),
               "a key list's doc(\"{}\") follows no key of its own", what);
  rows_[last_].description = what;
  return *this;
}

ConfigDescriber& ConfigDescriber::may_change_on_resume() {
  check<Error>(last_ < rows_.size(), "a key list's may_change_on_resume() follows no key of its own");
  rows_[last_].may_change_on_resume = true;
  return *this;
}

void ConfigReader::finish() const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it)
    check<ConfigError>(used_.count(it.key()) != 0, "{}: unknown key '{}'{}", source_, clip_text(it.key()),
                       did_you_mean(it.key(), std::vector<std::string>(asked_.begin(), asked_.end())));
}

}  // namespace multihead
