// SPDX-License-Identifier: Apache-2.0
// What a classifier got wrong, from its probabilities and the true labels:
// per-class precision, recall and F1, their macro and weighted means, the
// confusion matrix, calibration (expected calibration error over confidence
// bins, and the bins a reliability diagram draws) and the most confident
// mistakes. One computation feeds results.json, report.md, the figures and
// `multihead eval`.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/tasks/binary_curves.h"

namespace multihead {

struct ClassScores {
  std::string label;
  double precision = 0, recall = 0, f1 = 0;  // 0 where undefined (no prediction of, or no example of, the class)
  std::int64_t support = 0;                  // examples of the class
  std::int64_t predicted = 0;                // examples predicted as the class
};

// Confidences (the predicted class's probability) in [lo, hi).
struct ReliabilityBin {
  double lo = 0, hi = 0;
  std::int64_t count = 0;
  double confidence = 0, accuracy = 0;  // means over the bin's examples (0 when empty)
};

struct Mistake {
  std::int64_t index = 0;  // into the examples scored
  std::int64_t truth = 0, predicted = 0;
  double confidence = 0;  // the predicted class's probability
};

struct ClassificationReport {
  std::vector<std::string> labels;
  std::int64_t examples = 0;
  double accuracy = 0, loss = 0;  // loss: mean cross-entropy, nats
  std::vector<ClassScores> classes;
  double macro_precision = 0, macro_recall = 0, macro_f1 = 0, weighted_f1 = 0;
  std::vector<std::int64_t> confusion;  // (C, C): row the true class, column the predicted one
  double ece = 0;  // expected calibration error: sum over bins of count/N * |accuracy - confidence|
  std::vector<ReliabilityBin> bins;
  std::vector<Mistake> worst;  // the most confident mistakes, most confident first
  // Two classes: the ROC and precision-recall curves of the second class's
  // probability (the positive class, as scikit-learn's pos_label is the
  // greater label: spam of ham and spam, 1 of 0 and 1).
  std::optional<BinaryCurves> binary;

  std::int64_t confusion_at(std::size_t truth, std::size_t predicted) const {
    return confusion[truth * labels.size() + predicted];
  }
};

// A classifier's logits z (C) as class probabilities in double, appended
// to out: the softmax predict answers with, so that eval and predict agree.
void append_probabilities(std::vector<double>& out, const float* z, std::int64_t C);

// probabilities: (N, C) row-major, each row a distribution over `labels`;
// labels_true: N class indices. The predicted class is a row's first
// largest probability (as argmax of the logits). ShapeError for sizes that
// disagree or a label out of range. `loss` is the caller's (computed from
// logits, it stays finite where a probability rounds to 0).
ClassificationReport classification_report(std::span<const double> probabilities,
                                           std::span<const std::int64_t> labels_true,
                                           const std::vector<std::string>& labels, double loss,
                                           std::int64_t calibration_bins = 15, std::size_t worst = 5);

// As results.json holds it: accuracy, loss, macro and weighted F1, per_class
// {label: {precision, recall, f1, support}}, confusion_matrix {labels, counts
// (rows true, columns predicted)}, calibration {ece, bins}.
nlohmann::json to_json(const ClassificationReport& r);

// Up to this many classes the report shows every class and the whole
// confusion matrix; past it (a table or figure of hundreds of classes is
// unreadable, and past a few thousand undrawable) the classes and confusions
// that matter most, and the whole in CSV files (confusion_csv, classes_csv).
inline constexpr std::size_t kClassesShownWhole = 30;

// The n classes that take part in the most errors (their examples predicted
// as another class, and other classes' predicted as them), in class order;
// every class when there are at most n.
std::vector<std::size_t> most_confused_classes(const ClassificationReport& r, std::size_t n);

// Markdown: a per-class table with the means, the confusion matrix, and the
// calibration line; past kClassesShownWhole classes, the classes with the
// lowest F1 and the most frequent confusions. `texts`, when given (one per
// example scored), quotes the most confident mistakes.
std::string markdown(const ClassificationReport& r, const std::vector<std::string>* texts = nullptr);

// The whole confusion matrix (a header row of the predicted classes, a row
// per true class) and the per-class scores, as CSV (RFC 4180).
std::string confusion_csv(const ClassificationReport& r);
std::string classes_csv(const ClassificationReport& r);

// The figures: the confusion matrix (each cell its count, coloured by its
// share of the true class's examples; past kClassesShownWhole classes, among
// the most confused classes) and the reliability diagram (accuracy
// against confidence per bin, beside the diagonal of perfect calibration).
void confusion_matrix_png(const std::string& path, const std::string& title, const ClassificationReport& r);
void reliability_png(const std::string& path, const std::string& title, const ClassificationReport& r);

// The report's "## Errors" section for examples scored as `what` ("test"):
// the Markdown of r with the most confident mistakes quoted from texts, and
// its figures drawn as plots_dir/confusion.png and plots_dir/reliability.png
// (linked as plots_link + name; one that cannot be drawn is named instead),
// beside plots_dir/confusion.csv and plots_dir/classes.csv.
std::string errors_section(const ClassificationReport& r, const std::vector<std::string>* texts,
                           const std::string& plots_dir, const std::string& plots_link, const std::string& what);

}  // namespace multihead
