// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the tests: tolerance comparisons that report the largest
// difference, and central finite differences in double precision.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "multihead/core/context.h"
#include "multihead/core/error.h"
#include "multihead/core/rng.h"
#include "multihead/core/tensor.h"

namespace multihead::test {

// Every test binary's main thread runs under a context that fills
// Tensor::empty buffers with NaN, so a kernel that reads memory it never
// wrote produces NaN and fails its comparison.
inline const RuntimeContext kPoisoned{.poison_uninitialized = true};
inline const ContextBinding kPoisonUninitialized(kPoisoned);

// PyTorch-style closeness: |a - e| <= atol + rtol * |e| everywhere.
inline constexpr double kF32Atol = 1e-5;
inline constexpr double kF32Rtol = 1e-4;

template <typename A, typename E>
::testing::AssertionResult all_close(std::span<const A> actual, std::span<const E> expected, double atol, double rtol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " != expected " << expected.size();
  double worst_excess = 0.0, worst_diff = 0.0;
  std::size_t worst = 0;
  bool ok = true;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    double a = static_cast<double>(actual[i]), e = static_cast<double>(expected[i]);
    double diff = std::fabs(a - e);
    double excess = diff - (atol + rtol * std::fabs(e));
    if (!(excess <= 0.0)) {  // also catches NaN
      if (ok || excess > worst_excess || std::isnan(diff)) worst_excess = excess, worst = i, worst_diff = diff;
      ok = false;
    } else if (ok && diff > worst_diff) {
      worst_diff = diff, worst = i;
    }
  }
  if (ok) return ::testing::AssertionSuccess() << "largest difference " << worst_diff;
  return ::testing::AssertionFailure() << "largest violation at index " << worst << ": actual "
                                       << static_cast<double>(actual[worst]) << ", expected "
                                       << static_cast<double>(expected[worst]) << " (|diff| = " << worst_diff
                                       << ", atol " << atol << ", rtol " << rtol << ")";
}

// Non-template spellings, so calls fit inside EXPECT_TRUE without extra parentheses.
inline ::testing::AssertionResult all_close_v(std::span<const double> a, std::span<const double> e, double atol,
                                              double rtol) {
  return all_close<double, double>(a, e, atol, rtol);
}
inline ::testing::AssertionResult all_close_v(std::span<const float> a, std::span<const float> e, double atol,
                                              double rtol) {
  return all_close<float, float>(a, e, atol, rtol);
}

inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol = kF32Atol,
                                            double rtol = kF32Rtol) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != expected "
                                         << shape_str(expected.shape());
  return all_close(actual.span_f32(), expected.span_f32(), atol, rtol);
}

inline std::vector<double> random_vector(std::size_t n, Rng& rng, double scale = 1.0) {
  std::vector<double> v(n);
  for (double& x : v) x = scale * rng.normal();
  return v;
}

inline Tensor random_tensor(Shape shape, Rng& rng, float scale = 1.0f) {
  Tensor t(std::move(shape));
  for (float& x : t.span_f32()) x = scale * rng.normal();
  return t;
}

// Central differences of a scalar function f at x, in place over x.
inline std::vector<double> numeric_grad(const std::function<double()>& f, std::vector<double>& x, double eps = 1e-6) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    double keep = x[i];
    x[i] = keep + eps;
    double up = f();
    x[i] = keep - eps;
    double down = f();
    x[i] = keep;
    g[i] = (up - down) / (2 * eps);
  }
  return g;
}

// Module-level gradient checks run in float (the modules are float): central
// differences with a large step, so the tolerance is loose. The exact checks,
// in double, are the kernels' (tests/kernels). Checks every stride-th value.
inline void expect_float_gradients(const std::function<double()>& loss, std::span<float> values,
                                   std::span<const float> grads, std::size_t stride, const char* what,
                                   float eps = 1e-2f, double atol = 2e-3, double rtol = 1e-2) {
  for (std::size_t i = 0; i < values.size(); i += stride) {
    const float keep = values[i];
    values[i] = keep + eps;
    const double up = loss();
    values[i] = keep - eps;
    const double down = loss();
    values[i] = keep;
    EXPECT_NEAR(grads[i], (up - down) / (2 * eps), atol + rtol * std::fabs(grads[i])) << what << " " << i;
  }
}

// sum(out * g) in double: the scalar the gradient checks differentiate.
inline double dot_loss(const Tensor& out, const Tensor& g) {
  double s = 0;
  for (std::int64_t i = 0; i < out.numel(); ++i) s += double(out.f32()[i]) * g.f32()[i];
  return s;
}

// Tolerances for a double-precision finite-difference check: truncation error
// O(eps^2) and rounding O(1e-16 / eps) are both far below these.
inline constexpr double kFdAtol = 1e-7;
inline constexpr double kFdRtol = 1e-6;

// A scratch folder for each test, temp/multihead_<what>_<pid>: emptied
// before the test (and made, when `make`), removed after it.
class ScratchFolder : public ::testing::Test {
 protected:
  ScratchFolder(const std::string& what, bool make)
      : dir(std::filesystem::temp_directory_path() / ("multihead_" + what + "_" + std::to_string(::getpid()))),
        make_(make) {}
  void SetUp() override {
    std::filesystem::remove_all(dir);
    if (make_) std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::filesystem::path dir;

 private:
  bool make_;
};

// The message of the multihead error f throws, or "no error".
inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace multihead::test
