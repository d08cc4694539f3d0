// Every tolerance the tests use, in one place, each with its reasoning.
#ifndef FFLITE_TESTS_TESTING_TOLERANCES_H_
#define FFLITE_TESTS_TESTING_TOLERANCES_H_

namespace fflite {
namespace testing {

// Hand-worked values against the reference backend. The reference accumulates in double and
// rounds once to f32 at the end, so it is within 0.5 ulp of the exact value; the hand values are
// computed in double by the test. 1e-6 relative (about 8 f32 ulps) plus 1e-6 absolute (for
// outputs near zero) leaves room for the f32 inputs and the final rounding and nothing else.
inline constexpr double kHandRelTol = 1e-6;
inline constexpr double kHandAbsTol = 1e-6;

// An optimised f32 backend against the reference. Each output is a sum of d_ff products of
// f32-rounded intermediates; with the f32 accumulation of blocked GEMMs the error grows like
// sqrt(K)·eps·Σ|terms| in practice (and K·eps in the worst case). The tests scale the tolerance
// by the magnitude of the terms, so we state it relative to the output's scale:
//   |got - want| <= kF32RelTol · (|want| + scale), scale = RMS of the reference output row.
// 2e-4 is ~1700 f32 ulps: above the sqrt(K) growth for K up to a few thousand with margin, and far
// below any real bug (a wrong activation, bias or index moves outputs by O(scale)).
inline constexpr double kF32RelTol = 2e-4;

// Vectorised activations (polynomial/rational approximations of exp, erf, tanh) against the
// double formulas: the kernels aim for a few ulps; 2e-6 relative + 1e-7 absolute bounds them.
inline constexpr double kActivationRelTol = 2e-6;
inline constexpr double kActivationAbsTol = 1e-7;

// Vectorised LayerNorm / RMSNorm against the double formula. The SIMD kernels accumulate the
// mean and the sum of squares in f32 over 32 (AVX2) or 16 (NEON) lanes, so each lane adds d/32
// terms: for d up to 4096 that is <= 128 additions, a relative error of at most ~128·eps ≈ 8e-6 in
// the statistics (typically ~sqrt(128)·eps ≈ 7e-7) and half of that in 1/sqrt(var). 2e-5
// relative to (|want| + rms(want)) covers the worst case; a wrong mean, eps or weight is O(1).
inline constexpr double kNormRelTol = 2e-5;

// Quantised weights (I8/I4) through an optimised backend against the reference on the same file.
// The reference dequantises exactly (q · f16 scale is exact in f32; rotated layouts are rotated
// back in double), so with float activations (few tokens) the only differences are f32
// summation order and the f32 rounding of the rotated activations: kF32RelTol applies.
//
// With int8 activations (the many-token kernels) each activation is replaced by its block's
// absmax/127 grid: |δ| <= amax/254, uniform, so a product's relative error is about
// (1/254)·(amax/rms of the block)/sqrt(3): about 0.5% for the tests' inputs (amax/rms ~ 2.5
// over a block of 32 uniform or post-activation values). Two products in a row (x, then the
// hidden activations) give ~0.7% rms, and the test takes the maximum over a few thousand outputs
// (~4.5 sigma): 3%. 5e-2 covers that with margin; a wrong scale, index or block is O(1).
inline constexpr double kInt8ActRelTol = 5e-2;

// bf16 weights multiplied in bf16 (the gemm engine's bf16 kernels, vdpbf16ps): each activation is
// rounded to bf16 before the products, a relative error uniform in ±2^-9 (rms 2^-9/sqrt(3) ≈
// 1.1e-3), while the weights are exact and the products and sums are f32. For random-sign terms a
// product's output error is then ~1.1e-3 of the output's scale. A gated hidden value carries three
// such roundings (x into the gate and into up, then h itself, the gate's through the activation's
// slope), ~2e-3 rms of the output's scale, and the tests take the maximum over up to ~10^5 outputs
// (beyond 4.5 sigma, with tails heavier than normal where a large gate meets a large up).
// Measured: on the mixtral-like MoE of cuda_backend_test (d 256, d_ff 704, 300 tokens: 76,800
// outputs) the largest error was 1.04e-2 of (|want| + rms), the same output to 5 digits on the CPU's
// vdpbf16ps and on cuda's tensor cores, so an earlier 1e-2 was too tight. 2e-2 covers it; a wrong
// index, bias or scale is O(1). The kernels themselves are checked at f32 precision against a
// double product of the bf16-rounded values (gemm_test.cc).
inline constexpr double kBf16ActRelTol = 2e-2;

// The cuda backend with f16/bf16 weights: above a few tokens the products run on tensor cores
// (cuBLAS, CUBLAS_COMPUTE_32F) with the activations rounded to the weights' type and the
// products and sums in f32, so the argument of kBf16ActRelTol applies as is for bf16 (the f32
// sums' order differs, which is within kF32RelTol); f16 rounds activations to 2^-11, 4x finer.
// Few tokens and routers keep f32 activations (kF32RelTol). A wrong index, bias or scale is O(1).
inline constexpr double kTensorCoreRelTol = kBf16ActRelTol;

// Value norms ‖vᵢ‖ (format/value_norms.h) of stored weights against the same norms of the f32
// values they were stored from. Storing rounds each weight w to ŵ, and by the triangle inequality
// |‖v̂‖ − ‖v‖| <= ‖v̂ − v‖, so a bound on each element's rounding bounds the norm's error:
// - f16 / bf16 round to nearest: |ŵ − w| <= u·|w| with u = 2^-11 / 2^-8 (half an ulp of the
//   10 / 7 stored mantissa bits), so |‖v̂‖ − ‖v‖| <= u·‖v‖. f16 also has subnormals below 2^-14,
//   where the error is at most 2^-25 absolute per element: sqrt(d_model)·2^-25 more.
// - i8 / i4: the quantiser reports the largest |ŵ − w| of each matrix (QuantStats::max_abs_error,
//   rotated layouts measured after rotating back), so |‖v̂‖ − ‖v‖| <= sqrt(d_model)·max_abs_error.
// - f32 is stored exactly and both sides sum the same squares in double: 1e-12 relative.
// The sums of squares in double add ~d_model·2^-53 relative, far below all of these. A wrong
// column, a padding column or a missed scale is O(1) of a norm (the tests' columns differ in
// norm by far more than these bounds).
inline constexpr double kValueNormF32RelTol = 1e-12;
inline constexpr double kValueNormF16RelTol = 0x1p-11;
inline constexpr double kValueNormF16SubnormalAbs = 0x1p-25;  // per element
inline constexpr double kValueNormBf16RelTol = 0x1p-8;

}  // namespace testing
}  // namespace fflite

#endif  // FFLITE_TESTS_TESTING_TOLERANCES_H_
