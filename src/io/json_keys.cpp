// SPDX-License-Identifier: Apache-2.0
#include "multihead/io/json_keys.h"

#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace multihead {
namespace {

using json = nlohmann::json;

class KeyScan final : public nlohmann::json_sax<json> {
 public:
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    frames_.push_back({true, {}, "", 0});
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override {
    frames_.push_back({false, {}, "", 0});
    return true;
  }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    f.key = k;
    if (!f.keys.insert(k).second) {
      found = DuplicateKey{k, path(), static_cast<int>(frames_.size())};
      return false;  // the first one is enough
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const json::exception&) override { return false; }

  std::optional<DuplicateKey> found;

 private:
  struct Frame {
    bool object;
    std::unordered_set<std::string> keys;
    std::string key;        // objects: the key being read
    std::size_t index = 0;  // arrays: the element being read
  };
  // A value ends the current key's or element's turn.
  bool value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  std::string path() const {
    std::string p;
    for (const Frame& f : frames_) {
      if (f.object) p += (p.empty() ? "" : ".") + f.key;
      else p += "[" + std::to_string(f.index) + "]";
    }
    return p;
  }
  std::vector<Frame> frames_;
};

}  // namespace

std::optional<DuplicateKey> first_duplicate_key(std::string_view text) {
  KeyScan scan;
  json::sax_parse(text.begin(), text.end(), &scan, json::input_format_t::json, false);
  return scan.found;
}

}  // namespace multihead
