// SPDX-License-Identifier: Apache-2.0
// Config key lists (io/json_config.h): one list read and written, absent
// keys keeping their defaults, and every error naming the file and key.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "multihead/core/error.h"
#include "multihead/io/json_config.h"
#include "multihead/io/json_keys.h"
#include "test_util.h"

namespace multihead {
namespace {

using json = nlohmann::json;

enum class Shape { kRound, kSquare };
const char* shape_name(Shape s) { return s == Shape::kSquare ? "square" : "round"; }
Shape parse_shape(const std::string& s) {
  if (s == "round") return Shape::kRound;
  if (s == "square") return Shape::kSquare;
  throw ConfigError("shape must be round or square, got '" + s + "'");
}

struct Settings {
  std::string name = "plain";
  bool on = true;
  double rate = 0.5;
  std::int64_t count = 3;
  std::uint64_t seed = 7;
  std::vector<std::int64_t> lengths = {1, 2};
  Shape shape = Shape::kRound;
  std::int64_t depth = 4;   // in the "inner" section
  std::int64_t width = 16;  // required
  std::int64_t kdim = 0;    // 0 written and read as null
};

template <typename Keys, typename S>
void settings_keys(Keys& k, S& s) {
  k("name", s.name)("on", s.on)("rate", s.rate)("count", s.count)("seed", s.seed)("lengths", s.lengths);
  k.required("width", s.width, between(1, 64)).or_null("kdim", s.kdim, 0);
  k.named("shape", s.shape, shape_name, parse_shape).doc("the outline");
  k.section("inner", [&](auto& inner) { inner("depth", s.depth).doc("how deep"); });
}

json write(const Settings& s) {
  json out;
  ConfigWriter w(out);
  settings_keys(w, s);
  return out;
}

Settings read(const json& config) {
  Settings s;
  ConfigReader r(config, "s.json");
  settings_keys(r, s);
  r.finish();
  return s;
}

std::string read_error(const json& config) {
  return test::error_message([&] { read(config); });
}

TEST(ConfigKeys, WhatIsWrittenReadsBackTheSame) {
  Settings s;
  s.name = "custom";
  s.on = false;
  s.rate = 0.125;
  s.count = -2;
  s.seed = 99;
  s.lengths = {4, 8, 16};
  s.shape = Shape::kSquare;
  s.depth = 9;
  s.width = 32;
  const json config = write(s);
  EXPECT_EQ(config, json::parse(R"({"name": "custom", "on": false, "rate": 0.125, "count": -2, "seed": 99,
                                    "lengths": [4, 8, 16], "width": 32, "kdim": null, "shape": "square",
                                    "inner": {"depth": 9}})"));
  EXPECT_EQ(write(read(config)), config);
  s.kdim = 5;
  EXPECT_EQ(write(s)["kdim"], 5);
  EXPECT_EQ(read(write(s)).kdim, 5);
}

TEST(ConfigKeys, AbsentKeysKeepTheStructsDefaults) {
  const Settings defaults;
  EXPECT_EQ(write(read(json{{"width", 16}})), write(defaults));
  const Settings s = read(json{{"width", 16}, {"count", 11}, {"inner", json::object()}});
  EXPECT_EQ(s.count, 11);
  EXPECT_EQ(s.depth, defaults.depth);
  EXPECT_EQ(s.shape, Shape::kRound);
}

TEST(ConfigKeys, ErrorsNameTheFileTheSectionAndTheKey) {
  auto with_width = [](json j) {
    j["width"] = 16;
    return j;
  };
  EXPECT_EQ(read_error(with_width({{"cuont", 1}})), "s.json: unknown key 'cuont' (did you mean 'count'?)");
  EXPECT_EQ(read_error(with_width({{"inner", {{"deep", 1}}}})), "s.json: inner: unknown key 'deep'");
  EXPECT_EQ(read_error(with_width({{"inner", 3}})), "s.json: 'inner' must be an object");
  EXPECT_EQ(read_error(with_width({{"count", 1.5}})), "s.json: 'count' must be an integer");
  EXPECT_EQ(read_error(with_width({{"on", "yes"}})), "s.json: 'on' must be true or false");
  EXPECT_EQ(read_error(with_width({{"seed", -1}})), "s.json: 'seed' must be >= 0, got -1");
  // An integer beyond int64 is refused as given, not wrapped to a negative one.
  EXPECT_EQ(read_error(with_width({{"count", 18446744073709551615ull}})),
            "s.json: 'count' must be at most 9223372036854775807, got 18446744073709551615");
  EXPECT_EQ(read_error(with_width({{"lengths", {1, 0}}})), "s.json: 'lengths' must be a list of positive integers");
  EXPECT_EQ(read_error(with_width({{"shape", "oval"}})), "s.json: shape must be round or square, got 'oval'");
  EXPECT_EQ(read_error(with_width({{"kdim", "4"}})), "s.json: 'kdim' must be an integer");
  EXPECT_EQ(read_error(json::object()), "s.json: missing required key 'width'");
  EXPECT_EQ(read_error(json{{"width", 65}}), "s.json: width must be in [1, 64], got 65");
}

TEST(ConfigKeys, TheDescriptionNamesRequiredAndNullableKeys) {
  ConfigDescriber d;
  const Settings settings;
  settings_keys(d, settings);
  std::map<std::string, KeyDescription> rows;
  for (const KeyDescription& r : d.rows()) rows[r.path] = r;
  EXPECT_EQ(rows.at("width").default_value, "required");
  EXPECT_EQ(rows.at("width").bounds, "in [1, 64]");
  EXPECT_EQ(rows.at("kdim").type, "integer or null");
  EXPECT_EQ(rows.at("kdim").default_value, "null");
  EXPECT_EQ(rows.at("inner.depth").default_value, "4");
  // doc() describes the key before it, inside a section too; a name's bounds are its names.
  EXPECT_EQ(rows.at("shape").description, "the outline");
  EXPECT_EQ(rows.at("shape").bounds, "one of round, square");
  EXPECT_EQ(rows.at("inner.depth").description, "how deep");
  EXPECT_EQ(rows.at("name").description, "");
}

// A doc() that follows no key of its own list (first, after a section, or a
// second one) is a mistake in the list, refused rather than misplaced.
TEST(ConfigKeys, ADocFollowsItsKey) {
  EXPECT_THROW(ConfigDescriber().doc("nothing"), Error);
  EXPECT_THROW(ConfigDescriber().may_change_on_resume(), Error);
  ConfigDescriber d;
  d("a", 1).doc("one");
  EXPECT_THROW(d.doc("again"), Error);
  d.section("s", [](ConfigDescriber& s) { s("b", 2).doc("two"); });
  EXPECT_THROW(d.doc("the section"), Error);
  EXPECT_EQ(d.rows().back().description, "two");
  // Reading and writing pass over doc().
  const json written = write(Settings{});
  EXPECT_EQ(read(written).shape, Shape::kRound);
}

// A key given twice is refused wherever it stands (nlohmann::json would keep
// the last silently); the message names where, and quotes a long key cut short.
TEST(ConfigKeys, DuplicateKeysAreRefusedAtAnyDepth) {
  auto error = [](const std::string& text) {
    try {
      ConfigReader::parse(text, "c.json");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(R"({"task": "a", "task": "b"})"), "c.json: 'task' is given twice");
  EXPECT_EQ(error(R"({"model": {"nhead": 2, "d_model": 8, "nhead": 4}})"), "c.json: 'model.nhead' is given twice");
  EXPECT_EQ(error(R"({"a": [{"x": 1}, {"x": 1, "x": 2}]})"), "c.json: 'a[1].x' is given twice");
  EXPECT_EQ(error(R"({"a": {"x": 1}, "b": {"x": 1}})"), "");  // the same key in two objects is no repeat
  const DuplicateKey d = first_duplicate_key(R"({"k": 1, "k": 2})").value();
  EXPECT_EQ(d.depth, 1);
  EXPECT_FALSE(first_duplicate_key("[1, 2, {\"k\": 1}]").has_value());
  EXPECT_FALSE(first_duplicate_key("{not json").has_value());
  EXPECT_EQ(clip_text(std::string(500000, 'k')), std::string(64, 'k') + "... (500000 bytes)");
  EXPECT_EQ(clip_text("short"), "short");
}

}  // namespace
}  // namespace multihead
