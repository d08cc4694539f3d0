// The one probe of the CPU (cpu_features.h).
#include "base/cpu_features.h"

#include <cpuinfo.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#if !defined(HWCAP2_I8MM)
#define HWCAP2_I8MM (1 << 13)  // the arm64 kernel's bit (Linux 5.10)
#endif
#endif

namespace fflite {

namespace {

#if defined(__x86_64__) || defined(__i386__)
// CPUID.(7,1):EAX bit 4. (The OS's saving of the ymm registers is cpuinfo's AVX2 answer, which
// the kernels that use it require too.)
bool HasAvxVnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (eax & (1u << 4)) != 0;
}

// CPUID.(7,0):EDX bit 24 AMX-TILE, bit 22 AMX-BF16; XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA)
// enabled by the OS (CPUID.1:ECX bit 27 OSXSAVE before XGETBV). Linux still hands the tile state
// to a process only when asked (gemm_amx.cc asks, before it lists its kernel).
bool HasAmxBf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  if ((d >> 24 & 1) == 0 || (d >> 22 & 1) == 0) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || (c >> 27 & 1) == 0) return false;
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & (3u << 17)) == (3u << 17);
}
#endif

CpuFeatures Probe() {
  CpuFeatures f;
  f.probed = cpuinfo_initialize();
  auto set = [&f](bool present, CpuFeature feature) {
    if (present) f.Set(feature);
  };
#if defined(__aarch64__)
  f.Set(CpuFeature::kNeon);  // part of the ARMv8-A baseline, whatever cpuinfo says
#if defined(__linux__)
  // Debian 12's cpuinfo has no i8mm query: Linux reports it in AT_HWCAP2.
  set((getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0, CpuFeature::kI8mm);
#endif
#endif
  if (!f.probed) return f;
#if defined(__x86_64__) || defined(__i386__)
  set(cpuinfo_has_x86_sse2(), CpuFeature::kSse2);
  set(cpuinfo_has_x86_sse4_1(), CpuFeature::kSse41);
  set(cpuinfo_has_x86_avx(), CpuFeature::kAvx);
  set(cpuinfo_has_x86_fma3(), CpuFeature::kFma3);
  set(cpuinfo_has_x86_f16c(), CpuFeature::kF16c);
  set(cpuinfo_has_x86_avx2(), CpuFeature::kAvx2);
  set(cpuinfo_has_x86_avx512f(), CpuFeature::kAvx512f);
  set(cpuinfo_has_x86_avx512bw(), CpuFeature::kAvx512bw);
  set(cpuinfo_has_x86_avx512dq(), CpuFeature::kAvx512dq);
  set(cpuinfo_has_x86_avx512vl(), CpuFeature::kAvx512vl);
  set(cpuinfo_has_x86_avx512vnni(), CpuFeature::kAvx512vnni);
  set(cpuinfo_has_x86_avx512bf16(), CpuFeature::kAvx512bf16);
  set(HasAvxVnni(), CpuFeature::kAvxVnni);
  set(HasAmxBf16(), CpuFeature::kAmxBf16);
#elif defined(__aarch64__)
  set(cpuinfo_has_arm_neon_fp16_arith(), CpuFeature::kFp16Arith);
  set(cpuinfo_has_arm_neon_dot(), CpuFeature::kDotProd);
  set(cpuinfo_has_arm_bf16(), CpuFeature::kArmBf16);
  set(cpuinfo_has_arm_sve(), CpuFeature::kSve);
  set(cpuinfo_has_arm_sve2(), CpuFeature::kSve2);
#elif defined(__arm__)
  set(cpuinfo_has_arm_vfpv3(), CpuFeature::kVfpv3);
  set(cpuinfo_has_arm_neon(), CpuFeature::kNeon);
  set(cpuinfo_has_arm_neon_fp16(), CpuFeature::kNeonFp16);
  set(cpuinfo_has_arm_neon_fma(), CpuFeature::kNeonFma);
  set(cpuinfo_has_arm_neon_v8(), CpuFeature::kNeonV8);
  set(cpuinfo_has_arm_neon_fp16_arith(), CpuFeature::kFp16Arith);
  set(cpuinfo_has_arm_neon_dot(), CpuFeature::kDotProd);
#endif
  (void)set;
  if (cpuinfo_get_cores_count() > 0) {
    switch (cpuinfo_get_core(0)->vendor) {
      case cpuinfo_vendor_intel: f.vendor = CpuVendor::kIntel; break;
      case cpuinfo_vendor_amd: f.vendor = CpuVendor::kAmd; break;
      default: break;
    }
  }
  if (cpuinfo_get_l2_caches_count() > 0) f.l2_bytes = cpuinfo_get_l2_cache(0)->size;
  f.llc_bytes = cpuinfo_get_max_cache_size();
  return f;
}

}  // namespace

const char* CpuFeatureName(CpuFeature f) {
  static const char* const kNames[] = {
      "sse2",     "sse4.1",   "avx",       "fma3",     "f16c",     "avx2",
      "avx512f",  "avx512bw", "avx512dq",  "avx512vl", "avx512vnni", "avx512bf16",
      "avxvnni",  "amx-bf16", "neon",      "vfpv3",    "neon-fp16", "neon-fma",
      "neon-v8",  "fp16arith", "dotprod",  "i8mm",     "bf16",     "sve",
      "sve2"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(CpuFeature::kCount),
                "a name for every feature");
  return kNames[static_cast<size_t>(f)];
}

CpuFeatures CpuFeatures::Of(std::initializer_list<CpuFeature> fs, CpuVendor vendor) {
  CpuFeatures f;
  for (CpuFeature x : fs) f.Set(x);
  f.vendor = vendor;
  return f;
}

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures* const features = new CpuFeatures(Probe());  // never destroyed
  return *features;
}

}  // namespace fflite
