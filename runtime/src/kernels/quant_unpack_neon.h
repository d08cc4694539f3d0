// The bytes of one group of a quantised block as the wide types keep them (kernels/quant_types.h),
// for the NEON kernels (aarch64 and 32-bit ARM): LoadGroupQ<Q>(blk, g, o) (16 bytes) and
// LoadGroupD<Q> (8 bytes) return the bytes at blk + 64g + o of the types with a byte layout (Q8,
// Q6K and Q5K: their int8 values), and for the packed Q6KP, Q5KP, Q3KP, Q2KP, IQ4X, IQ4N, MXF4
// the same int8 values decoded from their bit planes or level indices at the same positions, so
// that the wide types' arithmetic on them gives the same bits (Q2KP adds its mins after):
//   Q6KP: (L[g/2] >> 4(g%2)) & 15 | ((H[g/4] >> 2(g%4)) & 3) << 4, minus 32;
//   Q5KP: (L[g/2] >> 4(g%2)) & 15 | ((H >> g) & 1) << 4, minus 16;
//   IQ4X, IQ4N, MXF4 (kLut): Q::kLevels[(L[g/2] >> 4(g%2)) & 15], one table lookup;
//   Q3KP: (L[g/4] >> 2(g%4)) & 3 | ((H >> g) & 1) << 2, minus 4;
//   Q2KP: (L[g/4] >> 2(g%4)) & 3, the value q itself.
// Shift-left-and-insert (sli #4) puts the high bits over the low nibble's byte, so L needs no mask
// for the even groups: 3-5 instructions per vector of values. The shifts' immediates are
// literals in each case of a switch on g, which the kernels' unrolled group loops fold away.
// Internal linkage: on 32-bit ARM the NEON kernels are compiled apart with -mfpu=neon and share
// no inline function with the rest.
#ifndef FFLITE_RUNTIME_SRC_KERNELS_QUANT_UNPACK_NEON_H_
#define FFLITE_RUNTIME_SRC_KERNELS_QUANT_UNPACK_NEON_H_

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#include "kernels/quant_types.h"

namespace fflite {
namespace {

// Q3KP: the 16 rows' signed scales sc = code - 32 of each half of a block (out[0] the first
// half's, out[1] the second's), in row order, from its packed scale bytes at s
// (Q3KP::ScaleOffset; Q3KCode): each half's nibble of the lows, its 2 bits of the highs (rows 0-7
// from their low nibbles, 8-15 from their high ones) above it.
inline void Q3KScalePair(const uint8_t* s, int8x16_t* out) {
  const uint8x16_t lo = vld1q_u8(s), top = vdupq_n_u8(0x30), k32 = vdupq_n_u8(32);
  const uint8x8_t h8 = vld1_u8(s + 16);
  const uint8x16_t hi = vcombine_u8(h8, vshr_n_u8(h8, 4));  // row r's 4 bits in byte r's low nibble
  out[0] = vreinterpretq_s8_u8(vsubq_u8(
      vorrq_u8(vandq_u8(lo, vdupq_n_u8(0x0f)), vandq_u8(vshlq_n_u8(hi, 4), top)), k32));
  out[1] = vreinterpretq_s8_u8(
      vsubq_u8(vorrq_u8(vshrq_n_u8(lo, 4), vandq_u8(vshlq_n_u8(hi, 2), top)), k32));
}

// MXF4's 16 E8M0 scale bytes at p as f32 (rows 4q..4q + 3 in out[q]), E8m0ScaleBits: the byte
// subtraction of 1 saturating (0, a padding scale, gives +0.0), widened, shifted into the
// exponent. Every result is 0 or normal (e >= 2), so 32-bit NEON's flush to zero changes none.
inline void LoadE8m0Scales(const uint8_t* p, float32x4_t* out) {
  const uint8x16_t e = vqsubq_u8(vld1q_u8(p), vdupq_n_u8(1));
  const uint16x8_t w[2] = {vmovl_u8(vget_low_u8(e)), vmovl_u8(vget_high_u8(e))};
  for (int q = 0; q < 4; ++q) {
    const uint16x4_t h = q % 2 == 0 ? vget_low_u16(w[q / 2]) : vget_high_u16(w[q / 2]);
    out[q] = vreinterpretq_f32_u32(vshlq_n_u32(vmovl_u16(h), 23));
  }
}

// Q::kLevels[i] (kIq4Levels, kMxfp4Levels) for each byte i (< 16) of a vector: one tbl (aarch64)
// or vtbl2 per 8 bytes (32-bit).
template <typename Q>
inline uint8x8_t LevelLookup(uint8x8_t i) {
  const uint8_t* levels = reinterpret_cast<const uint8_t*>(Q::kLevels);
#if defined(__aarch64__)
  return vqtbl1_u8(vld1q_u8(levels), i);
#else
  uint8x8x2_t t;
  t.val[0] = vld1_u8(levels);
  t.val[1] = vld1_u8(levels + 8);
  return vtbl2_u8(t, i);
#endif
}
template <typename Q>
inline uint8x16_t LevelLookup(uint8x16_t i) {
#if defined(__aarch64__)
  return vqtbl1q_u8(vld1q_u8(reinterpret_cast<const uint8_t*>(Q::kLevels)), i);
#else
  return vcombine_u8(LevelLookup<Q>(vget_low_u8(i)), LevelLookup<Q>(vget_high_u8(i)));
#endif
}

// S: the intrinsics' q (16 bytes) or nothing (8 bytes); V its vector type. Field2(v, j): the
// 2-bit field j of each byte (bits 2j, 2j + 1) in bits 0-1, zeros above; Bit(v, g): bit g of each
// byte in bit 0, zeros above (each immediate a literal: j and g fold away in unrolled loops).
#define FFLITE_FIELD_FNS(S, V)                                                              \
  inline V Field2(V v, int j) {                                                             \
    switch (j) {                                                                            \
      case 0: return vand##S##u8(v, vdup##S##n_u8(3));                                      \
      case 1: return vand##S##u8(vshr##S##n_u8(v, 2), vdup##S##n_u8(3));                    \
      case 2: return vand##S##u8(vshr##S##n_u8(v, 4), vdup##S##n_u8(3));                    \
      default: return vshr##S##n_u8(v, 6);                                                  \
    }                                                                                       \
  }                                                                                         \
  inline V Bit(V v, int g) {                                                                \
    switch (g) {                                                                            \
      case 0: return vand##S##u8(v, vdup##S##n_u8(1));                                      \
      case 1: return vand##S##u8(vshr##S##n_u8(v, 1), vdup##S##n_u8(1));                    \
      case 2: return vand##S##u8(vshr##S##n_u8(v, 2), vdup##S##n_u8(1));                    \
      case 3: return vand##S##u8(vshr##S##n_u8(v, 3), vdup##S##n_u8(1));                    \
      case 4: return vand##S##u8(vshr##S##n_u8(v, 4), vdup##S##n_u8(1));                    \
      case 5: return vand##S##u8(vshr##S##n_u8(v, 5), vdup##S##n_u8(1));                    \
      case 6: return vand##S##u8(vshr##S##n_u8(v, 6), vdup##S##n_u8(1));                    \
      default: return vshr##S##n_u8(v, 7);                                                  \
    }                                                                                       \
  }
FFLITE_FIELD_FNS(q_, uint8x16_t)
FFLITE_FIELD_FNS(_, uint8x8_t)
#undef FFLITE_FIELD_FNS

#define FFLITE_UNPACK_GROUP(S, V, LOAD)                                                     \
  if constexpr (Q::kType == QuantType::kQ2KP) { /* the code is the value */                 \
    return Field2(LOAD(blk + 64 * (g / 4) + o), g % 4);                                     \
  } else if constexpr (Q::kType == QuantType::kQ3KP) {                                      \
    const V f = Field2(LOAD(blk + 64 * (g / 4) + o), g % 4);                                \
    const V b = Bit(LOAD(blk + Q::kHighOffset + o), g);                                     \
    return vsub##S##u8(vsli##S##n_u8(f, b, 2), vdup##S##n_u8(Q::kCodeOffset));              \
  } else {                                                                                  \
    V l = LOAD(blk + 64 * (g / 2) + o);                                                     \
    if (g % 2 == 1) l = vshr##S##n_u8(l, 4);                                                \
    if constexpr (Q::kLut) {                                                                \
      if (g % 2 == 0) l = vand##S##u8(l, vdup##S##n_u8(0x0f));                              \
      return LevelLookup<Q>(l);                                                             \
    } else if constexpr (Q::kScheme == QuantType::kQ6K) {                                   \
      const V f = Field2(LOAD(blk + Q::kHighOffset + 64 * (g / 4) + o), g % 4);             \
      return vsub##S##u8(vsli##S##n_u8(l, f, 4), vdup##S##n_u8(Q::kCodeOffset));            \
    } else {                                                                                \
      const V f = Bit(LOAD(blk + Q::kHighOffset + o), g);                                   \
      return vsub##S##u8(vsli##S##n_u8(l, f, 4), vdup##S##n_u8(Q::kCodeOffset));            \
    }                                                                                       \
  }

template <typename Q>
inline uint8x16_t LoadGroupQ(const uint8_t* blk, int g, size_t o) {
  if constexpr (!Q::kPacked) {
    return vld1q_u8(blk + 64 * g + o);
  } else {
    FFLITE_UNPACK_GROUP(q_, uint8x16_t, vld1q_u8)
  }
}

template <typename Q>
inline uint8x8_t LoadGroupD(const uint8_t* blk, int g, size_t o) {
  if constexpr (!Q::kPacked) {
    return vld1_u8(blk + 64 * g + o);
  } else {
    FFLITE_UNPACK_GROUP(_, uint8x8_t, vld1_u8)
  }
}

#undef FFLITE_UNPACK_GROUP

}  // namespace
}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_QUANT_UNPACK_NEON_H_
