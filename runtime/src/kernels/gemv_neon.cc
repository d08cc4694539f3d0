// The few-token matrix product for NEON (aarch64, and armv7 with NEON), straight from f32/f16/bf16
// row-major weights: blocks of 4 rows, small token groups, 4-lane accumulators summed once per row.
// No software prefetch, unlike the AVX2 version: that was measured on x86 only, and the ARM
// cores' prefetchers have not been measured with this access pattern yet.
// On 32-bit ARM this file alone is compiled with -mfpu=neon (runtime/CMakeLists.txt), so it uses
// no inline function of a shared header (the linker could keep its NEON copy for every caller).
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_NEON)

#include <arm_neon.h>

#include <cstdint>

namespace fflite {

namespace {

// Rows per block: the block's rows are read once from memory while every token group passes
// over them. Tokens per group: rows × tokens accumulators + tokens x vectors + 1 weight vector
// must fit the q registers: 32 on aarch64 (4×4 + 4 + 1 = 21), 16 on armv7 (4×2 + 2 + 1 = 11;
// 4×3 + 3 + 1 would take all 16). Tokens per batch: the groups that share one pass over memory.
// Span: the columns every group of a batch computes before the next span (4 rows × 256 f32 =
// 4 KiB of weights and 12 × 1 KiB of x: in a 32 KiB L1).
constexpr int kRows = 4;
#if defined(__aarch64__)
constexpr size_t kMaxTokens = 4;
#else
constexpr size_t kMaxTokens = 2;
#endif
constexpr size_t kBatchTokens = 12;
constexpr size_t kSpan = 256;

// acc + a·b, fused where the target has FMA (aarch64, VFPv4).
inline float32x4_t Fma(float32x4_t acc, float32x4_t a, float32x4_t b) {
#if defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
  return vfmaq_f32(acc, a, b);
#else
  return vmlaq_f32(acc, a, b);
#endif
}

// The lane sums of a, b, c, d as one vector [Σa, Σb, Σc, Σd].
inline float32x4_t HorizontalSum4(float32x4_t a, float32x4_t b, float32x4_t c, float32x4_t d) {
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

// The weight formats: 4 elements to 4 f32 lanes, converted in registers.
struct F32Weights {
  using Elem = float;
  static float32x4_t Load(const float* p) { return vld1q_f32(p); }
};

#if defined(__aarch64__)
struct F16Weights {
  using Elem = uint16_t;
  static float32x4_t Load(const uint16_t* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
  }
};
#endif

// bf16 is the top half of an f32: widen each 16-bit lane to 32 bits, shifted up by 16.
struct Bf16Weights {
  using Elem = uint16_t;
  static float32x4_t Load(const uint16_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
};

// The first `rest` (1..3) elements of p, zeros in the other lanes; reads nothing past p[rest - 1].
template <typename Weights>
inline float32x4_t LoadTail(const typename Weights::Elem* p, size_t rest) {
  typename Weights::Elem tail[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < rest; ++i) tail[i] = p[i];
  return Weights::Load(tail);
}

// acc[r·T + t] += Σ_{j0 <= j < j1} w[r·k + j]·x[t·x_stride + j] for r < R, t < T, the R·T
// accumulators held in registers over the span. j0 is a multiple of 4; j1 is too unless j1 = k
// (the tail). w: [R, k]; x: [T, x_stride]; acc: [R·T] in memory between spans.
template <typename Weights, int R, int T>
inline void Accumulate(size_t k, const typename Weights::Elem* w, const float* x, size_t x_stride,
                       size_t j0, size_t j1, float32x4_t* acc_mem) {
  float32x4_t acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = acc_mem[r * T + t];
  }
  size_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    // x in registers, one weight vector at a time: R·T + T + 1 registers.
    float32x4_t xv[T];
    for (int t = 0; t < T; ++t) xv[t] = vld1q_f32(x + t * x_stride + j);
    for (int r = 0; r < R; ++r) {
      const float32x4_t wv = Weights::Load(w + r * k + j);
      for (int t = 0; t < T; ++t) acc[r][t] = Fma(acc[r][t], wv, xv[t]);
    }
  }
  if (j < j1) {
    // Copies of the last 1..3 elements (zeros in the other lanes): nothing past a row is read.
    const size_t rest = j1 - j;
    float32x4_t xv[T];
    for (int t = 0; t < T; ++t) xv[t] = LoadTail<F32Weights>(x + t * x_stride + j, rest);
    for (int r = 0; r < R; ++r) {
      const float32x4_t wv = LoadTail<Weights>(w + r * k + j, rest);
      for (int t = 0; t < T; ++t) acc[r][t] = Fma(acc[r][t], wv, xv[t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc_mem[r * T + t] = acc[r][t];
  }
}

// y[t·y_stride + r] = bias[r] + (lane sum of acc[r·T + t]) for r < R, t < T. One lane-summing
// order for every R, so that a row's result does not depend on how the caller split the rows
// (among threads); nor does it depend on the token grouping.
template <int R, int T>
inline void Finish(const float32x4_t* acc, const float* bias, float* y, size_t y_stride) {
  for (int t = 0; t < T; ++t) {
    float32x4_t s = HorizontalSum4(acc[t], acc[(R > 1 ? 1 : 0) * T + t],
                                   acc[(R > 2 ? 2 : 0) * T + t], acc[(R > 3 ? 3 : 0) * T + t]);
    if constexpr (R == 4) {
      if (bias != nullptr) s = vaddq_f32(vld1q_f32(bias), s);
      vst1q_f32(y + t * y_stride, s);
    } else {
      float sums[4];
      vst1q_f32(sums, s);
      for (int r = 0; r < R; ++r) {
        y[t * y_stride + r] = bias != nullptr ? bias[r] + sums[r] : sums[r];
      }
    }
  }
}

// R rows for every token. Tokens go in batches of up to kBatchTokens, each batch in groups of at
// most kMaxTokens split evenly (aarch64: 5 -> 3+2, 8 -> 4+4). With more than one group, k is cut
// into spans of kSpan: every group passes over a span (from L1) before the next span, so the
// weights stream from memory at a steady rate; the accumulators wait in memory between spans.
// Each accumulator sees the same sequence of multiply-adds whatever the grouping, so results do
// not depend on c either.
template <typename Weights, int R>
inline void RowBlock(size_t c, size_t k, const typename Weights::Elem* w, const float* bias,
                     const float* x, size_t x_stride, float* y, size_t y_stride) {
  for (size_t t0 = 0; t0 < c; t0 += kBatchTokens) {
    const size_t batch = c - t0 < kBatchTokens ? c - t0 : kBatchTokens;
    size_t group_size[kBatchTokens];
    size_t groups = 0;
    for (size_t t = 0; t < batch; ++groups) {
      const size_t left = batch - t;
      const size_t groups_left = (left + kMaxTokens - 1) / kMaxTokens;
      group_size[groups] = (left + groups_left - 1) / groups_left;
      t += group_size[groups];
    }
    float32x4_t acc[kBatchTokens * R];
    for (size_t i = 0; i < batch * R; ++i) acc[i] = vdupq_n_f32(0.0f);
    const size_t span = groups > 1 ? kSpan : k;
    for (size_t j0 = 0; j0 < k; j0 += span) {
      const size_t j1 = k - j0 < span ? k : j0 + span;
      size_t t = t0;
      for (size_t g = 0; g < groups; ++g) {
        const float* xt = x + t * x_stride;
        float32x4_t* at = acc + (t - t0) * R;
        switch (group_size[g]) {
          case 1: Accumulate<Weights, R, 1>(k, w, xt, x_stride, j0, j1, at); break;
#if defined(__aarch64__)
          case 2: Accumulate<Weights, R, 2>(k, w, xt, x_stride, j0, j1, at); break;
          case 3: Accumulate<Weights, R, 3>(k, w, xt, x_stride, j0, j1, at); break;
          default: Accumulate<Weights, R, 4>(k, w, xt, x_stride, j0, j1, at); break;
#else
          default: Accumulate<Weights, R, 2>(k, w, xt, x_stride, j0, j1, at); break;
#endif
        }
        t += group_size[g];
      }
    }
    size_t t = t0;
    for (size_t g = 0; g < groups; ++g) {
      const float32x4_t* at = acc + (t - t0) * R;
      float* yt = y + t * y_stride;
      switch (group_size[g]) {
        case 1: Finish<R, 1>(at, bias, yt, y_stride); break;
#if defined(__aarch64__)
        case 2: Finish<R, 2>(at, bias, yt, y_stride); break;
        case 3: Finish<R, 3>(at, bias, yt, y_stride); break;
        default: Finish<R, 4>(at, bias, yt, y_stride); break;
#else
        default: Finish<R, 2>(at, bias, yt, y_stride); break;
#endif
      }
      t += group_size[g];
    }
  }
}

template <typename Weights>
void Gemv(size_t c, size_t k, size_t rows, const void* w_bytes, const float* bias, const float* x,
          size_t x_stride, float* y, size_t y_stride) {
  using Elem = typename Weights::Elem;
  const Elem* w = static_cast<const Elem*>(w_bytes);
  size_t o = 0;
  for (; o + kRows <= rows; o += kRows) {
    RowBlock<Weights, kRows>(c, k, w + o * k, bias != nullptr ? bias + o : nullptr, x, x_stride,
                             y + o, y_stride);
  }
  const Elem* wo = w + o * k;
  const float* bo = bias != nullptr ? bias + o : nullptr;
  switch (rows - o) {
    case 1: RowBlock<Weights, 1>(c, k, wo, bo, x, x_stride, y + o, y_stride); break;
    case 2: RowBlock<Weights, 2>(c, k, wo, bo, x, x_stride, y + o, y_stride); break;
    case 3: RowBlock<Weights, 3>(c, k, wo, bo, x, x_stride, y + o, y_stride); break;
    default: break;
  }
}

}  // namespace

void F32GemvNeon(size_t c, size_t k, size_t rows, const void* w, FloatType w_type, const float* bias,
                 const float* x, size_t x_stride, float* y, size_t y_stride) {
  switch (w_type) {
    case FloatType::kF32: Gemv<F32Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride); break;
    case FloatType::kF16:
#if defined(__aarch64__)
      Gemv<F16Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride);
#else
      F32GemvScalar(c, k, rows, w, w_type, bias, x, x_stride, y, y_stride);
#endif
      break;
    case FloatType::kBF16: Gemv<Bf16Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride); break;
    default: break;  // validated by the caller: nothing else reaches a kernel
  }
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_NEON
