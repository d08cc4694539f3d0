// AVX2 + FMA3 kernels: 8 floats per vector; the activations of activations_x86.inc (the exp/erfc
// approximations of approx.h). Compiled with
// per-function target attributes (no per-file -mavx2), so no AVX2 code leaks into shared inline
// functions; called only after cpuinfo reports AVX2, FMA3 and F16C (see select.cc).
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_AVX2)

#include <immintrin.h>

#include <cmath>

#include "kernels/approx.h"

#define FFLITE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace fflite {

namespace {

// The vector operations of activations_x86.inc, on 8 floats.
using V = __m256;
FFLITE_AVX2 inline V Set1(float f) { return _mm256_set1_ps(f); }
FFLITE_AVX2 inline V Add(V a, V b) { return _mm256_add_ps(a, b); }
FFLITE_AVX2 inline V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
FFLITE_AVX2 inline V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
FFLITE_AVX2 inline V Div(V a, V b) { return _mm256_div_ps(a, b); }
FFLITE_AVX2 inline V Min(V a, V b) { return _mm256_min_ps(a, b); }
FFLITE_AVX2 inline V Max(V a, V b) { return _mm256_max_ps(a, b); }
FFLITE_AVX2 inline V Fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
FFLITE_AVX2 inline V Fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
FFLITE_AVX2 inline V Fmsub(V a, V b, V c) { return _mm256_fmsub_ps(a, b, c); }
FFLITE_AVX2 inline V Abs(V v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
FFLITE_AVX2 inline V NegAbs(V v) { return _mm256_or_ps(v, _mm256_set1_ps(-0.0f)); }
FFLITE_AVX2 inline V RoundNearest(V v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// The biased exponent in bits 23..30.
FFLITE_AVX2 inline V Pow2(V n) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
FFLITE_AVX2 inline V IfNegative(V x, V a, V b) {
  return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
}

#define FFLITE_ACT_TARGET FFLITE_AVX2
#include "kernels/activations_x86.inc"
#undef FFLITE_ACT_TARGET

// Mask of the first `rest` (0..7) lanes, for the tail.
FFLITE_AVX2 inline __m256i TailMask(size_t rest) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rest)), lanes);
}

// The activation over full vectors, then the tail through masked loads and stores (which do not
// touch memory outside the mask, so no tail slack is needed).
template <__m256 (*Act)(__m256), __m256 (*Up)(__m256) = Identity>
FFLITE_AVX2 inline void Apply(size_t n, const float* x, const float* u, float* y) {
  size_t i = 0;
  if (u != nullptr) {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(y + i, _mm256_mul_ps(Act(_mm256_loadu_ps(x + i)), Up(_mm256_loadu_ps(u + i))));
    }
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Act(_mm256_loadu_ps(x + i)));
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    __m256 v = Act(_mm256_maskload_ps(x + i, mask));
    if (u != nullptr) v = _mm256_mul_ps(v, Up(_mm256_maskload_ps(u + i, mask)));
    _mm256_maskstore_ps(y + i, mask, v);
  }
}

FFLITE_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Σ (x[i] - shift)² over [d], four accumulators (32 lanes) to hide the add latency.
FFLITE_AVX2 inline float SumSquares(size_t d, const float* x, float shift) {
  const __m256 vs = _mm256_set1_ps(shift);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= d; i += 32) {
    const __m256 v0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vs);
    const __m256 v1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vs);
    const __m256 v2 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 16), vs);
    const __m256 v3 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 24), vs);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
    a2 = _mm256_fmadd_ps(v2, v2, a2);
    a3 = _mm256_fmadd_ps(v3, v3, a3);
  }
  for (; i + 8 <= d; i += 8) {
    const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + i), vs);
    a0 = _mm256_fmadd_ps(v, v, a0);
  }
  float s = HorizontalSum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < d; ++i) s += (x[i] - shift) * (x[i] - shift);
  return s;
}

FFLITE_AVX2 inline float Sum(size_t d, const float* x) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= d; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i + 8 <= d; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
  float s = HorizontalSum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < d; ++i) s += x[i];
  return s;
}

// y = (x - shift) · scale · w (+ b)
FFLITE_AVX2 inline void ScaleRow(size_t d, const float* x, float shift, float scale, const float* w,
                                 const float* b, float* y) {
  const __m256 vs = _mm256_set1_ps(shift), vk = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs), vk),
                                   _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(y + i, b != nullptr ? _mm256_add_ps(v, _mm256_loadu_ps(b + i)) : v);
  }
  for (; i < d; ++i) y[i] = (x[i] - shift) * scale * w[i] + (b != nullptr ? b[i] : 0.0f);
}

}  // namespace

FFLITE_AVX2 void F32ReluAvx2(size_t n, const float* x, const float* u, float* y) {
  Apply<Relu>(n, x, u, y);
}
FFLITE_AVX2 void F32GeluErfAvx2(size_t n, const float* x, const float* u, float* y) {
  Apply<GeluErf>(n, x, u, y);
}
FFLITE_AVX2 void F32GeluTanhAvx2(size_t n, const float* x, const float* u, float* y) {
  Apply<GeluTanh>(n, x, u, y);
}
FFLITE_AVX2 void F32SiluAvx2(size_t n, const float* x, const float* u, float* y) {
  Apply<Silu>(n, x, u, y);
}
FFLITE_AVX2 void F32SigmoidAvx2(size_t n, const float* x, const float* u, float* y) {
  Apply<Sigmoid>(n, x, u, y);
}
FFLITE_AVX2 void F32SwigluOaiAvx2(size_t n, const float* x, const float* u, float* y) {
  Apply<SwishOai, UpOai>(n, x, u, y);
}

// Two passes (mean, then the centred sum of squares): stable where E[x²] - mean² is not.
FFLITE_AVX2 void F32LayerNormAvx2(size_t d, const float* x, const float* w, const float* b,
                                  float eps, float* y) {
  const float mean = Sum(d, x) / static_cast<float>(d);
  const float var = SumSquares(d, x, mean) / static_cast<float>(d);
  ScaleRow(d, x, mean, 1.0f / std::sqrt(var + eps), w, b, y);
}

FFLITE_AVX2 void F32RmsNormAvx2(size_t d, const float* x, const float* w, float eps, float* y) {
  const float ms = SumSquares(d, x, 0.0f) / static_cast<float>(d);
  ScaleRow(d, x, 0.0f, 1.0f / std::sqrt(ms + eps), w, nullptr, y);
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_AVX2
