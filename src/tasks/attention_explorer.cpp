// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/attention_explorer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "multihead/core/error.h"
#include "multihead/explorer_assets.h"
#include "multihead/io/atomic_file.h"

namespace multihead {

namespace {

using json = nlohmann::json;

// Standard base64 (RFC 4648, with padding), what the page's atob reads.
std::string base64(const std::uint8_t* p, std::size_t n) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t v = (std::uint32_t{p[i]} << 16) | (i + 1 < n ? std::uint32_t{p[i + 1]} << 8 : 0) |
                            (i + 2 < n ? std::uint32_t{p[i + 2]} : 0);
    out += kDigits[(v >> 18) & 63];
    out += kDigits[(v >> 12) & 63];
    out += i + 1 < n ? kDigits[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kDigits[v & 63] : '=';
  }
  return out;
}

template <typename T>
std::string base64_of(const std::vector<T>& v) {
  static_assert(std::endian::native == std::endian::little, "the page reads little-endian arrays");
  return base64(reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T));
}

// Keys a query may see: all, or under a causal mask those up to itself.
std::int64_t visible_keys(const AttentionMaps& m, std::int64_t q) { return m.causal ? std::min(q + 1, m.S) : m.S; }

// The kept keys of one row, by weight (ties: the earlier key), then in key order.
std::vector<std::int64_t> top_keys(const float* row, std::int64_t S, std::int64_t k) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(S));
  std::iota(idx.begin(), idx.end(), 0);
  if (k < S) {
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](std::int64_t a, std::int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    idx.resize(static_cast<std::size_t>(k));
    std::sort(idx.begin(), idx.end());
  }
  return idx;
}

// One view's JSON: labels, the kept weights as base64 arrays, the stats.
json view_json(const AttentionMaps& m) {
  check<ShapeError>(
      m.T > 0 && m.S > 0 && m.layers > 0 && m.heads > 0 &&
          static_cast<std::int64_t>(m.weights.size()) == m.layers * m.heads * m.T * m.S &&
          static_cast<std::int64_t>(m.tokens.size()) == m.T && static_cast<std::int64_t>(m.keys.size()) == m.S,
      "{}: weights or labels do not match {} layers x {} heads x {} x {}", m.name, m.layers, m.heads, m.T, m.S);
  check<ShapeError>(m.S <= 65535, "{}: {} keys; the explorer indexes keys with 16 bits", m.name, m.S);
  const std::int64_t k = explorer_kept_keys(m.S), rows = m.layers * m.heads * m.T;
  std::vector<std::uint16_t> index(static_cast<std::size_t>(rows * k));
  std::vector<std::uint8_t> value(static_cast<std::size_t>(rows * k));
  std::vector<float> row_max(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = m.weights.data() + r * m.S;
    const float mx = std::max(0.0f, *std::max_element(row, row + m.S));
    row_max[static_cast<std::size_t>(r)] = mx;
    const std::vector<std::int64_t> keep = top_keys(row, m.S, k);
    for (std::int64_t e = 0; e < k; ++e) {
      const std::int64_t key = keep[static_cast<std::size_t>(e)];
      const float w = std::max(0.0f, row[key]);
      index[static_cast<std::size_t>(r * k + e)] = static_cast<std::uint16_t>(key);
      value[static_cast<std::size_t>(r * k + e)] =
          static_cast<std::uint8_t>(mx > 0 && std::isfinite(w) ? std::lround(std::min(1.0f, w / mx) * 255.0f) : 0);
    }
  }
  const HeadStats st = head_stats(m, k);
  json stats = {{"top_n", st.top_n}, {"entropy", st.entropy}, {"entropy_ratio", st.entropy_ratio},
                {"top1", st.top1},   {"topn", st.topn},       {"dropped_mass", st.dropped_mass}};
  if (m.heads > 1) stats["nearest"] = st.nearest, stats["nearest_head"] = st.nearest_head;
  if (!m.ablation.empty()) {
    check<ShapeError>(static_cast<std::int64_t>(m.ablation.size()) == m.layers * m.heads,
                      "{}: {} ablation effects for {} heads", m.name, m.ablation.size(), m.layers * m.heads);
    stats["ablation"] = m.ablation;
  }
  return {{"name", m.name},
          {"queries", m.tokens},
          {"keys", m.keys},
          {"layers", m.layers},
          {"first_layer", m.first_layer},
          {"heads", m.heads},
          {"causal", m.causal},
          {"k", k},
          {"index", base64_of(index)},
          {"value", base64_of(value)},
          {"row_max", base64_of(row_max)},
          {"stats", stats}};
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

}  // namespace

std::int64_t explorer_kept_keys(std::int64_t S) { return S <= kExplorerAllKeys ? S : kExplorerTopKeys; }

HeadStats head_stats(const AttentionMaps& m, std::int64_t kept_keys) {
  HeadStats st;
  const std::int64_t n = m.layers * m.heads;
  const std::int64_t top_n = std::min<std::int64_t>(st.top_n, m.S);
  st.top_n = static_cast<int>(top_n);
  for (auto* v : {&st.entropy, &st.entropy_ratio, &st.top1, &st.topn, &st.dropped_mass, &st.nearest})
    v->assign(static_cast<std::size_t>(n), 0.0);
  st.nearest_head.assign(static_cast<std::size_t>(n), -1);
  std::vector<float> sorted(static_cast<std::size_t>(m.S));
  for (std::int64_t lh = 0; lh < n; ++lh) {
    const float* map = m.weights.data() + lh * m.T * m.S;
    std::int64_t ratio_rows = 0;
    for (std::int64_t q = 0; q < m.T; ++q) {
      const float* row = map + q * m.S;
      double h = 0;
      for (std::int64_t j = 0; j < m.S; ++j)
        if (row[j] > 0) h -= row[j] * std::log(static_cast<double>(row[j]));
      st.entropy[lh] += h;
      if (const std::int64_t seen = visible_keys(m, q); seen > 1) {
        st.entropy_ratio[lh] += h / std::log(static_cast<double>(seen));
        ++ratio_rows;
      }
      std::copy(row, row + m.S, sorted.begin());
      std::partial_sort(sorted.begin(), sorted.begin() + std::max<std::int64_t>(top_n, kept_keys), sorted.end(),
                        std::greater<>());
      st.top1[lh] += sorted[0];
      st.topn[lh] += std::accumulate(sorted.begin(), sorted.begin() + top_n, 0.0);
      st.dropped_mass[lh] += std::max(0.0, std::accumulate(sorted.begin() + kept_keys, sorted.end(), 0.0));
    }
    const double T = static_cast<double>(m.T);
    st.entropy[lh] /= T, st.top1[lh] /= T, st.topn[lh] /= T, st.dropped_mass[lh] /= T;
    st.entropy_ratio[lh] = ratio_rows > 0 ? st.entropy_ratio[lh] / static_cast<double>(ratio_rows) : 1.0;
  }
  // The nearest head of the same layer.
  for (std::int64_t l = 0; l < m.layers; ++l)
    for (std::int64_t a = 0; a < m.heads; ++a) {
      double best = -1;
      for (std::int64_t b = 0; b < m.heads; ++b) {
        if (b == a) continue;
        const float* pa = m.weights.data() + (l * m.heads + a) * m.T * m.S;
        const float* pb = m.weights.data() + (l * m.heads + b) * m.T * m.S;
        double d = 0;
        for (std::int64_t i = 0; i < m.T * m.S; ++i) d += std::fabs(static_cast<double>(pa[i]) - pb[i]);
        d = 0.5 * d / static_cast<double>(m.T);
        if (best < 0 || d < best) best = d, st.nearest_head[l * m.heads + a] = b;
      }
      st.nearest[l * m.heads + a] = best;
    }
  return st;
}

std::string attention_explorer_html(const ExplorerPage& page) {
  check<ShapeError>(!page.views.empty(), "an attention explorer page needs at least one view");
  json views = json::array();
  for (const AttentionMaps& m : page.views) views.push_back(view_json(m));
  const json data = {{"title", page.title}, {"subtitle", page.subtitle}, {"views", views}};
  // Inside <script>, "</script" or "<!--" in a token would end or change the
  // block: every '<' goes as \u003c, which JSON.parse reads back.
  std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string safe;
  safe.reserve(text.size());
  for (char c : text) {
    if (c == '<') safe += "\\u003c";
    else safe += c;
  }
  return fmt::format(
      "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>{}</title>\n<style>\n{}</style>\n</head>\n<body>\n<div id=\"mh-app\"></div>\n"
      "<script type=\"application/json\" id=\"mh-data\">{}</script>\n<script>\n{}</script>\n</body>\n</html>\n",
      html_escape(page.title), embedded::kExplorerCss, safe, embedded::kExplorerJs);
}

void write_attention_explorer(const std::string& path, const ExplorerPage& page) {
  write_file_atomic(path, attention_explorer_html(page));
}

std::string report_explorer(const RunDir& run, const ExplorerPage& page) {
  run.write_text("plots/explorer.html", attention_explorer_html(page));
  return fmt::format(
      "[Open the attention explorer](plots/explorer.html) for {}: every layer and head, "
      "the tokens each attends to, and each head's entropy and distance to its neighbours "
      "(one self-contained HTML file).\n\n",
      page.subtitle);
}

}  // namespace multihead
