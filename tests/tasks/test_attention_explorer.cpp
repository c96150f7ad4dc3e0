// SPDX-License-Identifier: Apache-2.0
// The attention explorer's page: the data it embeds reads back to the weights
// (every kept weight within half a byte of its row's maximum, the largest keys
// kept), the per-head numbers on hand-computed maps, and labels that cannot
// break out of the page's script block. The page in a browser: tests/browser.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "multihead/core/error.h"
#include "multihead/core/rng.h"
#include "multihead/tasks/attention_explorer.h"
#include "multihead/tasks/trained_run.h"

namespace multihead {
namespace {

using json = nlohmann::json;

std::string unbase64(const std::string& s) {
  auto digit = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  for (std::size_t i = 0; i + 3 < s.size(); i += 4) {
    const int a = digit(s[i]), b = digit(s[i + 1]), c = digit(s[i + 2]), d = digit(s[i + 3]);
    out += static_cast<char>((a << 2) | (b >> 4));
    if (c >= 0) out += static_cast<char>(((b & 15) << 4) | (c >> 2));
    if (d >= 0) out += static_cast<char>(((c & 3) << 6) | d);
  }
  return out;
}

json page_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"mh-data\">";
  const std::size_t a = html.find(open), b = html.find("</script>", a);
  EXPECT_NE(a, std::string::npos);
  return json::parse(html.substr(a + open.size(), b - a - open.size()));
}

// Rows of softmax-like weights: row r of map m peaks at key (r * 7 + m) % S.
AttentionMaps maps(std::int64_t layers, std::int64_t heads, std::int64_t T, std::int64_t S) {
  AttentionMaps m;
  m.layers = layers, m.heads = heads, m.T = T, m.S = S;
  for (std::int64_t i = 0; i < T; ++i) m.tokens.push_back("q" + std::to_string(i));
  for (std::int64_t j = 0; j < S; ++j) m.keys.push_back("k" + std::to_string(j));
  for (std::int64_t map = 0; map < layers * heads; ++map)
    for (std::int64_t r = 0; r < T; ++r) {
      std::vector<double> e(static_cast<std::size_t>(S));
      double sum = 0;
      for (std::int64_t j = 0; j < S; ++j)
        sum += e[j] = std::exp(-0.3 * std::abs(static_cast<double>(j - (r * 7 + map) % S)) + 0.01 * j);
      for (double x : e) m.weights.push_back(static_cast<float>(x / sum));
    }
  return m;
}

TEST(AttentionExplorer, TheEmbeddedWeightsReadBackWithinHalfAByteOfTheRowMaximum) {
  for (const std::int64_t S : {5, 64, 70}) {
    SCOPED_TRACE(S);
    const AttentionMaps m = maps(2, 3, 4, S);
    const json v = page_data(attention_explorer_html({"t", "s", {m}}))["views"][0];
    const std::int64_t k = v["k"].get<std::int64_t>();
    EXPECT_EQ(k, S <= kExplorerAllKeys ? S : kExplorerTopKeys);
    const std::string index = unbase64(v["index"]), value = unbase64(v["value"]), row_max = unbase64(v["row_max"]);
    ASSERT_EQ(static_cast<std::int64_t>(value.size()), 2 * 3 * 4 * k);
    ASSERT_EQ(index.size(), 2 * value.size());
    ASSERT_EQ(row_max.size(), 4u * 2 * 3 * 4);
    for (std::int64_t r = 0; r < 2 * 3 * 4; ++r) {
      const float* truth = m.weights.data() + r * S;
      float mx = 0;
      std::memcpy(&mx, row_max.data() + 4 * r, 4);
      EXPECT_EQ(mx, *std::max_element(truth, truth + S));
      float smallest_kept = 1;
      std::int64_t last = -1;
      for (std::int64_t e = 0; e < k; ++e) {
        const std::int64_t key = static_cast<unsigned char>(index[2 * (r * k + e)]) |
                                 static_cast<unsigned char>(index[2 * (r * k + e) + 1]) << 8;
        EXPECT_GT(key, last) << "kept keys in order";
        last = key;
        const double w = static_cast<unsigned char>(value[r * k + e]) / 255.0 * mx;
        EXPECT_NEAR(w, truth[key], mx / 510.0 + 1e-7);
        smallest_kept = std::min(smallest_kept, truth[key]);
      }
      // The keys left out are never larger than a kept one.
      std::int64_t larger = 0;
      for (std::int64_t j = 0; j < S; ++j) larger += truth[j] > smallest_kept;
      EXPECT_LE(larger, k - 1);
    }
  }
}

TEST(AttentionExplorer, HeadNumbersOnHandComputedMaps) {
  // Layer 0: head 0 uniform over 4 keys, head 1 always on key 0.
  AttentionMaps m;
  m.layers = 1, m.heads = 2, m.T = 2, m.S = 4;
  m.tokens = {"a", "b"}, m.keys = {"w", "x", "y", "z"};
  m.weights = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f,  // head 0
               1,     0,     0,     0,     1,     0,     0,     0};     // head 1
  const HeadStats st = head_stats(m, 2);
  EXPECT_NEAR(st.entropy[0], std::log(4.0), 1e-6);
  EXPECT_NEAR(st.entropy_ratio[0], 1.0, 1e-6);
  EXPECT_NEAR(st.entropy[1], 0.0, 1e-12);
  EXPECT_NEAR(st.top1[0], 0.25, 1e-7);
  EXPECT_NEAR(st.top1[1], 1.0, 1e-7);
  EXPECT_EQ(st.top_n, 4);  // min(5, keys)
  EXPECT_NEAR(st.topn[0], 1.0, 1e-6);
  EXPECT_NEAR(st.dropped_mass[0], 0.5, 1e-6);  // 2 of 4 equal keys kept
  EXPECT_NEAR(st.dropped_mass[1], 0.0, 1e-7);
  // Total variation between uniform and one-hot: (0.75 + 3 x 0.25) / 2.
  EXPECT_NEAR(st.nearest[0], 0.75, 1e-6);
  EXPECT_EQ(st.nearest_head[0], 1);
  EXPECT_EQ(st.nearest_head[1], 0);

  // Causal: query 0 sees one key (left out of the ratio), query 1 two, uniformly.
  AttentionMaps c;
  c.layers = 1, c.heads = 1, c.T = 2, c.S = 2, c.causal = true;
  c.tokens = c.keys = {"a", "b"};
  c.weights = {1, 0, 0.5f, 0.5f};
  const HeadStats cs = head_stats(c, 2);
  EXPECT_NEAR(cs.entropy_ratio[0], 1.0, 1e-6);
  EXPECT_NEAR(cs.entropy[0], std::log(2.0) / 2, 1e-6);
  EXPECT_EQ(cs.nearest_head[0], -1);
}

TEST(AttentionExplorer, LabelsStayTextAndBadMapsAreRefused) {
  AttentionMaps m = maps(1, 1, 2, 2);
  m.tokens = {"</script><script>alert(1)</script>", "<!--"};
  m.keys = {"&amp;", "\xff\xfe"};  // the second is not UTF-8
  const std::string html = attention_explorer_html({"a <title>", "b", {m}});
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_EQ(html.find("<!--"), std::string::npos);
  EXPECT_NE(html.find("<title>a &lt;title&gt;</title>"), std::string::npos);
  const json v = page_data(html)["views"][0];
  EXPECT_EQ(v["queries"][0], "</script><script>alert(1)</script>");
  EXPECT_EQ(v["keys"][0], "&amp;");

  AttentionMaps bad = maps(1, 1, 2, 3);
  bad.keys.pop_back();
  EXPECT_THROW(attention_explorer_html({"t", "s", {bad}}), ShapeError);
  EXPECT_THROW(attention_explorer_html({"t", "s", {}}), ShapeError);
}

// A head whose output the out-projection ignores (its columns zero) changes
// nothing when masked; the other heads of the model do.
TEST(AttentionExplorer, AHeadTheOutputIgnoresHasNoAblationEffect) {
  ModelConfig mc;
  mc.vocab_size = 40, mc.num_layers = 2, mc.layer.d_model = 16, mc.layer.nhead = 4, mc.layer.dim_feedforward = 32;
  mc.layer.dropout = 0, mc.max_len = 32, mc.num_classes = 3;
  ParamStore store;
  SequenceClassifier model(store, mc);
  store.finalize();
  Rng rng(3);
  model.init(rng);
  // Layer 1, head 2: zero columns 8..11 of out_proj.weight (16 x 16, rows are outputs).
  float* w = store.data(*store.find("encoder.layers.1.self_attn.out_proj.weight"));
  for (int r = 0; r < 16; ++r)
    for (int c = 8; c < 12; ++c) w[r * 16 + c] = 0;
  TokenizerConfig tc;
  tc.kind = parse_tokenizer_kind("char");
  const auto tok = train_tokenizer(tc, {"the cat sat on the mat"});
  const AttentionMaps maps =
      classifier_attention(model, *tok, tok->encode("the cat sat"), 32, {"a", "b", "c"}, Precision::kF32, true);
  ASSERT_EQ(maps.ablation.size(), 8u);
  EXPECT_EQ(maps.ablation[1 * 4 + 2], 0.0);
  std::int64_t moved = 0;
  for (std::size_t i = 0; i < maps.ablation.size(); ++i) moved += i != 6 && maps.ablation[i] != 0.0;
  EXPECT_EQ(moved, 7) << "every other head changes the prediction's probability";
  // Without ablate, none is computed; the weights are the same.
  const AttentionMaps plain =
      classifier_attention(model, *tok, tok->encode("the cat sat"), 32, {"a", "b", "c"}, Precision::kF32);
  EXPECT_TRUE(plain.ablation.empty());
  EXPECT_EQ(plain.weights, maps.weights);
}

}  // namespace
}  // namespace multihead
