// SPDX-License-Identifier: Apache-2.0
// The attention explorer: one self-contained HTML page for looking inside
// every head of a model for one input. Its data, script and style are inside
// the file (src/tasks/explorer/ holds the script and style, compiled in), so
// it opens from disk in any browser with no server and no network.
//
// The page shows a grid of every layer x head as small heatmaps; a click
// opens a head: its heatmap, the tokens on both sides (hover a query to see
// what it attends to, a key to see what attends to it) and its numbers
// (HeadStats). Colour scales: each row's maximum (the default, so that
// structure shows when weights are near 1/T), each head's, or absolute 0..1.
// `multihead inspect --html` writes one; run reports link one made for a
// test example.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "multihead/tasks/inspect.h"
#include "multihead/train/run_dir.h"

namespace multihead {

// Keys the page keeps for each query: all of them when there are at most
// kExplorerAllKeys, else the kExplorerTopKeys largest (the page says how much
// weight the rest held). Each kept weight is one byte of its row's maximum.
// So a page holds about layers x heads x T x min(S, 32) x 3 bytes of
// weights (in base64: x 4/3): 4.2 MB for 512 tokens, 8 layers, 8 heads.
inline constexpr std::int64_t kExplorerAllKeys = 64, kExplorerTopKeys = 32;

// Per-head numbers over the query rows (each (layers x heads), layer-major):
// entropy in nats and as a fraction of the uniform distribution's over the
// keys a query may see (rows that see one key left out); the weight on the
// largest key and on the top_n largest; the weight the page leaves out;
// and the nearest other head of the same layer by total variation distance
// (half the L1 distance, averaged over rows; -1 when the layer has one head).
struct HeadStats {
  int top_n = 5;
  std::vector<double> entropy, entropy_ratio, top1, topn, dropped_mass, nearest;
  std::vector<std::int64_t> nearest_head;
};
HeadStats head_stats(const AttentionMaps& maps, std::int64_t kept_keys);

// Keys kept per query for maps with S keys (see kExplorerAllKeys).
std::int64_t explorer_kept_keys(std::int64_t S);

struct ExplorerPage {
  std::string title;                 // the page's heading
  std::string subtitle;              // the input and the run, for instance
  std::vector<AttentionMaps> views;  // one tab each (self-attention, cross-attention, ...)
};

// The page's HTML.
std::string attention_explorer_html(const ExplorerPage& page);
// Writes it to path (atomically).
void write_attention_explorer(const std::string& path, const ExplorerPage& page);
// A run report's link to the page, written as plots/explorer.html: the
// Markdown paragraph that introduces it.
std::string report_explorer(const RunDir& run, const ExplorerPage& page);
// A report's attention section where the model's attention is linear.
inline constexpr const char* kNoAttentionWeights =
    "## Attention\n\nThe model's attention is linear: it computes no attention weights to show.\n\n";

}  // namespace multihead
