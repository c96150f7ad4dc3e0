// SPDX-License-Identifier: Apache-2.0
// Every experiment in --quick mode writes its table with the expected rows
// and columns, its results and its plots. At these sizes the numbers mean
// nothing about the claims, so what is checked of them is what holds
// whatever was learnt: each cell is the mean and sample standard deviation
// of the runs results.json records, and the quantities with a closed form
// (a FLOP count, ln L, a bound on the mass outside the top keys, a test
// set's size) have it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/experiments/experiments.h"
#include "test_util.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;

class QuickExperiment : public test::ScratchFolder {
 protected:
  QuickExperiment() : ScratchFolder("experiments", false) {}

  ExperimentReport run(const std::string& name) {
    ExperimentOptions o;
    o.quick = true;
    o.out = dir.string();
    o.seeds = 2;
    o.threads = 1;
    o.quiet = true;
    ExperimentReport r = run_experiment(name, o);
    EXPECT_EQ(r.dir, (dir / name).string());
    for (const char* f : {"table.md", "results.json"}) EXPECT_TRUE(fs::exists(dir / name / f)) << name << " " << f;
    std::ifstream md(dir / name / "table.md");
    const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
    for (const auto& t : r.tables) {
      EXPECT_NE(text.find(t.markdown()), std::string::npos) << name << ": " << t.title;
      for (const auto& row : t.rows) EXPECT_EQ(row.size(), t.columns.size()) << name << ": " << t.title;
    }
    EXPECT_EQ(r.results["seeds"], 2);
    return r;
  }
  // Every cell of a column holds "mean ± std" (two seeds).
  static void expect_mean_std(const ExperimentTable& t, std::size_t col) {
    for (const auto& row : t.rows) EXPECT_NE(row[col].find(" ± "), std::string::npos) << t.title << ": " << row[col];
  }
};

// The cell a table shows for values over seeds, computed here apart from the
// experiments' own helpers: "mean ± sample std", scaled, with `decimals`.
std::string cell(const std::vector<double>& v, double scale, int decimals, const std::string& suffix = "") {
  double m = 0, ss = 0;
  for (double x : v) m += x / static_cast<double>(v.size());
  for (double x : v) ss += (x - m) * (x - m);
  return fmt::format("{:.{}f} ± {:.{}f}{}", scale * m, decimals,
                     scale * std::sqrt(ss / static_cast<double>(v.size() - 1)), decimals, suffix);
}

// The values of `field` over the runs of results.json where `key` is `value`.
std::vector<double> over_runs(const nlohmann::json& runs, const std::string& key, std::int64_t value,
                              const std::string& field) {
  std::vector<double> v;
  for (const auto& run : runs)
    if (run.contains(key) && run[key] == value && run.contains(field)) v.push_back(run[field].get<double>());
  return v;
}

std::vector<std::string> first_column(const ExperimentTable& t) {
  std::vector<std::string> v;
  for (const auto& r : t.rows) v.push_back(r[0]);
  return v;
}

TEST_F(QuickExperiment, Positions) {
  ExperimentReport r = run("positions");
  ASSERT_EQ(r.tables.size(), 1u);
  const ExperimentTable& t = r.tables[0];
  EXPECT_EQ(first_column(t), (std::vector<std::string>{"none", "sinusoidal", "learned", "relative", "rope", "alibi"}));
  EXPECT_EQ(t.columns, (std::vector<std::string>{"positions", "token accuracy at 8", "token accuracy at 16",
                                                 "token accuracy at 32", "sequence accuracy at 8", "ms per step",
                                                 "step time vs sinusoidal"}));
  expect_mean_std(t, 1);
  EXPECT_EQ(t.rows[1][6], "+0%");  // sinusoidal against itself
  EXPECT_TRUE(fs::exists(dir / "positions" / "token_accuracy_by_length.png"));
  EXPECT_EQ(r.results["runs"].size(), 12u);  // 6 kinds x 2 seeds
}

// The articles' translation table redone on pronunciation (a synthetic dictionary here).
TEST_F(QuickExperiment, PositionsSeq2Seq) {
  ExperimentReport r = run("positions-seq2seq");
  ASSERT_EQ(r.tables.size(), 1u);
  const ExperimentTable& p = r.tables[0];
  EXPECT_EQ(first_column(p), (std::vector<std::string>{"sinusoidal", "learned", "relative", "rope", "alibi"}));
  EXPECT_EQ(p.columns,
            (std::vector<std::string>{"positions", "test WER", "test PER", "test BLEU", "WER, words over 6 letters",
                                      "steps to validation WER <= 90%", "ms per step", "step time vs sinusoidal"}));
  EXPECT_EQ(p.rows[0][7], "+0%");
  const auto& words = r.results["runs"];
  ASSERT_EQ(words.size(), 10u);  // 5 kinds x 2 seeds
  for (const auto& run : words) {
    EXPECT_GT(run["longer_words"].get<std::int64_t>(), 0);  // the test holds words longer than any trained on
    EXPECT_FALSE(run["validation_wer"].empty());            // validated within the epochs too
    EXPECT_GE(run["test_wer"].get<double>(), 0.0);
  }
}

TEST_F(QuickExperiment, Variants) {
  ExperimentReport r = run("variants");
  const ExperimentTable& t = r.tables.at(0);
  EXPECT_EQ(t.columns, (std::vector<std::string>{"attention", "length", "token accuracy", "sequence accuracy",
                                                 "ms per step", "peak activations MiB"}));
  ASSERT_EQ(t.rows.size(), 8u);  // 4 variants x 2 lengths
  EXPECT_EQ(t.rows[0][0], "full");
  EXPECT_EQ(t.rows[7][0], "linear");
  EXPECT_EQ(t.rows[7][1], "16");
  expect_mean_std(t, 5);
  EXPECT_TRUE(fs::exists(dir / "variants" / "ms_per_step.png"));
}

TEST_F(QuickExperiment, Optimisation) {
  ExperimentReport r = run("optimisation");
  const ExperimentTable& t = r.tables.at(0);
  EXPECT_EQ(t.columns, (std::vector<std::string>{"clip_grad_norm", "warmup steps", "final loss", "token accuracy",
                                                 "sequence accuracy", "loss spikes"}));
  EXPECT_EQ(first_column(t), (std::vector<std::string>{"0.1", "0.1", "1", "1", "none", "none"}));
  EXPECT_EQ(t.rows[0][1], "2");
  EXPECT_EQ(t.rows[1][1], "0");
  expect_mean_std(t, 2);
  EXPECT_TRUE(fs::exists(dir / "optimisation" / "loss.png"));
}

// Splitting into heads: the same FLOPs at every head count (d/h >= 4), so the
// core's GFLOP/s and its time say what h costs; a table for each precision,
// pass, width and length, and a plot for each precision and pass.
TEST_F(QuickExperiment, HeadCost) {
  ExperimentReport r = run("head-cost");
  ASSERT_EQ(r.tables.size(), 4u);  // --quick: d_model 32 at L = 16; fp32 and bf16, forward and forward+backward
  const ExperimentTable& t = r.tables[0];
  EXPECT_EQ(t.columns, (std::vector<std::string>{"heads", "head dim", "core ms", "core GFLOP/s", "core vs 1 head",
                                                 "layer ms", "layer GFLOP/s", "peak activations MiB"}));
  EXPECT_EQ(first_column(t), (std::vector<std::string>{"1", "2", "4", "8"}));  // 32 / 8 = 4, the smallest head
  EXPECT_EQ(t.rows[3][1], "4");
  EXPECT_EQ(t.rows[0][4], "1.00x");
  std::set<double> flops;
  for (const auto& run : r.results["runs"])
    if (run["precision"] == "fp32" && run["backward"] == false) flops.insert(run["core_flops"].get<double>());
  EXPECT_EQ(flops.size(), 1u);  // 4 L^2 d whatever h
  EXPECT_EQ(*flops.begin(), 4.0 * 16 * 16 * 32);
  for (const char* f :
       {"core_ms_fp32_fwd.png", "core_ms_fp32_fwd_bwd.png", "core_ms_bf16_fwd.png", "core_ms_bf16_fwd_bwd.png"})
    EXPECT_TRUE(fs::exists(dir / "head-cost" / f)) << f;
}

TEST_F(QuickExperiment, Gradients) {
  ExperimentReport r = run("gradients");
  ASSERT_EQ(r.tables.size(), 6u);  // reverse and spam: accuracy, position shares, head cosines
  EXPECT_EQ(first_column(r.tables[0]),
            (std::vector<std::string>{"learned post-LN", "learned pre-LN", "sinusoidal post-LN", "sinusoidal pre-LN"}));
  EXPECT_EQ(r.tables[3].columns, (std::vector<std::string>{"positions", "test accuracy"}));
  const ExperimentTable& t = r.tables[1];
  EXPECT_EQ(t.columns,
            (std::vector<std::string>{"positions", "when", "step", "layer 1", "layer 2", "residual stream only"}));
  EXPECT_EQ(t.rows.size(), 16u);  // 4 settings, 4 points of training
  EXPECT_EQ(t.rows[0][0], "learned post-LN");
  EXPECT_EQ(t.rows[0][2], "0");
  EXPECT_EQ(t.rows[3][2], "20");  // the quick reverse run's 20 steps
  expect_mean_std(t, 3);
  EXPECT_EQ(r.tables[2].columns, (std::vector<std::string>{"positions", "when", "step", "layer 1", "layer 2"}));
  // Every probe: the shares sum to 1, each cosine within [-1, 1], at the
  // initial weights and every kept checkpoint (a tenth of training apart).
  ASSERT_EQ(r.results["runs"].size(), 16u);  // 2 tasks x 4 settings x 2 seeds
  for (const auto& run : r.results["runs"]) {
    const auto& probes = run["probes"];
    EXPECT_EQ(probes.front()["step"], 0);
    EXPECT_GE(probes.size(), 11u);
    for (const auto& p : probes) {
      double sum = p["residual_share"].get<double>();
      for (double s : p["position_share"]) sum += s;
      EXPECT_NEAR(sum, 1.0, 1e-9) << run["task"] << " step " << p["step"];
      ASSERT_EQ(p["head_cosine"].size(), 2u);
      for (double c : p["head_cosine"]) EXPECT_TRUE(c >= -1 && c <= 1) << c;
    }
    // The weights change over training, and so do the shares.
    EXPECT_NE(probes.front()["position_share"], probes.back()["position_share"]);
  }
  for (const char* f : {"position_share_reverse_post.png", "position_share_spam_pre.png", "head_cosine_reverse_pre.png",
                        "head_cosine_spam_post.png"})
    EXPECT_TRUE(fs::exists(dir / "gradients" / f)) << f;
  // The checkpoints kept for the probe are gone; the last one stays.
  const fs::path run_dir = dir / "gradients" / "runs" / "reverse_learned_pre_seed1";
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "last.safetensors"));
  EXPECT_FALSE(fs::exists(run_dir / "checkpoints" / "step_00000010.safetensors"));
}

TEST_F(QuickExperiment, Heads) {
  ExperimentReport r = run("heads");
  ASSERT_EQ(r.tables.size(), 1u);  // --quick: the synthetic text task only
  const ExperimentTable& t = r.tables[0];
  EXPECT_EQ(t.columns,
            (std::vector<std::string>{"heads", "head dim", "test accuracy", "training s", "peak activations MiB"}));
  EXPECT_EQ(first_column(t), (std::vector<std::string>{"1", "2", "4", "8", "16"}));
  EXPECT_EQ(t.rows[4][1], "1");  // d_model 16 over 16 heads
  expect_mean_std(t, 2);
  // Each row's cells are its runs' numbers over the two seeds.
  for (const auto& row : t.rows) {
    const std::int64_t h = std::stoll(row[0]);
    const std::vector<double> acc = over_runs(r.results["runs"], "heads", h, "test_accuracy");
    ASSERT_EQ(acc.size(), 2u) << h;
    EXPECT_EQ(row[2], cell(acc, 100.0, 2, "%")) << h;
    EXPECT_EQ(row[4], cell(over_runs(r.results["runs"], "heads", h, "peak_activation_bytes"), 1.0 / 1048576, 1)) << h;
    // The synthetic set's 240 texts, a fifth of them the test: 48, so every
    // accuracy is a whole number of 48ths.
    for (double a : acc) EXPECT_NEAR(a * 48, std::round(a * 48), 1e-9) << a;
  }
  EXPECT_TRUE(fs::exists(dir / "heads" / "accuracy_by_heads.png"));
}

TEST_F(QuickExperiment, HeadAnalysis) {
  ExperimentReport r = run("head-analysis");
  ASSERT_EQ(r.tables.size(), 4u);
  EXPECT_EQ(r.tables[0].rows.size(), 1u);  // the summary over seeds
  EXPECT_EQ(r.tables[1].rows.size(), 4u);  // one layer of 4 heads, ablated one by one
  EXPECT_EQ(r.tables[2].columns, (std::vector<std::string>{"layer", "JS distance"}));
  const ExperimentTable& disp = r.tables[3];
  EXPECT_EQ(first_column(disp), (std::vector<std::string>{"4", "8", "16"}));
  expect_mean_std(disp, 2);
  // Whatever the heads learnt: ln L is the entropy of uniform attention and
  // bounds every row's; the top 2 of L keys hold at least 2 / L of the mass.
  const nlohmann::json& runs = r.results["runs"];
  for (const auto& row : disp.rows) {
    const std::int64_t L = std::stoll(row[0]);
    EXPECT_EQ(row[1], fmt::format("{:.2f}", std::log(static_cast<double>(L))));
    std::vector<double> one_head, outside;
    for (const auto& run : runs)
      if (run.contains("length") && run["length"] == L) {
        EXPECT_LE(run["entropy"].get<double>(), std::log(static_cast<double>(L)) + 1e-9) << run;
        EXPECT_GE(run["entropy"].get<double>(), 0.0) << run;
        EXPECT_LE(run["mass_outside_top_k"].get<double>(), 1.0 - 2.0 / static_cast<double>(L) + 1e-9) << run;
        if (run["heads"] == 1) one_head.push_back(run["entropy"].get<double>());
        if (run["heads"] == 1) outside.push_back(run["mass_outside_top_k"].get<double>());
      }
    ASSERT_EQ(one_head.size(), 2u) << L;
    EXPECT_EQ(row[2], cell(one_head, 1.0, 2)) << L;
    EXPECT_EQ(row[4], cell(outside, 1.0, 3)) << L;
  }
  EXPECT_TRUE(fs::exists(dir / "head-analysis" / "entropy_by_length.png"));
}

TEST_F(QuickExperiment, Precision) {
  ExperimentReport r = run("precision");
  ASSERT_EQ(r.tables.size(), 1u);  // --quick: the synthetic text task only
  const ExperimentTable& t = r.tables[0];
  EXPECT_EQ(t.columns, (std::vector<std::string>{"precision", "test accuracy", "training s", "ms per step",
                                                 "speed vs fp32", "peak activations MiB"}));
  EXPECT_EQ(first_column(t), (std::vector<std::string>{"fp32", "bf16", "fp16"}));
  EXPECT_EQ(t.rows[0][4], "1.00x");  // fp32 against itself
  expect_mean_std(t, 1);
  EXPECT_EQ(r.results["runs"].size(), 6u);  // 3 precisions x 2 seeds
  for (const auto& run : r.results["runs"]) EXPECT_GT(run["steps"].get<std::int64_t>(), 0);
}

TEST(Experiments, LossSpikesAreLargeJumpsOverTheRecentMedian) {
  std::vector<double> flat(40, 1.0);
  EXPECT_EQ(count_loss_spikes(flat), 0);
  std::vector<double> one = flat;
  one[30] = 2.5;  // more than twice the median, and 1.5 nats above it
  EXPECT_EQ(count_loss_spikes(one), 1);
  one[31] = 1.9;  // below twice the median
  EXPECT_EQ(count_loss_spikes(one), 1);
  std::vector<double> tiny(40, 1e-4);
  tiny[30] = 1e-2;  // a hundredfold, but noise near zero loss
  EXPECT_EQ(count_loss_spikes(tiny), 0);
  one[35] = std::nan("");
  EXPECT_EQ(count_loss_spikes(one), 2);
  EXPECT_EQ(count_loss_spikes(std::vector<double>(10, 5.0)), 0);  // shorter than the window
}

TEST(Experiments, UnknownNameIsAClearError) {
  try {
    run_experiment("magic", {});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "unknown experiment 'magic' (known: heads, positions, positions-seq2seq, variants, head-analysis, "
                 "optimisation, "
                 "precision, head-cost, gradients)");
  }
}

}  // namespace
}  // namespace multihead
