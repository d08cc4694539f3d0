// Q2KP's mins (kernels/quant_types.h), subtracted by every kernel after Q6K's product
// (kernels/quant_kernels.h): for float activations (Subtract) and int8 ones (SubtractQ, also a
// panel at a time for the kernels that subtract each panel's right after it), a portable loop and
// an AVX2 one that does the same operations in the same order, each a separate multiply and add
// (this file is built with -ffp-contract=off, and the AVX2 one's target has no FMA), so that
// either gives the same bits.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FFLITE_MINS_X86 1
#endif

#include "base/cpu_features.h"
#include "base/half.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_types.h"

namespace fflite {
namespace {

// The half-block sums of up to kTokens tokens and kSupers super-blocks at a time, on the stack
// (16 KiB): no allocation per call; a panel's mins are read once per kTokens tokens.
constexpr size_t kTokens = 16, kSupers = 16, kHalves = 16;
using HalfSums = float[kTokens][kSupers][kHalves];

// Super-block s's 16 dmin of the panel as f32 and its m codes (half-block h, row r) as T: the high
// nibbles of the scale bytes (K2Min).
template <typename T>
void LoadDminAndCodes(const uint8_t* panel, size_t supers, size_t s, float* dmin,
                      T (&m)[kHalves][kQuantPanelRows]) {
  for (size_t r = 0; r < kQuantPanelRows; ++r) dmin[r] = F16ToF32(K2Dmin(panel, r, supers, s));
  for (size_t h = 0; h < kHalves; ++h) {
    for (size_t r = 0; r < kQuantPanelRows; ++r) m[h][r] = static_cast<T>(K2Min(panel, r, s, h));
  }
}

// y[t·y_stride + o] -= dmin·Σ_h m_h·sums[t][s - s0][h] for super-blocks s0 .. s0 + ns, in order,
// for t < nt and the rows of every panel. The m codes and dmin of a panel's super-block are read
// once for all tokens; the 16 rows are the inner loop (vectorisable).
void Subtract(size_t nt, size_t s0, size_t ns, size_t supers, size_t rows, uint64_t panel_bytes,
              const uint8_t* w, const HalfSums& sums, float* y, size_t y_stride) {
  for (size_t p = 0; p * kQuantPanelRows < rows; ++p) {
    const uint8_t* panel = w + p * panel_bytes;
    const size_t n = std::min(kQuantPanelRows, rows - p * kQuantPanelRows);
    for (size_t s = s0; s < s0 + ns; ++s) {
      float dmin[kQuantPanelRows], m[kHalves][kQuantPanelRows];
      LoadDminAndCodes(panel, supers, s, dmin, m);
      for (size_t t = 0; t < nt; ++t) {
        float acc[kQuantPanelRows] = {};
        for (size_t h = 0; h < kHalves; ++h) {
          const float xh = sums[t][s - s0][h];
          for (size_t r = 0; r < kQuantPanelRows; ++r) acc[r] += m[h][r] * xh;
        }
        float* yt = y + t * y_stride + p * kQuantPanelRows;
        for (size_t r = 0; r < n; ++r) yt[r] -= dmin[r] * acc[r];
      }
    }
  }
}

// The int8 activations' sums of the super-blocks s0 .. s0 + ns of up to kTokens tokens
// (Q2KSumsQ's layout, kernels/quant_kernels.h): per token, super-block and block i of it, the
// Σq_x of the block's two half-blocks, s[((t·stride + s - s0)·8 + i)·2 + half], and the
// block's d_x, d[(t·stride + s - s0)·8 + i].
struct QSumsView {
  const int16_t* s;
  const float* d;
  size_t stride;  // super-blocks a token
};
// Token t's sums of super-blocks first .. first + count (xq's blocks 8·first ..) into the view's
// arrays at super-block `at`.
void FillQSums(const QActBlock* xq_t, size_t first, size_t count, size_t at, int16_t* s_out,
               float* d_out) {
  for (size_t s = 0; s < count; ++s) {
    for (size_t i = 0; i < 8; ++i) {
      const QActBlock& a = xq_t[8 * (first + s) + i];
      int32_t lo = 0, hi = 0;
      for (size_t j = 0; j < 16; ++j) {
        lo += a.q[j];
        hi += a.q[16 + j];
      }
      const size_t o = (at + s) * 8 + i;
      s_out[2 * o] = static_cast<int16_t>(lo);  // |lo| <= 16·127
      s_out[2 * o + 1] = static_cast<int16_t>(hi);
      d_out[o] = a.d;
    }
  }
}

// y[t·y_stride + o] -= dmin·Σ_i f32(m_2i·S_2i + m_2i+1·S_2i+1)·d_x(i) for super-blocks s0 .. s0 + ns,
// in order: each block's pair of half-block products is an exact integer (at most 2·15·2032), so
// one multiply and one add a block (rather than one each a half-block, Subtract's).
void SubtractQ(size_t nt, size_t s0, size_t ns, size_t supers, size_t rows, uint64_t panel_bytes,
               const uint8_t* w, const QSumsView& sums, float* y, size_t y_stride) {
  for (size_t p = 0; p * kQuantPanelRows < rows; ++p) {
    const uint8_t* panel = w + p * panel_bytes;
    const size_t n = std::min(kQuantPanelRows, rows - p * kQuantPanelRows);
    for (size_t s = s0; s < s0 + ns; ++s) {
      float dmin[kQuantPanelRows];
      int32_t m[kHalves][kQuantPanelRows];
      LoadDminAndCodes(panel, supers, s, dmin, m);
      for (size_t t = 0; t < nt; ++t) {
        float acc[kQuantPanelRows] = {};
        for (size_t i = 0; i < kHalves / 2; ++i) {
          const size_t o = (t * sums.stride + s - s0) * 8 + i;
          const int32_t s_lo = sums.s[2 * o], s_hi = sums.s[2 * o + 1];
          const float dx = sums.d[o];
          for (size_t r = 0; r < kQuantPanelRows; ++r) {
            const int32_t pair = m[2 * i][r] * s_lo + m[2 * i + 1][r] * s_hi;
            acc[r] += static_cast<float>(pair) * dx;
          }
        }
        float* yt = y + t * y_stride + p * kQuantPanelRows;
        for (size_t r = 0; r < n; ++r) yt[r] -= dmin[r] * acc[r];
      }
    }
  }
}

#if defined(FFLITE_MINS_X86)
// A super-block's 16 dmin (at `mins`, Q2KP's layout) as f32, exact.
__attribute__((target("avx2,f16c"))) inline void LoadDminAvx2(const uint8_t* mins, __m256* dmin) {
  for (int v = 0; v < 2; ++v) {
    dmin[v] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mins + 16 * v)));
  }
}
// The 16 rows' m codes (K2Min's) of half-blocks 2i and 2i + 1 of super-block s, as bytes: the
// high nibbles of block 8s + i's 32 scale bytes, in one load.
__attribute__((target("avx2,f16c"))) inline void MinCodesAvx2(const uint8_t* panel, size_t s,
                                                              size_t i, __m128i* lo, __m128i* hi) {
  const __m256i b = _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(panel + Q6K::ScaleOffset(s * Q6K::kSuperBlocks + i)));
  const __m256i m = _mm256_and_si256(_mm256_srli_epi16(b, 4), _mm256_set1_epi8(0x0f));
  *lo = _mm256_castsi256_si128(m);
  *hi = _mm256_extracti128_si256(m, 1);
}
// yt[r] -= dmin[r]·acc[r] for the panel's n rows (nothing past them read or written).
__attribute__((target("avx2,f16c"))) inline void SubtractRowsAvx2(const __m256* dmin,
                                                                  const __m256* acc, size_t n,
                                                                  float* yt) {
  if (n == kQuantPanelRows) {
    for (int v = 0; v < 2; ++v) {
      _mm256_storeu_ps(yt + 8 * v,
                       _mm256_sub_ps(_mm256_loadu_ps(yt + 8 * v), _mm256_mul_ps(dmin[v], acc[v])));
    }
  } else {
    alignas(32) float product[kQuantPanelRows];
    for (int v = 0; v < 2; ++v) _mm256_store_ps(product + 8 * v, _mm256_mul_ps(dmin[v], acc[v]));
    for (size_t r = 0; r < n; ++r) yt[r] -= product[r];
  }
}

// Subtract's operations on 8 rows at a time (F16C for dmin, exact as F16ToF32).
__attribute__((target("avx2,f16c"))) void SubtractAvx2(size_t nt, size_t s0, size_t ns,
                                                       size_t supers, size_t rows,
                                                       uint64_t panel_bytes, const uint8_t* w,
                                                       const HalfSums& sums, float* y,
                                                       size_t y_stride) {
  for (size_t p = 0; p * kQuantPanelRows < rows; ++p) {
    const uint8_t* panel = w + p * panel_bytes;
    const size_t n = std::min(kQuantPanelRows, rows - p * kQuantPanelRows);
    for (size_t s = s0; s < s0 + ns; ++s) {
      __m256 dmin[2], m[kHalves][2];
      LoadDminAvx2(panel + Q2KP::MinOffset(supers, s), dmin);
      for (size_t i = 0; i < kHalves / 2; ++i) {
        __m128i codes[2];
        MinCodesAvx2(panel, s, i, &codes[0], &codes[1]);
        for (int j = 0; j < 2; ++j) {
          m[2 * i + j][0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes[j]));
          m[2 * i + j][1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(codes[j], 8)));
        }
      }
      for (size_t t = 0; t < nt; ++t) {
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (size_t h = 0; h < kHalves; ++h) {
          const __m256 xh = _mm256_set1_ps(sums[t][s - s0][h]);
          for (int v = 0; v < 2; ++v) acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(m[h][v], xh));
        }
        SubtractRowsAvx2(dmin, acc, n, y + t * y_stride + p * kQuantPanelRows);
      }
    }
  }
}

// SubtractQ's operations on 8 rows at a time: each row's pair of m codes as int16 against the
// block's two sums, one vpmaddwd (exact, as SubtractQ's int32 products).
__attribute__((target("avx2,f16c"))) void SubtractQAvx2(size_t nt, size_t s0, size_t ns,
                                                        size_t supers, size_t rows,
                                                        uint64_t panel_bytes, const uint8_t* w,
                                                        const QSumsView& sums, float* y,
                                                        size_t y_stride) {
  for (size_t p = 0; p * kQuantPanelRows < rows; ++p) {
    const uint8_t* panel = w + p * panel_bytes;
    const size_t n = std::min(kQuantPanelRows, rows - p * kQuantPanelRows);
    for (size_t s = s0; s < s0 + ns; ++s) {
      __m256 dmin[2];
      __m256i m[kHalves / 2][2];  // rows 8v..8v + 7: [m_2i, m_2i+1] as int16
      LoadDminAvx2(panel + Q2KP::MinOffset(supers, s), dmin);
      for (size_t i = 0; i < kHalves / 2; ++i) {
        __m128i lo, hi;
        MinCodesAvx2(panel, s, i, &lo, &hi);
        m[i][0] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(lo, hi));
        m[i][1] = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(lo, hi));
      }
      for (size_t t = 0; t < nt; ++t) {
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (size_t i = 0; i < kHalves / 2; ++i) {
          const size_t o = (t * sums.stride + s - s0) * 8 + i;
          int32_t pair;  // [Σq, Σq'] as two int16
          std::memcpy(&pair, sums.s + 2 * o, sizeof(pair));
          const __m256i sv = _mm256_set1_epi32(pair);
          const __m256 dx = _mm256_set1_ps(sums.d[o]);
          for (int v = 0; v < 2; ++v) {
            const __m256 prod = _mm256_cvtepi32_ps(_mm256_madd_epi16(m[i][v], sv));
            acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(prod, dx));
          }
        }
        SubtractRowsAvx2(dmin, acc, n, y + t * y_stride + p * kQuantPanelRows);
      }
    }
  }
}

bool UseAvx2() {
  static const bool avx2 =
      GetCpuFeatures().Has(CpuFeature::kAvx2) && GetCpuFeatures().Has(CpuFeature::kF16c);
  return avx2;
}
#endif

// SubtractQ or, with simd where the CPU has AVX2, SubtractQAvx2 (the same bits).
void SubtractQAny(bool simd, size_t nt, size_t s0, size_t ns, size_t supers, size_t rows,
                  uint64_t panel_bytes, const uint8_t* w, const QSumsView& sums, float* y,
                  size_t y_stride) {
#if defined(FFLITE_MINS_X86)
  if (simd && UseAvx2()) {
    SubtractQAvx2(nt, s0, ns, supers, rows, panel_bytes, w, sums, y, y_stride);
    return;
  }
#else
  (void)simd;
#endif
  SubtractQ(nt, s0, ns, supers, rows, panel_bytes, w, sums, y, y_stride);
}

// The loops over token and super-block chunks; sum(t, s, h) gives token t's sum over half-block
// h of super-block s. simd: the AVX2 loop where the CPU has it.
template <typename Sum>
void SubtractMins(size_t c, size_t k, size_t rows, const uint8_t* w, float* y, size_t y_stride,
                  bool simd, Sum&& sum) {
  const size_t supers = k / 256;
  const uint64_t panel_bytes = GeometryOf<Q2KP>(rows, k).panel_bytes;
  HalfSums sums;
  for (size_t t0 = 0; t0 < c; t0 += kTokens) {
    const size_t nt = std::min(kTokens, c - t0);
    for (size_t s0 = 0; s0 < supers; s0 += kSupers) {
      const size_t ns = std::min(kSupers, supers - s0);
      for (size_t t = 0; t < nt; ++t) {
        for (size_t s = 0; s < ns; ++s) {
          for (size_t h = 0; h < kHalves; ++h) sums[t][s][h] = sum(t0 + t, s0 + s, h);
        }
      }
#if defined(FFLITE_MINS_X86)
      if (simd && UseAvx2()) {
        SubtractAvx2(nt, s0, ns, supers, rows, panel_bytes, w, sums, y + t0 * y_stride, y_stride);
        continue;
      }
#else
      (void)simd;
#endif
      Subtract(nt, s0, ns, supers, rows, panel_bytes, w, sums, y + t0 * y_stride, y_stride);
    }
  }
}

}  // namespace

void SubtractQ2KMins(size_t c, size_t k, size_t rows, const uint8_t* w, const float* x,
                     size_t x_stride, float* y, size_t y_stride, bool simd) {
  SubtractMins(c, k, rows, w, y, y_stride, simd, [&](size_t t, size_t s, size_t h) {
    const float* xs = x + t * x_stride + 256 * s + 16 * h;
    float sum = 0.0f;
    for (size_t i = 0; i < 16; ++i) sum += xs[i];
    return sum;
  });
}

void SubtractQ2KMinsQ(size_t c, size_t k, size_t rows, const uint8_t* w, const QActBlock* xq,
                      float* y, size_t y_stride, bool simd) {
  const size_t k_blocks = k / kQuantBlock, supers = k / 256;
  const uint64_t panel_bytes = GeometryOf<Q2KP>(rows, k).panel_bytes;
  // kTokens x kSupers at a time on the stack (16 KiB).
  int16_t s_buf[kTokens * kSupers * 8 * 2];
  float d_buf[kTokens * kSupers * 8];
  const QSumsView sums{s_buf, d_buf, kSupers};
  for (size_t t0 = 0; t0 < c; t0 += kTokens) {
    const size_t nt = std::min(kTokens, c - t0);
    for (size_t s0 = 0; s0 < supers; s0 += kSupers) {
      const size_t ns = std::min(kSupers, supers - s0);
      for (size_t t = 0; t < nt; ++t) {
        FillQSums(xq + (t0 + t) * k_blocks, s0, ns, t * kSupers, s_buf, d_buf);
      }
      SubtractQAny(simd, nt, s0, ns, supers, rows, panel_bytes, w, sums, y + t0 * y_stride,
                   y_stride);
    }
  }
}

bool PrepareQ2KSumsQ(size_t c, size_t k, const QActBlock* xq, Q2KSumsQ* sums) {
  const size_t supers = k / 256;
  if (c > Q2KSumsQ::kTokens || supers > Q2KSumsQ::kSupers) return false;
  sums->c = c;
  sums->k = k;
  for (size_t t = 0; t < c; ++t) {
    FillQSums(xq + t * (k / kQuantBlock), 0, supers, t * Q2KSumsQ::kSupers, sums->s, sums->d);
  }
  return true;
}

void SubtractQ2KMinsQPanel(const Q2KSumsQ& sums, const uint8_t* panel, size_t n, float* y,
                           size_t y_stride, bool simd) {
  const size_t supers = sums.k / 256;
  const QSumsView view{sums.s, sums.d, Q2KSumsQ::kSupers};
  // One panel (n <= 16 rows): no panel_bytes is ever stepped by.
  SubtractQAny(simd, sums.c, 0, supers, supers, n, 0, panel, view, y, y_stride);
}

}  // namespace fflite
