// SPDX-License-Identifier: Apache-2.0
// What a user can give the CLI that used to be taken silently or cost minutes
// before failing: each a one-line refusal with exit code 2 and nothing
// written, or a bound that holds (the report of a run with many classes or
// layers, input from a device or an endless line, generation's length).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/safetensors.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::CliRun;
using test::run;

class CliHardening : public test::Cli {
 protected:
  std::string path(const char* name) const { return (dir / name).string(); }
  // A tiny classifier run, trained once per test that asks for it.
  std::string classifier() {
    test::write_sentiment_csv(dir / "reviews.csv", 12);
    const std::string out = path("classifier");
    if (!fs::exists(out)) {
      CliRun r = run("train --source csv --data " + path("reviews.csv") + kTiny + " --out " + out);
      EXPECT_EQ(r.code, 0) << r.err;
    }
    return out;
  }
  void expect_refused(const std::string& args, const std::string& error) {
    CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err, "multihead: error: " + error + "\n") << args;
    EXPECT_TRUE(r.out.empty()) << args << ": " << r.out;
  }
  static constexpr const char* kTiny =
      " --tokenizer word --vocab-size 32 --max-len 8 --d-model 16 --num-heads 2 --num-layers 1 --batch 8 --epochs 1 "
      "--threads 1 --quiet";
};

// Keys the job sets itself, flags that do nothing for the job, and values
// out of range: refused by name, never replaced or ignored.
TEST_F(CliHardening, SettingsThatWouldBeReplacedOrIgnoredAreRefused) {
  const std::string never = " --out " + path("never");
  const std::string csv = " --source csv --data " + path("reviews.csv");
  test::write_sentiment_csv(dir / "reviews.csv", 12);
  expect_refused("train --set model.vocab_size=50" + csv + never,
                 "--set model.vocab_size: the job sets it from its tokenizer or its data (--vocab-size sizes a "
                 "tokenizer it trains), so a value given here would be replaced");
  expect_refused("train --set model.num_classes=5" + csv + never,
                 "--set model.num_classes: the job sets it from its data's labels (or has no classes), so a value "
                 "given here would be replaced");
  expect_refused("train --preset reverse --set train.total_steps=5" + never,
                 "--set train.total_steps: the job sets it from train.steps, or its epochs and the data's size, so a "
                 "value given here would be replaced");
  expect_refused("train --init-skip '^classifier'" + csv + never,
                 "init_skip names parameters that init_from's weights leave as initialised, and init_from is empty "
                 "(--init-skip needs --init-from)");
  expect_refused("train --preset reverse --set data.eval_batches=100000000" + never,
                 "the flags: data: eval_batches must be in [1, 1048576], got 100000000");
  for (const char* flag : {"--init-from", "--data", "--tokenizer-from"}) {
    CliRun r = run(fmt::format("train {} ''{}", flag, never));
    EXPECT_EQ(r.code, 2) << flag;
    EXPECT_EQ(test::count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("must name a path, not ''"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(path("never")));

  const std::string run_dir = classifier();
  fs::remove(dir / "reviews.csv");  // eval's refusals below come before any data is read
  std::ofstream(path("items.txt")) << "good\n";
  expect_refused("predict --run " + run_dir + " --tokens 5 --input " + path("items.txt"),
                 "--tokens, --temperature, --top-k, --top-p and --seed apply to language model runs only");
  expect_refused("serve --run " + run_dir + " --port 0 --temperature 0",
                 "--tokens, --temperature, --top-k, --top-p and --seed apply to language model runs only");
  expect_refused("eval --run " + run_dir + " --text-column body",
                 "--source, --text-column and --label-column describe the --data file; give --data too");
  for (const char* seed : {"18446744073709551616", "-1"}) {
    CliRun r = run(fmt::format("generate --run {} --seed {}", run_dir, seed));
    EXPECT_EQ(r.code, 2) << seed;
    EXPECT_NE(r.err.find("must be a whole number from 0 to 18446744073709551615"), std::string::npos) << r.err;
  }
}

// Every enumerated value, mistyped or named as another tool names it, is
// answered with the value meant (the flags' values, a preset, the version).
TEST_F(CliHardening, AMistypedValueNamesTheOneMeant) {
  const std::string job = " --preset reverse --threads 1 --quiet --out " + path("never");
  const std::pair<std::string, std::string> cases[] = {
      {"train --positions rotary" + job, "got \"rotary\" (did you mean 'rope'?)"},
      {"train --positions ROPE" + job, "got \"ROPE\" (did you mean 'rope'?)"},
      {"train --optimizer adam" + job, "got \"adam\" (did you mean 'adamw'?)"},
      {"train --schedule cosin" + job, "got \"cosin\" (did you mean 'cosine'?)"},
      {"train --precision bfloat16" + job, "got \"bfloat16\" (did you mean 'bf16'?)"},
      {"train --attention sparse" + job, "got \"sparse\" (did you mean 'block_sparse'?)"},
      {"train --tokenizer chars --data " + path("x.jsonl") + " --out " + path("never"),
       "got \"chars\" (did you mean 'char'?)"},
      {"train --on-nonfinite skp" + job, "got 'skp' (did you mean 'skip'?)"},
      {"train --allreduce order" + job, "got 'order' (did you mean 'ordered'?)"},
      {"train --preset spm --out " + path("never"), "unknown preset 'spm' (did you mean 'spam'?)"},
      {"train --source json --data " + path("x.jsonl") + " --out " + path("never"),
       "got 'json' (did you mean 'jsonl'?)"},
      {"eval --run " + path("nowhere") + " --precision in8", "got \"in8\" (did you mean 'int8'?)"},
      {"-v", "unknown flag '-v' (did you mean --version?)"},
      {"version", "unknown command 'version' (did you mean --version?)"},
  };
  std::ofstream(path("x.jsonl")) << R"({"text": "a", "label": "b"})"
                                 << "\n";
  for (const auto& [args, meant] : cases) {
    const CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_NE(r.err.find(meant), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(test::count_lines(r.err), 1) << r.err;
  }
  EXPECT_FALSE(fs::exists(path("never")));
}

// labels.json naming one class twice: a prediction could not say which it means.
TEST_F(CliHardening, AResultsFileThatNamesAClassTwiceIsRefused) {
  const std::string run_dir = classifier();
  const std::string results = run_dir + "/labels.json";
  json r = json::parse(read_file(results));
  r["labels"] = {"pos", "pos"};
  write_file_atomic(results, r.dump());
  std::ofstream(path("items.txt")) << "good\n";
  expect_refused("predict --run " + run_dir + " --input " + path("items.txt"),
                 results + ": the class name 'pos' is given twice");
}

// Weights that hold a NaN are refused by name when a run starts from them,
// not trained into a loss of nan.
TEST_F(CliHardening, NonFiniteInitialWeightsAreRefused) {
  const std::string run_dir = classifier();
  SafetensorsFile f = SafetensorsFile::read(run_dir + "/checkpoints/last.safetensors");
  TensorMap weights;
  for (auto& [name, t] : f.all_tensors())
    if (!name.starts_with("optimizer.")) weights.emplace(name, t.clone());
  weights.at("encoder.layers.0.linear1.weight").f32()[3] = std::nanf("");
  write_safetensors(path("nan.safetensors"), weights);
  expect_refused("train --source csv --data " + path("reviews.csv") + " --init-from " + path("nan.safetensors") +
                     " --tokenizer-from " + run_dir + kTiny + " --out " + path("tuned"),
                 path("nan.safetensors") + ": 'encoder.layers.0.linear1.weight' holds nan at element 3");
  EXPECT_FALSE(fs::exists(path("tuned")));
}

// A JSON Lines record that is not JSON says why, in the parser's words.
TEST_F(CliHardening, AJsonLinesErrorNamesTheParsersReason) {
  std::ofstream(path("bad.jsonl")) << R"({"text": "a", "label": "x"})"
                                   << "\n"
                                   << R"({"text": "\ud800", "label": "y"})"
                                   << "\n";
  CliRun r = run("train --source jsonl --data " + path("bad.jsonl") + kTiny + " --out " + path("never"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("multihead: error: " + path("bad.jsonl") +
                            ": line 2: not valid JSON (parse error at line 1, "
                            "column ",
                        0),
            0u)
      << r.err;
  EXPECT_NE(r.err.find("surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"), std::string::npos) << r.err;
  EXPECT_EQ(test::count_lines(r.err), 1) << r.err;
}

// predict reads no device (other than a terminal), and no line past 16 MiB:
// /dev/zero was read for 45 s and 4.3 GB before failing.
TEST_F(CliHardening, PredictRefusesDevicesAndEndlessLines) {
  const std::string run_dir = classifier();
  expect_refused("predict --run " + run_dir + " --input /dev/zero", "cannot read '/dev/zero': is a device, not a file");
  expect_refused("predict --run " + run_dir + " < /dev/zero",
                 "cannot read standard input: it is a device, not a file, pipe or terminal");
  {
    std::ofstream f(path("long.txt"));
    f << "good\n" << std::string((16 << 20) + 1, 'a') << "\nbad\n";
  }
  expect_refused("predict --run " + run_dir + " --input " + path("long.txt"),
                 path("long.txt") + ": line 2 is longer than 16777216 bytes");
  // The same endless line on a pipe.
  expect_refused("predict --run " + run_dir + " < " + path("long.txt"),
                 "standard input: line 2 is longer than 16777216 bytes");
}

// Generation's length is bounded: 2^62 tokens never returned. A server whose
// default length is past what a request may ask for refuses to start,
// rather than refuse every request that leaves it out.
TEST_F(CliHardening, GenerationLengthIsBounded) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the whale swam on. the sea was calm.\n";
  std::ofstream(path("tiny.txt")) << text;
  const std::string lm = path("lm");
  CliRun t =
      run("train --preset moby-dick --steps 5 --max-len 16 --d-model 16 --num-heads 2 --num-layers 1 --threads 1 "
          "--quiet --data " +
          path("tiny.txt") + " --out " + lm);
  ASSERT_EQ(t.code, 0) << t.err;
  expect_refused("generate --run " + lm + " --tokens 4611686018427387904",
                 "tokens to generate must be in [0, 65536], got 4611686018427387904");
  expect_refused("serve --run " + lm + " --port 0 --tokens 1000000000000",
                 "--tokens must be in [0, 65536], got 1000000000000");
  expect_refused("serve --run " + lm + " --port 0 --tokens 2000",
                 "--tokens 2000 is more than a request may ask for (1024, limits.max_tokens)");
}

// A run with more classes than a report can show whole trains and reports:
// the tables and the figure keep to the classes that matter most, the whole
// matrix and every class's scores go to CSV. Past 1,000 classes the data is
// refused before anything is trained.
TEST_F(CliHardening, ARunWithManyClassesReportsThemAndTooManyAreRefusedUpFront) {
  {
    std::ofstream f(path("many.csv"));
    f << "text,label\n";
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 45; ++c) f << "word" << c << " word" << c << ",class" << c << "\n";
  }
  CliRun r = run("train --source csv --data " + path("many.csv") + kTiny + " --vocab-size 64 --out " + path("many"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string report = read_file(path("many") + "/report.md");
  EXPECT_NE(report.find("The 30 classes with the lowest F1 of 45"), std::string::npos) << report;
  EXPECT_NE(report.find("The most frequent confusions of 45 classes"), std::string::npos) << report;
  EXPECT_NE(report.find("![confusion matrix](plots/confusion.png)"), std::string::npos);
  const std::string confusion = read_file(path("many") + "/plots/confusion.csv");
  EXPECT_EQ(test::count_lines(confusion), 46);  // a header and a row per true class
  EXPECT_EQ(test::count_lines(read_file(path("many") + "/plots/classes.csv")), 46);
  // Integer labels 1..5 are five classes, named as in the file (class 0 was
  // one with no examples, counted in the macro F1); a label of 9999 is a
  // class of its own, not 10,000 of them.
  {
    std::ofstream f(path("stars.csv"));
    f << "text,label\n";
    for (int k = 0; k < 8; ++k) f << "a b,1\nc d,2\ne f,3\ng h,4\ni j,5\nk l,9999\n";
  }
  CliRun stars = run("train --data " + path("stars.csv") + kTiny + " --out " + path("stars"));
  ASSERT_EQ(stars.code, 0) << stars.err;
  const nlohmann::json results = nlohmann::json::parse(read_file(path("stars") + "/results.json"));
  EXPECT_EQ(results["labels"], nlohmann::json({"1", "2", "3", "4", "5", "9999"}));
  EXPECT_EQ(nlohmann::json::parse(read_file(path("stars") + "/config.json"))["model"]["num_classes"], 6);
  EXPECT_EQ(results["test"]["per_class"].size(), 6u) << results["test"].dump();
}

// A deep model's report draws at most 32 heatmaps (a 1,024-layer run spent
// 90 s on 2,048), from layers spread over the depth; the explorer holds all.
TEST_F(CliHardening, AReportDrawsABoundedNumberOfHeatmaps) {
  test::write_sentiment_csv(dir / "reviews.csv", 8);
  CliRun r = run("train --source csv --data " + path("reviews.csv") +
                 " --tokenizer word --vocab-size 32 --max-len 8 --d-model 8 --num-heads 2 --num-layers 20 --batch 8 "
                 "--epochs 1 --threads 1 --quiet --out " +
                 path("deep"));
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> maps;
  for (const auto& e : fs::directory_iterator(path("deep") + "/plots"))
    if (e.path().filename().string().starts_with("attention_layer")) maps.push_back(e.path().filename().string());
  EXPECT_EQ(maps.size(), 32u);
  EXPECT_TRUE(fs::exists(path("deep") + "/plots/attention_layer0_head1.png"));
  EXPECT_TRUE(fs::exists(path("deep") + "/plots/attention_layer19_head1.png"));
  const std::string report = read_file(path("deep") + "/report.md");
  EXPECT_NE(report.find("32 of the 40 heads' maps are drawn below"), std::string::npos) << report;
}

}  // namespace
}  // namespace multihead
