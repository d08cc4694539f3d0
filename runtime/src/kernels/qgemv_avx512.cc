// The float-activation product over quantised panels (kernels/quant_types.h) for AVX-512 (F + BW +
// VL, with FMA and F16C): 16 f32 lanes for the 16 rows of a panel, the weights dequantised in
// registers and streamed from memory once per call for up to 4 tokens, prefetched in address order.
//
// I8: vpmovsxbd widens a quarter of a 64-byte group (4 rows × 4 k) exactly, multiplied by the
// group's 4 activations; the 4 products of a row are added at the end of each block. I4: vpermps
// looks each nibble up in a table of n - 8, one vector of the 16 rows per k, multiplied by that
// k's activation. Each block's sums are scaled by its 16 f16 scales into the panel accumulator.
// Every token sees the same sequence of operations whatever c and however its tokens are grouped,
// and every panel whatever the rows of the call, so results do not depend on c nor on how the
// rows are split among threads.
//
// The driver (panels, token groups, spans, the one-token passes of 4 panels, prefetch) is
// qgemv_impl.inc's; this file is its AVX-512 policy: the block sums and the panel's one vector.
//
// Measured on Zen 5 (one core of a shared 2-core VM, [11008, 4096] weights rotated through 300 MB,
// medians of 21 runs against a plain 64-byte-load read loop at 31-38 GB/s in the same run): c = 1
// reads I8 at 90-99% of that loop's bandwidth (one panel per pass: 60-68%). I4 was bound by the
// arithmetic at 70-84% (warm, from L2: 25-27 GB/s with a shift, a vpermps and an FMA per 16
// weights, the shifts and lookups sharing two vector pipes with the FMAs); with one vpsrlw per
// two nibbles (vpermps for the one in the low word, vpermw for the one in the high word) it runs
// at 33-38 GB/s warm and 86% of the read loop cold (medians of 21; ternlog/magic-number
// dequantisation, 2^23 | n, measured no faster). c = 4 is bound by the multiply-adds (one per
// weight and token): I8 at ~50%, I4 at ~33%.
#include "kernels/quant_kernels.h"
#include "kernels/quant_prefetch.h"

#if defined(FFLITE_QGEMV_X86)

// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined" vector that
// -Wmaybe-uninitialized flags once inlined (see gemv_avx512.cc): a false positive of GCC 12.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same at -O1 (the sanitizer builds)
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/quant_types.h"
#include "kernels/quant_unpack_x86.h"

// Per-function target attributes, as in kernels_avx2.cc: no AVX-512 code in shared inline
// functions.
#define FFLITE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

#define FFLITE_QGEMV_TARGET FFLITE_AVX512
#define FFLITE_QGEMV_NS qgemv_avx512
#include "kernels/qgemv_impl.inc"

namespace fflite {

namespace {

// I8: sums[t] = Σ_j q[r][j] · x[t][j] over the 32 k of one block (lane r), T tokens; xb[t]: the
// block's 32 activations of token t. vpmovsxbd widens a quarter of a group (rows 4m..4m+3 × the 4
// k of group g) exactly, so lane 4r' + i of part[t][m] sums row 4m + r' at k = 4g + i, against
// the group's 4 activations repeated; the 4 sums of a row are added at the end of the block.
// Groups [G0, G1) only (Q6K: 0-3 and 4-7, the block's halves with their own scales). Q: the
// packed Q6KP, Q5KP, IQ4X are first decoded, group by group, into the int8 values of Q6K / Q5K in
// a buffer that the plain loop then reads (its widening loads from memory, instead of a shuffle
// per quarter of the decoded register on the port the widening uses).
template <int T, size_t G0 = 0, size_t G1 = 8, typename Q = Q8>
FFLITE_AVX512 inline void BlockSumsI8(const uint8_t* blk, const float* const* xb, __m512* sums) {
  if constexpr (Q::kPacked) {
    alignas(64) uint8_t wide[8 * 64];
#pragma GCC unroll 8
    for (size_t g = G0; g < G1; ++g) {
      _mm512_store_si512(wide + 64 * g, LoadGroup512<Q>(blk, static_cast<int>(g), 0));
    }
    BlockSumsI8<T, G0, G1, Q8>(wide, xb, sums);
    return;
  }
  __m512 part[T][4];
  for (int t = 0; t < T; ++t) {
    for (int m = 0; m < 4; ++m) part[t][m] = _mm512_setzero_ps();
  }
#pragma GCC unroll 8
  for (size_t g = G0; g < G1; ++g) {
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_broadcast_f32x4(_mm_loadu_ps(xb[t] + 4 * g));
    for (int m = 0; m < 4; ++m) {
      const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 64 * g + 16 * m))));
      for (int t = 0; t < T; ++t) part[t][m] = _mm512_fmadd_ps(f, xv[t], part[t][m]);
    }
  }
  // Lane 4m + r' of the result = (i0 + i1) + (i2 + i3) of row r' in part[m]: adjacent lanes are
  // added twice, each time merging two vectors' halves.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int t = 0; t < T; ++t) {
    const __m512 s01 = _mm512_add_ps(_mm512_permutex2var_ps(part[t][0], even, part[t][1]),
                                     _mm512_permutex2var_ps(part[t][0], odd, part[t][1]));
    const __m512 s23 = _mm512_add_ps(_mm512_permutex2var_ps(part[t][2], even, part[t][3]),
                                     _mm512_permutex2var_ps(part[t][2], odd, part[t][3]));
    sums[t] = _mm512_add_ps(_mm512_permutex2var_ps(s01, even, s23),
                            _mm512_permutex2var_ps(s01, odd, s23));
  }
}

// vpermw's table: bf16(i mod 16 - 8) in word i, the high halves of the f32 n - 8 (whose low halves
// are 0), twice (vpermw reads 5 bits of the index). vpermw with the low words zeroed gives the
// f32 of the nibble at bits 16..19 of each lane.
alignas(64) constexpr uint16_t kTableW[32] = {
    0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80, 0x0000, 0x3f80, 0x4000,
    0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0, 0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040,
    0xc000, 0xbf80, 0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0};
constexpr __mmask32 kHighWords = 0xaaaaaaaau;

// part[t][I] += (nibble at bit kShift of each lane of v, through `table`) · x[t][j].
template <int T, int I, int kShift>
FFLITE_AVX512 inline void NibbleFma(__m512i v, __m512 table, const float* const* xb, size_t j,
                                   __m512 (*part)[4]) {
  const __m512i index = kShift == 0 ? v : _mm512_srli_epi32(v, kShift);
  const __m512 f = _mm512_permutexvar_ps(index, table);  // uses the low 4 bits of each lane
  for (int t = 0; t < T; ++t) part[t][I] = _mm512_fmadd_ps(f, _mm512_set1_ps(xb[t][j]), part[t][I]);
}

// I4: sums[t] as for I8. vpermps looks each nibble up in a 16-entry table of n - 8 as f32 (one
// instruction where sign extension and conversion take three), one vector of the 16 rows per k
// (from 3 tokens on, vpermw for half of the nibbles, see BlockSumsI4Panels: the same weights);
// part[t][i] takes the k = i mod 4 of the block.
template <int T>
FFLITE_AVX512 inline void BlockSumsI4(const uint8_t* blk, const float* const* xb, __m512* sums) {
  const __m512 table = _mm512_setr_ps(-8.0f, -7.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f, 0.0f,
                                      1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f);
  __m512 part[T][4];
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < 4; ++i) part[t][i] = _mm512_setzero_ps();
  }
  // Chunk c: low nibbles are group c (k = 4c + i), high nibbles group c + 4 (k = 16 + 4c + i).
  if constexpr (T >= 3) {
    // 3+ tokens: one vpsrlw by 4s serves the nibbles at bits 4s and 16 + 4s, as in
    // BlockSumsI4Panels (the same weights, the same order of FMAs into each part[t][i]).
    const __m512i table_w = _mm512_load_si512(kTableW);
#pragma GCC unroll 4
    for (size_t c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(blk + 64 * c);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int n_lo = (s >> 1) + 4 * (s & 1), n_hi = n_lo + 2;
        const size_t k_lo = 4 * c + (n_lo & 3) + 16 * (n_lo >> 2);
        const size_t k_hi = 4 * c + (n_hi & 3) + 16 * (n_hi >> 2);
        const __m512i u = s == 0 ? v : _mm512_srli_epi16(v, 4 * s);
        const __m512 f_lo = _mm512_permutexvar_ps(u, table);
        const __m512 f_hi =
            _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kHighWords, u, table_w));
        for (int t = 0; t < T; ++t) {
          const int i_lo = n_lo & 3, i_hi = n_hi & 3;
          part[t][i_lo] = _mm512_fmadd_ps(f_lo, _mm512_set1_ps(xb[t][k_lo]), part[t][i_lo]);
          part[t][i_hi] = _mm512_fmadd_ps(f_hi, _mm512_set1_ps(xb[t][k_hi]), part[t][i_hi]);
        }
      }
    }
  } else {
    // 1-2 tokens: one shift and vpermps per nibble (measured faster here at c = 2, 10%).
#pragma GCC unroll 4
    for (size_t c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(blk + 64 * c);
      NibbleFma<T, 0, 0>(v, table, xb, 4 * c + 0, part);
      NibbleFma<T, 1, 8>(v, table, xb, 4 * c + 1, part);
      NibbleFma<T, 2, 16>(v, table, xb, 4 * c + 2, part);
      NibbleFma<T, 3, 24>(v, table, xb, 4 * c + 3, part);
      NibbleFma<T, 0, 4>(v, table, xb, 16 + 4 * c + 0, part);
      NibbleFma<T, 1, 12>(v, table, xb, 16 + 4 * c + 1, part);
      NibbleFma<T, 2, 20>(v, table, xb, 16 + 4 * c + 2, part);
      NibbleFma<T, 3, 28>(v, table, xb, 16 + 4 * c + 3, part);
    }
  }
  for (int t = 0; t < T; ++t) {
    sums[t] = _mm512_add_ps(_mm512_add_ps(part[t][0], part[t][1]),
                            _mm512_add_ps(part[t][2], part[t][3]));
  }
}

// BlockSumsI4<1> for P panels at blk + j·stride (j < P) at once: each activation is broadcast once
// for all P panels; each panel's sums get exactly BlockSumsI4<1>'s operations in its order, with
// the same weights (n - 8 exactly) found with fewer shifts: one vpsrlw by s (0, 4, 8, 12) serves
// the nibbles at bits s and 16 + s of each lane. vpermps looks up the one at s (the low 4 bits of
// the lane); vpermw, its low words zeroed, the one at 16 + s (the low 5 bits of the lane's high
// word, through a 32-word table of bf16(n - 8) repeated twice, whose bits are the f32's high half).
// Per 2 × 16 weights: 3/4 shift, 2 lookups and 2 FMAs, where BlockSumsI4<1> takes 7/4 shifts.
template <int P>
FFLITE_AVX512 inline void BlockSumsI4Panels(const uint8_t* blk, size_t stride, const float* xb,
                                           __m512* sums) {
  const __m512 table = _mm512_setr_ps(-8.0f, -7.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f, 0.0f,
                                      1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f);
  const __m512i table_w = _mm512_load_si512(kTableW);
  __m512 part[P][4];
  for (int j = 0; j < P; ++j) {
    for (int i = 0; i < 4; ++i) part[j][i] = _mm512_setzero_ps();
  }
#pragma GCC unroll 4
  for (size_t c = 0; c < 4; ++c) {
    __m512i v[P];
    for (int j = 0; j < P; ++j) v[j] = _mm512_loadu_si512(blk + j * stride + 64 * c);
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      // Shift 4s: the nibble at bit 4s of the lane (shift 8(n mod 4) + 4(n / 4) for n = 2(s mod 2)
      // + s / 2 in BlockSumsI4's order; k = 4c + (n mod 4) + 16(n / 4)) and the one at 16 + 4s.
      const int n_lo = (s >> 1) + 4 * (s & 1);  // nibble index n with shift 4s
      const int n_hi = n_lo + 2;                 // shift 16 + 4s
      const __m512 x_lo = _mm512_set1_ps(xb[4 * c + (n_lo & 3) + 16 * (n_lo >> 2)]);
      const __m512 x_hi = _mm512_set1_ps(xb[4 * c + (n_hi & 3) + 16 * (n_hi >> 2)]);
      for (int j = 0; j < P; ++j) {
        const __m512i u = s == 0 ? v[j] : _mm512_srli_epi16(v[j], 4 * s);
        const __m512 f_lo = _mm512_permutexvar_ps(u, table);
        const __m512 f_hi =
            _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kHighWords, u, table_w));
        part[j][n_lo & 3] = _mm512_fmadd_ps(f_lo, x_lo, part[j][n_lo & 3]);
        part[j][n_hi & 3] = _mm512_fmadd_ps(f_hi, x_hi, part[j][n_hi & 3]);
      }
    }
  }
  for (int j = 0; j < P; ++j) {
    sums[j] = _mm512_add_ps(_mm512_add_ps(part[j][0], part[j][1]),
                            _mm512_add_ps(part[j][2], part[j][3]));
  }
}

// Tokens per group: the group's weights are dequantised once for all its tokens. 4 tokens × 4
// partial sums + 4 panel accumulators + the widened, converted vectors and the activations fit
// the 32 zmm registers. Tokens per batch: the groups that share one pass over memory; with more
// than one group, a panel is done in spans of kSpanBlocks blocks (I8: 4 KiB), each span by every
// group in turn (from L1) before the next, so the weights stream from memory at a steady rate.
struct Avx512 {
  static constexpr int kMaxTokens = 4;
  static constexpr size_t kBatchTokens = 16;
  static constexpr size_t kSpanBlocks = 8;
  static constexpr bool kPrefetch = true;
  static constexpr bool kOneTokenPasses = true;
  // The panel's 16 rows, one per lane.
  struct Acc {
    __m512 v;
  };
  FFLITE_AVX512 static Acc Zero() { return {_mm512_setzero_ps()}; }

  template <typename Q>
  static constexpr size_t DecodedBytes() {
    return 0;
  }
  template <typename Q>
  static void DecodeBlock(const uint8_t* /*blk*/, uint8_t* /*out*/) {}

  template <int T, typename Q>
  FFLITE_AVX512 static void AddBlock(const uint8_t* blk, const float* const* xb,
                                     const uint8_t* scales, const uint8_t* super, Acc* acc) {
    if constexpr (Q::kScheme == QuantType::kQ6K) {
      __m512 lo[T], hi[T], s_lo, s_hi;
      BlockSumsI8<T, 0, 4, Q>(blk, xb, lo);
      BlockSumsI8<T, 4, 8, Q>(blk, xb, hi);
      K6Scales<Q>(scales, super, &s_lo, &s_hi);
      for (int t = 0; t < T; ++t) {
        acc[t].v = _mm512_fmadd_ps(lo[t], s_lo, acc[t].v);
        acc[t].v = _mm512_fmadd_ps(hi[t], s_hi, acc[t].v);
      }
      return;
    }
    __m512 sums[T];
    if constexpr (Q::kBits == 4) {
      BlockSumsI4<T>(blk, xb, sums);
    } else {
      BlockSumsI8<T, 0, 8, Q>(blk, xb, sums);
    }
    if constexpr (HasMin<Q>()) {
      __m512 scale, offset;
      KScales(scales, super, static_cast<float>(Q::kMinOffset), &scale, &offset);
      for (int t = 0; t < T; ++t) {
        acc[t].v = _mm512_fmadd_ps(sums[t], scale, acc[t].v);
        acc[t].v = _mm512_fmadd_ps(offset, _mm512_set1_ps(BlockSum(xb[t])), acc[t].v);
      }
    } else {
      const __m512 scale = Q8Scales<Q>(scales);
      for (int t = 0; t < T; ++t) acc[t].v = _mm512_fmadd_ps(sums[t], scale, acc[t].v);
    }
  }

  template <int P, typename Q>
  FFLITE_AVX512 static void AddBlockPanels(const uint8_t* blk, uint64_t panel_bytes,
                                           const float* const* xb, const uint8_t* scales,
                                           const uint8_t* super, Acc* acc) {
    if constexpr (Q::kScheme == QuantType::kQ6K) {
#pragma GCC unroll 4
      for (int j = 0; j < P; ++j) {
        __m512 lo, hi, s_lo, s_hi;
        BlockSumsI8<1, 0, 4, Q>(blk + j * panel_bytes, xb, &lo);
        BlockSumsI8<1, 4, 8, Q>(blk + j * panel_bytes, xb, &hi);
        K6Scales<Q>(scales + j * panel_bytes, super + j * panel_bytes, &s_lo, &s_hi);
        acc[j].v = _mm512_fmadd_ps(lo, s_lo, acc[j].v);
        acc[j].v = _mm512_fmadd_ps(hi, s_hi, acc[j].v);
      }
      return;
    }
    __m512 sums[P];
    if constexpr (Q::kBits == 4) {
      BlockSumsI4Panels<P>(blk, panel_bytes, xb[0], sums);
    } else {
#pragma GCC unroll 4
      for (int j = 0; j < P; ++j) BlockSumsI8<1, 0, 8, Q>(blk + j * panel_bytes, xb, &sums[j]);
    }
    if constexpr (HasMin<Q>()) {
      const __m512 sum_x = _mm512_set1_ps(BlockSum(xb[0]));
      for (int j = 0; j < P; ++j) {
        __m512 scale, offset;
        KScales(scales + j * panel_bytes, super + j * panel_bytes,
                static_cast<float>(Q::kMinOffset), &scale, &offset);
        acc[j].v = _mm512_fmadd_ps(sums[j], scale, acc[j].v);
        acc[j].v = _mm512_fmadd_ps(offset, sum_x, acc[j].v);
      }
    } else {
      for (int j = 0; j < P; ++j) {
        const __m512 scale = Q8Scales<Q>(scales + j * panel_bytes);
        acc[j].v = _mm512_fmadd_ps(sums[j], scale, acc[j].v);
      }
    }
  }

  // Q4K, Q5K: the 16 rows' scales s = d·sc (exact) and offsets steps·s - dmin·m (steps·s and
  // dmin·m exact, one rounding; steps = kMinOffset), with which Σ W·x = s·Σ(n - steps)·x +
  // offset·Σx.
  FFLITE_AVX512 static void KScales(const uint8_t* scales, const uint8_t* super, float steps,
                                    __m512* scale, __m512* offset) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(super)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(super + 32)));
    const __m512 sc = _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales))));
    const __m512 m = _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16))));
    *scale = _mm512_mul_ps(d, sc);
    *offset = _mm512_fmsub_ps(_mm512_set1_ps(steps), *scale, _mm512_mul_ps(dmin, m));
  }
  // The Q8 scheme: the 16 rows' scales of a block (f16; MXF4: E8M0 bytes).
  template <typename Q>
  FFLITE_AVX512 static __m512 Q8Scales(const uint8_t* scales) {
    if constexpr (HasE8m0Scales<Q>()) {
      return FFLITE_E8M0_SCALES16(scales);
    } else {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
    }
  }
  // Q6K: the 16 rows' scales d·sc of the block's two halves (exact; the bytes' bits in
  // Q::kScaleMask).
  template <typename Q>
  FFLITE_AVX512 static void K6Scales(const uint8_t* scales, const uint8_t* super, __m512* lo,
                                     __m512* hi) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(super)));
    __m512i sc[2];
    if constexpr (HasPackedScales<Q>()) {  // Q3KP: its 6-bit codes
      __m128i q3[2];
      Q3KScalePair(scales, q3);
      sc[0] = _mm512_cvtepi8_epi32(q3[0]);
      sc[1] = _mm512_cvtepi8_epi32(q3[1]);
    } else {
      sc[0] = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
      sc[1] = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16)));
    }
    if constexpr (Q::kScaleMask != 0xff) {  // after the widening (its load an operand)
      for (__m512i& v : sc) v = _mm512_and_si512(v, _mm512_set1_epi32(Q::kScaleMask));
    }
    *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc[0]));
    *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc[1]));
  }
  // Σ of a block's 32 activations.
  FFLITE_AVX512 static float BlockSum(const float* xb) {
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(xb), _mm512_loadu_ps(xb + 16)));
  }

  // Masked loads and stores: nothing past row n is read or written.
  FFLITE_AVX512 static void Store(const Acc& acc, const float* bias, size_t r0, size_t n,
                                  float* yt) {
    const __mmask16 row_mask =
        n >= kQuantPanelRows ? 0xffff : static_cast<__mmask16>((1u << n) - 1u);
    __m512 v = acc.v;
    if (bias != nullptr) v = _mm512_add_ps(_mm512_maskz_loadu_ps(row_mask, bias + r0), v);
    _mm512_mask_storeu_ps(yt, row_mask, v);
  }
};

}  // namespace

FFLITE_AVX512 void QGemvAvx512(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                               const float* bias, const float* x, size_t x_stride, float* y,
                               size_t y_stride) {
  qgemv_avx512::QGemvOf<Avx512>(c, k, rows, w, type, bias, x, x_stride, y, y_stride);
}

}  // namespace fflite

#endif  // FFLITE_QGEMV_X86
