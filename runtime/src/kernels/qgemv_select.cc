// Chooses the float-activation quantised kernel for this CPU once, through cpuinfo.
#include <cpuinfo.h>

#include "kernels/quant_kernels.h"

namespace fflite {

namespace {

const QGemvKernel kScalar = {"scalar", QGemvScalar};
#if defined(FFLITE_QGEMV_X86)
const QGemvKernel kAvx2 = {"avx2", QGemvAvx2};
const QGemvKernel kAvx512 = {"avx512", QGemvAvx512};
#endif
#if defined(FFLITE_QGEMV_NEON)
const QGemvKernel kNeon = {"neon", QGemvNeon};
#endif

std::vector<const QGemvKernel*> Detect() {
  std::vector<const QGemvKernel*> sets = {&kScalar};
  // cpuinfo_initialize is idempotent and thread-safe; on failure only the scalar kernel is used.
  const bool cpuinfo = cpuinfo_initialize();
#if defined(FFLITE_QGEMV_X86)
  if (cpuinfo && cpuinfo_has_x86_avx2() && cpuinfo_has_x86_fma3() && cpuinfo_has_x86_f16c()) {
    sets.push_back(&kAvx2);
    if (cpuinfo_has_x86_avx512f() && cpuinfo_has_x86_avx512bw() && cpuinfo_has_x86_avx512vl()) {
      sets.push_back(&kAvx512);
    }
  }
#endif
#if defined(FFLITE_QGEMV_NEON)
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

std::vector<const QGemvKernel*> AvailableQGemvKernels() {
  static const std::vector<const QGemvKernel*> kSets = Detect();
  return kSets;
}

const QGemvKernel& BestQGemvKernel() {
  static const QGemvKernel* const kBest = AvailableQGemvKernels().back();
  return *kBest;
}

}  // namespace fflite
