// The down projection from value rows for NEON (4 lanes): value_rows_impl.inc over NEON.
// f32 and bf16 everywhere; f16 on aarch64 (armv7 NEON has no half conversion without
// -mfpu=neon-fp16: there it runs the scalar kernel).
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_NEON)

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#include "base/half.h"

#define FFLITE_VR_TARGET
#define FFLITE_VR_NS value_rows_neon
#include "kernels/value_rows_impl.inc"

namespace fflite {

namespace {

struct Neon {
  using V = float32x4_t;
  static constexpr size_t kLanes = 4;
  static float32x4_t Load(const float* p) { return vld1q_f32(p); }
  static void Store(float* p, float32x4_t v) { vst1q_f32(p, v); }
  static float32x4_t Set1(float v) { return vdupq_n_f32(v); }
  static float32x4_t Fma(float32x4_t acc, float32x4_t a, float32x4_t b) {
#if defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
    return vfmaq_f32(acc, a, b);
#else
    return vmlaq_f32(acc, a, b);
#endif
  }
};
struct NeonF32 {
  using Elem = float;
  static constexpr FloatType kType = FloatType::kF32;
  static float32x4_t Load(const float* p) { return vld1q_f32(p); }
  static float ToF32(float v) { return v; }
};
#if defined(__aarch64__)
struct NeonF16 {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kF16;
  static float32x4_t Load(const uint16_t* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
  }
  static float ToF32(uint16_t v) { return F16ToF32(v); }
};
#endif
struct NeonBf16 {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kBF16;
  static float32x4_t Load(const uint16_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
  static float ToF32(uint16_t v) { return Bf16ToF32(v); }
};

}  // namespace

void F32ValueRowsNeon(size_t c, size_t cols, size_t n, const uint32_t* rows, const void* v,
                      FloatType v_type, size_t v_stride, const float* bias, const float* h,
                      size_t h_stride, float* y, size_t y_stride) {
  using value_rows_neon::ValueRows;
  switch (v_type) {
    case FloatType::kF32:
      ValueRows<Neon, NeonF32>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y, y_stride);
      break;
    case FloatType::kF16:
#if defined(__aarch64__)
      ValueRows<Neon, NeonF16>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y, y_stride);
#else
      F32ValueRowsScalar(c, cols, n, rows, v, v_type, v_stride, bias, h, h_stride, y, y_stride);
#endif
      break;
    case FloatType::kBF16:
      ValueRows<Neon, NeonBf16>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y, y_stride);
      break;
    default:
      break;
  }
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_NEON
