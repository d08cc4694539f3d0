// Chooses the kernel set for this CPU once, through cpuinfo; lists every set it can run.
#include <cpuinfo.h>

#include "kernels/kernels.h"

namespace fflite {

F32ActivationFn Kernels::Activation(fflite::Activation activation) const {
  switch (activation) {
    case fflite::Activation::GELU_ERF: return gelu_erf;
    case fflite::Activation::GELU_TANH: return gelu_tanh;
    case fflite::Activation::SILU: return silu;
    case fflite::Activation::SIGMOID: return sigmoid;
    default: return relu;
  }
}

const Kernels& ScalarKernels() {
  static const Kernels kScalar = {"scalar",           F32ReluScalar,    F32GeluErfScalar,
                                  F32GeluTanhScalar,  F32SiluScalar,    F32SigmoidScalar,
                                  F32LayerNormScalar, F32RmsNormScalar, F32GemvScalar,
                                  F32ValueRowsScalar};
  return kScalar;
}

namespace {

#if defined(FFLITE_KERNELS_AVX2)
const Kernels kAvx2 = {"avx2",           F32ReluAvx2,      F32GeluErfAvx2, F32GeluTanhAvx2,
                       F32SiluAvx2,      F32SigmoidAvx2,   F32LayerNormAvx2, F32RmsNormAvx2,
                       F32GemvAvx2,      F32ValueRowsAvx2};
// The AVX2 set with the AVX-512 gemv and activations (the norms gain nothing from 16 lanes at
// d_model sizes).
constexpr Kernels kAvx512 = {"avx512",         F32ReluAvx512,    F32GeluErfAvx512,
                             F32GeluTanhAvx512, F32SiluAvx512,    F32SigmoidAvx512,
                             F32LayerNormAvx2, F32RmsNormAvx2,   F32GemvAvx512,
                             F32ValueRowsAvx512};
// The same with one token's gemv in 8-row streams (F32GemvAvx512Streams): the best set on AMD CPUs,
// listed after "avx512" there and before it elsewhere, so that the tests run both everywhere.
constexpr Kernels WithStreamsGemv(Kernels k) {
  k.isa = "avx512-streams";
  k.gemv = F32GemvAvx512Streams;
  return k;
}
constexpr Kernels kAvx512Streams = WithStreamsGemv(kAvx512);
#endif
#if defined(FFLITE_KERNELS_NEON)
const Kernels kNeon = {"neon",           F32ReluNeon,      F32GeluErfNeon, F32GeluTanhNeon,
                       F32SiluNeon,      F32SigmoidNeon,   F32LayerNormNeon, F32RmsNormNeon,
                       F32GemvNeon,      F32ValueRowsNeon};
#endif

std::vector<const Kernels*> Detect() {
  std::vector<const Kernels*> sets = {&ScalarKernels()};
  // cpuinfo_initialize is idempotent and thread-safe; on failure only scalar kernels are used.
  const bool cpuinfo = cpuinfo_initialize();
#if defined(FFLITE_KERNELS_AVX2)
  if (cpuinfo && cpuinfo_has_x86_avx2() && cpuinfo_has_x86_fma3() && cpuinfo_has_x86_f16c()) {
    sets.push_back(&kAvx2);
    if (cpuinfo_has_x86_avx512f() && cpuinfo_has_x86_avx512bw() && cpuinfo_has_x86_avx512vl()) {
      const bool amd = cpuinfo_get_cores_count() > 0 &&
                       cpuinfo_get_core(0)->vendor == cpuinfo_vendor_amd;
      sets.push_back(amd ? &kAvx512 : &kAvx512Streams);
      sets.push_back(amd ? &kAvx512Streams : &kAvx512);
    }
  }
#endif
#if defined(FFLITE_KERNELS_NEON)
#if defined(__aarch64__)
  sets.push_back(&kNeon);  // part of the ARMv8-A baseline
#else
  if (cpuinfo && cpuinfo_has_arm_neon()) sets.push_back(&kNeon);
#endif
#endif
  (void)cpuinfo;
  return sets;
}

}  // namespace

std::vector<const Kernels*> AvailableKernels() {
  static const std::vector<const Kernels*> kSets = Detect();
  return kSets;
}

const Kernels& BestKernels() {
  static const Kernels* const kBest = AvailableKernels().back();
  return *kBest;
}

}  // namespace fflite
