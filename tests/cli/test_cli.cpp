// SPDX-License-Identifier: Apache-2.0
// The multihead binary as a user runs it: exit codes, one-line errors, no
// partial output, and `apply` reproducing a PyTorch golden case.
#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "multihead/data/cmudict.h"
#include "multihead/io/atomic_file.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/gemm_int8.h"
#include "multihead/version.h"
#include "golden_case.h"
#include "test_util.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;
using test::Cli;
using test::CliRun;
using test::count_lines;
using test::run;

TEST_F(Cli, VersionAndHelp) {
  CliRun v = run("--version");
  EXPECT_EQ(v.code, 0);
  // The version, then the machine: CPU, the kernels' SIMD level, the GEMM and its ISA, threads. A fresh
  // process, so the GEMM named is the default whatever other tests chose.
  EXPECT_EQ(v.out.rfind(std::string("multihead ") + MULTIHEAD_VERSION + "\ncpu: ", 0), 0u) << v.out;
  for (const char* line : {"\nkernels: ", "\ngemm: onednn, oneDNN ISA ", "\nthreads: "})
    EXPECT_NE(v.out.find(line), std::string::npos) << line << " in " << v.out;
  // oneDNN's dispatch follows ONEDNN_MAX_CPU_ISA, and --version says so.
  ::setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  CliRun avx2 = run("--version");
  ::unsetenv("ONEDNN_MAX_CPU_ISA");
  EXPECT_NE(avx2.out.find("oneDNN ISA avx2 "), std::string::npos) << avx2.out;
  CliRun h = run("apply --help");
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("--weights"), std::string::npos);
  CliRun d = run("demo --help");
  EXPECT_EQ(d.code, 0);
  EXPECT_NE(d.out.find("--seq-len"), std::string::npos);
}

TEST_F(Cli, UsageErrorsAreOneLineAndExitTwo) {
  for (const char* args : {"", "frobnicate", "apply", "apply --module", "demo --batch x", "demo --bogus"}) {
    CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(count_lines(r.err), 1) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("multihead: error: ", 0), 0u) << r.err;
  }
}

// An empty path is refused, never read as "the default".
TEST_F(Cli, EmptyPathsAreRefused) {
  for (const char* args : {"train --out ''", "train --config ''", "experiment heads --out ''"}) {
    CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("must name a path, not ''"), std::string::npos) << r.err;
  }
}

// Opening a FIFO blocks until something writes to it: a config FIFO that
// nothing writes is refused after a wait, one that is written is read.
TEST_F(Cli, AFifoThatNothingWritesIsRefused) {
  const fs::path fifo = dir / "config.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  CliRun r = run("train --config " + fifo.string() + " --out " + (dir / "never").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "multihead: error: cannot read '" + fifo.string() + "': a FIFO that nothing wrote to in 10 s\n");
  EXPECT_FALSE(fs::exists(dir / "never"));
  std::thread writer([&] { std::ofstream(fifo) << "{"; });  // opens once the reader has
  CliRun written = run("train --config " + fifo.string() + " --out " + (dir / "never").string());
  writer.join();
  EXPECT_EQ(written.code, 2);
  EXPECT_NE(written.err.find(fifo.string() + ": invalid JSON ("), std::string::npos) << written.err;
}

// A full disk under metrics.jsonl is an error that says why. The disk is a
// 16 KiB tmpfs (skipped where this process may not mount one).
TEST_F(Cli, AFullDiskUnderTheMetricsLogSaysWhy) {
  const fs::path small = dir / "small";
  fs::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=16k") != 0) GTEST_SKIP() << "cannot mount a tmpfs here";
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the whale swam on. the sea was calm.\n";
  std::ofstream(dir / "tiny.txt") << text;
  CliRun r = run("train --preset moby-dick --data " + (dir / "tiny.txt").string() +
                 " --steps 2000 --d-model 16 --num-heads 2 --num-layers 1 --batch 2 --max-len 8 --threads 1 "
                 "--quiet --out " +
                 (small / "run").string());
  ::umount2(small.c_str(), MNT_DETACH);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "multihead: error: cannot write '" + (small / "run" / "metrics.jsonl").string() +
                       "': No space left on device\n");
}

TEST_F(Cli, ApplyReproducesAGoldenCase) {
  for (const auto& c : test::golden_cases("mha")) {
    if (c.name != "bias_kv_zero_attn_masks" && c.name != "causal_bottom_right") continue;
    fs::path out = dir / (c.name + ".safetensors");
    CliRun r = run("apply --module " + (c.dir / "module.json").string() + " --weights " +
                   (c.dir / "weights.safetensors").string() + " --inputs " + (c.dir / "inputs.safetensors").string() +
                   " --out " + out.string());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    TensorMap got = SafetensorsFile::read(out.string()).all_tensors();
    TensorMap want = c.expected();
    EXPECT_EQ(got.size(), want.size());
    for (const auto& [name, t] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_TRUE(test::all_close(got.at(name), t)) << c.name << ": " << name;
    }
  }
}

TEST_F(Cli, FailedApplyLeavesNoOutput) {
  const auto cases = test::golden_cases("mha");
  const test::GoldenCase& c = cases.front();
  fs::path bad_module = dir / "bad.json";
  std::ofstream(bad_module) << R"({"type": "MultiheadAttention", "embed_dim": 10, "num_heads": 3})";
  fs::path out = dir / "out.safetensors";
  CliRun r = run("apply --module " + bad_module.string() + " --weights " + (c.dir / "weights.safetensors").string() +
                 " --inputs " + (c.dir / "inputs.safetensors").string() + " --out " + out.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "multihead: error: embed_dim (10) must be divisible by num_heads (3)\n");
  EXPECT_FALSE(fs::exists(out));

  fs::path truncated = dir / "trunc.safetensors";
  std::ofstream(truncated) << std::string("\x10\x00\x00", 3);
  r = run("apply --module " + (c.dir / "module.json").string() + " --weights " + truncated.string() + " --inputs " +
          (c.dir / "inputs.safetensors").string() + " --out " + out.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "multihead: error: " + truncated.string() + ": not a safetensors file (only 3 bytes)\n");
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos);

  r = run("apply --module " + (dir / "missing.json").string() + " --weights x --inputs y --out " + out.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.err), 1);
  EXPECT_FALSE(fs::exists(out));

  // A device as input is refused rather than read until memory runs out.
  r = run("apply --module " + (c.dir / "module.json").string() + " --weights /dev/zero --inputs " +
          (c.dir / "inputs.safetensors").string() + " --out " + out.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "multihead: error: cannot read '/dev/zero': is a device, not a file\n");
  EXPECT_FALSE(fs::exists(out));
}

// --out never replaces what is not a regular file: a device, a FIFO, a
// symbolic link (nor the file it points to) are refused and left as they were.
TEST_F(Cli, ApplyRefusesAnOutThatIsNotARegularFile) {
  const auto cases = test::golden_cases("mha");
  const test::GoldenCase& c = cases.front();
  const std::string args = "apply --module " + (c.dir / "module.json").string() + " --weights " +
                           (c.dir / "weights.safetensors").string() + " --inputs " +
                           (c.dir / "inputs.safetensors").string() + " --out ";
  std::ofstream(dir / "target") << "keep";
  fs::create_symlink(dir / "target", dir / "link");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  for (const auto& [out, kind] : {std::pair{fs::path("/dev/null"), "a device"},
                                  std::pair{dir / "link", "a symbolic link"}, std::pair{dir / "fifo", "a FIFO"}}) {
    CliRun r = run(args + out.string());
    EXPECT_EQ(r.code, 2) << out;
    EXPECT_EQ(r.err, "multihead: error: refusing to write '" + out.string() + "': it is " + kind +
                         ", and only a regular file is replaced\n");
  }
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_TRUE(fs::is_symlink(dir / "link"));
  EXPECT_TRUE(fs::is_fifo(dir / "fifo"));
  std::ifstream in(dir / "target");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep");
  EXPECT_EQ(run(args + (dir / "out.safetensors").string()).code, 0);  // a regular file is fine
}

TEST_F(Cli, BenchAttentionEndsWithOneJsonLine) {
  for (const char* extra :
       {"", " --backward --causal", " --impl reference --backward", " --tile-gemm blas --need-weights",
        " --tile-gemm micro", " --positions relative --backward", " --positions alibi --causal", " --gemm openblas"}) {
    CliRun r = run(std::string("bench attention --batch 2 --seq-len 9 --embed-dim 16 --num-heads 4 --iters 2 "
                               "--warmup 0 --threads 1 --json") +
                   extra);
    ASSERT_EQ(r.code, 0) << extra << ": " << r.err;
    std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
    auto j = nlohmann::json::parse(last);
    for (const char* key : {"ms", "gflops", "peak_bytes", "attention_ms", "attention_gflops"})
      EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_GT(j["ms"].get<double>(), 0.0);
    EXPECT_GT(j["peak_bytes"].get<std::int64_t>(), 0);
    EXPECT_EQ(j["threads"].get<int>(), 1);
    EXPECT_EQ(j["gemm"].get<std::string>(),
              std::string(extra).find("openblas") != std::string::npos ? "openblas" : "onednn");
    EXPECT_EQ(j["samples_ms"].size(), 2u);
    // Every line names what it was measured on.
    EXPECT_EQ(j["machine"]["threads"].get<int>(), 1);
    EXPECT_EQ(j["machine"]["gemm_backend"], j["gemm"]);
    EXPECT_FALSE(j["machine"]["kernel_simd"].get<std::string>().empty());
    EXPECT_EQ(r.out.rfind("machine: ", 0), 0u) << r.out;
  }
  CliRun t =
      run("bench train --d-model 16 --num-heads 2 --num-layers 1 --dim-feedforward 16 --seq-len 8 --batch 2 "
          "--vocab-size 50 --iters 2 --warmup 0 --threads 1 --json");
  ASSERT_EQ(t.code, 0) << t.err;
  auto tj = nlohmann::json::parse(t.out.substr(t.out.rfind('\n', t.out.size() - 2) + 1));
  EXPECT_GT(tj["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(tj["peak_bytes"].get<std::int64_t>(), 0);
  EXPECT_EQ(tj["machine"]["threads"].get<int>(), 1);
  // Model FLOPs, the share of the machine's sgemm rate, and where the step's time went.
  EXPECT_GT(tj["flops_per_step"].get<double>(), 0.0);
  EXPECT_NEAR(tj["sgemm_fraction"].get<double>(), tj["gflops"].get<double>() / tj["sgemm_gflops"].get<double>(), 1e-9);
  EXPECT_GT(tj["parts_ms"]["gemm"].get<double>(), 0.0);
  EXPECT_GT(tj["parts_ms"]["attention"].get<double>(), 0.0);
  EXPECT_GT(tj["parts_ms"]["optimizer"].get<double>(), 0.0);
  EXPECT_GE(tj["parts_ms"]["other"].get<double>(), 0.0);
  for (const char* backend : {"onednn", "openblas"}) {
    CliRun g = run(std::string("bench gemm --m 16 --n 16 --k 16 --iters 2 --json --gemm ") + backend);
    ASSERT_EQ(g.code, 0) << g.err;
    auto gj = nlohmann::json::parse(g.out.substr(g.out.rfind('\n', g.out.size() - 2) + 1));
    EXPECT_GT(gj["gflops"].get<double>(), 0.0);
    EXPECT_EQ(gj["gemm"].get<std::string>(), backend);
    EXPECT_EQ(gj["machine"]["gemm_backend"].get<std::string>(), backend);
  }
  // bf16 operands: the product the bf16 path runs on, named by that path.
  CliRun b = run("bench gemm --m 16 --n 16 --k 16 --iters 2 --json --precision bf16");
  ASSERT_EQ(b.code, 0) << b.err;
  auto bj = nlohmann::json::parse(b.out.substr(b.out.rfind('\n', b.out.size() - 2) + 1));
  EXPECT_GT(bj["gflops"].get<double>(), 0.0);
  EXPECT_EQ(bj["precision"].get<std::string>(), "bf16");
  EXPECT_EQ(bj["gemm"].get<std::string>(), std::string("bf16 operands, ") + bf16_path_name(bf16_path()));
  // int8: a layer's product, on the path this CPU takes.
  CliRun q = run("bench gemm --m 16 --n 16 --k 16 --iters 2 --json --precision int8");
  ASSERT_EQ(q.code, 0) << q.err;
  auto qj = nlohmann::json::parse(q.out.substr(q.out.rfind('\n', q.out.size() - 2) + 1));
  EXPECT_GT(qj["gflops"].get<double>(), 0.0);
  EXPECT_EQ(qj["precision"].get<std::string>(), "int8");
  EXPECT_EQ(qj["gemm"].get<std::string>(), std::string("oneDNN u8 x s8, ") + int8_path_name());
}

TEST_F(Cli, BenchRejectsBadInput) {
  const std::pair<const char*, const char*> cases[] = {
      {"bench attention --embed-dim 10 --num-heads 3",
       "multihead: error: embed_dim (10) must be divisible by num_heads (3)\n"},
      {"bench attention --impl magic", "multihead: error: --impl must be fused or reference, got 'magic'\n"},
      {"bench attention --q-block 0 --seq-len 4 --embed-dim 8 --num-heads 2",
       "multihead: error: attention tile sizes must be positive, got 0 x 256\n"},
      {"bench attention --seq-len 0", "multihead: error: batch and seq-len must be positive\n"},
      {"bench gemm --m 0", "multihead: error: gemm sizes and iters must be positive\n"},
      {"bench attention --gemm mkl", "multihead: error: gemm backend must be onednn or openblas, got 'mkl'\n"},
      {"bench attention --tile-gemm fast", "multihead: error: --tile-gemm must be auto, micro or blas, got 'fast'\n"},
      {"bench attention --positions learned",
       "multihead: error: --positions must be none, relative, alibi or rope, got 'learned'\n"},
      {"bench attention --positions spiral",
       "multihead: error: --positions must be none, relative, alibi or rope, got 'spiral'\n"},
      {"bench train --precision half",
       "multihead: error: precision must be \"fp32\", \"bf16\", \"fp16\" or \"int8\", got \"half\" (did you mean "
       "'fp16'?)\n"},
      {"bench gemm --precision half",
       "multihead: error: precision must be \"fp32\", \"bf16\", \"fp16\" or \"int8\", got \"half\" (did you mean "
       "'fp16'?)\n"},
      {"bench gemm --precision fp16",
       "multihead: error: bench gemm: --precision must be fp32, bf16 or int8 (fp16 has no product of its own: it "
       "computes in fp32), got fp16\n"},
      {"bench train --precision int8",
       "multihead: error: bench train: --precision: int8 is a precision for inference (predict, eval, serve); train "
       "in fp32, bf16 or fp16\n"},
      {"bench attention --precision int8",
       "multihead: error: bench attention: --precision: int8 is a precision for inference (predict, eval, serve); "
       "train in fp32, bf16 or fp16\n"},
  };
  for (const auto& [args, msg] : cases) {
    CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err, msg) << args;
  }
  CliRun r = run("bench");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.err), 1);
}

// A tiny two-class task the test writes itself: the class is in the words.
void write_tiny_csv(const fs::path& path) {
  std::ofstream f(path);
  f << "text,label\n";
  const char* pos[] = {"good great fine", "great good day", "fine good nice", "nice great good"};
  const char* neg[] = {"bad awful poor", "poor bad day", "awful poor bad", "bad poor nasty"};
  for (int r = 0; r < 12; ++r) f << pos[r % 4] << ",pos\n" << neg[r % 4] << ",neg\n";
}

TEST_F(Cli, TrainWritesARunDirectoryAndEvalReadsIt) {
  write_tiny_csv(dir / "tiny.csv");
  const fs::path out = dir / "run";
  CliRun r = run("train --source csv --data " + (dir / "tiny.csv").string() + " --tokenizer word --vocab-size 64 " +
                 "--epochs 3 --d-model 16 --num-heads 2 --num-layers 1 --batch 4 --max-len 8 --threads 1 --out " +
                 out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("test accuracy: "), std::string::npos);
  // Not a terminal: plain log lines, no carriage returns.
  EXPECT_NE(r.err.find("step 1/"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  for (const char* f :
       {"config.json", "metrics.jsonl", "results.json", "report.md", "tokenizer/tokenizer.json",
        "checkpoints/last.safetensors", "plots/loss.png", "plots/accuracy.png", "plots/learning_rate.png",
        "plots/grad_norm.png", "plots/throughput.png", "plots/confusion.png", "plots/reliability.png", "plots/roc.png",
        "plots/precision_recall.png", "plots/attention_layer0_head1.png"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  // Every picture the report shows exists.
  std::ifstream report(out / "report.md");
  std::string line;
  int images = 0;
  while (std::getline(report, line)) {
    const auto open = line.find("](");
    if (line.rfind("![", 0) != 0 || open == std::string::npos) continue;
    ++images;
    EXPECT_TRUE(fs::exists(out / line.substr(open + 2, line.size() - open - 3))) << line;
  }
  EXPECT_EQ(images, 12);  // loss, accuracy, learning rate, gradient norm, throughput, memory, confusion, reliability,
                          // ROC, precision-recall, 2 heads
  // The report and the results name the machine they were measured on.
  EXPECT_NE(read_file((out / "report.md").string()).find("\nMeasured on "), std::string::npos);
  EXPECT_NE(read_file((out / "report.md").string()).find(", 1 thread, kernels "), std::string::npos);
  const auto results = nlohmann::json::parse(std::ifstream(out / "results.json"));
  EXPECT_EQ(results["machine"]["threads"], 1);
  // Two classes: thresholds for a precision, chosen on the validation split, each reaching its goal there.
  ASSERT_TRUE(results["thresholds"].is_array());
  for (const auto& t : results["thresholds"]) {
    EXPECT_GE(t["validation_precision"].get<double>(), t["precision_goal"].get<double>()) << t;
    EXPECT_GE(t["threshold"].get<double>(), 0.0);
    EXPECT_LE(t["threshold"].get<double>(), 1.0);
  }
  EXPECT_NE(results["test"]["roc_auc"], nullptr);
  EXPECT_FALSE(results["machine"]["cpu"].get<std::string>().empty());
  EXPECT_NE(r.err.find("peak "), std::string::npos);  // memory on the log lines
  EXPECT_NE(r.err.find("activations "), std::string::npos);
  // metrics.jsonl: one JSON object a line.
  std::ifstream metrics(out / "metrics.jsonl");
  int records = 0;
  while (std::getline(metrics, line)) {
    EXPECT_TRUE(nlohmann::json::parse(line).is_object());
    ++records;
  }
  EXPECT_GT(records, 3);
  CliRun in = run("inspect --run " + out.string() + " --text 'good great day' --threads 1");
  ASSERT_EQ(in.code, 0) << in.err;
  EXPECT_NE(in.out.find("tokens: <cls> | good | great | day"), std::string::npos) << in.out;
  EXPECT_NE(in.out.find("predicted: "), std::string::npos);
  EXPECT_TRUE(fs::exists(out / "inspect" / "layer0_head1.png"));
  // predict: new input, one item a line, labels as the data named them; a
  // blank line is answered blank, so that output line N answers input line N.
  {
    std::ofstream items(dir / "items.txt");
    items << "good great fine\n\nbad awful poor\n";
  }
  CliRun p = run("predict --run " + out.string() + " --input " + (dir / "items.txt").string() + " --threads 1");
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(std::count(p.out.begin(), p.out.end(), '\n'), 3);
  EXPECT_TRUE(p.out.rfind("pos\t", 0) == 0 || p.out.rfind("neg\t", 0) == 0) << p.out;
  EXPECT_NE(p.out.find("\n\n"), std::string::npos) << p.out;  // line 2 blank
  CliRun pj = run("predict --run " + out.string() + " --json --input " + (dir / "items.txt").string());
  ASSERT_EQ(pj.code, 0) << pj.err;
  std::vector<nlohmann::json> answers;
  std::istringstream lines(pj.out);
  for (std::string l; std::getline(lines, l);) answers.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[0]["line"], 1);
  EXPECT_EQ(answers[0]["input"], "good great fine");
  EXPECT_NEAR(answers[0]["probabilities"]["pos"].get<double>() + answers[0]["probabilities"]["neg"].get<double>(), 1.0,
              1e-9);
  EXPECT_EQ(answers[1], (nlohmann::json{{"line", 2}, {"blank", true}}));
  EXPECT_EQ(answers[2]["line"], 3);
  // By column: a CSV's records, a text spanning lines among them (an e-mail), one answer each, in
  // the run's text column unless --text-column names another; JSON Lines the same.
  {
    std::ofstream csv(dir / "mail.csv");
    csv << "id,text\n1,\"good great\nfine day\"\n2,bad awful poor\n";
    std::ofstream jsonl(dir / "mail.jsonl");
    jsonl << R"({"body": "good great fine"})"
          << "\n"
          << R"({"body": "bad awful poor"})"
          << "\n";
  }
  CliRun pc = run("predict --run " + out.string() + " --json --input " + (dir / "mail.csv").string());
  ASSERT_EQ(pc.code, 0) << pc.err;
  EXPECT_EQ(std::count(pc.out.begin(), pc.out.end(), '\n'), 2) << pc.out;
  EXPECT_EQ(nlohmann::json::parse(pc.out.substr(0, pc.out.find('\n')))["input"], "good great\nfine day");
  CliRun pk = run("predict --run " + out.string() + " --text-column body --input " + (dir / "mail.jsonl").string());
  ASSERT_EQ(pk.code, 0) << pk.err;
  EXPECT_EQ(std::count(pk.out.begin(), pk.out.end(), '\n'), 2) << pk.out;
  CliRun pm = run("predict --run " + out.string() + " --text-column Body --input " + (dir / "mail.jsonl").string());
  EXPECT_EQ(pm.code, 2);
  EXPECT_NE(pm.err.find("no key named 'Body' (did you mean 'body'?"), std::string::npos) << pm.err;
  CliRun ps = run("predict --run " + out.string() + " --text-column body --input " + (dir / "items.txt").string());
  EXPECT_EQ(ps.code, 2);
  EXPECT_EQ(ps.err,
            "multihead: error: --text-column reads the input by column: give --source csv, tsv or jsonl "
            "(the input's name does not say)\n");
  {
    std::ofstream items(dir / "bad_items.txt");
    items << "good day\n\xff\xfe\n";
  }
  CliRun pb = run("predict --run " + out.string() + " --input " + (dir / "bad_items.txt").string());
  EXPECT_EQ(pb.code, 2);
  EXPECT_EQ(pb.err, "multihead: error: " + (dir / "bad_items.txt").string() +
                        " line 2: a text to classify: invalid UTF-8 at byte 0\n");
  EXPECT_TRUE(pb.out.empty());  // nothing printed for the good line either
  // --threshold: the positive (second) class, here "neg", from that probability up.
  for (const auto& [t, label] : {std::pair{"0", "neg"}, std::pair{"1", "pos"}}) {
    CliRun pt =
        run("predict --run " + out.string() + " --json --threshold " + t + " --input " + (dir / "items.txt").string());
    ASSERT_EQ(pt.code, 0) << pt.err;
    std::istringstream answered(pt.out);
    for (std::string l; std::getline(answered, l);) {
      const auto a = nlohmann::json::parse(l);
      if (a.contains("blank")) continue;
      EXPECT_EQ(a["label"], label) << l;
      EXPECT_EQ(a["threshold"], std::stod(t)) << l;
    }
  }
  CliRun pr = run("predict --run " + out.string() + " --threshold 1.5 --input " + (dir / "items.txt").string());
  EXPECT_EQ(pr.code, 2);
  CliRun pn = run("predict --run " + out.string() + " --n-best 2 --input " + (dir / "items.txt").string());
  EXPECT_EQ(pn.code, 2);
  EXPECT_EQ(pn.err, "multihead: error: --n-best and --beam apply to pronunciation runs only\n");
  CliRun e = run("eval --run " + out.string() + " --threads 1");
  ASSERT_EQ(e.code, 0) << e.err;
  // eval reproduces the test accuracy train printed.
  const std::string acc = r.out.substr(r.out.find("test accuracy: "), 22);
  EXPECT_EQ(e.out.substr(0, 22), acc);
}

// A run directory names its data by absolute path (eval works from any
// folder), and train never replaces a run unless --overwrite says so.
TEST_F(Cli, ARunDirectoryIsSelfContainedAndNeverReplacedUnasked) {
  write_tiny_csv(dir / "tiny.csv");
  const std::string args =
      "train --source csv --data tiny.csv --tokenizer word --vocab-size 64 --epochs 1 --d-model 16 --num-heads 2 "
      "--num-layers 1 --batch 4 --max-len 8 --threads 1 --quiet --out run";
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);  // relative --data and --out
  const CliRun first = run(args), again = run(args), over = run(args + " --overwrite"),
               both = run(args + " --overwrite --resume");
  fs::current_path(cwd);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(again.code, 2);
  EXPECT_EQ(again.err, "multihead: error: 'run' already holds a run; --resume continues it, --overwrite replaces it\n");
  EXPECT_EQ(over.code, 0) << over.err;
  EXPECT_EQ(both.code, 2);
  const auto config = nlohmann::json::parse(read_file((dir / "run" / "config.json").string()));
  EXPECT_EQ(config["data"]["path"], (dir / "tiny.csv").string());
  CliRun e = run("eval --run " + (dir / "run").string() + " --threads 1");
  EXPECT_EQ(e.code, 0) << e.err;
  // A folder holding other files is no place for a run, even to overwrite.
  fs::create_directories(dir / "notes");
  std::ofstream(dir / "notes" / "todo.txt") << "keep";
  CliRun n = run("train --source csv --data " + (dir / "tiny.csv").string() + " --epochs 1 --overwrite --quiet --out " +
                 (dir / "notes").string());
  EXPECT_EQ(n.code, 2);
  EXPECT_EQ(n.err, "multihead: error: '" + (dir / "notes").string() +
                       "' is not empty and holds no run; a run goes into a new or empty directory\n");
  EXPECT_EQ(read_file((dir / "notes" / "todo.txt").string()), "keep");
}

TEST_F(Cli, LanguageModelTrainsAndGenerates) {
  {
    std::ofstream f(dir / "tiny.txt");
    for (int i = 0; i < 60; ++i) f << "the whale swam on. the sea was calm.\n";
  }
  const fs::path out = dir / "lm";
  CliRun r = run("train --preset moby-dick --data " + (dir / "tiny.txt").string() + " --steps 30 --d-model 16 " +
                 "--num-heads 2 --num-layers 1 --batch 4 --max-len 16 --threads 1 --quiet --precision bf16 --out " +
                 out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("validation loss: "), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(out / "config.json"))["train"]["precision"], "bf16");
  for (const char* f : {"config.json", "report.md", "plots/loss.png", "plots/attention_layer0_head1.png",
                        "checkpoints/last.safetensors", "tokenizer/tokenizer.json"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  CliRun g = run("generate --run " + out.string() + " --prompt 'the wh' --tokens 12 --temperature 0 --threads 1");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("the wh", 0), 0u) << g.out;
  EXPECT_EQ(g.out.size(), std::string("the wh").size() + 12 + 1);  // one character a token, and a newline
  CliRun in = run("inspect --run " + out.string() + " --text 'the whale' --out " + (dir / "maps").string());
  ASSERT_EQ(in.code, 0) << in.err;
  EXPECT_TRUE(fs::exists(dir / "maps" / "layer0_head0.png"));
  {
    std::ofstream prompts(dir / "prompts.txt");
    prompts << "the wh\nthe se\n";
  }
  CliRun p = run("predict --run " + out.string() + " --input " + (dir / "prompts.txt").string() +
                 " --tokens 5 --temperature 0 --threads 1");
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out.rfind("the wh", 0), 0u) << p.out;
  EXPECT_EQ(p.out.size(), 2 * (6 + 5 + 1));  // each prompt and its 5 characters, a line each
  CliRun ev = run("eval --run " + out.string() + " --threads 1");
  ASSERT_EQ(ev.code, 0) << ev.err;
  // eval recomputes the validation loss train reported last.
  EXPECT_EQ(ev.out.substr(0, 24), r.out.substr(r.out.find("validation loss: "), 24));
  CliRun g16 =
      run("generate --run " + out.string() + " --prompt 'the wh' --tokens 12 --temperature 0 --precision fp16");
  ASSERT_EQ(g16.code, 0) << g16.err;
  EXPECT_EQ(g16.out.size(), g.out.size());
  CliRun e32 = run("eval --run " + out.string() + " --threads 1 --precision fp32");
  ASSERT_EQ(e32.code, 0) << e32.err;
  EXPECT_NE(e32.out.find("validation loss: "), std::string::npos);
  // int8 products: the same decoding with the cache, and a validation loss near fp32's.
  CliRun g8 = run("generate --run " + out.string() + " --prompt 'the wh' --tokens 12 --temperature 0 --precision int8");
  ASSERT_EQ(g8.code, 0) << g8.err;
  EXPECT_EQ(g8.out.size(), g.out.size());
  CliRun e8 = run("eval --run " + out.string() + " --threads 1 --precision int8");
  ASSERT_EQ(e8.code, 0) << e8.err;
  const auto loss_of = [](const std::string& s) {
    return std::stod(s.substr(s.find("validation loss: ") + std::string("validation loss: ").size()));
  };
  EXPECT_NEAR(loss_of(e8.out), loss_of(e32.out), 0.02 * loss_of(e32.out)) << e8.out << e32.out;
  EXPECT_NE(loss_of(e8.out), loss_of(e32.out)) << "int8 products that change nothing";
  CliRun bad = run("generate --run " + out.string() + " --top-p 0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "multihead: error: top_p must be in (0, 1], got 0\n");
}

TEST_F(Cli, SequenceTaskTrainsAndTestsLongerLengths) {
  const fs::path out = dir / "seq";
  CliRun r =
      run("train --preset reverse --steps 30 --d-model 16 --num-heads 2 --num-layers 1 --batch 8 "
          "--positions alibi --threads 1 --quiet --out " +
          out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* len : {"length 16: ", "length 32: ", "length 64: "})
    EXPECT_NE(r.out.find(len), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out / "plots" / "accuracy_by_length.png"));
  auto res = nlohmann::json::parse(std::ifstream(out / "results.json"));
  EXPECT_EQ(res["by_length"].size(), 3u);
  for (const auto& a : res["by_length"]) EXPECT_GE(a["token_accuracy"].get<double>(), 0.0);
  // eval in int8 (its store frozen for int8 as every kind's is) tests the same lengths.
  CliRun e8 = run("eval --run " + out.string() + " --threads 1 --precision int8");
  ASSERT_EQ(e8.code, 0) << e8.err;
  for (const char* len : {"length 16: ", "length 32: ", "length 64: "})
    EXPECT_NE(e8.out.find(len), std::string::npos) << e8.out;
  // inspect draws text models only: a sequence-task run is refused by name.
  CliRun in = run("inspect --run " + out.string() + " --text 'abc' --out " + (dir / "maps").string());
  EXPECT_EQ(in.code, 2);
  EXPECT_EQ(in.err, "multihead: error: " + (out / "config.json").string() +
                        ": inspect and load_run read the runs of text classifiers, language models and "
                        "pronunciation jobs, this run's task is 'sequence_task'\n");
  EXPECT_FALSE(fs::exists(dir / "maps"));
}

// The cmudict preset end to end on a tiny dictionary: train, eval, predict
// (best, n-best, JSON; a bad word named by its line), inspect.
TEST_F(Cli, PronunciationTrainsPredictsAndInspects) {
  const fs::path dict = dir / "dict.txt";
  std::ofstream(dict) << regular_spelling_dictionary(150);
  const fs::path out = dir / "words";
  CliRun r =
      run("train --preset cmudict --epochs 2 --d-model 16 --num-heads 2 --num-layers 1 --batch 16 "
          "--threads 1 --quiet --data " +
          dict.string() + " --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("test: WER ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("letters ("), std::string::npos) << r.out;  // by word length
  const auto res = nlohmann::json::parse(std::ifstream(out / "results.json"));
  for (const char* key : {"test_wer", "test_bleu"}) {
    EXPECT_GE(res[key].get<double>(), 0.0) << key;
    EXPECT_LE(res[key].get<double>(), 1.0) << key;
  }
  EXPECT_GE(res["test_per"].get<double>(), 0.0);  // above 1 when predictions run long
  std::int64_t by_length = 0;
  for (const auto& b : res["by_length"]) by_length += b["words"].get<std::int64_t>();
  EXPECT_EQ(by_length, res["test_words"].get<std::int64_t>());
  const std::string report = read_file((out / "report.md").string());
  for (const char* section : {"## Test by word length", "## The worst errors", "## Cross-attention"})
    EXPECT_NE(report.find(section), std::string::npos) << section;
  EXPECT_TRUE(fs::exists(out / "plots" / "cross_attention_head1.png"));
  EXPECT_TRUE(fs::exists(out / "vocab.json"));
  // eval reproduces the test scores train printed.
  CliRun e = run("eval --run " + out.string() + " --threads 1");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.out.substr(0, e.out.find('\n')), r.out.substr(0, r.out.find('\n')));
  {
    std::ofstream words(dir / "words.txt");
    words << "abcd\n\nFEED\n";
  }
  CliRun p = run("predict --run " + out.string() + " --input " + (dir / "words.txt").string() + " --threads 1");
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(std::count(p.out.begin(), p.out.end(), '\n'), 3) << p.out;  // the blank line answered blank
  EXPECT_NE(p.out.find("\n\n"), std::string::npos) << p.out;
  // The encoder-decoder with int8 products: beam search with its caches, and the test scores.
  CliRun p8 = run("predict --run " + out.string() + " --input " + (dir / "words.txt").string() +
                  " --threads 1 --precision int8");
  ASSERT_EQ(p8.code, 0) << p8.err;
  EXPECT_EQ(std::count(p8.out.begin(), p8.out.end(), '\n'), 3) << p8.out;
  CliRun e8 = run("eval --run " + out.string() + " --threads 1 --precision int8");
  ASSERT_EQ(e8.code, 0) << e8.err;
  EXPECT_EQ(e8.out.rfind("test: WER ", 0), 0u) << e8.out;
  CliRun n = run("predict --run " + out.string() + " --n-best 3 --input " + (dir / "words.txt").string());
  ASSERT_EQ(n.code, 0) << n.err;
  const std::string first = n.out.substr(0, n.out.find('\n'));
  EXPECT_EQ(std::count(first.begin(), first.end(), '\t'), 5) << first;  // three (phonemes, score) pairs
  // The best of the n-best is the single answer.
  EXPECT_EQ(first.substr(0, first.find('\t')), p.out.substr(0, p.out.find('\n')));
  CliRun j = run("predict --run " + out.string() + " --json --n-best 2 --input " + (dir / "words.txt").string());
  ASSERT_EQ(j.code, 0) << j.err;
  const auto line = nlohmann::json::parse(j.out.substr(0, j.out.find('\n')));
  EXPECT_EQ(line["input"], "abcd");
  ASSERT_EQ(line["pronunciations"].size(), 2u);
  EXPECT_GE(line["pronunciations"][0]["score"].get<double>(), line["pronunciations"][1]["score"].get<double>());
  {
    std::ofstream words(dir / "bad_words.txt");
    words << "abc\n" << std::string(200, 'A') << "\n";
  }
  CliRun b = run("predict --run " + out.string() + " --input " + (dir / "bad_words.txt").string());
  EXPECT_EQ(b.code, 2);
  EXPECT_EQ(b.err.rfind("multihead: error: " + (dir / "bad_words.txt").string() + " line 2: '", 0), 0u) << b.err;
  EXPECT_NE(b.err.find("has 200 letters; the model reads at most"), std::string::npos) << b.err;
  EXPECT_TRUE(b.out.empty());
  CliRun w = run("predict --run " + out.string() + " --beam 2 --n-best 3 --input " + (dir / "words.txt").string());
  EXPECT_EQ(w.code, 2);
  EXPECT_EQ(w.err, "multihead: error: n_best must be between 1 and the beam width 2, got 3\n");
  // A config's decoding section is checked with the rest of the job, before any training.
  auto cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
  cfg["decode"]["beam"] = 0;
  std::ofstream(dir / "beam0.json") << cfg.dump();
  CliRun z = run("train --config " + (dir / "beam0.json").string() + " --out " + (dir / "beam0").string());
  EXPECT_EQ(z.code, 2);
  EXPECT_EQ(z.err, "multihead: error: " + (dir / "beam0.json").string() + ": decode: beam must be >= 1, got 0\n");
  EXPECT_FALSE(fs::exists(dir / "beam0"));
  // inspect: the encoder's self-attention over the word's letters, spelled as predict reads them.
  CliRun in = run("inspect --run " + out.string() + " --text fade --threads 1 --out " + (dir / "maps").string());
  ASSERT_EQ(in.code, 0) << in.err;
  EXPECT_NE(in.out.find("tokens: F | A | D | E"), std::string::npos) << in.out;
  CliRun in8 = run("inspect --run " + out.string() + " --text fade --threads 1 --precision int8 --out " +
                   (dir / "maps8").string());
  ASSERT_EQ(in8.code, 0) << in8.err;
  EXPECT_TRUE(fs::exists(dir / "maps8" / "layer0_head0.png"));
  EXPECT_TRUE(fs::exists(dir / "maps" / "layer0_head1.png"));
}

// The flags every job takes reach an image job too: its config records
// them and its run trains with them.
TEST_F(Cli, ImageJobTakesPrecisionAndCheckpointingFlags) {
  const fs::path data = dir / "images";
  fs::create_directories(data);
  auto put = [&](const char* name, const std::string& bytes) { std::ofstream(data / name, std::ios::binary) << bytes; };
  put("train-images-idx3-ubyte", test::idx({8, 28, 28}, 7));
  put("train-labels-idx1-ubyte", test::idx({8}, 3));
  put("t10k-images-idx3-ubyte", test::idx({2, 28, 28}, 7));
  put("t10k-labels-idx1-ubyte", test::idx({2}, 3));
  const fs::path out = dir / "vit";
  CliRun r =
      run("train --preset fashion-mnist --epochs 1 --d-model 16 --num-heads 2 --num-layers 1 --batch 2 "
          "--precision bf16 --checkpoint-layers --seed 5 --threads 1 --quiet --data " +
          data.string() + " --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
  EXPECT_EQ(cfg["train"]["precision"], "bf16");
  EXPECT_EQ(cfg["train"]["checkpoint_layers"], true);
  EXPECT_EQ(cfg["train"]["seed"], 5);
  // Its test images scored class by class: both labelled 3, of ten classes.
  const auto results = nlohmann::json::parse(std::ifstream(out / "results.json"));
  EXPECT_EQ(results["test"]["per_class"]["3"]["support"], 2);
  EXPECT_EQ(results["test"]["confusion_matrix"]["counts"].size(), 10u);
  EXPECT_TRUE(fs::exists(out / "plots" / "confusion.png"));
  // The report links an attention explorer page of the first test image (50 tokens: [CLS] and 49 patches).
  EXPECT_NE(read_file((out / "report.md").string()).find("(plots/explorer.html)"), std::string::npos);
  const std::string page = read_file((out / "plots/explorer.html").string());
  EXPECT_NE(page.find("\"queries\":[\"cls\",\"0,0\""), std::string::npos);
}

TEST_F(Cli, ProgressIsABarOnATerminal) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "util-linux script is not installed";
  write_tiny_csv(dir / "tiny.csv");
  // script(1) gives the command a pseudo-terminal; its output comes back on stdout.
  const std::string cmd = test::cli_path() + " train --source csv --data " + (dir / "tiny.csv").string() +
                          " --tokenizer word --epochs 1 --d-model 8 --num-heads 2 --num-layers 1 --batch 8 --threads 1 "
                          "--out " +
                          (dir / "tty").string();
  CliRun r = {0, "", ""};
  FILE* p = ::popen(("script -qec '" + cmd + "' /dev/null").c_str(), "r");
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  ASSERT_EQ(WEXITSTATUS(::pclose(p)), 0) << r.out;
  EXPECT_NE(r.out.find("\r["), std::string::npos) << r.out;  // redrawn in place
  EXPECT_NE(r.out.find("ETA"), std::string::npos);
  EXPECT_NE(r.out.find("tok/s"), std::string::npos);
}

TEST_F(Cli, StepsCutAnEpochJobShort) {
  write_tiny_csv(dir / "tiny.csv");
  const fs::path out = dir / "run";
  // The training split makes 5 batches of 4, so 15 steps for 3 epochs; --steps 7 stops in the second.
  CliRun r = run("train --source csv --data " + (dir / "tiny.csv").string() + " --tokenizer word --vocab-size 64 " +
                 "--epochs 3 --steps 7 --d-model 16 --num-heads 2 --num-layers 1 --batch 4 --max-len 8 --threads 1 " +
                 "--quiet --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto results = nlohmann::json::parse(std::ifstream(out / "results.json"));
  EXPECT_EQ(results["steps"].get<int>(), 7);
  const auto config = nlohmann::json::parse(std::ifstream(out / "config.json"));
  EXPECT_EQ(config["train"]["max_steps"].get<int>(), 7);
  EXPECT_EQ(config["train"]["total_steps"].get<int>(), 7);  // the schedule decays over the steps that run
  // Both epochs that ran were evaluated, the cut one at its last step.
  std::ifstream metrics(out / "metrics.jsonl");
  std::vector<int> eval_steps;
  for (std::string line; std::getline(metrics, line);) {
    const auto rec = nlohmann::json::parse(line);
    if (rec.contains("validation_loss")) eval_steps.push_back(rec["step"].get<int>());
  }
  EXPECT_EQ(eval_steps, (std::vector<int>{5, 7}));
  CliRun resumed =
      run("train --source csv --data " + (dir / "tiny.csv").string() + " --tokenizer word --vocab-size 64 " +
          "--epochs 3 --steps 7 --d-model 16 --num-heads 2 --num-layers 1 --batch 4 --max-len 8 " +
          "--threads 1 --quiet --resume --out " + out.string());
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(out / "results.json"))["steps"].get<int>(), 7);
}

TEST_F(Cli, TrainRejectsBadInput) {
  const std::pair<std::string, std::string> cases[] = {
      {"train --preset imdb",
       "multihead: error: unknown preset 'imdb' (known: spam, moby-dick, fashion-mnist, reverse, cmudict, "
       "spam-minilm)\n"},
      {"train --source csv --data " + (dir / "missing.csv").string(),
       "multihead: error: cannot open '" + (dir / "missing.csv").string() + "': No such file or directory\n"},
      {"train --positions absolute",
       "multihead: error: the flags: model: positions must be none, sinusoidal, learned, relative, rope or "
       "alibi, got \"absolute\" (did you mean 'learned'?)\n"},
      {"train --d-model 30 --num-heads 4", "multihead: error: d_model (30) must be divisible by nhead (4)\n"},
      {"train --precision fp8",
       "multihead: error: the flags: train: precision must be \"fp32\", \"bf16\", \"fp16\" or \"int8\", got \"fp8\"\n"},
      {"train --precision int8",
       "multihead: error: precision: int8 is a precision for inference (predict, eval, serve); train in fp32, bf16 "
       "or fp16\n"},
      {"train --checkpoint-every -5", "multihead: error: the flags: train: checkpoint_every must be >= 0, got -5\n"},
      {"train --batch 30 --grad-accumulation 4",
       "multihead: error: batch (30) must be a multiple of grad_accumulation (4)\n"},
      {"train --epochs 0", "multihead: error: the flags: train: epochs must be in [1, 1000000], got 0\n"},
      {"train --epochs 99999999999",
       "multihead: error: the flags: train: epochs must be in [1, 1000000], got 99999999999\n"},
      {"train --seed -1", "multihead: error: the flags: train: 'seed' must be >= 0, got -1\n"},
      {"train --threads -3", "multihead: error: the flags: threads must be in [0, 1024], got -3\n"},
      {"train --lr nan", "multihead: error: the flags: train: lr must be > 0, got nan\n"},
      {"train --lr 1e999", "multihead: error: the flags: train: lr must be > 0, got inf\n"},
      {"train --d-model 1000000000 --num-heads 8",
       "multihead: error: the flags: model: d_model must be in [1, 65536], got 1000000000\n"},
      {"train --preset reverse --epochs 2", "multihead: error: --epochs does not apply to synthetic sequence tasks\n"},
      {"train --preset fashion-mnist --positions rope --max-len 5",
       "multihead: error: --positions and --max-len do not apply to image jobs\n"},
      {"train --preset moby-dick --source csv --epochs 1",
       "multihead: error: --epochs and --source do not apply to language models\n"},
      {"train --config " + (dir / "translation.json").string(),
       "multihead: error: " + (dir / "translation.json").string() +
           ": task must be one of text_classification, language_modeling, image_classification, sequence_task, "
           "pronunciation, "
           "word_stress, got 'translation'\n"},
      {"train --on-nonfinite ignore",
       "multihead: error: the flags: train: on_nonfinite must be stop or skip, got 'ignore'\n"},
      {"train --allreduce fast", "multihead: error: the flags: train: allreduce must be mpi or ordered, got 'fast'\n"},
      {"eval --run " + (dir / "nothing").string(),
       "multihead: error: cannot open '" + (dir / "nothing/config.json").string() + "': No such file or directory\n"},
  };
  std::ofstream(dir / "translation.json") << R"({"task": "translation"})";
  for (const auto& [args, msg] : cases) {
    CliRun r = run(args + " --out " + (dir / "never").string());
    if (args.rfind("eval", 0) == 0) r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err, msg) << args;
  }
  EXPECT_FALSE(fs::exists(dir / "never"));
}

TEST_F(Cli, ExperimentQuickWritesItsTable) {
  CliRun r = run("experiment optimisation --quick --seeds 1 --threads 1 --quiet --out " + dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("| clip_grad_norm | warmup steps |"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir / "optimisation" / "table.md"));
  CliRun bad = run("experiment magic");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err,
            "multihead: error: unknown experiment 'magic' (known: heads, positions, positions-seq2seq, variants, "
            "head-analysis, "
            "optimisation, precision, head-cost, gradients)\n");
}

TEST_F(Cli, DemoRunsAndDrawsWeights) {
  CliRun r = run("demo --seq-len 6 --embed-dim 16 --num-heads 2 --pad 2 --causal");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("head-averaged attention weights"), std::string::npos);
  EXPECT_NE(r.out.find("peak"), std::string::npos);
  EXPECT_EQ(count_lines(r.out), 7 + 6);
  CliRun bad = run("demo --embed-dim 10 --num-heads 3");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "multihead: error: embed_dim (10) must be divisible by num_heads (3)\n");
}

TEST_F(Cli, HelpVersionAndDidYouMean) {
  const CliRun help = run("help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("train"), std::string::npos) << help.out;
  const CliRun train_help = run("help train");
  EXPECT_EQ(train_help.code, 0);
  EXPECT_NE(train_help.out.find("--epochs"), std::string::npos);
  EXPECT_EQ(run("help bench attention").code, 0);
  const CliRun v = run("-V");
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out.rfind(std::string("multihead ") + MULTIHEAD_VERSION, 0), 0u) << v.out;
  // A mistyped command, in `help` or alone: one line, the nearest command named.
  for (const char* typo : {"trian", "help trian"}) {
    const CliRun r = run(typo);
    EXPECT_EQ(r.code, 2) << typo;
    EXPECT_EQ(
        r.err.rfind("multihead: error: unknown command 'trian' (did you mean 'train'?); the commands are: train, ", 0),
        0u)
        << r.err;
    EXPECT_EQ(count_lines(r.err), 1);
  }
  EXPECT_EQ(run("frobnicate").err.find("did you mean"), std::string::npos);  // nothing near: no guess
  // A mistyped flag.
  const CliRun flag = run("train --epoch 3 --out " + (dir / "x").string());
  EXPECT_EQ(flag.code, 2);
  EXPECT_NE(flag.err.find("(did you mean --epochs?)"), std::string::npos) << flag.err;
  EXPECT_FALSE(fs::exists(dir / "x"));
  const CliRun eval_flag = run("eval --run r --dta x.csv");
  EXPECT_NE(eval_flag.err.find("(did you mean --data?)"), std::string::npos) << eval_flag.err;
  // A mistyped config key.
  std::ofstream(dir / "job.json") << R"({"task": "sequence_task", "modle": {"d_model": 16}})";
  const CliRun key = run("train --config " + (dir / "job.json").string() + " --out " + (dir / "y").string());
  EXPECT_EQ(key.code, 2);
  EXPECT_NE(key.err.find("unknown key 'modle' (did you mean 'model'?)"), std::string::npos) << key.err;
  // Every option's default is in its command's help.
  const CliRun predict_help = run("predict --help");
  const std::size_t top_k = predict_help.out.find("--top-k");
  ASSERT_NE(top_k, std::string::npos);
  const std::string line = predict_help.out.substr(top_k, predict_help.out.find('\n', top_k) - top_k);
  EXPECT_NE(line.find("INT=0"), std::string::npos) << line;
}

TEST_F(Cli, TheRunLockGoesWithTheRunAndAKilledRunsLockIsTakenOver) {
  const fs::path out = dir / "run";
  const std::string train =
      "train --preset reverse --steps 3 --warmup-steps 5 --d-model 16 --num-heads 2 "
      "--num-layers 1 --batch 4 --threads 1 --out " +
      out.string();
  const CliRun first = run(train);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_FALSE(fs::exists(out / "run.lock"));  // a finished run names no process
  // A warmup as long as the run is pointed out.
  EXPECT_NE(first.err.find("note: the warmup (5 steps) is as long as the run (3 steps): the learning rate never "
                           "reaches its peak"),
            std::string::npos)
      << first.err;
  // A run killed before it wrote its config leaves its lock, naming a process that is gone.
  const fs::path killed = dir / "killed";
  fs::create_directories(killed);
  std::ofstream(killed / "run.lock") << "999999999";
  const CliRun taken =
      run("train --preset reverse --steps 3 --warmup-steps 1 --d-model 16 --num-heads 2 "
          "--num-layers 1 --batch 4 --threads 1 --out " +
          killed.string());
  ASSERT_EQ(taken.code, 0) << taken.err;
  EXPECT_NE(taken.err.find("note: " + killed.string() +
                           " was locked by process 999999999, which ended without "
                           "releasing it (killed?); this run takes it over"),
            std::string::npos)
      << taken.err;
  EXPECT_EQ(taken.err.find("note: the warmup"), std::string::npos);
  EXPECT_FALSE(fs::exists(killed / "run.lock"));
}

}  // namespace
}  // namespace multihead
