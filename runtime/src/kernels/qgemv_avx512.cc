// The float-activation product over quantised panels (format/quant_layout.h) for AVX-512 (F + BW +
// VL, with FMA and F16C): 16 f32 lanes for the 16 rows of a panel, the weights dequantised in
// registers and streamed from memory once per call for up to 4 tokens, prefetched in address order.
//
// I8: vpmovsxbd widens a quarter of a 64-byte group (4 rows × 4 k) exactly, multiplied by the
// group's 4 activations; the 4 products of a row are added at the end of each block. I4: vpermps
// looks each nibble up in a table of n - 8, one vector of the 16 rows per k, multiplied by that
// k's activation. Each block's sums are scaled by its 16 f16 scales into the panel accumulator.
// Every token sees the same sequence of operations whatever c and however its tokens are grouped,
// and every panel whatever the rows of the call, so results do not depend on c nor on how the
// rows are split among threads.
//
// c = 1 has its own path: 4 panels per pass over x, block by block (each block of activations
// read once per pass, not once per panel), each panel's bytes prefetched as its own stream, with
// each panel's operations exactly those of the general path (results identical for any c/split).
//
// Measured on Zen 5 (one core of a shared 2-core VM, [11008, 4096] weights rotated through 300 MB,
// medians of 21 runs against a plain 64-byte-load read loop at 31-38 GB/s in the same run): c = 1
// reads I8 at 90-99% of that loop's bandwidth (one panel per pass: 60-68%). I4 was bound by the
// arithmetic at 70-84% (warm, from L2: 25-27 GB/s with a shift, a vpermps and an FMA per 16
// weights, the shifts and lookups sharing two vector pipes with the FMAs); with one vpsrlw per
// two nibbles (vpermps for the one in the low word, vpermw for the one in the high word) it runs
// at 33-38 GB/s warm and 86% of the read loop cold (medians of 21; ternlog/magic-number
// dequantisation, 2^23 | n, measured no faster). c = 4 is bound by the multiply-adds (one per
// weight and token): I8 at ~50%, I4 at ~33%.
#include "kernels/quant_kernels.h"
#include "kernels/quant_prefetch.h"

#if defined(FFLITE_QGEMV_X86)

// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined" vector that
// -Wmaybe-uninitialized flags once inlined (see gemv_avx512.cc): a false positive of GCC 12.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same at -O1 (the sanitizer builds)
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/quant_types.h"

// Per-function target attributes, as in kernels_avx2.cc: no AVX-512 code in shared inline
// functions.
#define FFLITE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

namespace fflite {

namespace {

// Tokens per group: the group's weights are dequantised once for all its tokens. 4 tokens × 4
// partial sums + 4 panel accumulators + the widened, converted vectors and the activations fit
// the 32 zmm registers. Tokens per batch: the groups that share one pass over memory; with more
// than one group, a panel is done in spans of kSpanBlocks blocks (I8: 4 KiB), each span by every
// group in turn (from L1) before the next, so the weights stream from memory at a steady rate.
constexpr int kMaxTokens = 4;
constexpr size_t kBatchTokens = 16;
constexpr size_t kSpanBlocks = 8;
// How far ahead of the blocks being read the software prefetch runs, in bytes (8, 16 and 32 KiB
// measured alike; 4 KiB lost 10-15%).
constexpr uintptr_t kPrefetchBytes = 16384;

// Prefetches the matrix in address order, kPrefetchBytes ahead of the reading, spread evenly over
// every step (one block of one token group) of a panel: each panel's steps prefetch the
// panel_bytes that lie kPrefetchBytes past its start. A panel read in order is two runs, its
// blocks and (a line every second block) its scales, and each panel's blocks start a page past
// the last panel's: the hardware prefetchers follow that poorly (without this prefetch c = 1 read
// at 40-48% of the read loop's bandwidth, with it 60-68%). Prefetching only the next panel's
// scales and first blocks, or bursting each panel's scales at its start, left it at 45-57%.
// Addresses are integers: prefetching past the caller's panels is skipped (those lines belong to
// another thread's rows).
class Prefetcher {
 public:
  FFLITE_AVX512 Prefetcher(const uint8_t* w, uint64_t bytes)
      : next_(reinterpret_cast<uintptr_t>(w)), end_(next_ + bytes) {
    Prefetch(next_ + kPrefetchBytes);  // the first kPrefetchBytes: no panel's steps cover them
  }
  // A panel of panel_bytes starting at `panel`, read in `steps` steps.
  FFLITE_AVX512 void StartPanel(const uint8_t* panel, uint64_t panel_bytes, uint64_t steps) {
    base_ = reinterpret_cast<uintptr_t>(panel) + kPrefetchBytes;
    step_q16_ = steps > 0 ? (panel_bytes << 16) / steps : 0;
    done_ = 0;
  }
  FFLITE_AVX512 void Step() {
    ++done_;
    Prefetch(base_ + ((done_ * step_q16_) >> 16));
  }

 private:
  FFLITE_AVX512 void Prefetch(uintptr_t target) {
    if (target > end_) target = end_;
    for (; next_ < target; next_ += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(next_), _MM_HINT_T0);
    }
  }

  uintptr_t next_, end_;
  uintptr_t base_ = 0;
  uint64_t step_q16_ = 0, done_ = 0;
};

// I8: sums[t] = Σ_j q[r][j] · x[t][j] over the 32 k of one block (lane r), T tokens; xb[t]: the
// block's 32 activations of token t. vpmovsxbd widens a quarter of a group (rows 4m..4m+3 × the 4
// k of group g) exactly, so lane 4r' + i of part[t][m] sums row 4m + r' at k = 4g + i, against
// the group's 4 activations repeated; the 4 sums of a row are added at the end of the block.
template <int T>
FFLITE_AVX512 inline void BlockSumsI8(const uint8_t* blk, const float* const* xb, __m512* sums) {
  __m512 part[T][4];
  for (int t = 0; t < T; ++t) {
    for (int m = 0; m < 4; ++m) part[t][m] = _mm512_setzero_ps();
  }
#pragma GCC unroll 8
  for (size_t g = 0; g < 8; ++g) {
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_broadcast_f32x4(_mm_loadu_ps(xb[t] + 4 * g));
    for (int m = 0; m < 4; ++m) {
      const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 64 * g + 16 * m))));
      for (int t = 0; t < T; ++t) part[t][m] = _mm512_fmadd_ps(f, xv[t], part[t][m]);
    }
  }
  // Lane 4m + r' of the result = (i0 + i1) + (i2 + i3) of row r' in part[m]: adjacent lanes are
  // added twice, each time merging two vectors' halves.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int t = 0; t < T; ++t) {
    const __m512 s01 = _mm512_add_ps(_mm512_permutex2var_ps(part[t][0], even, part[t][1]),
                                     _mm512_permutex2var_ps(part[t][0], odd, part[t][1]));
    const __m512 s23 = _mm512_add_ps(_mm512_permutex2var_ps(part[t][2], even, part[t][3]),
                                     _mm512_permutex2var_ps(part[t][2], odd, part[t][3]));
    sums[t] = _mm512_add_ps(_mm512_permutex2var_ps(s01, even, s23),
                            _mm512_permutex2var_ps(s01, odd, s23));
  }
}

// vpermw's table: bf16(i mod 16 - 8) in word i, the high halves of the f32 n - 8 (whose low halves
// are 0), twice (vpermw reads 5 bits of the index). vpermw with the low words zeroed gives the
// f32 of the nibble at bits 16..19 of each lane.
alignas(64) constexpr uint16_t kTableW[32] = {
    0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80, 0x0000, 0x3f80, 0x4000,
    0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0, 0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040,
    0xc000, 0xbf80, 0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0};
constexpr __mmask32 kHighWords = 0xaaaaaaaau;

// part[t][I] += (nibble at bit kShift of each lane of v, through `table`) · x[t][j].
template <int T, int I, int kShift>
FFLITE_AVX512 inline void NibbleFma(__m512i v, __m512 table, const float* const* xb, size_t j,
                                   __m512 (*part)[4]) {
  const __m512i index = kShift == 0 ? v : _mm512_srli_epi32(v, kShift);
  const __m512 f = _mm512_permutexvar_ps(index, table);  // uses the low 4 bits of each lane
  for (int t = 0; t < T; ++t) part[t][I] = _mm512_fmadd_ps(f, _mm512_set1_ps(xb[t][j]), part[t][I]);
}

// I4: sums[t] as for I8. vpermps looks each nibble up in a 16-entry table of n - 8 as f32 (one
// instruction where sign extension and conversion take three), one vector of the 16 rows per k
// (from 3 tokens on, vpermw for half of the nibbles, see BlockSumsI4Panels: the same weights);
// part[t][i] takes the k = i mod 4 of the block.
template <int T>
FFLITE_AVX512 inline void BlockSumsI4(const uint8_t* blk, const float* const* xb, __m512* sums) {
  const __m512 table = _mm512_setr_ps(-8.0f, -7.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f, 0.0f,
                                      1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f);
  __m512 part[T][4];
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < 4; ++i) part[t][i] = _mm512_setzero_ps();
  }
  // Chunk c: low nibbles are group c (k = 4c + i), high nibbles group c + 4 (k = 16 + 4c + i).
  if constexpr (T >= 3) {
    // 3+ tokens: one vpsrlw by 4s serves the nibbles at bits 4s and 16 + 4s, as in
    // BlockSumsI4Panels (the same weights, the same order of FMAs into each part[t][i]).
    const __m512i table_w = _mm512_load_si512(kTableW);
#pragma GCC unroll 4
    for (size_t c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(blk + 64 * c);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int n_lo = (s >> 1) + 4 * (s & 1), n_hi = n_lo + 2;
        const size_t k_lo = 4 * c + (n_lo & 3) + 16 * (n_lo >> 2);
        const size_t k_hi = 4 * c + (n_hi & 3) + 16 * (n_hi >> 2);
        const __m512i u = s == 0 ? v : _mm512_srli_epi16(v, 4 * s);
        const __m512 f_lo = _mm512_permutexvar_ps(u, table);
        const __m512 f_hi =
            _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kHighWords, u, table_w));
        for (int t = 0; t < T; ++t) {
          const int i_lo = n_lo & 3, i_hi = n_hi & 3;
          part[t][i_lo] = _mm512_fmadd_ps(f_lo, _mm512_set1_ps(xb[t][k_lo]), part[t][i_lo]);
          part[t][i_hi] = _mm512_fmadd_ps(f_hi, _mm512_set1_ps(xb[t][k_hi]), part[t][i_hi]);
        }
      }
    }
  } else {
    // 1-2 tokens: one shift and vpermps per nibble (measured faster here at c = 2, 10%).
#pragma GCC unroll 4
    for (size_t c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(blk + 64 * c);
      NibbleFma<T, 0, 0>(v, table, xb, 4 * c + 0, part);
      NibbleFma<T, 1, 8>(v, table, xb, 4 * c + 1, part);
      NibbleFma<T, 2, 16>(v, table, xb, 4 * c + 2, part);
      NibbleFma<T, 3, 24>(v, table, xb, 4 * c + 3, part);
      NibbleFma<T, 0, 4>(v, table, xb, 16 + 4 * c + 0, part);
      NibbleFma<T, 1, 12>(v, table, xb, 16 + 4 * c + 1, part);
      NibbleFma<T, 2, 20>(v, table, xb, 16 + 4 * c + 2, part);
      NibbleFma<T, 3, 28>(v, table, xb, 16 + 4 * c + 3, part);
    }
  }
  for (int t = 0; t < T; ++t) {
    sums[t] = _mm512_add_ps(_mm512_add_ps(part[t][0], part[t][1]),
                            _mm512_add_ps(part[t][2], part[t][3]));
  }
}

// BlockSumsI4<1> for P panels at blk + j·stride (j < P) at once: each activation is broadcast once
// for all P panels; each panel's sums get exactly BlockSumsI4<1>'s operations in its order, with
// the same weights (n - 8 exactly) found with fewer shifts: one vpsrlw by s (0, 4, 8, 12) serves
// the nibbles at bits s and 16 + s of each lane. vpermps looks up the one at s (the low 4 bits of
// the lane); vpermw, its low words zeroed, the one at 16 + s (the low 5 bits of the lane's high
// word, through a 32-word table of bf16(n - 8) repeated twice, whose bits are the f32's high half).
// Per 2 × 16 weights: 3/4 shift, 2 lookups and 2 FMAs, where BlockSumsI4<1> takes 7/4 shifts.
template <int P>
FFLITE_AVX512 inline void BlockSumsI4Panels(const uint8_t* blk, size_t stride, const float* xb,
                                           __m512* sums) {
  const __m512 table = _mm512_setr_ps(-8.0f, -7.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f, 0.0f,
                                      1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f);
  const __m512i table_w = _mm512_load_si512(kTableW);
  __m512 part[P][4];
  for (int j = 0; j < P; ++j) {
    for (int i = 0; i < 4; ++i) part[j][i] = _mm512_setzero_ps();
  }
#pragma GCC unroll 4
  for (size_t c = 0; c < 4; ++c) {
    __m512i v[P];
    for (int j = 0; j < P; ++j) v[j] = _mm512_loadu_si512(blk + j * stride + 64 * c);
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      // Shift 4s: the nibble at bit 4s of the lane (shift 8(n mod 4) + 4(n / 4) for n = 2(s mod 2)
      // + s / 2 in BlockSumsI4's order; k = 4c + (n mod 4) + 16(n / 4)) and the one at 16 + 4s.
      const int n_lo = (s >> 1) + 4 * (s & 1);  // nibble index n with shift 4s
      const int n_hi = n_lo + 2;                 // shift 16 + 4s
      const __m512 x_lo = _mm512_set1_ps(xb[4 * c + (n_lo & 3) + 16 * (n_lo >> 2)]);
      const __m512 x_hi = _mm512_set1_ps(xb[4 * c + (n_hi & 3) + 16 * (n_hi >> 2)]);
      for (int j = 0; j < P; ++j) {
        const __m512i u = s == 0 ? v[j] : _mm512_srli_epi16(v[j], 4 * s);
        const __m512 f_lo = _mm512_permutexvar_ps(u, table);
        const __m512 f_hi =
            _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kHighWords, u, table_w));
        part[j][n_lo & 3] = _mm512_fmadd_ps(f_lo, x_lo, part[j][n_lo & 3]);
        part[j][n_hi & 3] = _mm512_fmadd_ps(f_hi, x_hi, part[j][n_hi & 3]);
      }
    }
  }
  for (int j = 0; j < P; ++j) {
    sums[j] = _mm512_add_ps(_mm512_add_ps(part[j][0], part[j][1]),
                            _mm512_add_ps(part[j][2], part[j][3]));
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

// acc[t] += Σ_{b0 <= b < b1} scale[b] · (block b's sums) for the T tokens of a group (the
// batch's tokens t0..t0 + T from `first`); acc in memory between spans.
template <int T, typename Q>
FFLITE_AVX512 void GroupSpan(const PanelArgs& a, size_t first, size_t b0, size_t b1,
                             Prefetcher& prefetcher, __m512* acc_mem) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = acc_mem[t];
  for (size_t b = b0; b < b1; ++b) {
    prefetcher.Step();
    const float* xb[T];
    for (int t = 0; t < T; ++t) {
      xb[t] = b < a.full_blocks ? a.x + (first + t) * a.x_stride + b * kQuantBlock
                                : a.x_tail[first + t];
    }
    __m512 sums[T];
    const uint8_t* blk = a.panel + a.scale_bytes + b * a.block_bytes;
    if constexpr (Q::kBits == 4) {
      BlockSumsI4<T>(blk, xb, sums);
    } else {
      BlockSumsI8<T>(blk, xb, sums);
    }
    const __m512 scale = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.panel + b * 2 * kQuantPanelRows)));
    for (int t = 0; t < T; ++t) {
      const __m512 sum = sums[t];
      acc[t] = _mm512_fmadd_ps(sum, scale, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) acc_mem[t] = acc[t];
}

template <typename Q, int T = 1>
FFLITE_AVX512 void GroupSpanOf(size_t tokens, const PanelArgs& a, size_t first, size_t b0,
                               size_t b1, Prefetcher& prefetcher, __m512* acc) {
  if constexpr (T < kMaxTokens) {
    if (tokens != T) {
      GroupSpanOf<Q, T + 1>(tokens, a, first, b0, b1, prefetcher, acc);
      return;
    }
  }
  GroupSpan<T, Q>(a, first, b0, b1, prefetcher, acc);
}

// One token (c = 1): kPassPanels panels per pass over x, block by block, so each block of
// activations is read (from L2) once per pass instead of once per panel, and the panels' weight
// and scale streams are read side by side. Each panel sees exactly the operations GroupSpan<1>
// gives it (the panels of a pass are independent), so results match c > 1 and any row split.
constexpr size_t kPassPanels = 4;
// Per panel, how far ahead of the reading its data stream is prefetched, in bytes (the
// scales' stream runs as many blocks ahead; see quant_prefetch.h).
constexpr uint64_t kPassPrefetchBytes = 2048;

// acc[j] = Σ_b scale[j][b] · (block b's sums of panel j) for the P panels from `first`, one token.
template <int P, typename Q>
FFLITE_AVX512 void PassOneToken(const uint8_t* first, const QuantGeometry& g, size_t full_blocks,
                                const float* x, const float* x_tail, QuantPassPrefetcher& prefetcher,
                                __m512* acc_out) {
  __m512 acc[P];
  for (int j = 0; j < P; ++j) acc[j] = _mm512_setzero_ps();
  const uint8_t* blk = first + g.scale_bytes;
  for (size_t b = 0; b < g.k_blocks; ++b, blk += g.block_panel_bytes) {
    prefetcher.Step();
    const float* xb[1] = {b < full_blocks ? x + b * kQuantBlock : x_tail};
    __m512 sums[P];
    if constexpr (Q::kBits == 4) {
      BlockSumsI4Panels<P>(blk, g.panel_bytes, xb[0], sums);
    } else {
      for (int j = 0; j < P; ++j) BlockSumsI8<1>(blk + j * g.panel_bytes, xb, &sums[j]);
    }
    for (int j = 0; j < P; ++j) {
      const __m512 scale = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(first + j * g.panel_bytes + b * 2 * kQuantPanelRows)));
      acc[j] = _mm512_fmadd_ps(sums[j], scale, acc[j]);
    }
  }
  for (int j = 0; j < P; ++j) acc_out[j] = acc[j];
}

template <typename Q>
FFLITE_AVX512 void QGemvOneToken(size_t k, size_t rows, const uint8_t* w, const float* bias,
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
    __m512 acc[kPassPanels];
    switch (n) {
      case 4: PassOneToken<4, Q>(first, g, full_blocks, x, x_tail, prefetcher, acc); break;
      case 3: PassOneToken<3, Q>(first, g, full_blocks, x, x_tail, prefetcher, acc); break;
      case 2: PassOneToken<2, Q>(first, g, full_blocks, x, x_tail, prefetcher, acc); break;
      default: PassOneToken<1, Q>(first, g, full_blocks, x, x_tail, prefetcher, acc); break;
    }
    for (size_t j = 0; j < n; ++j) {
      const size_t r0 = (p + j) * kQuantPanelRows;
      const __mmask16 row_mask = rows - r0 >= kQuantPanelRows
                                     ? 0xffff
                                     : static_cast<__mmask16>((1u << (rows - r0)) - 1u);
      __m512 v = acc[j];
      if (bias != nullptr) v = _mm512_add_ps(_mm512_maskz_loadu_ps(row_mask, bias + r0), v);
      _mm512_mask_storeu_ps(y + r0, row_mask, v);
    }
  }
}

template <typename Q>
FFLITE_AVX512 void QGemv(size_t c, size_t k, size_t rows, const uint8_t* w, const float* bias,
                         const float* x, size_t x_stride, float* y, size_t y_stride) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  const size_t full_blocks = k / kQuantBlock, tail = k % kQuantBlock;
  if (c == 1) {
    QGemvOneToken<Q>(k, rows, w, bias, x, y);
    return;
  }
  // Prefetch steps per panel: one per block for each group of each batch.
  uint64_t steps = 0;
  for (size_t t0 = 0; t0 < c; t0 += kBatchTokens) {
    const size_t batch = c - t0 < kBatchTokens ? c - t0 : kBatchTokens;
    steps += (batch + kMaxTokens - 1) / kMaxTokens * g.k_blocks;
  }
  Prefetcher prefetcher(w, g.bytes());
  for (size_t p = 0; p < g.panels; ++p) {
    const uint8_t* panel = w + p * g.panel_bytes;
    const size_t r0 = p * kQuantPanelRows;
    const __mmask16 row_mask =
        rows - r0 >= kQuantPanelRows ? 0xffff : static_cast<__mmask16>((1u << (rows - r0)) - 1u);
    prefetcher.StartPanel(panel, g.panel_bytes, steps);
    for (size_t t0 = 0; t0 < c; t0 += kBatchTokens) {
      const size_t batch = c - t0 < kBatchTokens ? c - t0 : kBatchTokens;
      // Groups split evenly (5 -> 3 + 2, 9 -> 3 + 3 + 3); the grouping changes no result.
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
      __m512 acc[kBatchTokens];
      for (size_t t = 0; t < batch; ++t) acc[t] = _mm512_setzero_ps();
      const size_t span = groups > 1 ? kSpanBlocks : g.k_blocks;
      for (size_t b0 = 0; b0 < g.k_blocks; b0 += span) {
        const size_t b1 = g.k_blocks - b0 < span ? g.k_blocks : b0 + span;
        for (size_t gi = 0, t = 0; gi < groups; t += group_size[gi++]) {
          GroupSpanOf<Q>(group_size[gi], args, t, b0, b1, prefetcher, acc + t);
        }
      }
      for (size_t t = 0; t < batch; ++t) {
        float* yt = y + (t0 + t) * y_stride + r0;
        __m512 v = acc[t];
        // Masked loads and stores: nothing past `rows` is read or written.
        if (bias != nullptr) v = _mm512_add_ps(_mm512_maskz_loadu_ps(row_mask, bias + r0), v);
        _mm512_mask_storeu_ps(yt, row_mask, v);
      }
    }
  }
}

}  // namespace

FFLITE_AVX512 void QGemvAvx512(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
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
