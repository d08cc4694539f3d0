// The few-token matrix product for AVX-512 (F + BW + VL, with FMA and F16C), straight from
// f32/f16/bf16 row-major weights: the AVX2 kernel's structure (gemv_avx2.cc: read its comments
// first) with 16-lane accumulators and a bigger register tile, blocks of 4 rows × token groups of
// up to 6, which the 32 zmm registers allow. At prefill the MoE path runs every expert with up to
// a few dozen tokens through this kernel, and there it is bound by the multiply-adds, not by
// memory: the bigger tile needs fewer loads and instructions per multiply-add.
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_AVX2)

// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined" vector (`__Y = __Y`) that
// -Wmaybe-uninitialized flags once inlined at -O3: a false positive of GCC 12 (Debian 12's
// compiler); clang and later GCCs do not warn.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same at -O1 (the sanitizer builds)
#endif

#include <immintrin.h>

#include <cstdint>

// Per-function target attributes, as in kernels_avx2.cc: no AVX-512 code in shared inline
// functions.
#define FFLITE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

namespace fflite {

namespace {

// Rows per block and tokens per group: 4 rows × 6 tokens = 24 accumulators + 6 x vectors + 1
// weight vector = 31 of the 32 zmm registers. Measured on Zen 4 (one core, GFLOP/s, warm
// [128, 3584] weights, c = 8 / 16 / 32): f32 4 × 6: 101 / 103 / 102, 4 × 5: 99 / 92 / 99,
// 4 × 4: 97 / 95 / 96 (AVX2 4 × 3 of 8 lanes: 86 / 90 / 99); bf16 4 × 6: 103 / 102 / 103 (AVX2:
// 79 / 77 / 86). See Gemv for the one case where 4 × 4 is better. Tokens per batch and span as in
// the AVX2 kernel: the span's weights (4 rows × 256 f32 = 4 KiB) stay in L1 while every group of
// the batch passes over them; x streams from L2.
constexpr int kRows = 4;
constexpr size_t kMaxTokens = 6;
constexpr size_t kBatchTokens = 24;
constexpr size_t kSpan = 256;
constexpr size_t kLanes = 16;

// The first `rest` (0..15) lanes.
inline __mmask16 TailMask(size_t rest) {
  return static_cast<__mmask16>((1u << rest) - 1u);
}

// The weight formats: 16 elements to 16 f32 lanes, converted in registers. LoadTail reads only the
// lanes in `mask` (masked-off elements are not accessed, so they cannot fault) and sets the other
// lanes to 0.
struct F32Weights {
  using Elem = float;
  FFLITE_AVX512 static __m512 Load(const float* p) {
    __m512 v = _mm512_loadu_ps(p);
    // Keeps the vector in a register: otherwise the compiler folds this load into each of the T
    // multiply-adds that use it ("v": any of the 32 zmm registers).
    __asm__("" : "+v"(v));
    return v;
  }
  FFLITE_AVX512 static __m512 LoadTail(const float* p, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, p);
  }
};

struct F16Weights {
  using Elem = uint16_t;
  FFLITE_AVX512 static __m512 Load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  FFLITE_AVX512 static __m512 LoadTail(const uint16_t* p, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));  // f16 zero is 0.0f
  }
};

// bf16 is the top half of an f32: widen each 16-bit lane to 32 bits and shift it up.
struct Bf16Weights {
  using Elem = uint16_t;
  FFLITE_AVX512 static __m512 Widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  FFLITE_AVX512 static __m512 Load(const uint16_t* p) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  FFLITE_AVX512 static __m512 LoadTail(const uint16_t* p, __mmask16 mask) {
    return Widen(_mm256_maskz_loadu_epi16(mask, p));
  }
};

// The lane sums of a, b, c, d as one vector [Σa, Σb, Σc, Σd]: each 16 lanes folded to 8 (lane i +
// lane i + 8), then the AVX2 kernel's 8-lane order.
FFLITE_AVX512 inline __m256 Fold(__m512 v) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return _mm256_add_ps(_mm512_castps512_ps256(v), hi);
}
FFLITE_AVX512 inline __m128 HorizontalSum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 s =
      _mm256_hadd_ps(_mm256_hadd_ps(Fold(a), Fold(b)), _mm256_hadd_ps(Fold(c), Fold(d)));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// acc[r·T + t] += Σ_{j0 <= j < j1} w[r·k + j]·x[t·x_stride + j] for r < R, t < T, the R·T
// accumulators held in registers over the span. j0 is a multiple of 16; j1 is too unless j1 = k
// (the masked tail). w: [R, k]; x: [T, x_stride]; acc: [R·T] in memory between spans.
// Each step of 16 columns also prefetches the cache lines of [prefetch, prefetch + prefetch_step)
// into L2 while prefetch < prefetch_end (both 0: none): the caller's share of the next block, as
// in the AVX2 kernel.
template <typename Weights, int R, int T>
FFLITE_AVX512 inline void Accumulate(size_t k, const typename Weights::Elem* w, const float* x,
                                     size_t x_stride, size_t j0, size_t j1, uintptr_t prefetch,
                                     uintptr_t prefetch_end, size_t prefetch_step,
                                     __m512* acc_mem) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = acc_mem[r * T + t];
  }
  size_t j = j0;
  for (; j + kLanes <= j1; j += kLanes) {
    if (prefetch < prefetch_end) {
      for (size_t b = 0; b < prefetch_step; b += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + b), _MM_HINT_T1);
      }
      prefetch += prefetch_step;
    }
    // x in registers, one weight vector at a time: R·T + T + 1 registers (31 for 4 × 6).
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(x + t * x_stride + j);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = Weights::Load(w + r * k + j);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  if (j < j1) {
    // Masked loads (zeros in the other lanes): nothing past the end of a row of w or x is read.
    const __mmask16 mask = TailMask(j1 - j);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = Weights::LoadTail(w + r * k + j, mask);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + t * x_stride + j);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc_mem[r * T + t] = acc[r][t];
  }
}

// y[t·y_stride + r] = bias[r] + (lane sum of acc[r·T + t]) for r < R, t < T, in one lane-summing
// order for every R and T (see the AVX2 kernel): rows 4 at a time, a short group padded by
// repeating its first row.
template <int R, int T>
FFLITE_AVX512 inline void Finish(const __m512* acc, const float* bias, float* y,
                                 size_t y_stride) {
  for (int t = 0; t < T; ++t) {
    for (int r0 = 0; r0 < R; r0 += 4) {
      const int n = R - r0 < 4 ? R - r0 : 4;
      const __m512* a = acc + r0 * T + t;
      __m128 s = HorizontalSum4(a[0], a[(n > 1 ? 1 : 0) * T], a[(n > 2 ? 2 : 0) * T],
                                a[(n > 3 ? 3 : 0) * T]);
      float* yt = y + t * y_stride + r0;
      const float* b = bias != nullptr ? bias + r0 : nullptr;
      if (n == 4) {
        if (b != nullptr) s = _mm_add_ps(_mm_loadu_ps(b), s);
        _mm_storeu_ps(yt, s);
      } else {
        float sums[4];
        _mm_storeu_ps(sums, s);
        for (int r = 0; r < n; ++r) yt[r] = b != nullptr ? b[r] + sums[r] : sums[r];
      }
    }
  }
}

// Accumulate and Finish for a group of `tokens` (1..kMaxTokens) tokens.
template <typename Weights, int R, int T = 1>
FFLITE_AVX512 inline void AccumulateGroup(size_t tokens, size_t k, const typename Weights::Elem* w,
                                          const float* x, size_t x_stride, size_t j0, size_t j1,
                                          uintptr_t pf, uintptr_t pf_end, size_t pf_step,
                                          __m512* acc) {
  if constexpr (T < static_cast<int>(kMaxTokens)) {
    if (tokens != T) {
      AccumulateGroup<Weights, R, T + 1>(tokens, k, w, x, x_stride, j0, j1, pf, pf_end, pf_step,
                                         acc);
      return;
    }
  }
  Accumulate<Weights, R, T>(k, w, x, x_stride, j0, j1, pf, pf_end, pf_step, acc);
}

template <int R, int T = 1>
FFLITE_AVX512 inline void FinishGroup(size_t tokens, const __m512* acc, const float* bias,
                                      float* y, size_t y_stride) {
  if constexpr (T < static_cast<int>(kMaxTokens)) {
    if (tokens != T) {
      FinishGroup<R, T + 1>(tokens, acc, bias, y, y_stride);
      return;
    }
  }
  Finish<R, T>(acc, bias, y, y_stride);
}

// R rows for every token, as the AVX2 kernel's RowBlock: batches of up to kBatchTokens, each in
// groups of at most kMaxTokens split evenly (8 -> 4+4, 13 -> 5+4+4), spans of kSpan columns when a
// batch has more than one group. Each accumulator sees the same sequence of FMAs whatever the
// grouping, so results do not depend on c.
// The next block (R rows, contiguous after this one) is prefetched in address order, spread over
// every step of every batch in proportion to its work. (The AVX2 kernel prefetches during the last
// batch only: with 32 tokens that is the last 8, which then need the next block at 4x the average
// rate, close to the memory bandwidth; this kernel lost 8% on cold [1024, 3584] f32 at c = 32 that
// way.)
template <typename Weights, int R>
FFLITE_AVX512 inline void RowBlock(size_t c, size_t k, const typename Weights::Elem* w,
                                   const float* bias, const float* x, size_t x_stride, float* y,
                                   size_t y_stride, size_t max_tokens, bool prefetch_next) {
  const uintptr_t next = prefetch_next ? reinterpret_cast<uintptr_t>(w + R * k) : 0;
  const size_t next_bytes = R * k * sizeof(typename Weights::Elem);
  const size_t work = c * k;  // token-columns; the block's work unit
  for (size_t t0 = 0; t0 < c; t0 += kBatchTokens) {
    const size_t batch = c - t0 < kBatchTokens ? c - t0 : kBatchTokens;
    size_t group_size[kBatchTokens];
    size_t groups = 0;
    for (size_t t = 0; t < batch; ++groups) {
      const size_t left = batch - t;
      const size_t groups_left = (left + max_tokens - 1) / max_tokens;
      group_size[groups] = (left + groups_left - 1) / groups_left;
      t += group_size[groups];
    }
    __m512 acc[kBatchTokens * R];
    for (size_t i = 0; i < batch * R; ++i) acc[i] = _mm512_setzero_ps();
    const size_t span = groups > 1 ? kSpan : k;
    for (size_t j0 = 0; j0 < k; j0 += span) {
      const size_t j1 = k - j0 < span ? k : j0 + span;
      const size_t steps = (j1 - j0) / kLanes;
      size_t t = t0;
      for (size_t g = 0; g < groups; ++g) {
        uintptr_t pf = 0, pf_end = 0;
        size_t pf_step = 0;
        if (next != 0 && steps > 0) {
          // The token-columns done before this group's pass and after it, mapped to bytes of the
          // next block. (The products overflow only for k beyond 10^8; a prefetch never faults.)
          const size_t done = t0 * k + j0 * batch + (j1 - j0) * (t - t0);
          const size_t done_after = done + (j1 - j0) * group_size[g];
          pf = next + next_bytes * done / work;
          pf_end = next + next_bytes * done_after / work;
          pf_step = (pf_end - pf + steps - 1) / steps;
        }
        AccumulateGroup<Weights, R>(group_size[g], k, w, x + t * x_stride, x_stride, j0, j1, pf,
                                    pf_end, pf_step, acc + (t - t0) * R);
        t += group_size[g];
      }
    }
    size_t t = t0;
    for (size_t g = 0; g < groups; ++g) {
      FinishGroup<R>(group_size[g], acc + (t - t0) * R, bias, y + t * y_stride, y_stride);
      t += group_size[g];
    }
  }
}

// One token (decode) in blocks of kStreamRows rows, each row a stream of the weights, without
// software prefetch: the same sums as RowBlock<Weights, kStreamRows> with c = 1 (one group, one
// span over all of k, Finish<R, 1>), so a row's result does not depend on which of the two ran
// it. Measured on a Zen 5 VM (AMD family 26), one thread, bf16 weights read from memory
// (Llama's three matrices, 270 MB, 2 copies alternated, medians of 15): 4-row blocks prefetching
// the next block (RowBlock) 12.8-15.8 ms, 8 rows without prefetch 10.2-13.5, with it 12.4-17.4,
// 4 rows without it 12.4-16.5, a plain AVX-512 sum over the same bytes 10.5-11.2, in 3 runs of a
// throwaway driver: the hardware prefetchers keep 8 streams going faster than the software
// prefetch keeps 4. In fflite-bench (figures at F32GemvAvx512Streams in kernels.h) a Llama layer's
// decode took 5-26% less time at one thread. Not measured on Intel CPUs, whose L2 streamer stops
// at each 4 KiB page of the file's weights: they keep RowBlock's prefetch (select.cc).
constexpr int kStreamRows = 8;

template <typename Weights>
FFLITE_AVX512 inline void OneTokenStreams(size_t k, const typename Weights::Elem* w,
                                          const float* bias, const float* x, float* y) {
  __m512 acc[kStreamRows];
  for (int r = 0; r < kStreamRows; ++r) acc[r] = _mm512_setzero_ps();
  Accumulate<Weights, kStreamRows, 1>(k, w, x, 0, 0, k, 0, 0, 0, acc);
  Finish<kStreamRows, 1>(acc, bias, y, 0);
}

template <typename Weights, bool kStreams>
FFLITE_AVX512 void Gemv(size_t c, size_t k, size_t rows, const void* w_bytes, const float* bias,
                        const float* x, size_t x_stride, float* y, size_t y_stride) {
  using Elem = typename Weights::Elem;
  const Elem* w = static_cast<const Elem*>(w_bytes);
  // Tokens whose x rows lie a multiple of 4 KiB apart share an L1 set at every column (Zen 4's
  // L1D: 32 KiB, 8 ways, 64 sets of 64-byte lines), and so do the block's weight rows when k·size
  // is such a multiple: a pass touches R + T lines per set at each column, and above the 8 ways
  // the span's weight lines are evicted before the next group reuses them. MoE up/gate with
  // d_model = 1024 f32 is that case; at most 4 tokens per group there (4 + 4 lines): measured
  // (warm [128, 1024] f32, c = 32) 76 GFLOP/s against 71 with 6, cold 61-66 against 57-58.
  // Grouping does not change any result.
  const size_t max_tokens = (x_stride * sizeof(float)) % 4096 == 0 ? 4 : kMaxTokens;
  size_t o = 0;
  if (kStreams && c == 1) {
    for (; o + kStreamRows <= rows; o += kStreamRows) {
      OneTokenStreams<Weights>(k, w + o * k, bias != nullptr ? bias + o : nullptr, x, y + o);
    }
  }
  for (; o + kRows <= rows; o += kRows) {
    RowBlock<Weights, kRows>(c, k, w + o * k, bias != nullptr ? bias + o : nullptr, x, x_stride,
                             y + o, y_stride, max_tokens, o + 2 * kRows <= rows);
  }
  const Elem* wo = w + o * k;
  const float* bo = bias != nullptr ? bias + o : nullptr;
  switch (rows - o) {
    case 1: RowBlock<Weights, 1>(c, k, wo, bo, x, x_stride, y + o, y_stride, max_tokens, false);
      break;
    case 2: RowBlock<Weights, 2>(c, k, wo, bo, x, x_stride, y + o, y_stride, max_tokens, false);
      break;
    case 3: RowBlock<Weights, 3>(c, k, wo, bo, x, x_stride, y + o, y_stride, max_tokens, false);
      break;
    default: break;
  }
}

// The exported kernels: the weight type's Gemv, with or without one token's streams.
template <bool kStreams>
FFLITE_AVX512 void GemvOf(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                          const float* bias, const float* x, size_t x_stride, float* y,
                          size_t y_stride) {
  switch (w_type) {
    case FloatType::kF32:
      Gemv<F32Weights, kStreams>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    case FloatType::kF16:
      Gemv<F16Weights, kStreams>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    case FloatType::kBF16:
      Gemv<Bf16Weights, kStreams>(c, k, rows, w, bias, x, x_stride, y, y_stride);
      break;
    default: break;  // validated by the caller: nothing else reaches a kernel
  }
}

}  // namespace

FFLITE_AVX512 void F32GemvAvx512(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                                 const float* bias, const float* x, size_t x_stride, float* y,
                                 size_t y_stride) {
  GemvOf<false>(c, k, rows, w, w_type, bias, x, x_stride, y, y_stride);
}

FFLITE_AVX512 void F32GemvAvx512Streams(size_t c, size_t k, size_t rows, const void* w,
                                        FloatType w_type, const float* bias, const float* x,
                                        size_t x_stride, float* y, size_t y_stride) {
  GemvOf<true>(c, k, rows, w, w_type, bias, x, x_stride, y, y_stride);
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_AVX2
