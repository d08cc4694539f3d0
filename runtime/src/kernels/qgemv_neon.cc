// The float-activation product over quantised panels (kernels/quant_types.h) for NEON (aarch64,
// and armv7 with NEON): four q registers of 4 lanes hold the 16 rows of a panel, the weights
// dequantised in registers and read once per call for up to 2 tokens (aarch64; 1 on armv7).
//
// Each quarter (16 bytes) of a 64-byte group is 4 rows × 4 consecutive k (I8) or 4 rows × 2 × 4 k
// (I4): for each byte position i, a shift pair sign-extends byte i (I4: each nibble) of every
// 32-bit lane, and the conversion makes 4 f32 weights for one k, multiplied by that k's activation
// (a lane of the group's activation vector). Each block's products sum into one partial sum per
// quarter and token, scaled by the block's f16 scales into the panel accumulators. Every token
// sees the same operations whatever c, and every panel whatever the rows of the call, so results
// do not depend on c nor on how the rows are split among threads.
// The driver (panels, token groups, spans) is qgemv_impl.inc's; this file is its NEON policy. No
// software prefetch, as in gemv_neon.cc: the panels are one forward stream (and a slow one of
// scales), and the ARM cores' prefetchers have not been measured with it; no one-token passes
// (not measured on ARM either).
// On 32-bit ARM this file alone is compiled with -mfpu=neon (runtime/CMakeLists.txt), so it calls
// no inline function of a shared header (the linker could keep its NEON copy for every caller):
// hence its own f16 conversion below.
#include "kernels/quant_kernels.h"
#include "kernels/quant_prefetch.h"

#if defined(FFLITE_QGEMV_NEON)

#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/quant_types.h"
#include "kernels/quant_unpack_neon.h"

#define FFLITE_QGEMV_TARGET
#define FFLITE_QGEMV_NS qgemv_neon
#include "kernels/qgemv_impl.inc"

namespace fflite {

namespace {

// acc + a · b[I], fused where the target has FMA (aarch64, VFPv4).
template <int I>
inline float32x4_t FmaLane(float32x4_t acc, float32x4_t a, float32x4_t b) {
#if defined(__aarch64__)
  return vfmaq_laneq_f32(acc, a, b, I);
#elif defined(__ARM_FEATURE_FMA)
  return vfmaq_f32(acc, a, vdupq_n_f32(vgetq_lane_f32(b, I)));
#else
  return vmlaq_n_f32(acc, a, vgetq_lane_f32(b, I));
#endif
}

// Byte I (0..3) of each 32-bit lane of v, sign-extended, as f32 (exact).
template <int I>
inline float32x4_t ByteAsFloat(int32x4_t v) {
  if constexpr (I == 3) {
    return vcvtq_f32_s32(vshrq_n_s32(v, 24));
  } else {
    return vcvtq_f32_s32(vshrq_n_s32(vshlq_n_s32(v, 24 - 8 * I), 24));
  }
}

// The low (kHigh false) or high nibble of byte I of each 32-bit lane of v, where v holds the
// stored bytes XOR 0x88 (each nibble then is q in 4-bit two's complement), sign-extended, as f32.
template <int I, bool kHigh>
inline float32x4_t NibbleAsFloat(int32x4_t v) {
  constexpr int kShift = (kHigh ? 24 : 28) - 8 * I;
  if constexpr (kShift == 0) {
    return vcvtq_f32_s32(vshrq_n_s32(v, 28));
  } else {
    return vcvtq_f32_s32(vshrq_n_s32(vshlq_n_s32(v, kShift), 28));
  }
}

#if !defined(__aarch64__)
// An f16 bit pattern as f32 (exact): base/half.h's F16ToF32, repeated here (see the top).
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else {
    // Zero or subnormal: mant · 2^-24, exact in f32.
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign != 0 ? -v : v;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
#endif

// The 16 scales of one block, as f32.
inline void LoadScales(const uint8_t* p, float32x4_t* scale) {
#if defined(__aarch64__)
  for (int m = 0; m < 4; ++m) {
    scale[m] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p) +
                                                           4 * m)));
  }
#else
  // No f16 conversion in 32-bit NEON without -mfpu=neon-fp16: 16 scalar ones per block.
  float s[kQuantPanelRows];
  for (size_t r = 0; r < kQuantPanelRows; ++r) {
    uint16_t h;
    std::memcpy(&h, p + 2 * r, 2);
    s[r] = HalfToFloat(h);
  }
  for (int m = 0; m < 4; ++m) scale[m] = vld1q_f32(s + 4 * m);
#endif
}

// part[t][m] += Σ_{i<4} f_i · x[t][j0 + i] for the T tokens of a group, quarter m: f_i is byte
// (I8) or nibble (I4) i of v.
template <int T, typename Q, bool kHigh>
inline void Quarter(int32x4_t v, const float* const* xb, size_t j0, int m,
                    float32x4_t (*part)[4]) {
  float32x4_t xv[T];
  for (int t = 0; t < T; ++t) xv[t] = vld1q_f32(xb[t] + j0);
  float32x4_t f[4];
  if constexpr (Q::kBits == 8) {
    f[0] = ByteAsFloat<0>(v);
    f[1] = ByteAsFloat<1>(v);
    f[2] = ByteAsFloat<2>(v);
    f[3] = ByteAsFloat<3>(v);
  } else {
    f[0] = NibbleAsFloat<0, kHigh>(v);
    f[1] = NibbleAsFloat<1, kHigh>(v);
    f[2] = NibbleAsFloat<2, kHigh>(v);
    f[3] = NibbleAsFloat<3, kHigh>(v);
  }
  for (int t = 0; t < T; ++t) {
    part[t][m] = FmaLane<0>(part[t][m], f[0], xv[t]);
    part[t][m] = FmaLane<1>(part[t][m], f[1], xv[t]);
    part[t][m] = FmaLane<2>(part[t][m], f[2], xv[t]);
    part[t][m] = FmaLane<3>(part[t][m], f[3], xv[t]);
  }
}

// part[t][m] = Σ_j q[4m + r][j] · x[t][j] over the 32 k of one block (lane r), T tokens.
// xb[t]: the block's 32 activations of token t.
// I8 (and Q6K's int8 values): groups [G0, G1) only (Q6K: 0-3 and 4-7, the block's halves).
template <int T, typename Q, size_t G0 = 0, size_t G1 = 8>
inline void BlockSums(const uint8_t* blk, const float* const* xb, float32x4_t (*part)[4]) {
  if constexpr (Q::kBits != 4) {
    // Whole: the body of a block is straight-line code (a loop left here costs its branch and
    // counter per group; the performance model, scripts/arm_model.py, refuses such bodies).
    #pragma GCC unroll 8
    for (size_t g = G0; g < G1; ++g) {
      for (int m = 0; m < 4; ++m) {
        // Q6KP, Q5KP, IQ4X: decoded into Q6K's / Q5K's int8 values.
        const int32x4_t v =
            vreinterpretq_s32_u8(LoadGroupQ<Q>(blk, static_cast<int>(g), 16 * m));
        Quarter<T, Q, false>(v, xb, 4 * g, m, part);
      }
    }
  } else {
    const uint8x16_t flip = vdupq_n_u8(0x88);
    // Chunk c: low nibbles are group c (k = 4c + i), high nibbles group c + 4 (k = 16 + 4c + i).
    #pragma GCC unroll 8
    for (size_t c = 0; c < 4; ++c) {
      for (int m = 0; m < 4; ++m) {
        const int32x4_t v =
            vreinterpretq_s32_u8(veorq_u8(vld1q_u8(blk + 64 * c + 16 * m), flip));
        Quarter<T, Q, false>(v, xb, 4 * c, m, part);
        Quarter<T, Q, true>(v, xb, 16 + 4 * c, m, part);
      }
    }
  }
}

// Tokens per group: tokens × 4 partial sums + tokens × 4 panel accumulators + the loaded, shifted
// and converted vectors and the activations fit the q registers: 32 on aarch64 (2 tokens: 16 +
// about 8), 16 on armv7 (1 token: 8 + about 6). Tokens per batch: the groups that share one pass
// over memory; with more than one group a panel goes in spans of kSpanBlocks blocks, each done by
// every group in turn (from L1) before the next.
struct Neon {
#if defined(__aarch64__)
  static constexpr int kMaxTokens = 2;
#else
  static constexpr int kMaxTokens = 1;
#endif
  static constexpr size_t kBatchTokens = 8;
  static constexpr size_t kSpanBlocks = 8;
  static constexpr bool kPrefetch = false;
  static constexpr bool kOneTokenPasses = false;
  // The panel's 16 rows: rows 4m..4m + 3 in v[m].
  struct Acc {
    float32x4_t v[4];
  };
  static Acc Zero() {
    Acc a;
    for (int m = 0; m < 4; ++m) a.v[m] = vdupq_n_f32(0.0f);
    return a;
  }

  template <typename Q>
  static constexpr size_t DecodedBytes() {
    return 0;
  }
  template <typename Q>
  static void DecodeBlock(const uint8_t* /*blk*/, uint8_t* /*out*/) {}

  template <int T, typename Q>
  static void AddBlock(const uint8_t* blk, const float* const* xb, const uint8_t* scales,
                       const uint8_t* super, Acc* acc) {
    float32x4_t part[T][4];
    for (int t = 0; t < T; ++t) {
      for (int m = 0; m < 4; ++m) part[t][m] = vdupq_n_f32(0.0f);
    }
    float32x4_t scale[4];
    if constexpr (Q::kScheme == QuantType::kQ6K) {
      // Each half's sums times its scales d·sc (exact).
      float32x4_t hi[T][4], d[4];
      for (int t = 0; t < T; ++t) {
        for (int m = 0; m < 4; ++m) hi[t][m] = vdupq_n_f32(0.0f);
      }
      BlockSums<T, Q, 0, 4>(blk, xb, part);
      BlockSums<T, Q, 4, 8>(blk, xb, hi);
      LoadScales(super, d);
      int8x16_t sc_lo, sc_hi;
      if constexpr (Q::kType == QuantType::kQ3KP) {  // its packed 6-bit codes
        int8x16_t q3[2];
        Q3KScalePair(scales, q3);
        sc_lo = q3[0];
        sc_hi = q3[1];
      } else {
        sc_lo = vld1q_s8(reinterpret_cast<const int8_t*>(scales));
        sc_hi = vld1q_s8(reinterpret_cast<const int8_t*>(scales + kQuantPanelRows));
      }
      if constexpr (Q::kScaleMask != 0xff) {  // Q2KP: the mins in the high nibbles
        sc_lo = vandq_s8(sc_lo, vdupq_n_s8(static_cast<int8_t>(Q::kScaleMask)));
        sc_hi = vandq_s8(sc_hi, vdupq_n_s8(static_cast<int8_t>(Q::kScaleMask)));
      }
      float32x4_t s_lo[4], s_hi[4];
      for (int half = 0; half < 2; ++half) {
        const int8x16_t sc = half == 0 ? sc_lo : sc_hi;
        const int16x8_t s16[2] = {vmovl_s8(vget_low_s8(sc)), vmovl_s8(vget_high_s8(sc))};
        for (int m = 0; m < 4; ++m) {
          const int16x4_t s4 = m % 2 == 0 ? vget_low_s16(s16[m / 2]) : vget_high_s16(s16[m / 2]);
          (half == 0 ? s_lo : s_hi)[m] = vmulq_f32(d[m], vcvtq_f32_s32(vmovl_s16(s4)));
        }
      }
      for (int t = 0; t < T; ++t) {
        for (int m = 0; m < 4; ++m) {
          acc[t].v[m] = vaddq_f32(acc[t].v[m], vmulq_f32(part[t][m], s_lo[m]));
          acc[t].v[m] = vaddq_f32(acc[t].v[m], vmulq_f32(hi[t][m], s_hi[m]));
        }
      }
      return;
    }
    BlockSums<T, Q>(blk, xb, part);
    if constexpr (HasMin<Q>()) {
      // Q4K, Q5K: s = d·sc (exact) and offset = o·s - dmin·m (one rounding; o = kMinOffset):
      // Σ W·x = s·Σ(n - o)·x + offset·Σx, with the Q4 sums of n - 8 (Q4K: the same nibbles) or
      // the Q8 sums of n - 16 (Q5K: its int8 values).
      float32x4_t d[4], dmin[4], offset[4];
      LoadScales(super, d);
      LoadScales(super + 2 * kQuantPanelRows, dmin);
      const uint8x16_t sc = vld1q_u8(scales), mins = vld1q_u8(scales + kQuantPanelRows);
      const uint16x8_t sc16[2] = {vmovl_u8(vget_low_u8(sc)), vmovl_u8(vget_high_u8(sc))};
      const uint16x8_t m16[2] = {vmovl_u8(vget_low_u8(mins)), vmovl_u8(vget_high_u8(mins))};
      for (int m = 0; m < 4; ++m) {
        const uint16x4_t s4 = m % 2 == 0 ? vget_low_u16(sc16[m / 2]) : vget_high_u16(sc16[m / 2]);
        const uint16x4_t m4 = m % 2 == 0 ? vget_low_u16(m16[m / 2]) : vget_high_u16(m16[m / 2]);
        scale[m] = vmulq_f32(d[m], vcvtq_f32_u32(vmovl_u16(s4)));
        offset[m] = vsubq_f32(vmulq_n_f32(scale[m], static_cast<float>(Q::kMinOffset)),
                              vmulq_f32(dmin[m], vcvtq_f32_u32(vmovl_u16(m4))));
      }
      for (int t = 0; t < T; ++t) {
        float32x4_t sx = vld1q_f32(xb[t]);
        for (int i = 1; i < 8; ++i) sx = vaddq_f32(sx, vld1q_f32(xb[t] + 4 * i));
        const float32x2_t h = vadd_f32(vget_low_f32(sx), vget_high_f32(sx));
        const float sum_x = vget_lane_f32(vpadd_f32(h, h), 0);
        for (int m = 0; m < 4; ++m) part[t][m] = vmulq_f32(part[t][m], scale[m]);
        for (int m = 0; m < 4; ++m) {
          acc[t].v[m] = vaddq_f32(acc[t].v[m], part[t][m]);
          acc[t].v[m] = vaddq_f32(acc[t].v[m], vmulq_n_f32(offset[m], sum_x));
        }
      }
      return;
    }
    if constexpr (Q::kType == QuantType::kMXF4) {
      LoadE8m0Scales(scales, scale);
    } else {
      LoadScales(scales, scale);
    }
    for (int t = 0; t < T; ++t) {
      for (int m = 0; m < 4; ++m) {
#if defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
        acc[t].v[m] = vfmaq_f32(acc[t].v[m], part[t][m], scale[m]);
#else
        acc[t].v[m] = vmlaq_f32(acc[t].v[m], part[t][m], scale[m]);
#endif
      }
    }
  }
  // Not used (kOneTokenPasses is false).
  template <int P, typename Q>
  static void AddBlockPanels(const uint8_t*, uint64_t, const float* const*, const uint8_t*,
                             const uint8_t*, Acc*) {}

  // n < 16: the last, partial panel, through memory.
  static void Store(const Acc& acc, const float* bias, size_t r0, size_t n, float* yt) {
    if (n == kQuantPanelRows) {
      for (int m = 0; m < 4; ++m) {
        float32x4_t v = acc.v[m];
        if (bias != nullptr) v = vaddq_f32(vld1q_f32(bias + r0 + 4 * m), v);
        vst1q_f32(yt + 4 * m, v);
      }
    } else {
      float sums[kQuantPanelRows];
      for (int m = 0; m < 4; ++m) vst1q_f32(sums + 4 * m, acc.v[m]);
      for (size_t r = 0; r < n; ++r) yt[r] = bias != nullptr ? bias[r0 + r] + sums[r] : sums[r];
    }
  }
};

}  // namespace

void QGemvNeon(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type, const float* bias,
               const float* x, size_t x_stride, float* y, size_t y_stride) {
  qgemv_neon::QGemvOf<Neon>(c, k, rows, w, type, bias, x, x_stride, y, y_stride);
}

}  // namespace fflite

#endif  // FFLITE_QGEMV_NEON
