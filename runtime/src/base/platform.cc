// Platform facts: the features from the one CPU probe (base/cpu_features.h: cpuinfo, the library
// XNNPACK itself selects its kernels with, and CPUID/HWCAP), so that what fflite reports is what
// its kernels see; the name and core types through cpuinfo; the count of cores from Linux's sysfs
// where it has one.
#include "base/platform.h"

#include "base/cpu_features.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <cpuinfo.h>

namespace fflite {
namespace {

const char* CompiledIsa() {
#if defined(__x86_64__) || defined(_M_X64)
  return "x86_64";
#elif defined(__i386__) || defined(_M_IX86)
  return "x86";
#elif defined(__aarch64__) || defined(_M_ARM64)
  return "aarch64";
#elif defined(__arm__)
#if defined(__ARM_ARCH) && __ARM_ARCH >= 8
  return "armv8";
#elif defined(__ARM_ARCH) && __ARM_ARCH == 7
  return "armv7";
#else
  return "arm";
#endif
#else
  return "unknown";
#endif
}

// cpuinfo has no public uarch names; these are the cores fflite's users run on.
const char* UarchName(cpuinfo_uarch uarch) {
  switch (uarch) {
    case cpuinfo_uarch_cortex_a7: return "cortex-a7";
    case cpuinfo_uarch_cortex_a8: return "cortex-a8";
    case cpuinfo_uarch_cortex_a9: return "cortex-a9";
    case cpuinfo_uarch_cortex_a15: return "cortex-a15";
    case cpuinfo_uarch_cortex_a17: return "cortex-a17";
    case cpuinfo_uarch_cortex_a35: return "cortex-a35";
    case cpuinfo_uarch_cortex_a53: return "cortex-a53";
    case cpuinfo_uarch_cortex_a55r0:
    case cpuinfo_uarch_cortex_a55: return "cortex-a55";
    case cpuinfo_uarch_cortex_a57: return "cortex-a57";
    case cpuinfo_uarch_cortex_a72: return "cortex-a72";
    case cpuinfo_uarch_cortex_a73: return "cortex-a73";
    case cpuinfo_uarch_cortex_a75: return "cortex-a75";
    case cpuinfo_uarch_cortex_a76: return "cortex-a76";
    case cpuinfo_uarch_cortex_a77: return "cortex-a77";
    case cpuinfo_uarch_cortex_a78: return "cortex-a78";
    case cpuinfo_uarch_cortex_x1: return "cortex-x1";
    case cpuinfo_uarch_neoverse_n1: return "neoverse-n1";
    case cpuinfo_uarch_neoverse_n2: return "neoverse-n2";
    case cpuinfo_uarch_neoverse_v1: return "neoverse-v1";
    case cpuinfo_uarch_haswell: return "haswell";
    case cpuinfo_uarch_broadwell: return "broadwell";
    case cpuinfo_uarch_sky_lake: return "skylake";
    case cpuinfo_uarch_zen: return "zen";
    case cpuinfo_uarch_zen2: return "zen2";
    case cpuinfo_uarch_zen3: return "zen3";
    default: return nullptr;
  }
}

// The probe's features in the report's fixed order per target (fflite_platform_info.features).
std::vector<std::string> Features(const CpuFeatures& probe) {
  using F = CpuFeature;
#if defined(__x86_64__) || defined(__i386__)
  const F order[] = {F::kSse2,     F::kSse41,    F::kAvx,      F::kFma3,
                     F::kF16c,     F::kAvx2,     F::kAvx512f,  F::kAvx512bw,
                     F::kAvx512dq, F::kAvx512vl, F::kAvx512vnni, F::kAvx512bf16};
#elif defined(__aarch64__)
  const F order[] = {F::kNeon, F::kFp16Arith, F::kDotProd, F::kArmBf16, F::kSve, F::kSve2};
#elif defined(__arm__)
  const F order[] = {F::kVfpv3,   F::kNeon,      F::kNeonFp16, F::kNeonFma,
                     F::kNeonV8,  F::kFp16Arith, F::kDotProd};
#else
  const F order[] = {F::kCount};
#endif
  std::vector<std::string> f;
  for (F feature : order) {
    if (feature != F::kCount && probe.Has(feature)) f.emplace_back(CpuFeatureName(feature));
  }
  return f;
}

// The contents of a small text file without its trailing newline, or "" where it cannot be read.
std::string ReadLine(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  char buf[256];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  std::string line(buf, n);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

// The CPUs of a Linux CPU list ("0-3,5,8-9"), or empty where it is malformed or names more than
// kMaxCpus CPUs.
constexpr int kMaxCpus = 4096;
std::vector<int> ParseCpuList(const std::string& list) {
  std::vector<int> cpus;
  size_t i = 0;
  auto number = [&](int* out) {
    const size_t start = i;
    long v = 0;
    while (i < list.size() && list[i] >= '0' && list[i] <= '9' && v < kMaxCpus) {
      v = v * 10 + (list[i++] - '0');
    }
    *out = static_cast<int>(v);
    return i > start && v < kMaxCpus;
  };
  while (i < list.size()) {
    int lo = 0, hi = 0;
    if (!number(&lo)) return {};
    hi = lo;
    if (i < list.size() && list[i] == '-') {
      ++i;
      if (!number(&hi) || hi < lo) return {};
    }
    if (cpus.size() + static_cast<size_t>(hi - lo + 1) > static_cast<size_t>(kMaxCpus)) return {};
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    if (i < list.size() && list[i++] != ',') return {};
  }
  return cpus;
}

PlatformInfo Detect() {
  PlatformInfo info;
  info.isa = CompiledIsa();
  const CpuFeatures& probe = GetCpuFeatures();
  info.probed = probe.probed;
  if (info.probed) {
    info.features = Features(probe);
    info.num_cores = static_cast<int>(cpuinfo_get_cores_count());
    info.num_logical_cpus = static_cast<int>(cpuinfo_get_processors_count());
    if (cpuinfo_get_packages_count() > 0) {
      const cpuinfo_package* package = cpuinfo_get_package(0);
      info.cpu_name.assign(package->name, strnlen(package->name, CPUINFO_PACKAGE_NAME_MAX));
      if (info.cpu_name == "Unknown") info.cpu_name.clear();  // cpuinfo's placeholder
    }
    // Distinct known core types, in cpuinfo's order (big cores first on big.LITTLE).
    std::vector<std::string> uarchs;
    for (uint32_t i = 0; i < cpuinfo_get_uarchs_count(); ++i) {
      const char* name = UarchName(cpuinfo_get_uarch(i)->uarch);
      if (name != nullptr && std::find(uarchs.begin(), uarchs.end(), name) == uarchs.end()) {
        uarchs.emplace_back(name);
      }
    }
    for (const std::string& u : uarchs) info.uarch += (info.uarch.empty() ? "" : " ") + u;
  }
#if defined(__linux__)
  // The kernel's count of cores, which its scheduler works with, where sysfs gives one: cpuinfo
  // counts x86 cores from CPUID, which a VM may fill in its own way (on an AMD Zen 5 VM cpuinfo
  // said 1 core / 2 threads, the kernel 2 cores of one thread each, and two threads ran the FMA
  // probe 1.97-2.01x as fast as one).
  if (const int cores = CountCoresInSysfs("/sys/devices/system/cpu"); cores > 0) {
    info.num_cores = cores;
  }
  info.num_fast_cores = CountFastCoresInSysfs("/sys/devices/system/cpu");
#endif
  // Fall back on the OS when cpuinfo cannot tell (it failed, or reports nothing).
  const int os_cpus = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (info.num_logical_cpus < 1) info.num_logical_cpus = os_cpus;
  if (info.num_cores < 1) info.num_cores = info.num_logical_cpus;
  info.num_logical_cpus = std::max(info.num_logical_cpus, info.num_cores);
  if (info.num_fast_cores < 1 || info.num_fast_cores > info.num_cores) {
    info.num_fast_cores = info.num_cores;
  }
  return info;
}

}  // namespace

int CountCoresInSysfs(const std::string& root) {
  const std::vector<int> online = ParseCpuList(ReadLine(root + "/online"));
  std::set<std::string> cores;
  for (int cpu : online) {
    const std::string topology = root + "/cpu" + std::to_string(cpu) + "/topology/";
    std::string siblings = ReadLine(topology + "core_cpus_list");
    if (siblings.empty()) siblings = ReadLine(topology + "thread_siblings_list");
    if (ParseCpuList(siblings).empty()) return 0;
    cores.insert(siblings);
  }
  return static_cast<int>(cores.size());
}

int CountFastCoresInSysfs(const std::string& root) {
  const std::vector<int> online = ParseCpuList(ReadLine(root + "/online"));
  std::map<std::string, double> capacity;  // core (its sibling list) -> its capacity
  for (int cpu : online) {
    const std::string dir = root + "/cpu" + std::to_string(cpu) + "/";
    std::string siblings = ReadLine(dir + "topology/core_cpus_list");
    if (siblings.empty()) siblings = ReadLine(dir + "topology/thread_siblings_list");
    if (ParseCpuList(siblings).empty()) return 0;
    std::string value = ReadLine(dir + "cpu_capacity");
    if (value.empty()) value = ReadLine(dir + "cpufreq/cpuinfo_max_freq");
    char* end = nullptr;
    const double c = std::strtod(value.c_str(), &end);
    if (value.empty() || end == value.c_str() || !(c > 0.0)) return 0;
    capacity.emplace(siblings, c);  // the core's first CPU decides
  }
  double top = 0.0;
  for (const auto& [core, c] : capacity) top = std::max(top, c);
  int fast = 0;
  for (const auto& [core, c] : capacity) fast += c >= 0.5 * top ? 1 : 0;
  return fast;
}

const PlatformInfo& GetPlatformInfo() {
  static const PlatformInfo* const info = new PlatformInfo(Detect());  // never destroyed
  return *info;
}

bool HasCpuFeature(const std::string& feature) {
  const std::vector<std::string>& f = GetPlatformInfo().features;
  return std::find(f.begin(), f.end(), feature) != f.end();
}

std::string PlatformSummary() {
  const PlatformInfo& p = GetPlatformInfo();
  std::string s = p.isa;
  if (!p.cpu_name.empty() || !p.uarch.empty()) {
    s += ", ";
    s += p.cpu_name.empty() ? p.uarch : p.cpu_name;
    if (!p.cpu_name.empty() && !p.uarch.empty()) s += " (" + p.uarch + ")";
  }
  s += ", " + std::to_string(p.num_cores) + (p.num_cores == 1 ? " core / " : " cores / ") +
       std::to_string(p.num_logical_cpus) + (p.num_logical_cpus == 1 ? " thread" : " threads");
  s += ", features:";
  if (!p.probed) s += " unknown (cpuinfo could not probe this CPU)";
  else if (p.features.empty()) s += " none";
  for (const std::string& f : p.features) s += " " + f;
  return s;
}

}  // namespace fflite
