// The gemm engine's AVX-512 microkernels (gemm.h): 12 tokens × 32 channels, 24 zmm accumulators,
// two panel loads and 12 broadcasts per unit. f32: vfmadd231ps (one k per unit); bf16:
// vdpbf16ps (a pair of k per unit, twice the multiply-adds per instruction); and the f32 kernel
// over 16-bit panels of f16 or bf16 weights, widened as they are loaded. Each has a streaming
// form, which prefetches the panel ahead, and an ahead form, which prefetches the next pass's
// panels while it computes on panels already in L2. One tile source (gemm_avx512_tile.inc) for
// all, in one namespace per kernel; every function here carries its target attribute (the
// 16-bit-panel and bf16 kernels take the f32 kernel's Step or LoadUnit, whose target is a subset
// of theirs), so no AVX-512 code sits in an inline function without one.
#include "kernels/gemm.h"

#if defined(FFLITE_GEMM_X86)

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's intrinsics; see gemv_avx512.cc
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same at -O1 (the sanitizer builds)
#endif

#include <immintrin.h>

#include <cstddef>
#include <algorithm>
#include <cstdint>

namespace fflite {

namespace {
// How far ahead of its loads a streaming call (GemmKernel::stream, the first tile's pass over a
// group of panels) prefetches the panel, into L2. Measured on an Intel Xeon VM (AVX-512, family 6
// model 207, 2 MiB L2), one thread, 128 tokens, matrices of Llama ([11008, 4096], [4096, 11008])
// and BERT ([768, 3072]) rotating through 3 copies, 11-15 rounds alternated, % of the same
// round's in-L1 microkernel rate: no prefetch 70-87%; 8 KiB ahead into L2 79-94%, 7-15 points
// above no prefetch in each of 6 paired runs; 2 KiB ahead into L1 72-93%, alike whether every
// tile prefetches or the first only; 4 and 16 KiB into L2 alike. The hardware prefetchers alone
// left the first tile waiting on the panels.
// On a Zen 5 VM (1 MiB L2), a throwaway driver of the stream form over qwen-moe's routed expert
// matrices (60 x [1408, 2048] x 2 and [2048, 1408], 1039 MB of bf16 pairs in huge pages, one tile
// of 8 tokens each, one thread, medians of 11 in one process): 4, 8, 16, 32 and 64 KiB ahead into
// L2, and 8 KiB with T0 or NTA, within 4% of each other (39-52 ms across runs); no prefetch 4%
// faster to 8% slower than 8 KiB in three runs; 0.5-2 KiB ahead 14-27% slower. All of them read at
// 63-80% of the rate of a plain AVX-512 sum over the same bytes in the same run (31-37 ms); one
// token 85-86% of it (Llama's f32 matrices), so what is left is the core overlapping the tile's
// multiply-adds with the misses, not the prefetch. Blocking such a tile's k (128-512 units) was
// 16-27% slower than one pass over whole k (GemmBlock's whole_k), and a loop reading the tile's
// tokens at their own count per unit instead of 12 (less of x through L1) 0-5% faster: neither
// kept.
constexpr size_t kPrefetchBytes = 8192;
}  // namespace

namespace gemm_avx512_f32 {
namespace {
constexpr size_t kMr = 12, kNr = 32, kUnitBytes = kNr * 4;
#define FFLITE_GEMM_TARGET __attribute__((target("avx512f,fma")))
FFLITE_GEMM_TARGET inline void LoadUnit(const uint32_t* w, size_t u, __m512* w0, __m512* w1) {
  *w0 = _mm512_load_ps(reinterpret_cast<const float*>(w + u * kNr));
  *w1 = _mm512_load_ps(reinterpret_cast<const float*>(w + u * kNr + 16));
}
FFLITE_GEMM_TARGET inline __m512 Step(__m512 acc, __m512 w, uint32_t x) {
  return _mm512_fmadd_ps(w, _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(x))), acc);
}
#include "kernels/gemm_avx512_tile.inc"
#undef FFLITE_GEMM_TARGET
}  // namespace
}  // namespace gemm_avx512_f32

namespace gemm_avx512_bf16 {
namespace {
constexpr size_t kMr = 12, kNr = 32, kUnitBytes = kNr * 4;
#define FFLITE_GEMM_TARGET __attribute__((target("avx512f,avx512bf16,fma")))
using gemm_avx512_f32::LoadUnit;  // the same 128-byte units, as pairs of bf16
FFLITE_GEMM_TARGET inline __m512 Step(__m512 acc, __m512 w, uint32_t x) {
  return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(w),
                          (__m512bh)_mm512_set1_epi32(static_cast<int>(x)));
}
#include "kernels/gemm_avx512_tile.inc"
#undef FFLITE_GEMM_TARGET
}  // namespace
}  // namespace gemm_avx512_bf16

// The f32 kernel over 16-bit panels (GemmKernel::panel F16 or BF16): each weight widened to f32 as
// it is loaded (exact), then the f32 kernel's vfmadd231ps in its order: its bits from half the
// bytes. f16: vcvtph2ps of each half of the unit's 64 bytes. bf16: in channel pairs
// (paired_halves; word j holds channel j low, j + 16 high), a shift and a mask.
namespace gemm_avx512_f16w {
namespace {
constexpr size_t kMr = 12, kNr = 32, kUnitBytes = kNr * 2;
#define FFLITE_GEMM_TARGET __attribute__((target("avx512f,fma")))
FFLITE_GEMM_TARGET inline void LoadUnit(const uint32_t* w, size_t u, __m512* w0, __m512* w1) {
  const char* unit = reinterpret_cast<const char*>(w) + u * kUnitBytes;
  *w0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit)));
  *w1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 32)));
}
using gemm_avx512_f32::Step;  // the f32 kernel's vfmadd231ps
#include "kernels/gemm_avx512_tile.inc"
#undef FFLITE_GEMM_TARGET
}  // namespace
}  // namespace gemm_avx512_f16w

namespace gemm_avx512_bf16w {
namespace {
constexpr size_t kMr = 12, kNr = 32, kUnitBytes = kNr * 2;
#define FFLITE_GEMM_TARGET __attribute__((target("avx512f,fma")))
FFLITE_GEMM_TARGET inline void LoadUnit(const uint32_t* w, size_t u, __m512* w0, __m512* w1) {
  const __m512i pairs = _mm512_loadu_si512(reinterpret_cast<const char*>(w) + u * kUnitBytes);
  *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  *w1 = _mm512_castsi512_ps(_mm512_and_si512(pairs, high));
}
using gemm_avx512_f32::Step;
#include "kernels/gemm_avx512_tile.inc"
#undef FFLITE_GEMM_TARGET
}  // namespace
}  // namespace gemm_avx512_bf16w

// The entry points (gemm.h): each kernel's microkernel and its streaming form.
#define FFLITE_GEMM_ENTRY(name, features, ns, stream)                                           \
  __attribute__((target(features))) void name(                                                  \
      size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w, const float* bias, \
      bool accumulate, bool clamp, float out_min, float* y, size_t y_stride) {                  \
    ns::Microkernel<stream>(m, n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride);  \
  }
FFLITE_GEMM_ENTRY(GemmMicrokernelAvx512, "avx512f,fma", gemm_avx512_f32, false)
FFLITE_GEMM_ENTRY(GemmMicrokernelAvx512Stream, "avx512f,fma", gemm_avx512_f32, true)
FFLITE_GEMM_ENTRY(GemmMicrokernelAvx512Bf16, "avx512f,avx512bf16,fma", gemm_avx512_bf16, false)
FFLITE_GEMM_ENTRY(GemmMicrokernelAvx512Bf16Stream, "avx512f,avx512bf16,fma", gemm_avx512_bf16,
                  true)
FFLITE_GEMM_ENTRY(GemmMicrokernelAvx512F16w, "avx512f,fma", gemm_avx512_f16w, false)
FFLITE_GEMM_ENTRY(GemmMicrokernelAvx512F16wStream, "avx512f,fma", gemm_avx512_f16w, true)
FFLITE_GEMM_ENTRY(GemmMicrokernelAvx512Bf16w, "avx512f,fma", gemm_avx512_bf16w, false)
FFLITE_GEMM_ENTRY(GemmMicrokernelAvx512Bf16wStream, "avx512f,fma", gemm_avx512_bf16w, true)
#undef FFLITE_GEMM_ENTRY

// Their ahead forms (GemmKernel::ahead): the same sums, with a range of the next pass's panels
// prefetched into L2 a few lines per unit.
#define FFLITE_GEMM_AHEAD_ENTRY(name, features, ns)                                             \
  __attribute__((target(features))) void name(                                                  \
      size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w, const float* bias, \
      bool accumulate, bool clamp, float out_min, float* y, size_t y_stride, const void* ahead,  \
      size_t ahead_bytes) {                                                                     \
    ns::Microkernel<false, true>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,        \
                                 y_stride, static_cast<const char*>(ahead),                     \
                                 (ahead_bytes + 63) / 64);                                      \
  }
FFLITE_GEMM_AHEAD_ENTRY(GemmMicrokernelAvx512Ahead, "avx512f,fma", gemm_avx512_f32)
FFLITE_GEMM_AHEAD_ENTRY(GemmMicrokernelAvx512Bf16Ahead, "avx512f,avx512bf16,fma",
                        gemm_avx512_bf16)
FFLITE_GEMM_AHEAD_ENTRY(GemmMicrokernelAvx512F16wAhead, "avx512f,fma", gemm_avx512_f16w)
FFLITE_GEMM_AHEAD_ENTRY(GemmMicrokernelAvx512Bf16wAhead, "avx512f,fma", gemm_avx512_bf16w)
#undef FFLITE_GEMM_AHEAD_ENTRY

// --- Packing a tile of 12 tokens: 16 units of every token at once, a 16 × 16 transpose. ---

namespace gemm_avx512_pack {
namespace {
#define FFLITE_PACK_TARGET __attribute__((target("avx512f")))
constexpr size_t kMr = 12;

// r[i] lane j -> r[j] lane i, for the 16 × 16 matrix of 32-bit values in r.
FFLITE_PACK_TARGET inline void Transpose16(__m512i r[16]) {
  __m512i t[16];
  for (size_t p = 0; p < 8; ++p) {
    t[2 * p] = _mm512_unpacklo_epi32(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm512_unpackhi_epi32(r[2 * p], r[2 * p + 1]);
  }
  // s[4q + c], 128-bit lane l: column 4l + c of rows 4q .. 4q + 3.
  __m512i s[16];
  for (size_t q = 0; q < 4; ++q) {
    s[4 * q] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    s[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    s[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    s[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  for (size_t c = 0; c < 4; ++c) {
    const __m512i a = _mm512_shuffle_i32x4(s[c], s[4 + c], 0x88);   // lanes 0, 2 of each
    const __m512i b = _mm512_shuffle_i32x4(s[c], s[4 + c], 0xdd);   // lanes 1, 3
    const __m512i a2 = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0x88);
    const __m512i b2 = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0xdd);
    r[c] = _mm512_shuffle_i32x4(a, a2, 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(a, a2, 0xdd);
    r[4 + c] = _mm512_shuffle_i32x4(b, b2, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(b, b2, 0xdd);
  }
}

inline __mmask16 FirstLanes(size_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << count) - 1);
}

// F32ToBf16 on 16 values (nearest even; a NaN stays a quiet NaN), in the low halves.
FFLITE_PACK_TARGET inline __m512i RoundBf16(__m512i u) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

// Units u0 .. u0 + 15 of token i as 16 lanes (zero past k).
template <bool kBf16>
FFLITE_PACK_TARGET inline __m512i LoadUnits(const float* row, size_t k, size_t u0) {
  if (!kBf16) return _mm512_maskz_loadu_epi32(FirstLanes(k - u0), row + u0);
  const size_t j = 2 * u0;  // < k
  const __m512i lo = RoundBf16(_mm512_maskz_loadu_epi32(FirstLanes(k - j), row + j));
  const __m512i hi = j + 16 < k ? RoundBf16(_mm512_maskz_loadu_epi32(FirstLanes(k - j - 16),
                                                                     row + j + 16))
                                : _mm512_setzero_si512();
  // The 32 bf16 values in order: units (value 2u low, value 2u + 1 high).
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(lo)),
                            _mm512_cvtepi32_epi16(hi), 1);
}

template <bool kBf16>
FFLITE_PACK_TARGET void PackTile(size_t m, size_t k, const float* x, size_t x_stride,
                                 uint32_t* tile) {
  const size_t units = kBf16 ? (k + 1) / 2 : k;
  for (size_t u0 = 0; u0 < units; u0 += 16) {
    __m512i r[16];
    for (size_t i = 0; i < 16; ++i) {
      r[i] = i < m ? LoadUnits<kBf16>(x + i * x_stride, k, u0) : _mm512_setzero_si512();
    }
    Transpose16(r);
    const size_t count = std::min<size_t>(16, units - u0);
    for (size_t j = 0; j < count; ++j) {
      _mm512_mask_storeu_epi32(tile + (u0 + j) * kMr, static_cast<__mmask16>(0x0fff), r[j]);
    }
  }
}
// The AMX kernel's tiles of 32 tokens (GemmKernel::x_rows): chunk c of 16 units holds each
// token's 16 units as one 64-byte row, the rows of an AMX tile; no transpose.
FFLITE_PACK_TARGET void PackTileRows(size_t m, size_t k, const float* x, size_t x_stride,
                                     uint32_t* tile) {
  constexpr size_t kRowsMr = 32;
  const size_t values = (k + 1) / 2, units = (values + 15) / 16 * 16;
  for (size_t u0 = 0; u0 < units; u0 += 16) {
    uint32_t* chunk = tile + u0 * kRowsMr;
    for (size_t i = 0; i < kRowsMr; ++i) {
      const __m512i r = i < m && u0 < values ? LoadUnits<true>(x + i * x_stride, k, u0)
                                             : _mm512_setzero_si512();
      _mm512_storeu_si512(chunk + i * 16, r);
    }
  }
}

// --- Packing weights into 32-channel panels (GemmKernel::pack_panels): 16 units of 16 channels,
// or of 16 words of two 16-bit slots, at once through the same transpose; whole chunks only.
// Where `packed` is 64-byte aligned (the runtime's buffers are), with non-temporal stores: the
// panels go to memory without each line first being read into the cache, which the first call
// reads from memory anyway (a [11008, 4096] f32 matrix, one thread, Xeon VM: 23-26 ms against
// 40-44 with plain stores), then a store fence, so that they are visible before whatever tells
// another thread they are ready. ---
constexpr size_t kNr = 32;

inline bool Aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

FFLITE_PACK_TARGET inline void Store(void* p, __m512i v, bool stream) {
  if (stream) {
    _mm512_stream_si512(static_cast<__m512i*>(p), v);
  } else {
    _mm512_storeu_si512(p, v);
  }
}

// f32 panels from f32 weights (unit u: value u), or a BF16 kernel's pairs from bf16 weights
// (unit u: values 2u and 2u + 1, one 32-bit word as stored): 4 bytes a unit either way. Panels
// of units rounded up to a multiple of kAlign (the kernel's unit_align: 16 for AMX).
template <bool kPairs, size_t kAlign = 1>
FFLITE_PACK_TARGET size_t PackPanels(size_t rows, size_t k, const void* w, size_t first,
                                     size_t last, uint32_t* packed) {
  const size_t values = kPairs ? (k + 1) / 2 : k, units = (values + kAlign - 1) / kAlign * kAlign;
  const size_t whole = kPairs ? k / 32 * 16 : k / 16 * 16;
  const char* src = static_cast<const char*>(w);
  const size_t row_bytes = k * (kPairs ? 2 : 4);
  const bool stream = Aligned64(packed);
  for (size_t p = first; p < last; ++p) {
    uint32_t* panel = packed + p * units * kNr;
    for (size_t u0 = 0; u0 < whole; u0 += 16) {
      for (size_t h = 0; h < kNr; h += 16) {
        __m512i r[16];
        for (size_t i = 0; i < 16; ++i) {
          const size_t c = p * kNr + h + i;
          r[i] = c < rows ? _mm512_loadu_si512(src + c * row_bytes + u0 * 4)
                          : _mm512_setzero_si512();
        }
        Transpose16(r);
        for (size_t u = 0; u < 16; ++u) Store(panel + (u0 + u) * kNr + h, r[u], stream);
      }
    }
  }
  if (stream) _mm_sfence();
  return whole;
}

// Units u0 .. u0 + 15 of 16-bit row c, each in the low half of a 32-bit lane (zero past rows).
FFLITE_PACK_TARGET inline __m512i LoadHalves(const uint16_t* src, size_t rows, size_t k, size_t c,
                                             size_t u0) {
  if (c >= rows) return _mm512_setzero_si512();
  return _mm512_cvtepu16_epi32(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + c * k + u0)));
}

// 16-bit slots (units = k): 32-bit word j of a unit holds channels 2j and 2j + 1 (in order) or
// j and j + 16 (kPaired), low and high.
template <bool kPaired>
FFLITE_PACK_TARGET size_t PackHalfPanels(size_t rows, size_t k, const void* w, size_t first,
                                         size_t last, uint32_t* packed) {
  const size_t whole = k / 16 * 16;
  const uint16_t* src = static_cast<const uint16_t*>(w);
  const bool stream = Aligned64(packed);
  for (size_t p = first; p < last; ++p) {
    uint16_t* panel = reinterpret_cast<uint16_t*>(packed) + p * k * kNr;
    for (size_t u0 = 0; u0 < whole; u0 += 16) {
      __m512i r[16];
      for (size_t j = 0; j < 16; ++j) {
        const size_t lo = p * kNr + (kPaired ? j : 2 * j), hi = lo + (kPaired ? 16 : 1);
        r[j] = _mm512_or_si512(LoadHalves(src, rows, k, lo, u0),
                               _mm512_slli_epi32(LoadHalves(src, rows, k, hi, u0), 16));
      }
      Transpose16(r);
      for (size_t u = 0; u < 16; ++u) Store(panel + (u0 + u) * kNr, r[u], stream);
    }
  }
  if (stream) _mm_sfence();
  return whole;
}
#undef FFLITE_PACK_TARGET
}  // namespace
}  // namespace gemm_avx512_pack

// The packings of weights (gemm.h), each a packing above (the macro's last arguments) for one
// kernel's panels.
#define FFLITE_GEMM_PACK_PANELS(name, ...)                                                     \
  __attribute__((target("avx512f"))) size_t name(size_t rows, size_t k, const void* w,         \
                                                 size_t first, size_t last, uint32_t* packed) { \
    return gemm_avx512_pack::__VA_ARGS__(rows, k, w, first, last, packed);                     \
  }
FFLITE_GEMM_PACK_PANELS(GemmPackPanelsAvx512, PackPanels<false>)
FFLITE_GEMM_PACK_PANELS(GemmPackPanelsAvx512Bf16, PackPanels<true>)
FFLITE_GEMM_PACK_PANELS(GemmPackPanelsAmxBf16, PackPanels<true, 16>)
FFLITE_GEMM_PACK_PANELS(GemmPackPanelsAvx512F16w, PackHalfPanels<false>)
FFLITE_GEMM_PACK_PANELS(GemmPackPanelsAvx512Bf16w, PackHalfPanels<true>)
#undef FFLITE_GEMM_PACK_PANELS

__attribute__((target("avx512f"))) void GemmPackTileAvx512(size_t m, size_t k, const float* x,
                                                           size_t x_stride, uint32_t* tile) {
  gemm_avx512_pack::PackTile<false>(m, k, x, x_stride, tile);
}

__attribute__((target("avx512f"))) void GemmPackTileAvx512Bf16(size_t m, size_t k,
                                                               const float* x, size_t x_stride,
                                                               uint32_t* tile) {
  gemm_avx512_pack::PackTile<true>(m, k, x, x_stride, tile);
}

__attribute__((target("avx512f"))) void GemmPackTileAmxBf16(size_t m, size_t k, const float* x,
                                                            size_t x_stride, uint32_t* tile) {
  gemm_avx512_pack::PackTileRows(m, k, x, x_stride, tile);
}

}  // namespace fflite

#endif  // FFLITE_GEMM_X86
