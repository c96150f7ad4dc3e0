// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "multihead/io/atomic_file.h"
#include "multihead/io/safetensors.h"

namespace multihead {
namespace {

// A file from a header string and a data section.
std::string file_of(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string error_of(const std::string& bytes) {
  try {
    SafetensorsFile::parse(bytes, "f.safetensors");
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}

// Found by the round-trip fuzz target: a name that is not UTF-8 cannot be
// written into the JSON header, and says so instead of escaping the JSON library's exception.
TEST(Safetensors, RefusesNamesThatAreNotUtf8) {
  Tensor a({1});
  try {
    serialize_safetensors({{std::string("w\x82"), &a}});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "cannot write safetensors: tensor names and metadata must be valid UTF-8");
  }
  EXPECT_THROW(serialize_safetensors({{"w", &a}}, {{"k", std::string("\xff")}}), ConfigError);
}

// Found by the round-trip fuzz target: (3, 0) has no elements, so it fits
// an empty data section even though 3 alone would not.
TEST(Safetensors, ReadsTensorsWithAZeroSizeAfterOthers) {
  Tensor a({3, 0}), b({0, 5, 2});
  SafetensorsFile f = SafetensorsFile::parse(serialize_safetensors({{"a", &a}, {"b", &b}}), "mem");
  EXPECT_EQ(f.tensor("a").shape(), (Shape{3, 0}));
  EXPECT_EQ(f.tensor("b").shape(), (Shape{0, 5, 2}));
}

// The duplicate-name check is linear: 100,000 zero-size tensors (a 6.6 MB
// header) took over a minute with a quadratic check; now about 0.1 s. The
// bound only separates the two.
TEST(Safetensors, AHeaderOfAHundredThousandEntriesParsesInLinearTime) {
  std::string header = "{";
  for (int i = 0; i < 100'000; ++i)
    header += fmt::format("{}\"t{}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", i ? "," : "", i);
  const auto t0 = std::chrono::steady_clock::now();
  const SafetensorsFile f = SafetensorsFile::parse(file_of(header + "}", ""), "many.safetensors");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(f.entries().size(), 100'000u);
  EXPECT_EQ(error_of(file_of(header + R"(,"t99999":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", "")),
            "f.safetensors: duplicate tensor name 't99999' in header");
}

TEST(Safetensors, RoundTripsF32AndBoolWithMetadata) {
  Tensor a = Tensor::from({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor m = Tensor::from_bool({3}, std::vector<std::uint8_t>{1, 0, 1});
  Tensor empty({0, 4});
  std::string bytes = serialize_safetensors({{"w", &a}, {"mask", &m}, {"empty", &empty}}, {{"format", "pt"}});
  SafetensorsFile f = SafetensorsFile::parse(bytes, "mem");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  Tensor a2 = f.tensor("w");
  EXPECT_EQ(a2.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::vector<float>(a2.span_f32().begin(), a2.span_f32().end()), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor m2 = f.tensor("mask");
  EXPECT_EQ(m2.dtype(), DType::kBool);
  EXPECT_EQ(m2.data<std::uint8_t>()[0], 1);
  EXPECT_EQ(m2.data<std::uint8_t>()[1], 0);
  EXPECT_EQ(f.tensor("empty").shape(), (Shape{0, 4}));
  // The data section starts 8-byte aligned.
  std::uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, AtomicWriteLeavesNoTemporaryAndReadsBack) {
  auto dir = std::filesystem::temp_directory_path() / "multihead_st_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Tensor a = Tensor::from({2}, std::vector<float>{7, 8});
  TensorMap m;
  m.emplace("a", std::move(a));
  write_safetensors((dir / "x.safetensors").string(), m);
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);
  EXPECT_EQ(SafetensorsFile::read((dir / "x.safetensors").string()).tensor("a").f32()[1], 8.0f);
  EXPECT_THROW(write_safetensors((dir / "missing" / "y.safetensors").string(), m), IoError);
  EXPECT_THROW(SafetensorsFile::read((dir / "nope.safetensors").string()), IoError);
  std::filesystem::remove_all(dir);
}

struct BadCase {
  const char* name;
  std::string bytes;
  const char* message;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class SafetensorsRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(SafetensorsRejects, WithAClearMessage) { EXPECT_EQ(error_of(GetParam().bytes), GetParam().message); }

std::string huge_header() {
  std::string out(8, '\0');
  std::uint64_t n = 200'000'000;
  std::memcpy(out.data(), &n, 8);
  return out + "{}";
}

const std::string k8(8, 'x');  // 8 data bytes

INSTANTIATE_TEST_SUITE_P(
    Hostile, SafetensorsRejects,
    ::testing::Values(
        BadCase{"too_short", "abc", "f.safetensors: not a safetensors file (only 3 bytes)"},
        BadCase{"huge_header", huge_header(), "f.safetensors: header length 200000000 exceeds the 100 MB limit"},
        BadCase{"truncated_header", file_of("{\"a\":1}", "").substr(0, 10),
                "f.safetensors: header length 7 runs past the end of the file (10 bytes)"},
        BadCase{"not_json", file_of("{nope", ""),
                "f.safetensors: header is not valid JSON ([json.exception.parse_error.101] parse error at line 1, "
                "column 3: syntax error while parsing object key - invalid literal; last read: '{no'; expected "
                "string literal)"},
        BadCase{"array_header", file_of("[1,2]", ""), "f.safetensors: header is not a JSON object"},
        BadCase{
            "duplicate",
            file_of(
                R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                k8),
            "f.safetensors: duplicate tensor name 'a' in header"},
        BadCase{"unknown_dtype", file_of(R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,8]}})", k8),
                "f.safetensors: entry 'a' has unknown dtype 'F128'"},
        BadCase{"size_mismatch", file_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", k8),
                "f.safetensors: 'a' has 8 bytes but shape (3,) of F32 needs 12"},
        BadCase{"out_of_bounds", file_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", k8),
                "f.safetensors: data_offsets [0, 16] of 'a' are out of bounds (data section is 8 bytes)"},
        BadCase{"reversed_offsets", file_of(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", k8),
                "f.safetensors: data_offsets [8, 0] of 'a' are out of bounds (data section is 8 bytes)"},
        BadCase{
            "overlap",
            file_of(
                R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                k8),
            "f.safetensors: tensor byte ranges overlap at offset 4"},
        BadCase{
            "hole",
            file_of(
                R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                k8),
            "f.safetensors: hole in the data section at offset 2"},
        BadCase{"trailing", file_of(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", k8),
                "f.safetensors: 4 trailing bytes after the last tensor"},
        BadCase{"negative_dim", file_of(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,8]}})", k8),
                "f.safetensors: shape of 'a' must be a non-negative integer"},
        BadCase{"float_offset", file_of(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0.0,8]}})", k8),
                "f.safetensors: data_offsets of 'a' must be a non-negative integer"},
        BadCase{"overflowing_shape",
                file_of(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", k8),
                "f.safetensors: shape of 'a' does not fit the file"},
        BadCase{"missing_offsets", file_of(R"({"a":{"dtype":"U8","shape":[8]}})", k8),
                "f.safetensors: entry 'a' needs data_offsets [begin, end]"},
        BadCase{"unknown_field", file_of(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8],"x":1}})", k8),
                "f.safetensors: entry 'a' has unknown field 'x'"},
        BadCase{"bad_metadata", file_of(R"({"__metadata__":{"k":1}})", ""),
                "f.safetensors: __metadata__ value of 'k' is not a string"}),
    [](const ::testing::TestParamInfo<BadCase>& p) { return std::string(p.param.name); });

TEST(Safetensors, TensorConversionRejectsOtherDtypesAndBadBools) {
  SafetensorsFile f = SafetensorsFile::parse(
      file_of(
          R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"b":{"dtype":"BOOL","shape":[2],"data_offsets":[8,10]}})",
          k8 + std::string("\x01\x02", 2)),
      "f.safetensors");
  try {
    f.tensor("d");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_STREQ(e.what(), "f.safetensors: tensor 'd' has dtype F64; expected F32, BOOL or I64");
  }
  try {
    f.tensor("b");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_STREQ(e.what(), "f.safetensors: BOOL tensor 'b' holds byte value 2");
  }
  EXPECT_THROW(f.tensor("zz"), IoError);
}

}  // namespace
}  // namespace multihead
