// SPDX-License-Identifier: Apache-2.0
// apply_module's error paths: every one names what is wrong.
#include <gtest/gtest.h>

#include <limits>

#include "golden_case.h"
#include "multihead/nn/apply_module.h"

namespace multihead {
namespace {

std::string error_of(const std::string& json, const TensorMap& weights, const TensorMap& inputs) {
  try {
    apply_module(json, "m.json", weights, inputs);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

class ApplyErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& c : test::golden_cases("mha"))
      if (c.name == "self_basic") golden = c;
    weights = golden.weights();
    inputs = golden.inputs();
    json = golden.module_json();
  }
  test::GoldenCase golden;
  TensorMap weights, inputs;
  std::string json;
};

TEST_F(ApplyErrors, BadConfigs) {
  EXPECT_EQ(error_of("{", weights, inputs),
            "m.json: invalid JSON ([json.exception.parse_error.101] parse error at line 1, column 2: syntax error "
            "while parsing object key - unexpected end of input; expected string literal)");
  EXPECT_EQ(error_of(R"({"type":"Conv2d"})", weights, inputs),
            "m.json: unknown module type \"Conv2d\" (known: MultiheadAttention, TransformerEncoderLayer, "
            "TransformerDecoderLayer)");
  EXPECT_EQ(error_of(R"({"type":"MultiheadAttention","embed_dim":16,"num_heads":4,"num_head":4})", weights, inputs),
            "m.json: unknown key 'num_head' (did you mean 'num_heads'?)");
  EXPECT_EQ(error_of(R"({"type":"MultiheadAttention","embed_dim":16,"num_heads":3})", weights, inputs),
            "embed_dim (16) must be divisible by num_heads (3)");
  // A key's own bounds are checked as it is read, naming the file; num_heads <= embed_dim spans keys.
  EXPECT_EQ(error_of(R"({"type":"MultiheadAttention","embed_dim":16,"num_heads":0})", weights, inputs),
            "m.json: num_heads must be in [1, 65536], got 0");
  EXPECT_EQ(error_of(R"({"type":"MultiheadAttention","embed_dim":16,"num_heads":32})", weights, inputs),
            "num_heads must be in [1, embed_dim], got 32");
  EXPECT_EQ(error_of(R"({"type":"MultiheadAttention","embed_dim":"16","num_heads":4})", weights, inputs),
            "m.json: 'embed_dim' must be an integer");
  EXPECT_EQ(error_of(R"({"type":"MultiheadAttention","num_heads":4})", weights, inputs),
            "m.json: missing required key 'embed_dim'");
  EXPECT_EQ(
      error_of(
          R"({"type":"MultiheadAttention","embed_dim":16,"num_heads":4,"is_causal":true,"causal_alignment":"left"})",
          weights, inputs),
      "m.json: causal_alignment must be \"top_left\" or \"bottom_right\", got \"left\"");
  EXPECT_EQ(error_of(R"({"type":"MultiheadAttention","embed_dim":16,"num_heads":4,"kdim":"8"})", weights, inputs),
            "m.json: 'kdim' must be an integer");
  EXPECT_EQ(error_of(R"({"type":"TransformerEncoderLayer","d_model":16,"nhead":4,"dropout":1.5})", weights, inputs),
            "m.json: dropout must be in [0, 1], got 1.5");
  EXPECT_EQ(error_of(R"({"type":"TransformerEncoderLayer","nhead":4})", weights, inputs),
            "m.json: missing required key 'd_model'");
  EXPECT_EQ(
      error_of(R"({"type":"MultiheadAttention","embed_dim":16,"num_heads":4,"batch_first":false})", weights, inputs),
      "batch_first must be true: multihead is batch-first (B, L, E)");
}

TEST_F(ApplyErrors, VariantsFromTheConfig) {
  EXPECT_EQ(
      error_of(R"({"type":"MultiheadAttention","embed_dim":16,"num_heads":4,"attention":"sparse"})", weights, inputs),
      "m.json: attention must be \"full\", \"sliding_window\", \"block_sparse\" or \"linear\", got \"sparse\" (did you "
      "mean 'block_sparse'?)");
  // The same weights run under every variant that keeps their shapes.
  for (const char* extra : {R"("attention":"sliding_window","window_left":1,"window_right":1)",
                            R"("attention":"block_sparse","sparse_block":2,"global_tokens":1)",
                            R"("attention":"linear","need_weights":false)"}) {
    TensorMap out =
        apply_module(std::string(R"({"type":"MultiheadAttention","embed_dim":16,"num_heads":4,)") + extra + "}",
                     "m.json", weights, inputs);
    EXPECT_EQ(out.at("output").shape(), (Shape{2, 5, 16})) << extra;
    EXPECT_TRUE(out.count("grad.in_proj_weight")) << extra;
  }
  // Grouped-query weights have narrower key and value rows.
  EXPECT_EQ(error_of(R"({"type":"MultiheadAttention","embed_dim":16,"num_heads":4,"num_kv_heads":2})", weights, inputs),
            "weights: 'in_proj_weight' has shape (48, 16), expected (32, 16)");
}

TEST_F(ApplyErrors, BadWeights) {
  TensorMap w = golden.weights();
  w.erase("in_proj_bias");
  EXPECT_EQ(error_of(json, w, inputs), "weights: missing tensor 'in_proj_bias' of shape (48,)");
  w = golden.weights();
  w["in_proj_bias"] = Tensor({47});
  EXPECT_EQ(error_of(json, w, inputs), "weights: 'in_proj_bias' has shape (47,), expected (48,)");
  w = golden.weights();
  w.emplace("extra", Tensor({1}));
  EXPECT_EQ(error_of(json, w, inputs), "weights: unexpected tensor 'extra'");
  w = golden.weights();
  w["in_proj_bias"] = Tensor({48}, DType::kBool);
  EXPECT_EQ(error_of(json, w, inputs), "weights: 'in_proj_bias' must be F32, got BOOL");
  w = golden.weights();
  w["in_proj_bias"] = Tensor::zeros({48});
  w["in_proj_bias"].f32()[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(error_of(json, w, inputs), "weights: 'in_proj_bias' holds inf at element 3");
}

TEST_F(ApplyErrors, BadInputs) {
  TensorMap in = golden.inputs();
  in.erase("query");
  EXPECT_EQ(error_of(json, weights, in), "inputs: missing tensor 'query'");
  in = golden.inputs();
  in.emplace("key", Tensor({2, 5, 16}));
  EXPECT_EQ(error_of(json, weights, in), "inputs: give both 'key' and 'value', or neither for self-attention");
  in = golden.inputs();
  in.emplace("keys", Tensor({1}));
  EXPECT_EQ(error_of(json, weights, in), "inputs: unexpected tensor 'keys'");
  in = golden.inputs();
  in["grad_output"] = Tensor({2, 5, 15});
  EXPECT_EQ(error_of(json, weights, in), "grad_output has shape (2, 5, 15), expected (2, 5, 16)");
  in = golden.inputs();
  in.emplace("attn_mask", Tensor({5, 5}, DType::kBool));
  in["attn_mask"].data<std::uint8_t>()[0] = 1;
  EXPECT_EQ(error_of(json, weights, in), "no error");
  in["attn_mask"] = Tensor({4, 5});
  EXPECT_EQ(error_of(json, weights, in), "attn_mask has shape (4, 5), expected (5, 5) or (8, 5, 5)");
}

}  // namespace
}  // namespace multihead
