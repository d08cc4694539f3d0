// AVX-512 F activations: the formulas of activations_x86.inc on 16 floats per vector, so the same
// operations as the AVX2 set in the same order (the same bits; tested), at twice the width. They
// matter at prefill, where the activation runs over [tokens, d_ff] (BERT at 128 tokens: GELU was
// 5-6% of the layer with 8 lanes). Per-function target attributes, as in kernels_avx2.cc; called
// only after cpuinfo reports AVX-512 F (see select.cc).
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_AVX2)

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's intrinsics; see gemv_avx512.cc
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same at -O1 (the sanitizer builds)
#endif

#include <immintrin.h>

#include "kernels/approx.h"

#define FFLITE_AVX512 __attribute__((target("avx512f,fma")))

namespace fflite {

namespace {

// The vector operations of activations_x86.inc, on 16 floats.
using V = __m512;
FFLITE_AVX512 inline V Set1(float f) { return _mm512_set1_ps(f); }
FFLITE_AVX512 inline V Add(V a, V b) { return _mm512_add_ps(a, b); }
FFLITE_AVX512 inline V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
FFLITE_AVX512 inline V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
FFLITE_AVX512 inline V Div(V a, V b) { return _mm512_div_ps(a, b); }
FFLITE_AVX512 inline V Min(V a, V b) { return _mm512_min_ps(a, b); }
FFLITE_AVX512 inline V Max(V a, V b) { return _mm512_max_ps(a, b); }
FFLITE_AVX512 inline V Fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
FFLITE_AVX512 inline V Fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
FFLITE_AVX512 inline V Fmsub(V a, V b, V c) { return _mm512_fmsub_ps(a, b, c); }
FFLITE_AVX512 inline V Abs(V v) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
}
FFLITE_AVX512 inline V NegAbs(V v) {
  return _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}
FFLITE_AVX512 inline V RoundNearest(V v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
FFLITE_AVX512 inline V Pow2(V n) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
FFLITE_AVX512 inline V IfNegative(V x, V a, V b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), b, a);
}

#define FFLITE_ACT_TARGET FFLITE_AVX512
#include "kernels/activations_x86.inc"
#undef FFLITE_ACT_TARGET

// The activation over full vectors, then the tail under a mask (masked loads and stores touch no
// memory outside it, so no tail slack is needed).
template <V (*Act)(V), V (*Up)(V) = Identity>
FFLITE_AVX512 inline void Apply(size_t n, const float* x, const float* u, float* y) {
  size_t i = 0;
  if (u != nullptr) {
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(y + i, _mm512_mul_ps(Act(_mm512_loadu_ps(x + i)), Up(_mm512_loadu_ps(u + i))));
    }
  } else {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, Act(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    V v = Act(_mm512_maskz_loadu_ps(mask, x + i));
    if (u != nullptr) v = _mm512_mul_ps(v, Up(_mm512_maskz_loadu_ps(mask, u + i)));
    _mm512_mask_storeu_ps(y + i, mask, v);
  }
}

}  // namespace

FFLITE_AVX512 void F32ReluAvx512(size_t n, const float* x, const float* u, float* y) {
  Apply<Relu>(n, x, u, y);
}
FFLITE_AVX512 void F32GeluErfAvx512(size_t n, const float* x, const float* u, float* y) {
  Apply<GeluErf>(n, x, u, y);
}
FFLITE_AVX512 void F32GeluTanhAvx512(size_t n, const float* x, const float* u, float* y) {
  Apply<GeluTanh>(n, x, u, y);
}
FFLITE_AVX512 void F32SiluAvx512(size_t n, const float* x, const float* u, float* y) {
  Apply<Silu>(n, x, u, y);
}
FFLITE_AVX512 void F32SigmoidAvx512(size_t n, const float* x, const float* u, float* y) {
  Apply<Sigmoid>(n, x, u, y);
}
FFLITE_AVX512 void F32SwigluOaiAvx512(size_t n, const float* x, const float* u, float* y) {
  Apply<SwishOai, UpOai>(n, x, u, y);
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_AVX2
