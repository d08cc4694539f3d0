// Portable scalar kernels: libm in f32 for the activations, double accumulation for the norms.
// They run on every platform and are the comparison point of the SIMD kernels' tests.
#include <cmath>

#include "kernels/approx.h"
#include "kernels/kernels.h"

namespace fflite {

namespace {

// Applies `act` element-wise, times up(u) when u is given. One loop per case so each vectorises or
// not on its own, without a branch per element.
template <typename Act, typename Up>
inline void Apply(size_t n, const float* x, const float* u, float* y, Act act, Up up) {
  if (u != nullptr) {
    for (size_t i = 0; i < n; ++i) y[i] = act(x[i]) * up(u[i]);
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = act(x[i]);
  }
}
template <typename Act>
inline void Apply(size_t n, const float* x, const float* u, float* y, Act act) {
  Apply(n, x, u, y, act, [](float v) { return v; });
}

// 1 / (1 + e^-v) in a form that neither overflows nor cancels: for v < 0 use e^v / (1 + e^v).
inline float Sigmoid(float v) {
  const float z = std::exp(-std::fabs(v));
  const float s = 1.0f / (1.0f + z);
  return v >= 0.0f ? s : z * s;
}

}  // namespace

void F32ReluScalar(size_t n, const float* x, const float* u, float* y) {
  Apply(n, x, u, y, [](float v) { return v > 0.0f ? v : 0.0f; });
}

// 0.5·x·(1 + erf(x/√2)) = x·erfc(-x/√2)/2 (no cancellation for negative x).
void F32GeluErfScalar(size_t n, const float* x, const float* u, float* y) {
  Apply(n, x, u, y, [](float v) { return 0.5f * v * std::erfc(-v * approx::kSqrtHalf); });
}

void F32GeluTanhScalar(size_t n, const float* x, const float* u, float* y) {
  Apply(n, x, u, y, [](float v) {
    return v * Sigmoid(v * (approx::kGeluTanh2C0 + approx::kGeluTanh2C1 * v * v));
  });
}

void F32SiluScalar(size_t n, const float* x, const float* u, float* y) {
  Apply(n, x, u, y, [](float v) { return v * Sigmoid(v); });
}

void F32SigmoidScalar(size_t n, const float* x, const float* u, float* y) {
  Apply(n, x, u, y, [](float v) { return Sigmoid(v); });
}

// gpt-oss's SwiGLU: c·σ(1.702·c) with c = min(gate, 7), times clamp(up, -7, 7) + 1. The
// comparisons leave a NaN as it is (as the SIMD sets do).
void F32SwigluOaiScalar(size_t n, const float* x, const float* u, float* y) {
  Apply(
      n, x, u, y,
      [](float v) {
        const float c = v > approx::kOaiLimit ? approx::kOaiLimit : v;
        return c * Sigmoid(c * approx::kOaiAlpha);
      },
      [](float v) {
        const float c = v > approx::kOaiLimit ? approx::kOaiLimit
                                              : (v < -approx::kOaiLimit ? -approx::kOaiLimit : v);
        return c + 1.0f;
      });
}

void F32LayerNormScalar(size_t d, const float* x, const float* w, const float* b, float eps,
                        float* y) {
  double mean = 0.0;
  for (size_t i = 0; i < d; ++i) mean += x[i];
  mean /= static_cast<double>(d);
  double sq = 0.0;
  for (size_t i = 0; i < d; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
  for (size_t i = 0; i < d; ++i) {
    const double v = (x[i] - mean) * inv * w[i] + (b != nullptr ? b[i] : 0.0f);
    y[i] = static_cast<float>(v);
  }
}

void F32RmsNormScalar(size_t d, const float* x, const float* w, float eps, float* y) {
  double sq = 0.0;
  for (size_t i = 0; i < d; ++i) sq += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
  for (size_t i = 0; i < d; ++i) y[i] = static_cast<float>(x[i] * inv * w[i]);
}

void F32Add(size_t n, const float* a, const float* b, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

}  // namespace fflite
