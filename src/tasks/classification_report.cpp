// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/classification_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/report/plots.h"

namespace multihead {

namespace {

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

void append_probabilities(std::vector<double>& out, const float* z, std::int64_t C) {
  const float top = *std::max_element(z, z + C);
  double sum = 0;
  for (std::int64_t c = 0; c < C; ++c) sum += std::exp(static_cast<double>(z[c] - top));
  for (std::int64_t c = 0; c < C; ++c) out.push_back(std::exp(static_cast<double>(z[c] - top)) / sum);
}

ClassificationReport classification_report(std::span<const double> probabilities,
                                           std::span<const std::int64_t> labels_true,
                                           const std::vector<std::string>& labels, double loss,
                                           std::int64_t calibration_bins, std::size_t worst) {
  const std::size_t C = labels.size(), N = labels_true.size();
  check<ShapeError>(C > 0 && probabilities.size() == N * C, "{} probabilities for {} examples of {} classes",
                    probabilities.size(), N, C);
  check<ShapeError>(calibration_bins > 0, "calibration needs at least one bin, got {}", calibration_bins);
  ClassificationReport r;
  r.labels = labels;
  r.examples = static_cast<std::int64_t>(N);
  r.loss = loss;
  r.confusion.assign(C * C, 0);
  r.bins.resize(static_cast<std::size_t>(calibration_bins));
  for (std::size_t b = 0; b < r.bins.size(); ++b) {
    r.bins[b].lo = static_cast<double>(b) / static_cast<double>(calibration_bins);
    r.bins[b].hi = static_cast<double>(b + 1) / static_cast<double>(calibration_bins);
  }
  std::vector<Mistake> mistakes;
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const std::int64_t t = labels_true[i];
    check<ShapeError>(t >= 0 && static_cast<std::size_t>(t) < C, "example {} has label {}, outside 0..{}", i, t, C - 1);
    const double* p = probabilities.data() + i * C;
    const auto pred = static_cast<std::int64_t>(std::max_element(p, p + C) - p);
    const double conf = p[pred];
    ++r.confusion[static_cast<std::size_t>(t) * C + static_cast<std::size_t>(pred)];
    const bool right = pred == t;
    correct += right;
    // Bin b holds confidences in [b/B, (b+1)/B); a confidence of 1 goes in the last.
    const auto b = std::min<std::size_t>(
        static_cast<std::size_t>(std::max(conf, 0.0) * static_cast<double>(calibration_bins)), r.bins.size() - 1);
    ++r.bins[b].count;
    r.bins[b].confidence += conf;
    r.bins[b].accuracy += right;
    if (!right) mistakes.push_back({static_cast<std::int64_t>(i), t, pred, conf});
  }
  r.accuracy = ratio(static_cast<double>(correct), static_cast<double>(N));
  if (C == 2) {
    std::vector<double> scores(N);
    for (std::size_t i = 0; i < N; ++i) scores[i] = probabilities[i * 2 + 1];
    r.binary = binary_curves(scores, labels_true, 1);
  }
  for (ReliabilityBin& b : r.bins) {
    const double n = static_cast<double>(b.count);
    b.confidence = ratio(b.confidence, n);
    b.accuracy = ratio(b.accuracy, n);
    r.ece += ratio(n, static_cast<double>(N)) * std::fabs(b.accuracy - b.confidence);
  }
  for (std::size_t c = 0; c < C; ++c) {
    ClassScores s;
    s.label = labels[c];
    const std::int64_t tp = r.confusion_at(c, c);
    for (std::size_t k = 0; k < C; ++k) s.support += r.confusion_at(c, k), s.predicted += r.confusion_at(k, c);
    s.precision = ratio(static_cast<double>(tp), static_cast<double>(s.predicted));
    s.recall = ratio(static_cast<double>(tp), static_cast<double>(s.support));
    s.f1 = ratio(2 * s.precision * s.recall, s.precision + s.recall);
    r.macro_precision += s.precision / static_cast<double>(C);
    r.macro_recall += s.recall / static_cast<double>(C);
    r.macro_f1 += s.f1 / static_cast<double>(C);
    r.weighted_f1 += s.f1 * ratio(static_cast<double>(s.support), static_cast<double>(N));
    r.classes.push_back(std::move(s));
  }
  std::stable_sort(mistakes.begin(), mistakes.end(),
                   [](const Mistake& a, const Mistake& b) { return a.confidence > b.confidence; });
  mistakes.resize(std::min(mistakes.size(), worst));
  r.worst = std::move(mistakes);
  return r;
}

nlohmann::json to_json(const ClassificationReport& r) {
  nlohmann::json per_class = nlohmann::json::object();
  for (const ClassScores& s : r.classes)
    per_class[s.label] = {{"precision", s.precision}, {"recall", s.recall}, {"f1", s.f1}, {"support", s.support}};
  nlohmann::json counts = nlohmann::json::array();
  for (std::size_t t = 0; t < r.labels.size(); ++t) {
    nlohmann::json row = nlohmann::json::array();
    for (std::size_t p = 0; p < r.labels.size(); ++p) row.push_back(r.confusion_at(t, p));
    counts.push_back(std::move(row));
  }
  nlohmann::json bins = nlohmann::json::array();
  for (const ReliabilityBin& b : r.bins)
    if (b.count > 0)
      bins.push_back(
          {{"lo", b.lo}, {"hi", b.hi}, {"count", b.count}, {"confidence", b.confidence}, {"accuracy", b.accuracy}});
  nlohmann::json out = {
      {"examples", r.examples},
      {"accuracy", r.accuracy},
      {"loss", r.loss},
      {"macro_precision", r.macro_precision},
      {"macro_recall", r.macro_recall},
      {"macro_f1", r.macro_f1},
      {"weighted_f1", r.weighted_f1},
      {"per_class", per_class},
      {"confusion_matrix",
       {{"labels", r.labels}, {"rows", "true class"}, {"columns", "predicted class"}, {"counts", counts}}},
      {"calibration", {{"ece", r.ece}, {"bins", bins}}}};
  if (r.binary) {
    // NaN (one class only) is written as null.
    const BinaryCurves& b = *r.binary;
    out["positive_class"] = r.labels[1];
    out["roc_auc"] = b.roc_auc;
    out["average_precision"] = b.average_precision;
    out["roc"] = {{"fpr", b.fpr}, {"tpr", b.tpr}, {"thresholds", b.thresholds}};
    out["precision_recall"] = {{"precision", b.precision}, {"recall", b.recall}, {"thresholds", b.thresholds}};
  }
  return out;
}

namespace {

// The --threshold that reaches each of a few precisions on these examples,
// with the recall it keeps: the trade a deployer picks from.
std::string precision_thresholds(const BinaryCurves& b) {
  std::string s;
  for (const auto& [goal, t] : precision_goal_thresholds(b))
    s += fmt::format("{}precision >= {:.2f} from --threshold {:.4g} (recall {:.4f})", s.empty() ? "" : "; ", goal,
                     t.threshold, t.recall);
  return s.empty() ? "" : "Thresholds on these examples: " + s + ".\n";
}

// A cell of a Markdown table: no '|' or line break inside.
std::string cell(const std::string& s, std::size_t max_chars = 100) {
  std::string out;
  for (char c : clip_text(s, max_chars))
    out += c == '|' ? std::string("\\|") : c == '\n' || c == '\r' || c == '\t' ? std::string(" ") : std::string(1, c);
  return out;
}

// A field of a CSV file (RFC 4180): quoted when it holds a comma, quote or line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// The errors class c takes part in: its examples predicted as another class,
// and other classes' examples predicted as it.
std::int64_t errors_of(const ClassificationReport& r, std::size_t c) {
  std::int64_t n = 0;
  for (std::size_t k = 0; k < r.labels.size(); ++k)
    if (k != c) n += r.confusion_at(c, k) + r.confusion_at(k, c);
  return n;
}

}  // namespace

std::vector<std::size_t> most_confused_classes(const ClassificationReport& r, std::size_t n) {
  std::vector<std::size_t> order(r.labels.size());
  for (std::size_t c = 0; c < order.size(); ++c) order[c] = c;
  if (order.size() <= n) return order;
  std::vector<std::int64_t> errors(order.size());
  for (std::size_t c = 0; c < order.size(); ++c) errors[c] = errors_of(r, c);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return errors[a] > errors[b]; });
  order.resize(n);
  std::sort(order.begin(), order.end());
  return order;
}

std::string markdown(const ClassificationReport& r, const std::vector<std::string>* texts) {
  const std::size_t C = r.labels.size();
  const bool whole = C <= kClassesShownWhole;
  std::string md;
  // Past kClassesShownWhole classes, the table shows those with the lowest F1 (most examples first among equals).
  std::vector<std::size_t> rows(C);
  for (std::size_t c = 0; c < C; ++c) rows[c] = c;
  if (!whole) {
    std::stable_sort(rows.begin(), rows.end(), [&](std::size_t a, std::size_t b) {
      const ClassScores &x = r.classes[a], &y = r.classes[b];
      return x.f1 != y.f1 ? x.f1 < y.f1 : x.support > y.support;
    });
    rows.resize(kClassesShownWhole);
    md += fmt::format(
        "The {} classes with the lowest F1 of {} (every class: `classes.csv` beside the figures, and "
        "results.json):\n\n",
        kClassesShownWhole, C);
  }
  md += "| class | precision | recall | F1 | examples | predicted |\n|---|---|---|---|---|---|\n";
  for (const std::size_t c : rows) {
    const ClassScores& s = r.classes[c];
    md += fmt::format("| {} | {:.3f} | {:.3f} | {:.3f} | {} | {} |\n", cell(s.label, 40), s.precision, s.recall, s.f1,
                      s.support, s.predicted);
  }
  md += fmt::format("| macro mean | {:.3f} | {:.3f} | {:.3f} | {} | |\n", r.macro_precision, r.macro_recall, r.macro_f1,
                    r.examples);
  md += fmt::format("| weighted mean | | | {:.3f} | {} | |\n\n", r.weighted_f1, r.examples);
  if (whole) {
    md += "Confusion matrix (rows: the true class; columns: the predicted one):\n\n| true \\ predicted |";
    for (const std::string& l : r.labels) md += " " + cell(l, 40) + " |";
    md += "\n|---|";
    for (std::size_t i = 0; i < C; ++i) md += "---|";
    md += "\n";
    for (std::size_t t = 0; t < C; ++t) {
      md += "| " + cell(r.labels[t], 40) + " |";
      for (std::size_t p = 0; p < C; ++p)
        md += t == p ? fmt::format(" **{}** |", r.confusion_at(t, p)) : fmt::format(" {} |", r.confusion_at(t, p));
      md += "\n";
    }
  } else {
    // The largest off-diagonal cells, most examples first.
    struct Pair {
      std::size_t truth, predicted;
      std::int64_t count;
    };
    std::vector<Pair> pairs;
    for (std::size_t t = 0; t < C; ++t)
      for (std::size_t p = 0; p < C; ++p)
        if (t != p && r.confusion_at(t, p) > 0) pairs.push_back({t, p, r.confusion_at(t, p)});
    std::stable_sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) { return a.count > b.count; });
    pairs.resize(std::min(pairs.size(), kClassesShownWhole));
    md += fmt::format(
        "The most frequent confusions of {} classes (the whole matrix: `confusion.csv` beside the "
        "figures, and results.json):\n\n| true | predicted | examples |\n|---|---|---|\n",
        C);
    for (const Pair& p : pairs)
      md += fmt::format("| {} | {} | {} |\n", cell(r.labels[p.truth], 40), cell(r.labels[p.predicted], 40), p.count);
  }
  md += fmt::format(
      "\nCalibration: expected calibration error {:.4f} over {} confidence bins (0 is perfectly calibrated: in each "
      "bin the share right equals the mean confidence).\n",
      r.ece, r.bins.size());
  if (r.binary)
    md += std::isnan(r.binary->roc_auc)
              ? fmt::format("\nROC and precision-recall: undefined, the examples are all of one class.\n")
              : fmt::format(
                    "\nRanking (the probability of `{}`, the positive class): ROC AUC {:.4f}, average "
                    "precision {:.4f} over {} positive and {} negative examples.\n",
                    cell(r.labels[1], 40), r.binary->roc_auc, r.binary->average_precision, r.binary->positives,
                    r.binary->negatives) +
                    precision_thresholds(*r.binary);
  if (texts && !r.worst.empty()) {
    md += "\nThe most confident mistakes:\n\n| true | predicted | confidence | text |\n|---|---|---|---|\n";
    for (const Mistake& m : r.worst)
      md += fmt::format("| {} | {} | {:.4f} | {} |\n", cell(r.labels[static_cast<std::size_t>(m.truth)], 40),
                        cell(r.labels[static_cast<std::size_t>(m.predicted)], 40), m.confidence,
                        cell((*texts)[static_cast<std::size_t>(m.index)]));
  }
  return md;
}

std::string confusion_csv(const ClassificationReport& r) {
  std::string csv = "true \\ predicted";
  for (const std::string& l : r.labels) csv += "," + csv_field(l);
  csv += "\n";
  for (std::size_t t = 0; t < r.labels.size(); ++t) {
    csv += csv_field(r.labels[t]);
    for (std::size_t p = 0; p < r.labels.size(); ++p) csv += fmt::format(",{}", r.confusion_at(t, p));
    csv += "\n";
  }
  return csv;
}

std::string classes_csv(const ClassificationReport& r) {
  std::string csv = "class,precision,recall,f1,examples,predicted\n";
  for (const ClassScores& s : r.classes)
    csv += fmt::format("{},{:.6f},{:.6f},{:.6f},{},{}\n", csv_field(s.label), s.precision, s.recall, s.f1, s.support,
                       s.predicted);
  return csv;
}

void confusion_matrix_png(const std::string& path, const std::string& title, const ClassificationReport& r) {
  const std::vector<std::size_t> shown = most_confused_classes(r, kClassesShownWhole);
  const auto n = static_cast<std::int64_t>(shown.size());
  std::vector<std::int64_t> counts;
  std::vector<std::string> labels;
  for (const std::size_t t : shown) {
    labels.push_back(r.labels[t]);
    for (const std::size_t p : shown) counts.push_back(r.confusion_at(t, p));
  }
  const std::string heading = shown.size() == r.labels.size()
                                  ? title
                                  : fmt::format("{}: the {} most confused of {} classes", title, n, r.labels.size());
  count_matrix_png(path, heading, counts, n, n, labels, labels, "true class", "predicted class");
}

void reliability_png(const std::string& path, const std::string& title, const ClassificationReport& r) {
  // Each bin's examples beside its point: a bin of three says little.
  Series model{fmt::format("model (ECE {:.3f}; numbers: examples in the bin)", r.ece), {}, {}};
  for (const ReliabilityBin& b : r.bins)
    if (b.count > 0) {
      model.x.push_back(b.confidence), model.y.push_back(b.accuracy);
      model.labels.push_back(fmt::format("{}", b.count));
    }
  Series ideal{"perfect calibration", {0, 1}, {0, 1}};
  ideal.dashed = true;
  PlotAxes axes;
  axes.y_min = 0, axes.y_max = 1;
  line_plot_png(path, title, "confidence (the predicted class's probability)", "accuracy (fraction right)",
                {ideal, model}, axes);
}

// The ROC and precision-recall curves of a binary report, each with its area.
void roc_png(const std::string& path, const std::string& title, const ClassificationReport& r) {
  const BinaryCurves& b = *r.binary;
  Series model{fmt::format("model (AUC {:.4f})", b.roc_auc), b.fpr, b.tpr};
  Series chance{"chance", {0, 1}, {0, 1}};
  chance.dashed = true;
  PlotAxes axes;
  axes.y_min = 0, axes.y_max = 1;
  line_plot_png(path, title, "false positive rate (negatives predicted positive)",
                "true positive rate (positives found)", {chance, model}, axes);
}

void precision_recall_png(const std::string& path, const std::string& title, const ClassificationReport& r) {
  const BinaryCurves& b = *r.binary;
  Series model{fmt::format("model (average precision {:.4f})", b.average_precision), b.recall, b.precision};
  const double base = static_cast<double>(b.positives) / static_cast<double>(b.positives + b.negatives);
  Series chance{fmt::format("chance (the positive share, {:.3f})", base), {0, 1}, {base, base}};
  chance.dashed = true;
  PlotAxes axes;
  axes.y_min = 0, axes.y_max = 1;
  line_plot_png(path, title, "recall (positives found)", "precision (predicted positives right)", {chance, model},
                axes);
}

std::string errors_section(const ClassificationReport& r, const std::vector<std::string>* texts,
                           const std::string& plots_dir, const std::string& plots_link, const std::string& what) {
  // The tables in full, whatever the number of classes, beside the figures.
  write_file_atomic(plots_dir + "/confusion.csv", confusion_csv(r));
  write_file_atomic(plots_dir + "/classes.csv", classes_csv(r));
  const std::string confusion = figure_markdown("confusion matrix", plots_link + "confusion.png", [&] {
    confusion_matrix_png(plots_dir + "/confusion.png", fmt::format("Confusion matrix ({} examples)", r.examples), r);
  });
  const std::string reliability = figure_markdown("reliability diagram", plots_link + "reliability.png", [&] {
    reliability_png(plots_dir + "/reliability.png", fmt::format("Reliability ({} examples)", r.examples), r);
  });
  std::string ranking;
  if (r.binary && !std::isnan(r.binary->roc_auc)) {
    const std::string positive = r.labels[1];
    ranking = figure_markdown("ROC curve", plots_link + "roc.png", [&] {
      roc_png(plots_dir + "/roc.png", fmt::format("ROC, positive class {} ({} examples)", positive, r.examples), r);
    });
    ranking += figure_markdown("precision-recall curve", plots_link + "precision_recall.png", [&] {
      precision_recall_png(plots_dir + "/precision_recall.png",
                           fmt::format("Precision-recall, positive class {} ({} examples)", positive, r.examples), r);
    });
  }
  return fmt::format(
      "## Errors\n\nOn the {} {} examples: accuracy {:.2f}%, macro F1 {:.4f}, weighted F1 {:.4f}, loss {:.4f}.\n\n{}\n"
      "{}{}{}",
      r.examples, what, 100 * r.accuracy, r.macro_f1, r.weighted_f1, r.loss, markdown(r, texts), confusion, reliability,
      ranking);
}

}  // namespace multihead
