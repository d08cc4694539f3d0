// Constants of the polynomial approximations the SIMD kernels share (exp, erfc), with their
// sources and error bounds, so that every ISA computes the same formulas.
#ifndef FFLITE_RUNTIME_SRC_KERNELS_APPROX_H_
#define FFLITE_RUNTIME_SRC_KERNELS_APPROX_H_

namespace fflite {
namespace approx {

// exp(x), Cephes expf: n = round(x·log2 e), r = x - n·ln 2 in two parts (Cody-Waite), then
// e^r = 1 + r + r²·P(r) on |r| <= ln2/2 (about 1 ulp), scaled by 2^n through the exponent bits.
// Inputs are clamped to [kExpMin, kExpMax] so that 2^n stays a normal number.
// gpt-oss's SwiGLU (transformers GptOssExperts): sigmoid slope and clamp limit.
inline constexpr float kOaiAlpha = 1.702f;
inline constexpr float kOaiLimit = 7.0f;
inline constexpr float kExpMin = -87.33654f;  // e^kExpMin ~ 2^-126
inline constexpr float kExpMax = 88.37626f;   // e^kExpMax < FLT_MAX
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;  // exact in 9 bits: n·kLn2Hi is exact
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpP0 = 1.9875691500e-4f;
inline constexpr float kExpP1 = 1.3981999507e-3f;
inline constexpr float kExpP2 = 8.3334519073e-3f;
inline constexpr float kExpP3 = 4.1665795894e-2f;
inline constexpr float kExpP4 = 1.6666665459e-1f;
inline constexpr float kExpP5 = 5.0000001201e-1f;

// erfc(z) for z >= 0, Numerical Recipes "erfcc" (Chebyshev fit, fractional error < 1.2e-7 for
// every z): t = 1 / (1 + z/2), erfc(z) = t·exp(-z² + Q(t)), Q the degree-9 polynomial below.
// GELU uses Φ(x) = erfc(-x/√2)/2, which has no cancellation for negative x (1 + erf(x) would).
inline constexpr float kErfcQ[10] = {-1.26551223f, 1.00002368f, 0.37409196f,  0.09678418f,
                                     -0.18628806f, 0.27886807f, -1.13520398f, 1.48851587f,
                                     -0.82215223f, 0.17087277f};
inline constexpr float kSqrtHalf = 0.70710678118654752f;

// GELU (tanh approximation): 0.5·x·(1 + tanh(u)) = x·sigmoid(2u), u = √(2/π)·(x + 0.044715·x³);
// the sigmoid form avoids the cancellation of 1 + tanh(u) for negative u.
inline constexpr float kGeluTanh2C0 = 1.59576912160573071f;  // 2·√(2/π)
inline constexpr float kGeluTanh2C1 = 1.59576912160573071f * 0.044715f;

}  // namespace approx
}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_APPROX_H_
