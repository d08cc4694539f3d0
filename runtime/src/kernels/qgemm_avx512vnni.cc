// The int8-activation product over quantised panels (I8, I4) for AVX-512 VNNI, for prefill: each
// 64-byte weight load (16 rows × 4 k) feeds one vpdpbusd per token of a register tile.
#include "kernels/quant_kernels.h"
#include "kernels/mca_region.h"

#if defined(FFLITE_QGEMM_X86)

// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined" vector that
// -Wmaybe-uninitialized flags once inlined (a GCC 12 false positive; see gemv_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same at -O1 (the sanitizer builds)
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/quant_types.h"
#include "kernels/quant_prefetch.h"
#include "kernels/quant_unpack_x86.h"

// Per-function target attributes: no AVX-512 code in shared inline functions.
#define FFLITE_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))

namespace fflite {

namespace {

// The register tile: kPanels panels (32 rows) × up to kMaxTokens tokens. Per block it holds
// 2 × 5 int32 accumulators, 2 × 5 f32 ones, 2 weight vectors (4 unpacked halves for I4) and a
// few constants: within the 32 zmm registers, no spills. Per step of 4 k it loads 2 weight vectors
// and 5 broadcasts for 10 vpdpbusd. Measured on Zen 5 (one core, thread CPU time, [11008, 4096],
// c = 128, against a register-only loop of 12 vpdpbusd chains, ~435 GMAC/s): 2 × 5 I8 61-68%,
// I4 64-69%; 2 × 4 and 2 × 6 within the noise of that. What is left goes to the per-block f32
// step (vcvtdq2ps, vmulps, vfmadd per 8 vpdpbusd) and to the weights and activations streaming
// from L2. At c = 16 the weights are read from memory once per call (45 MB I8 in ~3-4 ms).
constexpr int kPanels = 2;
constexpr size_t kMaxTokens = 5;
// One tile: how far ahead of the reading each panel's data stream is prefetched, in bytes (two
// streams: 2 KiB measured best on Zen 5; 1 and 4 KiB 5-25% slower at 4 tokens).
constexpr uint64_t kPassPrefetchBytes = 2048;

inline int32_t Load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// y[t·y_stride + 16p + r] = bias + Σ_b d_w·d_x·dot for the R panels at w (panel_bytes apart) and
// the T tokens at x (k_blocks blocks each, token stride x_stride blocks); n[p] rows of panel p are
// written. The int32 dot product of a block is exact (see QGemmAvx512Vnni); its conversion to f32
// is exact too (|dot| <= 32·255·127 < 2^24), so each row sees the same f32 operations whatever R,
// T and the caller's split of the rows: results are bit-identical for any grouping.
// Each block also prefetches `pf_step` bytes at pf (the next panels, into L2) while pf < pf_end.
template <typename Q, int R, int T>
FFLITE_VNNI void Tile(size_t k_blocks, size_t scale_bytes, size_t panel_bytes, const uint8_t* w,
                      const QActBlock* x, const float* bias, const size_t* n, float* y,
                      size_t y_stride, uintptr_t& pf, uintptr_t pf_end, size_t pf_step,
                      QuantPassPrefetcher* pass) {
  constexpr size_t kBlockBytes = Q::kBlockPanelBytes;
  // I8: the weights are made unsigned (w + 128, an xor of the sign bit: vpdpbusd multiplies u8 by
  // s8), which adds 128·Σq_x to the dot product. I4: the stored nibble is q_w + 8, which adds
  // 8·Σq_x. Either is removed by starting the accumulator at -offset·sum.
  // Q6KP, Q5KP: their codes are unsigned already (value + 32, n = (n - 16) + 16), so they are the
  // u8 operand as decoded, with offsets 32 and 16: the same exact int32 dot products as Q6K's
  // and Q5K's, without the xor; Q3KP's and Q2KP's likewise (value + 4 and q: offsets 4 and 0).
  // IQ4X: its table lookup gives the level + 128 (the xor's bytes).
  constexpr int kOffset = Q::kBits == 4 ? 8 : !Q::kPacked || Q::kLut ? 128 : CodeOffsetOf<Q>();
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i low = _mm512_set1_epi8(0x0f);
  __m512 facc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) facc[r][t] = _mm512_setzero_ps();
  }
  for (size_t b = 0; b < k_blocks; ++b) {
    if (pass != nullptr) pass->Step();
    if (pf < pf_end) {
      for (size_t i = 0; i < pf_step; i += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + i), _MM_HINT_T1);
      }
      pf += pf_step;
    }
    // The performance model's body (kernels/mca_region.h) leaves the prefetches above out.
    FFLITE_MCA_BEGIN("qgemm_vnni", T, Q::kType, R * kQuantPanelRows * kQuantBlock,
                     R * BlockBytesWithScales<Q>());
    const QActBlock* xb[T];
    __m512i acc[R][T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      xb[t] = x + t * k_blocks + b;
      const __m512i init = _mm512_set1_epi32(-xb[t]->sum * kOffset);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = init;
    }
    const uint8_t* blk = w + scale_bytes + b * kBlockBytes;
    // Q6K: each half of the block has its own scales (d·sc, exact): the first half's dot products
    // are scaled in after group 3 and the second half starts from its own offset. The offset is
    // 128·Σq_x over the half's 16 activations (the sign trick), which vpsadbw sums.
    [[maybe_unused]] __m512 s_lo[R], s_hi[R];
    [[maybe_unused]] int32_t sum_lo[T];
    if constexpr (Q::kScheme == QuantType::kQ6K) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(w + r * panel_bytes + Q::SuperOffset(b))));
        const uint8_t* sc = w + r * panel_bytes + Q::ScaleOffset(b);
        __m512i codes[2];
        if constexpr (HasPackedScales<Q>()) {  // Q3KP: its 6-bit codes
          __m128i q3[2];
          Q3KScalePair(sc, q3);
          codes[0] = _mm512_cvtepi8_epi32(q3[0]);
          codes[1] = _mm512_cvtepi8_epi32(q3[1]);
        } else {
          codes[0] = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
          codes[1] =
              _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16)));
        }
        if constexpr (Q::kScaleMask != 0xff) {  // Q2KP: the mins in the high nibbles
          for (__m512i& v : codes) v = _mm512_and_si512(v, _mm512_set1_epi32(Q::kScaleMask));
        }
        s_lo[r] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(codes[0]));
        s_hi[r] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(codes[1]));
      }
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m128i u = _mm_xor_si128(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb[t]->q)), _mm_set1_epi8(-128));
        const __m128i s2 = _mm_sad_epu8(u, _mm_setzero_si128());
        sum_lo[t] = _mm_cvtsi128_si32(s2) + _mm_extract_epi32(s2, 2) - 16 * 128;
        const __m512i init = _mm512_set1_epi32(-sum_lo[t] * kOffset);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][t] = init;
      }
    }
    if constexpr (Q::kBits != 4) {
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        if constexpr (Q::kScheme == QuantType::kQ6K) {
          if (g == 4) {
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
              const __m512 dx = _mm512_set1_ps(xb[t]->d);
              const __m512i init = _mm512_set1_epi32(-(xb[t]->sum - sum_lo[t]) * kOffset);
#pragma GCC unroll 8
              for (int r = 0; r < R; ++r) {
                facc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][t]),
                                             _mm512_mul_ps(s_lo[r], dx), facc[r][t]);
                acc[r][t] = init;
              }
            }
          }
        }
        __m512i wv[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          if constexpr (Q::kPacked) {
            wv[r] = LoadGroup512<Q, true>(blk + r * panel_bytes, g, 0);
          } else {
            wv[r] = _mm512_xor_si512(_mm512_loadu_si512(blk + r * panel_bytes + 64 * g), sign);
          }
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m512i xv = _mm512_set1_epi32(Load32(xb[t]->q + 4 * g));
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], wv[r], xv);
        }
      }
    } else {
      // Chunk c: low nibbles are k 4c..4c+3, high nibbles k 16+4c..16+4c+3 (quant_layout.h).
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m512i lo[R], hi[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512i v = _mm512_loadu_si512(blk + r * panel_bytes + 64 * c);
          lo[r] = _mm512_and_si512(v, low);
          hi[r] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m512i xl = _mm512_set1_epi32(Load32(xb[t]->q + 4 * c));
          const __m512i xh = _mm512_set1_epi32(Load32(xb[t]->q + 16 + 4 * c));
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], lo[r], xl);
            acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], hi[r], xh);
          }
        }
      }
    }
    // Scales: 16 f16 of this block per panel. facc += f32(dot) · (d_w · d_x).
    __m512 sw[R];
    [[maybe_unused]] __m512 offset[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (Q::kScheme == QuantType::kQ6K) {
        sw[r] = s_hi[r];  // the second half's (the first half's were scaled in after group 3)
      } else if constexpr (HasMin<Q>()) {
        // Q4K, Q5K: s = d·sc (exact), offset = o·s - dmin·m with o = kMinOffset (8, 16):
        // Σ W·x = d_x·(s·Σ(n - o)·q + offset·Σq), the int8 sums being of n - o.
        const uint8_t* sc = w + r * panel_bytes + Q4K::ScaleOffset(b);
        const uint8_t* super = w + r * panel_bytes + Q4K::SuperOffset(b);
        const __m512 d =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(super)));
        const __m512 dmin =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(super + 32)));
        const __m512 s_code = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))));
        const __m512 m_code = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16))));
        sw[r] = _mm512_mul_ps(d, s_code);
        offset[r] = _mm512_fmsub_ps(_mm512_set1_ps(static_cast<float>(Q::kMinOffset)), sw[r],
                                    _mm512_mul_ps(dmin, m_code));
      } else {
        const uint8_t* s = w + r * panel_bytes + BlockScaleOffset<Q>(b);
        sw[r] = HasE8m0Scales<Q>()
                    ? FFLITE_E8M0_SCALES16(s)
                    : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(xb[t]->d);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        facc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][t]), _mm512_mul_ps(sw[r], dx),
                                     facc[r][t]);
        if constexpr (HasMin<Q>()) {
          const __m512 sum_x = _mm512_set1_ps(xb[t]->d * static_cast<float>(xb[t]->sum));
          facc[r][t] = _mm512_fmadd_ps(offset[r], sum_x, facc[r][t]);
        }
      }
    }
    FFLITE_MCA_END("qgemm_vnni");
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    // Only the rows that exist: nothing is read past bias[rows) nor written past y's row.
    const __mmask16 mask = static_cast<__mmask16>((1u << n[r]) - 1u);
    const __m512 bv = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + 16 * r)
                                      : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      _mm512_mask_storeu_ps(y + t * y_stride + 16 * r, mask, _mm512_add_ps(facc[r][t], bv));
    }
  }
}

template <typename Q, int R, int T = 1>
FFLITE_VNNI void TileFor(size_t tokens, size_t k_blocks, size_t scale_bytes, size_t panel_bytes,
                         const uint8_t* w, const QActBlock* x, const float* bias, const size_t* n,
                         float* y, size_t y_stride, uintptr_t& pf, uintptr_t pf_end,
                         size_t pf_step, QuantPassPrefetcher* pass) {
  if constexpr (T < static_cast<int>(kMaxTokens)) {
    if (tokens != T) {
      TileFor<Q, R, T + 1>(tokens, k_blocks, scale_bytes, panel_bytes, w, x, bias, n, y,
                             y_stride, pf, pf_end, pf_step, pass);
      return;
    }
  }
  Tile<Q, R, T>(k_blocks, scale_bytes, panel_bytes, w, x, bias, n, y, y_stride, pf, pf_end,
                  pf_step, pass);
}

// Every token for R panels: the panels' weights (R × 72 KiB for I8 at k = 4096) stay in L2 while
// the token tiles pass over them, so memory sees each weight once per call. The next R panels are
// prefetched into L2 in address order, spread evenly over the tiles' blocks.
template <typename Q, int R>
FFLITE_VNNI void Panels(size_t c, const QuantGeometry& g, const uint8_t* w, const QActBlock* xq,
                        const float* bias, const size_t* n, float* y, size_t y_stride,
                        size_t next_bytes, bool first) {
  const size_t tiles = (c + kMaxTokens - 1) / kMaxTokens;
  // One tile (c <= kMaxTokens, decode): each panel is read once, from memory; its two streams
  // are prefetched into L1 a few blocks ahead, as in the one-token qgemv (quant_prefetch.h),
  // instead of the next panels into L2.
  QuantPassPrefetcher pass(w, R * g.panel_bytes + next_bytes, g, R, kPassPrefetchBytes);
  QuantPassPrefetcher* pass_ptr = nullptr;
  if (tiles == 1) {
    pass.StartPass(w, R, first);
    pass_ptr = &pass;
    next_bytes = 0;
  }
  const size_t steps = tiles * g.k_blocks;
  const uintptr_t next = reinterpret_cast<uintptr_t>(w + R * g.panel_bytes);
  uintptr_t pf = next;
  const uintptr_t pf_end = next + next_bytes;
  const size_t per_step = steps > 0 ? next_bytes / steps : 0;  // k = 0: no blocks, no steps
  const size_t pf_step = (per_step + 64) & ~static_cast<size_t>(63);
  // Tiles as even as possible (13 tokens: 5 + 4 + 4), so that no tile is a slow single token.
  size_t t = 0;
  for (size_t i = 0; i < tiles; ++i) {
    const size_t size = (c - t + (tiles - i) - 1) / (tiles - i);
    TileFor<Q, R>(size, g.k_blocks, g.scale_bytes, g.panel_bytes, w, xq + t * g.k_blocks, bias,
                    n, y + t * y_stride, y_stride, pf, pf_end, pf_step, pass_ptr);
    t += size;
  }
}

// mins (Q2KP): each panel's mins subtracted after its tiles (SubtractQ2KMinsQPanel), or nullptr.
template <typename Q>
FFLITE_VNNI void QGemm(size_t c, size_t k, size_t rows, const uint8_t* w, const float* bias,
                       const QActBlock* xq, float* y, size_t y_stride, const Q2KSumsQ* mins) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  size_t p = 0;
  for (; p + kPanels <= g.panels; p += kPanels) {
    size_t n[kPanels];
    for (int r = 0; r < kPanels; ++r) {
      const size_t r0 = (p + r) * kQuantPanelRows;
      n[r] = rows - r0 < kQuantPanelRows ? rows - r0 : kQuantPanelRows;
    }
    const size_t after = g.panels - p - kPanels;
    const size_t next = (after < kPanels ? after : kPanels) * g.panel_bytes;
    Panels<Q, kPanels>(c, g, w + p * g.panel_bytes,
                         xq, bias != nullptr ? bias + p * kQuantPanelRows : nullptr, n,
                         y + p * kQuantPanelRows, y_stride, next, p == 0);
    for (int r = 0; r < kPanels && mins != nullptr; ++r) {
      SubtractQ2KMinsQPanel(*mins, w + (p + r) * g.panel_bytes, n[r],
                            y + (p + r) * kQuantPanelRows, y_stride);
    }
  }
  if (p < g.panels) {
    const size_t n = rows - p * kQuantPanelRows;
    Panels<Q, 1>(c, g, w + p * g.panel_bytes, xq,
                   bias != nullptr ? bias + p * kQuantPanelRows : nullptr, &n,
                   y + p * kQuantPanelRows, y_stride, 0, p == 0);
    if (mins != nullptr) {
      SubtractQ2KMinsQPanel(*mins, w + p * g.panel_bytes, n, y + p * kQuantPanelRows, y_stride);
    }
  }
}

// One butterfly stage of span kSpan < 16 within a vector, as Rotate32's FwhtStage: in each pair
// (a, b) = (v[i], v[i + kSpan]) the lower lane gets a + b and the upper one a - b. t holds each
// lane's partner (the permute), so lower lanes compute v + t = a + b and upper ones t - v = a - b:
// the same operands in the same order.
template <int kSpan>
FFLITE_VNNI inline __m512 Butterfly(__m512 v) {
  __m512 t;
  __mmask16 upper;
  if constexpr (kSpan == 1) {
    t = _mm512_permute_ps(v, 0xB1);  // [1, 0, 3, 2] in each 128-bit lane
    upper = 0xAAAA;
  } else if constexpr (kSpan == 2) {
    t = _mm512_permute_ps(v, 0x4E);  // [2, 3, 0, 1]
    upper = 0xCCCC;
  } else if constexpr (kSpan == 4) {
    t = _mm512_shuffle_f32x4(v, v, 0xB1);  // 128-bit lanes [1, 0, 3, 2]
    upper = 0xF0F0;
  } else {
    static_assert(kSpan == 8);
    t = _mm512_shuffle_f32x4(v, v, 0x4E);  // 128-bit lanes [2, 3, 0, 1]
    upper = 0xFF00;
  }
  return _mm512_mask_sub_ps(_mm512_add_ps(v, t), upper, t, v);
}

}  // namespace

// Rotate32 per block: the sign flips as an xor of the sign bits, the 5 stages of spans 1-16 (the
// last between the two vectors), then the multiplication by 1/sqrt(32).
FFLITE_VNNI void RotateBlocksAvx512(size_t blocks, const float* x, float* y) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __mmask16 flip_lo = static_cast<__mmask16>(kHadamardSigns & 0xffffu);
  const __mmask16 flip_hi = static_cast<__mmask16>(kHadamardSigns >> 16);
  const __m512 norm = _mm512_set1_ps(0.17677669529663688f);  // Rotate32's constant
  for (size_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * kQuantBlock;
    float* yb = y + b * kQuantBlock;
    __m512i lo_bits = _mm512_loadu_si512(xb);
    __m512i hi_bits = _mm512_loadu_si512(xb + 16);
    lo_bits = _mm512_mask_xor_epi32(lo_bits, flip_lo, lo_bits, sign);
    hi_bits = _mm512_mask_xor_epi32(hi_bits, flip_hi, hi_bits, sign);
    __m512 lo = _mm512_castsi512_ps(lo_bits), hi = _mm512_castsi512_ps(hi_bits);
    lo = Butterfly<8>(Butterfly<4>(Butterfly<2>(Butterfly<1>(lo))));
    hi = Butterfly<8>(Butterfly<4>(Butterfly<2>(Butterfly<1>(hi))));
    const __m512 sum = _mm512_add_ps(lo, hi), diff = _mm512_sub_ps(lo, hi);
    _mm512_storeu_ps(yb, _mm512_mul_ps(sum, norm));
    _mm512_storeu_ps(yb + 16, _mm512_mul_ps(diff, norm));
  }
}

// 32 activations in two 16-lane vectors: the scalar twin's operations (IEEE max, divide, multiply,
// round to nearest even through MXCSR like nearbyint), so the blocks are bit-identical to it.
FFLITE_VNNI void QuantizeActivationsAvx512(size_t c, size_t k, const float* x, size_t x_stride,
                                           QActBlock* xq) {
  const size_t kb = (k + kQuantBlock - 1) / kQuantBlock;
  for (size_t t = 0; t < c; ++t) {
    const float* xt = x + t * x_stride;
    for (size_t b = 0; b < kb; ++b) {
      const size_t j = b * kQuantBlock;
      __m512 v0, v1;
      if (j + kQuantBlock <= k) {
        v0 = _mm512_loadu_ps(xt + j);
        v1 = _mm512_loadu_ps(xt + j + 16);
      } else {
        // Masked loads: nothing past x[k) is read; the padding is zero.
        const size_t rest = k - j;
        const __mmask16 m0 = static_cast<__mmask16>(rest >= 16 ? 0xffffu : (1u << rest) - 1u);
        const __mmask16 m1 = static_cast<__mmask16>(rest > 16 ? (1u << (rest - 16)) - 1u : 0u);
        v0 = _mm512_maskz_loadu_ps(m0, xt + j);
        v1 = _mm512_maskz_loadu_ps(m1, xt + j + 16);
      }
      const float amax =
          _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      QActBlock& out = xq[t * kb + b];
      out.d = amax >= kQuantActMinAbsMax ? amax / 127.0f : 0.0f;
      const __m512 inv = _mm512_set1_ps(amax >= kQuantActMinAbsMax ? 127.0f / amax : 0.0f);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q + 16), _mm512_cvtepi32_epi8(q1));
      out.sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
  }
}

// The dot products are exact: I8 lanes add 4 products of (q_w + 128) in [1, 255] and q_x in
// [-127, 127] per step, at most 32·255·127 ≈ 1.04e6 per block with the offset; I4 at most
// 32·15·127.
FFLITE_VNNI void QGemmAvx512Vnni(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                                 const float* bias, const QActBlock* xq, float* y,
                                 size_t y_stride) {
  RunWithQ2KMins(c, k, rows, w, type, xq, y, y_stride, [&](const Q2KSumsQ* mins) {
    WithQuantTraits(type, [&](auto q) {
      QGemm<decltype(q)>(c, k, rows, w, bias, xq, y, y_stride, mins);
    });
  });
}

}  // namespace fflite

#endif  // FFLITE_QGEMM_X86
