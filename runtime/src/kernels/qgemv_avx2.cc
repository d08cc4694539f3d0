// The float-activation product over quantised panels (format/quant_layout.h) for AVX2 + FMA3 +
// F16C: two ymm registers of 8 lanes hold the 16 rows of a panel, the weights dequantised in
// registers and streamed from memory once per call for 1 (I8) or 2 (I4) tokens, prefetched in
// address order.
//
// I8: vpmovsxbd widens 8 bytes of a 64-byte group (2 rows × 4 k) exactly, multiplied by the
// group's 4 activations; the 4 products of a row are added at the end of each block. I4: for each
// byte position i, a shift pair sign-extends each nibble in place in the 32-bit lane of its row,
// vcvtdq2ps makes 8 f32 weights for one k, multiplied by that k's activation. Each block's sums are
// scaled by its f16 scales into the panel accumulators. Every token sees the same sequence of
// operations whatever c and however its tokens are grouped, and every panel whatever the rows of
// the call, so results do not depend on c nor on how the rows are split among threads.
//
// Measured on Zen 5 (see qgemv_avx512.cc for the setting): c = 1 reads I8 at 60-67% of a plain
// read loop's bandwidth (warm: 28 GB/s, as fast as the memory; the AVX-512 kernel's limits apply),
// I4 at 30-34%, bound by the arithmetic (warm 11 GB/s: 8 lanes and ~3.5 instructions per 8
// weights; the AVX-512 kernel's table lookup needs 16-entry vpermps). c = 4 is bound by the
// multiply-adds: 14-24%. On AVX2-only CPUs (8-lane FMA units at higher clocks) the balance differs.
#include "kernels/quant_kernels.h"

#if defined(FFLITE_QGEMV_X86)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "format/quant_layout.h"

// Per-function target attributes, as in kernels_avx2.cc: no AVX2 code in shared inline functions.
#define FFLITE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace fflite {

namespace {

// Tokens per group: the group's weights are dequantised once for all its tokens. I8: 1 token, 8
// partial sums (see BlockSumsI8) + the activations and the widened vector; I4: 2 tokens × 2 halves
// × 2 partial sums + the loaded, shifted and converted vectors and a broadcast activation fill the
// 16 ymm registers (the 4 panel accumulators are updated once per block: the compiler may keep
// them in memory). Tokens per batch: the groups that share one pass over memory; with more than
// one group, a panel is done in spans of kSpanBlocks blocks (I8: 4 KiB), each span by every group
// in turn (from L1) before the next, so the weights stream from memory at a steady rate.
template <bool kI4>
constexpr int MaxTokens() {
  return kI4 ? 2 : 1;
}
constexpr size_t kBatchTokens = 8;
constexpr size_t kSpanBlocks = 8;
// How far ahead of the blocks being read the software prefetch runs, in bytes.
constexpr uintptr_t kPrefetchBytes = 16384;

// Prefetches the matrix in address order, kPrefetchBytes ahead of the reading, spread evenly
// over every step (one block of one token group) of a panel: each panel's steps prefetch the
// panel_bytes that lie kPrefetchBytes past its start. The panels' two runs (blocks, and scales a
// line every second block) and the page skipped between two panels' blocks are followed poorly by
// the hardware prefetchers (see qgemv_avx512.cc). Addresses are integers: prefetching past the
// caller's panels is skipped (those lines belong to another thread's rows).
class Prefetcher {
 public:
  FFLITE_AVX2 Prefetcher(const uint8_t* w, uint64_t bytes)
      : next_(reinterpret_cast<uintptr_t>(w)), end_(next_ + bytes) {
    // The first kPrefetchBytes: no panel's steps cover them.
    Prefetch(next_ + kPrefetchBytes);
  }
  // A panel of panel_bytes starting at `panel`, read in `steps` steps.
  FFLITE_AVX2 void StartPanel(const uint8_t* panel, uint64_t panel_bytes, uint64_t steps) {
    base_ = reinterpret_cast<uintptr_t>(panel) + kPrefetchBytes;
    step_q16_ = steps > 0 ? (panel_bytes << 16) / steps : 0;
    done_ = 0;
  }
  FFLITE_AVX2 void Step() {
    ++done_;
    Prefetch(base_ + ((done_ * step_q16_) >> 16));
  }

 private:
  FFLITE_AVX2 void Prefetch(uintptr_t target) {
    if (target > end_) target = end_;
    for (; next_ < target; next_ += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(next_), _MM_HINT_T0);
    }
  }

  uintptr_t next_, end_;
  uintptr_t base_ = 0;
  uint64_t step_q16_ = 0, done_ = 0;
};

// The low (kHigh false) or high nibble of byte I of each 32-bit lane of v, where v holds the
// stored bytes XOR 0x88 (each nibble then is q in 4-bit two's complement), sign-extended, as f32.
template <int I, bool kHigh>
FFLITE_AVX2 inline __m256 NibbleAsFloat(__m256i v) {
  constexpr int kShift = (kHigh ? 24 : 28) - 8 * I;
  const __m256i top = kShift == 0 ? v : _mm256_slli_epi32(v, kShift);
  return _mm256_cvtepi32_ps(_mm256_srai_epi32(top, 28));
}

// I8: sums[t][h] = Σ_j q[8h + r][j] · x[t][j] over the 32 k of one block (lane r), T tokens; xb[t]:
// the block's 32 activations of token t. vpmovsxbd widens 8 bytes of a group (rows 2m, 2m + 1 ×
// the 4 k of group g) exactly, so lane 4r' + i of part[t][m] sums row 2m + r' at k = 4g + i,
// against the group's 4 activations repeated; the rows' 4 sums are added at the end of the block.
// (Sign-extending each byte in place instead costs two shifts per 8 weights, and the kernel was
// bound by them: 22 against 33 GB/s on warm I8 weights, one token, Zen 5.)
template <int T>
FFLITE_AVX2 inline void BlockSumsI8(const uint8_t* blk, const float* const* xb,
                                    __m256 (*sums)[2]) {
  __m256 part[T][8];
  for (int t = 0; t < T; ++t) {
    for (int m = 0; m < 8; ++m) part[t][m] = _mm256_setzero_ps();
  }
#pragma GCC unroll 8
  for (size_t g = 0; g < 8; ++g) {
    __m256 xv[T];
    for (int t = 0; t < T; ++t) {
      xv[t] = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(xb[t] + 4 * g));
    }
    for (int m = 0; m < 8; ++m) {
      const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 64 * g + 8 * m))));
      for (int t = 0; t < T; ++t) part[t][m] = _mm256_fmadd_ps(f, xv[t], part[t][m]);
    }
  }
  // hadd twice gives [r0 r2 r4 r6 | r1 r3 r5 r7] of 8 rows ((i0 + i1) + (i2 + i3) each); a
  // permutation puts them in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < 2; ++h) {
      const __m256* p = part[t] + 4 * h;
      const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
      sums[t][h] = _mm256_permutevar8x32_ps(s, order);
    }
  }
}

// part[t][h][I % 2] += f · x[t][j] for the T tokens of a group, half h of the panel.
template <int T, int I>
FFLITE_AVX2 inline void Fma(__m256 f, const float* const* xb, size_t j, int h,
                            __m256 (*part)[2][2]) {
  for (int t = 0; t < T; ++t) {
    part[t][h][I % 2] = _mm256_fmadd_ps(f, _mm256_set1_ps(xb[t][j]), part[t][h][I % 2]);
  }
}

// I4: sums[t][h] as for I8. part[t][h][p] sums the k with i % 2 = p (two chains per half and token,
// so that 2 tokens fit the registers); each nibble is sign-extended in place by a shift pair.
template <int T>
FFLITE_AVX2 inline void BlockSumsI4(const uint8_t* blk, const float* const* xb,
                                    __m256 (*sums)[2]) {
  __m256 part[T][2][2];
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < 2; ++h) part[t][h][0] = part[t][h][1] = _mm256_setzero_ps();
  }
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x88));
  // Chunk c: low nibbles are group c (k = 4c + i), high nibbles group c + 4 (k = 16 + 4c + i).
#pragma GCC unroll 4
  for (size_t c = 0; c < 4; ++c) {
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_xor_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * c + 32 * h)), flip);
      Fma<T, 0>(NibbleAsFloat<0, false>(v), xb, 4 * c + 0, h, part);
      Fma<T, 1>(NibbleAsFloat<1, false>(v), xb, 4 * c + 1, h, part);
      Fma<T, 2>(NibbleAsFloat<2, false>(v), xb, 4 * c + 2, h, part);
      Fma<T, 3>(NibbleAsFloat<3, false>(v), xb, 4 * c + 3, h, part);
      Fma<T, 0>(NibbleAsFloat<0, true>(v), xb, 16 + 4 * c + 0, h, part);
      Fma<T, 1>(NibbleAsFloat<1, true>(v), xb, 16 + 4 * c + 1, h, part);
      Fma<T, 2>(NibbleAsFloat<2, true>(v), xb, 16 + 4 * c + 2, h, part);
      Fma<T, 3>(NibbleAsFloat<3, true>(v), xb, 16 + 4 * c + 3, h, part);
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < 2; ++h) sums[t][h] = _mm256_add_ps(part[t][h][0], part[t][h][1]);
  }
}

// What a group needs to read one panel: the block geometry and each token's activations.
struct PanelArgs {
  const uint8_t* panel;
  uint64_t scale_bytes, block_bytes;
  size_t full_blocks;       // blocks with 32 activations in x (the last may be partial)
  const float* x;           // token t0 of the batch
  size_t x_stride;
  const float (*x_tail)[kQuantBlock];  // [batch][32]: the partial last block, zero-padded
};

// acc[2t + h] += Σ_{b0 <= b < b1} scale[b] · (block b's sums) for the T tokens of a group (the
// batch's tokens from `first`), half h of the panel; acc in memory between spans.
template <int T, bool kI4>
FFLITE_AVX2 void GroupSpan(const PanelArgs& a, size_t first, size_t b0, size_t b1,
                           Prefetcher& prefetcher, __m256* acc) {
  for (size_t b = b0; b < b1; ++b) {
    prefetcher.Step();
    const float* xb[T];
    for (int t = 0; t < T; ++t) {
      xb[t] = b < a.full_blocks ? a.x + (first + t) * a.x_stride + b * kQuantBlock
                                : a.x_tail[first + t];
    }
    __m256 sums[T][2];
    const uint8_t* blk = a.panel + a.scale_bytes + b * a.block_bytes;
    if constexpr (kI4) {
      BlockSumsI4<T>(blk, xb, sums);
    } else {
      BlockSumsI8<T>(blk, xb, sums);
    }
    const uint8_t* scales = a.panel + b * 2 * kQuantPanelRows;
    for (int h = 0; h < 2; ++h) {
      const __m256 scale =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * h)));
      for (int t = 0; t < T; ++t) {
        const __m256 sum = sums[t][h];
        acc[2 * t + h] = _mm256_fmadd_ps(sum, scale, acc[2 * t + h]);
      }
    }
  }
}

template <bool kI4, int T = 1>
FFLITE_AVX2 void GroupSpanOf(size_t tokens, const PanelArgs& a, size_t first, size_t b0,
                             size_t b1, Prefetcher& prefetcher, __m256* acc) {
  if constexpr (T < MaxTokens<kI4>()) {
    if (tokens != T) {
      GroupSpanOf<kI4, T + 1>(tokens, a, first, b0, b1, prefetcher, acc);
      return;
    }
  }
  GroupSpan<T, kI4>(a, first, b0, b1, prefetcher, acc);
}

template <bool kI4>
FFLITE_AVX2 void QGemv(size_t c, size_t k, size_t rows, const uint8_t* w, const float* bias,
                       const float* x, size_t x_stride, float* y, size_t y_stride) {
  const QuantGeometry g = QuantMatrixGeometry(kI4 ? DType::I4 : DType::I8, rows, k);
  const size_t full_blocks = k / kQuantBlock, tail = k % kQuantBlock;
  // Steps per panel: one per block for each group of each batch.
  uint64_t steps = 0;
  for (size_t t0 = 0; t0 < c; t0 += kBatchTokens) {
    const size_t batch = c - t0 < kBatchTokens ? c - t0 : kBatchTokens;
    steps += (batch + MaxTokens<kI4>() - 1) / MaxTokens<kI4>() * g.k_blocks;
  }
  Prefetcher prefetcher(w, g.bytes());
  for (size_t p = 0; p < g.panels; ++p) {
    const uint8_t* panel = w + p * g.panel_bytes;
    const size_t r0 = p * kQuantPanelRows;
    const size_t n = rows - r0 < kQuantPanelRows ? rows - r0 : kQuantPanelRows;
    prefetcher.StartPanel(panel, g.panel_bytes, steps);
    for (size_t t0 = 0; t0 < c; t0 += kBatchTokens) {
      const size_t batch = c - t0 < kBatchTokens ? c - t0 : kBatchTokens;
      // Groups split evenly (I4: 3 -> 2 + 1, 7 -> 2 + 2 + 2 + 1); the grouping changes no result.
      size_t group_size[kBatchTokens];
      size_t groups = 0;
      for (size_t t = 0; t < batch; ++groups) {
        const size_t left = batch - t;
        const size_t groups_left = (left + MaxTokens<kI4>() - 1) / MaxTokens<kI4>();
        group_size[groups] = (left + groups_left - 1) / groups_left;
        t += group_size[groups];
      }
      // The last block's activations past k are not in x: a zero-padded copy (zero weights
      // there too, and 0 · 0 adds nothing).
      float x_tail[kBatchTokens][kQuantBlock];
      if (tail != 0) {
        for (size_t t = 0; t < batch; ++t) {
          std::memset(x_tail[t], 0, sizeof(x_tail[t]));
          std::memcpy(x_tail[t], x + (t0 + t) * x_stride + full_blocks * kQuantBlock,
                      tail * sizeof(float));
        }
      }
      const PanelArgs args = {panel,       g.scale_bytes,         g.block_panel_bytes,
                              full_blocks, x + t0 * x_stride, x_stride, x_tail};
      __m256 acc[2 * kBatchTokens];
      for (size_t i = 0; i < 2 * batch; ++i) acc[i] = _mm256_setzero_ps();
      const size_t span = groups > 1 ? kSpanBlocks : g.k_blocks;
      for (size_t b0 = 0; b0 < g.k_blocks; b0 += span) {
        const size_t b1 = g.k_blocks - b0 < span ? g.k_blocks : b0 + span;
        for (size_t gi = 0, t = 0; gi < groups; t += group_size[gi++]) {
          GroupSpanOf<kI4>(group_size[gi], args, t, b0, b1, prefetcher, acc + 2 * t);
        }
      }
      for (size_t t = 0; t < batch; ++t) {
        float* yt = y + (t0 + t) * y_stride + r0;
        if (n == kQuantPanelRows) {
          for (int h = 0; h < 2; ++h) {
            __m256 v = acc[2 * t + h];
            if (bias != nullptr) v = _mm256_add_ps(_mm256_loadu_ps(bias + r0 + 8 * h), v);
            _mm256_storeu_ps(yt + 8 * h, v);
          }
        } else {
          // The last, partial panel, through memory: nothing past `rows` is read or written.
          float sums[kQuantPanelRows];
          _mm256_storeu_ps(sums, acc[2 * t]);
          _mm256_storeu_ps(sums + 8, acc[2 * t + 1]);
          for (size_t r = 0; r < n; ++r) yt[r] = bias != nullptr ? bias[r0 + r] + sums[r] : sums[r];
        }
      }
    }
  }
}

}  // namespace

FFLITE_AVX2 void QGemvAvx2(size_t c, size_t k, size_t rows, const uint8_t* w, DType dtype,
                           const float* bias, const float* x, size_t x_stride, float* y,
                           size_t y_stride) {
  switch (dtype) {
    case DType::I8: QGemv<false>(c, k, rows, w, bias, x, x_stride, y, y_stride); break;
    case DType::I4: QGemv<true>(c, k, rows, w, bias, x, x_stride, y, y_stride); break;
    default: break;  // validated by the caller: nothing else reaches a kernel
  }
}

}  // namespace fflite

#endif  // FFLITE_QGEMV_X86
