// SPDX-License-Identifier: Apache-2.0
// Starting from other weights (train/initial_weights.h): a state_dict that
// PyTorch initialised and saved (scripts/gen_golden.py) gives PyTorch's loss
// and gradients at the first step; tensors are matched by name, and a
// missing, unexpected or misshapen one is refused by name with both shapes,
// before any weight is copied, unless the skip pattern names it.
#include <gtest/gtest.h>

#include <filesystem>

#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/nn/models.h"
#include "multihead/nn/state_dict.h"
#include "multihead/train/initial_weights.h"
#include "test_paths.h"
#include "test_util.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;

fs::path fixture() { return test::golden_dir() / "train" / "pytorch_init"; }

ModelConfig fixture_model() {
  const nlohmann::json j = ConfigReader::parse(read_file((fixture() / "config.json").string()), "config.json");
  ConfigReader r(j, "config.json");
  ModelConfig mc;
  ModelConfig::keys(r, mc);
  r.finish();
  return mc;
}

TEST(InitialWeights, APyTorchStateDictGivesPyTorchsFirstStepLossAndGradients) {
  const ModelConfig mc = fixture_model();
  ParamStore store;
  SequenceClassifier model(store, mc);
  store.finalize();
  Rng rng(3);
  model.init(rng);  // replaced below, every parameter
  const InitialWeights w = read_initial_weights((fixture() / "state_dict.safetensors").string());
  EXPECT_EQ(w.sha256, sha256_hex(read_file(w.file)));
  EXPECT_TRUE(apply_initial_weights(store, w, "").empty());
  for (const auto& [name, t] : state_dict(store)) EXPECT_TRUE(test::all_close(t, w.tensors.at(name), 0, 0)) << name;

  const TensorMap batch = SafetensorsFile::read((fixture() / "batch.safetensors").string()).all_tensors();
  const TensorMap expected = SafetensorsFile::read((fixture() / "expected.safetensors").string()).all_tensors();
  ForwardContext ctx;
  ctx.training = true;
  store.zero_grad();
  const Tensor logits = model.forward(batch.at("ids"), &batch.at("padding"), ctx);
  Tensor dlogits = Tensor::empty(logits.shape());
  const CrossEntropyResult ce =
      cross_entropy(dlogits.f32(), logits.f32(), batch.at("labels").data<std::int64_t>(), logits.dim(0), logits.dim(1));
  model.backward(dlogits);
  const double want = expected.at("loss").f32()[0];
  EXPECT_NEAR(ce.loss, want, 1e-5 * std::fabs(want));
  for (const ParamStore::Entry& e : store.entries()) {
    Tensor grad = Tensor::empty(e.shape);
    std::copy(store.all_grads().data() + e.offset, store.all_grads().data() + e.offset + e.numel, grad.f32());
    // The key bias's true gradient is 0 (softmax ignores it): both programs give rounding noise there.
    if (e.name.ends_with("in_proj_bias"))
      for (std::int64_t i = mc.layer.d_model; i < 2 * mc.layer.d_model; ++i) grad.f32()[i] = 0;
    Tensor want_grad = expected.at(e.name).clone();
    if (e.name.ends_with("in_proj_bias"))
      for (std::int64_t i = mc.layer.d_model; i < 2 * mc.layer.d_model; ++i) want_grad.f32()[i] = 0;
    EXPECT_TRUE(test::all_close(grad, want_grad, 1e-4, 1e-6)) << e.name;
  }
}

// A message of the ConfigError that f throws.
template <typename F>
std::string refusal(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(InitialWeights, TensorsAreMatchedByNameAndRefusedWholeUnlessSkipped) {
  ModelConfig mc = fixture_model();
  mc.num_classes = 5;  // a new head for other labels
  ParamStore store;
  SequenceClassifier model(store, mc);
  store.finalize();
  Rng rng(3);
  model.init(rng);
  const TensorMap before = state_dict(store);
  const InitialWeights w = read_initial_weights((fixture() / "state_dict.safetensors").string());
  const std::string file = w.file;

  EXPECT_EQ(
      refusal([&] { apply_initial_weights(store, w, ""); }),
      file +
          ": 'classifier.weight' has shape (3, 16), the model's has (5, 16) (skip it with --init-skip to train it "
          "afresh)");
  for (const auto& [name, t] : state_dict(store)) EXPECT_TRUE(test::all_close(t, before.at(name), 0, 0)) << name;

  InitialWeights missing{"m.safetensors", "", {}, "", ""};
  for (const auto& [name, t] : w.tensors)
    if (name != "encoder.norm.weight") missing.tensors.emplace(name, t.clone());
  EXPECT_EQ(refusal([&] { apply_initial_weights(store, missing, "^classifier\\."); }),
            "m.safetensors has no tensor 'encoder.norm.weight' of shape (16,) that the model has (skip it with "
            "--init-skip to keep its initialisation)");
  InitialWeights extra{"x.safetensors", "", {}, "", ""};
  for (const auto& [name, t] : w.tensors) extra.tensors.emplace(name, t.clone());
  extra.tensors.emplace("decoder.head.weight", Tensor::zeros({2, 3}));
  EXPECT_EQ(refusal([&] { apply_initial_weights(store, extra, "^classifier\\."); }),
            "x.safetensors: 'decoder.head.weight' of shape (2, 3) is no parameter of the model");
  EXPECT_NE(refusal([&] { apply_initial_weights(store, w, "(["); }).find("init_skip '([' is not a regular expression"),
            std::string::npos);

  // Skipping the head: it keeps its initialisation, everything else is PyTorch's.
  const std::vector<std::string> kept = apply_initial_weights(store, w, "^classifier\\.");
  EXPECT_EQ(kept, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  for (const auto& [name, t] : state_dict(store))
    EXPECT_TRUE(test::all_close(t, name.starts_with("classifier.") ? before.at(name) : w.tensors.at(name), 0, 0))
        << name;
}

TEST(InitialWeights, Sha256IsTheStandardDigest) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(InitialWeights, APathThatIsNeitherARunNorAFileIsRefused) {
  try {
    read_initial_weights("/nonexistent/weights.safetensors");
    ADD_FAILURE() << "accepted";
  } catch (const IoError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/weights.safetensors: no run directory or safetensors file there");
  }
}

}  // namespace
}  // namespace multihead
