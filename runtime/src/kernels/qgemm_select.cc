// Chooses the int8-activation quantised kernels for this CPU once, through cpuinfo; lists every
// pair it can run, worst first.
#include <cpuinfo.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <string>

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

const QGemmKernel kScalar = {"scalar", QuantizeActivationsScalar, QGemmScalar,
                             RotateBlocksScalar};
#if defined(FFLITE_QGEMM_X86)
const QGemmKernel kAvx2 = {"avx2", QuantizeActivationsAvx2, QGemmAvx2, RotateBlocksAvx2};
const QGemmKernel kAvxVnni = {"avxvnni", QuantizeActivationsAvx2, QGemmAvxVnni,
                              RotateBlocksAvx2};

const QGemmKernel kAvx512Vnni = {"avx512vnni", QuantizeActivationsAvx512, QGemmAvx512Vnni,
                                 RotateBlocksAvx512};
#endif
#if defined(FFLITE_QGEMM_NEON)
const QGemmKernel kNeon = {"neon", QuantizeActivationsNeon, QGemmNeon, RotateBlocksScalar};
#if defined(__aarch64__)
const QGemmKernel kNeonDot = {"neondot", QuantizeActivationsNeon, QGemmNeonDot,
                             RotateBlocksScalar};
const QGemmKernel kNeonI8mm = {"neoni8mm", QuantizeActivationsNeon, QGemmNeonI8mm,
                              RotateBlocksScalar};

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
    if (CpuHasAvxVnni()) sets.push_back(&kAvxVnni);
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

bool CpuHasAvxVnni() {
#if defined(__x86_64__) || defined(__i386__)
  // Debian 12's cpuinfo has no AVX-VNNI query: CPUID leaf 7, sub-leaf 1, EAX bit 4. (The OS's
  // saving of the ymm registers is cpuinfo's AVX2 answer, which callers check first.)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (eax & (1u << 4)) != 0;
#else
  return false;
#endif
}

std::vector<const QGemmKernel*> AvailableQGemmKernels() {
  static const std::vector<const QGemmKernel*> kSets = Detect();
  return kSets;
}

const QGemmKernel& BestQGemmKernel() {
  static const QGemmKernel* const kBest = AvailableQGemmKernels().back();
  return *kBest;
}

size_t DefaultQuantGemmMinTokens(DType dtype, const QGemvKernel& gemv, const QGemmKernel& gemm) {
  // Measured on Zen 5 (one thread, a cold 11008 x 4096 matrix; GB/s of the weights' bytes, the
  // quantisation of the activations included; the read loop 26-28 GB/s in the same run):
  //   tokens                    1     2     4
  //   i4  qgemv avx512        29.2  18.2  11.2
  //   i4  qgemm avx512vnni    26.0  25.8  25.9
  //   i8  qgemv avx512        29.9  22.4  16.6
  //   i8  qgemm avx512vnni    26.8  27.9  25.3
  //   i4  qgemv avx2          10.5   8.4   5.0   (issue-bound: the nibbles' conversion to f32)
  //   i4  qgemm avx2          17.3  16.0   8.9
  //   i8  qgemv avx2          22.9  16.8   8.9
  //   i8  qgemm avx2          20.6  18.8  11.4
  //   i4  qgemm avxvnni       18.4  18.5  12.6   (another run: avx2 17.4 15.6 9.6)
  //   i8  qgemm avxvnni       21.9  21.4  15.1   (avx2 22.6 20.3 12.5)
  // AVX-512 without VNNI (Skylake-SP) pairs qgemv avx512 with qgemm avx2, slower at every count
  // up to 4. The NEON pairs are not measured (no ARM machine here): they keep 8.
  const bool i4 = dtype == DType::I4;
  const std::string gemv_isa = gemv.isa, gemm_isa = gemm.isa;
  if (gemm_isa == "avx512vnni") return 2;
  if ((gemm_isa == "avx2" || gemm_isa == "avxvnni") && gemv_isa == "avx2") return i4 ? 1 : 2;
  return 8;
}

}  // namespace fflite
