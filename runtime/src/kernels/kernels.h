// Element-wise and per-row kernels the xnnpack backend needs beyond XNNPACK 2022: activations, the
// GLU product, LayerNorm / RMSNorm. Each exists as portable scalar code and as SIMD code per ISA.
#ifndef FFLITE_RUNTIME_SRC_KERNELS_KERNELS_H_
#define FFLITE_RUNTIME_SRC_KERNELS_KERNELS_H_

#include <cstddef>
#include <vector>

#include "format/model.h"

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

// One instruction set's kernels. Every pointer is set.
struct Kernels {
  const char* isa;  // "scalar", "avx2", "neon"
  F32ActivationFn relu, gelu_erf, gelu_tanh, silu, sigmoid;
  F32LayerNormFn layer_norm;
  F32RmsNormFn rms_norm;

  // The activation kernel for a (validated) activation; relu for an invalid value.
  F32ActivationFn Activation(fflite::Activation activation) const;
};

// Portable C++ (libm, double accumulation in the norms): every platform, and the comparison point
// for the SIMD versions.
const Kernels& ScalarKernels();
// The best set this CPU supports (chosen once, through cpuinfo).
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
void F32LayerNormScalar(size_t d, const float* x, const float* w, const float* b, float eps,
                        float* y);
void F32RmsNormScalar(size_t d, const float* x, const float* w, float eps, float* y);

#if defined(__x86_64__) || defined(__i386__)
#define FFLITE_KERNELS_AVX2 1
// AVX2 + FMA3 (Haswell and later, Zen and later). Call only when the CPU has both.
void F32ReluAvx2(size_t n, const float* x, const float* u, float* y);
void F32GeluErfAvx2(size_t n, const float* x, const float* u, float* y);
void F32GeluTanhAvx2(size_t n, const float* x, const float* u, float* y);
void F32SiluAvx2(size_t n, const float* x, const float* u, float* y);
void F32SigmoidAvx2(size_t n, const float* x, const float* u, float* y);
void F32LayerNormAvx2(size_t d, const float* x, const float* w, const float* b, float eps,
                      float* y);
void F32RmsNormAvx2(size_t d, const float* x, const float* w, float eps, float* y);
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
void F32LayerNormNeon(size_t d, const float* x, const float* w, const float* b, float eps,
                      float* y);
void F32RmsNormNeon(size_t d, const float* x, const float* w, float eps, float* y);
#endif

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_KERNELS_H_
