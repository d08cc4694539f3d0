// The platform facts are plausible on every target (x86-64 natively, aarch64 and armv7 under
// qemu), and the C API reports the same facts as the C++ side, without writing past struct_size.
// Also how large zeroed buffers (a session's scratch) become resident.
#include <cpuinfo.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "base/aligned_buffer.h"
#include "base/platform.h"
#include "fflite/fflite.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"
#include "testing/checkpoint_writer.h"

namespace fflite {
namespace {

using ::testing::Contains;
using ::testing::Not;

#if defined(__linux__)
// Pages of [p, p + bytes) resident now (mincore).
size_t ResidentPages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  EXPECT_EQ(mincore(const_cast<void*>(p), bytes, v.data()), 0) << std::strerror(errno);
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}
#endif

// A large zeroed buffer (a session's scratch) is resident only where written: none of it after
// Allocate (a memset would have made all of it resident), about what was written after a write
// (THP may round that up to 2 MiB); it reads zero everywhere, and a move keeps it.
TEST(AlignedBufferTest, LargeZeroedBuffersAreResidentOnlyWhereTouched) {
#if defined(__linux__)
  constexpr size_t kBytes = size_t{16} << 20;
  AlignedBuffer<float> b;
  ASSERT_TRUE(b.Allocate(kBytes / sizeof(float)));
  ASSERT_EQ(reinterpret_cast<uintptr_t>(b.data()) % AlignedBuffer<float>::kAlignment, 0u);
  EXPECT_EQ(ResidentPages(b.data(), kBytes), 0u);
  for (size_t i = 0; i < (size_t{64} << 10) / sizeof(float); ++i) b.data()[i] = 1.0f;
  const size_t touched = ResidentPages(b.data(), kBytes);
  EXPECT_GE(touched, 1u);
  EXPECT_LE(touched, (size_t{2} << 20) / static_cast<size_t>(sysconf(_SC_PAGESIZE)) + 16);
  AlignedBuffer<float> moved(std::move(b));
  EXPECT_EQ(b.data(), nullptr);
  for (size_t i = (size_t{64} << 10) / sizeof(float); i < kBytes / sizeof(float); i += 997) {
    ASSERT_EQ(moved.data()[i], 0.0f) << i;
  }
  // A small one (the heap, memset) is zero too, and one not zeroed still allocates.
  AlignedBuffer<float> small;
  ASSERT_TRUE(small.Allocate(1000, 64));
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(small.data()[i], 0.0f) << i;
  AlignedBuffer<float> raw;
  ASSERT_TRUE(raw.Allocate(kBytes / sizeof(float), 0, /*zero=*/false));
  raw.data()[kBytes / sizeof(float) - 1] = 2.0f;
#else
  GTEST_SKIP() << "resident pages are read with Linux's mincore";
#endif
}

TEST(PlatformTest, ReportsWhatTheLibraryWasBuiltFor) {
  const PlatformInfo& p = GetPlatformInfo();
  // ctest keeps this line in its log: which CPU the suite ran on (under qemu: which model).
  std::printf("fflite platform: %s\n", PlatformSummary().c_str());
#if defined(__x86_64__)
  EXPECT_EQ(p.isa, "x86_64");
#elif defined(__aarch64__)
  EXPECT_EQ(p.isa, "aarch64");
#elif defined(__arm__) && __ARM_ARCH == 7
  EXPECT_EQ(p.isa, "armv7");
#endif
  EXPECT_GE(p.num_cores, 1);
  EXPECT_GE(p.num_logical_cpus, p.num_cores);
}

TEST(PlatformTest, BaselineFeaturesArePresent) {
  const PlatformInfo& p = GetPlatformInfo();
  ASSERT_TRUE(p.probed) << "cpuinfo could not probe this CPU: " << PlatformSummary();
#if defined(__x86_64__)
  EXPECT_THAT(p.features, Contains("sse2"));  // part of the x86-64 baseline
#elif defined(__aarch64__)
  EXPECT_THAT(p.features, Contains("neon"));  // part of the ARMv8-A baseline
#elif defined(__arm__)
  EXPECT_THAT(p.features, Contains("vfpv3"));  // Debian's armhf ABI requires VFPv3
#endif
  for (const std::string& f : p.features) EXPECT_TRUE(HasCpuFeature(f)) << f;
  EXPECT_FALSE(HasCpuFeature("no-such-feature"));
}

// Under qemu-user the CI runs the suite with two CPU models, so that both sides of every
// feature test in the kernels run; this checks that the library sees the model it was given.
TEST(PlatformTest, MatchesTheEmulatedCpuModel) {
#if !defined(__aarch64__) && !defined(__arm__)
  GTEST_SKIP() << "the ARM builds are the ones run under qemu-user";
#else
  const char* qemu_cpu = std::getenv("QEMU_CPU");
  if (qemu_cpu == nullptr || std::getenv("FFLITE_UNDER_QEMU") == nullptr) {
    GTEST_SKIP() << "not under qemu-user (QEMU_CPU and FFLITE_UNDER_QEMU unset)";
  }
  const PlatformInfo& p = GetPlatformInfo();
  const std::string cpu = qemu_cpu;
#if defined(__aarch64__)
  if (cpu == "cortex-a53") {  // ARMv8.0: no half-precision arithmetic, no dot product
    EXPECT_THAT(p.features, Not(Contains("fp16arith")));
    EXPECT_THAT(p.features, Not(Contains("dotprod")));
  } else if (cpu == "max") {  // every feature qemu emulates
    EXPECT_THAT(p.features, Contains("fp16arith"));
    EXPECT_THAT(p.features, Contains("dotprod"));
  }
#elif defined(__arm__)
  if (cpu == "cortex-a7" || cpu == "cortex-a15") {  // ARMv7 NEON + VFPv4 (fused multiply-add)
    EXPECT_THAT(p.features, Contains("neon"));
    EXPECT_THAT(p.features, Contains("neon-fma"));
  } else if (cpu == "cortex-a8" || cpu == "cortex-a9") {  // ARMv7 NEON + VFPv3: no FMA
    EXPECT_THAT(p.features, Contains("neon"));
    EXPECT_THAT(p.features, Not(Contains("neon-fma")));
  }
#endif
  std::printf("QEMU_CPU=%s: %s\n", qemu_cpu, PlatformSummary().c_str());
#endif
}

// A made-up sysfs tree of CPUs (the online list, and each CPU's sibling list where the test
// writes one), in a fresh directory removed afterwards.
class FakeSysfs {
 public:
  FakeSysfs() : root_(testing::MakeTempDir()) {}
  ~FakeSysfs() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  const std::string& root() const { return root_; }
  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = std::filesystem::path(root_) / relative;
    std::filesystem::create_directories(path.parent_path());
    EXPECT_TRUE(testing::WriteTextFile(path.string(), text + "\n").ok()) << path;
  }
  // cpu N's core_cpus_list (or, with old_kernel, thread_siblings_list only).
  void Cpu(int n, const std::string& siblings, bool old_kernel = false) {
    Write("cpu" + std::to_string(n) + "/topology/" +
              (old_kernel ? "thread_siblings_list" : "core_cpus_list"),
          siblings);
  }

 private:
  std::string root_;
};

// The core count comes from the kernel's topology: each physical core once, whatever the
// numbering of its threads, offline CPUs left out, and 0 (so that cpuinfo's count stands)
// wherever the tree is incomplete or malformed.
TEST(PlatformTest, CountsCoresFromSysfsTopology) {
  {
    FakeSysfs fs;  // 2 cores of 2 threads, siblings numbered apart (0,2 and 1,3) as on x86
    fs.Write("online", "0-3");
    fs.Cpu(0, "0,2");
    fs.Cpu(1, "1,3");
    fs.Cpu(2, "0,2");
    fs.Cpu(3, "1,3");
    EXPECT_EQ(CountCoresInSysfs(fs.root()), 2);
  }
  {
    FakeSysfs fs;  // 2 cores of one thread each (the AMD VM of the comment in platform.cc)
    fs.Write("online", "0-1");
    fs.Cpu(0, "0");
    fs.Cpu(1, "1");
    EXPECT_EQ(CountCoresInSysfs(fs.root()), 2);
  }
  {
    FakeSysfs fs;  // 8 CPUs, 6 online (cpu4 and cpu5 offline: no topology), threads in pairs
    fs.Write("online", "0-3,6-7");
    for (int c : {0, 1, 2, 3, 6, 7}) fs.Cpu(c, std::to_string(c / 2 * 2) + "-" +
                                                   std::to_string(c / 2 * 2 + 1));
    EXPECT_EQ(CountCoresInSysfs(fs.root()), 3);
  }
  {
    FakeSysfs fs;  // a kernel before core_cpus_list: thread_siblings_list
    fs.Write("online", "0-2");
    for (int c = 0; c < 3; ++c) fs.Cpu(c, std::to_string(c), /*old_kernel=*/true);
    EXPECT_EQ(CountCoresInSysfs(fs.root()), 3);
  }
  {
    FakeSysfs fs;  // a CPU without topology
    fs.Write("online", "0-1");
    fs.Cpu(0, "0");
    EXPECT_EQ(CountCoresInSysfs(fs.root()), 0);
  }
  for (const char* online : {"", "0-", "3-1", "a", "0,,1", "0-99999", "1 2"}) {
    FakeSysfs fs;
    fs.Write("online", online);
    for (int c = 0; c < 4; ++c) fs.Cpu(c, std::to_string(c));
    EXPECT_EQ(CountCoresInSysfs(fs.root()), 0) << "online: \"" << online << "\"";
  }
  {
    FakeSysfs fs;  // a malformed sibling list
    fs.Write("online", "0");
    fs.Cpu(0, "zero");
    EXPECT_EQ(CountCoresInSysfs(fs.root()), 0);
  }
  EXPECT_EQ(CountCoresInSysfs("/nonexistent/fflite"), 0);
#if defined(__linux__)
  // And the platform reports it where this machine's sysfs gives one.
  const int here = CountCoresInSysfs("/sys/devices/system/cpu");
  if (here > 0) {
    EXPECT_EQ(GetPlatformInfo().num_cores, here);
  }
#endif
}

// The fast cores (a session's default thread count) from each core's capacity. The trees are
// built here in the shape the kernel gives them on these SoCs (arm64 always has cpu_capacity:
// 1024 for the fastest core type, the others scaled by their DT capacity-dmips-mhz and top
// frequency); the values are illustrative, not copied from a device.
TEST(PlatformTest, CountsFastCoresFromCapacities) {
  auto core = [](FakeSysfs& fs, int cpu, const char* capacity, const char* max_freq) {
    fs.Cpu(cpu, std::to_string(cpu));
    if (capacity != nullptr) fs.Write("cpu" + std::to_string(cpu) + "/cpu_capacity", capacity);
    if (max_freq != nullptr) {
      fs.Write("cpu" + std::to_string(cpu) + "/cpufreq/cpuinfo_max_freq", max_freq);
    }
  };
  {
    FakeSysfs fs;  // Raspberry Pi 5 (BCM2712): four Cortex-A76 alike
    fs.Write("online", "0-3");
    for (int c = 0; c < 4; ++c) core(fs, c, "1024", "2400000");
    EXPECT_EQ(CountFastCoresInSysfs(fs.root()), 4);
  }
  {
    FakeSysfs fs;  // a phone SoC of 3 tiers: 3 Cortex-A510, 4 Cortex-A715, 1 Cortex-X3
    fs.Write("online", "0-7");
    for (int c = 0; c < 3; ++c) core(fs, c, "325", "2016000");
    for (int c = 3; c < 7; ++c) core(fs, c, "870", "2803000");
    core(fs, 7, "1024", "3187000");
    EXPECT_EQ(CountFastCoresInSysfs(fs.root()), 5);  // the big and the prime ones
  }
  {
    FakeSysfs fs;  // an older big.LITTLE phone (4 Cortex-A53 + 4 Cortex-A73), little cores first
    fs.Write("online", "0-7");
    for (int c = 0; c < 4; ++c) core(fs, c, "446", "1844000");
    for (int c = 4; c < 8; ++c) core(fs, c, "1024", "2362000");
    EXPECT_EQ(CountFastCoresInSysfs(fs.root()), 4);
  }
  {
    FakeSysfs fs;  // no cpu_capacity (x86): top frequencies; SMT siblings count once
    fs.Write("online", "0-3");
    fs.Cpu(0, "0-1");
    fs.Cpu(1, "0-1");
    fs.Cpu(2, "2-3");
    fs.Cpu(3, "2-3");
    for (int c = 0; c < 4; ++c) {
      fs.Write("cpu" + std::to_string(c) + "/cpufreq/cpuinfo_max_freq", "3700000");
    }
    EXPECT_EQ(CountFastCoresInSysfs(fs.root()), 2);
  }
  {
    FakeSysfs fs;  // nothing to tell the cores apart by: unknown (the core count stands)
    fs.Write("online", "0-1");
    core(fs, 0, nullptr, nullptr);
    core(fs, 1, nullptr, nullptr);
    EXPECT_EQ(CountFastCoresInSysfs(fs.root()), 0);
  }
  {
    FakeSysfs fs;  // a malformed capacity
    fs.Write("online", "0-1");
    core(fs, 0, "1024", nullptr);
    core(fs, 1, "big", nullptr);
    EXPECT_EQ(CountFastCoresInSysfs(fs.root()), 0);
  }
  EXPECT_EQ(CountFastCoresInSysfs("/nonexistent/fflite"), 0);
  const PlatformInfo& p = GetPlatformInfo();
  EXPECT_GE(p.num_fast_cores, 1);
  EXPECT_LE(p.num_fast_cores, p.num_cores);
}

TEST(PlatformTest, CApiReportsTheSameFacts) {
  fflite_platform_info info;
  std::memset(&info, 0x5a, sizeof(info));
  info.struct_size = sizeof(info);
  ASSERT_EQ(fflite_platform_info_get(&info), FFLITE_STATUS_OK) << fflite_last_error_message();
  const PlatformInfo& p = GetPlatformInfo();
  EXPECT_EQ(info.struct_size, sizeof(info));
  EXPECT_EQ(std::string(info.isa), p.isa);
  ASSERT_NE(std::memchr(info.features, '\0', sizeof(info.features)), nullptr);
  std::string joined;
  for (const std::string& f : p.features) joined += (joined.empty() ? "" : " ") + f;
  EXPECT_EQ(std::string(info.features), joined);
  EXPECT_EQ(std::string(info.cpu_name), p.cpu_name.substr(0, sizeof(info.cpu_name) - 1));
  EXPECT_EQ(std::string(info.uarch), p.uarch.substr(0, sizeof(info.uarch) - 1));
  EXPECT_EQ(info.num_cores, p.num_cores);
  EXPECT_EQ(info.num_logical_cpus, p.num_logical_cpus);
  EXPECT_EQ(info.num_fast_cores, p.num_fast_cores);
  EXPECT_EQ(std::string(info.kernels), BestKernels().isa);
  EXPECT_EQ(std::string(info.quant_gemv_kernels), BestQGemvKernel().isa);
  EXPECT_EQ(std::string(info.quant_gemm_kernels), BestQGemmKernel().isa);
  const PackedKernelNames gemm = CpuPackedKernelNames(CpuBackendOptions());
  EXPECT_EQ(std::string(info.gemm_kernels), gemm.f32);
  EXPECT_EQ(std::string(info.bf16_gemm_kernels), gemm.bf16);
  EXPECT_EQ(std::string(info.f16_gemm_kernels), gemm.f16);
#if defined(__x86_64__)
  // x86 with AVX2 + FMA runs fflite's GEMM; bf16 arithmetic only where AVX-512 BF16 is. The AVX2
  // kernel reads f16/bf16 weights from 16-bit panels; the AVX-512 one from f32 panels.
  if (cpuinfo_initialize() && cpuinfo_has_x86_avx2() && cpuinfo_has_x86_fma3()) {
    EXPECT_NE(gemm.f32, "xnnpack");
  }
  if (gemm.f32 == "avx2") {
    EXPECT_EQ(gemm.f16, "avx2-f16w");
    if (!(cpuinfo_initialize() && cpuinfo_has_x86_avx512bf16())) {
      EXPECT_EQ(gemm.bf16, "avx2-bf16w");
    }
  } else if (!(cpuinfo_initialize() && cpuinfo_has_x86_avx512bf16())) {
    EXPECT_EQ(gemm.bf16, gemm.f32);
  }
#else
  EXPECT_EQ(gemm.f16, gemm.f32);  // no 16-bit panels off x86 yet
#endif
}

TEST(PlatformTest, CApiWritesOnlyStructSizeBytes) {
  // A caller built against an older, smaller struct: only its bytes are written.
  const size_t old_size = offsetof(fflite_platform_info, features);
  fflite_platform_info info;
  std::memset(&info, 0x5a, sizeof(info));
  info.struct_size = old_size;
  ASSERT_EQ(fflite_platform_info_get(&info), FFLITE_STATUS_OK) << fflite_last_error_message();
  EXPECT_EQ(info.struct_size, old_size);
  EXPECT_EQ(std::string(info.isa), GetPlatformInfo().isa);
  const auto* bytes = reinterpret_cast<const unsigned char*>(&info);
  for (size_t i = old_size; i < sizeof(info); ++i) ASSERT_EQ(bytes[i], 0x5a) << "byte " << i;
}

TEST(PlatformTest, CApiRejectsBadArguments) {
  EXPECT_EQ(fflite_platform_info_get(nullptr), FFLITE_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(fflite_last_error_message(), ::testing::HasSubstr("out_info is null"));
  fflite_platform_info info;
  std::memset(&info, 0, sizeof(info));
  EXPECT_EQ(fflite_platform_info_get(&info), FFLITE_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(fflite_last_error_message(), ::testing::HasSubstr("struct_size is too small"));
}

}  // namespace
}  // namespace fflite
