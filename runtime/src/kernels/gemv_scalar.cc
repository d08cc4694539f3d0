// The few-token matrix product in portable C++: f32 accumulation, weights converted one element at
// a time. Every platform runs it; it is the fallback where no SIMD set is available.
#include <cstdint>

#include "base/half.h"
#include "kernels/kernels.h"

namespace fflite {

namespace {

// The weight formats: the stored element type and its conversion.
struct F32Weights {
  using Elem = float;
  static float ToF32(float v) { return v; }
};
struct F16Weights {
  using Elem = uint16_t;
  static float ToF32(uint16_t v) { return F16ToF32(v); }
};
struct Bf16Weights {
  using Elem = uint16_t;
  static float ToF32(uint16_t v) { return Bf16ToF32(v); }
};

// Up to 4 tokens per pass over a row: each weight is converted once per pass, and the 4 sums are
// independent chains.
constexpr size_t kTokens = 4;

template <typename Weights, typename Elem = typename Weights::Elem>
void Gemv(size_t c, size_t k, size_t rows, const void* w_bytes, const float* bias, const float* x,
          size_t x_stride, float* y, size_t y_stride) {
  const Elem* w = static_cast<const Elem*>(w_bytes);
  for (size_t o = 0; o < rows; ++o) {
    const Elem* row = w + o * k;
    for (size_t t0 = 0; t0 < c; t0 += kTokens) {
      const size_t n = c - t0 < kTokens ? c - t0 : kTokens;
      const float* xt = x + t0 * x_stride;
      float s[kTokens] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (size_t j = 0; j < k; ++j) {
        const float wj = Weights::ToF32(row[j]);
        for (size_t t = 0; t < n; ++t) s[t] += wj * xt[t * x_stride + j];
      }
      for (size_t t = 0; t < n; ++t) {
        y[(t0 + t) * y_stride + o] = bias != nullptr ? bias[o] + s[t] : s[t];
      }
    }
  }
}

}  // namespace

void F32GemvScalar(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                   const float* bias, const float* x, size_t x_stride, float* y, size_t y_stride) {
  switch (w_type) {
    case FloatType::kF32:
      Gemv<F32Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    case FloatType::kF16:
      Gemv<F16Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    case FloatType::kBF16:
      Gemv<Bf16Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    default:
      break;  // validated by the caller: nothing else reaches a kernel
  }
}

}  // namespace fflite
