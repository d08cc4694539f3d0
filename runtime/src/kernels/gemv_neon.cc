// The few-token matrix product for NEON (aarch64, and armv7 with NEON), straight from f32/f16/bf16
// row-major weights: gemv_impl.inc (read its comments first) over 4-lane vectors, blocks of 4
// rows and small token groups. No software prefetch, unlike the x86 kernels: that was measured on
// x86 only, and the ARM cores' prefetchers have not been measured with this access pattern yet.
// On 32-bit ARM this file alone is compiled with -mfpu=neon (runtime/CMakeLists.txt), so it uses
// no inline function of a shared header (the linker could keep its NEON copy for every caller).
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_NEON)

#include <arm_neon.h>

#include <cstdint>

#define FFLITE_GEMV_TARGET
#define FFLITE_GEMV_NS gemv_neon
#include "kernels/gemv_impl.inc"

namespace fflite {

namespace {

// The first `rest` (1..3) elements of p, zeros in the other lanes; reads nothing past p[rest - 1].
template <typename Elem, typename Load>
inline float32x4_t LoadTailOf(const Elem* p, size_t rest, Load load) {
  Elem tail[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < rest; ++i) tail[i] = p[i];
  return load(tail);
}

// Tokens per group: rows × tokens accumulators + tokens x vectors + 1 weight vector must fit the
// q registers: 32 on aarch64 (4×4 + 4 + 1 = 21), 16 on armv7 (4×2 + 2 + 1 = 11; 4×3 + 3 + 1
// would take all 16). Tokens per batch: the groups that share one pass over memory. Span: the
// columns every group of a batch computes before the next span (4 rows × 256 f32 = 4 KiB of
// weights and 12 × 1 KiB of x: in a 32 KiB L1).
struct Neon {
  using V = float32x4_t;
  using V4 = float32x4_t;
  using Tail = size_t;
  static constexpr size_t kLanes = 4;
#if defined(__aarch64__)
  static constexpr size_t kMaxTokens = 4;
#else
  static constexpr size_t kMaxTokens = 2;
#endif
  static constexpr size_t kBatchTokens = 12;
  static constexpr size_t kSpan = 256;
  static constexpr gemv_neon::PrefetchKind kPrefetch = gemv_neon::kNone;
  static V Zero() { return vdupq_n_f32(0.0f); }
  static V LoadX(const float* p) { return vld1q_f32(p); }
  // acc + w·x, fused where the target has FMA (aarch64, VFPv4).
  static V Fma(V acc, V w, V x) {
#if defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
    return vfmaq_f32(acc, w, x);
#else
    return vmlaq_f32(acc, w, x);
#endif
  }
  static Tail MakeTail(size_t rest) { return rest; }
  static V LoadXTail(const float* p, size_t rest, Tail) {
    return LoadTailOf(p, rest, [](const float* q) { return vld1q_f32(q); });
  }
  // The lane sums of a, b, c, d as one vector [Σa, Σb, Σc, Σd].
  static V4 Sum4(V a, V b, V c, V d) {
#if defined(__aarch64__)
    return vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d));
#else
    const float32x2_t ab = vpadd_f32(vadd_f32(vget_low_f32(a), vget_high_f32(a)),
                                     vadd_f32(vget_low_f32(b), vget_high_f32(b)));
    const float32x2_t cd = vpadd_f32(vadd_f32(vget_low_f32(c), vget_high_f32(c)),
                                     vadd_f32(vget_low_f32(d), vget_high_f32(d)));
    return vcombine_f32(ab, cd);
#endif
  }
  static V4 Load4(const float* p) { return vld1q_f32(p); }
  static V4 Add4(V4 a, V4 b) { return vaddq_f32(a, b); }
  static void Store4(float* p, V4 v) { vst1q_f32(p, v); }
  static void Prefetch(uintptr_t) {}
  static size_t MaxTokens(size_t /*x_stride*/) { return kMaxTokens; }
};

// The weight formats: 4 elements to 4 f32 lanes, converted in registers.
struct F32Weights {
  using Elem = float;
  static constexpr FloatType kType = FloatType::kF32;
  static float32x4_t Load(const float* p) { return vld1q_f32(p); }
  static float32x4_t LoadTail(const float* p, size_t rest, size_t) {
    return LoadTailOf(p, rest, Load);
  }
};

#if defined(__aarch64__)
struct F16Weights {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kF16;
  static float32x4_t Load(const uint16_t* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
  }
  static float32x4_t LoadTail(const uint16_t* p, size_t rest, size_t) {
    return LoadTailOf(p, rest, Load);
  }
};
#endif

// bf16 is the top half of an f32: widen each 16-bit lane to 32 bits, shifted up by 16.
struct Bf16Weights {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kBF16;
  static float32x4_t Load(const uint16_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
  static float32x4_t LoadTail(const uint16_t* p, size_t rest, size_t) {
    return LoadTailOf(p, rest, Load);
  }
};

}  // namespace

void F32GemvNeon(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                 const float* bias, const float* x, size_t x_stride, float* y, size_t y_stride) {
  using gemv_neon::Gemv;
  switch (w_type) {
    case FloatType::kF32:
      Gemv<Neon, F32Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    case FloatType::kF16:
#if defined(__aarch64__)
      Gemv<Neon, F16Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride);
#else
      F32GemvScalar(c, k, rows, w, w_type, bias, x, x_stride, y, y_stride);
#endif
      break;
    case FloatType::kBF16:
      Gemv<Neon, Bf16Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
  }
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_NEON
