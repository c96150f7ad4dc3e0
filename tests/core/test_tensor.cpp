// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "multihead/core/tensor.h"

namespace multihead {
namespace {

TEST(Tensor, ShapeNumelAndZeroInit) {
  Tensor t({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.dim(0), 2);
  for (float v : t.span_f32()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(shape_str(t.shape()), "(2, 3, 4)");
  EXPECT_EQ(shape_str({5}), "(5,)");
}

TEST(Tensor, CloneIsADeepCopy) {
  Tensor a = Tensor::from({2, 2}, std::vector<float>{1, 2, 3, 4});
  Tensor b = a.clone();
  b.f32()[0] = 9;
  EXPECT_EQ(a.f32()[0], 1);
  EXPECT_EQ(b.f32()[3], 4);
}

TEST(Tensor, ShapeErrorsNameTheSizes) {
  Tensor t({2, 3});
  try {
    t.reshape({4, 2});
    FAIL() << "reshape should throw";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "cannot reshape (2, 3) to (4, 2)");
  }
  EXPECT_THROW(t.dim(2), ShapeError);
  EXPECT_THROW(Tensor({-1, 2}), ShapeError);
  EXPECT_THROW(Tensor::from({3}, std::vector<float>{1, 2}), ShapeError);
  try {
    expect_shape(t, {3, 2}, "query");
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "query has shape (2, 3), expected (3, 2)");
  }
}

TEST(Tensor, DtypeIsChecked) {
  Tensor m({4}, DType::kBool);
  EXPECT_THROW(m.f32(), Error);
  EXPECT_NO_THROW(m.data<std::uint8_t>());
  EXPECT_EQ(m.nbytes(), 4u);
}

TEST(Tensor, HugeShapeIsAnErrorNotAnOverflow) { EXPECT_THROW(shape_numel({1LL << 40, 1LL << 40}), ShapeError); }

TEST(Tensor, ALongShapeIsNamedInOneShortLine) {
  EXPECT_EQ(shape_str({2, 3}), "(2, 3)");
  EXPECT_EQ(shape_str({7}), "(7,)");
  EXPECT_EQ(shape_str(Shape(100000, 1)), "(1, 1, 1, 1, ..., 1, 1, 1, 1) [100000 dimensions]");
}

}  // namespace
}  // namespace multihead
