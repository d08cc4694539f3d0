// The gemm engine's aarch64 NEON microkernels (gemm.h): 6 tokens × 16 channels, 24 q-register
// accumulators, four panel loads and the tile's 6 units per unit of k, in the 32 vector
// registers. f32: fmla (one k per unit); bf16 (FEAT_BF16, Armv8.6 and some v8.2 cores): bfdot,
// a pair of k per unit with the products summed in f32, like vdpbf16ps. One tile source
// (gemm_neon_tile.inc) for both, each with its own target attribute.
#include "kernels/gemm.h"

#if defined(FFLITE_GEMM_NEON)

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#include "kernels/mca_region.h"
#include "kernels/types.h"

namespace fflite {

namespace gemm_neon_f32 {
namespace {
constexpr size_t kMr = 6, kNr = 16;
constexpr size_t kUnitValues = 1;
constexpr FloatType kMcaType = FloatType::kF32;
#define FFLITE_GEMM_TARGET
inline float32x4_t Step(float32x4_t acc, float32x4_t w, uint32_t x) {
  float xf;
  __builtin_memcpy(&xf, &x, sizeof(xf));
  return vfmaq_n_f32(acc, w, xf);
}
#include "kernels/gemm_neon_tile.inc"
#undef FFLITE_GEMM_TARGET
}  // namespace
}  // namespace gemm_neon_f32

namespace gemm_neon_bf16 {
namespace {
constexpr size_t kMr = 6, kNr = 16;
constexpr size_t kUnitValues = 2;
constexpr FloatType kMcaType = FloatType::kBF16;
#define FFLITE_GEMM_TARGET __attribute__((target("arch=armv8.2-a+bf16")))
// acc[c] += w[2c]·x[0] + w[2c + 1]·x[1] (channel c's pair of k by the token's pair).
FFLITE_GEMM_TARGET inline float32x4_t Step(float32x4_t acc, float32x4_t w, uint32_t x) {
  return vbfdotq_f32(acc, vreinterpretq_bf16_f32(w), vreinterpretq_bf16_u32(vdupq_n_u32(x)));
}
#include "kernels/gemm_neon_tile.inc"
#undef FFLITE_GEMM_TARGET
}  // namespace
}  // namespace gemm_neon_bf16

namespace gemm_neon_pack {
namespace {
constexpr size_t kNr = 16;

// r[j] = lane j of r[0..3] (a 4 × 4 transpose of 32-bit values).
inline void Transpose4(uint32x4_t r[4]) {
  const uint32x4x2_t a = vtrnq_u32(r[0], r[1]), b = vtrnq_u32(r[2], r[3]);
  r[0] = vcombine_u32(vget_low_u32(a.val[0]), vget_low_u32(b.val[0]));
  r[1] = vcombine_u32(vget_low_u32(a.val[1]), vget_low_u32(b.val[1]));
  r[2] = vcombine_u32(vget_high_u32(a.val[0]), vget_high_u32(b.val[0]));
  r[3] = vcombine_u32(vget_high_u32(a.val[1]), vget_high_u32(b.val[1]));
}

// Packing weights into 16-channel panels (GemmKernel::pack_panels): f32 panels from f32 weights
// (unit u: value u), or the bf16 kernel's pairs from bf16 weights (unit u: values 2u and 2u + 1,
// one 32-bit word as stored); 4 units of 4 channels at once, whole chunks of 4 units only.
template <bool kPairs>
size_t PackPanels(size_t rows, size_t k, const void* w, size_t first, size_t last,
                  uint32_t* packed) {
  const size_t units = kPairs ? (k + 1) / 2 : k, whole = kPairs ? k / 8 * 4 : k / 4 * 4;
  const char* src = static_cast<const char*>(w);
  const size_t row_bytes = k * (kPairs ? 2 : 4);
  for (size_t p = first; p < last; ++p) {
    uint32_t* panel = packed + p * units * kNr;
    for (size_t u0 = 0; u0 < whole; u0 += 4) {
      for (size_t h = 0; h < kNr; h += 4) {
        uint32x4_t r[4];
        for (size_t i = 0; i < 4; ++i) {
          const size_t c = p * kNr + h + i;
          r[i] = c < rows ? vld1q_u32(reinterpret_cast<const uint32_t*>(src + c * row_bytes +
                                                                        u0 * 4))
                          : vdupq_n_u32(0);
        }
        Transpose4(r);
        for (size_t u = 0; u < 4; ++u) vst1q_u32(panel + (u0 + u) * kNr + h, r[u]);
      }
    }
  }
  return whole;
}
}  // namespace
}  // namespace gemm_neon_pack

size_t GemmPackPanelsNeon(size_t rows, size_t k, const void* w, size_t first, size_t last,
                          uint32_t* packed) {
  return gemm_neon_pack::PackPanels<false>(rows, k, w, first, last, packed);
}

size_t GemmPackPanelsNeonBf16(size_t rows, size_t k, const void* w, size_t first, size_t last,
                              uint32_t* packed) {
  return gemm_neon_pack::PackPanels<true>(rows, k, w, first, last, packed);
}

void GemmMicrokernelNeon(size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w,
                         const float* bias, bool accumulate, bool clamp, float out_min, float* y,
                         size_t y_stride) {
  gemm_neon_f32::Microkernel(m, n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride);
}

__attribute__((target("arch=armv8.2-a+bf16"))) void GemmMicrokernelNeonBf16(
    size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w, const float* bias,
    bool accumulate, bool clamp, float out_min, float* y, size_t y_stride) {
  gemm_neon_bf16::Microkernel(m, n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride);
}

}  // namespace fflite

#endif  // FFLITE_GEMM_NEON
