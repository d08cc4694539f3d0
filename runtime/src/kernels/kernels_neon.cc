// NEON kernels (aarch64, and armv7 with NEON): 4 floats per vector, the exp/erfc approximations of
// approx.h. On 32-bit ARM this file alone is compiled with -mfpu=neon (runtime/CMakeLists.txt)
// and chosen only when the CPU has NEON; tested under qemu-aarch64 and qemu-arm.
#include "kernels/kernels.h"

#if defined(FFLITE_KERNELS_NEON)

#include <arm_neon.h>

#include <cmath>

#include "kernels/approx.h"

namespace fflite {

namespace {

// a + b·c, fused where the target has FMA (aarch64, VFPv4).
inline float32x4_t Fma(float32x4_t a, float32x4_t b, float32x4_t c) {
#if defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
  return vfmaq_f32(a, b, c);
#else
  return vmlaq_f32(a, b, c);
#endif
}

inline float32x4_t Div(float32x4_t a, float32x4_t b) {
#if defined(__aarch64__)
  return vdivq_f32(a, b);
#else
  // Reciprocal estimate (8 bits) and three Newton-Raphson steps (to full f32 precision).
  float32x4_t r = vrecpeq_f32(b);
  r = vmulq_f32(r, vrecpsq_f32(b, r));
  r = vmulq_f32(r, vrecpsq_f32(b, r));
  r = vmulq_f32(r, vrecpsq_f32(b, r));
  return vmulq_f32(a, r);
#endif
}

inline float HorizontalSum(float32x4_t v) {
#if defined(__aarch64__)
  return vaddvq_f32(v);
#else
  const float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
  return vget_lane_f32(vpadd_f32(s, s), 0);
#endif
}

inline float32x4_t Exp(float32x4_t x) {
  using namespace approx;  // NOLINT: constants only
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(kExpMin)), vdupq_n_f32(kExpMax));
  // Round to nearest through the 1.5·2^23 trick (|x·log2 e| < 2^22), on armv7 and aarch64 alike.
  const float32x4_t magic = vdupq_n_f32(12582912.0f);
  const float32x4_t n = vsubq_f32(Fma(magic, x, vdupq_n_f32(kLog2e)), magic);
  float32x4_t r = Fma(x, n, vdupq_n_f32(-kLn2Hi));
  r = Fma(r, n, vdupq_n_f32(-kLn2Lo));
  float32x4_t p = vdupq_n_f32(kExpP0);
  p = Fma(vdupq_n_f32(kExpP1), p, r);
  p = Fma(vdupq_n_f32(kExpP2), p, r);
  p = Fma(vdupq_n_f32(kExpP3), p, r);
  p = Fma(vdupq_n_f32(kExpP4), p, r);
  p = Fma(vdupq_n_f32(kExpP5), p, r);
  p = Fma(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
  const int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(bits));
}

inline float32x4_t Sigmoid(float32x4_t v) {
  const float32x4_t one = vdupq_n_f32(1.0f);
  const float32x4_t z = Exp(vnegq_f32(vabsq_f32(v)));
  const float32x4_t s = Div(one, vaddq_f32(one, z));
  const uint32x4_t neg = vcltq_f32(v, vdupq_n_f32(0.0f));
  return vbslq_f32(neg, vmulq_f32(z, s), s);
}

inline float32x4_t GeluErf(float32x4_t x) {
  using namespace approx;  // NOLINT: constants only
  const float32x4_t one = vdupq_n_f32(1.0f);
  const float32x4_t z = vmulq_f32(vabsq_f32(x), vdupq_n_f32(kSqrtHalf));
  const float32x4_t t = Div(one, Fma(one, z, vdupq_n_f32(0.5f)));
  float32x4_t q = vdupq_n_f32(kErfcQ[9]);
  for (int i = 8; i >= 0; --i) q = Fma(vdupq_n_f32(kErfcQ[i]), q, t);
  const float32x4_t zz = vmulq_f32(z, z);
#if defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
  const float32x4_t zz_lo = vfmsq_f32(vnegq_f32(zz), z, vnegq_f32(z));  // z·z - zz, exactly
#else
  const float32x4_t zz_lo = vdupq_n_f32(0.0f);  // no FMA: drop the (sub-ulp) correction
#endif
  const float32x4_t erfc = vmulq_f32(t, Exp(vsubq_f32(vsubq_f32(q, zz_lo), zz)));
  const float32x4_t half_erfc = vmulq_f32(erfc, vdupq_n_f32(0.5f));
  const uint32x4_t neg = vcltq_f32(x, vdupq_n_f32(0.0f));
  return vmulq_f32(x, vbslq_f32(neg, half_erfc, vsubq_f32(one, half_erfc)));
}

inline float32x4_t GeluTanh(float32x4_t x) {
  const float32x4_t c =
      Fma(vdupq_n_f32(approx::kGeluTanh2C0), vdupq_n_f32(approx::kGeluTanh2C1), vmulq_f32(x, x));
  return vmulq_f32(x, Sigmoid(vmulq_f32(x, c)));
}

inline float32x4_t Relu(float32x4_t x) { return vmaxq_f32(x, vdupq_n_f32(0.0f)); }
inline float32x4_t Silu(float32x4_t x) { return vmulq_f32(x, Sigmoid(x)); }
inline float32x4_t Identity(float32x4_t v) { return v; }
// gpt-oss's SwiGLU (see activations_x86.inc); vminq/vmaxq return NaN when either operand is NaN.
inline float32x4_t SwishOai(float32x4_t x) {
  const float32x4_t c = vminq_f32(vdupq_n_f32(approx::kOaiLimit), x);
  return vmulq_f32(c, Sigmoid(vmulq_f32(c, vdupq_n_f32(approx::kOaiAlpha))));
}
inline float32x4_t UpOai(float32x4_t u) {
  return vaddq_f32(vmaxq_f32(vdupq_n_f32(-approx::kOaiLimit),
                             vminq_f32(vdupq_n_f32(approx::kOaiLimit), u)),
                   vdupq_n_f32(1.0f));
}

// Full vectors, then the tail through a small copy (no reads or writes past n).
template <float32x4_t (*Act)(float32x4_t), float32x4_t (*Up)(float32x4_t) = Identity>
inline void Apply(size_t n, const float* x, const float* u, float* y) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    float32x4_t v = Act(vld1q_f32(x + i));
    if (u != nullptr) v = vmulq_f32(v, Up(vld1q_f32(u + i)));
    vst1q_f32(y + i, v);
  }
  if (i < n) {
    float bx[4] = {0.0f, 0.0f, 0.0f, 0.0f}, bu[4] = {1.0f, 1.0f, 1.0f, 1.0f}, by[4];
    for (size_t j = 0; i + j < n; ++j) {
      bx[j] = x[i + j];
      if (u != nullptr) bu[j] = u[i + j];
    }
    vst1q_f32(by, vmulq_f32(Act(vld1q_f32(bx)), u != nullptr ? Up(vld1q_f32(bu)) : vld1q_f32(bu)));
    for (size_t j = 0; i + j < n; ++j) y[i + j] = by[j];
  }
}

inline float Sum(size_t d, const float* x) {
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= d; i += 16) {
    a0 = vaddq_f32(a0, vld1q_f32(x + i));
    a1 = vaddq_f32(a1, vld1q_f32(x + i + 4));
    a2 = vaddq_f32(a2, vld1q_f32(x + i + 8));
    a3 = vaddq_f32(a3, vld1q_f32(x + i + 12));
  }
  for (; i + 4 <= d; i += 4) a0 = vaddq_f32(a0, vld1q_f32(x + i));
  float s = HorizontalSum(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
  for (; i < d; ++i) s += x[i];
  return s;
}

inline float SumSquares(size_t d, const float* x, float shift) {
  const float32x4_t vs = vdupq_n_f32(shift);
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= d; i += 16) {
    const float32x4_t v0 = vsubq_f32(vld1q_f32(x + i), vs);
    const float32x4_t v1 = vsubq_f32(vld1q_f32(x + i + 4), vs);
    const float32x4_t v2 = vsubq_f32(vld1q_f32(x + i + 8), vs);
    const float32x4_t v3 = vsubq_f32(vld1q_f32(x + i + 12), vs);
    a0 = Fma(a0, v0, v0);
    a1 = Fma(a1, v1, v1);
    a2 = Fma(a2, v2, v2);
    a3 = Fma(a3, v3, v3);
  }
  for (; i + 4 <= d; i += 4) {
    const float32x4_t v = vsubq_f32(vld1q_f32(x + i), vs);
    a0 = Fma(a0, v, v);
  }
  float s = HorizontalSum(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
  for (; i < d; ++i) s += (x[i] - shift) * (x[i] - shift);
  return s;
}

inline void ScaleRow(size_t d, const float* x, float shift, float scale, const float* w,
                     const float* b, float* y) {
  const float32x4_t vs = vdupq_n_f32(shift), vk = vdupq_n_f32(scale);
  size_t i = 0;
  for (; i + 4 <= d; i += 4) {
    float32x4_t v = vmulq_f32(vmulq_f32(vsubq_f32(vld1q_f32(x + i), vs), vk), vld1q_f32(w + i));
    if (b != nullptr) v = vaddq_f32(v, vld1q_f32(b + i));
    vst1q_f32(y + i, v);
  }
  for (; i < d; ++i) y[i] = (x[i] - shift) * scale * w[i] + (b != nullptr ? b[i] : 0.0f);
}

}  // namespace

void F32ReluNeon(size_t n, const float* x, const float* u, float* y) { Apply<Relu>(n, x, u, y); }
void F32GeluErfNeon(size_t n, const float* x, const float* u, float* y) {
  Apply<GeluErf>(n, x, u, y);
}
void F32GeluTanhNeon(size_t n, const float* x, const float* u, float* y) {
  Apply<GeluTanh>(n, x, u, y);
}
void F32SiluNeon(size_t n, const float* x, const float* u, float* y) { Apply<Silu>(n, x, u, y); }
void F32SigmoidNeon(size_t n, const float* x, const float* u, float* y) {
  Apply<Sigmoid>(n, x, u, y);
}
void F32SwigluOaiNeon(size_t n, const float* x, const float* u, float* y) {
  Apply<SwishOai, UpOai>(n, x, u, y);
}

void F32LayerNormNeon(size_t d, const float* x, const float* w, const float* b, float eps,
                      float* y) {
  const float mean = Sum(d, x) / static_cast<float>(d);
  const float var = SumSquares(d, x, mean) / static_cast<float>(d);
  ScaleRow(d, x, mean, 1.0f / std::sqrt(var + eps), w, b, y);
}

void F32RmsNormNeon(size_t d, const float* x, const float* w, float eps, float* y) {
  const float ms = SumSquares(d, x, 0.0f) / static_cast<float>(d);
  ScaleRow(d, x, 0.0f, 1.0f / std::sqrt(ms + eps), w, nullptr, y);
}

}  // namespace fflite

#endif  // FFLITE_KERNELS_NEON
