// Kernel tests: every vectorised kernel against its scalar version and against the double formula
// (the reference backend's), over lengths that hit the vector body and every tail.
#include "kernels/kernels.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/reference/reference_backend.h"
#include "gtest/gtest.h"
#include "testing/model_builder.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::kActivationAbsTol;
using testing::kActivationRelTol;
using testing::kNormRelTol;

constexpr Activation kActivations[] = {Activation::RELU, Activation::GELU_ERF,
                                       Activation::GELU_TANH, Activation::SILU,
                                       Activation::SIGMOID};
// Body lengths and every tail of the 8- and 4-wide loops.
constexpr size_t kLengths[] = {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1001};

// Inputs over the ranges that matter (and saturate): dense in [-12, 12], plus special points.
std::vector<float> ActivationInputs(size_t n, uint32_t seed) {
  testing::Rng rng(seed);
  std::vector<float> x = rng.Vec(n, 12.0f);
  const float special[] = {0.0f,  -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.5f,   -0.5f,  3.0f,
                           -3.0f, -9.0f, 20.0f,  -20.0f,  90.0f, -90.0f, 150.0f, -150.0f};
  for (size_t i = 0; i < n && i < sizeof(special) / sizeof(special[0]); ++i) {
    x[(i * 7) % n] = special[i];
  }
  return x;
}

bool Near(double got, double want, double rel, double abs) {
  return std::fabs(got - want) <= rel * std::fabs(want) + abs;
}

std::vector<const Kernels*> SimdKernels() {
  std::vector<const Kernels*> sets;
  for (const Kernels* k : AvailableKernels()) {
    if (k != &ScalarKernels()) sets.push_back(k);
  }
  return sets;
}

// Checks one kernel set's activation against the double formula, plain and as the GLU product,
// out of place and in place, and that it writes nothing past n.
void CheckActivation(const Kernels& k, Activation act) {
  for (size_t n : kLengths) {
    const std::vector<float> x = ActivationInputs(std::max<size_t>(n, 1), 7 + n);
    const std::vector<float> u = testing::Rng(99 + n).Vec(std::max<size_t>(n, 1), 3.0f);
    for (bool glu : {false, true}) {
      std::vector<float> y(n + 8, 12345.0f);
      k.Activation(act)(n, x.data(), glu ? u.data() : nullptr, y.data());
      for (size_t i = 0; i < n; ++i) {
        const double want = ReferenceActivation(act, x[i]) * (glu ? u[i] : 1.0);
        ASSERT_TRUE(Near(y[i], want, kActivationRelTol, kActivationAbsTol * (glu ? 3.0 : 1.0)))
            << k.isa << " " << ActivationName(act) << (glu ? " glu" : "") << " n " << n << " x "
            << x[i] << ": got " << y[i] << ", want " << want;
      }
      for (size_t i = n; i < n + 8; ++i) ASSERT_EQ(y[i], 12345.0f) << "wrote past n at " << i;
      // In place (y aliases u for the GLU product, x otherwise), as the backend calls it.
      std::vector<float> z = glu ? u : x;
      k.Activation(act)(n, glu ? x.data() : z.data(), glu ? z.data() : nullptr, z.data());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(z[i], y[i]) << "in place differs at " << i;
    }
  }
}

TEST(KernelsTest, ScalarIsAlwaysAvailableAndFirst) {
  ASSERT_FALSE(AvailableKernels().empty());
  EXPECT_EQ(AvailableKernels().front(), &ScalarKernels());
  EXPECT_EQ(&BestKernels(), AvailableKernels().back());
}

TEST(KernelsTest, ScalarActivationsMatchDoubleFormula) {
  for (Activation act : kActivations) CheckActivation(ScalarKernels(), act);
}

TEST(KernelsTest, SimdActivationsMatchDoubleFormula) {
  if (SimdKernels().empty()) GTEST_SKIP() << "no SIMD kernels for this CPU";
  for (const Kernels* k : SimdKernels()) {
    for (Activation act : kActivations) CheckActivation(*k, act);
  }
}

TEST(KernelsTest, SimdActivationsMatchScalar) {
  if (SimdKernels().empty()) GTEST_SKIP() << "no SIMD kernels for this CPU";
  const size_t n = 4099;
  const std::vector<float> x = ActivationInputs(n, 5);
  for (const Kernels* k : SimdKernels()) {
    for (Activation act : kActivations) {
      std::vector<float> want(n), got(n);
      ScalarKernels().Activation(act)(n, x.data(), nullptr, want.data());
      k->Activation(act)(n, x.data(), nullptr, got.data());
      for (size_t i = 0; i < n; ++i) {
        // Both are within the tolerance of the exact value, so within twice of each other.
        ASSERT_TRUE(Near(got[i], want[i], 2 * kActivationRelTol, 2 * kActivationAbsTol))
            << k->isa << " " << ActivationName(act) << " x " << x[i] << ": " << got[i]
            << " vs scalar " << want[i];
      }
    }
  }
}

// The double formulas of the reference backend's Norm.
std::vector<double> NormFormula(NormKind kind, const std::vector<float>& x,
                                const std::vector<float>& w, const float* b, float eps) {
  const size_t d = x.size();
  double mean = 0.0;
  if (kind == NormKind::LAYER_NORM) {
    for (float v : x) mean += v;
    mean /= static_cast<double>(d);
  }
  double sq = 0.0;
  for (float v : x) sq += (v - mean) * (v - mean);
  const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
  std::vector<double> y(d);
  for (size_t i = 0; i < d; ++i) y[i] = (x[i] - mean) * inv * w[i] + (b != nullptr ? b[i] : 0.0);
  return y;
}

void CheckNorms(const Kernels& k, const Kernels* compare_to) {
  for (size_t d : {1, 2, 7, 8, 31, 33, 61, 768, 4096}) {
    testing::Rng rng(static_cast<uint32_t>(d));
    // An offset mean (LayerNorm must subtract it accurately) and O(1) spread.
    std::vector<float> x = rng.Vec(d, 2.0f);
    for (float& v : x) v += 3.0f;
    std::vector<float> w(d), b = rng.Vec(d, 0.3f);
    for (float& v : w) v = rng.Uniform(0.5f, 1.5f);
    for (NormKind kind : {NormKind::LAYER_NORM, NormKind::RMS_NORM}) {
      for (bool bias : {false, true}) {
        if (kind == NormKind::RMS_NORM && bias) continue;
        const float eps = 1e-5f;
        std::vector<float> y(d + 8, 777.0f);
        if (kind == NormKind::LAYER_NORM) {
          k.layer_norm(d, x.data(), w.data(), bias ? b.data() : nullptr, eps, y.data());
        } else {
          k.rms_norm(d, x.data(), w.data(), eps, y.data());
        }
        const std::vector<double> want = NormFormula(kind, x, w, bias ? b.data() : nullptr, eps);
        double sq = 0.0;
        for (double v : want) sq += v * v;
        const double rms = std::sqrt(sq / static_cast<double>(d));
        for (size_t i = 0; i < d; ++i) {
          ASSERT_LE(std::fabs(y[i] - want[i]), kNormRelTol * (std::fabs(want[i]) + rms))
              << k.isa << (kind == NormKind::LAYER_NORM ? " layer_norm" : " rms_norm") << " bias "
              << bias << " d " << d << " i " << i;
        }
        for (size_t i = d; i < d + 8; ++i) ASSERT_EQ(y[i], 777.0f) << "wrote past d";
        if (compare_to != nullptr) {
          std::vector<float> z(d);
          if (kind == NormKind::LAYER_NORM) {
            compare_to->layer_norm(d, x.data(), w.data(), bias ? b.data() : nullptr, eps, z.data());
          } else {
            compare_to->rms_norm(d, x.data(), w.data(), eps, z.data());
          }
          for (size_t i = 0; i < d; ++i) {
            ASSERT_LE(std::fabs(y[i] - z[i]), 2 * kNormRelTol * (std::fabs(z[i]) + rms))
                << k.isa << " vs scalar, d " << d << " i " << i;
          }
        }
        // In place, as the backend may call it.
        std::vector<float> in_place = x;
        if (kind == NormKind::LAYER_NORM) {
          k.layer_norm(d, in_place.data(), w.data(), bias ? b.data() : nullptr, eps,
                       in_place.data());
        } else {
          k.rms_norm(d, in_place.data(), w.data(), eps, in_place.data());
        }
        for (size_t i = 0; i < d; ++i) ASSERT_EQ(in_place[i], y[i]) << "in place, i " << i;
      }
    }
  }
}

TEST(KernelsTest, ScalarNormsMatchDoubleFormula) { CheckNorms(ScalarKernels(), nullptr); }

TEST(KernelsTest, SimdNormsMatchDoubleFormulaAndScalar) {
  if (SimdKernels().empty()) GTEST_SKIP() << "no SIMD kernels for this CPU";
  for (const Kernels* k : SimdKernels()) CheckNorms(*k, &ScalarKernels());
}

TEST(KernelsTest, AddIsElementwise) {
  const std::vector<float> a = {1, 2, 3, 4, 5}, b = {10, 20, 30, 40, 50};
  std::vector<float> y(5);
  F32Add(5, a.data(), b.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{11, 22, 33, 44, 55}));
}

}  // namespace
}  // namespace fflite
