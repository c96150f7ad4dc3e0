// SPDX-License-Identifier: Apache-2.0
// The training stack: resuming, accumulation, checkpointing, determinism,
// optimizers, schedules, clipping and the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "multihead/core/allocator.h"
#include "multihead/io/atomic_file.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/nn/state_dict.h"
#include "multihead/io/json_config.h"
#include "multihead/train/resume.h"
#include "test_util.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;
using test::all_close_v;

ModelConfig tiny_model(double dropout = 0.1) {
  ModelConfig m;
  m.vocab_size = 30;
  m.num_layers = 2;
  m.layer.d_model = 16;
  m.layer.nhead = 4;
  m.layer.dim_feedforward = 24;
  m.layer.dropout = dropout;
  m.max_len = 32;
  m.num_classes = 3;
  return m;
}

// Batch `index` of a synthetic task: the label is the first token mod 3.
struct Batch {
  Tensor ids, padding, labels;
};
Batch make_batch(std::uint64_t index, std::int64_t B, std::int64_t L) {
  Rng rng(99, index);
  Batch b{Tensor({B, L}, DType::kI64), Tensor({B, L}, DType::kBool), Tensor({B}, DType::kI64)};
  for (std::int64_t i = 0; i < B * L; ++i) b.ids.data<std::int64_t>()[i] = rng.next_u32() % 30;
  for (std::int64_t r = 0; r < B; ++r) {
    const std::int64_t len = 2 + rng.next_u32() % (L - 1);
    for (std::int64_t l = len; l < L; ++l) b.padding.data<std::uint8_t>()[r * L + l] = 1;
    b.labels.data<std::int64_t>()[r] = b.ids.data<std::int64_t>()[r * L] % 3;
  }
  return b;
}

// A classifier, its trainer, and a step over micro-batches of the synthetic task.
struct TrainRun {
  ParamStore store;
  SequenceClassifier model;
  Trainer trainer;
  std::int64_t batch;

  TrainRun(const TrainConfig& tc, const ModelConfig& mc = tiny_model()) : model(store, mc), trainer(store_ready(), tc) {
    Rng rng(5);
    model.init(rng);
    batch = tc.batch;
  }
  ParamStore& store_ready() {
    store.finalize();
    return store;
  }
  StepStats step() {
    const std::int64_t micro_b = batch / trainer.config().grad_accumulation;
    const std::int64_t step_index = trainer.steps_done();
    return trainer.step([&](std::int64_t micro, const ForwardContext& ctx, double scale) {
      // Micro-batch m of step s is rows [m*micro_b, (m+1)*micro_b) of batch s.
      Batch full = make_batch(static_cast<std::uint64_t>(step_index), batch, 8);
      Batch b{Tensor({micro_b, 8}, DType::kI64), Tensor({micro_b, 8}, DType::kBool), Tensor({micro_b}, DType::kI64)};
      std::memcpy(b.ids.raw(), full.ids.data<std::int64_t>() + micro * micro_b * 8, b.ids.nbytes());
      std::memcpy(b.padding.raw(), full.padding.data<std::uint8_t>() + micro * micro_b * 8, b.padding.nbytes());
      std::memcpy(b.labels.raw(), full.labels.data<std::int64_t>() + micro * micro_b, b.labels.nbytes());
      Tensor logits = model.forward(b.ids, &b.padding, ctx);
      Tensor dlogits = Tensor::empty(logits.shape());
      auto ce = cross_entropy(dlogits.f32(), logits.f32(), b.labels.data<std::int64_t>(), micro_b, 3, -100, 0.0, scale);
      model.backward(dlogits);
      return ce.loss;
    });
  }
  std::vector<float> weights() { return {store.all_data().begin(), store.all_data().end()}; }
};

TrainConfig tiny_train() {
  TrainConfig t;
  t.schedule.base_lr = 3e-3;
  t.schedule.warmup_steps = 3;
  t.schedule.decay = Decay::kCosine;
  t.schedule.total_steps = 12;
  t.clip_grad_norm = 1.0;
  t.batch = 8;
  t.seed = 11;
  return t;
}

// Class weights as torch.nn.functional.cross_entropy(weight=w) takes them,
// with and without label smoothing and an ignored row: the loss and its
// gradient as PyTorch 2.13.0 computed them for these logits (in double).
TEST(CrossEntropy, ClassWeightsFollowPyTorch) {
  const std::vector<double> z = {0.3, -1.2, 2.0, 1.5, 0.2, -0.7, -0.4, 0.9, 0.1, 2.2, -0.3, 0.5};
  const std::vector<std::int64_t> y = {2, 0, kIgnoreIndex, 1};
  const std::vector<double> w = {0.5, 2.0, 1.0};
  struct Want {
    double eps, loss;
    std::vector<double> grad;
  };
  const Want wants[] = {
      {0.0,
       1.6667708832571406,
       {0.04266253205239748, 0.009519297609188968, -0.052181829661586444, -0.03958703989838944, 0.028144386326156155,
        0.011442653572233277, 0, 0, 0, 0.45180486482953847, -0.534342169720768, 0.08253730489122951}},
      {0.1,
       1.7040338094901828,
       {0.038611669491366025, -0.009369666478276925, -0.029242003013089067, -0.016293883313412815, 0.012849352122024598,
        0.0034445311913881924, 0, 0, 0, 0.428217757366403, -0.49779219836335514, 0.0695744409969521}},
  };
  for (const Want& want : wants) {
    std::vector<double> dz(z.size());
    const CrossEntropyResult r =
        cross_entropy(dz.data(), z.data(), y.data(), 4, 3, kIgnoreIndex, want.eps, 1.0, w.data());
    EXPECT_NEAR(r.loss, want.loss, 1e-13) << want.eps;
    EXPECT_EQ(r.count, 3);
    for (std::size_t i = 0; i < dz.size(); ++i) EXPECT_NEAR(dz[i], want.grad[i], 1e-13) << want.eps << " " << i;
  }
  // Weights of 1 are no weights.
  const std::vector<double> ones(3, 1.0);
  std::vector<double> a(z.size()), b(z.size());
  const double plain = cross_entropy(a.data(), z.data(), y.data(), 4, 3, kIgnoreIndex, 0.1).loss;
  EXPECT_NEAR(cross_entropy(b.data(), z.data(), y.data(), 4, 3, kIgnoreIndex, 0.1, 1.0, ones.data()).loss, plain,
              1e-14);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-14);
  // A negative weight is refused by name.
  const std::vector<double> bad = {1.0, -1.0, 1.0};
  EXPECT_THROW(cross_entropy<double>(nullptr, z.data(), y.data(), 4, 3, kIgnoreIndex, 0.0, 1.0, bad.data()),
               ConfigError);
}

TEST(Training, LossFallsOnALearnableTask) {
  // The label is token 0 mod 3; [CLS] pooling reads token 0's output.
  TrainConfig tc = tiny_train();
  tc.schedule.base_lr = 1e-2;
  tc.schedule.total_steps = 80;
  ModelConfig mc = tiny_model();
  mc.pooling = Pooling::kCls;
  TrainRun r(tc, mc);
  double first = 0, last = 0;
  for (int s = 0; s < 80; ++s) {
    StepStats st = r.step();
    if (s < 5) first += st.loss / 5;
    if (s >= 75) last += st.loss / 5;
  }
  EXPECT_LT(last, first * 0.9) << "first " << first << ", last " << last;
}

TEST(Training, ResumingFromACheckpointIsBitwiseIdentical) {
  const fs::path dir = fs::temp_directory_path() / ("multihead_resume_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string ckpt = (dir / "step6.safetensors").string();
  TrainConfig tc = tiny_train();
  TrainRun straight(tc);
  for (int s = 0; s < 10; ++s) straight.step();

  {
    TrainRun first(tc);
    for (int s = 0; s < 6; ++s) first.step();
    first.trainer.save_checkpoint(ckpt, {{"data.position", "6"}});
  }
  TrainRun resumed(tc);  // fresh weights, overwritten by the checkpoint
  auto meta = resumed.trainer.load_checkpoint(ckpt);
  EXPECT_EQ(meta.at("data.position"), "6");
  EXPECT_EQ(resumed.trainer.steps_done(), 6);
  for (int s = 6; s < 10; ++s) resumed.step();
  const auto a = straight.weights(), b = resumed.weights();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  // The checkpoint carries the PyTorch names of the model.
  SafetensorsFile f = SafetensorsFile::read(ckpt);
  EXPECT_TRUE(f.contains("encoder.layers.1.self_attn.in_proj_weight"));
  EXPECT_TRUE(f.contains("optimizer.exp_avg.classifier.weight"));
  // A checkpoint written with another seed is refused, and changes nothing.
  TrainConfig other = tc;
  other.seed = 12;
  TrainRun wrong(other);
  const auto before = wrong.weights();
  EXPECT_THROW(wrong.trainer.load_checkpoint(ckpt), IoError);
  EXPECT_EQ(wrong.weights(), before);
  fs::remove_all(dir);
}

// A small ViT whose step `bad` sees a pixel of value `bad_value`: non-finite
// inputs reach the loss, and the trainer must notice.
struct ImageRun {
  ParamStore store;
  VisionTransformer vit;
  Trainer trainer;
  ImageRun(const TrainConfig& tc) : vit(store, config()), trainer(ready(), tc) {
    Rng rng(5);
    vit.init(rng);
  }
  static VisionConfig config() {
    VisionConfig c;
    c.image_size = 8;
    c.patch = 4;
    c.num_layers = 1;
    c.layer.d_model = 8;
    c.layer.nhead = 2;
    c.layer.dim_feedforward = 16;
    c.num_classes = 3;
    return c;
  }
  ParamStore& ready() {
    store.finalize();
    return store;
  }
  StepStats step(float pixel) {
    return trainer.step([&](std::int64_t, const ForwardContext& ctx, double scale) {
      Rng rng(7, static_cast<std::uint64_t>(trainer.steps_done()));
      Tensor img = Tensor::empty({4, 1, 8, 8});
      for (std::int64_t i = 0; i < img.numel(); ++i) img.f32()[i] = rng.uniform();
      img.f32()[37] = pixel;
      const std::int64_t labels[4] = {0, 1, 2, 1};
      Tensor logits = vit.forward(img, ctx);
      Tensor dl = Tensor::empty(logits.shape());
      auto ce = cross_entropy(dl.f32(), logits.f32(), labels, 4, 3, -100, 0.0, scale);
      vit.backward(dl);
      return ce.loss;
    });
  }
  std::vector<float> weights() { return {store.all_data().begin(), store.all_data().end()}; }
};

TEST(Training, NonFiniteInputsStopTrainingOrSkipTheStepAsAsked) {
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    TrainConfig tc = tiny_train();
    ImageRun stop(tc);
    stop.step(0.5f), stop.step(0.5f);
    const auto before = stop.weights();
    try {
      stop.step(bad);
      ADD_FAILURE() << "a non-finite loss did not stop training";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("training stopped at step 3: loss"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("-nan"), std::string::npos) << "NaN is printed without a sign";
    }
    EXPECT_EQ(stop.weights(), before) << "the bad step must not update";

    tc.on_nonfinite = NonFinite::kSkip;
    ImageRun skip(tc);
    skip.step(0.5f), skip.step(0.5f);
    const auto kept = skip.weights();
    StepStats st = skip.step(bad);
    EXPECT_TRUE(st.skipped);
    EXPECT_FALSE(std::isfinite(st.loss));
    EXPECT_EQ(skip.weights(), kept);
    EXPECT_EQ(step_json(st, false).at("skipped"), true);
    EXPECT_EQ(skip.trainer.steps_done(), 3);
    EXPECT_EQ(skip.trainer.skipped_steps(), 1);
    st = skip.step(0.5f);  // and training goes on
    EXPECT_FALSE(st.skipped);
    EXPECT_NE(skip.weights(), kept);
    EXPECT_FALSE(step_json(st, false).contains("skipped"));
  }
}

TEST(Training, SkippingStopsWhenEveryStepIsBad) {
  TrainConfig tc = tiny_train();
  tc.on_nonfinite = NonFinite::kSkip;
  ImageRun r(tc);
  std::int64_t taken = 0;
  try {
    for (; taken < 100; ++taken) r.step(std::nanf(""));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the last 25 steps all had a non-finite loss"), std::string::npos);
  }
  EXPECT_EQ(taken, 24);  // the 25th throws
}

// The key list the configs below follow: a job's threads, and the train section's keys.
std::vector<KeyDescription> threads_and_train_keys() {
  ConfigDescriber d;
  d("threads", 0).may_change_on_resume();
  const TrainConfig defaults;
  d.section("train", [&](ConfigDescriber& s) { TrainConfig::keys(s, defaults); });
  return d.rows();
}

TEST(Training, StartOrResumePicksUpOnlyItsOwnRun) {
  const fs::path dir = fs::temp_directory_path() / ("multihead_start_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const nlohmann::json config = {{"task", "test"}, {"train", {{"lr", 0.1}, {"checkpoint_every", 5}}}, {"threads", 1}};
  TrainConfig tc = tiny_train();
  {
    // A checkpoint left by a former run goes when a new run starts over it.
    RunDir run(dir.string());
    write_file_atomic(last_checkpoint_path(dir.string()), "a former run");
    TrainRun r(tc);
    EXPECT_TRUE(start_or_resume(run, {config, threads_and_train_keys()}, r.trainer).empty());
    EXPECT_FALSE(fs::exists(last_checkpoint_path(dir.string())));
    for (int s = 0; s < 3; ++s) run.append_metrics(step_json(r.step(), false));
    save_run_checkpoint(run, r.trainer);
    run.append_metrics(step_json(r.step(), false));  // after the checkpoint: dropped on resume
  }
  {
    // Resuming: the step and the three records before the checkpoint come back.
    RunDir run(dir.string(), RunMode::kResume);
    TrainRun r(tc);
    nlohmann::json other_threads = config;
    other_threads["threads"] = 2;
    other_threads["train"]["checkpoint_every"] = 9;
    const auto records = start_or_resume(run, {other_threads, threads_and_train_keys()}, r.trainer);
    EXPECT_EQ(r.trainer.steps_done(), 3);
    ASSERT_EQ(records.size(), 3u);
    EXPECT_EQ(records.back()["step"], 3);
    EXPECT_EQ(run.metrics_records(), 3);
  }
  {
    RunDir run(dir.string(), RunMode::kResume);
    TrainRun r(tc);
    nlohmann::json other = config;
    other["train"]["lr"] = 0.2;
    try {
      start_or_resume(run, {other, threads_and_train_keys()}, r.trainer);
      ADD_FAILURE() << "another learning rate was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("its run had /train/lr = 0.1, this one has 0.2"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(r.trainer.steps_done(), 0);
  }
  fs::remove_all(dir);
}

TEST(Training, SameSeedSameThreadsSameWeights) {
  TrainRun a(tiny_train()), b(tiny_train());
  for (int s = 0; s < 5; ++s) a.step(), b.step();
  const auto wa = a.weights(), wb = b.weights();
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)), 0);
}

TEST(Training, GradientAccumulationMatchesOneLargeBatch) {
  // Mean pooling, no dropout: two micro-batches of 4 average to the batch of 8.
  // SGD, because AdamW turns the key bias's rounding-noise gradient (its true
  // gradient is 0: softmax ignores it) into full-size steps.
  TrainConfig one = tiny_train();
  one.optimizer = OptimizerKind::kSgd;
  one.sgd.momentum = 0.9;
  TrainConfig two = one;
  two.grad_accumulation = 2;
  TrainRun a(one, tiny_model(0.0)), b(two, tiny_model(0.0));
  for (int s = 0; s < 3; ++s) {
    StepStats sa = a.step(), sb = b.step();
    EXPECT_NEAR(sa.loss, sb.loss, 1e-5);
    EXPECT_NEAR(sa.grad_norm, sb.grad_norm, 1e-4 * sa.grad_norm);
  }
  EXPECT_TRUE(all_close_v(a.weights(), b.weights(), 1e-5, 1e-4));
}

TEST(Training, GradientCheckpointingGivesTheSameGradientsWithLessMemory) {
  ModelConfig mc = tiny_model(0.2);
  mc.num_layers = 4;
  auto grads_and_peak = [&](bool checkpoint) {
    ParamStore store;
    SequenceClassifier model(store, mc);
    store.finalize();
    Rng rng(3);
    model.init(rng);
    model.encoder().set_checkpointing(checkpoint);
    Batch b = make_batch(0, 16, 24);
    ForwardContext ctx{true, 7, 1};
    const std::int64_t base = memory_stats().current_bytes;
    const PeakMeter memory;
    Tensor logits = model.forward(b.ids, &b.padding, ctx);
    Tensor dlogits = Tensor::empty(logits.shape());
    cross_entropy(dlogits.f32(), logits.f32(), b.labels.data<std::int64_t>(), 16, 3);
    model.backward(dlogits);
    const std::int64_t peak = memory.peak_bytes() - base;
    return std::make_pair(std::vector<float>(store.all_grads().begin(), store.all_grads().end()), peak);
  };
  auto [plain, plain_peak] = grads_and_peak(false);
  auto [ckpt, ckpt_peak] = grads_and_peak(true);
  ASSERT_EQ(plain.size(), ckpt.size());
  EXPECT_EQ(std::memcmp(plain.data(), ckpt.data(), plain.size() * sizeof(float)), 0);
  EXPECT_LT(ckpt_peak, plain_peak);
  std::printf("peak activation bytes, 4 layers, 16 x 24 tokens: %lld plain, %lld checkpointed\n",
              static_cast<long long>(plain_peak), static_cast<long long>(ckpt_peak));
}

TEST(Optimizers, SgdMomentumFollowsPyTorch) {
  ParamStore store;
  store.add("w", {2});
  store.finalize();
  store.all_data()[0] = 1.0f, store.all_data()[1] = -2.0f;
  SgdConfig c;
  c.momentum = 0.9;
  c.weight_decay = 0.1;
  Sgd opt(store, c);
  // Step 1: d = g + wd p = (0.5 + 0.1, 0.25 - 0.2); buf = d; p -= lr buf.
  store.all_grads()[0] = 0.5f, store.all_grads()[1] = 0.25f;
  opt.step(store, 0.1, 1.0f);
  EXPECT_NEAR(store.all_data()[0], 1.0 - 0.1 * 0.6, 1e-6);
  EXPECT_NEAR(store.all_data()[1], -2.0 - 0.1 * 0.05, 1e-6);
  // Step 2: buf = 0.9 buf + d.
  const double p0 = store.all_data()[0];
  opt.step(store, 0.1, 1.0f);
  EXPECT_NEAR(store.all_data()[0], p0 - 0.1 * (0.9 * 0.6 + (0.5 + 0.1 * p0)), 1e-6);
}

// Dampening scales each new gradient into the momentum buffer by
// 1 - dampening, after the first step (which takes the gradient whole).
// Expected values: torch.optim.SGD(lr=0.1, momentum=0.9, dampening=0.5,
// weight_decay=0.1), PyTorch 1.13, in float64.
TEST(Optimizers, SgdDampeningFollowsPyTorch) {
  ParamStore store;
  store.add("w", {2});
  store.finalize();
  store.all_data()[0] = 1.0f, store.all_data()[1] = -2.0f;
  SgdConfig c;
  c.momentum = 0.9, c.dampening = 0.5, c.weight_decay = 0.1;
  Sgd opt(store, c);
  const float grads[3][2] = {{0.5f, 0.25f}, {-0.3f, 0.75f}, {0.1f, -0.2f}};
  const double torch[3][2] = {{0.94, -2.005}, {0.8963, -2.036975}, {0.8474885, -2.045567625}};
  for (int s = 0; s < 3; ++s) {
    store.all_grads()[0] = grads[s][0], store.all_grads()[1] = grads[s][1];
    opt.step(store, 0.1, 1.0f);
    EXPECT_NEAR(store.all_data()[0], torch[s][0], 1e-6) << "step " << s + 1;
    EXPECT_NEAR(store.all_data()[1], torch[s][1], 1e-6) << "step " << s + 1;
  }
}

TEST(Optimizers, AdamWFirstStepMovesByLearningRate) {
  // After one step m/sqrt(v) = sign(g) (bias-corrected), so p moves by lr.
  ParamStore store;
  store.add("w", {3});
  store.finalize();
  for (float& p : store.all_data()) p = 1.0f;
  store.all_grads()[0] = 2.0f, store.all_grads()[1] = -0.001f, store.all_grads()[2] = 0.0f;
  AdamWConfig c;
  c.weight_decay = 0.0;
  AdamW opt(store, c);
  opt.step(store, 0.01, 1.0f);
  EXPECT_NEAR(store.all_data()[0], 0.99, 1e-6);
  EXPECT_NEAR(store.all_data()[1], 1.01, 1e-4);  // eps matters a little at |g| = 1e-3
  EXPECT_EQ(store.all_data()[2], 1.0f);
}

TEST(Schedules, WarmupThenDecay) {
  LrSchedule s{1.0, 0.1, 10, 110, Decay::kCosine};
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
  EXPECT_NEAR(s.lr_at(60), 0.55, 1e-12);
  EXPECT_NEAR(s.lr_at(110), 0.1, 1e-12);
  s.decay = Decay::kLinear;
  EXPECT_NEAR(s.lr_at(60), 0.55, 1e-12);
  s.decay = Decay::kInverseSqrt;
  EXPECT_NEAR(s.lr_at(39), std::sqrt(10.0) / std::sqrt(40.0), 1e-12);
  s.decay = Decay::kConstant;
  EXPECT_DOUBLE_EQ(s.lr_at(100), 1.0);
  EXPECT_THROW(parse_decay("step"), ConfigError);
}

TEST(Schedules, AContinuedRunRestartsItsDecayFromWhereItStood) {
  // 100 steps of cosine decay after 10 of warmup, continued at step 60 to 160.
  LrSchedule s{1.0, 0.1, 10, 160, Decay::kCosine};
  const double at_60 = LrSchedule{1.0, 0.1, 10, 110, Decay::kCosine}.lr_at(59);
  s.restart_step = 60, s.restart_lr = at_60;
  EXPECT_DOUBLE_EQ(s.lr_at(59), LrSchedule({1.0, 0.1, 10, 160, Decay::kCosine}).lr_at(59));  // before: as planned
  EXPECT_NEAR(s.lr_at(60), at_60, 1e-12);
  EXPECT_NEAR(s.lr_at(110), 0.1 + (at_60 - 0.1) * 0.5, 1e-12);
  EXPECT_NEAR(s.lr_at(160), 0.1, 1e-12);
  s.decay = Decay::kLinear;
  EXPECT_NEAR(s.lr_at(110), 0.1 + (at_60 - 0.1) * 0.5, 1e-12);
  // Rates that do not depend on the length ignore the restart.
  for (const Decay d : {Decay::kConstant, Decay::kInverseSqrt}) {
    LrSchedule plain{1.0, 0.1, 10, 160, d};
    s.decay = d;
    EXPECT_DOUBLE_EQ(s.lr_at(100), plain.lr_at(100));
  }
  // A restart inside the warmup: the warmup finishes and the decay spans the whole length.
  LrSchedule early{1.0, 0.1, 10, 160, Decay::kCosine};
  early.restart_step = 5, early.restart_lr = 0.5;
  for (const std::int64_t step : {5, 9, 10, 85, 160})
    EXPECT_DOUBLE_EQ(early.lr_at(step), LrSchedule({1.0, 0.1, 10, 160, Decay::kCosine}).lr_at(step)) << step;
}

TEST(Clipping, ScalesToTheMaxNorm) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_NEAR(clip_grad_norm(g, 1.0), 5.0, 1e-12);
  EXPECT_NEAR(g[0], 0.6f, 1e-6);
  EXPECT_NEAR(g[1], 0.8f, 1e-6);
  std::vector<float> small = {0.3f, 0.4f};
  clip_grad_norm(small, 1.0);
  EXPECT_EQ(small[0], 0.3f);  // under the limit: untouched
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_FLOAT_EQ(clip_coefficient(5.0, 1.0), static_cast<float>(1.0 / (5.0 + 1e-6)));
  EXPECT_THROW(clip_coefficient(5.0, 0.0), ConfigError);
}

TEST(Clipping, TheNormMatchesItsReferenceAtEveryLengthAndScale) {
  // Lengths around the vector width, the four-accumulator stride and the
  // 16 Ki chunks; values from 1e-30 to 1e30 (squares beyond float's range).
  Rng rng(7);
  for (std::size_t n : {0, 1, 7, 16, 63, 64, 65, 1000, 16383, 16384, 16385, 100003}) {
    for (double scale : {1e-30, 1.0, 1e30}) {
      std::vector<float> g(n);
      for (float& x : g) x = static_cast<float>(scale * (rng.uniform() * 2.0 - 1.0));
      const double ref = global_grad_norm_ref(g), fast = global_grad_norm(g);
      EXPECT_NEAR(fast, ref, 1e-10 * ref) << "n " << n << " scale " << scale;
    }
  }
  std::vector<float> g(70000, 1.0f);
  g[40000] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(global_grad_norm(g)));
  g[40000] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(global_grad_norm(g)));
}

TEST(Clipping, FoldedIntoTheUpdateItGivesTheBitsOfClippingFirst) {
  // The trainer hands clip_coefficient to the optimizer instead of scaling
  // the buffer: the same products, so the same parameters to the bit.
  for (const bool adamw : {true, false}) {
    auto run = [&](bool folded) {
      ParamStore store;
      store.add("w", {1000});
      store.finalize();
      Rng rng(3);
      for (float& p : store.all_data()) p = static_cast<float>(rng.uniform() - 0.5);
      std::unique_ptr<Optimizer> opt;
      if (adamw) {
        opt = std::make_unique<AdamW>(store, AdamWConfig{});
      } else {
        SgdConfig c;
        c.momentum = 0.9, c.weight_decay = 0.01;
        opt = std::make_unique<Sgd>(store, c);
      }
      for (int step = 0; step < 3; ++step) {
        for (float& g : store.all_grads()) g = static_cast<float>(3.0 * (rng.uniform() - 0.5));
        if (folded) {
          opt->step(store, 0.01, clip_coefficient(global_grad_norm(store.all_grads()), 1.0));
        } else {
          clip_grad_norm(store.all_grads(), 1.0);
          opt->step(store, 0.01, 1.0f);
        }
      }
      return std::vector<float>(store.all_data().begin(), store.all_data().end());
    };
    const auto first = run(false), folded = run(true);
    EXPECT_EQ(std::memcmp(first.data(), folded.data(), first.size() * sizeof(float)), 0) << (adamw ? "AdamW" : "SGD");
  }
}

TEST(CrossEntropy, MatchesPyTorchWithSmoothingAndIgnoreIndex) {
  // torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100, label_smoothing=0.1)
  const std::vector<double> logits = {1.0, 2.0, 0.5, -1.0, 0.0, 3.0, 0.2, 0.1, -0.3};
  const std::int64_t targets[] = {1, -100, 0};
  auto r = cross_entropy<double>(nullptr, logits.data(), targets, 3, 3, -100, 0.1);
  EXPECT_EQ(r.count, 2);
  EXPECT_NEAR(r.loss, 0.7442648865, 1e-9);
  const std::int64_t bad[] = {3, 0, 0};
  EXPECT_THROW(cross_entropy<double>(nullptr, logits.data(), bad, 3, 3), ShapeError);
  const std::int64_t all_ignored[] = {-100, -100, -100};
  EXPECT_EQ(cross_entropy<double>(nullptr, logits.data(), all_ignored, 3, 3).loss, 0.0);
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  Rng rng(8);
  auto logits = test::random_vector(4 * 5, rng);
  const std::int64_t targets[] = {0, 4, -100, 2};
  auto loss = [&] { return cross_entropy<double>(nullptr, logits.data(), targets, 4, 5, -100, 0.2).loss; };
  std::vector<double> d(logits.size());
  cross_entropy<double>(d.data(), logits.data(), targets, 4, 5, -100, 0.2);
  EXPECT_TRUE(all_close_v(d, test::numeric_grad(loss, logits), test::kFdAtol, test::kFdRtol));
}

}  // namespace
}  // namespace multihead

namespace multihead {
namespace {

// One parameter, and a "model" whose gradient we choose: the loss scaler's
// behaviour with injected overflows.
struct ScaledRun {
  ParamStore store;
  std::unique_ptr<Trainer> trainer;
  ScaledRun(std::int64_t interval, double clip = 0) {
    store.add("w", {2});
    store.finalize();
    store.all_data()[0] = store.all_data()[1] = 1.0f;
    TrainConfig t;
    t.optimizer = OptimizerKind::kSgd;
    t.schedule.base_lr = 0.1;
    t.loss_scaling = true;
    t.scaler.growth_interval = interval;
    t.clip_grad_norm = clip;
    trainer = std::make_unique<Trainer>(store, t);
  }
  // A step whose true gradient is g (or an overflow when g is inf).
  StepStats step(float g) {
    return trainer->step([&](std::int64_t, const ForwardContext&, double scale) {
      for (float& x : store.all_grads()) x += static_cast<float>(g * scale);
      return 1.0;
    });
  }
};

TEST(LossScaling, OverflowSkipsTheStepAndBacksOff) {
  ScaledRun r(3);
  StepStats s = r.step(std::numeric_limits<float>::infinity());
  EXPECT_TRUE(s.skipped);
  EXPECT_EQ(s.loss_scale, 65536.0);
  EXPECT_EQ(r.store.all_data()[0], 1.0f);                     // no update
  EXPECT_EQ(r.step(0.5f).loss_scale, 32768.0);                // backed off by half
  EXPECT_NEAR(r.store.all_data()[0], 1.0 - 0.1 * 0.5, 1e-6);  // gradients were unscaled before the step
  r.step(0.5f);
  StepStats grown = r.step(0.5f);  // the third clean step in a row
  EXPECT_EQ(grown.loss_scale, 32768.0);
  EXPECT_EQ(r.step(0.5f).loss_scale, 65536.0);  // then the scale grows
  // An overflow of the scaled gradient itself (finite true gradient): 3e38 * 65536.
  EXPECT_TRUE(r.step(3e38f).skipped);
}

TEST(LossScaling, GradientsAreUnscaledBeforeClipping) {
  ScaledRun r(2000, 1.0);
  StepStats s = r.step(0.3f);  // norm 0.3 * sqrt(2) < 1: no clipping
  EXPECT_NEAR(s.grad_norm, 0.3 * std::sqrt(2.0), 1e-6);
  EXPECT_NEAR(r.store.all_data()[0], 1.0 - 0.1 * 0.3, 1e-6);
}

TEST(LossScaling, StateTravelsInCheckpoints) {
  const std::string path = (std::filesystem::temp_directory_path() / ("scaler_" + std::to_string(::getpid()))).string();
  ScaledRun a(3);
  a.step(std::numeric_limits<float>::infinity());
  a.step(0.5f);
  a.trainer->save_checkpoint(path);
  ScaledRun b(3);
  b.trainer->load_checkpoint(path);
  EXPECT_EQ(b.step(0.5f).loss_scale, 32768.0);
  EXPECT_EQ(b.step(0.5f).loss_scale, 65536.0 / 2);
  EXPECT_EQ(b.step(0.5f).loss_scale, 65536.0);  // growth after 3 clean steps, counted across the checkpoint
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace multihead

namespace multihead {
namespace {

TEST(Training, ReportsMemoryByPart) {
  TrainRun r(tiny_train());
  StepStats s = r.step();
  const std::int64_t n = r.store.numel() * 4;
  EXPECT_EQ(s.param_bytes, n);
  EXPECT_EQ(s.grad_bytes, n);
  EXPECT_EQ(s.optimizer_bytes, 2 * n);  // AdamW: two moments
  EXPECT_GT(s.activation_peak_bytes, 0);
  EXPECT_EQ(s.peak_bytes, s.param_bytes + s.grad_bytes + s.optimizer_bytes + s.activation_peak_bytes);
  EXPECT_NE(MemoryCurve::text(s).find("activations"), std::string::npos);
}

}  // namespace
}  // namespace multihead
