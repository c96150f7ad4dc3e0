// SPDX-License-Identifier: Apache-2.0
// The classification report against values worked out by hand: per-class
// precision, recall and F1 (scikit-learn's definitions), their macro and
// support-weighted means, the confusion matrix, the expected calibration
// error over equal-width confidence bins, and the most confident mistakes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "multihead/core/error.h"
#include "multihead/tasks/binary_curves.h"
#include "multihead/tasks/classification_report.h"

namespace multihead {
namespace {

// Seven examples of three classes; confidences kept off the bins' edges.
//   row  true  probabilities        predicted  confidence
//   0    a     .70 .20 .10          a          .70
//   1    a     .05 .85 .10          b          .85  (mistake)
//   2    b     .20 .65 .15          b          .65
//   3    b     .30 .45 .25          b          .45
//   4    c     .03 .02 .95          c          .95
//   5    c     .50 .25 .25          a          .50  (mistake)
//   6    c     .10 .15 .75          c          .75
const std::vector<double> kProbs = {.70, .20, .10, .05, .85, .10, .20, .65, .15, .30, .45,
                                    .25, .03, .02, .95, .50, .25, .25, .10, .15, .75};
const std::vector<std::int64_t> kTruth = {0, 0, 1, 1, 2, 2, 2};
const std::vector<std::string> kLabels = {"a", "b", "c"};

TEST(ClassificationReport, MatchesTheHandWorkedExample) {
  const ClassificationReport r = classification_report(kProbs, kTruth, kLabels, 0.5, 5, 5);
  EXPECT_EQ(r.examples, 7);
  EXPECT_DOUBLE_EQ(r.accuracy, 5.0 / 7);
  EXPECT_EQ(r.confusion, (std::vector<std::int64_t>{1, 1, 0, 0, 2, 0, 1, 0, 2}));
  // a: predicted twice (rows 0, 5), right once; b: predicted 3 times, right twice; c: twice, right twice.
  EXPECT_DOUBLE_EQ(r.classes[0].precision, 0.5);
  EXPECT_DOUBLE_EQ(r.classes[0].recall, 0.5);
  EXPECT_DOUBLE_EQ(r.classes[0].f1, 0.5);
  EXPECT_DOUBLE_EQ(r.classes[1].precision, 2.0 / 3);
  EXPECT_DOUBLE_EQ(r.classes[1].recall, 1.0);
  EXPECT_NEAR(r.classes[1].f1, 0.8, 1e-12);
  EXPECT_DOUBLE_EQ(r.classes[2].precision, 1.0);
  EXPECT_DOUBLE_EQ(r.classes[2].recall, 2.0 / 3);
  EXPECT_NEAR(r.classes[2].f1, 0.8, 1e-12);
  EXPECT_EQ(r.classes[2].support, 3);
  EXPECT_EQ(r.classes[1].predicted, 3);
  EXPECT_NEAR(r.macro_f1, 0.7, 1e-12);
  EXPECT_NEAR(r.weighted_f1, (2 * 0.5 + 2 * 0.8 + 3 * 0.8) / 7, 1e-12);
  // Bins of 0.2: [.4,.6) holds .45 (right) and .50 (wrong): confidence .475, accuracy .5;
  // [.6,.8) holds .70 .65 .75, all right: confidence .70, accuracy 1;
  // [.8,1] holds .85 (wrong) and .95 (right): confidence .90, accuracy .5.
  EXPECT_EQ(r.bins[2].count, 2);
  EXPECT_NEAR(r.bins[3].confidence, 0.7, 1e-12);
  EXPECT_DOUBLE_EQ(r.bins[4].accuracy, 0.5);
  EXPECT_NEAR(r.ece, (2 * 0.025 + 3 * 0.3 + 2 * 0.4) / 7, 1e-12);
  ASSERT_EQ(r.worst.size(), 2u);
  EXPECT_EQ(r.worst[0].index, 1);
  EXPECT_EQ(r.worst[0].predicted, 1);
  EXPECT_DOUBLE_EQ(r.worst[0].confidence, 0.85);
  EXPECT_EQ(r.worst[1].index, 5);
}

TEST(ClassificationReport, JsonAndMarkdownCarryEveryPart) {
  const ClassificationReport r = classification_report(kProbs, kTruth, kLabels, 0.5, 5, 1);
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["confusion_matrix"]["counts"], nlohmann::json::parse("[[1,1,0],[0,2,0],[1,0,2]]"));
  EXPECT_EQ(j["confusion_matrix"]["labels"], nlohmann::json(kLabels));
  EXPECT_DOUBLE_EQ(j["per_class"]["b"]["precision"].get<double>(), 2.0 / 3);
  EXPECT_EQ(j["per_class"]["c"]["support"], 3);
  EXPECT_EQ(j["calibration"]["bins"].size(), 3u);  // the empty bins are left out
  EXPECT_NEAR(j["calibration"]["ece"].get<double>(), 0.25, 1e-12);
  const std::vector<std::string> texts = {"t0", "refund | please\nnow", "t2", "t3", "t4", "t5", "t6"};
  const std::string md = markdown(r, &texts);
  EXPECT_NE(md.find("| b | 0.667 | 1.000 | 0.800 | 2 | 3 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| macro mean | 0.722 | 0.722 | 0.700 | 7 | |"), std::string::npos) << md;
  EXPECT_NE(md.find("| c | 1 | 0 | **2** |"), std::string::npos) << md;
  // A mistake's text stays in its table cell.
  EXPECT_NE(md.find("| a | b | 0.8500 | refund \\| please now |"), std::string::npos) << md;
}

TEST(ClassificationReport, AClassNeverPredictedScoresZeroNotNaN) {
  const ClassificationReport r = classification_report(std::vector<double>{0.9, 0.1, 0.8, 0.2},
                                                       std::vector<std::int64_t>{0, 1}, {"x", "y"}, 0.1, 15, 5);
  EXPECT_EQ(r.classes[1].predicted, 0);
  EXPECT_EQ(r.classes[1].precision, 0.0);
  EXPECT_EQ(r.classes[1].f1, 0.0);
  EXPECT_DOUBLE_EQ(r.macro_f1, (2 * 0.5 * 1 / 1.5) / 2);
}

TEST(ClassificationReport, BadShapesAreRefused) {
  EXPECT_THROW(classification_report(std::vector<double>{0.5, 0.5}, std::vector<std::int64_t>{0, 1}, {"x", "y"}, 0),
               ShapeError);
  EXPECT_THROW(classification_report(std::vector<double>{0.5, 0.5}, std::vector<std::int64_t>{2}, {"x", "y"}, 0),
               ShapeError);
}

TEST(ClassificationReport, FiguresArePngFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "multihead_test_report_figures";
  std::filesystem::create_directories(dir);
  const ClassificationReport r = classification_report(kProbs, kTruth, kLabels, 0.5);
  confusion_matrix_png((dir / "c.png").string(), "confusion", r);
  reliability_png((dir / "r.png").string(), "reliability", r);
  for (const char* f : {"c.png", "r.png"}) EXPECT_GT(std::filesystem::file_size(dir / f), 1000u) << f;
  std::filesystem::remove_all(dir);
}

// Past kClassesShownWhole classes: the table keeps the classes with the
// lowest F1, the confusions list the largest off-diagonal cells, the figure
// the classes that take part in the most errors, and the CSV files all of it.
TEST(ClassificationReport, ManyClassesKeepTheTablesReadableAndTheWholeInCsv) {
  const std::size_t C = 40;
  std::vector<std::string> labels;
  for (std::size_t c = 0; c < C; ++c) labels.push_back("c" + std::to_string(c));
  labels[7] = "with, comma";
  // Each class has two examples: class c's second is predicted as class (c + 1) % C when c % 4 == 0.
  std::vector<double> probs;
  std::vector<std::int64_t> truth;
  for (std::size_t c = 0; c < C; ++c)
    for (int k = 0; k < 2; ++k) {
      const std::size_t predicted = k == 1 && c % 4 == 0 ? (c + 1) % C : c;
      for (std::size_t j = 0; j < C; ++j) probs.push_back(j == predicted ? 0.9 : 0.1 / static_cast<double>(C - 1));
      truth.push_back(static_cast<std::int64_t>(c));
    }
  const ClassificationReport r = classification_report(probs, truth, labels, 0.3);
  const std::string md = markdown(r);
  EXPECT_NE(md.find("The 30 classes with the lowest F1 of 40"), std::string::npos) << md;
  EXPECT_NE(md.find("| c0 | "), std::string::npos);  // F1 2/3: among the lowest
  EXPECT_EQ(md.find("| true \\ predicted |"), std::string::npos) << "a 40 x 40 table";
  EXPECT_NE(md.find("| c4 | c5 | 1 |"), std::string::npos) << md;
  // Classes 0, 1, 4, 5, ... take part in errors (ten confusions, twenty classes): every one of them is drawn.
  const std::vector<std::size_t> shown = most_confused_classes(r, 30);
  EXPECT_EQ(shown.size(), 30u);
  for (std::size_t c = 0; c < C; c += 4) {
    EXPECT_NE(std::find(shown.begin(), shown.end(), c), shown.end()) << c;
    EXPECT_NE(std::find(shown.begin(), shown.end(), (c + 1) % C), shown.end()) << c;
  }
  EXPECT_TRUE(std::is_sorted(shown.begin(), shown.end()));
  const std::string csv = confusion_csv(r);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 41);
  EXPECT_EQ(csv.substr(0, csv.find('\n')).find("\"with, comma\""), csv.substr(0, csv.find('\n')).find(",\"w") + 1);
  EXPECT_NE(csv.find("\nc4,0,0,0,0,1,1,"), std::string::npos) << csv.substr(0, 600);
  const std::string classes = classes_csv(r);
  EXPECT_EQ(classes.substr(0, classes.find('\n')), "class,precision,recall,f1,examples,predicted");
  EXPECT_NE(classes.find("\nc1,0.666667,1.000000,0.800000,2,3\n"), std::string::npos) << classes;
  // A few classes: every one, and the whole matrix.
  const std::string few = markdown(classification_report(kProbs, kTruth, kLabels, 0.5));
  EXPECT_NE(few.find("| true \\ predicted |"), std::string::npos);
  EXPECT_EQ(few.find("lowest F1"), std::string::npos);
}

// The ranking metrics on a case with a tie across the classes (0.8), as
// scikit-learn 1.9.1 gives them: roc_curve(drop_intermediate=False) without
// its +inf threshold, roc_auc_score 0.71875, average_precision_score
// 0.7470238095238095; and the threshold for a precision.
TEST(BinaryCurves, FollowScikitLearn) {
  const std::vector<double> scores = {0.9, 0.8, 0.8, 0.6, 0.4, 0.3, 0.2, 0.1};
  const std::vector<std::int64_t> labels = {1, 0, 1, 1, 0, 0, 1, 0};
  const BinaryCurves c = binary_curves(scores, labels, 1);
  EXPECT_EQ(c.thresholds, (std::vector<double>{0.9, 0.8, 0.6, 0.4, 0.3, 0.2, 0.1}));
  EXPECT_EQ(c.fpr, (std::vector<double>{0, 0, 0.25, 0.25, 0.5, 0.75, 0.75, 1}));
  EXPECT_EQ(c.tpr, (std::vector<double>{0, 0.25, 0.5, 0.75, 0.75, 0.75, 1, 1}));
  EXPECT_DOUBLE_EQ(c.roc_auc, 0.71875);
  EXPECT_DOUBLE_EQ(c.average_precision, 0.7470238095238095);
  // Precision 1 only at 0.9 (recall 0.25); 0.75 at 0.6 (recall 0.75; 0.4 falls to 0.6 precision).
  const auto one = threshold_for_precision(c, 1.0);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->threshold, 0.9);
  EXPECT_EQ(one->recall, 0.25);
  const auto three_quarters = threshold_for_precision(c, 0.75);
  ASSERT_TRUE(three_quarters);
  EXPECT_EQ(three_quarters->threshold, 0.6);
  EXPECT_EQ(three_quarters->recall, 0.75);
  // One class only: the areas are undefined, not a number.
  const std::vector<std::int64_t> none(8, 0);
  EXPECT_TRUE(std::isnan(binary_curves(scores, none, 1).roc_auc));
}

}  // namespace
}  // namespace multihead
