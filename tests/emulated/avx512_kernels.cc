// The AVX-512 kernels (and the AVX-VNNI int8 one) compiled through SIMDe (avx512_simde.h) as the
// only kernels a test sees: kquant_test, quant_gemv_test, quant_gemm_test and kernels_test are
// built again (as *_avx512_emulated_test, tests/CMakeLists.txt) with AvailableKernels,
// AvailableQGemvKernels and AvailableQGemmKernels renamed to these, and check them as they check
// every kernel a CPU runs, on a CPU without those instructions.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"

namespace fflite {

void QGemvAvx512Emulated(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                         const float* bias, const float* x, size_t x_stride, float* y,
                         size_t y_stride);
void QGemmAvx512VnniEmulated(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                             const float* bias, const QActBlock* xq, float* y, size_t y_stride);
void QuantizeActivationsAvx512Emulated(size_t c, size_t k, const float* x, size_t x_stride,
                                       QActBlock* xq);
void RotateBlocksAvx512Emulated(size_t blocks, const float* x, float* y);
void QGemmAvxVnniEmulated(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                          const float* bias, const QActBlock* xq, float* y, size_t y_stride);

void F32ReluAvx512Emulated(size_t n, const float* x, const float* u, float* y);
void F32GeluErfAvx512Emulated(size_t n, const float* x, const float* u, float* y);
void F32GeluTanhAvx512Emulated(size_t n, const float* x, const float* u, float* y);
void F32SiluAvx512Emulated(size_t n, const float* x, const float* u, float* y);
void F32SigmoidAvx512Emulated(size_t n, const float* x, const float* u, float* y);
void F32SwigluOaiAvx512Emulated(size_t n, const float* x, const float* u, float* y);
void F32GemvAvx512Emulated(size_t c, size_t k, size_t rows, const void* w, FloatType w_type,
                           const float* bias, const float* x, size_t x_stride, float* y,
                           size_t y_stride);
void F32GemvAvx512StreamsEmulated(size_t c, size_t k, size_t rows, const void* w,
                                  FloatType w_type, const float* bias, const float* x,
                                  size_t x_stride, float* y, size_t y_stride);
void F32ValueRowsAvx512Emulated(size_t c, size_t cols, size_t n, const uint32_t* rows,
                                const void* v, FloatType v_type, size_t v_stride,
                                const float* bias, const float* h, size_t h_stride, float* y,
                                size_t y_stride);

namespace {
// The library's AVX-512 set (and its "avx512-streams" twin) normalises with the AVX2 functions;
// here the scalar ones, on any x86-64 CPU.
constexpr Kernels kEmulatedAvx512 = {
    "avx512 (emulated)",       F32ReluAvx512Emulated,  F32GeluErfAvx512Emulated,
    F32GeluTanhAvx512Emulated, F32SiluAvx512Emulated,  F32SigmoidAvx512Emulated,
    F32SwigluOaiAvx512Emulated, F32LayerNormScalar,    F32RmsNormScalar,
    F32GemvAvx512Emulated,     F32ValueRowsAvx512Emulated};
constexpr Kernels kEmulatedAvx512Streams = {
    "avx512-streams (emulated)", F32ReluAvx512Emulated,  F32GeluErfAvx512Emulated,
    F32GeluTanhAvx512Emulated,   F32SiluAvx512Emulated,  F32SigmoidAvx512Emulated,
    F32SwigluOaiAvx512Emulated,  F32LayerNormScalar,     F32RmsNormScalar,
    F32GemvAvx512StreamsEmulated, F32ValueRowsAvx512Emulated};

constexpr QGemvKernel kEmulatedQGemv = {"avx512 (emulated)", QGemvAvx512Emulated};
constexpr QGemmKernel kEmulatedQGemm = {"avx512vnni (emulated)",
                                        QuantizeActivationsAvx512Emulated,
                                        QGemmAvx512VnniEmulated, RotateBlocksAvx512Emulated};
// The library's AVX-VNNI kernel quantises and rotates with the AVX2 functions; here the scalar
// ones, which give the same blocks bit for bit (quant_gemm_test), on any x86-64 CPU.
constexpr QGemmKernel kEmulatedAvxVnniQGemm = {"avxvnni (emulated)", QuantizeActivationsScalar,
                                               QGemmAvxVnniEmulated, RotateBlocksScalar};
}  // namespace

std::vector<const Kernels*> EmulatedKernels() {
  return {&kEmulatedAvx512, &kEmulatedAvx512Streams};
}
std::vector<const QGemvKernel*> EmulatedQGemvKernels() { return {&kEmulatedQGemv}; }
std::vector<const QGemmKernel*> EmulatedQGemmKernels() {
  return {&kEmulatedQGemm, &kEmulatedAvxVnniQGemm};
}

}  // namespace fflite
