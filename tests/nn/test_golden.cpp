// SPDX-License-Identifier: Apache-2.0
// Modules against PyTorch: every golden case from scripts/gen_golden.py
// (MultiheadAttention, TransformerEncoderLayer, TransformerDecoderLayer),
// comparing the output, the weights and every gradient.
#include <gtest/gtest.h>

#include "golden_case.h"
#include "multihead/nn/apply_module.h"
#include "test_util.h"

namespace multihead {
namespace {

class Golden : public ::testing::TestWithParam<test::GoldenCase> {};

TEST_P(Golden, MatchesPyTorch) {
  const test::GoldenCase& c = GetParam();
  TensorMap expected = c.expected();
  TensorMap got = apply_module(c.module_json(), c.name, c.weights(), c.inputs());
  ASSERT_FALSE(expected.empty());
  for (const auto& [name, want] : expected) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << "missing output '" << name << "'";
    EXPECT_TRUE(test::all_close(it->second, want)) << c.name << ": " << name;
  }
  for (const auto& [name, t] : got) EXPECT_TRUE(expected.count(name)) << "unexpected output '" << name << "'";
}

INSTANTIATE_TEST_SUITE_P(MultiheadAttention, Golden, ::testing::ValuesIn(test::golden_cases("mha")),
                         [](const ::testing::TestParamInfo<test::GoldenCase>& p) { return p.param.name; });
INSTANTIATE_TEST_SUITE_P(TransformerLayers, Golden, ::testing::ValuesIn(test::golden_cases("layers")),
                         [](const ::testing::TestParamInfo<test::GoldenCase>& p) { return p.param.name; });

TEST(GoldenFixtures, CoverEveryRequiredKind) {
  // Guards against the fixture folders silently shrinking.
  EXPECT_GE(test::golden_cases("mha").size(), 31u);
  EXPECT_GE(test::golden_cases("layers").size(), 8u);
}

}  // namespace
}  // namespace multihead
