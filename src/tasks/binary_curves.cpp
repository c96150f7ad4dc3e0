// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/binary_curves.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "multihead/core/error.h"

namespace multihead {

BinaryCurves binary_curves(std::span<const double> scores, std::span<const std::int64_t> labels,
                           std::int64_t positive) {
  check<ShapeError>(scores.size() == labels.size(), "{} scores for {} labels", scores.size(), labels.size());
  BinaryCurves c;
  for (const std::int64_t l : labels) (l == positive ? c.positives : c.negatives) += 1;
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Highest score first; ties kept together (a threshold takes all of them).
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  const double pos = static_cast<double>(c.positives), neg = static_cast<double>(c.negatives);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  c.fpr.push_back(0), c.tpr.push_back(0);
  double tp = 0, fp = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    (labels[order[k]] == positive ? tp : fp) += 1;
    if (k + 1 < order.size() && scores[order[k + 1]] == scores[order[k]]) continue;
    c.thresholds.push_back(scores[order[k]]);
    c.fpr.push_back(neg > 0 ? fp / neg : nan);
    c.tpr.push_back(pos > 0 ? tp / pos : nan);
    c.precision.push_back(tp / (tp + fp));
    c.recall.push_back(pos > 0 ? tp / pos : nan);
  }
  if (c.positives == 0 || c.negatives == 0) {
    c.roc_auc = c.average_precision = nan;
    return c;
  }
  for (std::size_t k = 1; k < c.fpr.size(); ++k) c.roc_auc += (c.fpr[k] - c.fpr[k - 1]) * (c.tpr[k] + c.tpr[k - 1]) / 2;
  double last_recall = 0;
  for (std::size_t k = 0; k < c.thresholds.size(); ++k) {
    c.average_precision += (c.recall[k] - last_recall) * c.precision[k];
    last_recall = c.recall[k];
  }
  return c;
}

std::optional<ThresholdChoice> threshold_for_precision(const BinaryCurves& c, double precision) {
  std::optional<ThresholdChoice> best;
  for (std::size_t k = 0; k < c.thresholds.size(); ++k)
    if (c.precision[k] >= precision && (!best || c.recall[k] > best->recall))
      best = ThresholdChoice{c.thresholds[k], c.precision[k], c.recall[k]};
  return best;
}

std::vector<std::pair<double, ThresholdChoice>> precision_goal_thresholds(const BinaryCurves& c) {
  std::vector<std::pair<double, ThresholdChoice>> out;
  for (const double goal : kPrecisionGoals)
    if (const std::optional<ThresholdChoice> t = threshold_for_precision(c, goal)) out.emplace_back(goal, *t);
  return out;
}

}  // namespace multihead
