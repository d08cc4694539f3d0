// The gemm engine's aarch64 NEON microkernel (gemm.h): 6 tokens × 16 channels, 24 q-register
// accumulators, four panel loads and the tile's 6 values per unit (fmla by lane), in the 32
// vector registers.
#include "kernels/gemm.h"

#if defined(FFLITE_GEMM_NEON)

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

namespace fflite {

namespace {

constexpr size_t kMr = 6, kNr = 16;

template <size_t M>
inline __attribute__((always_inline)) void Tile(size_t n, size_t units, const uint32_t* x,
                                                const uint32_t* w, const float* bias,
                                                bool accumulate, bool clamp, float out_min,
                                                float* y, size_t y_stride) {
  float32x4_t a[M][4];
  // Partial panels (the last of a matrix) go through a full-width buffer.
  float buffer[kMr][kNr];
  const bool partial = n < kNr;
  for (size_t i = 0; i < M; ++i) {
    for (size_t q = 0; q < 4; ++q) {
      if (accumulate && !partial) {
        a[i][q] = vld1q_f32(y + i * y_stride + 4 * q);
      } else if (accumulate || bias != nullptr) {
        float lanes[4] = {0, 0, 0, 0};
        for (size_t l = 0; l < 4 && 4 * q + l < n; ++l) {
          lanes[l] = accumulate ? y[i * y_stride + 4 * q + l] : bias[4 * q + l];
        }
        a[i][q] = vld1q_f32(lanes);
      } else {
        a[i][q] = vdupq_n_f32(0.0f);
      }
    }
  }
  for (size_t u = 0; u < units; ++u) {
    const float* wu = reinterpret_cast<const float*>(w + u * kNr);
    const float32x4_t w0 = vld1q_f32(wu), w1 = vld1q_f32(wu + 4), w2 = vld1q_f32(wu + 8),
                      w3 = vld1q_f32(wu + 12);
    const float* xu = reinterpret_cast<const float*>(x + u * kMr);
#pragma GCC unroll 6
    for (size_t i = 0; i < M; ++i) {
      const float xi = xu[i];
      a[i][0] = vfmaq_n_f32(a[i][0], w0, xi);
      a[i][1] = vfmaq_n_f32(a[i][1], w1, xi);
      a[i][2] = vfmaq_n_f32(a[i][2], w2, xi);
      a[i][3] = vfmaq_n_f32(a[i][3], w3, xi);
    }
  }
  const float32x4_t lo = vdupq_n_f32(out_min);
  for (size_t i = 0; i < M; ++i) {
    for (size_t q = 0; q < 4; ++q) {
      const float32x4_t v = clamp ? vmaxq_f32(a[i][q], lo) : a[i][q];
      if (partial) {
        vst1q_f32(buffer[i] + 4 * q, v);
      } else {
        vst1q_f32(y + i * y_stride + 4 * q, v);
      }
    }
    if (partial) {
      for (size_t j = 0; j < n; ++j) y[i * y_stride + j] = buffer[i][j];
    }
  }
}

}  // namespace

void GemmMicrokernelNeon(size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w,
                         const float* bias, bool accumulate, bool clamp, float out_min, float* y,
                         size_t y_stride) {
  switch (m) {
    case 1: Tile<1>(n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride); break;
    case 2: Tile<2>(n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride); break;
    case 3: Tile<3>(n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride); break;
    case 4: Tile<4>(n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride); break;
    case 5: Tile<5>(n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride); break;
    default: Tile<kMr>(n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride);
  }
}

}  // namespace fflite

#endif  // FFLITE_GEMM_NEON
