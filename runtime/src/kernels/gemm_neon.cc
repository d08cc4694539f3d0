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

namespace fflite {

namespace gemm_neon_f32 {
namespace {
constexpr size_t kMr = 6, kNr = 16;
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
#define FFLITE_GEMM_TARGET __attribute__((target("arch=armv8.2-a+bf16")))
// acc[c] += w[2c]·x[0] + w[2c + 1]·x[1] (channel c's pair of k by the token's pair).
FFLITE_GEMM_TARGET inline float32x4_t Step(float32x4_t acc, float32x4_t w, uint32_t x) {
  return vbfdotq_f32(acc, vreinterpretq_bf16_f32(w), vreinterpretq_bf16_u32(vdupq_n_u32(x)));
}
#include "kernels/gemm_neon_tile.inc"
#undef FFLITE_GEMM_TARGET
}  // namespace
}  // namespace gemm_neon_bf16

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
