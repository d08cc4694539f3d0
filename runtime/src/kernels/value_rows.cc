// The down projection from value rows in portable C++ (value_rows_impl.inc with one lane).
#include <cstddef>
#include <cstdint>

#include "base/half.h"
#include "kernels/kernels.h"

#define FFLITE_VR_TARGET
#define FFLITE_VR_NS value_rows_scalar
#include "kernels/value_rows_impl.inc"

namespace fflite {

namespace {

struct Simd {
  using V = float;
  static constexpr size_t kLanes = 1;
  static float Load(const float* p) { return *p; }
  static void Store(float* p, float v) { *p = v; }
  static float Set1(float v) { return v; }
  static float Fma(float acc, float a, float b) { return __builtin_fmaf(a, b, acc); }
};
struct F32Weights {
  using Elem = float;
  static constexpr FloatType kType = FloatType::kF32;
  static float Load(const float* p) { return *p; }
  static float ToF32(float v) { return v; }
};
struct F16Weights {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kF16;
  static float Load(const uint16_t* p) { return F16ToF32(*p); }
  static float ToF32(uint16_t v) { return F16ToF32(v); }
};
struct Bf16Weights {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kBF16;
  static float Load(const uint16_t* p) { return Bf16ToF32(*p); }
  static float ToF32(uint16_t v) { return Bf16ToF32(v); }
};

}  // namespace

void F32ValueRowsScalar(size_t c, size_t cols, size_t n, const uint32_t* rows, const void* v,
                        FloatType v_type, size_t v_stride, const float* bias, const float* h,
                        size_t h_stride, float* y, size_t y_stride) {
  using value_rows_scalar::ValueRows;
  switch (v_type) {
    case FloatType::kF32:
      ValueRows<Simd, F32Weights>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y, y_stride);
      break;
    case FloatType::kF16:
      ValueRows<Simd, F16Weights>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y, y_stride);
      break;
    case FloatType::kBF16:
      ValueRows<Simd, Bf16Weights>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y, y_stride);
      break;
    default:
      break;  // validated by the loader: only float value rows exist
  }
}

}  // namespace fflite
