// SPDX-License-Identifier: Apache-2.0
// pytorch_model.bin read without running its pickle (train/torch_pickle.h), on files torch.save
// wrote (PyTorch 1.13; the fuzz corpus holds them).
#include <gtest/gtest.h>

#include "multihead/core/error.h"
#include "multihead/kernels/half.h"
#include "multihead/train/torch_pickle.h"
#include "test_paths.h"

namespace multihead {
namespace {

std::string corpus(const char* name) {
  return (test::golden_dir().parent_path() / "fuzz" / "corpus" / "torch_pickle" / name).string();
}

std::string refusal(const std::string& path) {
  try {
    read_torch_state_dict(path);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

// torch.manual_seed(0); w = randn(3, 4), h = randn(2, 2).half(), b = randn(5).bfloat16(),
// ids = arange(4), flag = [True, False], view = w.t(), slice = w[1].
TEST(TorchPickle, ReadsAStateDictWithItsDtypesAndViews) {
  const TensorMap t = read_torch_state_dict(corpus("state_dict.bin"));
  ASSERT_EQ(t.size(), 7u);
  const Tensor& w = t.at("w");
  ASSERT_EQ(w.shape(), Shape({3, 4}));
  EXPECT_FLOAT_EQ(w.f32()[0], 1.5409960746765137f);
  EXPECT_FLOAT_EQ(w.f32()[11], 0.18203648924827576f);
  const Tensor& view = t.at("view");
  ASSERT_EQ(view.shape(), Shape({4, 3}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(view.f32()[i * 3 + j], w.f32()[j * 4 + i]);
  const Tensor& slice = t.at("slice");
  ASSERT_EQ(slice.shape(), Shape({4}));
  for (int j = 0; j < 4; ++j) EXPECT_EQ(slice.f32()[j], w.f32()[4 + j]);
  ASSERT_EQ(t.at("h").dtype(), DType::kF16);
  float h[4];
  convert_f16_to_f32(h, &t.at("h").data<F16>()->bits, 4);
  EXPECT_EQ(h[3], 0.1226806640625f);
  ASSERT_EQ(t.at("b").dtype(), DType::kBF16);
  float b[5];
  convert_bf16_to_f32(b, &t.at("b").data<BF16>()->bits, 5);
  EXPECT_EQ(b[4], 0.37109375f);
  ASSERT_EQ(t.at("ids").dtype(), DType::kI64);
  EXPECT_EQ(t.at("ids").data<std::int64_t>()[3], 3);
  ASSERT_EQ(t.at("flag").dtype(), DType::kBool);
  EXPECT_EQ(t.at("flag").data<std::uint8_t>()[0], 1);
}

TEST(TorchPickle, RefusesCodeAndWhatItDoesNotRead) {
  EXPECT_NE(refusal(corpus("runs_code.bin"))
                .find("its pickle refers to posix.system, which a state_dict does not "
                      "hold; it is not read (a pickle can run code)"),
            std::string::npos);
  EXPECT_NE(refusal(corpus("double.bin")).find("'x' is a DoubleStorage, which is not read"), std::string::npos);
  // torch.zeros(1).expand(1000000): a million elements asked of a storage of one (stride 0).
  const std::string expanded = refusal(corpus("expanded.bin"));
  EXPECT_NE(expanded.find("'x' of size (1000000,) reaches past its storage of 1 elements"), std::string::npos)
      << expanded;
  EXPECT_NE(refusal(test::golden_dir().string() + "/../fuzz/corpus/torch_pickle").find("cannot"), std::string::npos);
}

}  // namespace
}  // namespace multihead
