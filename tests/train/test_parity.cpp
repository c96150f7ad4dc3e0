// SPDX-License-Identifier: Apache-2.0
// Training parity with PyTorch: the same tiny encoder classifier, the same
// initial weights and batches, 20 AdamW steps with warmup, cosine decay and
// clipping (scripts/gen_golden.py). The losses must agree at every step.
#include <gtest/gtest.h>

#include <filesystem>

#include "multihead/io/atomic_file.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/nn/state_dict.h"
#include "multihead/train/train_config.h"
#include "test_paths.h"
#include "test_util.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;

// Slice i of a (S, ...) tensor.
Tensor slice(const Tensor& t, std::int64_t i) {
  Shape s(t.shape().begin() + 1, t.shape().end());
  Tensor out = Tensor::empty(s, t.dtype());
  const std::size_t bytes = out.nbytes();
  std::memcpy(out.raw(), static_cast<const char*>(t.raw()) + i * bytes, bytes);
  return out;
}

TEST(TrainParity, AdamWClassifierMatchesPyTorchLossesForTwentySteps) {
  const fs::path dir = test::golden_dir() / "train" / "classifier_adamw";
  const nlohmann::json j = ConfigReader::parse(read_file((dir / "config.json").string()), "config.json");
  // The fixture's config is one flat object of the model's keys and the training's (no name is both's).
  ConfigReader r(j, "config.json");
  ModelConfig mc;
  TrainConfig tc;
  ModelConfig::keys(r, mc);
  TrainConfig::keys(r, tc);
  r.finish();
  mc.validate();
  tc.validate();

  ParamStore store;
  SequenceClassifier model(store, mc);
  store.finalize();
  load_state_dict(store, SafetensorsFile::read((dir / "init.safetensors").string()).all_tensors(), "init");
  auto opt = make_optimizer(tc, store);
  const TensorMap batches = SafetensorsFile::read((dir / "batches.safetensors").string()).all_tensors();
  const TensorMap expected = SafetensorsFile::read((dir / "expected.safetensors").string()).all_tensors();
  const Tensor& want = expected.at("losses");
  ASSERT_EQ(want.numel(), tc.steps);

  ForwardContext ctx;
  ctx.training = true;
  for (std::int64_t s = 0; s < tc.steps; ++s) {
    Tensor ids = slice(batches.at("ids"), s), pad = slice(batches.at("padding"), s);
    Tensor labels = slice(batches.at("labels"), s);
    store.zero_grad();
    ctx.step = static_cast<std::uint64_t>(s);
    Tensor logits = model.forward(ids, &pad, ctx);
    Tensor dlogits = Tensor::empty(logits.shape());
    CrossEntropyResult ce =
        cross_entropy(dlogits.f32(), logits.f32(), labels.data<std::int64_t>(), logits.dim(0), logits.dim(1));
    model.backward(dlogits);
    // Clipping folded into the update, as the trainer does it.
    opt->step(store, tc.schedule.lr_at(s), clip_coefficient(global_grad_norm(store.all_grads()), tc.clip_grad_norm));
    const double w = want.f32()[s];
    EXPECT_NEAR(ce.loss, w, 1e-4 * std::fabs(w)) << "step " << s;
  }
  // The weights after 20 steps agree too, except the key bias: softmax is
  // invariant to it, so its true gradient is 0 and what both programs
  // compute is rounding noise, which AdamW normalises into full-size steps.
  const std::int64_t d = mc.layer.d_model;
  for (auto& [name, t] : state_dict(store)) {
    Tensor want_t = expected.at(name).clone();
    if (name.ends_with("in_proj_bias"))
      for (std::int64_t i = d; i < 2 * d; ++i) t.f32()[i] = want_t.f32()[i] = 0.0f;
    EXPECT_TRUE(test::all_close(t, want_t, 1e-4, 1e-3)) << name;
  }
}

}  // namespace
}  // namespace multihead
