// The few-token matrix product for AVX2 + FMA3 + F16C, straight from f32/f16/bf16 row-major
// weights: blocks of 4 rows, token groups of up to 3, 8-lane accumulators summed once per row,
// and the next block prefetched in address order so that the weights stream at memory speed.
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_AVX2)

#include <immintrin.h>

#include <cstdint>
#include <cstring>

// Per-function target attributes, as in kernels_avx2.cc: no AVX2 code in shared inline functions.
#define FFLITE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace fflite {

namespace {

// Rows per block: the block's rows are read once from memory while every token group passes
// over them. Tokens per group: 4 rows × 3 tokens = 12 accumulators + 3 x vectors + 1 weight
// vector = the 16 ymm registers. Tokens per batch: the groups that share one pass over memory (a
// call with more tokens reads the weights once per batch). Span: the columns every group of a
// batch computes before the next span (4 rows × 256 f32 = 4 KiB of weights and 12 × 1 KiB of x:
// all in L1).
constexpr int kRows = 4;
constexpr size_t kMaxTokens = 3;
constexpr size_t kBatchTokens = 12;
constexpr size_t kSpan = 256;

// Mask of the first `rest` (0..7) lanes, for the tail.
FFLITE_AVX2 inline __m256i TailMask(size_t rest) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rest)), lanes);
}

// The weight formats: 8 elements to 8 f32 lanes, converted in registers. LoadTail reads only the
// first `rest` (1..7) elements and sets the other lanes to 0.
struct F32Weights {
  using Elem = float;
  FFLITE_AVX2 static __m256 Load(const float* p) {
    __m256 v = _mm256_loadu_ps(p);
    // Keeps the vector in a register: otherwise the compiler folds this load into each of the T
    // multiply-adds that use it, and the loop becomes bound by loads rather than FMAs.
    __asm__("" : "+x"(v));
    return v;
  }
  FFLITE_AVX2 static __m256 LoadTail(const float* p, size_t /*rest*/, __m256i mask) {
    return _mm256_maskload_ps(p, mask);  // masked-off lanes are not accessed
  }
};

struct F16Weights {
  using Elem = uint16_t;
  FFLITE_AVX2 static __m256 Load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  FFLITE_AVX2 static __m256 LoadTail(const uint16_t* p, size_t rest, __m256i /*mask*/) {
    uint16_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // once per row; no 16-bit masked load in AVX2
    std::memcpy(tail, p, rest * sizeof(uint16_t));
    return Load(tail);
  }
};

// bf16 is the top half of an f32: widen each 16-bit lane to 32 bits and shift it up.
struct Bf16Weights {
  using Elem = uint16_t;
  FFLITE_AVX2 static __m256 Load(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  FFLITE_AVX2 static __m256 LoadTail(const uint16_t* p, size_t rest, __m256i /*mask*/) {
    uint16_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(tail, p, rest * sizeof(uint16_t));
    return Load(tail);
  }
};

// The lane sums of a, b, c, d as one vector [Σa, Σb, Σc, Σd].
FFLITE_AVX2 inline __m128 HorizontalSum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  // [a01 a23 b01 b23 | a45 a67 b45 b67], then [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7].
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// acc[r·T + t] += Σ_{j0 <= j < j1} w[r·k + j]·x[t·x_stride + j] for r < R, t < T, the R·T
// accumulators held in registers over the span. j0 is a multiple of 8; j1 is too unless j1 = k
// (the masked tail). w: [R, k]; x: [T, x_stride]; acc: [R·T] in memory between spans.
// Each step of 8 columns also prefetches the cache lines of [prefetch, prefetch + prefetch_step)
// into L2 while prefetch < prefetch_end (both 0: none): the caller's share of the next block.
// Addresses are integers because the last step may reach a little past the block (harmless:
// prefetches never fault).
template <typename Weights, int R, int T>
FFLITE_AVX2 inline void Accumulate(size_t k, const typename Weights::Elem* w, const float* x,
                                   size_t x_stride, size_t j0, size_t j1, uintptr_t prefetch,
                                   uintptr_t prefetch_end, size_t prefetch_step, __m256* acc_mem) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = acc_mem[r * T + t];
  }
  size_t j = j0;
  for (; j + 8 <= j1; j += 8) {
    if (prefetch < prefetch_end) {
      // Addresses at most 64 bytes apart: every cache line of the range, in address order.
      for (size_t b = 0; b < prefetch_step; b += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + b), _MM_HINT_T1);
      }
      prefetch += prefetch_step;
    }
    // x in registers, one weight vector at a time: R·T + T + 1 registers (16 for 4 × 3).
    __m256 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x + t * x_stride + j);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = Weights::Load(w + r * k + j);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  if (j < j1) {
    // Masked loads (zeros in the other lanes): nothing past the end of a row of w or x is read.
    const size_t rest = j1 - j;
    const __m256i mask = TailMask(rest);
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = Weights::LoadTail(w + r * k + j, rest, mask);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_maskload_ps(x + t * x_stride + j, mask);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc_mem[r * T + t] = acc[r][t];
  }
}

// y[t·y_stride + r] = bias[r] + (lane sum of acc[r·T + t]) for r < R, t < T. One lane-summing
// order for every R, so that a row's result does not depend on how the caller split the rows
// (among threads); nor does it depend on the token grouping.
template <int R, int T>
FFLITE_AVX2 inline void Finish(const __m256* acc, const float* bias, float* y, size_t y_stride) {
  for (int t = 0; t < T; ++t) {
    __m128 s = HorizontalSum4(acc[t], acc[(R > 1 ? 1 : 0) * T + t], acc[(R > 2 ? 2 : 0) * T + t],
                              acc[(R > 3 ? 3 : 0) * T + t]);
    if constexpr (R == 4) {
      if (bias != nullptr) s = _mm_add_ps(_mm_loadu_ps(bias), s);
      _mm_storeu_ps(y + t * y_stride, s);
    } else {
      float sums[4];
      _mm_storeu_ps(sums, s);
      for (int r = 0; r < R; ++r) {
        y[t * y_stride + r] = bias != nullptr ? bias[r] + sums[r] : sums[r];
      }
    }
  }
}

// R rows for every token. Tokens go in batches of up to kBatchTokens, each batch in groups of at
// most kMaxTokens split evenly (4 -> 2+2, 8 -> 3+3+2: no group is left with one accumulator chain
// per row). With more than one group, k is cut into spans of kSpan: every group passes over a
// span (from L1) before the next span, so the weights stream from memory at a steady rate while
// the FMAs run; the accumulators wait in memory between spans. Each accumulator sees the same
// sequence of FMAs whatever the grouping, so results do not depend on c either.
template <typename Weights, int R>
FFLITE_AVX2 inline void RowBlock(size_t c, size_t k, const typename Weights::Elem* w,
                                 const float* bias, const float* x, size_t x_stride, float* y,
                                 size_t y_stride, bool prefetch_next) {
  for (size_t t0 = 0; t0 < c; t0 += kBatchTokens) {
    const size_t batch = c - t0 < kBatchTokens ? c - t0 : kBatchTokens;
    size_t group_size[kBatchTokens];
    size_t groups = 0;
    for (size_t t = 0; t < batch; ++groups) {
      const size_t left = batch - t;
      const size_t groups_left = (left + kMaxTokens - 1) / kMaxTokens;
      group_size[groups] = (left + groups_left - 1) / groups_left;
      t += group_size[groups];
    }
    __m256 acc[kBatchTokens * R];
    for (size_t i = 0; i < batch * R; ++i) acc[i] = _mm256_setzero_ps();
    const size_t span = groups > 1 ? kSpan : k;
    // The next block (R rows, contiguous after this one) is prefetched while the last batch
    // computes, in address order and spread evenly over every group's steps. Reading R rows
    // side by side is R interleaved streams, which the hardware prefetchers follow poorly (on
    // Zen 4: bf16 at c = 1 read at 40% of the memory bandwidth without this, 90-100% with it).
    const uintptr_t next =
        prefetch_next && t0 + batch == c ? reinterpret_cast<uintptr_t>(w + R * k) : 0;
    constexpr size_t kColumnBytes = R * sizeof(typename Weights::Elem);  // of the next block
    for (size_t j0 = 0; j0 < k; j0 += span) {
      const size_t j1 = k - j0 < span ? k : j0 + span;
      const size_t steps = (j1 - j0) / 8;
      const size_t share = (j1 - j0) * kColumnBytes / groups;
      size_t t = t0;
      for (size_t g = 0; g < groups; ++g) {
        const float* xt = x + t * x_stride;
        __m256* at = acc + (t - t0) * R;
        uintptr_t pf = 0, pf_end = 0;
        size_t pf_step = 0;
        if (next != 0 && steps > 0) {
          pf = next + j0 * kColumnBytes + g * share;
          pf_end = g + 1 == groups ? next + j1 * kColumnBytes : pf + share;
          pf_step = (pf_end - pf + steps - 1) / steps;
        }
        switch (group_size[g]) {
          case 1:
            Accumulate<Weights, R, 1>(k, w, xt, x_stride, j0, j1, pf, pf_end, pf_step, at);
            break;
          case 2:
            Accumulate<Weights, R, 2>(k, w, xt, x_stride, j0, j1, pf, pf_end, pf_step, at);
            break;
          default:
            Accumulate<Weights, R, 3>(k, w, xt, x_stride, j0, j1, pf, pf_end, pf_step, at);
            break;
        }
        t += group_size[g];
      }
    }
    size_t t = t0;
    for (size_t g = 0; g < groups; ++g) {
      const __m256* at = acc + (t - t0) * R;
      float* yt = y + t * y_stride;
      switch (group_size[g]) {
        case 1: Finish<R, 1>(at, bias, yt, y_stride); break;
        case 2: Finish<R, 2>(at, bias, yt, y_stride); break;
        default: Finish<R, 3>(at, bias, yt, y_stride); break;
      }
      t += group_size[g];
    }
  }
}

template <typename Weights>
FFLITE_AVX2 void Gemv(size_t c, size_t k, size_t rows, const void* w_bytes, const float* bias,
                      const float* x, size_t x_stride, float* y, size_t y_stride) {
  using Elem = typename Weights::Elem;
  const Elem* w = static_cast<const Elem*>(w_bytes);
  size_t o = 0;
  for (; o + kRows <= rows; o += kRows) {
    RowBlock<Weights, kRows>(c, k, w + o * k, bias != nullptr ? bias + o : nullptr, x, x_stride,
                             y + o, y_stride, o + 2 * kRows <= rows);
  }
  const Elem* wo = w + o * k;
  const float* bo = bias != nullptr ? bias + o : nullptr;
  switch (rows - o) {
    case 1: RowBlock<Weights, 1>(c, k, wo, bo, x, x_stride, y + o, y_stride, false); break;
    case 2: RowBlock<Weights, 2>(c, k, wo, bo, x, x_stride, y + o, y_stride, false); break;
    case 3: RowBlock<Weights, 3>(c, k, wo, bo, x, x_stride, y + o, y_stride, false); break;
    default: break;
  }
}

}  // namespace

FFLITE_AVX2 void F32GemvAvx2(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                             const float* bias, const float* x, size_t x_stride, float* y,
                             size_t y_stride) {
  switch (w_type) {
    case FloatType::kF32: Gemv<F32Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride); break;
    case FloatType::kF16: Gemv<F16Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride); break;
    case FloatType::kBF16: Gemv<Bf16Weights>(c, k, rows, w, bias, x, x_stride, y, y_stride); break;
    default: break;  // validated by the caller: nothing else reaches a kernel
  }
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_AVX2
