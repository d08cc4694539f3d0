// The AVX-512 kernels (and the AVX-VNNI int8 one) compiled through SIMDe (avx512_simde.h) as the
// only kernels a test sees: kquant_test, quant_gemv_test, quant_gemm_test and kernels_test are
// built again (as *_avx512_emulated_test, tests/CMakeLists.txt) with AvailableKernels,
// AvailableQGemvKernels and AvailableQGemmKernels renamed to these, and check them as they check
// every kernel a CPU runs, on a CPU without those instructions.
#include <cstddef>
#include <cstdint>
#include <vector>

// First, so that the headers' declarations of the kernels name the emulated functions.
#include "avx512_renames.h"
#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"

namespace fflite {
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
