// Matrix products over quantised weights (I8, I4) as stored in the file (kernels/quant_types.h),
// used straight from the mapping. Two ways per instruction set, each with a portable scalar twin:
//  - qgemv: float activations; the weights are dequantised in registers. For decode (1 to a few
//    tokens), where the time is the read of the weights, and wherever int8 activations would cost
//    accuracy.
//  - qgemm: activations quantised on the fly to int8 in blocks of 32 (QuantizeActivations), then
//    integer dot products (AVX-512 VNNI, AVX2, plain NEON, NEON sdot, NEON smmla; scalar): for
//    many tokens.
#ifndef FFLITE_RUNTIME_SRC_KERNELS_QUANT_KERNELS_H_
#define FFLITE_RUNTIME_SRC_KERNELS_QUANT_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/types.h"

namespace fflite {

// y[t·y_stride + o] = (bias ? bias[o] : 0) + Σ_{j<k} W[o, j] · x[t·x_stride + j]
//   for t < c, o < rows, with W[o, j] = scale · q as stored.
// w: the first panel of the rows to compute (a caller splits a matrix among threads at panel
// boundaries, offsetting w by whole panels, bias and y by 16 rows a panel); the panel stride is
// QuantMatrixGeometry(type, rows_total, k).panel_bytes, which depends on k only.
// rows: how many rows to write (the last panel may be partial; padding rows are never written).
// type: Q8 or Q4. bias: [rows] f32 or nullptr. x: [c, x_stride] f32, exactly k values per token
// are read (no tail slack); y: [c, y_stride] f32, not overlapping w, bias or x. Any c >= 1.
using QGemvFn = void (*)(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                         const float* bias, const float* x, size_t x_stride, float* y,
                         size_t y_stride);

// One block of 32 quantised activations: x[j] ≈ d · q[j].
struct QActBlock {
  float d;       // scale (0 for an all-zero block)
  int32_t sum;   // Σ q[j] (for the I4 offset of 8 and unsigned-operand corrections)
  int8_t q[32];  // in [-127, 127]
};
static_assert(sizeof(QActBlock) == 40, "QActBlock is 40 bytes");

// A block whose largest magnitude is below this (2^-100) quantises to zeros (d = 0): 127/amax
// would overflow f32 for the smallest values, and such activations contribute nothing an f32
// output can hold anyway.
inline constexpr float kQuantActMinAbsMax = 7.8886090522101181e-31f;

// xq[t · k_blocks + b] = the b-th block of 32 of token t (zero-padded past k), absmax-scaled:
// d = max|x| / 127, q = round(x / d). x: [c, x_stride] f32 (k values read per token);
// xq: [c, ceil(k / 32)] blocks.
using QuantizeActivationsFn = void (*)(size_t c, size_t k, const float* x, size_t x_stride,
                                       QActBlock* xq);

// y[32b .. 32b + 32) = R·x[32b .. 32b + 32) for b < blocks: Rotate32 of each block (the rotated
// layout's activations, kernels/quant_types.h), by its operations in its order, so the same bits.
// y may equal x (in place); no other overlap.
using RotateBlocksFn = void (*)(size_t blocks, const float* x, float* y);

// y[t·y_stride + o] = (bias ? bias[o] : 0) + Σ_b d_w[o, b] · d_x[t, b] · Σ_j q_w[o, 32b + j] · q_x[t, b, j]
//   for t < c, o < rows. w, rows, type, bias as for QGemvFn; xq: [c, ceil(k / 32)] blocks.
using QGemmFn = void (*)(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                         const float* bias, const QActBlock* xq, float* y, size_t y_stride);

// Q2KP's mins (kernels/quant_types.h), which every kernel subtracts after Q6K's product on the
// values: y[t·y_stride + o] -= Σ_s dmin[o, s]·Σ_h m[o, s, h]·X[t, s, h] for t < c, o < rows, s and
// h the super-blocks and their half-blocks of 16, in order; X the sum of the activations over the
// half-block: of x in f32 in order (SubtractQ2KMins, the float-activation kernels; one product a
// half-block), or d_x·Σq_x (SubtractQ2KMinsQ, the int8 ones; xq as for QGemmFn), whose two
// half-blocks of an activation block share d_x: f32(m·Σq + m'·Σq')·d_x, one product a block, the
// pair exact in int32. w, rows as for QGemvFn; k a multiple of 256. simd: an AVX2 loop where the
// CPU has one (the SIMD kernels), else the portable loop (the scalar twins): the same operations
// in the same order, so the same bits (quant_mins.cc).
void SubtractQ2KMins(size_t c, size_t k, size_t rows, const uint8_t* w, const float* x,
                     size_t x_stride, float* y, size_t y_stride, bool simd = true);
void SubtractQ2KMinsQ(size_t c, size_t k, size_t rows, const uint8_t* w, const QActBlock* xq,
                      float* y, size_t y_stride, bool simd = true);
// SubtractQ2KMinsQ in two steps, for a kernel that subtracts each panel's mins right after the
// panel's product (its mins then read with it, not in a second pass over the matrix): the
// activations' half-block sums once per call, for at most kTokens tokens and kSupers super-blocks
// (false: more; the caller then takes SubtractQ2KMinsQ), then SubtractQ2KMinsQPanel for the panel
// at `panel` (its first n <= 16 rows, y as for QGemmFn from the panel's first row). The same
// operations per row as SubtractQ2KMinsQ, so the same bits. 16 KiB: a caller's stack holds one.
struct Q2KSumsQ {
  static constexpr size_t kTokens = 2, kSupers = 128;  // k up to 32768
  // Set by PrepareQ2KSumsQ. No initialisers: the type has no constructor code, which a kernel
  // file built for another instruction set could otherwise hold the shared copy of.
  size_t c, k;
  int16_t s[kTokens * kSupers * 8 * 2];
  float d[kTokens * kSupers * 8];
};
bool PrepareQ2KSumsQ(size_t c, size_t k, const QActBlock* xq, Q2KSumsQ* sums);
void SubtractQ2KMinsQPanel(const Q2KSumsQ& sums, const uint8_t* panel, size_t n, float* y,
                           size_t y_stride, bool simd = true);
// A SIMD qgemm's product with Q2KP's mins: run(mins) computes the product, subtracting each
// panel's mins after it when mins is not null (decode: the sums fit); otherwise they follow in a
// second pass. Other types: run(nullptr). Instantiated with each kernel file's own lambda, so no
// copy of it is shared between files built for different instruction sets.
template <typename Run>
void RunWithQ2KMins(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                    const QActBlock* xq, float* y, size_t y_stride, Run&& run) {
  if (type != QuantType::kQ2KP) {
    run(nullptr);
    return;
  }
  Q2KSumsQ sums;
  if (PrepareQ2KSumsQ(c, k, xq, &sums)) {
    run(&sums);
    return;
  }
  run(nullptr);
  SubtractQ2KMinsQ(c, k, rows, w, xq, y, y_stride);
}

// One instruction set's float-activation kernel, and one's int8-activation pair. The two are
// chosen apart: a CPU may have a fast dequantising kernel and no integer dot product.
struct QGemvKernel {
  const char* isa;  // "scalar", "avx2", "avx512", "neon"
  QGemvFn qgemv;
};
struct QGemmKernel {
  const char* isa;  // "scalar", "avx2", "avxvnni", "avx512vnni", "neon", "neondot", ...
  QuantizeActivationsFn quantize_activations;
  QGemmFn qgemm;
  // The activations' rotation for the rotated layout, which the quantised engine runs before
  // either kernel (the float-activation one too): its instruction set's, where one is written.
  RotateBlocksFn rotate_blocks;
};

// Every kernel this CPU can run, scalar first (tests run them all), and the best one (chosen once:
// kernels/registry.h).
std::vector<const QGemvKernel*> AvailableQGemvKernels();
const QGemvKernel& BestQGemvKernel();
std::vector<const QGemmKernel*> AvailableQGemmKernels();
const QGemmKernel& BestQGemmKernel();

// "Choose per dtype through DefaultQuantGemmMinTokens", where a caller takes a token threshold
// (CpuBackendOptions::quant_gemm_min_tokens's default).
inline constexpr size_t kQuantGemmTokensAuto = ~size_t{0};

// The fewest tokens in a product over `type` (Q8 or Q4) weights for which the int8-activation
// kernel runs by default with this pair of kernels: from where it is measured faster. Int8
// activations (absmax per block of 32) add to a product's NMSE the rounding error's share,
// E[amax²] / (127² · 12 · σ²) ≈ 2e-5 for Gaussian blocks (more for heavy tails, which the rotated
// layout evens out): nothing next to I4's own weight error (about 5e-3), as much again as I8's,
// so I8 keeps float activations until the integer kernel is clearly ahead.
size_t DefaultQuantGemmMinTokens(QuantType type, const QGemvKernel& gemv, const QGemmKernel& gemm);

// The portable kernels (every platform; the comparison point for the SIMD ones).
void QGemvScalar(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                 const float* bias, const float* x, size_t x_stride, float* y, size_t y_stride);
void QuantizeActivationsScalar(size_t c, size_t k, const float* x, size_t x_stride,
                               QActBlock* xq);
void RotateBlocksScalar(size_t blocks, const float* x, float* y);
void QGemmScalar(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                 const float* bias, const QActBlock* xq, float* y, size_t y_stride);

// The int8-activation kernels per instruction set (call only when the CPU has the instructions;
// qgemm_select.cc checks). Every one computes the scalar twin's integer dot products exactly.
#if defined(__x86_64__) || defined(__i386__)
#define FFLITE_QGEMM_X86 1
// AVX2 + FMA3 + F16C: vpmaddubsw / vpmaddwd (I8 through the sign trick).
void QuantizeActivationsAvx2(size_t c, size_t k, const float* x, size_t x_stride, QActBlock* xq);
// A block in four vectors, its butterflies by permutes and blends (the AVX2 and AVX-VNNI sets).
void RotateBlocksAvx2(size_t blocks, const float* x, float* y);
void QGemmAvx2(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type, const float* bias,
               const QActBlock* xq, float* y, size_t y_stride);
// AVX2 + FMA3 + F16C + AVX-VNNI (CPUID.(7,1):EAX bit 4): the AVX2 kernel's tiles with vpdpbusd on
// 8 rows × 4 k; activations from QuantizeActivationsAvx2.
void QGemmAvxVnni(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                  const float* bias, const QActBlock* xq, float* y, size_t y_stride);
// AVX-512 F + BW + VL + VNNI: vpdpbusd on 16 rows × 4 k per instruction.
void QuantizeActivationsAvx512(size_t c, size_t k, const float* x, size_t x_stride,
                               QActBlock* xq);
// AVX-512 F: a block in two vectors, its butterflies by in-register permutes.
void RotateBlocksAvx512(size_t blocks, const float* x, float* y);
void QGemmAvx512Vnni(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                     const float* bias, const QActBlock* xq, float* y, size_t y_stride);
#endif
#if defined(__aarch64__) || defined(__arm__)
#define FFLITE_QGEMM_NEON 1
// NEON (armv7 with NEON, aarch64): vmull_s8 / vpadalq_s16. The NEON activation quantiser serves
// both NEON kernels.
void QuantizeActivationsNeon(size_t c, size_t k, const float* x, size_t x_stride, QActBlock* xq);
void QGemmNeon(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type, const float* bias,
               const QActBlock* xq, float* y, size_t y_stride);
#if defined(__aarch64__)
// aarch64 with the dot-product extension (ARMv8.2 sdot; cpuinfo_has_arm_neon_dot()).
void QGemmNeonDot(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                  const float* bias, const QActBlock* xq, float* y, size_t y_stride);
// aarch64 with the int8 matrix-multiply extension (FEAT_I8MM smmla, ARMv8.6; HWCAP2_I8MM).
void QGemmNeonI8mm(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                   const float* bias, const QActBlock* xq, float* y, size_t y_stride);
#endif
#endif

// The float-activation kernels per instruction set (qgemv_select.cc checks the CPU). They sum in
// f32 in their own orders: results agree with QGemvScalar to rounding, not bitwise.
#if defined(__x86_64__) || defined(__i386__)
#define FFLITE_QGEMV_X86 1
// AVX2 + FMA3 + F16C (qgemv_avx2.cc). Call only when the CPU has all three.
void QGemvAvx2(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type, const float* bias,
               const float* x, size_t x_stride, float* y, size_t y_stride);
// AVX-512 F + BW + VL, with FMA3 and F16C (qgemv_avx512.cc). Call only when the CPU has all five.
void QGemvAvx512(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                 const float* bias, const float* x, size_t x_stride, float* y, size_t y_stride);
#endif

// NEON (aarch64; 32-bit ARM, where qgemv_neon.cc alone is built with -mfpu=neon and the kernel is
// used only when the CPU reports NEON).
#if defined(__aarch64__) || defined(__arm__)
#define FFLITE_QGEMV_NEON 1
void QGemvNeon(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type, const float* bias,
               const float* x, size_t x_stride, float* y, size_t y_stride);
#endif

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_QUANT_KERNELS_H_
