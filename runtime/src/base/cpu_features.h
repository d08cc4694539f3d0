// The one probe of the CPU: cpuinfo, CPUID and Linux's HWCAP read once into feature bits, the
// vendor and the L2 size, which every kernel family (kernels/registry.h), every policy and the
// platform report select on. Nothing else in fflite asks the CPU.
#ifndef FFLITE_RUNTIME_SRC_BASE_CPU_FEATURES_H_
#define FFLITE_RUNTIME_SRC_BASE_CPU_FEATURES_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace fflite {

enum class CpuFeature : uint8_t {
  // x86 (OS support of the vector state included: cpuinfo's AVX answers check XCR0).
  kSse2, kSse41, kAvx, kFma3, kF16c, kAvx2,
  kAvx512f, kAvx512bw, kAvx512dq, kAvx512vl, kAvx512vnni, kAvx512bf16,
  kAvxVnni,   // 256-bit VEX vpdpbusd (CPUID.(7,1):EAX bit 4), which Debian 12's cpuinfo cannot tell
  kAmxBf16,   // AMX-TILE and AMX-BF16, tile state enabled by the OS in XCR0
  // ARM.
  kNeon,         // aarch64: always (ARMv8-A baseline); armv7: reported by the OS
  kVfpv3, kNeonFp16, kNeonFma, kNeonV8,  // armv7
  kFp16Arith, kDotProd, kI8mm, kArmBf16, kSve, kSve2,
  kCount
};

// The feature's name in reports ("avx2", "dotprod", ...).
const char* CpuFeatureName(CpuFeature f);

enum class CpuVendor : uint8_t { kOther, kIntel, kAmd };

struct CpuFeatures {
  uint64_t bits = 0;
  CpuVendor vendor = CpuVendor::kOther;
  uint32_t l2_bytes = 0;  // L2 of core 0; 0 where not reported (some VMs hide the cache leaves)
  uint32_t llc_bytes = 0; // the largest cache; 0 where not reported
  bool probed = false;    // cpuinfo initialised (else only baseline facts: aarch64's NEON)

  bool Has(CpuFeature f) const { return (bits >> static_cast<unsigned>(f) & 1) != 0; }
  bool HasAll(std::initializer_list<CpuFeature> fs) const {
    for (CpuFeature f : fs) {
      if (!Has(f)) return false;
    }
    return true;
  }
  void Set(CpuFeature f) { bits |= uint64_t{1} << static_cast<unsigned>(f); }
  // A feature set for tests: these features, nothing probed.
  static CpuFeatures Of(std::initializer_list<CpuFeature> fs, CpuVendor vendor = CpuVendor::kOther);
};

// This CPU's, probed on the first call (thread-safe) and then cached.
const CpuFeatures& GetCpuFeatures();

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BASE_CPU_FEATURES_H_
