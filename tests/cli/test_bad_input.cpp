// SPDX-License-Identifier: Apache-2.0
// Bad datasets and checkpoints given to `multihead train` and `eval`: one
// error line, exit code 2, and nothing written or lost.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
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
using test::CliRun;
using test::idx;
using test::run;

class BadInput : public test::Cli {
 protected:
  void write(const fs::path& p, const std::string& bytes) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
  }
  // Runs `args` into a fresh --out and expects exactly `error` (one line,
  // exit 2) and no run directory left behind.
  void expect_refused(const std::string& args, const std::string& error) {
    const fs::path out = dir / "never";
    CliRun r = run(args + " --threads 1 --quiet --out " + out.string());
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err, "multihead: error: " + error + "\n") << args;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_FALSE(fs::exists(out)) << args;
  }
};

TEST_F(BadInput, EmptyAndTinyTextDatasets) {
  const std::string csv = (dir / "d.csv").string(), tsv = (dir / "d.tsv").string();
  write(csv, "text,label\n");
  expect_refused("train --source csv --data " + csv, csv + ": no data rows after the header");
  write(csv, "text,label\ngood,1\nbad,0\n");
  expect_refused("train --source csv --data " + csv, csv + ": too few examples (2) for the requested splits");
  write(tsv, "text\tlabel\n\xff\xfe\t1\n");
  expect_refused("train --source tsv --data " + tsv, tsv + ": invalid UTF-8 at byte 11");
  write(csv, "text,label\nfine,100000\n");
  expect_refused("train --source csv --data " + csv,
                 csv + ": every row has the label '100000'; a classifier needs at least two classes");
  // Into a folder that exists and is empty: the failed run leaves it empty
  // (it used to keep config.json, tokenizer/, checkpoints/ and plots/).
  const fs::path empty = dir / "empty";
  fs::create_directories(empty);
  CliRun failed = run("train --source csv --data " + csv + " --threads 1 --quiet --out " + empty.string());
  EXPECT_EQ(failed.code, 2);
  EXPECT_TRUE(fs::is_directory(empty));
  EXPECT_TRUE(fs::is_empty(empty)) << "the failed run left files behind";

  const fs::path imdb = dir / "imdb";
  fs::create_directories(imdb / "train" / "pos");
  fs::create_directories(imdb / "train" / "neg");
  expect_refused("train --source aclimdb --data " + imdb.string(), imdb.string() + "/train: no reviews found");
  write(imdb / "train" / "pos" / "1_11.txt", "great");
  expect_refused("train --source aclimdb --data " + imdb.string(),
                 (imdb / "train" / "pos" / "1_11.txt").string() + ": rating 11 is outside 1..10");
  fs::remove(imdb / "train" / "pos" / "1_11.txt");
  write(imdb / "train" / "pos" / "1_9.txt", "gr\xc3");
  expect_refused("train --source aclimdb --data " + imdb.string(),
                 (imdb / "train" / "pos" / "1_9.txt").string() + ": invalid UTF-8 at byte 2");

  const fs::path spam = dir / "spam";
  fs::create_directories(spam);
  expect_refused(
      "train --source spamassassin --data " + spam.string(),
      (spam / "easy-ham-1").string() + ": not a directory (run scripts/setup.sh --data to fetch the corpus)");
  for (const char* group : {"easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"})
    fs::create_directories(spam / group);
  expect_refused("train --source spamassassin --data " + spam.string(), spam.string() + ": no messages found");

  const std::string text = (dir / "empty.txt").string();
  write(text, "");
  expect_refused("train --preset moby-dick --data " + text, text + ": empty text");
  write(text, "the whale \xe2\x82");
  expect_refused("train --preset moby-dick --data " + text, text + ": invalid UTF-8 at byte 10");
}

TEST_F(BadInput, ImageDatasetsWithBadLabelsOrNoImages) {
  const fs::path data = dir / "fashion";
  const std::string args =
      "train --preset fashion-mnist --epochs 1 --d-model 16 --num-heads 2 --num-layers 1 --data " + data.string();
  write(data / "train-images-idx3-ubyte", idx({4, 28, 28}, 7));
  write(data / "train-labels-idx1-ubyte", idx({4}, 12));
  write(data / "t10k-images-idx3-ubyte", idx({2, 28, 28}, 7));
  write(data / "t10k-labels-idx1-ubyte", idx({2}, 1));
  expect_refused(args, (data / "train-labels-idx1-ubyte").string() + ": label 12 is out of range");
  write(data / "train-labels-idx1-ubyte", idx({3}, 1));
  expect_refused(args, (data / "train-labels-idx1-ubyte").string() + ": 3 labels for 4 images");
  write(data / "train-images-idx3-ubyte", idx({0, 28, 28}, 7));
  write(data / "train-labels-idx1-ubyte", idx({0}, 1));
  expect_refused(args, data.string() + ": too few images (0 for training, 2 for testing)");
  write(data / "train-images-idx3-ubyte", idx({4, 28, 28}, 7));
  write(data / "train-labels-idx1-ubyte", idx({4}, 1));
  write(data / "t10k-images-idx3-ubyte", idx({2, 27, 28}, 7));
  expect_refused(args, (data / "t10k-images-idx3-ubyte").string() + ": expected (N, 28, 28) images");
}

// A finished language-model run, to break its checkpoint.
class BadCheckpoint : public BadInput {
 protected:
  void SetUp() override {
    BadInput::SetUp();
    std::string text;
    for (int i = 0; i < 60; ++i) text += "the whale swam on. the sea was calm.\n";
    write(dir / "tiny.txt", text);
    job = "train --preset moby-dick --data " + (dir / "tiny.txt").string() +
          " --steps 10 --d-model 16 --num-heads 2 --num-layers 1 --batch 4 --max-len 16 --threads 1 --quiet";
    out = dir / "run";
    CliRun r = run(job + " --out " + out.string());
    ASSERT_EQ(r.code, 0) << r.err;
    ckpt = (out / "checkpoints" / "last.safetensors").string();
    good = read_file(ckpt);
    metrics = read_file((out / "metrics.jsonl").string());
  }
  // Replaces the checkpoint with `bytes`: a resume (and, unless
  // `resume_only`, eval) must refuse it with `error` and leave the run
  // directory as it was.
  void expect_refused_checkpoint(const std::string& bytes, const std::string& error, bool resume_only = false) {
    write_file_atomic(ckpt, bytes);
    std::vector<std::string> commands = {job + " --resume --out " + out.string()};
    if (!resume_only) commands.push_back("eval --run " + out.string());
    for (const std::string& args : commands) {
      CliRun r = run(args);
      EXPECT_EQ(r.code, 2) << args;
      EXPECT_EQ(r.err, "multihead: error: " + error + "\n") << args;
      EXPECT_EQ(read_file(ckpt), bytes) << "the checkpoint was changed";
      EXPECT_EQ(read_file((out / "metrics.jsonl").string()), metrics) << "the log was changed";
    }
  }
  // The good checkpoint with its tensors and metadata edited.
  std::string edited(const std::function<void(TensorMap&, std::map<std::string, std::string>&)>& edit) {
    const SafetensorsFile f = SafetensorsFile::parse(good, ckpt);
    TensorMap tensors = f.all_tensors();
    std::map<std::string, std::string> meta = f.metadata();
    edit(tensors, meta);
    std::vector<std::pair<std::string, const Tensor*>> list;
    for (const auto& [name, t] : tensors) list.emplace_back(name, &t);
    return serialize_safetensors(list, meta);
  }
  // The good checkpoint's bytes with only its metadata edited, written as
  // an older build or a hand would write it: no checksum added.
  std::string with_metadata(const std::function<void(nlohmann::json&)>& edit) {
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(good[static_cast<std::size_t>(i)]);
    nlohmann::json header = nlohmann::json::parse(good.substr(8, n));
    edit(header["__metadata__"]);
    const std::string h = header.dump();
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    return bytes + h + good.substr(8 + n);
  }
  std::string job;
  fs::path out;
  std::string ckpt, good, metrics;
};

TEST_F(BadCheckpoint, TextArgumentsMustBeUtf8) {
  // The fixture's run serves as a language model to prompt and inspect; the
  // shell's printf writes the bytes.
  CliRun g = run("generate --run " + out.string() + " --prompt \"$(printf 'the \\377')\" --tokens 3");
  EXPECT_EQ(g.code, 2);
  EXPECT_EQ(g.err, "multihead: error: the prompt: invalid UTF-8 at byte 4\n");
  EXPECT_TRUE(g.out.empty());
  const fs::path maps = dir / "maps";
  CliRun in = run("inspect --run " + out.string() + " --text \"$(printf 'wh\\303')\" --out " + maps.string());
  EXPECT_EQ(in.code, 2);
  EXPECT_EQ(in.err, "multihead: error: the text: invalid UTF-8 at byte 2\n");
  EXPECT_FALSE(fs::exists(maps));
}

// inspect into a folder where one heatmap's name is taken by a folder: a
// one-line error naming it, and the folder as it was (the other heatmaps
// are not written, an older one of the same name is not replaced).
TEST_F(BadCheckpoint, InspectWritesNoHeatmapUnlessItCanWriteAll) {
  const fs::path maps = dir / "maps-taken";
  fs::create_directories(maps / "layer0_head1.png");
  write_file_atomic((maps / "layer0_head0.png").string(), "an older map");
  CliRun in = run("inspect --run " + out.string() + " --text the --out " + maps.string());
  EXPECT_EQ(in.code, 2);
  EXPECT_EQ(test::count_lines(in.err), 1) << in.err;
  EXPECT_NE(in.err.find((maps / "layer0_head1.png").string()), std::string::npos) << in.err;
  EXPECT_EQ(read_file((maps / "layer0_head0.png").string()), "an older map");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(maps)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"layer0_head0.png", "layer0_head1.png"}));
}

TEST_F(BadCheckpoint, CorruptTokenizersAreRefused) {
  const fs::path tok = out / "tokenizer" / "tokenizer.json";
  for (const std::string& bytes :
       {std::string("\x01\x02garbage"), std::string("{\"type\": \"char\"}"), std::string("{\"type\": \"bpe\"}")}) {
    write_file_atomic(tok.string(), bytes);
    CliRun g = run("generate --run " + out.string() + " --prompt the --tokens 3");
    EXPECT_EQ(g.code, 2) << bytes;
    EXPECT_EQ(test::count_lines(g.err), 1) << g.err;
    EXPECT_EQ(g.err.rfind("multihead: error: " + tok.string() + ": ", 0), 0u) << g.err;
    EXPECT_TRUE(g.out.empty());
  }
}

TEST_F(BadCheckpoint, TruncatedCheckpointsAreRefused) {
  expect_refused_checkpoint(good.substr(0, 5), ckpt + ": not a safetensors file (only 5 bytes)");
  // Cut in the header and in the data: the reader's own message, as one line.
  for (std::size_t size : {std::size_t{100}, good.size() / 2, good.size() - 1}) {
    const std::string cut = good.substr(0, size);
    std::string error;
    try {
      SafetensorsFile::parse(cut, ckpt);
    } catch (const IoError& e) {
      error = e.what();
    }
    ASSERT_FALSE(error.empty()) << size;
    expect_refused_checkpoint(cut, error);
  }
}

TEST_F(BadCheckpoint, HostileCheckpointsAreRefused) {
  std::string huge = good;
  huge.replace(0, 8, std::string(8, '\xff'));
  expect_refused_checkpoint(huge, ckpt + ": header length 18446744073709551615 exceeds the 100 MB limit");
  expect_refused_checkpoint(edited([](TensorMap& t, auto&) {
                              t["encoder.layers.0.linear1.weight"] = Tensor::zeros({3, 3});
                            }),
                            ckpt + ": 'encoder.layers.0.linear1.weight' has shape (3, 3), expected (768, 16)");
  expect_refused_checkpoint(edited([](TensorMap& t, auto&) { t.erase("encoder.layers.0.linear1.bias"); }),
                            ckpt + ": missing tensor 'encoder.layers.0.linear1.bias' of shape (768,)");
  expect_refused_checkpoint(
      edited([](TensorMap& t, auto&) { t.erase("optimizer.exp_avg.encoder.layers.0.linear1.bias"); }),
      ckpt + ": checkpoint lacks optimizer state 'optimizer.exp_avg.encoder.layers.0.linear1.bias'", true);
  expect_refused_checkpoint(edited([](auto&, std::map<std::string, std::string>& m) { m["step"] = "many"; }),
                            ckpt + ": checkpoint step or seed is not a number", true);
  expect_refused_checkpoint(edited([](auto&, std::map<std::string, std::string>& m) { m["rng.seed"] = "5"; }),
                            ckpt + ": checkpoint was written with seed 5, this run uses 0", true);
  expect_refused_checkpoint(edited([](auto&, std::map<std::string, std::string>& m) { m["distributed.ranks"] = "2"; }),
                            ckpt + ": the run was trained by 2 ranks and this one has 1: resume it with mpirun -np 2",
                            true);
  expect_refused_checkpoint(edited([](auto&, std::map<std::string, std::string>& m) { m.erase("format"); }),
                            ckpt + ": not a multihead checkpoint");
  expect_refused_checkpoint(edited([](TensorMap& t, auto&) {
                              Tensor& w = t["encoder.layers.0.linear1.weight"];
                              w.f32()[0] = std::nanf("");
                            }),
                            ckpt + ": 'encoder.layers.0.linear1.weight' holds nan at element 0");
}

// eval, generate and inspect load a run through the same checks: a
// config.json whose vocabulary disagrees with the tokenizer, and an empty
// token list, are refused alike by all three.
TEST_F(BadCheckpoint, EveryCommandRefusesARunTheSameWay) {
  const std::vector<std::string> commands = {
      "eval --run " + out.string(), "generate --run " + out.string() + " --prompt the --tokens 3",
      "inspect --run " + out.string() + " --text the --out " + (dir / "maps").string()};
  const std::string config_path = (out / "config.json").string(), config = read_file(config_path);
  auto edited_config = nlohmann::json::parse(config);
  const std::int64_t vocab = edited_config["model"]["vocab_size"];
  edited_config["model"]["vocab_size"] = vocab + 1;
  write_file_atomic(config_path, edited_config.dump());
  for (const std::string& args : commands) {
    CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err, fmt::format("multihead: error: {}: config.json has vocab_size {} but the run's tokenizer has {} "
                                 "tokens\n",
                                 out.string(), vocab + 1, vocab))
        << args;
  }
  write_file_atomic(config_path, config);
  const fs::path tok = out / "tokenizer" / "tokenizer.json";
  write_file_atomic(tok.string(), R"({"type": "char", "tokens": []})");
  for (const std::string& args : commands) {
    CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err, "multihead: error: " + tok.string() + ": empty token list\n") << args;
  }
  EXPECT_FALSE(fs::exists(dir / "maps"));
}

// Finite weights large enough that the forward overflows: eval has no finite
// loss to report and says so with exit 2, rather than printing nan.
TEST_F(BadCheckpoint, WeightsThatGiveNonFiniteOutputsFailEval) {
  write_file_atomic(ckpt, edited([](TensorMap& t, auto&) {
                      Tensor& w = t["encoder.layers.0.linear1.weight"];
                      for (std::int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = 3e38f;
                    }));
  CliRun r = run("eval --run " + out.string() + " --threads 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("multihead: error: the validation loss is ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(": the model's outputs are not finite, so there is no result to report\n"), std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty());
}

// A flipped bit anywhere in the data fails the checksum every checkpoint
// carries; a format this build does not know is refused by name. eval and
// --resume read checkpoints through the same checks.
TEST_F(BadCheckpoint, CorruptOrUnknownCheckpointsAreRefused) {
  for (std::size_t at : {good.size() - 3, good.size() / 2}) {
    std::string flipped = good;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    std::string error;
    try {
      SafetensorsFile::parse(flipped, ckpt);
    } catch (const IoError& e) {
      error = e.what();
    }
    ASSERT_NE(error.find(": the header and data do not match their checksum ("), std::string::npos) << error;
    EXPECT_NE(error.find("): the file is corrupt or was edited"), std::string::npos) << error;
    expect_refused_checkpoint(flipped, error);
  }
  expect_refused_checkpoint(
      edited([](auto&, std::map<std::string, std::string>& m) { m["format"] = "multihead-checkpoint-9"; }),
      ckpt +
          ": checkpoint format 'multihead-checkpoint-9' is not one this build reads (multihead-checkpoint-1, -2 "
          "or -3)");
}

// A checkpoint cannot shed its own checks by naming an older format: a
// format tag is read only with the fields that format has (the current
// format's checksum, architecture and rank count betray an edited tag), and
// an older checkpoint that is consistent is read with a warning naming its format.
TEST_F(BadCheckpoint, ACheckpointCannotDowngradeItsOwnChecks) {
  auto tagged = [&](const char* format, std::vector<const char*> drop, std::map<std::string, std::string> add = {}) {
    return with_metadata([&](nlohmann::json& m) {
      m["format"] = format;
      for (const char* key : drop) m.erase(key);
      for (const auto& [k, v] : add) m[k] = v;
    });
  };
  expect_refused_checkpoint(tagged("multihead-checkpoint-1", {"crc32"}),
                            ckpt +
                                ": a multihead-checkpoint-1 file never carries 'distributed.ranks' (format 2 and "
                                "later write it): its format tag was edited; refused");
  expect_refused_checkpoint(tagged("multihead-checkpoint-1", {"crc32", "distributed.ranks"}),
                            ckpt +
                                ": a multihead-checkpoint-1 file never carries 'architecture' (format 3 and later "
                                "write it): its format tag was edited; refused");
  expect_refused_checkpoint(tagged("multihead-checkpoint-2", {"crc32"}),
                            ckpt +
                                ": a multihead-checkpoint-2 file never carries 'architecture' (format 3 and later "
                                "write it): its format tag was edited; refused");
  expect_refused_checkpoint(tagged("multihead-checkpoint-2", {"crc32", "architecture"}),
                            ckpt + ": checkpoint lacks the checksum of its data");
  expect_refused_checkpoint(tagged("multihead-checkpoint-3", {"crc32"}),
                            ckpt + ": checkpoint lacks the checksum of its header and data");
  // Consistent with format 1 (every later field gone): read, and said to be what it is, with an edited step too.
  const std::string old =
      tagged("multihead-checkpoint-1", {"crc32", "architecture", "distributed.ranks"}, {{"step", "4"}});
  write_file_atomic(ckpt, old);
  const std::string warning = "multihead: warning: " + ckpt +
                              " is a checkpoint of format 1, from an older build: it carries no checksum and no "
                              "record of the architecture it was trained with, so neither its contents nor "
                              "config.json can be checked against it (train --resume writes the current format)\n";
  const CliRun e = run("eval --run " + out.string());
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.err, warning);
  const CliRun p = run("generate --run " + out.string() + " --prompt the --tokens 2");
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.err, warning);
  const CliRun r = run(job + " --resume --out " + out.string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(warning.substr(std::string("multihead: ").size())), std::string::npos) << r.err;
  // Resumed and finished: the checkpoint is in the current format again.
  EXPECT_EQ(SafetensorsFile::read(ckpt).metadata().at("format"), "multihead-checkpoint-3");
}

}  // namespace
}  // namespace multihead
