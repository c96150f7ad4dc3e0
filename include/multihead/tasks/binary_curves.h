// SPDX-License-Identifier: Apache-2.0
// A binary classifier's ranking quality, as scikit-learn computes it from
// the scores of the positive class: the ROC curve and its area
// (roc_curve, roc_auc_score), the precision-recall curve and average
// precision (precision_recall_curve, average_precision_score), and the
// threshold that reaches a precision. One computation feeds results.json,
// report.md, its figures and `multihead eval`.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace multihead {

struct BinaryCurves {
  std::int64_t positives = 0, negatives = 0;
  // One point a distinct score, highest first: an example counts as
  // positive when its score is >= thresholds[k]. The ROC curve starts at
  // (0, 0) (a threshold above every score, not listed), so fpr and tpr have
  // one point more than thresholds.
  std::vector<double> thresholds;
  std::vector<double> fpr, tpr;
  std::vector<double> precision, recall;  // at each threshold
  // Trapezoids under the ROC curve; sum over thresholds of (R_k - R_k-1) P_k
  // (no interpolation). Both undefined (NaN) without examples of each class.
  double roc_auc = 0, average_precision = 0;
};

// scores[i]: example i's score for the positive class (its probability);
// labels[i]: its class, the positive one `positive`.
BinaryCurves binary_curves(std::span<const double> scores, std::span<const std::int64_t> labels, std::int64_t positive);

// Among the thresholds whose precision is at least `precision`, the one with
// the most recall (the highest of equals), with its precision and recall:
// what a user asking for 99% precision sets --threshold to. None when no
// threshold reaches it.
struct ThresholdChoice {
  double threshold = 0, precision = 0, recall = 0;
};
std::optional<ThresholdChoice> threshold_for_precision(const BinaryCurves& c, double precision);

// The precisions a report offers thresholds for, and each one's choice
// (those no threshold reaches left out).
inline constexpr double kPrecisionGoals[] = {0.9, 0.95, 0.99};
std::vector<std::pair<double, ThresholdChoice>> precision_goal_thresholds(const BinaryCurves& c);

}  // namespace multihead
