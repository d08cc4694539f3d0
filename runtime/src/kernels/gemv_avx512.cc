// The few-token matrix product for AVX-512 (F + BW + VL, with FMA and F16C), straight from
// f32/f16/bf16 row-major weights: gemv_impl.inc (read its comments first) over 16-lane vectors and
// a bigger register tile, blocks of 4 rows × token groups of up to 6, which the 32 zmm registers
// allow. At prefill the MoE path runs every expert with up to a few dozen tokens through this
// kernel, and there it is bound by the multiply-adds, not by memory: the bigger tile needs fewer
// loads and instructions per multiply-add.
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_AVX2)

// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined" vector (`__Y = __Y`) that
// -Wmaybe-uninitialized flags once inlined at -O3: a false positive of GCC 12 (Debian 12's
// compiler); clang and later GCCs do not warn.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same at -O1 (the sanitizer builds)
#endif

#include <immintrin.h>

#include <cstdint>

// Per-function target attributes, as in kernels_avx2.cc: no AVX-512 code in shared inline
// functions.
#define FFLITE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

#define FFLITE_GEMV_TARGET FFLITE_AVX512
#define FFLITE_GEMV_NS gemv_avx512
#include "kernels/gemv_impl.inc"

namespace fflite {

namespace {

// Rows per block and tokens per group: 4 rows × 6 tokens = 24 accumulators + 6 x vectors + 1
// weight vector = 31 of the 32 zmm registers. Measured on Zen 4 (one core, GFLOP/s, warm
// [128, 3584] weights, c = 8 / 16 / 32): f32 4 × 6: 101 / 103 / 102, 4 × 5: 99 / 92 / 99,
// 4 × 4: 97 / 95 / 96 (AVX2 4 × 3 of 8 lanes: 86 / 90 / 99); bf16 4 × 6: 103 / 102 / 103 (AVX2:
// 79 / 77 / 86). See MaxTokens for the one case where 4 × 4 is better. Tokens per batch and span
// as in the AVX2 kernel: the span's weights (4 rows × 256 f32 = 4 KiB) stay in L1 while every
// group of the batch passes over them; x streams from L2.
// The prefetch of the next block is spread over every step of every batch in proportion to its
// work. (The AVX2 kernel prefetches during the last batch only: with 32 tokens that is the last
// 8, which then need the next block at 4x the average rate, close to the memory bandwidth; this
// kernel lost 8% on cold [1024, 3584] f32 at c = 32 that way.)
struct Avx512 {
  using V = __m512;
  using V4 = __m128;
  using Tail = __mmask16;
  static constexpr size_t kLanes = 16;
  static constexpr size_t kMaxTokens = 6;
  static constexpr size_t kBatchTokens = 24;
  static constexpr size_t kSpan = 256;
  static constexpr gemv_avx512::PrefetchKind kPrefetch = gemv_avx512::kSpread;
  FFLITE_AVX512 static V Zero() { return _mm512_setzero_ps(); }
  FFLITE_AVX512 static V LoadX(const float* p) { return _mm512_loadu_ps(p); }
  FFLITE_AVX512 static V Fma(V acc, V w, V x) { return _mm512_fmadd_ps(w, x, acc); }
  // The first `rest` (0..15) lanes; masked-off elements are not accessed, so they cannot fault.
  static Tail MakeTail(size_t rest) { return static_cast<__mmask16>((1u << rest) - 1u); }
  FFLITE_AVX512 static V LoadXTail(const float* p, size_t /*rest*/, Tail mask) {
    return _mm512_maskz_loadu_ps(mask, p);
  }
  // Each 16 lanes folded to 8 (lane i + lane i + 8), then the AVX2 kernel's 8-lane order.
  FFLITE_AVX512 static __m256 Fold(__m512 v) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return _mm256_add_ps(_mm512_castps512_ps256(v), hi);
  }
  FFLITE_AVX512 static V4 Sum4(V a, V b, V c, V d) {
    const __m256 s =
        _mm256_hadd_ps(_mm256_hadd_ps(Fold(a), Fold(b)), _mm256_hadd_ps(Fold(c), Fold(d)));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  }
  FFLITE_AVX512 static V4 Load4(const float* p) { return _mm_loadu_ps(p); }
  FFLITE_AVX512 static V4 Add4(V4 a, V4 b) { return _mm_add_ps(a, b); }
  FFLITE_AVX512 static void Store4(float* p, V4 v) { _mm_storeu_ps(p, v); }
  FFLITE_AVX512 static void Prefetch(uintptr_t p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
  }
  // Tokens whose x rows lie a multiple of 4 KiB apart share an L1 set at every column (Zen 4's
  // L1D: 32 KiB, 8 ways, 64 sets of 64-byte lines), and so do the block's weight rows when k·size
  // is such a multiple: a pass touches R + T lines per set at each column, and above the 8 ways
  // the span's weight lines are evicted before the next group reuses them. MoE up/gate with
  // d_model = 1024 f32 is that case; at most 4 tokens per group there (4 + 4 lines): measured
  // (warm [128, 1024] f32, c = 32) 76 GFLOP/s against 71 with 6, cold 61-66 against 57-58.
  // Grouping does not change any result.
  static size_t MaxTokens(size_t x_stride) {
    return (x_stride * sizeof(float)) % 4096 == 0 ? 4 : kMaxTokens;
  }
};

// The weight formats: 16 elements to 16 f32 lanes, converted in registers. LoadTail reads only the
// lanes in `mask` and sets the other lanes to 0.
struct F32Weights {
  using Elem = float;
  static constexpr FloatType kType = FloatType::kF32;
  FFLITE_AVX512 static __m512 Load(const float* p) {
    __m512 v = _mm512_loadu_ps(p);
    // Keeps the vector in a register: otherwise the compiler folds this load into each of the T
    // multiply-adds that use it ("v": any of the 32 zmm registers).
    __asm__("" : "+v"(v));
    return v;
  }
  FFLITE_AVX512 static __m512 LoadTail(const float* p, size_t /*rest*/, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, p);
  }
};

struct F16Weights {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kF16;
  FFLITE_AVX512 static __m512 Load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  FFLITE_AVX512 static __m512 LoadTail(const uint16_t* p, size_t /*rest*/, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));  // f16 zero is 0.0f
  }
};

// bf16 is the top half of an f32: widen each 16-bit lane to 32 bits and shift it up.
struct Bf16Weights {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kBF16;
  FFLITE_AVX512 static __m512 Widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  FFLITE_AVX512 static __m512 Load(const uint16_t* p) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  FFLITE_AVX512 static __m512 LoadTail(const uint16_t* p, size_t /*rest*/, __mmask16 mask) {
    return Widen(_mm256_maskz_loadu_epi16(mask, p));
  }
};

// One token's streams (gemv_impl.inc's OneTokenStreams, the "avx512-streams" set): blocks of 8
// rows, each row a stream of the weights, without software prefetch. Measured on a Zen 5 VM (AMD
// family 26), one thread, bf16 weights read from memory (Llama's three matrices, 270 MB, 2 copies
// alternated, medians of 15): 4-row blocks prefetching the next block (RowBlock) 12.8-15.8 ms, 8
// rows without prefetch 10.2-13.5, with it 12.4-17.4, 4 rows without it 12.4-16.5, a plain AVX-512
// sum over the same bytes 10.5-11.2, in 3 runs of a throwaway driver: the hardware prefetchers keep
// 8 streams going faster than the software prefetch keeps 4. In fflite-bench (figures at
// F32GemvAvx512Streams in kernels.h) a Llama layer's decode took 5-26% less time at one thread. Not
// measured on Intel CPUs, whose L2 streamer stops at each 4 KiB page of the file's weights: they
// keep RowBlock's prefetch (the registry's preference, registry.cc).
//
// The exported kernels: the weight type's Gemv, with or without one token's streams.
template <bool kStreams>
FFLITE_AVX512 void GemvOf(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                          const float* bias, const float* x, size_t x_stride, float* y,
                          size_t y_stride) {
  using gemv_avx512::Gemv;
  switch (w_type) {
    case FloatType::kF32:
      Gemv<Avx512, F32Weights, kStreams>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    case FloatType::kF16:
      Gemv<Avx512, F16Weights, kStreams>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    case FloatType::kBF16:
      Gemv<Avx512, Bf16Weights, kStreams>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
  }
}

}  // namespace

FFLITE_AVX512 void F32GemvAvx512(size_t c, size_t k, size_t rows, const void* w,
                                 FloatType w_type, const float* bias, const float* x,
                                 size_t x_stride, float* y, size_t y_stride) {
  GemvOf<false>(c, k, rows, w, w_type, bias, x, x_stride, y, y_stride);
}

FFLITE_AVX512 void F32GemvAvx512Streams(size_t c, size_t k, size_t rows, const void* w,
                                        FloatType w_type, const float* bias, const float* x,
                                        size_t x_stride, float* y, size_t y_stride) {
  GemvOf<true>(c, k, rows, w, w_type, bias, x, x_stride, y, y_stride);
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_AVX2
