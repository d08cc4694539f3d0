// The int8-activation product over quantised panels (I8, I4) for AVX-VNNI (vpdpbusd on 256-bit
// vectors, VEX-encoded: Intel cores from Alder Lake on, AMD from Zen 5), for CPUs without AVX-512
// VNNI: the AVX2 kernel's tiles (qgemm_avx2_tiles.inc) with one vpdpbusd where AVX2 takes
// vpmaddubsw and vpmaddwd. The activations are quantised by QuantizeActivationsAvx2.
#include "kernels/quant_kernels.h"

#if defined(FFLITE_QGEMM_X86)

#define FFLITE_QGEMM_AVX2 __attribute__((target("avx2,fma,f16c,avxvnni")))
#define FFLITE_QGEMM_AVX_VNNI 1
#include "kernels/qgemm_avx2_tiles.inc"

namespace fflite {

FFLITE_QGEMM_AVX2 void QGemmAvxVnni(size_t c, size_t k, size_t rows, const uint8_t* w,
                                    QuantType type, const float* bias, const QActBlock* xq,
                                    float* y, size_t y_stride) {
  RunWithQ2KMins(c, k, rows, w, type, xq, y, y_stride, [&](const Q2KSumsQ* mins) {
    WithQuantTraits(type, [&](auto q) {
      QGemm<decltype(q)>(c, k, rows, w, bias, xq, y, y_stride, mins);
    });
  });
}

}  // namespace fflite

#endif  // FFLITE_QGEMM_X86
