// Chooses the int8-activation quantised kernels for this CPU once, through cpuinfo; lists every
// pair it can run, worst first.
#include <cpuinfo.h>

#include "kernels/quant_kernels.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#if !defined(HWCAP2_I8MM)
#define HWCAP2_I8MM (1 << 13)  // the arm64 kernel's bit (Linux 5.10)
#endif
#define FFLITE_QGEMM_LINUX_HWCAP2 1
#endif

namespace fflite {

namespace {

const QGemmKernel kScalar = {"scalar", QuantizeActivationsScalar, QGemmScalar};
#if defined(FFLITE_QGEMM_X86)
const QGemmKernel kAvx2 = {"avx2", QuantizeActivationsAvx2, QGemmAvx2};
const QGemmKernel kAvx512Vnni = {"avx512vnni", QuantizeActivationsAvx512, QGemmAvx512Vnni};
#endif
#if defined(FFLITE_QGEMM_NEON)
const QGemmKernel kNeon = {"neon", QuantizeActivationsNeon, QGemmNeon};
#if defined(__aarch64__)
const QGemmKernel kNeonDot = {"neondot", QuantizeActivationsNeon, QGemmNeonDot};
const QGemmKernel kNeonI8mm = {"neoni8mm", QuantizeActivationsNeon, QGemmNeonI8mm};

// Debian 12's cpuinfo has no i8mm query: Linux reports it in AT_HWCAP2 (elsewhere the kernel is
// not used).
bool HasArmI8mm() {
#if defined(FFLITE_QGEMM_LINUX_HWCAP2)
  return (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#else
  return false;
#endif
}
#endif
#endif

std::vector<const QGemmKernel*> Detect() {
  std::vector<const QGemmKernel*> sets = {&kScalar};
  // cpuinfo_initialize is idempotent and thread-safe; on failure only the scalar pair is used.
  const bool cpuinfo = cpuinfo_initialize();
#if defined(FFLITE_QGEMM_X86)
  if (cpuinfo && cpuinfo_has_x86_avx2() && cpuinfo_has_x86_fma3() && cpuinfo_has_x86_f16c()) {
    sets.push_back(&kAvx2);
    // (Debian 12's cpuinfo has no AVX-VNNI query, so there is no 256-bit VNNI kernel.)
    if (cpuinfo_has_x86_avx512f() && cpuinfo_has_x86_avx512bw() && cpuinfo_has_x86_avx512vl() &&
        cpuinfo_has_x86_avx512vnni()) {
      sets.push_back(&kAvx512Vnni);
    }
  }
#endif
#if defined(FFLITE_QGEMM_NEON)
#if defined(__aarch64__)
  sets.push_back(&kNeon);  // part of the ARMv8-A baseline
  if (cpuinfo && cpuinfo_has_arm_neon_dot()) sets.push_back(&kNeonDot);
  if (HasArmI8mm()) sets.push_back(&kNeonI8mm);
#else
  if (cpuinfo && cpuinfo_has_arm_neon()) sets.push_back(&kNeon);
#endif
#endif
  (void)cpuinfo;
  return sets;
}

}  // namespace

std::vector<const QGemmKernel*> AvailableQGemmKernels() {
  static const std::vector<const QGemmKernel*> kSets = Detect();
  return kSets;
}

const QGemmKernel& BestQGemmKernel() {
  static const QGemmKernel* const kBest = AvailableQGemmKernels().back();
  return *kBest;
}

}  // namespace fflite
