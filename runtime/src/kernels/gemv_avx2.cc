// The few-token matrix product for AVX2 + FMA3 + F16C, straight from f32/f16/bf16 row-major
// weights: gemv_impl.inc (read its comments first) over 8-lane vectors, blocks of 4 rows × token
// groups of up to 3 (4 × 3 accumulators + 3 x vectors + 1 weight vector = the 16 ymm registers),
// the next block prefetched in address order during the last batch so that the weights stream
// at memory speed.
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_AVX2)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

// Per-function target attributes, as in kernels_avx2.cc: no AVX2 code in shared inline functions.
#define FFLITE_AVX2 __attribute__((target("avx2,fma,f16c")))

#define FFLITE_GEMV_TARGET FFLITE_AVX2
#define FFLITE_GEMV_NS gemv_avx2
#include "kernels/gemv_impl.inc"

namespace fflite {

namespace {

// Mask of the first `rest` (0..7) lanes, for the tail.
FFLITE_AVX2 inline __m256i TailMask(size_t rest) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rest)), lanes);
}

// Tokens per batch: the groups that share one pass over memory (a call with more tokens reads
// the weights once per batch). Span: 4 rows × 256 f32 = 4 KiB of weights and 12 × 1 KiB of x,
// all in L1. The prefetch during the last batch only: reading 4 rows side by side is 4
// interleaved streams, which the hardware prefetchers follow poorly (on Zen 4: bf16 at c = 1
// read at 40% of the memory bandwidth without it, 90-100% with it).
struct Avx2 {
  using V = __m256;
  using V4 = __m128;
  using Tail = __m256i;
  static constexpr size_t kLanes = 8;
  static constexpr size_t kMaxTokens = 3;
  static constexpr size_t kBatchTokens = 12;
  static constexpr size_t kSpan = 256;
  static constexpr gemv_avx2::PrefetchKind kPrefetch = gemv_avx2::kLastBatch;
  FFLITE_AVX2 static V Zero() { return _mm256_setzero_ps(); }
  FFLITE_AVX2 static V LoadX(const float* p) { return _mm256_loadu_ps(p); }
  FFLITE_AVX2 static V Fma(V acc, V w, V x) { return _mm256_fmadd_ps(w, x, acc); }
  FFLITE_AVX2 static Tail MakeTail(size_t rest) { return TailMask(rest); }
  // Masked loads: masked-off lanes are not accessed.
  FFLITE_AVX2 static V LoadXTail(const float* p, size_t /*rest*/, Tail mask) {
    return _mm256_maskload_ps(p, mask);
  }
  // The lane sums of a, b, c, d as one vector [Σa, Σb, Σc, Σd]: [a01 a23 b01 b23 | a45 a67 b45
  // b67], then [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7], then the halves added.
  FFLITE_AVX2 static V4 Sum4(V a, V b, V c, V d) {
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  }
  FFLITE_AVX2 static V4 Load4(const float* p) { return _mm_loadu_ps(p); }
  FFLITE_AVX2 static V4 Add4(V4 a, V4 b) { return _mm_add_ps(a, b); }
  FFLITE_AVX2 static void Store4(float* p, V4 v) { _mm_storeu_ps(p, v); }
  FFLITE_AVX2 static void Prefetch(uintptr_t p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
  }
  static size_t MaxTokens(size_t /*x_stride*/) { return kMaxTokens; }
};

// The weight formats: 8 elements to 8 f32 lanes, converted in registers. LoadTail reads only the
// first `rest` (1..7) elements and sets the other lanes to 0.
struct F32Weights {
  using Elem = float;
  static constexpr FloatType kType = FloatType::kF32;
  FFLITE_AVX2 static __m256 Load(const float* p) {
    __m256 v = _mm256_loadu_ps(p);
    // Keeps the vector in a register: otherwise the compiler folds this load into each of the T
    // multiply-adds that use it, and the loop becomes bound by loads rather than FMAs.
    __asm__("" : "+x"(v));
    return v;
  }
  FFLITE_AVX2 static __m256 LoadTail(const float* p, size_t /*rest*/, __m256i mask) {
    return _mm256_maskload_ps(p, mask);  // masked-off lanes are not accessed
  }
};

struct F16Weights {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kF16;
  FFLITE_AVX2 static __m256 Load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  FFLITE_AVX2 static __m256 LoadTail(const uint16_t* p, size_t rest, __m256i /*mask*/) {
    uint16_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // once per row; no 16-bit masked load in AVX2
    std::memcpy(tail, p, rest * sizeof(uint16_t));
    return Load(tail);
  }
};

// bf16 is the top half of an f32: widen each 16-bit lane to 32 bits and shift it up.
struct Bf16Weights {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kBF16;
  FFLITE_AVX2 static __m256 Load(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  FFLITE_AVX2 static __m256 LoadTail(const uint16_t* p, size_t rest, __m256i /*mask*/) {
    uint16_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(tail, p, rest * sizeof(uint16_t));
    return Load(tail);
  }
};

}  // namespace

FFLITE_AVX2 void F32GemvAvx2(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                             const float* bias, const float* x, size_t x_stride, float* y,
                             size_t y_stride) {
  using gemv_avx2::Gemv;
  switch (w_type) {
    case FloatType::kF32:
      Gemv<Avx2, F32Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    case FloatType::kF16:
      Gemv<Avx2, F16Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    case FloatType::kBF16:
      Gemv<Avx2, Bf16Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
  }
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_AVX2
