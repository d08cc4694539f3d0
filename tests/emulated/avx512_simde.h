// Test-only: the AVX-512 kernels' sources (and the AVX-VNNI one's) compiled into portable code, so
// that their arithmetic runs and is checked on a CPU without those instructions
// (tests/CMakeLists.txt force-includes this header into each of them for the avx512_emulated
// tests).
//
// Each x86 intrinsic becomes SIMDe's portable twin (Debian's libsimde-dev: SIMD Everywhere, which
// implements the instructions' semantics lane by lane where the CPU lacks them), and the
// functions' target attributes are dropped, so the compiler emits no AVX-512 instruction. The few
// intrinsics this SIMDe lacks are written below from Intel's definitions, the reductions in the
// order GCC's own header computes them (the bits a real CPU would give for this source). The
// kernels' entry points are renamed (…Emulated) so that they link beside the library's.
//
// Not a header to include elsewhere: it redefines `target`, `__asm__` and the intrinsics' names.
#ifndef FFLITE_TESTS_EMULATED_AVX512_SIMDE_H_
#define FFLITE_TESTS_EMULATED_AVX512_SIMDE_H_

// The standard headers the kernels and their headers use, before the macros below can touch them.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <immintrin.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <simde/x86/fma.h>

#include "base/half.h"

// Function-like aliases split a template's arguments at their comma
// (_mm_shuffle_epi8(LevelTable<Q, kCodes>(), i)): these name the function instead.
#undef _mm_shuffle_epi8
#define _mm_shuffle_epi8 simde_mm_shuffle_epi8
#undef _mm256_broadcastsi128_si256
#define _mm256_broadcastsi128_si256 simde_mm256_broadcastsi128_si256
#undef _mm512_broadcast_i32x4
#define _mm512_broadcast_i32x4 simde_mm512_broadcast_i32x4
#undef _mm256_shuffle_epi8
#define _mm256_shuffle_epi8 simde_mm256_shuffle_epi8
#undef _mm512_shuffle_epi8
#define _mm512_shuffle_epi8 simde_mm512_shuffle_epi8
// AVX-VNNI's vpdpbusd (VEX) is AVX-512 VNNI's (EVEX) on 256 bits.
#undef _mm256_dpbusd_avx_epi32
#define _mm256_dpbusd_avx_epi32 simde_mm256_dpbusd_epi32

namespace fflite_emulated {

// A result of 16 lanes, each set by set(r, a_, i) from the operand's private view a_ into the
// result's r.
template <typename R, typename RPrivate, typename A, typename APrivate, typename F>
R Lanes16(A a, F set) {
  APrivate a_;
  RPrivate r;
  std::memcpy(&a_, &a, sizeof(A));
  for (int i = 0; i < 16; ++i) set(r, a_, i);
  R out;
  std::memcpy(&out, &r, sizeof(R));
  return out;
}
using Int512 = simde__m512i_private;
using Int256 = simde__m256i_private;
using Int128 = simde__m128i_private;
using Float512 = simde__m512_private;

inline simde__m512 Cvtepi32Ps(simde__m512i a) {
  return Lanes16<simde__m512, Float512, simde__m512i, Int512>(
      a, [](Float512& r, const Int512& v, int i) { r.f32[i] = static_cast<float>(v.i32[i]); });
}
inline simde__m512i Cvtepi8Epi32(simde__m128i a) {
  return Lanes16<simde__m512i, Int512, simde__m128i, Int128>(
      a, [](Int512& r, const Int128& v, int i) { r.i32[i] = v.i8[i]; });
}
inline simde__m512i Cvtepu8Epi32(simde__m128i a) {
  return Lanes16<simde__m512i, Int512, simde__m128i, Int128>(
      a, [](Int512& r, const Int128& v, int i) { r.i32[i] = v.u8[i]; });
}
inline simde__m512i Cvtepu16Epi32(simde__m256i a) {
  return Lanes16<simde__m512i, Int512, simde__m256i, Int256>(
      a, [](Int512& r, const Int256& v, int i) { r.i32[i] = v.u16[i]; });
}
// vpmovdb: each int32's low byte (truncation).
inline simde__m128i Cvtepi32Epi8(simde__m512i a) {
  return Lanes16<simde__m128i, Int128, simde__m512i, Int512>(
      a, [](Int128& r, const Int512& v, int i) { r.u8[i] = static_cast<uint8_t>(v.u32[i]); });
}
// vcvtps2dq under the default rounding (to nearest, ties to even); out of range and NaN give
// INT32_MIN, the "integer indefinite".
inline simde__m512i CvtpsEpi32(simde__m512 a) {
  return Lanes16<simde__m512i, Int512, simde__m512, Float512>(
      a, [](Int512& r, const Float512& v, int i) {
        const float n = std::nearbyint(v.f32[i]);
        r.i32[i] = n >= -2147483648.0f && n < 2147483648.0f ? static_cast<int32_t>(n) : INT32_MIN;
      });
}
inline simde__m512 CvtphPs(simde__m256i a) {
  return Lanes16<simde__m512, Float512, simde__m256i, Int256>(
      a, [](Float512& r, const Int256& v, int i) { r.f32[i] = fflite::F16ToF32(v.u16[i]); });
}
inline simde__m256i MaskzLoaduEpi16(simde__mmask16 k, const void* p) {
  const uint16_t* in = static_cast<const uint16_t*>(p);
  simde__m256i_private r;
  for (int i = 0; i < 16; ++i) r.u16[i] = ((k >> i) & 1) ? in[i] : 0;
  return simde__m256i_from_private(r);
}
inline void MaskStoreuPs(void* p, simde__mmask16 k, simde__m512 a) {
  simde__m512_private a_ = simde__m512_to_private(a);
  float* out = static_cast<float*>(p);
  for (int i = 0; i < 16; ++i) {
    if ((k >> i) & 1) out[i] = a_.f32[i];
  }
}
inline simde__m512 MaskzLoaduPs(simde__mmask16 k, const void* p) {
  const float* in = static_cast<const float*>(p);
  simde__m512_private r;
  for (int i = 0; i < 16; ++i) r.f32[i] = ((k >> i) & 1) ? in[i] : 0.0f;
  return simde__m512_from_private(r);
}
// vpermilps with an immediate: within each 128-bit lane, element i takes imm's field i.
inline simde__m512 PermutePs(simde__m512 a, int imm) {
  simde__m512_private a_ = simde__m512_to_private(a);
  simde__m512_private r;
  for (int i = 0; i < 16; ++i) r.f32[i] = a_.f32[(i & ~3) + ((imm >> (2 * (i & 3))) & 3)];
  return simde__m512_from_private(r);
}
// The fused multiply-adds with one rounding, as the instructions do (SIMDe's portable ones round
// the product and the sum apart).
template <typename V, typename Private, int kLanes>
V Fused(V a, V b, V c, float sign_ab, float sign_c) {
  Private a_, b_, c_, r;
  std::memcpy(&a_, &a, sizeof(V));
  std::memcpy(&b_, &b, sizeof(V));
  std::memcpy(&c_, &c, sizeof(V));
  for (int i = 0; i < kLanes; ++i) {
    r.f32[i] = std::fma(sign_ab * a_.f32[i], b_.f32[i], sign_c * c_.f32[i]);
  }
  V out;
  std::memcpy(&out, &r, sizeof(V));
  return out;
}
inline simde__m512 Fmadd512(simde__m512 a, simde__m512 b, simde__m512 c) {
  return Fused<simde__m512, simde__m512_private, 16>(a, b, c, 1.0f, 1.0f);
}
inline simde__m512 Fmsub512(simde__m512 a, simde__m512 b, simde__m512 c) {
  return Fused<simde__m512, simde__m512_private, 16>(a, b, c, 1.0f, -1.0f);
}
inline simde__m512 Fnmadd512(simde__m512 a, simde__m512 b, simde__m512 c) {
  return Fused<simde__m512, simde__m512_private, 16>(a, b, c, -1.0f, 1.0f);
}
inline simde__m256 Fmadd256(simde__m256 a, simde__m256 b, simde__m256 c) {
  return Fused<simde__m256, simde__m256_private, 8>(a, b, c, 1.0f, 1.0f);
}
inline simde__m256 Fmsub256(simde__m256 a, simde__m256 b, simde__m256 c) {
  return Fused<simde__m256, simde__m256_private, 8>(a, b, c, 1.0f, -1.0f);
}
// vshuff32x4: 128-bit lanes 0, 1 from a and 2, 3 from b, each chosen by two bits of imm.
inline simde__m512 ShuffleF32x4(simde__m512 a, simde__m512 b, int imm) {
  simde__m512_private a_ = simde__m512_to_private(a), b_ = simde__m512_to_private(b);
  simde__m512_private r;
  for (int lane = 0; lane < 4; ++lane) {
    const simde__m512_private& src = lane < 2 ? a_ : b_;
    const int from = (imm >> (2 * lane)) & 3;
    for (int i = 0; i < 4; ++i) r.f32[4 * lane + i] = src.f32[4 * from + i];
  }
  return simde__m512_from_private(r);
}
// GCC's _mm512_reduce_* (avx512fintrin.h): the high 256 bits op the low, then the high 128 op
// the low, then lanes {2, 3, 0, 1} against themselves, then (add) lane 0 op lane 1 or (max)
// lanes {1, 0, 1, 0} once more; max as maxps (a > b ? a : b: the second operand on NaN).
inline float MaxPs(float a, float b) { return a > b ? a : b; }
inline float ReduceAddPs(simde__m512 a) {
  simde__m512_private a_ = simde__m512_to_private(a);
  float t3[8], t6[4], t8[4];
  for (int i = 0; i < 8; ++i) t3[i] = a_.f32[8 + i] + a_.f32[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
  const int s[4] = {2, 3, 0, 1};
  for (int i = 0; i < 4; ++i) t8[i] = t6[i] + t6[s[i]];
  return t8[0] + t8[1];
}
inline float ReduceMaxPs(simde__m512 a) {
  simde__m512_private a_ = simde__m512_to_private(a);
  float t3[8], t6[4], t8[4], t10[4];
  for (int i = 0; i < 8; ++i) t3[i] = MaxPs(a_.f32[8 + i], a_.f32[i]);
  for (int i = 0; i < 4; ++i) t6[i] = MaxPs(t3[4 + i], t3[i]);
  const int s[4] = {2, 3, 0, 1}, u[4] = {1, 0, 1, 0};
  for (int i = 0; i < 4; ++i) t8[i] = MaxPs(t6[i], t6[s[i]]);
  for (int i = 0; i < 4; ++i) t10[i] = MaxPs(t8[i], t8[u[i]]);
  return t10[0];
}
inline int ReduceAddEpi32(simde__m512i a) {
  simde__m512i_private a_ = simde__m512i_to_private(a);
  uint32_t sum = 0;  // wraps as the instructions do
  for (int i = 0; i < 16; ++i) sum += a_.u32[i];
  return static_cast<int>(sum);
}

}  // namespace fflite_emulated

#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps fflite_emulated::Cvtepi32Ps
#undef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32 fflite_emulated::Cvtepi8Epi32
#undef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32 fflite_emulated::Cvtepu8Epi32
#undef _mm512_cvtepi32_epi8
#define _mm512_cvtepi32_epi8 fflite_emulated::Cvtepi32Epi8
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32 fflite_emulated::Cvtepu16Epi32
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16 fflite_emulated::MaskzLoaduEpi16
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32 fflite_emulated::CvtpsEpi32
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps fflite_emulated::CvtphPs
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps fflite_emulated::MaskStoreuPs
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps fflite_emulated::MaskzLoaduPs
#undef _mm512_permute_ps
#define _mm512_permute_ps fflite_emulated::PermutePs
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4 fflite_emulated::ShuffleF32x4
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps fflite_emulated::Fmadd512
#undef _mm512_fmsub_ps
#define _mm512_fmsub_ps fflite_emulated::Fmsub512
#undef _mm512_fnmadd_ps
#define _mm512_fnmadd_ps fflite_emulated::Fnmadd512
#undef _mm256_fmadd_ps
#define _mm256_fmadd_ps fflite_emulated::Fmadd256
#undef _mm256_fmsub_ps
#define _mm256_fmsub_ps fflite_emulated::Fmsub256
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps fflite_emulated::ReduceAddPs
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps fflite_emulated::ReduceMaxPs
#undef _mm512_reduce_add_epi32
#define _mm512_reduce_add_epi32 fflite_emulated::ReduceAddEpi32

// No target attribute: the portable code must not be compiled for AVX-512.
#define target(...)
// No inline assembly: the kernels' register constraints ("v") do not fit SIMDe's vector types
// (gemv_avx512.cc keeps a loaded vector in a register so; the results do not depend on it).
#define __asm__(...)

// The entry points, renamed to link beside the library's own.
#include "avx512_renames.h"

#endif  // FFLITE_TESTS_EMULATED_AVX512_SIMDE_H_
