// The int8-activation product over quantised panels (I8, I4) for AVX2 + FMA3 + F16C, for prefill
// on CPUs without VNNI: vpmaddubsw + vpmaddwd on half a panel (8 rows × 4 k) per 32-byte load.
#include "kernels/quant_kernels.h"

#if defined(FFLITE_QGEMM_X86)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "format/quant_layout.h"
#include "kernels/quant_prefetch.h"

// Per-function target attributes, as in gemv_avx2.cc: no AVX2 code in shared inline functions.
#define FFLITE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace fflite {

namespace {

// Tokens per tile over one panel (both 8-row halves): 2 × 2 int32 accumulators (int16 for I4),
// 2 × 2 f32 ones, the weights, the broadcasts and a constant fill the 16 ymm registers; 3 tokens
// spill.
constexpr size_t kMaxTokens = 2;
// A panel's first tile: how far ahead of the reading its data stream is prefetched, in bytes (one
// stream: 4-8 KiB measured best on Zen 5, 2 KiB 10% slower, 1 KiB 20%).
constexpr uint64_t kPassPrefetchBytes = 4096;

inline int32_t Load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// y[t·y_stride + r] = bias[r] + Σ_b d_w·d_x·dot for r < n, t < T, one panel. The dot products are
// exact (below), so a row's f32 operations do not depend on T or on the caller's row split.
template <bool kI4, int T>
FFLITE_AVX2 void Tile(size_t k_blocks, size_t scale_bytes, const uint8_t* w, const QActBlock* x,
                      const float* bias, size_t n, float* y, size_t y_stride,
                      QuantPassPrefetcher* pass) {
  constexpr size_t kBlockBytes = kI4 ? 256 : 512;
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i low = _mm256_set1_epi8(0x0f);
  __m256 facc[2][T];
  for (int h = 0; h < 2; ++h) {
    for (int t = 0; t < T; ++t) facc[h][t] = _mm256_setzero_ps();
  }
  for (size_t b = 0; b < k_blocks; ++b) {
    if (pass != nullptr) pass->Step();
    const QActBlock* xb[T];
    for (int t = 0; t < T; ++t) xb[t] = x + t * k_blocks + b;
    const uint8_t* blk = w + scale_bytes + b * kBlockBytes;
    __m256i acc[2][T];
    if constexpr (!kI4) {
      // vpmaddubsw multiplies u8 by s8 and adds pairs into int16 with saturation: |q_w| as the
      // u8 operand and q_x with q_w's sign as the s8 one give pairs of at most 2·127·127 = 32258,
      // which never saturate (q in [-127, 127]); vpmaddwd with ones then adds them into int32.
      for (int h = 0; h < 2; ++h) {
        for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_si256();
      }
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        __m256i xv[T];
        for (int t = 0; t < T; ++t) xv[t] = _mm256_set1_epi32(Load32(xb[t]->q + 4 * g));
        for (int h = 0; h < 2; ++h) {
          const __m256i wv =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * g + 32 * h));
          const __m256i aw = _mm256_abs_epi8(wv);
          for (int t = 0; t < T; ++t) {
            const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv[t], wv));
            acc[h][t] = _mm256_add_epi32(acc[h][t], _mm256_madd_epi16(p, ones16));
          }
        }
      }
    } else {
      // The nibble (q_w + 8, at most 15) is the u8 operand: a pair is at most 2·15·127 = 3810 and
      // the 8 of a block add up to 30480 < 32767 in int16 without saturating, so one vpmaddwd per
      // block; the offset 8·Σq_x is subtracted after it.
      __m256i acc16[2][T];
      for (int h = 0; h < 2; ++h) {
        for (int t = 0; t < T; ++t) acc16[h][t] = _mm256_setzero_si256();
      }
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m256i xl[T], xh[T];
        for (int t = 0; t < T; ++t) {
          xl[t] = _mm256_set1_epi32(Load32(xb[t]->q + 4 * c));
          xh[t] = _mm256_set1_epi32(Load32(xb[t]->q + 16 + 4 * c));
        }
        for (int h = 0; h < 2; ++h) {
          const __m256i v =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * c + 32 * h));
          const __m256i lo = _mm256_and_si256(v, low);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
          for (int t = 0; t < T; ++t) {
            acc16[h][t] = _mm256_add_epi16(acc16[h][t], _mm256_maddubs_epi16(lo, xl[t]));
            acc16[h][t] = _mm256_add_epi16(acc16[h][t], _mm256_maddubs_epi16(hi, xh[t]));
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        const __m256i offset = _mm256_set1_epi32(xb[t]->sum * 8);
        for (int h = 0; h < 2; ++h) {
          acc[h][t] = _mm256_sub_epi32(_mm256_madd_epi16(acc16[h][t], ones16), offset);
        }
      }
    }
    // facc += f32(dot) · (d_w · d_x); f32(dot) is exact (|dot| <= 32·127·127 < 2^24).
    __m256 sw[2];
    for (int h = 0; h < 2; ++h) {
      sw[h] = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + b * 32 + 16 * h)));
    }
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(xb[t]->d);
      for (int h = 0; h < 2; ++h) {
        facc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), _mm256_mul_ps(sw[h], dx),
                                     facc[h][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    float* yt = y + t * y_stride;
    for (int h = 0; h < 2; ++h) {
      if (n >= 8 * static_cast<size_t>(h) + 8) {
        __m256 v = facc[h][t];
        if (bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + 8 * h));
        _mm256_storeu_ps(yt + 8 * h, v);
      } else {
        // The panel's last rows: only the n that exist are read from bias and written to y.
        float v[8];
        _mm256_storeu_ps(v, facc[h][t]);
        for (size_t r = 8 * h; r < n; ++r) {
          yt[r] = bias != nullptr ? v[r - 8 * h] + bias[r] : v[r - 8 * h];
        }
      }
    }
  }
}

// Every token for one panel (16 rows × k: 36 KiB for I8 at k = 4096, in L2 while the tiles pass
// over it). The first tile reads the panel from memory: its two streams are prefetched a few
// blocks ahead as in the one-token qgemv (quant_prefetch.h); the later tiles find it in L2.
template <bool kI4>
FFLITE_AVX2 void QGemm(size_t c, size_t k, size_t rows, const uint8_t* w, const float* bias,
                       const QActBlock* xq, float* y, size_t y_stride) {
  const QuantGeometry g = QuantMatrixGeometry(kI4 ? DType::I4 : DType::I8, rows, k);
  QuantPassPrefetcher prefetcher(w, g.bytes(), g, 1, kPassPrefetchBytes);
  for (size_t p = 0; p < g.panels; ++p) {
    prefetcher.StartPass(w + p * g.panel_bytes, 1, p == 0);
    const size_t r0 = p * kQuantPanelRows;
    const size_t n = rows - r0 < kQuantPanelRows ? rows - r0 : kQuantPanelRows;
    const uint8_t* panel = w + p * g.panel_bytes;
    const float* bp = bias != nullptr ? bias + r0 : nullptr;
    size_t t = 0;
    for (; t + kMaxTokens <= c; t += kMaxTokens) {
      Tile<kI4, kMaxTokens>(g.k_blocks, g.scale_bytes, panel, xq + t * g.k_blocks, bp, n,
                            y + t * y_stride + r0, y_stride, t == 0 ? &prefetcher : nullptr);
    }
    if (t < c) {
      Tile<kI4, 1>(g.k_blocks, g.scale_bytes, panel, xq + t * g.k_blocks, bp, n,
                   y + t * y_stride + r0, y_stride, t == 0 ? &prefetcher : nullptr);
    }
  }
}

}  // namespace

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

FFLITE_AVX2 void QGemmAvx2(size_t c, size_t k, size_t rows, const uint8_t* w, DType dtype,
                           const float* bias, const QActBlock* xq, float* y, size_t y_stride) {
  if (dtype == DType::I4) {
    QGemm<true>(c, k, rows, w, bias, xq, y, y_stride);
  } else {
    QGemm<false>(c, k, rows, w, bias, xq, y, y_stride);
  }
}

}  // namespace fflite

#endif  // FFLITE_QGEMM_X86
