// The int8-activation product over quantised panels (I8, I4) for NEON: smmla (aarch64 with the
// int8 matrix-multiply extension), sdot (aarch64 with the dot-product extension) and vmull_s8 /
// vpadalq_s16 (ARMv8.0 and 32-bit ARM with NEON).
#include "kernels/quant_kernels.h"
#include "kernels/mca_region.h"

#if defined(FFLITE_QGEMM_NEON)

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels/quant_types.h"
#include "kernels/quant_unpack_neon.h"

#if defined(__aarch64__)
// sdot is ARMv8.2 (optional from ARMv8.2, mandatory from ARMv8.4): only the functions that use it
// are built for it, and they run only when cpuinfo reports it. (GCC 12 accepts the extension only
// with an architecture: a bare "+dotprod" does not enable the intrinsics.)
#define FFLITE_NEON_DOT __attribute__((target("arch=armv8.2-a+dotprod")))
// smmla (FEAT_I8MM: optional from ARMv8.2, mandatory from ARMv8.6), likewise only in the functions
// that use it, run only when Linux reports it (qgemm_select.cc). The base stays ARMv8.2, so
// that nothing else of ARMv8.6 is assumed of a CPU with i8mm (e.g. Neoverse V1 is ARMv8.4).
#define FFLITE_NEON_I8MM __attribute__((target("arch=armv8.2-a+i8mm")))
#endif

namespace fflite {

namespace {

inline int32_t Load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// 8 f16 scales to f32, exactly. aarch64 converts in hardware; 32-bit NEON (-mfpu=neon) has no
// half conversion, so the bits are rebuilt: normal f16 by rebiasing the exponent (15 -> 127),
// subnormal f16 (|h| < 0x400) as mant · 2^-24, whose results are normal f32 (32-bit NEON flushes
// subnormal f32 to zero). Scales are finite (the loader checks), so no Inf/NaN case.
inline void LoadScales8(const uint8_t* p, float32x4_t* lo, float32x4_t* hi) {
  const uint16x8_t h = vld1q_u16(reinterpret_cast<const uint16_t*>(p));
#if defined(__aarch64__)
  *lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
  *hi = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)));
#else
  const uint16x4_t halves[2] = {vget_low_u16(h), vget_high_u16(h)};
  float32x4_t out[2];
  for (int i = 0; i < 2; ++i) {
    const uint32x4_t v = vmovl_u16(halves[i]);
    const uint32x4_t sign = vshlq_n_u32(vandq_u32(v, vdupq_n_u32(0x8000u)), 16);
    const uint32x4_t a = vandq_u32(v, vdupq_n_u32(0x7fffu));
    const uint32x4_t normal = vaddq_u32(vshlq_n_u32(a, 13), vdupq_n_u32(112u << 23));
    const uint32x4_t sub =
        vreinterpretq_u32_f32(vmulq_n_f32(vcvtq_f32_u32(a), 5.9604644775390625e-8f));  // 2^-24
    const uint32x4_t bits = vorrq_u32(vbslq_u32(vcltq_u32(a, vdupq_n_u32(0x400u)), sub, normal),
                                      sign);
    out[i] = vreinterpretq_f32_u32(bits);
  }
  *lo = out[0];
  *hi = out[1];
#endif
}

// Block b's 16 scales of a panel into sw[4] (rows 4q..4q + 3 in sw[q]); Q6K: its halves' in sw
// and off (each half's int32 dot products are scaled apart: the tiles flush after group 3). Q4K,
// Q5K: s = d·sc (exact) and off = o·s - dmin·m (one rounding; o = kMinOffset), with which a block
// adds d_x·(s·Σ(n - o)·q + off·Σq): the Q4 dot products of n - 8 (Q4K's nibbles) or the Q8 ones
// of n - 16 (Q5K's int8 values) serve it.
template <typename Q>
inline void LoadBlockScales(const uint8_t* w, size_t b, float32x4_t* sw, float32x4_t* off) {
  if constexpr (HasMin<Q>()) {  // Q4K, Q5K
    const size_t super = b / 8 * (64 + 8 * 32), codes = super + 64 + b % 8 * 32;
    float32x4_t d[4], dmin[4];
    LoadScales8(w + super, &d[0], &d[1]);
    LoadScales8(w + super + 16, &d[2], &d[3]);
    LoadScales8(w + super + 32, &dmin[0], &dmin[1]);
    LoadScales8(w + super + 48, &dmin[2], &dmin[3]);
    const uint8x16_t sc = vld1q_u8(w + codes), mins = vld1q_u8(w + codes + 16);
    const uint16x8_t s16[2] = {vmovl_u8(vget_low_u8(sc)), vmovl_u8(vget_high_u8(sc))};
    const uint16x8_t m16[2] = {vmovl_u8(vget_low_u8(mins)), vmovl_u8(vget_high_u8(mins))};
    for (int q = 0; q < 4; ++q) {
      const uint16x4_t s4 = q % 2 == 0 ? vget_low_u16(s16[q / 2]) : vget_high_u16(s16[q / 2]);
      const uint16x4_t m4 = q % 2 == 0 ? vget_low_u16(m16[q / 2]) : vget_high_u16(m16[q / 2]);
      sw[q] = vmulq_f32(d[q], vcvtq_f32_u32(vmovl_u16(s4)));
      off[q] = vsubq_f32(vmulq_n_f32(sw[q], static_cast<float>(Q::kMinOffset)),
                         vmulq_f32(dmin[q], vcvtq_f32_u32(vmovl_u16(m4))));
    }
  } else if constexpr (Q::kScheme == QuantType::kQ6K) {
    // Q6K: sw = d·sc of the block's first 16 values, off = d·sc of its last 16 (exact). Q3KP:
    // its packed 6-bit codes, 24 bytes a block.
    constexpr bool kQ3 = Q::kType == QuantType::kQ3KP;
    constexpr size_t kBlockBytes = kQ3 ? 24 : 32;
    const size_t super = b / 8 * (32 + 8 * kBlockBytes), codes = super + 32 + b % 8 * kBlockBytes;
    float32x4_t d[4];
    LoadScales8(w + super, &d[0], &d[1]);
    LoadScales8(w + super + 16, &d[2], &d[3]);
    [[maybe_unused]] int8x16_t q3[2];
    if constexpr (kQ3) Q3KScalePair(w + codes, q3);
    for (int half = 0; half < 2; ++half) {
      int8x16_t sc;
      if constexpr (kQ3) {
        sc = q3[half];
      } else {
        sc = vld1q_s8(reinterpret_cast<const int8_t*>(w + codes + 16 * half));
      }
      if constexpr (Q::kScaleMask != 0xff) {  // Q2KP: the mins in the high nibbles
        sc = vandq_s8(sc, vdupq_n_s8(static_cast<int8_t>(Q::kScaleMask)));
      }
      const int16x8_t s16[2] = {vmovl_s8(vget_low_s8(sc)), vmovl_s8(vget_high_s8(sc))};
      for (int q = 0; q < 4; ++q) {
        const int16x4_t s4 = q % 2 == 0 ? vget_low_s16(s16[q / 2]) : vget_high_s16(s16[q / 2]);
        (half == 0 ? sw : off)[q] = vmulq_f32(d[q], vcvtq_f32_s32(vmovl_s16(s4)));
      }
    }
  } else if constexpr (Q::kType == QuantType::kMXF4) {
    (void)off;
    LoadE8m0Scales(w + b * kQuantPanelRows, sw);
  } else {
    (void)off;
    LoadScales8(w + b * 32, &sw[0], &sw[1]);
    LoadScales8(w + b * 32 + 16, &sw[2], &sw[3]);
  }
}

// acc + a · b per lane (fused on aarch64; 32-bit NEON without VFPv4 has only the unfused vmla).
inline float32x4_t MulAdd(float32x4_t acc, float32x4_t a, float32x4_t b) {
#if defined(__aarch64__)
  return vfmaq_f32(acc, a, b);
#else
  return vmlaq_f32(acc, a, b);
#endif
}

// [a0 + a1, a2 + a3, b0 + b1, b2 + b3].
inline int32x4_t PairwiseAdd(int32x4_t a, int32x4_t b) {
#if defined(__aarch64__)
  return vpaddq_s32(a, b);
#else
  return vcombine_s32(vpadd_s32(vget_low_s32(a), vget_high_s32(a)),
                      vpadd_s32(vget_low_s32(b), vget_high_s32(b)));
#endif
}

// y[t·y_stride + 8·h + i] = acc[h][t] lane i (+ bias) for the n rows of the panel that exist.
template <int T>
inline void Store(const float32x4_t (&acc)[4][T], const float* bias, size_t n, float* y,
                  size_t y_stride) {
  for (int t = 0; t < T; ++t) {
    float* yt = y + t * y_stride;
    for (int q = 0; q < 4; ++q) {
      float32x4_t v = acc[q][t];
      if (n >= 4 * static_cast<size_t>(q) + 4) {
        if (bias != nullptr) v = vaddq_f32(v, vld1q_f32(bias + 4 * q));
        vst1q_f32(yt + 4 * q, v);
      } else {
        // The last rows of a partial panel: nothing is read or written past row n.
        float tmp[4];
        vst1q_f32(tmp, v);
        for (size_t r = 4 * q; r < n; ++r) {
          yt[r] = bias != nullptr ? tmp[r - 4 * q] + bias[r] : tmp[r - 4 * q];
        }
      }
    }
  }
}

// Plain NEON, one panel × T tokens. A 64-byte group (16 rows × 4 k) is 8 d-registers of 2 rows ×
// 4 k; vmull_s8 against the token's 4 bytes (duplicated) gives 8 int16 products, which vpadalq
// adds pairwise into int32 lanes [r k0+k1, r k2+k3, r+1 k0+k1, r+1 k2+k3]; PairwiseAdd makes row
// sums of them once per block. Exact: I8 adds two products in int16 before widening
// (2·127·127 = 32258 < 32767); I4 all 8 of a block (8·15·127 = 15240: nibbles 0..15 as s8, the
// offset 8·Σq_x subtracted after).
template <typename Q, int T>
void TileNeon(size_t k_blocks, size_t scale_bytes, const uint8_t* w, const QActBlock* x,
              const float* bias, size_t n, float* y, size_t y_stride) {
  constexpr size_t kBlockBytes = Q::kBlockPanelBytes;
  float32x4_t facc[4][T];
  for (int q = 0; q < 4; ++q) {
    for (int t = 0; t < T; ++t) facc[q][t] = vdupq_n_f32(0.0f);
  }
  for (size_t b = 0; b < k_blocks; ++b) {
    FFLITE_MCA_BEGIN("qgemm_neon", T, Q::kType, kQuantPanelRows * kQuantBlock,
                     BlockBytesWithScales<Q>());
    const uint8_t* blk = w + scale_bytes + b * kBlockBytes;
    float32x4_t sw[4], off[4];
    LoadBlockScales<Q>(w, b, sw, off);
    // Rows in two halves of 8 (4 d-registers a group), to stay within 32-bit ARM's 16 q-registers.
    // The loops over a block's halves, groups and chunks are unrolled whole here and below: a
    // block's body is straight-line code (the performance model, scripts/arm_model.py, refuses a
    // body with a loop left in it).
    #pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      int32x4_t acc[4][T];
      for (int i = 0; i < 4; ++i) {
        for (int t = 0; t < T; ++t) acc[i][t] = vdupq_n_s32(0);
      }
      if constexpr (Q::kBits != 4) {
        #pragma GCC unroll 8
        for (int g = 0; g < 8; g += 2) {
          if (HasHalfScales<Q>() && g == 4) {
            // Q6K: the first half's dot products, with its scales; the second half from zero.
            for (int t = 0; t < T; ++t) {
              const QActBlock& a = x[t * k_blocks + b];
              for (int q = 0; q < 2; ++q) {
                const int32x4_t dot = PairwiseAdd(acc[2 * q][t], acc[2 * q + 1][t]);
                facc[2 * h + q][t] = MulAdd(facc[2 * h + q][t], vcvtq_f32_s32(dot),
                                            vmulq_n_f32(sw[2 * h + q], a.d));
              }
              for (int i = 0; i < 4; ++i) acc[i][t] = vdupq_n_s32(0);
            }
          }
          int8x8_t x0[T], x1[T];
          for (int t = 0; t < T; ++t) {
            x0[t] = vreinterpret_s8_s32(vdup_n_s32(Load32(x[t * k_blocks + b].q + 4 * g)));
            x1[t] = vreinterpret_s8_s32(vdup_n_s32(Load32(x[t * k_blocks + b].q + 4 * g + 4)));
          }
          for (int i = 0; i < 4; ++i) {
            // Q6KP, Q5KP, IQ4X: decoded into Q6K's / Q5K's int8 values.
            const int8x8_t w0 = vreinterpret_s8_u8(LoadGroupD<Q>(blk, g, 32 * h + 8 * i));
            const int8x8_t w1 = vreinterpret_s8_u8(LoadGroupD<Q>(blk, g + 1, 32 * h + 8 * i));
            for (int t = 0; t < T; ++t) {
              acc[i][t] = vpadalq_s16(acc[i][t], vmlal_s8(vmull_s8(w0, x0[t]), w1, x1[t]));
            }
          }
        }
      } else {
        int16x8_t acc16[4][T];
        for (int i = 0; i < 4; ++i) {
          for (int t = 0; t < T; ++t) acc16[i][t] = vdupq_n_s16(0);
        }
        const uint8x8_t low = vdup_n_u8(0x0f);
        #pragma GCC unroll 8
        for (int c = 0; c < 4; ++c) {
          int8x8_t xl[T], xh[T];
          for (int t = 0; t < T; ++t) {
            xl[t] = vreinterpret_s8_s32(vdup_n_s32(Load32(x[t * k_blocks + b].q + 4 * c)));
            xh[t] = vreinterpret_s8_s32(vdup_n_s32(Load32(x[t * k_blocks + b].q + 16 + 4 * c)));
          }
          for (int i = 0; i < 4; ++i) {
            const uint8x8_t v = vld1_u8(blk + 64 * c + 32 * h + 8 * i);
            const int8x8_t lo = vreinterpret_s8_u8(vand_u8(v, low));
            const int8x8_t hi = vreinterpret_s8_u8(vshr_n_u8(v, 4));
            for (int t = 0; t < T; ++t) {
              acc16[i][t] = vmlal_s8(vmlal_s8(acc16[i][t], lo, xl[t]), hi, xh[t]);
            }
          }
        }
        for (int i = 0; i < 4; ++i) {
          for (int t = 0; t < T; ++t) acc[i][t] = vpaddlq_s16(acc16[i][t]);
        }
      }
      for (int t = 0; t < T; ++t) {
        const QActBlock& a = x[t * k_blocks + b];
        for (int q = 0; q < 2; ++q) {
          int32x4_t dot = PairwiseAdd(acc[2 * q][t], acc[2 * q + 1][t]);
          if constexpr (Q::kBits == 4) dot = vsubq_s32(dot, vdupq_n_s32(a.sum * 8));
          const float32x4_t* scale = HasHalfScales<Q>() ? off : sw;  // Q6K: the second half's
          facc[2 * h + q][t] =
              MulAdd(facc[2 * h + q][t], vcvtq_f32_s32(dot), vmulq_n_f32(scale[2 * h + q], a.d));
          if constexpr (HasMin<Q>()) {
            facc[2 * h + q][t] = MulAdd(facc[2 * h + q][t], off[2 * h + q],
                                        vdupq_n_f32(a.d * static_cast<float>(a.sum)));
          }
        }
      }
    }
    FFLITE_MCA_END("qgemm_neon");
  }
  Store<T>(facc, bias, n, y, y_stride);
}

#if defined(__aarch64__)
// sdot, one panel × T tokens: a 16-byte load is 4 rows × 4 k, and vdotq_laneq_s32 takes the
// token's 4 k from a lane of its 16 activation bytes, so each lane holds one row's dot product
// (no pairwise step). I4 nibbles (0..15) are the signed operand as they are; the offset 8·Σq_x
// is the accumulator's start.
template <typename Q, int T>
FFLITE_NEON_DOT void TileDot(size_t k_blocks, size_t scale_bytes, const uint8_t* w,
                             const QActBlock* x, const float* bias, size_t n, float* y,
                             size_t y_stride) {
  constexpr size_t kBlockBytes = Q::kBlockPanelBytes;
  float32x4_t facc[4][T];
  for (int q = 0; q < 4; ++q) {
    for (int t = 0; t < T; ++t) facc[q][t] = vdupq_n_f32(0.0f);
  }
  const uint8x16_t low = vdupq_n_u8(0x0f);
  for (size_t b = 0; b < k_blocks; ++b) {
    FFLITE_MCA_BEGIN("qgemm_dot", T, Q::kType, kQuantPanelRows * kQuantBlock,
                     BlockBytesWithScales<Q>());
    const uint8_t* blk = w + scale_bytes + b * kBlockBytes;
    int8x16_t x0[T], x1[T];
    int32x4_t acc[4][T];
    for (int t = 0; t < T; ++t) {
      const QActBlock& a = x[t * k_blocks + b];
      x0[t] = vld1q_s8(a.q);
      x1[t] = vld1q_s8(a.q + 16);
      // The nibbles are n = q + 8 for Q4 and Q4K alike (Q4K's n - 8 sums, see LoadBlockScales).
      const int32x4_t init = vdupq_n_s32(-(Q::kBits == 4 ? 8 : 0) * a.sum);
      for (int i = 0; i < 4; ++i) acc[i][t] = init;
    }
    float32x4_t sw[4], off[4];
    LoadBlockScales<Q>(w, b, sw, off);
    if constexpr (Q::kBits != 4) {
      #pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        if (HasHalfScales<Q>() && g == 4) {
          // Q6K: the first half's dot products, with its scales; the second half from zero.
          for (int t = 0; t < T; ++t) {
            const float d = x[t * k_blocks + b].d;
            for (int q = 0; q < 4; ++q) {
              facc[q][t] = vfmaq_f32(facc[q][t], vcvtq_f32_s32(acc[q][t]), vmulq_n_f32(sw[q], d));
              acc[q][t] = vdupq_n_s32(0);
            }
          }
        }
        for (int i = 0; i < 4; ++i) {
          const int8x16_t wv = vreinterpretq_s8_u8(LoadGroupQ<Q>(blk, g, 16 * i));
          for (int t = 0; t < T; ++t) {
            const int8x16_t xv = g < 4 ? x0[t] : x1[t];
            switch (g & 3) {  // the lane must be a constant; g is one once unrolled
              case 0: acc[i][t] = vdotq_laneq_s32(acc[i][t], wv, xv, 0); break;
              case 1: acc[i][t] = vdotq_laneq_s32(acc[i][t], wv, xv, 1); break;
              case 2: acc[i][t] = vdotq_laneq_s32(acc[i][t], wv, xv, 2); break;
              default: acc[i][t] = vdotq_laneq_s32(acc[i][t], wv, xv, 3); break;
            }
          }
        }
      }
    } else {
      #pragma GCC unroll 8
      for (int c = 0; c < 4; ++c) {
        for (int i = 0; i < 4; ++i) {
          const uint8x16_t v = vld1q_u8(blk + 64 * c + 16 * i);
          const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, low));
          const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
          for (int t = 0; t < T; ++t) {
            switch (c) {
              case 0:
                acc[i][t] = vdotq_laneq_s32(acc[i][t], lo, x0[t], 0);
                acc[i][t] = vdotq_laneq_s32(acc[i][t], hi, x1[t], 0);
                break;
              case 1:
                acc[i][t] = vdotq_laneq_s32(acc[i][t], lo, x0[t], 1);
                acc[i][t] = vdotq_laneq_s32(acc[i][t], hi, x1[t], 1);
                break;
              case 2:
                acc[i][t] = vdotq_laneq_s32(acc[i][t], lo, x0[t], 2);
                acc[i][t] = vdotq_laneq_s32(acc[i][t], hi, x1[t], 2);
                break;
              default:
                acc[i][t] = vdotq_laneq_s32(acc[i][t], lo, x0[t], 3);
                acc[i][t] = vdotq_laneq_s32(acc[i][t], hi, x1[t], 3);
                break;
            }
          }
        }
      }
    }
    const float32x4_t* scale = HasHalfScales<Q>() ? off : sw;  // Q6K: the second half's
    for (int t = 0; t < T; ++t) {
      const float d = x[t * k_blocks + b].d;
      for (int q = 0; q < 4; ++q) {
        facc[q][t] = vfmaq_f32(facc[q][t], vcvtq_f32_s32(acc[q][t]), vmulq_n_f32(scale[q], d));
        if constexpr (HasMin<Q>()) {
          const float sum = d * static_cast<float>(x[t * k_blocks + b].sum);
          facc[q][t] = vfmaq_f32(facc[q][t], off[q], vdupq_n_f32(sum));
        }
      }
    }
    FFLITE_MCA_END("qgemm_dot");
  }
  Store<T>(facc, bias, n, y, y_stride);
}
#endif

#if defined(__aarch64__)
// smmla, one panel × a pair of tokens. vmmlaq_s32(acc, a, b) adds the 2×2 product of a = 2 rows ×
// 8 k and bᵀ (b = 2 tokens × 8 k) to acc = [r·t, r·t', r'·t, r'·t']. A 16-byte load of group g is
// rows 4i..4i+3 × 4 k; the 32-bit zips of groups g and g + 1 give rows (4i, 4i+1) and
// (4i+2, 4i+3) × the 8 k 4g..4g+7, and the 64-bit zips of the two tokens' 16 activation bytes
// give tokens (t, t') × the same 8 k. Per block, acc[2i + j] covers rows 4i + 2j, 4i + 2j + 1;
// vuzp1q / vuzp2q then make each token's 4 rows i (the other kernels' lanes). I4 nibbles (0..15)
// are the signed operand as they are; the offset 8·Σq_x is the accumulator's start. T = 1 runs
// the token against itself and keeps one half.
template <typename Q, int T>
FFLITE_NEON_I8MM void TileI8mm(size_t k_blocks, size_t scale_bytes, const uint8_t* w,
                               const QActBlock* x, const float* bias, size_t n, float* y,
                               size_t y_stride) {
  static_assert(T == 1 || T == 2, "a tile is one pair of tokens");
  constexpr size_t kBlockBytes = Q::kBlockPanelBytes;
  float32x4_t facc[4][T];
  for (int q = 0; q < 4; ++q) {
    for (int t = 0; t < T; ++t) facc[q][t] = vdupq_n_f32(0.0f);
  }
  const uint8x16_t low = vdupq_n_u8(0x0f);
  for (size_t b = 0; b < k_blocks; ++b) {
    FFLITE_MCA_BEGIN("qgemm_i8mm", T, Q::kType, kQuantPanelRows * kQuantBlock,
                     BlockBytesWithScales<Q>());
    const uint8_t* blk = w + scale_bytes + b * kBlockBytes;
    const QActBlock& a0 = x[b];
    const QActBlock& a1 = x[(T - 1) * k_blocks + b];
    // xv[h] = [t: q[8h..8h+7]][t': q[8h..8h+7]].
    int8x16_t xv[4];
    {
      const int64x2_t lo0 = vreinterpretq_s64_s8(vld1q_s8(a0.q));
      const int64x2_t lo1 = vreinterpretq_s64_s8(vld1q_s8(a1.q));
      const int64x2_t hi0 = vreinterpretq_s64_s8(vld1q_s8(a0.q + 16));
      const int64x2_t hi1 = vreinterpretq_s64_s8(vld1q_s8(a1.q + 16));
      xv[0] = vreinterpretq_s8_s64(vzip1q_s64(lo0, lo1));
      xv[1] = vreinterpretq_s8_s64(vzip2q_s64(lo0, lo1));
      xv[2] = vreinterpretq_s8_s64(vzip1q_s64(hi0, hi1));
      xv[3] = vreinterpretq_s8_s64(vzip2q_s64(hi0, hi1));
    }
    int32x4_t acc[8];
    {
      const int32x4_t init =
          Q::kBits == 4 ? vcombine_s32(vset_lane_s32(-8 * a1.sum, vdup_n_s32(-8 * a0.sum), 1),
                             vset_lane_s32(-8 * a1.sum, vdup_n_s32(-8 * a0.sum), 1))
              : vdupq_n_s32(0);
      #pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) acc[i] = init;
    }
    float32x4_t sw[4], off[4];
    LoadBlockScales<Q>(w, b, sw, off);
    if constexpr (Q::kBits != 4) {
      #pragma GCC unroll 8  // acc[] stays in registers only with constant indices
      for (int h = 0; h < 4; ++h) {  // groups 2h, 2h + 1: k 8h..8h+7
        if (HasHalfScales<Q>() && h == 2) {
          // Q6K: the first half's dot products, with its scales; the second half from zero.
          #pragma GCC unroll 8
          for (int i = 0; i < 4; ++i) {
            const int32x4_t dot0 = vuzp1q_s32(acc[2 * i], acc[2 * i + 1]);
            facc[i][0] = vfmaq_f32(facc[i][0], vcvtq_f32_s32(dot0), vmulq_n_f32(sw[i], a0.d));
            if constexpr (T == 2) {
              const int32x4_t dot1 = vuzp2q_s32(acc[2 * i], acc[2 * i + 1]);
              facc[i][T - 1] =
                  vfmaq_f32(facc[i][T - 1], vcvtq_f32_s32(dot1), vmulq_n_f32(sw[i], a1.d));
            }
          }
          #pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) acc[i] = vdupq_n_s32(0);
        }
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
          const int32x4_t g0 = vreinterpretq_s32_u8(LoadGroupQ<Q>(blk, 2 * h, 16 * i));
          const int32x4_t g1 = vreinterpretq_s32_u8(LoadGroupQ<Q>(blk, 2 * h + 1, 16 * i));
          acc[2 * i] = vmmlaq_s32(acc[2 * i], vreinterpretq_s8_s32(vzip1q_s32(g0, g1)), xv[h]);
          acc[2 * i + 1] =
              vmmlaq_s32(acc[2 * i + 1], vreinterpretq_s8_s32(vzip2q_s32(g0, g1)), xv[h]);
        }
      }
    } else {
      // Chunks c, c + 1 (c = 0, 2): low nibbles are groups c, c + 1 (k 4c..4c+7, h = c / 2), high
      // nibbles groups c + 4, c + 5 (h = c / 2 + 2).
      #pragma GCC unroll 8
      for (int c = 0; c < 4; c += 2) {
        #pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
          const uint8x16_t v0 = vld1q_u8(blk + 64 * c + 16 * i);
          const uint8x16_t v1 = vld1q_u8(blk + 64 * (c + 1) + 16 * i);
          const int32x4_t l0 = vreinterpretq_s32_u8(vandq_u8(v0, low));
          const int32x4_t l1 = vreinterpretq_s32_u8(vandq_u8(v1, low));
          const int32x4_t h0 = vreinterpretq_s32_u8(vshrq_n_u8(v0, 4));
          const int32x4_t h1 = vreinterpretq_s32_u8(vshrq_n_u8(v1, 4));
          const int8x16_t xl = xv[c / 2], xh = xv[c / 2 + 2];
          acc[2 * i] = vmmlaq_s32(acc[2 * i], vreinterpretq_s8_s32(vzip1q_s32(l0, l1)), xl);
          acc[2 * i + 1] =
              vmmlaq_s32(acc[2 * i + 1], vreinterpretq_s8_s32(vzip2q_s32(l0, l1)), xl);
          acc[2 * i] = vmmlaq_s32(acc[2 * i], vreinterpretq_s8_s32(vzip1q_s32(h0, h1)), xh);
          acc[2 * i + 1] =
              vmmlaq_s32(acc[2 * i + 1], vreinterpretq_s8_s32(vzip2q_s32(h0, h1)), xh);
        }
      }
    }
    const float32x4_t* scale = HasHalfScales<Q>() ? off : sw;  // Q6K: the second half's
    #pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
      // acc[2i] = [4i·t, 4i·t', 4i+1·t, 4i+1·t'], acc[2i+1] the same for rows 4i+2, 4i+3.
      const int32x4_t dot0 = vuzp1q_s32(acc[2 * i], acc[2 * i + 1]);
      facc[i][0] = vfmaq_f32(facc[i][0], vcvtq_f32_s32(dot0), vmulq_n_f32(scale[i], a0.d));
      if constexpr (HasMin<Q>()) {
        facc[i][0] = vfmaq_f32(facc[i][0], off[i], vdupq_n_f32(a0.d * static_cast<float>(a0.sum)));
      }
      if constexpr (T == 2) {
        const int32x4_t dot1 = vuzp2q_s32(acc[2 * i], acc[2 * i + 1]);
        facc[i][T - 1] =
            vfmaq_f32(facc[i][T - 1], vcvtq_f32_s32(dot1), vmulq_n_f32(scale[i], a1.d));
        if constexpr (HasMin<Q>()) {
          facc[i][T - 1] = vfmaq_f32(facc[i][T - 1], off[i],
                                     vdupq_n_f32(a1.d * static_cast<float>(a1.sum)));
        }
      }
    }
    FFLITE_MCA_END("qgemm_i8mm");
  }
  Store<T>(facc, bias, n, y, y_stride);
}
#endif

// Tokens per tile: aarch64's 32 q-registers hold 2 tokens' accumulators (4 + 4 each, plus the
// activations and weights); 32-bit ARM's 16 hold one.
#if defined(__aarch64__)
constexpr size_t kMaxTokens = 2;
#else
constexpr size_t kMaxTokens = 1;
#endif

// Every token tile for one panel at a time (the panel stays in cache while the tiles pass over
// it), then, with mins (Q2KP), the panel's mins (SubtractQ2KMinsQPanel). Tile is TileNeon,
// TileDot or TileI8mm.
template <typename Q, void (*TileMax)(size_t, size_t, const uint8_t*, const QActBlock*,
                                    const float*, size_t, float*, size_t),
          void (*TileOne)(size_t, size_t, const uint8_t*, const QActBlock*, const float*, size_t,
                          float*, size_t)>
void QGemmPanels(size_t c, size_t k, size_t rows, const uint8_t* w, const float* bias,
                 const QActBlock* xq, float* y, size_t y_stride, const Q2KSumsQ* mins) {
  const QuantGeometry g = QuantMatrixGeometry(Q::kType, rows, k);
  for (size_t p = 0; p < g.panels; ++p) {
    const size_t r0 = p * kQuantPanelRows;
    const size_t n = rows - r0 < kQuantPanelRows ? rows - r0 : kQuantPanelRows;
    const uint8_t* panel = w + p * g.panel_bytes;
    const float* bp = bias != nullptr ? bias + r0 : nullptr;
    size_t t = 0;
    for (; t + kMaxTokens <= c; t += kMaxTokens) {
      TileMax(g.k_blocks, g.scale_bytes, panel, xq + t * g.k_blocks, bp, n, y + t * y_stride + r0,
              y_stride);
    }
    for (; t < c; ++t) {
      TileOne(g.k_blocks, g.scale_bytes, panel, xq + t * g.k_blocks, bp, n, y + t * y_stride + r0,
              y_stride);
    }
    if (mins != nullptr) SubtractQ2KMinsQPanel(*mins, panel, n, y + r0, y_stride);
  }
}

}  // namespace

// The scalar twin's operations: the same max, divide and multiply in f32, and round to nearest
// even (nearbyint in the default mode) by adding and subtracting 1.5·2^23, exact for |v| < 2^22
// (here |v·inv| <= 127.5), so the blocks are bit-identical. 32-bit NEON flushes subnormals to
// zero: blocks whose largest value is below 2^-100 go through the scalar code.
void QuantizeActivationsNeon(size_t c, size_t k, const float* x, size_t x_stride,
                             QActBlock* xq) {
  const size_t kb = (k + kQuantBlock - 1) / kQuantBlock;
  const float32x4_t magic = vdupq_n_f32(12582912.0f);  // 1.5·2^23
  for (size_t t = 0; t < c; ++t) {
    const float* xt = x + t * x_stride;
    for (size_t b = 0; b < kb; ++b) {
      const size_t j = b * kQuantBlock;
      float tail[kQuantBlock] = {};
      const float* src = xt + j;
      if (j + kQuantBlock > k) {
        // Copied so that nothing past x[k) is read; the padding is zero.
        std::memcpy(tail, src, (k - j) * sizeof(float));
        src = tail;
      }
      float32x4_t v[8];
      float32x4_t m = vdupq_n_f32(0.0f);
      for (int i = 0; i < 8; ++i) {
        v[i] = vld1q_f32(src + 4 * i);
        m = vmaxq_f32(m, vabsq_f32(v[i]));
      }
      float32x2_t m2 = vpmax_f32(vget_low_f32(m), vget_high_f32(m));
      m2 = vpmax_f32(m2, m2);
      const float amax = vget_lane_f32(m2, 0);
      QActBlock& out = xq[t * kb + b];
#if !defined(__aarch64__)
      if (amax < 7.8886090522101181e-31f) {  // 2^-100
        QuantizeActivationsScalar(1, k - j < kQuantBlock ? k - j : kQuantBlock, xt + j, 0, &out);
        continue;
      }
#endif
      out.d = amax >= kQuantActMinAbsMax ? amax / 127.0f : 0.0f;
      const float inv = amax >= kQuantActMinAbsMax ? 127.0f / amax : 0.0f;
      int32x4_t sum = vdupq_n_s32(0);
      for (int i = 0; i < 8; i += 2) {
        const float32x4_t r0 = vsubq_f32(vaddq_f32(vmulq_n_f32(v[i], inv), magic), magic);
        const float32x4_t r1 = vsubq_f32(vaddq_f32(vmulq_n_f32(v[i + 1], inv), magic), magic);
        const int32x4_t q0 = vcvtq_s32_f32(r0), q1 = vcvtq_s32_f32(r1);  // exact integers
        sum = vaddq_s32(sum, vaddq_s32(q0, q1));
        const int16x8_t q16 = vcombine_s16(vmovn_s32(q0), vmovn_s32(q1));
        vst1_s8(out.q + 4 * i, vmovn_s16(q16));
      }
      const int64x2_t s2 = vpaddlq_s32(sum);
      out.sum = static_cast<int32_t>(vgetq_lane_s64(s2, 0) + vgetq_lane_s64(s2, 1));
    }
  }
}

// The panels' product for the weights' type with the tile TILE (WIDE tokens, and one), and Q2KP's
// mins (RunWithQ2KMins). (The lambdas' types are this file's own, so their instantiations are
// never shared with a caller compiled without NEON on 32-bit ARM.)
#define FFLITE_QGEMM_BY_TYPE(TILE, WIDE)                                                   \
  RunWithQ2KMins(c, k, rows, w, type, xq, y, y_stride, [&](const Q2KSumsQ* mins) {         \
    WithQuantTraits(type, [&](auto traits) {                                               \
      using Q = decltype(traits);                                                          \
      QGemmPanels<Q, TILE<Q, WIDE>, TILE<Q, 1>>(c, k, rows, w, bias, xq, y, y_stride, mins); \
    });                                                                                    \
  })

void QGemmNeon(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type, const float* bias,
               const QActBlock* xq, float* y, size_t y_stride) {
  FFLITE_QGEMM_BY_TYPE(TileNeon, kMaxTokens);
}

#if defined(__aarch64__)
void QGemmNeonDot(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                  const float* bias, const QActBlock* xq, float* y, size_t y_stride) {
  FFLITE_QGEMM_BY_TYPE(TileDot, kMaxTokens);
}

void QGemmNeonI8mm(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                   const float* bias, const QActBlock* xq, float* y, size_t y_stride) {
  static_assert(kMaxTokens == 2, "QGemmPanels steps by kMaxTokens; TileI8mm takes one pair");
  FFLITE_QGEMM_BY_TYPE(TileI8mm, 2);
}
#endif

#undef FFLITE_QGEMM_BY_TYPE

}  // namespace fflite

#endif  // FFLITE_QGEMM_NEON
