// The float-activation product over quantised panels (format/quant_layout.h) for AVX2 + FMA3 +
// F16C: two ymm registers of 8 lanes hold the 16 rows of a panel, the weights dequantised in
// registers (I4: through L1) and streamed from memory once per call for 2 tokens, prefetched in
// address order.
//
// I8: vpmovsxbd widens 8 bytes of a 64-byte group (2 rows × 4 k) exactly, multiplied by the
// group's 4 activations; the 4 products of a row are added at the end of each block. I4: each
// block is first decoded to the I8 layout (vpshufb looks each nibble up in a 16-entry table, two
// nibbles per byte, no per-lane shifts), as f16 (n - 8 is exact in f16 and its low byte is 0, so
// the table holds its high byte and vpunpck{l,h}bw with zero makes the words), which vcvtph2ps
// reads from L1: one conversion and no widening per 8 weights; from there the arithmetic is I8's
// (the same f32 weights, the same FMAs in the same order). Each block's sums are scaled by its
// f16 scales into the panel accumulators. Every token sees the same sequence of operations
// whatever c and however its tokens are grouped, and every panel whatever the rows of the call,
// so results do not depend on c nor on how the rows are split among threads.
//
// c = 1 has its own path, as in qgemv_avx512.cc: 4 panels per pass over x, block by block, each
// panel's bytes prefetched as its own stream, each panel's operations exactly the general path's.
//
// Measured on Zen 5 (one core of a shared 2-core VM, [11008, 4096] weights rotated through 300 MB,
// against a plain read loop in the same run; the machine was loaded, so ±5 points): this kernel is
// bound by its vector instructions here (~3 per 8 weights and token: widen or convert, convert,
// FMA; the AVX-512 kernel does 16 weights per instruction). Warm (128 rows, from L2), GB/s of
// weights, before -> after this version: I8 c = 1 30 -> 30 (the ceiling: 3 instructions per 8
// weights), c = 2 15 -> 21.5, c = 4 7.9 -> 10.9; I4 c = 1 11.4 -> 13.3, c = 2 9.8 -> 10.7, c = 3
// 5.3 -> 7.2, c = 4 4.9 -> 6.0. Cold (medians of 4 × 15 runs, % of the read loop): I8 c = 1
// 64% -> 75%, c = 4 21% -> 30%; I4 c = 1 33% -> 37%, c = 4 13% -> 15%.
// The shift-pair I4 decoding (~4 instructions per 8 weights), the int8 decoding (vpmovsxbd +
// vcvtdq2ps from the decoded bytes: 12.8 GB/s warm at c = 1) and 3 tokens per group (spills) were
// slower. On AVX2-only CPUs (8-lane FMA units at higher clocks) the balance differs.
#include "kernels/quant_kernels.h"
#include "kernels/quant_prefetch.h"

#if defined(FFLITE_QGEMV_X86)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/quant_types.h"

// Per-function target attributes, as in kernels_avx2.cc: no AVX2 code in shared inline functions.
#define FFLITE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace fflite {

namespace {

// Tokens per group: the group's weights are dequantised once for all its tokens. 2 tokens × 4
// partial sums (a half panel at a time, see BlockSumsI8) + the activations and the widened vector
// fit the 16 ymm registers (the 4 panel accumulators are updated once per block: the compiler may
// keep them in memory). Tokens per batch: the groups that share one pass over memory; with more
// than one group (and always for I4), a panel is done in spans of kSpanBlocks blocks (I8: 4 KiB),
// each span by every group in turn (from L1; I4: decoded once for all groups) before the next, so
// the weights stream from memory at a steady rate.
constexpr int kMaxTokens = 2;
constexpr size_t kBatchTokens = 8;
constexpr size_t kSpanBlocks = 8;
// Weights in a block of a panel (16 rows × 32 k): I8 bytes; I4 blocks are decoded to f16, twice.
constexpr size_t kI8BlockBytes = 8 * 64;
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

// I8: sums[t][h] = Σ_j q[8h + r][j] · x[t][j] over the 32 k of one block (lane r), T tokens; xb[t]:
// the block's 32 activations of token t. vpmovsxbd widens 8 bytes of a group (rows 2m, 2m + 1 ×
// the 4 k of group g) exactly, so lane 4r' + i of part[t][m] sums row 2m + r' at k = 4g + i,
// against the group's 4 activations repeated; the rows' 4 sums are added at the end of the block.
// (Sign-extending each byte in place instead costs two shifts per 8 weights, and the kernel was
// bound by them: 22 against 33 GB/s on warm I8 weights, one token, Zen 5.) kF16: blk holds the
// block's weights as f16 (DecodeI4BlockF16), converted by vcvtph2ps; the same f32 weights.
template <int T, bool kF16 = false>
FFLITE_AVX2 inline void BlockSumsI8(const uint8_t* blk, const float* const* xb,
                                    __m256 (*sums)[2]) {
  // hadd twice gives [r0 r2 r4 r6 | r1 r3 r5 r7] of 8 rows ((i0 + i1) + (i2 + i3) each); a
  // permutation puts them in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  // One token of I8: both halves at once (8 independent partial sums, measured 4% faster); else
  // half h (rows 8h..8h + 7) at a time, 4 partial sums per token, so that 2 tokens fit the
  // registers (and I4 at c = 1, measured 15% faster so). Each partial sum sees the same
  // operations either way.
  constexpr int kHalves = T == 1 && !kF16 ? 2 : 1;
  for (int h0 = 0; h0 < 2; h0 += kHalves) {
    __m256 part[T][4 * kHalves];
    for (int t = 0; t < T; ++t) {
      for (int m = 0; m < 4 * kHalves; ++m) part[t][m] = _mm256_setzero_ps();
    }
#pragma GCC unroll 8
    for (size_t g = 0; g < 8; ++g) {
      __m256 xv[T];
      for (int t = 0; t < T; ++t) {
        xv[t] = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(xb[t] + 4 * g));
      }
      for (int hm = 0; hm < 4 * kHalves; ++hm) {
        const int h = h0 + hm / 4, m = hm % 4;
        __m256 f;
        if constexpr (kF16) {
          // DecodeI4BlockF16's order within each 32 weights: m = 0, 2, 1, 3.
          f = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(
              blk + 2 * (64 * g + 32 * h + 8 * (2 * (m & 1) + (m >> 1))))));
        } else {
          f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
              reinterpret_cast<const __m128i*>(blk + 64 * g + 32 * h + 8 * m))));
        }
        for (int t = 0; t < T; ++t) part[t][hm] = _mm256_fmadd_ps(f, xv[t], part[t][hm]);
      }
    }
    for (int t = 0; t < T; ++t) {
      for (int hh = 0; hh < kHalves; ++hh) {
        const __m256* p = part[t] + 4 * hh;
        const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
        sums[t][h0 + hh] = _mm256_permutevar8x32_ps(s, order);
      }
    }
  }
}

// I4 -> f16: writes the block's 512 weights q = n - 8 as f16 (exact) to `out` (2 × 512 bytes) in
// the I8 layout (chunk c's low nibbles are group c, its high nibbles group c + 4, weight for
// weight), vpshufb looking each nibble up in a 16-entry table of the high byte of f16(n - 8) (its
// low byte is 0); within each 32 weights, the 8-weight vectors are in the order 0, 2, 1, 3
// (vpunpck{l,h}bw work within 128-bit lanes).
FFLITE_AVX2 inline void DecodeI4BlockF16(const uint8_t* blk, uint8_t* out) {
  const __m256i table = _mm256_setr_epi8(
      -56, -57, -58, -59, -60, -62, -64, -68, 0, 60, 64, 66, 68, 69, 70, 71,
      -56, -57, -58, -59, -60, -62, -64, -68, 0, 60, 64, 66, 68, 69, 70, 71);
  const __m256i low = _mm256_set1_epi8(0x0f);
  const __m256i zero = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (size_t i = 0; i < 8; ++i) {
    const size_t c = i / 2, h = i % 2;
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * c + 32 * h));
    const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
    const __m256i hi =
        _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
    uint8_t* o_lo = out + 2 * (64 * c + 32 * h);
    uint8_t* o_hi = out + 2 * (64 * (c + 4) + 32 * h);
    _mm256_store_si256(reinterpret_cast<__m256i*>(o_lo), _mm256_unpacklo_epi8(zero, lo));
    _mm256_store_si256(reinterpret_cast<__m256i*>(o_lo + 32), _mm256_unpackhi_epi8(zero, lo));
    _mm256_store_si256(reinterpret_cast<__m256i*>(o_hi), _mm256_unpacklo_epi8(zero, hi));
    _mm256_store_si256(reinterpret_cast<__m256i*>(o_hi + 32), _mm256_unpackhi_epi8(zero, hi));
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
template <int T, typename Q>
FFLITE_AVX2 void GroupSpan(const PanelArgs& a, size_t first, size_t b0, size_t b1,
                           const uint8_t* decoded, Prefetcher& prefetcher, __m256* acc) {
  for (size_t b = b0; b < b1; ++b) {
    prefetcher.Step();
    const float* xb[T];
    for (int t = 0; t < T; ++t) {
      xb[t] = b < a.full_blocks ? a.x + (first + t) * a.x_stride + b * kQuantBlock
                                : a.x_tail[first + t];
    }
    __m256 sums[T][2];
    // I4: the span's blocks, decoded to f16 once for all groups.
    const uint8_t* blk = Q::kBits == 4 ? decoded + (b - b0) * 2 * kI8BlockBytes
                             : a.panel + a.scale_bytes + b * a.block_bytes;
    BlockSumsI8<T, Q::kBits == 4>(blk, xb, sums);
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

template <typename Q, int T = 1>
FFLITE_AVX2 void GroupSpanOf(size_t tokens, const PanelArgs& a, size_t first, size_t b0,
                             size_t b1, const uint8_t* decoded, Prefetcher& prefetcher,
                             __m256* acc) {
  if constexpr (T < kMaxTokens) {
    if (tokens != T) {
      GroupSpanOf<Q, T + 1>(tokens, a, first, b0, b1, decoded, prefetcher, acc);
      return;
    }
  }
  GroupSpan<T, Q>(a, first, b0, b1, decoded, prefetcher, acc);
}

// One token (c = 1): kPassPanels panels per pass over x, block by block, so each block of
// activations is read once per pass instead of once per panel, and the panels' weight and scale
// streams are read side by side, each prefetched as its own stream (as in qgemv_avx512.cc). Each
// panel sees exactly the operations GroupSpan<1> gives it (the panels of a pass are independent),
// so results match c > 1 and any row split.
constexpr size_t kPassPanels = 4;
// Per panel, how far ahead of the reading its data stream is prefetched, in bytes (the
// scales' stream runs as many blocks ahead; see quant_prefetch.h).
constexpr uint64_t kPassPrefetchBytes = 2048;

// acc[j][h] = Σ_b scale[j][b] · (block b's sums of panel j, half h) for the P panels from
// `first`, one token.
template <int P, typename Q>
FFLITE_AVX2 void PassOneToken(const uint8_t* first, const QuantGeometry& g, size_t full_blocks,
                              const float* x, const float* x_tail, QuantPassPrefetcher& prefetcher,
                              __m256 (*acc_out)[2]) {
  __m256 acc[P][2];
  for (int j = 0; j < P; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  const uint8_t* blk = first + g.scale_bytes;
  for (size_t b = 0; b < g.k_blocks; ++b, blk += g.block_panel_bytes) {
    prefetcher.Step();
    const float* xb[1] = {b < full_blocks ? x + b * kQuantBlock : x_tail};
    // Each panel's sums are scaled into its accumulators at once (few registers live).
    for (int j = 0; j < P; ++j) {
      __m256 sums[1][2];
      if constexpr (Q::kBits == 4) {
        alignas(32) uint8_t q[2 * kI8BlockBytes];
        DecodeI4BlockF16(blk + j * g.panel_bytes, q);
        BlockSumsI8<1, true>(q, xb, sums);
      } else {
        BlockSumsI8<1>(blk + j * g.panel_bytes, xb, sums);
      }
      const uint8_t* scales = first + j * g.panel_bytes + b * 2 * kQuantPanelRows;
      for (int h = 0; h < 2; ++h) {
        const __m256 scale =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * h)));
        acc[j][h] = _mm256_fmadd_ps(sums[0][h], scale, acc[j][h]);
      }
    }
  }
  for (int j = 0; j < P; ++j) acc_out[j][0] = acc[j][0], acc_out[j][1] = acc[j][1];
}

// y[r0 .. r0 + n) = bias + the panel's sums (n < 16: the last, partial panel, through memory:
// nothing past `rows` is read or written).
FFLITE_AVX2 inline void StorePanel(const __m256* acc, const float* bias, size_t r0, size_t n,
                                   float* yt) {
  if (n == kQuantPanelRows) {
    for (int h = 0; h < 2; ++h) {
      __m256 v = acc[h];
      if (bias != nullptr) v = _mm256_add_ps(_mm256_loadu_ps(bias + r0 + 8 * h), v);
      _mm256_storeu_ps(yt + 8 * h, v);
    }
  } else {
    float sums[kQuantPanelRows];
    _mm256_storeu_ps(sums, acc[0]);
    _mm256_storeu_ps(sums + 8, acc[1]);
    for (size_t r = 0; r < n; ++r) yt[r] = bias != nullptr ? bias[r0 + r] + sums[r] : sums[r];
  }
}

template <typename Q>
FFLITE_AVX2 void QGemvOneToken(size_t k, size_t rows, const uint8_t* w, const float* bias,
                               const float* x, float* y) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  const size_t full_blocks = k / kQuantBlock, tail = k % kQuantBlock;
  float x_tail[kQuantBlock];
  if (tail != 0) {
    std::memset(x_tail, 0, sizeof(x_tail));
    std::memcpy(x_tail, x + full_blocks * kQuantBlock, tail * sizeof(float));
  }
  QuantPassPrefetcher prefetcher(w, g.bytes(), g, kPassPanels, kPassPrefetchBytes);
  for (size_t p = 0; p < g.panels; p += kPassPanels) {
    const size_t n = g.panels - p < kPassPanels ? g.panels - p : kPassPanels;
    const uint8_t* first = w + p * g.panel_bytes;
    prefetcher.StartPass(first, n, p == 0);
    __m256 acc[kPassPanels][2];
    switch (n) {
      case 4: PassOneToken<4, Q>(first, g, full_blocks, x, x_tail, prefetcher, acc); break;
      case 3: PassOneToken<3, Q>(first, g, full_blocks, x, x_tail, prefetcher, acc); break;
      case 2: PassOneToken<2, Q>(first, g, full_blocks, x, x_tail, prefetcher, acc); break;
      default: PassOneToken<1, Q>(first, g, full_blocks, x, x_tail, prefetcher, acc); break;
    }
    for (size_t j = 0; j < n; ++j) {
      const size_t r0 = (p + j) * kQuantPanelRows;
      const size_t m = rows - r0 < kQuantPanelRows ? rows - r0 : kQuantPanelRows;
      StorePanel(acc[j], bias, r0, m, y + r0);
    }
  }
}

template <typename Q>
FFLITE_AVX2 void QGemv(size_t c, size_t k, size_t rows, const uint8_t* w, const float* bias,
                       const float* x, size_t x_stride, float* y, size_t y_stride) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  const size_t full_blocks = k / kQuantBlock, tail = k % kQuantBlock;
  if (c == 1) {
    QGemvOneToken<Q>(k, rows, w, bias, x, y);
    return;
  }
  // Steps per panel: one per block for each group of each batch.
  uint64_t steps = 0;
  for (size_t t0 = 0; t0 < c; t0 += kBatchTokens) {
    const size_t batch = c - t0 < kBatchTokens ? c - t0 : kBatchTokens;
    steps += (batch + kMaxTokens - 1) / kMaxTokens * g.k_blocks;
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
        const size_t groups_left = (left + kMaxTokens - 1) / kMaxTokens;
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
      const size_t span = Q::kBits == 4 || groups > 1 ? kSpanBlocks : g.k_blocks;
      for (size_t b0 = 0; b0 < g.k_blocks; b0 += span) {
        const size_t b1 = g.k_blocks - b0 < span ? g.k_blocks : b0 + span;
        alignas(32) uint8_t decoded[Q::kBits == 4 ? kSpanBlocks : 1][Q::kBits == 4 ? 2 * kI8BlockBytes : 1];
        if constexpr (Q::kBits == 4) {
          for (size_t b = b0; b < b1; ++b) {
            DecodeI4BlockF16(panel + g.scale_bytes + b * g.block_panel_bytes, decoded[b - b0]);
          }
        }
        for (size_t gi = 0, t = 0; gi < groups; t += group_size[gi++]) {
          GroupSpanOf<Q>(group_size[gi], args, t, b0, b1, decoded[0], prefetcher, acc + 2 * t);
        }
      }
      for (size_t t = 0; t < batch; ++t) {
        StorePanel(acc + 2 * t, bias, r0, n, y + (t0 + t) * y_stride + r0);
      }
    }
  }
}

}  // namespace

FFLITE_AVX2 void QGemvAvx2(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                           const float* bias, const float* x, size_t x_stride, float* y,
                           size_t y_stride) {
  switch (type) {
    case QuantType::kQ8: QGemv<Q8>(c, k, rows, w, bias, x, x_stride, y, y_stride); break;
    case QuantType::kQ4: QGemv<Q4>(c, k, rows, w, bias, x, x_stride, y, y_stride); break;
    default: break;  // validated by the caller: nothing else reaches a kernel
  }
}

}  // namespace fflite

#endif  // FFLITE_QGEMV_X86
