// Element-wise and per-row kernels the CPU backend needs beyond XNNPACK 2022: activations, the
// GLU product, LayerNorm / RMSNorm, and a few-token matrix product straight from the model file's
// f32/f16/bf16 weights. Each exists as portable scalar code and as SIMD code per ISA.
#ifndef FFLITE_RUNTIME_SRC_KERNELS_KERNELS_H_
#define FFLITE_RUNTIME_SRC_KERNELS_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/types.h"

namespace fflite {

// y[i] = act(x[i]) · u[i] when u != nullptr (the GLU product), else y[i] = act(x[i]).
// x, u, y: [n] f32; y may alias x or u (each element is read before it is written).
// Reads and writes exactly n elements (no tail slack needed).
using F32ActivationFn = void (*)(size_t n, const float* x, const float* u, float* y);

// LayerNorm of one row: y = (x - mean) / sqrt(var + eps) · w + b, var the population variance.
// x, y: [d] (may alias); w: [d] (any unit offset already added); b: [d] or nullptr.
using F32LayerNormFn = void (*)(size_t d, const float* x, const float* w, const float* b, float eps,
                                float* y);
// RMSNorm of one row: y = x / sqrt(mean(x²) + eps) · w.   x, y: [d] (may alias); w: [d].
using F32RmsNormFn = void (*)(size_t d, const float* x, const float* w, float eps, float* y);

// A matrix product for a few tokens straight from row-major weights as the model file stores them
// (no packing):
//   y[t·y_stride + o] = (bias ? bias[o] : 0) + Σ_{j<k} W[o·k + j] · x[t·x_stride + j]
//   for t < c, o < rows.
// W: [rows, k] row-major, elements of w_type (F32, F16 or BF16; W need only be aligned to its
// element size); bias: [rows] f32 or nullptr; x: [c, x_stride] f32; y: [c, y_stride] f32, not
// overlapping W, bias or x. Any c >= 1 (meant for c <= 8); reads and writes exactly the elements
// named (no tail slack). A caller splits the rows among threads by offsetting w, bias and y.
// Each output is summed in an order that depends only on k and the kernel set: results are
// bit-identical for any c and however the rows are split (tested).
using F32GemvFn = void (*)(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                           const float* bias, const float* x, size_t x_stride, float* y,
                           size_t y_stride);

// The down projection from value rows (Layout::VALUE_ROWS: W [cols, k] stored transposed, one
// contiguous row of cols elements per neuron), for a few tokens, reading only the rows listed:
//   y[t·y_stride + o] = (bias ? bias[o] : 0) + Σ_{j<n} h[t·h_stride + i_j] · V[i_j·v_stride + o]
//   for t < c, o < cols, with i_j = rows[j] (rows == nullptr: i_j = j, every row).
// V: elements of v_type (F32, F16, BF16); bias: [cols] f32 or nullptr; h: [c, h_stride] f32;
// y: [c, y_stride] f32, not overlapping the others. A caller splits the columns among threads by
// offsetting v, bias and y. Each output is the bias, then the terms in list order, one
// multiply-add each: a row whose h is 0 for every token adds exactly 0 (finite weights), so
// listing only the rows with a nonzero h gives the bits of listing every row (tested).
using F32ValueRowsFn = void (*)(size_t c, size_t cols, size_t n, const uint32_t* rows,
                                const void* v, FloatType v_type, size_t v_stride, const float* bias,
                                const float* h, size_t h_stride, float* y, size_t y_stride);

// One instruction set's kernels. Every pointer is set.
struct Kernels {
  const char* isa;  // "scalar", "avx2", "avx512", "avx512-streams", "neon"
  F32ActivationFn relu, gelu_erf, gelu_tanh, silu, sigmoid;
  // gpt-oss's SwiGLU: y = act(x)·(clamp(u, ±7) + 1), act(x) = c·σ(1.702·c), c = min(x, 7).
  F32ActivationFn swiglu_oai;
  F32LayerNormFn layer_norm;
  F32RmsNormFn rms_norm;
  F32GemvFn gemv;
  F32ValueRowsFn value_rows;

  // The activation kernel for a (validated) activation; relu for an invalid value.
  F32ActivationFn Activation(ActKind activation) const;
};

// Portable C++ (libm, double accumulation in the norms): every platform, and the comparison point
// for the SIMD versions.
const Kernels& ScalarKernels();
// The best set this CPU supports (chosen once: kernels/registry.h).
const Kernels& BestKernels();
// Every set this CPU can run, scalar first (tests run them all).
std::vector<const Kernels*> AvailableKernels();

// y[i] = a[i] + b[i] (residual add; the compiler vectorises this loop for every target).
// y may alias a or b.
void F32Add(size_t n, const float* a, const float* b, float* y);

// The kernels by name (declared for the tests; call them through Kernels).
void F32ReluScalar(size_t n, const float* x, const float* u, float* y);
void F32GeluErfScalar(size_t n, const float* x, const float* u, float* y);
void F32GeluTanhScalar(size_t n, const float* x, const float* u, float* y);
void F32SiluScalar(size_t n, const float* x, const float* u, float* y);
void F32SigmoidScalar(size_t n, const float* x, const float* u, float* y);
void F32SwigluOaiScalar(size_t n, const float* x, const float* u, float* y);
void F32LayerNormScalar(size_t d, const float* x, const float* w, const float* b, float eps,
                        float* y);
void F32RmsNormScalar(size_t d, const float* x, const float* w, float eps, float* y);
void F32GemvScalar(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                   const float* bias, const float* x, size_t x_stride, float* y, size_t y_stride);
void F32ValueRowsScalar(size_t c, size_t cols, size_t n, const uint32_t* rows, const void* v,
                        FloatType v_type, size_t v_stride, const float* bias, const float* h,
                        size_t h_stride, float* y, size_t y_stride);

#if defined(__x86_64__) || defined(__i386__)
#define FFLITE_KERNELS_AVX2 1
// AVX2 + FMA3 + F16C (Haswell and later, Zen and later). Call only when the CPU has all three.
void F32ReluAvx2(size_t n, const float* x, const float* u, float* y);
void F32GeluErfAvx2(size_t n, const float* x, const float* u, float* y);
void F32GeluTanhAvx2(size_t n, const float* x, const float* u, float* y);
void F32SiluAvx2(size_t n, const float* x, const float* u, float* y);
void F32SigmoidAvx2(size_t n, const float* x, const float* u, float* y);
void F32SwigluOaiAvx2(size_t n, const float* x, const float* u, float* y);
void F32LayerNormAvx2(size_t d, const float* x, const float* w, const float* b, float eps,
                      float* y);
void F32RmsNormAvx2(size_t d, const float* x, const float* w, float eps, float* y);
void F32GemvAvx2(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                 const float* bias, const float* x, size_t x_stride, float* y, size_t y_stride);
// AVX-512 F + BW + VL (with FMA3 and F16C: Skylake-X, Ice Lake, Zen 4 and later). The "avx512"
// set is the AVX2 set with this gemv and these activations. The gemv: 4 rows × 6 tokens of
// 16-lane accumulators in the 32 zmm registers instead of 4 × 3 of 8 lanes in 16 ymm, which the
// few-dozen-token MoE experts at prefill need (they are bound by multiply-adds there). The
// activations: the AVX2 formulas on 16 lanes, the same bits. Call only when the CPU has all five.
void F32GemvAvx512(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                   const float* bias, const float* x, size_t x_stride, float* y, size_t y_stride);
// The same, except that one token (c = 1: decode) runs in blocks of 8 rows, 8 streams of weights
// left to the hardware prefetchers, instead of 4 rows prefetching the next 4: the same bits
// (gemv_avx512.cc). The "avx512-streams" set, chosen over "avx512" on AMD CPUs, where it was
// measured faster: on a Zen 5 VM, decode from memory (fflite-bench --tokens 1 --cold, 21
// repetitions, the two builds alternated, 3 rounds; ms at 1 / 2 threads), a Llama bf16 layer
// 12.8-15.3 -> 11.1-11.9 / 6.9-7.6 -> 5.8-7.1, f16 12.9-13.1 -> 11.7-12.3 / 6.3-8.5 -> 6.0-7.0,
// qwen-moe bf16 6.1-6.7 -> 6.0-6.4 / 3.7-4.7 -> 3.0-3.2, mixtral-mini f32 3.2-4.1 -> 3.0-4.0 /
// 1.7-2.1 -> 1.2-2.0; mixtral-mini bf16 (rows of 2 KiB, short streams) 1.7-2.2 -> 1.8-1.9 /
// 0.76-0.91 -> 0.83-0.88, within the noise. Intel CPUs keep "avx512" until measured there.
void F32GemvAvx512Streams(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                          const float* bias, const float* x, size_t x_stride, float* y,
                          size_t y_stride);
void F32ReluAvx512(size_t n, const float* x, const float* u, float* y);
void F32GeluErfAvx512(size_t n, const float* x, const float* u, float* y);
void F32GeluTanhAvx512(size_t n, const float* x, const float* u, float* y);
void F32SiluAvx512(size_t n, const float* x, const float* u, float* y);
void F32SigmoidAvx512(size_t n, const float* x, const float* u, float* y);
void F32SwigluOaiAvx512(size_t n, const float* x, const float* u, float* y);
// value_rows_x86.cc: the value-row kernel on 8 and 16 lanes.
void F32ValueRowsAvx2(size_t c, size_t cols, size_t n, const uint32_t* rows, const void* v,
                      FloatType v_type, size_t v_stride, const float* bias, const float* h,
                      size_t h_stride, float* y, size_t y_stride);
void F32ValueRowsAvx512(size_t c, size_t cols, size_t n, const uint32_t* rows, const void* v,
                        FloatType v_type, size_t v_stride, const float* bias, const float* h,
                        size_t h_stride, float* y, size_t y_stride);
#endif

// aarch64 always has NEON. 32-bit ARM builds (Debian armhf targets VFPv3-D16 without NEON)
// compile kernels_neon.cc alone with -mfpu=neon and use it only when the CPU reports NEON.
#if defined(__aarch64__) || defined(__arm__)
#define FFLITE_KERNELS_NEON 1
// NEON (armv7 with NEON, aarch64). Fused multiply-add where the target has it.
void F32ReluNeon(size_t n, const float* x, const float* u, float* y);
void F32GeluErfNeon(size_t n, const float* x, const float* u, float* y);
void F32GeluTanhNeon(size_t n, const float* x, const float* u, float* y);
void F32SiluNeon(size_t n, const float* x, const float* u, float* y);
void F32SigmoidNeon(size_t n, const float* x, const float* u, float* y);
void F32SwigluOaiNeon(size_t n, const float* x, const float* u, float* y);
void F32LayerNormNeon(size_t d, const float* x, const float* w, const float* b, float eps,
                      float* y);
void F32RmsNormNeon(size_t d, const float* x, const float* w, float eps, float* y);
// f32 and bf16 weights vectorised everywhere; f16 on aarch64 (32-bit NEON has no half
// conversion without -mfpu=neon-fp16, so there it calls F32GemvScalar).
void F32GemvNeon(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                 const float* bias, const float* x, size_t x_stride, float* y, size_t y_stride);
void F32ValueRowsNeon(size_t c, size_t cols, size_t n, const uint32_t* rows, const void* v,
                      FloatType v_type, size_t v_stride, const float* bias, const float* h,
                      size_t h_stride, float* y, size_t y_stride);
#endif

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_KERNELS_H_
