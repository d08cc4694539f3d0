// The float-activation product over quantised panels (kernels/quant_types.h) for AVX2 + FMA3 +
// F16C: two ymm registers of 8 lanes hold the 16 rows of a panel, the weights dequantised in
// registers (I4: through L1) and streamed from memory once per call for 2 tokens, prefetched in
// address order.
//
// I8: vpmovsxbd widens 8 bytes of a 64-byte group (2 rows × 4 k) exactly, multiplied by the
// group's 4 activations; the 4 products of a row are added at the end of each block. I4: each
// block is first decoded to the I8 layout (vpshufb looks each nibble up in a 16-entry table, two
// nibbles per byte, no per-lane shifts), as f16 (n - 8 is exact in f16 and its low byte is 0, so
// the table holds its high byte and vpunpck{l,h}bw with zero makes the words), which vcvtph2ps
// reads from L1: one conversion and no widening per 8 weights; from there the arithmetic is I8's
// (the same f32 weights, the same FMAs in the same order). Each block's sums are scaled by its
// f16 scales into the panel accumulators. Every token sees the same sequence of operations
// whatever c and however its tokens are grouped, and every panel whatever the rows of the call,
// so results do not depend on c nor on how the rows are split among threads.
//
// The driver (panels, token groups, spans, the one-token passes, prefetch) is qgemv_impl.inc's;
// this file is its AVX2 policy: the block sums and how a panel's 16 rows are kept and stored.
//
// Measured on Zen 5 (one core of a shared 2-core VM, [11008, 4096] weights rotated through 300 MB,
// against a plain read loop in the same run; the machine was loaded, so ±5 points): this kernel is
// bound by its vector instructions here (~3 per 8 weights and token: widen or convert, convert,
// FMA; the AVX-512 kernel does 16 weights per instruction). Warm (128 rows, from L2), GB/s of
// weights, before -> after this version: I8 c = 1 30 -> 30 (the ceiling: 3 instructions per 8
// weights), c = 2 15 -> 21.5, c = 4 7.9 -> 10.9; I4 c = 1 11.4 -> 13.3, c = 2 9.8 -> 10.7, c = 3
// 5.3 -> 7.2, c = 4 4.9 -> 6.0. Cold (medians of 4 × 15 runs, % of the read loop): I8 c = 1
// 64% -> 75%, c = 4 21% -> 30%; I4 c = 1 33% -> 37%, c = 4 13% -> 15%.
// The shift-pair I4 decoding (~4 instructions per 8 weights), the int8 decoding (vpmovsxbd +
// vcvtdq2ps from the decoded bytes: 12.8 GB/s warm at c = 1) and 3 tokens per group (spills) were
// slower. On AVX2-only CPUs (8-lane FMA units at higher clocks) the balance differs.
#include "kernels/quant_kernels.h"
#include "kernels/quant_prefetch.h"

#if defined(FFLITE_QGEMV_X86)

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/quant_types.h"
#include "kernels/quant_unpack_x86.h"

// Per-function target attributes, as in kernels_avx2.cc: no AVX2 code in shared inline functions.
#define FFLITE_AVX2 __attribute__((target("avx2,fma,f16c")))

#define FFLITE_QGEMV_TARGET FFLITE_AVX2
#define FFLITE_QGEMV_NS qgemv_avx2
#include "kernels/qgemv_impl.inc"

namespace fflite {

namespace {

// Weights in a block of a panel (16 rows × 32 k): I8 bytes; I4 blocks are decoded to f16, twice.
constexpr size_t kI8BlockBytes = 8 * 64;

// I8: sums[t][h] = Σ_j q[8h + r][j] · x[t][j] over the 32 k of one block (lane r), T tokens; xb[t]:
// the block's 32 activations of token t. vpmovsxbd widens 8 bytes of a group (rows 2m, 2m + 1 ×
// the 4 k of group g) exactly, so lane 4r' + i of part[t][m] sums row 2m + r' at k = 4g + i,
// against the group's 4 activations repeated; the rows' 4 sums are added at the end of the block.
// (Sign-extending each byte in place instead costs two shifts per 8 weights, and the kernel was
// bound by them: 22 against 33 GB/s on warm I8 weights, one token, Zen 5.) kF16: blk holds the
// block's weights as f16 (DecodeI4BlockF16), converted by vcvtph2ps; the same f32 weights.
// Groups [G0, G1) only (Q6K: 0-3 and 4-7, the block's halves with their own scales). Q: the
// packed Q6KP, Q5KP and IQ4X are first decoded into the int8 values of Q6K / Q5K in a buffer that
// the plain loop then reads (as BlockSumsI8 of qgemv_avx512.cc).
template <int T, bool kF16 = false, size_t G0 = 0, size_t G1 = 8, typename Q = Q8>
FFLITE_AVX2 inline void BlockSumsI8(const uint8_t* blk, const float* const* xb,
                                    __m256 (*sums)[2]) {
  if constexpr (Q::kPacked) {
    alignas(32) uint8_t wide[8 * 64];
#pragma GCC unroll 8
    for (size_t g = G0; g < G1; ++g) {
      for (int h = 0; h < 2; ++h) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(wide + 64 * g + 32 * h),
                           LoadGroup256<Q>(blk, static_cast<int>(g), 32 * h));
      }
    }
    BlockSumsI8<T, false, G0, G1, Q8>(wide, xb, sums);
    return;
  }
  // hadd twice gives [r0 r2 r4 r6 | r1 r3 r5 r7] of 8 rows ((i0 + i1) + (i2 + i3) each); a
  // permutation puts them in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  // One token of I8: both halves at once (8 independent partial sums, measured 4% faster); else
  // half h (rows 8h..8h + 7) at a time, 4 partial sums per token, so that 2 tokens fit the
  // registers (and I4 at c = 1, measured 15% faster so). Each partial sum sees the same
  // operations either way.
  constexpr int kHalves = T == 1 && !kF16 ? 2 : 1;
  for (int h0 = 0; h0 < 2; h0 += kHalves) {
    __m256 part[T][4 * kHalves];
    for (int t = 0; t < T; ++t) {
      for (int m = 0; m < 4 * kHalves; ++m) part[t][m] = _mm256_setzero_ps();
    }
#pragma GCC unroll 8
    for (size_t g = G0; g < G1; ++g) {
      __m256 xv[T];
      for (int t = 0; t < T; ++t) {
        xv[t] = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(xb[t] + 4 * g));
      }
      for (int hm = 0; hm < 4 * kHalves; ++hm) {
        const int h = h0 + hm / 4, m = hm % 4;
        __m256 f;
        if constexpr (kF16) {
          // DecodeI4BlockF16's order within each 32 weights: m = 0, 2, 1, 3.
          f = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(
              blk + 2 * (64 * g + 32 * h + 8 * (2 * (m & 1) + (m >> 1))))));
        } else {
          f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
              reinterpret_cast<const __m128i*>(blk + 64 * g + 32 * h + 8 * m))));
        }
        for (int t = 0; t < T; ++t) part[t][hm] = _mm256_fmadd_ps(f, xv[t], part[t][hm]);
      }
    }
    for (int t = 0; t < T; ++t) {
      for (int hh = 0; hh < kHalves; ++hh) {
        const __m256* p = part[t] + 4 * hh;
        const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
        sums[t][h0 + hh] = _mm256_permutevar8x32_ps(s, order);
      }
    }
  }
}

// I4 -> f16: writes the block's 512 weights q = n - 8 as f16 (exact) to `out` (2 × 512 bytes) in
// the I8 layout (chunk c's low nibbles are group c, its high nibbles group c + 4, weight for
// weight), vpshufb looking each nibble up in a 16-entry table of the high byte of f16(n - 8) (its
// low byte is 0); within each 32 weights, the 8-weight vectors are in the order 0, 2, 1, 3
// (vpunpck{l,h}bw work within 128-bit lanes).
FFLITE_AVX2 inline void DecodeI4BlockF16(const uint8_t* blk, uint8_t* out) {
  const __m256i table = _mm256_setr_epi8(
      -56, -57, -58, -59, -60, -62, -64, -68, 0, 60, 64, 66, 68, 69, 70, 71,
      -56, -57, -58, -59, -60, -62, -64, -68, 0, 60, 64, 66, 68, 69, 70, 71);
  const __m256i low = _mm256_set1_epi8(0x0f);
  const __m256i zero = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (size_t i = 0; i < 8; ++i) {
    const size_t c = i / 2, h = i % 2;
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * c + 32 * h));
    const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
    const __m256i hi =
        _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
    uint8_t* o_lo = out + 2 * (64 * c + 32 * h);
    uint8_t* o_hi = out + 2 * (64 * (c + 4) + 32 * h);
    _mm256_store_si256(reinterpret_cast<__m256i*>(o_lo), _mm256_unpacklo_epi8(zero, lo));
    _mm256_store_si256(reinterpret_cast<__m256i*>(o_lo + 32), _mm256_unpackhi_epi8(zero, lo));
    _mm256_store_si256(reinterpret_cast<__m256i*>(o_hi), _mm256_unpacklo_epi8(zero, hi));
    _mm256_store_si256(reinterpret_cast<__m256i*>(o_hi + 32), _mm256_unpackhi_epi8(zero, hi));
  }
}

// Tokens per group: the group's weights are dequantised once for all its tokens. 2 tokens × 4
// partial sums (a half panel at a time, see BlockSumsI8) + the activations and the widened vector
// fit the 16 ymm registers. Tokens per batch: the groups that share one pass over memory; with
// more than one group (and always for I4, whose spans are decoded once for all groups), a panel
// is done in spans of kSpanBlocks blocks (I8: 4 KiB), each span by every group in turn (from L1)
// before the next, so the weights stream from memory at a steady rate. Prefetch in address order
// (the general path) and per panel stream (one token).
struct Avx2 {
  static constexpr int kMaxTokens = 2;
  static constexpr size_t kBatchTokens = 8;
  static constexpr size_t kSpanBlocks = 8;
  static constexpr bool kPrefetch = true;
  static constexpr bool kOneTokenPasses = true;
  // The panel's 16 rows: rows 8h..8h + 7 in v[h].
  struct Acc {
    __m256 v[2];
  };
  FFLITE_AVX2 static Acc Zero() { return {{_mm256_setzero_ps(), _mm256_setzero_ps()}}; }

  template <typename Q>
  static constexpr size_t DecodedBytes() {
    return Q::kBits == 4 ? 2 * kI8BlockBytes : 0;
  }
  template <typename Q>
  FFLITE_AVX2 static void DecodeBlock(const uint8_t* blk, uint8_t* out) {
    DecodeI4BlockF16(blk, out);
  }

  // acc[t].v[h] += sums · scale, half by half. I4: blk is the block decoded (DecodeBlock).
  template <int T, typename Q>
  FFLITE_AVX2 static void AddBlock(const uint8_t* blk, const float* const* xb,
                                   const uint8_t* scales, const uint8_t* super, Acc* acc) {
    if constexpr (Q::kScheme == QuantType::kQ6K) {
      __m256 lo[T][2], hi[T][2];
      BlockSumsI8<T, false, 0, 4, Q>(blk, xb, lo);
      BlockSumsI8<T, false, 4, 8, Q>(blk, xb, hi);
      [[maybe_unused]] __m128i q3[2];  // Q3KP: the block's scales, once for both row halves
      if constexpr (HasPackedScales<Q>()) Q3KScalePair(scales, q3);
      for (int h = 0; h < 2; ++h) {
        __m256 s_lo, s_hi;
        K6Scales<Q>(scales, super, h, q3, &s_lo, &s_hi);
        for (int t = 0; t < T; ++t) {
          acc[t].v[h] = _mm256_fmadd_ps(lo[t][h], s_lo, acc[t].v[h]);
          acc[t].v[h] = _mm256_fmadd_ps(hi[t][h], s_hi, acc[t].v[h]);
        }
      }
      return;
    }
    __m256 sums[T][2];
    BlockSumsI8<T, Q::kBits == 4, 0, 8, Q>(blk, xb, sums);
    if constexpr (HasMin<Q>()) {
      float sum_x[T];
      for (int t = 0; t < T; ++t) sum_x[t] = BlockSum(xb[t]);
      for (int h = 0; h < 2; ++h) {
        __m256 scale, offset;
        KScales(scales, super, h, static_cast<float>(Q::kMinOffset), &scale, &offset);
        for (int t = 0; t < T; ++t) {
          acc[t].v[h] = _mm256_fmadd_ps(sums[t][h], scale, acc[t].v[h]);
          acc[t].v[h] = _mm256_fmadd_ps(offset, _mm256_set1_ps(sum_x[t]), acc[t].v[h]);
        }
      }
    } else {
      for (int h = 0; h < 2; ++h) {
        const __m256 scale = Q8Scales<Q>(scales, h);
        for (int t = 0; t < T; ++t) {
          acc[t].v[h] = _mm256_fmadd_ps(sums[t][h], scale, acc[t].v[h]);
        }
      }
    }
  }

  // The Q8 scheme: rows 8h..8h + 7's scales of a block (f16; MXF4: E8M0 bytes).
  template <typename Q>
  FFLITE_AVX2 static __m256 Q8Scales(const uint8_t* scales, int h) {
    if constexpr (HasE8m0Scales<Q>()) {
      return FFLITE_E8M0_SCALES8(scales + 8 * h);
    } else {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * h)));
    }
  }
  // Q4K, Q5K: rows 8h..8h + 7's scales s = d·sc (exact) and offsets steps·s - dmin·m (one
  // rounding; steps = kMinOffset), with which Σ W·x = s·Σ(n - steps)·x + offset·Σx.
  FFLITE_AVX2 static void KScales(const uint8_t* scales, const uint8_t* super, int h, float steps,
                                  __m256* scale, __m256* offset) {
    const __m256 d =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(super + 16 * h)));
    const __m256 dmin =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(super + 32 + 16 * h)));
    const __m256 sc = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * h))));
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 16 + 8 * h))));
    *scale = _mm256_mul_ps(d, sc);
    *offset = _mm256_fmsub_ps(_mm256_set1_ps(steps), *scale, _mm256_mul_ps(dmin, m));
  }
  // Q6K: rows 8h..8h + 7's scales d·sc of the block's two halves (exact; the bytes' bits in
  // Q::kScaleMask; Q3KP: from q3, its Q3KScalePair).
  template <typename Q>
  FFLITE_AVX2 static void K6Scales(const uint8_t* scales, const uint8_t* super, int h,
                                   [[maybe_unused]] const __m128i* q3, __m256* lo, __m256* hi) {
    const __m256 d =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(super + 16 * h)));
    __m256i sc[2];
    if constexpr (HasPackedScales<Q>()) {  // Q3KP: rows 8h..8h + 7 of its unpacked codes
      for (int half = 0; half < 2; ++half) {
        sc[half] = _mm256_cvtepi8_epi32(h == 0 ? q3[half] : _mm_unpackhi_epi64(q3[half], q3[half]));
      }
    } else {
      sc[0] =
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * h)));
      sc[1] = _mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 16 + 8 * h)));
    }
    if constexpr (Q::kScaleMask != 0xff) {  // after the widening (its load an operand)
      for (__m256i& v : sc) v = _mm256_and_si256(v, _mm256_set1_epi32(Q::kScaleMask));
    }
    *lo = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc[0]));
    *hi = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc[1]));
  }
  // Σ of a block's 32 activations.
  FFLITE_AVX2 static float BlockSum(const float* xb) {
    __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8)),
                             _mm256_add_ps(_mm256_loadu_ps(xb + 16), _mm256_loadu_ps(xb + 24)));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }

  // Each panel's sums are scaled into its accumulators at once (few registers live). I4: the
  // block decoded here, panel by panel, the same f16 weights as DecodeBlock's.
  template <int P, typename Q>
  FFLITE_AVX2 static void AddBlockPanels(const uint8_t* blk, uint64_t panel_bytes,
                                         const float* const* xb, const uint8_t* scales,
                                         const uint8_t* super, Acc* acc) {
    if constexpr (Q::kScheme == QuantType::kQ6K) {
      for (int j = 0; j < P; ++j) {
        AddBlock<1, Q>(blk + j * panel_bytes, xb, scales + j * panel_bytes,
                       super + j * panel_bytes, acc + j);
      }
      return;
    }
    [[maybe_unused]] const float sum_x = HasMin<Q>() ? BlockSum(xb[0]) : 0.0f;
    for (int j = 0; j < P; ++j) {
      __m256 sums[1][2];
      if constexpr (Q::kBits == 4) {
        alignas(32) uint8_t q[2 * kI8BlockBytes];
        DecodeI4BlockF16(blk + j * panel_bytes, q);
        BlockSumsI8<1, true>(q, xb, sums);
      } else {
        BlockSumsI8<1, false, 0, 8, Q>(blk + j * panel_bytes, xb, sums);
      }
      const uint8_t* s = scales + j * panel_bytes;
      for (int h = 0; h < 2; ++h) {
        if constexpr (HasMin<Q>()) {
          __m256 scale, offset;
          KScales(s, super + j * panel_bytes, h, static_cast<float>(Q::kMinOffset), &scale,
                  &offset);
          acc[j].v[h] = _mm256_fmadd_ps(sums[0][h], scale, acc[j].v[h]);
          acc[j].v[h] = _mm256_fmadd_ps(offset, _mm256_set1_ps(sum_x), acc[j].v[h]);
        } else {
          const __m256 scale = Q8Scales<Q>(s, h);
          acc[j].v[h] = _mm256_fmadd_ps(sums[0][h], scale, acc[j].v[h]);
        }
      }
    }
  }

  // n < 16: the last, partial panel, through memory.
  FFLITE_AVX2 static void Store(const Acc& acc, const float* bias, size_t r0, size_t n,
                                float* yt) {
    if (n == kQuantPanelRows) {
      for (int h = 0; h < 2; ++h) {
        __m256 v = acc.v[h];
        if (bias != nullptr) v = _mm256_add_ps(_mm256_loadu_ps(bias + r0 + 8 * h), v);
        _mm256_storeu_ps(yt + 8 * h, v);
      }
    } else {
      float sums[kQuantPanelRows];
      _mm256_storeu_ps(sums, acc.v[0]);
      _mm256_storeu_ps(sums + 8, acc.v[1]);
      for (size_t r = 0; r < n; ++r) yt[r] = bias != nullptr ? bias[r0 + r] + sums[r] : sums[r];
    }
  }
};

}  // namespace

FFLITE_AVX2 void QGemvAvx2(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                           const float* bias, const float* x, size_t x_stride, float* y,
                           size_t y_stride) {
  qgemv_avx2::QGemvOf<Avx2>(c, k, rows, w, type, bias, x, x_stride, y, y_stride);
}

}  // namespace fflite

#endif  // FFLITE_QGEMV_X86
