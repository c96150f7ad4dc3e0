// Strict reading of JSON configs: every value is type-checked, and a key the
// reader never asked for is an error (a typo must not be silently ignored).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

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

 private:
  const nlohmann::json& value(const std::string& key);
  template <typename T>
  T get_typed(const std::string& key, std::optional<T> fallback, bool (nlohmann::json::*is_type)() const noexcept,
              const char* type_name);

  const nlohmann::json& obj_;
  std::string source_;
  std::set<std::string> used_;
};

}  // namespace multihead
