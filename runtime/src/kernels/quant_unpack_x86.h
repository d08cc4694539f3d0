// The bytes of one group of a quantised block as the wide types keep them (kernels/quant_types.h),
// for the x86 kernels: LoadGroup*<Q>(blk, g, o) returns the bytes at blk + 64g + o of the types
// with a byte or nibble layout (Q8, Q6K and Q5K: their int8 values), and for the packed Q6KP,
// Q5KP, Q3KP, Q2KP, IQ4X, IQ4N and MXF4 the same int8 values decoded from their bit planes or level
// indices at the same positions: the wide types' arithmetic on them then gives the same bits (Q2KP
// adds its mins after, kernels/quant_kernels.h). Each function
// carries its own target and internal linkage (one copy per including file: no SIMD code shared
// between files; see kernels_avx2.cc). No lambdas: they would not inherit the target.
#ifndef FFLITE_RUNTIME_SRC_KERNELS_QUANT_UNPACK_X86_H_
#define FFLITE_RUNTIME_SRC_KERNELS_QUANT_UNPACK_X86_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/quant_types.h"

namespace fflite {
namespace {

// MXF4's E8M0 scale bytes at p as f32, E8m0ScaleBits: the byte subtraction of 1 saturating (0, a
// padding scale, gives +0.0), widened, shifted into the exponent. 8 bytes to 8 lanes (AVX2), 16
// to 16 (AVX-512). (Macros: the kernels that use them have different target attributes.)
#define FFLITE_E8M0_SCALES8(p)                                                            \
  _mm256_castsi256_ps(_mm256_slli_epi32(                                                  \
      _mm256_cvtepu8_epi32(_mm_subs_epu8(                                                 \
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), _mm_set1_epi8(1))),       \
      23))
#define FFLITE_E8M0_SCALES16(p)                                                           \
  _mm512_castsi512_ps(_mm512_slli_epi32(                                                  \
      _mm512_cvtepu8_epi32(_mm_subs_epu8(                                                 \
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), _mm_set1_epi8(1))),       \
      23))

// Q3KP: the 16 rows' signed scales sc = code - 32 of each half of a block (out[0] the first
// half's, out[1] the second's), as int8 bytes in row order, from its packed scale bytes at s
// (Q3KP::ScaleOffset; Q3KCode): each half's nibble of the lows, its 2 bits of the highs (rows 0-7
// from their low nibbles, 8-15 from their high ones) above it. 13 operations for the block's 32
// scales; SSE2 only, so every x86 kernel inlines it whatever its target.
__attribute__((always_inline)) inline void Q3KScalePair(const uint8_t* s, __m128i* out) {
  const __m128i nib = _mm_set1_epi8(0x0f), top = _mm_set1_epi8(0x30), k32 = _mm_set1_epi8(32);
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i h8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 16));
  const __m128i hi = _mm_unpacklo_epi64(h8, _mm_srli_epi16(h8, 4));  // row r's 4 bits in byte r
  // (bits 0-1 or 2-3 of each byte to bits 4-5 by a 16-bit shift: what crosses bytes is masked.)
  out[0] = _mm_sub_epi8(
      _mm_or_si128(_mm_and_si128(lo, nib), _mm_and_si128(_mm_slli_epi16(hi, 4), top)), k32);
  out[1] = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(_mm_srli_epi16(lo, 4), nib),
                                     _mm_and_si128(_mm_slli_epi16(hi, 2), top)),
                        k32);
}

// Group g's value bytes from the planes, for a vector type V and its intrinsics' prefix P (the
// same operations on 16-bit lanes: every shift is at most 4 and the masks keep only bits that
// came from the same byte):
//   Q6KP: (L[g/2] >> 4(g%2)) & 15 | ((H[g/4] >> 2(g%4)) & 3) << 4, minus 32;
//   Q5KP: (L[g/2] >> 4(g%2)) & 15 | ((H >> g) & 1) << 4, minus 16;
//   IQ4X, IQ4N, MXF4 (kLut): Q::kLevels[(L[g/2] >> 4(g%2)) & 15], one byte shuffle (the table in
//   every 16 bytes);
//   Q3KP: (L[g/4] >> 2(g%4)) & 3 | ((H >> g) & 1) << 2, minus 4;
//   Q2KP: (L[g/4] >> 2(g%4)) & 3, the value q itself.
// kCodes: the unsigned codes (Q6KP: value + 32, Q5KP: n, Q3KP: value + 4, Q2KP: q, IQ4X and
// IQ4N, MXF4: level + 128), without the subtraction (of kCodeOffset).
#define FFLITE_UNPACK_GROUP(V, LOAD, SRLI, SLLI, AND, OR, SUB, SET1, LOOKUP)               \
  if constexpr (Q::kType == QuantType::kQ2KP) { /* the code is the value */                \
    V f = LOAD(reinterpret_cast<const V*>(blk + 64 * (g / 4) + o));                        \
    if (g % 4 != 0) f = SRLI(f, 2 * (g % 4)); /* bits 2j, 2j + 1 to bits 0, 1 */           \
    return AND(f, SET1(0x03));                                                             \
  } else if constexpr (Q::kType == QuantType::kQ3KP) {                                     \
    V f = LOAD(reinterpret_cast<const V*>(blk + 64 * (g / 4) + o));                        \
    if (g % 4 != 0) f = SRLI(f, 2 * (g % 4)); /* bits 2j, 2j + 1 to bits 0, 1 */           \
    V h = LOAD(reinterpret_cast<const V*>(blk + Q::kHighOffset + o)); /* bit g to 2 */     \
    h = g < 2 ? SLLI(h, 2 - g) : g == 2 ? h : SRLI(h, g - 2);                              \
    const V code = OR(AND(f, SET1(0x03)), AND(h, SET1(0x04)));                             \
    if constexpr (kCodes) return code;                                                     \
    return SUB(code, SET1(Q::kCodeOffset));                                                \
  } else {                                                                                 \
    V l = LOAD(reinterpret_cast<const V*>(blk + 64 * (g / 2) + o));                        \
    if (g % 2 == 1) l = SRLI(l, 4);                                                        \
    l = AND(l, SET1(0x0f));                                                                \
    if constexpr (Q::kLut) {                                                               \
      return LOOKUP(l);                                                                    \
    } else if constexpr (Q::kScheme == QuantType::kQ6K) {                                  \
      V h = LOAD(reinterpret_cast<const V*>(blk + Q::kHighOffset + 64 * (g / 4) + o));     \
      const int j = g % 4; /* bits 2j, 2j + 1 to bits 4, 5 */                              \
      h = j == 0 ? SLLI(h, 4) : j == 1 ? SLLI(h, 2) : j == 2 ? h : SRLI(h, 2);             \
      if constexpr (kCodes) return OR(l, AND(h, SET1(0x30)));                              \
      return SUB(OR(l, AND(h, SET1(0x30))), SET1(Q::kCodeOffset));                         \
    } else {                                                                               \
      V h = LOAD(reinterpret_cast<const V*>(blk + Q::kHighOffset + o)); /* bit g to 4 */   \
      h = g < 4 ? SLLI(h, 4 - g) : g == 4 ? h : SRLI(h, g - 4);                            \
      if constexpr (kCodes) return OR(l, AND(h, SET1(0x10)));                              \
      return SUB(OR(l, AND(h, SET1(0x10))), SET1(Q::kCodeOffset));                         \
    }                                                                                      \
  }

// Q's 16 levels, Q::kLevels (kIq4Levels, kMxfp4Levels; kCodes: each plus 128, as unsigned bytes),
// in the 16 bytes of an SSE vector.
template <typename Q, bool kCodes>
__attribute__((target("avx2"))) inline __m128i LevelTable() {
  const __m128i levels = _mm_loadu_si128(reinterpret_cast<const __m128i*>(Q::kLevels));
  return kCodes ? _mm_xor_si128(levels, _mm_set1_epi8(static_cast<char>(0x80))) : levels;
}
template <typename Q, bool kCodes>
__attribute__((target("avx2"))) inline __m128i LevelLookup128(__m128i i) {
  return _mm_shuffle_epi8(LevelTable<Q, kCodes>(), i);
}
template <typename Q, bool kCodes>
__attribute__((target("avx2"))) inline __m256i LevelLookup256(__m256i i) {
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(LevelTable<Q, kCodes>()), i);
}
template <typename Q, bool kCodes>
__attribute__((target("avx512f,avx512bw"))) inline __m512i LevelLookup512(__m512i i) {
  return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(LevelTable<Q, kCodes>()), i);
}

template <typename Q, bool kCodes = false>
__attribute__((target("avx2"))) inline __m128i LoadGroup128(const uint8_t* blk, int g, size_t o) {
  if constexpr (!Q::kPacked) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 64 * g + o));
  } else {
    FFLITE_UNPACK_GROUP(__m128i, _mm_loadu_si128, _mm_srli_epi16, _mm_slli_epi16, _mm_and_si128,
                        _mm_or_si128, _mm_sub_epi8, _mm_set1_epi8, (LevelLookup128<Q, kCodes>))
  }
}

template <typename Q, bool kCodes = false>
__attribute__((target("avx2"))) inline __m256i LoadGroup256(const uint8_t* blk, int g, size_t o) {
  if constexpr (!Q::kPacked) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * g + o));
  } else {
    FFLITE_UNPACK_GROUP(__m256i, _mm256_loadu_si256, _mm256_srli_epi16, _mm256_slli_epi16,
                        _mm256_and_si256, _mm256_or_si256, _mm256_sub_epi8, _mm256_set1_epi8,
                        (LevelLookup256<Q, kCodes>))
  }
}

template <typename Q, bool kCodes = false>
__attribute__((target("avx512f,avx512bw"))) inline __m512i LoadGroup512(const uint8_t* blk, int g,
                                                                       size_t o) {
  if constexpr (!Q::kPacked) {
    return _mm512_loadu_si512(blk + 64 * g + o);
  } else {
    FFLITE_UNPACK_GROUP(__m512i, _mm512_loadu_si512, _mm512_srli_epi16, _mm512_slli_epi16,
                        _mm512_and_si512, _mm512_or_si512, _mm512_sub_epi8, _mm512_set1_epi8,
                        (LevelLookup512<Q, kCodes>))
  }
}

#undef FFLITE_UNPACK_GROUP

}  // namespace
}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_QUANT_UNPACK_X86_H_
