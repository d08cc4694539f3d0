// The gemm engine's AVX-512 microkernels (gemm.h): 12 tokens × 32 channels, 24 zmm accumulators,
// two panel loads and 12 broadcasts per unit. f32: vfmadd231ps (one k per unit); bf16:
// vdpbf16ps (a pair of k per unit, twice the multiply-adds per instruction). One tile source
// (gemm_avx512_tile.inc) for both, each with its own target attribute: no AVX-512 code in shared
// inline functions.
#include "kernels/gemm.h"

#if defined(FFLITE_GEMM_X86)

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's intrinsics; see gemv_avx512.cc
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace fflite {

namespace gemm_avx512_f32 {
namespace {
constexpr size_t kMr = 12, kNr = 32;
#define FFLITE_GEMM_TARGET __attribute__((target("avx512f,fma")))
FFLITE_GEMM_TARGET inline __m512 Step(__m512 acc, __m512 w, uint32_t x) {
  return _mm512_fmadd_ps(w, _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(x))), acc);
}
#include "kernels/gemm_avx512_tile.inc"
#undef FFLITE_GEMM_TARGET
}  // namespace
}  // namespace gemm_avx512_f32

namespace gemm_avx512_bf16 {
namespace {
constexpr size_t kMr = 12, kNr = 32;
#define FFLITE_GEMM_TARGET __attribute__((target("avx512f,avx512bf16,fma")))
FFLITE_GEMM_TARGET inline __m512 Step(__m512 acc, __m512 w, uint32_t x) {
  return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(w),
                          (__m512bh)_mm512_set1_epi32(static_cast<int>(x)));
}
#include "kernels/gemm_avx512_tile.inc"
#undef FFLITE_GEMM_TARGET
}  // namespace
}  // namespace gemm_avx512_bf16

__attribute__((target("avx512f,fma"))) void GemmMicrokernelAvx512(
    size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w, const float* bias,
    bool accumulate, bool clamp, float out_min, float* y, size_t y_stride) {
  gemm_avx512_f32::Microkernel(m, n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride);
}

__attribute__((target("avx512f,avx512bf16,fma"))) void GemmMicrokernelAvx512Bf16(
    size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w, const float* bias,
    bool accumulate, bool clamp, float out_min, float* y, size_t y_stride) {
  gemm_avx512_bf16::Microkernel(m, n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride);
}

}  // namespace fflite

#endif  // FFLITE_GEMM_X86
