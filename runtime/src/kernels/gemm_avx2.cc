// The gemm engine's AVX2 microkernel (gemm.h): 6 tokens × 16 channels, 12 ymm accumulators, two
// panel loads and 6 broadcasts per unit (vfmadd231ps), in the 16 ymm registers; its twins over
// 16-bit panels of f16 or bf16 weights, widened as they are loaded (2 more instructions per unit
// of 12 FMAs); a streaming form of all three, which prefetches the panel ahead; and its packing
// of a tile of activations (8 units at a time through an 8 × 8 transpose).
#include "kernels/gemm.h"

#if defined(FFLITE_GEMM_X86)

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#define FFLITE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace fflite {

namespace {

constexpr size_t kMr = 6, kNr = 16;
// How far ahead of its loads a streaming call (GemmKernel::stream) prefetches the panel, and into
// which cache. Measured on a Zen 4 VM, one thread, 30-60 matrices of 1408 × 2048 (an expert's)
// from memory, 4-14 tokens, against no prefetch (runs move by about 10%):
//  - 16-bit panels (32-byte units; the hardware prefetcher alone drew 5-8 GB/s): into L1 256 B
//    ahead +0-15%, 1024 B +5-15%, 2048 B +5-40%, 4096 B +0-20%; into L2 4-32 KiB ahead alike.
//  - f32 panels (64-byte units; 10-19 GB/s alone): into L1 any distance 0-15% slower; into L2
//    4 KiB ahead about equal, 8 KiB +12-23%, 16-32 KiB +10-20%.
constexpr size_t kPrefetchBytes = 2048, kPrefetchF32Bytes = 8192;

// Lane masks for the first n of 8 lanes (maskload / maskstore).
FFLITE_AVX2 inline __m256i FirstLanes(size_t n) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), index);
}

// y's 8 values at p (the first of m lanes where not kFull); plain loads and stores for a whole
// panel (n = 16): vmaskmovps is microcoded on AMD cores (about 5% of the kernel's time on Zen 4
// at 256 units per call, measured with perf).
template <bool kFull>
FFLITE_AVX2 inline __m256 LoadY(const float* p, __m256i m) {
  return kFull ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}
template <bool kFull>
FFLITE_AVX2 inline void StoreY(float* p, __m256i m, __m256 v) {
  if (kFull) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, m, v);
  }
}

// What the panels' slots hold: f32, f16 (widened by vcvtph2ps), or bf16 in channel pairs
// (word j: channel j low, j + 8 high; a shift and a mask widen both halves).
enum class Slots { kF32, kF16, kBf16Pairs };

// Unit u's 16 weights, channels 0-7 in w0 and 8-15 in w1, as f32 (widening is exact).
template <Slots kSlots>
FFLITE_AVX2 inline __attribute__((always_inline)) void LoadUnit(const uint32_t* w, size_t u,
                                                                __m256* w0, __m256* w1) {
  if (kSlots == Slots::kF32) {
    *w0 = _mm256_load_ps(reinterpret_cast<const float*>(w + u * kNr));
    *w1 = _mm256_load_ps(reinterpret_cast<const float*>(w + u * kNr + 8));
  } else if (kSlots == Slots::kF16) {
    const __m128i* p = reinterpret_cast<const __m128i*>(w + u * kNr / 2);
    *w0 = _mm256_cvtph_ps(_mm_load_si128(p));
    *w1 = _mm256_cvtph_ps(_mm_load_si128(p + 1));
  } else {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + u * kNr / 2));
    *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *w1 = _mm256_castsi256_ps(
        _mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
}

template <Slots kSlots, size_t M, bool kFull, bool kStream>
FFLITE_AVX2 inline __attribute__((always_inline)) void Tile(size_t n, size_t units,
                                                            const uint32_t* x, const uint32_t* w,
                                                            const float* bias, bool accumulate,
                                                            bool clamp, float out_min, float* y,
                                                            size_t y_stride) {
  const __m256i m0 = FirstLanes(n), m1 = FirstLanes(n > 8 ? n - 8 : 0);
  __m256 a0[M], a1[M];
  if (accumulate) {
#pragma GCC unroll 6
    for (size_t i = 0; i < M; ++i) {
      a0[i] = LoadY<kFull>(y + i * y_stride, m0);
      a1[i] = LoadY<kFull>(y + i * y_stride + 8, m1);
    }
  } else {
    const __m256 b0 = bias != nullptr ? LoadY<kFull>(bias, m0) : _mm256_setzero_ps();
    const __m256 b1 = bias != nullptr ? LoadY<kFull>(bias + 8, m1) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (size_t i = 0; i < M; ++i) {
      a0[i] = b0;
      a1[i] = b1;
    }
  }
  constexpr size_t kUnitBytes = kNr * (kSlots == Slots::kF32 ? 4 : 2);
  for (size_t u = 0; u < units; ++u) {
    if (kStream) {
      // Past the panel's end this touches the next one, or nothing: prefetches never fault.
      const char* unit = reinterpret_cast<const char*>(w) + u * kUnitBytes;
      if (kSlots == Slots::kF32) {
        _mm_prefetch(unit + kPrefetchF32Bytes, _MM_HINT_T1);
      } else {
        _mm_prefetch(unit + kPrefetchBytes, _MM_HINT_T0);
      }
    }
    __m256 w0, w1;
    LoadUnit<kSlots>(w, u, &w0, &w1);
    const float* xu = reinterpret_cast<const float*>(x + u * kMr);
#pragma GCC unroll 6
    for (size_t i = 0; i < M; ++i) {
      const __m256 xb = _mm256_broadcast_ss(xu + i);
      a0[i] = _mm256_fmadd_ps(w0, xb, a0[i]);
      a1[i] = _mm256_fmadd_ps(w1, xb, a1[i]);
    }
  }
  const __m256 lo = _mm256_set1_ps(out_min);
#pragma GCC unroll 6
  for (size_t i = 0; i < M; ++i) {
    if (clamp) {
      a0[i] = _mm256_max_ps(a0[i], lo);
      a1[i] = _mm256_max_ps(a1[i], lo);
    }
    StoreY<kFull>(y + i * y_stride, m0, a0[i]);
    StoreY<kFull>(y + i * y_stride + 8, m1, a1[i]);
  }
}

// Dispatches a call's token count to its tile.
template <Slots kSlots, bool kFull, bool kStream>
FFLITE_AVX2 inline void Dispatch(size_t m, size_t n, size_t units, const uint32_t* x,
                                 const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                                 float out_min, float* y, size_t y_stride) {
#define FFLITE_TILE(M) \
  Tile<kSlots, M, kFull, kStream>(n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride)
  switch (m) {
    case 1: FFLITE_TILE(1); break;
    case 2: FFLITE_TILE(2); break;
    case 3: FFLITE_TILE(3); break;
    case 4: FFLITE_TILE(4); break;
    case 5: FFLITE_TILE(5); break;
    default: FFLITE_TILE(kMr);
  }
#undef FFLITE_TILE
}

// A whole panel (n = 16) or a partial one; kStream: prefetching the panel ahead.
template <Slots kSlots, bool kStream = false>
FFLITE_AVX2 inline void Microkernel(size_t m, size_t n, size_t units, const uint32_t* x,
                                    const uint32_t* w, const float* bias, bool accumulate,
                                    bool clamp, float out_min, float* y, size_t y_stride) {
  if (n == kNr) {
    Dispatch<kSlots, true, kStream>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                    y_stride);
  } else {
    Dispatch<kSlots, false, kStream>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                     y_stride);
  }
}

// r[j] = lane j of each of r[0..7] (an 8 × 8 transpose; bits kept as they are).
FFLITE_AVX2 inline void Transpose8(__m256* r) {
  __m256 t[8], s[8];
  for (size_t i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (size_t i = 0; i < 8; i += 4) {
    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (size_t i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

// --- Packing weights into 16-channel panels (GemmKernel::pack_panels): 8 units of 8 channels, or
// of 8 words of two 16-bit slots, at once; whole chunks of 8 units only. Non-temporal stores and
// a fence where `packed` is 32-byte aligned, as the AVX-512 packing does (gemm_avx512.cc). ---
FFLITE_AVX2 inline void Store(float* p, __m256 v, bool stream) {
  if (stream) {
    _mm256_stream_ps(p, v);
  } else {
    _mm256_storeu_ps(p, v);
  }
}

inline bool Aligned32(const void* p) { return reinterpret_cast<uintptr_t>(p) % 32 == 0; }

// Units u0 .. u0 + 7 of 16-bit row c, each in the low half of a 32-bit lane (zero past rows).
FFLITE_AVX2 inline __m256i LoadHalves(const uint16_t* src, size_t rows, size_t k, size_t c,
                                      size_t u0) {
  if (c >= rows) return _mm256_setzero_si256();
  return _mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c * k + u0)));
}

// 16-bit slots (units = k): 32-bit word j of a unit holds channels 2j and 2j + 1 (in order) or
// j and j + 8 (kPaired), low and high.
template <bool kPaired>
FFLITE_AVX2 size_t PackHalfPanels(size_t rows, size_t k, const void* w, size_t first, size_t last,
                                  uint32_t* packed) {
  const size_t whole = k / 8 * 8;
  const uint16_t* src = static_cast<const uint16_t*>(w);
  const bool stream = Aligned32(packed);
  for (size_t p = first; p < last; ++p) {
    uint16_t* panel = reinterpret_cast<uint16_t*>(packed) + p * k * kNr;
    for (size_t u0 = 0; u0 < whole; u0 += 8) {
      __m256 r[8];
      for (size_t j = 0; j < 8; ++j) {
        const size_t lo = p * kNr + (kPaired ? j : 2 * j), hi = lo + (kPaired ? 8 : 1);
        const __m256i low = LoadHalves(src, rows, k, lo, u0);
        const __m256i high = _mm256_slli_epi32(LoadHalves(src, rows, k, hi, u0), 16);
        r[j] = _mm256_castsi256_ps(_mm256_or_si256(low, high));
      }
      Transpose8(r);
      for (size_t u = 0; u < 8; ++u) {
        Store(reinterpret_cast<float*>(panel + (u0 + u) * kNr), r[u], stream);
      }
    }
  }
  if (stream) _mm_sfence();
  return whole;
}

}  // namespace

// f32 panels from f32 weights (units = k).
FFLITE_AVX2 size_t GemmPackPanelsAvx2(size_t rows, size_t k, const void* w, size_t first,
                                      size_t last, uint32_t* packed) {
  const size_t whole = k / 8 * 8;
  const float* src = static_cast<const float*>(w);
  const bool stream = Aligned32(packed);
  float* out = reinterpret_cast<float*>(packed);
  for (size_t p = first; p < last; ++p) {
    float* panel = out + p * k * kNr;
    for (size_t u0 = 0; u0 < whole; u0 += 8) {
      for (size_t h = 0; h < kNr; h += 8) {
        __m256 r[8];
        for (size_t i = 0; i < 8; ++i) {
          const size_t c = p * kNr + h + i;
          r[i] = c < rows ? _mm256_loadu_ps(src + c * k + u0) : _mm256_setzero_ps();
        }
        Transpose8(r);
        for (size_t u = 0; u < 8; ++u) Store(panel + (u0 + u) * kNr + h, r[u], stream);
      }
    }
  }
  if (stream) _mm_sfence();
  return whole;
}

FFLITE_AVX2 size_t GemmPackPanelsAvx2F16w(size_t rows, size_t k, const void* w, size_t first,
                                          size_t last, uint32_t* packed) {
  return PackHalfPanels<false>(rows, k, w, first, last, packed);
}

FFLITE_AVX2 size_t GemmPackPanelsAvx2Bf16w(size_t rows, size_t k, const void* w, size_t first,
                                           size_t last, uint32_t* packed) {
  return PackHalfPanels<true>(rows, k, w, first, last, packed);
}

FFLITE_AVX2 void GemmPackTileAvx2(size_t m, size_t k, const float* x, size_t x_stride,
                                  uint32_t* tile) {
  float* out = reinterpret_cast<float*>(tile);
  for (size_t u0 = 0; u0 < k; u0 += 8) {
    const size_t count = std::min<size_t>(8, k - u0);
    const __m256i mask = FirstLanes(count);
    __m256 r[8];
    for (size_t i = 0; i < 8; ++i) {
      const float* row = x + i * x_stride + u0;
      r[i] = i >= m        ? _mm256_setzero_ps()  // tokens past m (m <= 6), lanes 6 and 7
             : count == 8 ? _mm256_loadu_ps(row)
                          : _mm256_maskload_ps(row, mask);
    }
    Transpose8(r);
    for (size_t j = 0; j < count; ++j) {
      float* dst = out + (u0 + j) * kMr;
      if (u0 + j + 1 < k) {
        // 8 lanes: the 2 past the tile's 6 tokens land on the next unit, stored next.
        _mm256_storeu_ps(dst, r[j]);
      } else {
        _mm_storeu_ps(dst, _mm256_castps256_ps128(r[j]));
        _mm_storel_pi(reinterpret_cast<__m64*>(dst + 4), _mm256_extractf128_ps(r[j], 1));
      }
    }
  }
}

FFLITE_AVX2 void GemmMicrokernelAvx2(size_t m, size_t n, size_t units, const uint32_t* x,
                                     const uint32_t* w, const float* bias, bool accumulate,
                                     bool clamp, float out_min, float* y, size_t y_stride) {
  Microkernel<Slots::kF32>(m, n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride);
}

FFLITE_AVX2 void GemmMicrokernelAvx2F16w(size_t m, size_t n, size_t units, const uint32_t* x,
                                         const uint32_t* w, const float* bias, bool accumulate,
                                         bool clamp, float out_min, float* y, size_t y_stride) {
  Microkernel<Slots::kF16>(m, n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride);
}

FFLITE_AVX2 void GemmMicrokernelAvx2Bf16w(size_t m, size_t n, size_t units, const uint32_t* x,
                                          const uint32_t* w, const float* bias, bool accumulate,
                                          bool clamp, float out_min, float* y, size_t y_stride) {
  Microkernel<Slots::kBf16Pairs>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                 y_stride);
}

FFLITE_AVX2 void GemmMicrokernelAvx2Stream(size_t m, size_t n, size_t units, const uint32_t* x,
                                           const uint32_t* w, const float* bias, bool accumulate,
                                           bool clamp, float out_min, float* y, size_t y_stride) {
  Microkernel<Slots::kF32, true>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                 y_stride);
}

FFLITE_AVX2 void GemmMicrokernelAvx2F16wStream(size_t m, size_t n, size_t units,
                                               const uint32_t* x, const uint32_t* w,
                                               const float* bias, bool accumulate, bool clamp,
                                               float out_min, float* y, size_t y_stride) {
  Microkernel<Slots::kF16, true>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                 y_stride);
}

FFLITE_AVX2 void GemmMicrokernelAvx2Bf16wStream(size_t m, size_t n, size_t units,
                                                const uint32_t* x, const uint32_t* w,
                                                const float* bias, bool accumulate, bool clamp,
                                                float out_min, float* y, size_t y_stride) {
  Microkernel<Slots::kBf16Pairs, true>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                       y_stride);
}

}  // namespace fflite

#endif  // FFLITE_GEMM_X86
