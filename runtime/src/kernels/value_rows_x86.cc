// The down projection from value rows for AVX2 (8 lanes) and AVX-512 (16 lanes): the one
// implementation of value_rows_impl.inc over each width, with per-function target attributes
// (the file is built for the baseline ISA, like kernels_avx2.cc).
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_AVX2)

// GCC 12's AVX-512 intrinsics: see gemv_avx512.cc.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "base/half.h"

#define FFLITE_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define FFLITE_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

#define FFLITE_VR_TARGET FFLITE_AVX2_TARGET
#define FFLITE_VR_NS value_rows_avx2
#include "kernels/value_rows_impl.inc"
#undef FFLITE_VR_TARGET
#undef FFLITE_VR_NS
#define FFLITE_VR_TARGET FFLITE_AVX512_TARGET
#define FFLITE_VR_NS value_rows_avx512
#include "kernels/value_rows_impl.inc"

namespace fflite {

namespace {

struct Avx2 {
  using V = __m256;
  static constexpr size_t kLanes = 8;
  FFLITE_AVX2_TARGET static __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
  FFLITE_AVX2_TARGET static void Store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
  FFLITE_AVX2_TARGET static __m256 Set1(float v) { return _mm256_set1_ps(v); }
  FFLITE_AVX2_TARGET static __m256 Fma(__m256 acc, __m256 a, __m256 b) {
    return _mm256_fmadd_ps(a, b, acc);
  }
};
struct Avx2F32 {
  using Elem = float;
  static constexpr FloatType kType = FloatType::kF32;
  FFLITE_AVX2_TARGET static __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
  static float ToF32(float v) { return v; }
};
struct Avx2F16 {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kF16;
  FFLITE_AVX2_TARGET static __m256 Load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float ToF32(uint16_t v) { return F16ToF32(v); }
};
struct Avx2Bf16 {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kBF16;
  FFLITE_AVX2_TARGET static __m256 Load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float ToF32(uint16_t v) { return Bf16ToF32(v); }
};

struct Avx512 {
  using V = __m512;
  static constexpr size_t kLanes = 16;
  FFLITE_AVX512_TARGET static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  FFLITE_AVX512_TARGET static void Store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
  FFLITE_AVX512_TARGET static __m512 Set1(float v) { return _mm512_set1_ps(v); }
  FFLITE_AVX512_TARGET static __m512 Fma(__m512 acc, __m512 a, __m512 b) {
    return _mm512_fmadd_ps(a, b, acc);
  }
};
struct Avx512F32 {
  using Elem = float;
  static constexpr FloatType kType = FloatType::kF32;
  FFLITE_AVX512_TARGET static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  static float ToF32(float v) { return v; }
};
struct Avx512F16 {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kF16;
  FFLITE_AVX512_TARGET static __m512 Load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float ToF32(uint16_t v) { return F16ToF32(v); }
};
struct Avx512Bf16 {
  using Elem = uint16_t;
  static constexpr FloatType kType = FloatType::kBF16;
  FFLITE_AVX512_TARGET static __m512 Load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static float ToF32(uint16_t v) { return Bf16ToF32(v); }
};

}  // namespace

FFLITE_AVX2_TARGET void F32ValueRowsAvx2(size_t c, size_t cols, size_t n, const uint32_t* rows,
                                         const void* v, FloatType v_type, size_t v_stride,
                                         const float* bias, const float* h, size_t h_stride,
                                         float* y, size_t y_stride) {
  using value_rows_avx2::ValueRows;
  switch (v_type) {
    case FloatType::kF32:
      ValueRows<Avx2, Avx2F32>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y, y_stride);
      break;
    case FloatType::kF16:
      ValueRows<Avx2, Avx2F16>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y, y_stride);
      break;
    case FloatType::kBF16:
      ValueRows<Avx2, Avx2Bf16>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y, y_stride);
      break;
    default:
      break;
  }
}

FFLITE_AVX512_TARGET void F32ValueRowsAvx512(size_t c, size_t cols, size_t n,
                                             const uint32_t* rows, const void* v, FloatType v_type,
                                             size_t v_stride, const float* bias, const float* h,
                                             size_t h_stride, float* y, size_t y_stride) {
  using value_rows_avx512::ValueRows;
  switch (v_type) {
    case FloatType::kF32:
      ValueRows<Avx512, Avx512F32>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y,
                                   y_stride);
      break;
    case FloatType::kF16:
      ValueRows<Avx512, Avx512F16>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y,
                                   y_stride);
      break;
    case FloatType::kBF16:
      ValueRows<Avx512, Avx512Bf16>(c, cols, n, rows, v, v_stride, bias, h, h_stride, y,
                                    y_stride);
      break;
    default:
      break;
  }
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_AVX2
