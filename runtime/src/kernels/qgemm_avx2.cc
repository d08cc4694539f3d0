// The int8-activation product over quantised panels (I8, I4) for AVX2 + FMA3 + F16C, for prefill
// on CPUs without VNNI: vpmaddubsw + vpmaddwd on half a panel (8 rows × 4 k) per 32-byte load.
#include "kernels/quant_kernels.h"

#if defined(FFLITE_QGEMM_X86)

#include <immintrin.h>

#include <cstdint>

#include "kernels/quant_types.h"

// Per-function target attributes, as in gemv_avx2.cc: no AVX2 code in shared inline functions.
#define FFLITE_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FFLITE_QGEMM_AVX2 FFLITE_AVX2
#define FFLITE_QGEMM_AVX_VNNI 0
#include "kernels/qgemm_avx2_tiles.inc"

namespace fflite {

namespace {

// One butterfly stage of span kSpan < 8 within a vector, as Rotate32's FwhtStage: in each pair
// (a, b) = (v[i], v[i + kSpan]) the lower lane gets a + b and the upper one a - b. t holds each
// lane's partner, so lower lanes take v + t = a + b and upper ones t - v = a - b: the same
// operands in the same order.
template <int kSpan>
FFLITE_AVX2 inline __m256 Butterfly(__m256 v) {
  if constexpr (kSpan == 1) {
    const __m256 t = _mm256_permute_ps(v, 0xB1);  // [1, 0, 3, 2] in each 128-bit lane
    return _mm256_blend_ps(_mm256_add_ps(v, t), _mm256_sub_ps(t, v), 0xAA);
  } else if constexpr (kSpan == 2) {
    const __m256 t = _mm256_permute_ps(v, 0x4E);  // [2, 3, 0, 1]
    return _mm256_blend_ps(_mm256_add_ps(v, t), _mm256_sub_ps(t, v), 0xCC);
  } else {
    static_assert(kSpan == 4);
    const __m256 t = _mm256_permute2f128_ps(v, v, 0x01);  // the two 128-bit halves swapped
    return _mm256_blend_ps(_mm256_add_ps(v, t), _mm256_sub_ps(t, v), 0xF0);
  }
}

}  // namespace

// Rotate32 per block: the sign flips as an xor of the sign bits, the 5 stages of spans 1-16 (the
// last two between the four vectors), then the multiplication by 1/sqrt(32).
FFLITE_AVX2 void RotateBlocksAvx2(size_t blocks, const float* x, float* y) {
  __m256 flip[4];
  for (int i = 0; i < 4; ++i) {
    alignas(32) uint32_t bits[8];
    for (int j = 0; j < 8; ++j) bits[j] = ((kHadamardSigns >> (8 * i + j)) & 1u) << 31;
    flip[i] = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(bits)));
  }
  const __m256 norm = _mm256_set1_ps(0.17677669529663688f);  // Rotate32's constant
  for (size_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * kQuantBlock;
    float* yb = y + b * kQuantBlock;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) {
      v[i] = Butterfly<4>(Butterfly<2>(Butterfly<1>(_mm256_xor_ps(_mm256_loadu_ps(xb + 8 * i),
                                                                  flip[i]))));
    }
    // Span 8: (v0, v1) and (v2, v3); span 16: (v0, v2) and (v1, v3).
    const __m256 a0 = _mm256_add_ps(v[0], v[1]), a1 = _mm256_sub_ps(v[0], v[1]);
    const __m256 a2 = _mm256_add_ps(v[2], v[3]), a3 = _mm256_sub_ps(v[2], v[3]);
    _mm256_storeu_ps(yb, _mm256_mul_ps(_mm256_add_ps(a0, a2), norm));
    _mm256_storeu_ps(yb + 8, _mm256_mul_ps(_mm256_add_ps(a1, a3), norm));
    _mm256_storeu_ps(yb + 16, _mm256_mul_ps(_mm256_sub_ps(a0, a2), norm));
    _mm256_storeu_ps(yb + 24, _mm256_mul_ps(_mm256_sub_ps(a1, a3), norm));
  }
}

// 32 activations in four 8-lane vectors, with the scalar twin's operations (IEEE max, divide,
// multiply, round to nearest even through MXCSR like nearbyint): bit-identical blocks.
FFLITE_AVX2 void QuantizeActivationsAvx2(size_t c, size_t k, const float* x, size_t x_stride,
                                         QActBlock* xq) {
  const size_t kb = (k + kQuantBlock - 1) / kQuantBlock;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (size_t t = 0; t < c; ++t) {
    const float* xt = x + t * x_stride;
    for (size_t b = 0; b < kb; ++b) {
      const size_t j = b * kQuantBlock;
      __m256 v[4];
      for (int i = 0; i < 4; ++i) {
        if (j + kQuantBlock <= k) {
          v[i] = _mm256_loadu_ps(xt + j + 8 * i);
        } else {
          // Masked loads: nothing past x[k) is read (masked-off lanes are not accessed); the
          // padding is zero.
          const int rest = static_cast<int>(k - j) - 8 * i;
          const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(rest), lanes);
          v[i] = _mm256_maskload_ps(xt + j + 8 * i, mask);
        }
      }
      const __m256 m = _mm256_max_ps(
          _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
          _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
      const float amax = _mm_cvtss_f32(m4);
      QActBlock& out = xq[t * kb + b];
      out.d = amax >= kQuantActMinAbsMax ? amax / 127.0f : 0.0f;
      const __m256 inv = _mm256_set1_ps(amax >= kQuantActMinAbsMax ? 127.0f / amax : 0.0f);
      __m256i q[4];
      for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
      // int32 -> int8 (values in [-127, 127]: the saturating packs change nothing). The packs
      // work per 128-bit lane, so the groups of 4 come out as q0[0:4) q1[0:4) q2[0:4) q3[0:4)
      // q0[4:8) q1[4:8) q2[4:8) q3[4:8); the permutation puts them back in order.
      const __m256i p16a = _mm256_packs_epi32(q[0], q[1]);
      const __m256i p16b = _mm256_packs_epi32(q[2], q[3]);
      const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q), p8);
      const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                         _mm256_add_epi32(q[2], q[3]));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
      out.sum = _mm_cvtsi128_si32(s4);
    }
  }
}

FFLITE_AVX2 void QGemmAvx2(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                           const float* bias, const QActBlock* xq, float* y, size_t y_stride) {
  RunWithQ2KMins(c, k, rows, w, type, xq, y, y_stride, [&](const Q2KSumsQ* mins) {
    WithQuantTraits(type, [&](auto q) {
      QGemm<decltype(q)>(c, k, rows, w, bias, xq, y, y_stride, mins);
    });
  });
}

}  // namespace fflite

#endif  // FFLITE_QGEMM_X86
