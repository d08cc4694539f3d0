// What fflite detects about the CPU it runs on (ISA, SIMD features, cores), so that users on a
// device and the tools can tell which code paths run. Detected once, with cpuinfo (and Linux's
// sysfs for the count of cores).
#ifndef FFLITE_BASE_PLATFORM_H_
#define FFLITE_BASE_PLATFORM_H_

#include <string>
#include <vector>

namespace fflite {

struct PlatformInfo {
  // What this library was compiled for: "x86_64", "x86", "aarch64", "armv7", or "unknown".
  std::string isa;
  // SIMD features found at run time that kernels (fflite's own and XNNPACK's) select on, in a
  // fixed order: x86 "sse2 sse4.1 avx fma3 f16c avx2 avx512f avx512bw avx512dq avx512vl
  // avx512vnni avx512bf16"; aarch64 "neon fp16arith dotprod bf16 sve sve2"; armv7 "vfpv3 neon
  // neon-fp16 neon-fma neon-v8 fp16arith dotprod". Empty when the CPU could not be probed.
  std::vector<std::string> features;
  std::string cpu_name;  // the processor's name as the OS reports it, or ""
  std::string uarch;     // distinct core types, e.g. "cortex-a76 cortex-a55", or ""
  int num_cores = 0;         // physical cores (>= 1; on Linux from sysfs: CountCoresInSysfs)
  int num_logical_cpus = 0;  // hardware threads the OS schedules on (>= num_cores)
  // Cores within half the capacity of the fastest (CountFastCoresInSysfs), else num_cores.
  int num_fast_cores = 0;
  bool probed = false;       // cpuinfo initialised; otherwise only isa and the counts are known
};

// The facts of this machine, detected on the first call (thread-safe) and then cached.
const PlatformInfo& GetPlatformInfo();

// Whether GetPlatformInfo().features holds `feature` (a name as listed above).
bool HasCpuFeature(const std::string& feature);

// Physical cores among the online CPUs as Linux's sysfs describes them under `root` (normally
// /sys/devices/system/cpu): the distinct sibling lists (cpuN/topology/core_cpus_list, or
// thread_siblings_list on kernels before 5.7) of the CPUs named in `root`/online. 0 where any of
// it is missing or malformed. GetPlatformInfo's num_cores on Linux where this is not 0.
int CountCoresInSysfs(const std::string& root);
// Of those cores, how many have at least half the capacity of the fastest, from each online
// CPU's cpu_capacity (Linux on ARM: 1024 for the fastest) or else cpufreq/cpuinfo_max_freq (a
// core's capacity: its first CPU's): on big.LITTLE the prime and big cores. 0 when neither file
// is there for every core, or the topology cannot be read.
int CountFastCoresInSysfs(const std::string& root);

// One line for logs and tools, e.g.
// "aarch64, Cortex-A72 (cortex-a72), 4 cores / 4 threads, features: neon".
std::string PlatformSummary();

}  // namespace fflite

#endif  // FFLITE_BASE_PLATFORM_H_
