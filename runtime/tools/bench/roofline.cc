// Read-bandwidth and FMA-peak measurements for fflite-bench's roofline column.
#include "bench/roofline.h"

#include "base/cpu_features.h"


#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/gemm.h"
#include "kernels/quant_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace fflite {
namespace bench {

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs fn(i) for i < threads on `threads` threads released together (the caller's is thread 0);
// returns the wall time from the release to the end of the last one.
template <typename Fn>
double RunTogether(int threads, Fn fn) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> others;
  for (int i = 1; i < threads; ++i) {
    others.emplace_back([&, i] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      fn(i);
    });
  }
  while (ready.load() < threads - 1) {
  }
  const double t = Now();
  go.store(true, std::memory_order_release);
  fn(0);
  for (std::thread& th : others) th.join();
  return Now() - t;
}

// How long a probe runs at most (see kChunk below).
constexpr double kProbeSeconds = 0.5;

// Best of 3 of `loop` on `threads` threads at once: the sum of their rates. A run that reached
// the probes' time limit (kProbeSeconds; natively a run ends first, in 0.1-0.3 s) is not
// repeated: it ran long enough for its rate, and under qemu each repetition cost half a second
// per probe, about 3 s of each bench smoke test.
double BestTogether(int threads, double (*loop)()) {
  double best = 0.0;
  for (int r = 0; r < 3; ++r) {
    std::vector<double> rate(static_cast<size_t>(threads));
    const double seconds =
        RunTogether(threads, [&](int i) { rate[static_cast<size_t>(i)] = loop(); });
    double sum = 0.0;
    for (double x : rate) sum += x;
    best = std::max(best, sum);
    if (seconds >= kProbeSeconds) break;
  }
  return best;
}

// The read loop: 8 independent accumulators of the target's widest vectors (through the
// compiler's vector extension), compiled once per instruction set (AVX-512, AVX2, the baseline:
// SSE2 or NEON) and chosen for the CPU, so that it is bound by memory, not by the add latency.
// (One 64-byte vector type for every target kept the accumulators on the stack where the target
// has narrower vectors: on a Zen 4 VM without AVX-512 it measured 15.5 GB/s where the one-token
// gemv read 21.)
typedef float Vec16 __attribute__((vector_size(64), aligned(64)));  // the buffer's unit
typedef float Vec8 __attribute__((vector_size(32), aligned(32)));
typedef float Vec4 __attribute__((vector_size(16), aligned(16)));

// Sums n 64-byte units as vectors of type V.
template <typename V>
inline __attribute__((always_inline)) float SumBufferAs(const Vec16* p, size_t n) {
  const V* v = reinterpret_cast<const V*>(p);
  const size_t count = n * (sizeof(Vec16) / sizeof(V));
  V a0 = {}, a1 = {}, a2 = {}, a3 = {}, a4 = {}, a5 = {}, a6 = {}, a7 = {};
  for (size_t i = 0; i + 8 <= count; i += 8) {
    a0 += v[i];
    a1 += v[i + 1];
    a2 += v[i + 2];
    a3 += v[i + 3];
    a4 += v[i + 4];
    a5 += v[i + 5];
    a6 += v[i + 6];
    a7 += v[i + 7];
  }
  const V s = (a0 + a1) + (a2 + a3) + (a4 + a5) + (a6 + a7);
  float total = 0.0f;
  for (size_t i = 0; i < sizeof(V) / sizeof(float); ++i) total += s[i];
  return total;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f"))) float SumBufferAvx512(const Vec16* v, size_t n) {
  return SumBufferAs<Vec16>(v, n);
}
__attribute__((target("avx2"))) float SumBufferAvx2(const Vec16* v, size_t n) {
  return SumBufferAs<Vec8>(v, n);
}
#endif
float SumBufferBaseline(const Vec16* v, size_t n) { return SumBufferAs<Vec4>(v, n); }

// The sum for this CPU.
float (*SumBufferForCpu())(const Vec16*, size_t) {
#if defined(__x86_64__) || defined(__i386__)
  const CpuFeatures& cpu = GetCpuFeatures();
  if (cpu.Has(CpuFeature::kAvx512f)) return SumBufferAvx512;
  if (cpu.Has(CpuFeature::kAvx2)) return SumBufferAvx2;
#endif
  return SumBufferBaseline;
}

constexpr long kFmaIterations = 50000000;  // x 12 chains: ~0.1-0.3 s per run
// A probe runs its iterations in chunks and stops early once it has run kProbeSeconds: natively
// the iterations end first (0.1-0.3 s); under qemu a whole FMA probe took 10 s or more, and the
// bench's smoke tests measured the roofline for minutes. Chunks of 2^16 iterations: under qemu-arm
// one chunk of 2^20 took about 2.5 s, so the half-second limit did not hold, and measuring the
// roofline again after the runs doubled the smoke tests' time there (19 -> 36 s each).
constexpr long kChunk = long{1} << 16;
inline bool More(long done, long total, double t0) {
  return done < total && Now() - t0 < kProbeSeconds;
}
constexpr int kChains = 12;                // >= FMA latency (4) x FMA pipes (2), with margin

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f"))) double FmaLoopAvx512() {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-6f);
  const double t = Now();
  long done = 0;
  do {
    for (long it = 0; it < kChunk; ++it) {
      for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
    }
    done += kChunk;
  } while (More(done, kFmaIterations, t));
  const double elapsed = Now() - t;
  __m512 s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, a[i]);
  // (Not _mm512_reduce_add_ps: g++ 12 warns inside its header with -Wall.)
  float out[16];
  _mm512_storeu_ps(out, s);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 16 * kChains * static_cast<double>(done) / elapsed / 1e9;
}

__attribute__((target("avx2,fma"))) double FmaLoopAvx2() {
  __m256 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-6f);
  const double t = Now();
  long done = 0;
  do {
    for (long it = 0; it < kChunk; ++it) {
      for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
    }
    done += kChunk;
  } while (More(done, kFmaIterations, t));
  const double elapsed = Now() - t;
  __m256 s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 8 * kChains * static_cast<double>(done) / elapsed / 1e9;
}
#endif

#if defined(__ARM_NEON)
double FmaLoopNeon() {
  float32x4_t a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = vdupq_n_f32(0.001f * static_cast<float>(i));
  const float32x4_t m = vdupq_n_f32(0.9999f), c = vdupq_n_f32(1e-6f);
  const double t = Now();
  long done = 0;
  do {
    for (long it = 0; it < kChunk; ++it) {
      for (int i = 0; i < kChains; ++i) {
#if defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
        a[i] = vfmaq_f32(c, a[i], m);
#else
        a[i] = vmlaq_f32(c, a[i], m);
#endif
      }
    }
    done += kChunk;
  } while (More(done, kFmaIterations, t));
  const double elapsed = Now() - t;
  float32x4_t s = a[0];
  for (int i = 1; i < kChains; ++i) s = vaddq_f32(s, a[i]);
  volatile float sink = vgetq_lane_f32(s, 0);
  (void)sink;
  return 2.0 * 4 * kChains * static_cast<double>(done) / elapsed / 1e9;
}
#endif

double FmaLoopScalar() {
  float a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = 0.001f * static_cast<float>(i);
  const double t = Now();
  long done = 0;
  do {
    for (long it = 0; it < kChunk; ++it) {
      for (int i = 0; i < kChains; ++i) a[i] = std::fma(a[i], 0.9999f, 1e-6f);
    }
    done += kChunk;
  } while (More(done, kFmaIterations / 8, t));
  const double elapsed = Now() - t;
  float s = 0.0f;
  for (float v : a) s += v;
  volatile float sink = s;
  (void)sink;
  return 2.0 * kChains * static_cast<double>(done) / elapsed / 1e9;
}

// Int8 dot products: the instruction the quantised prefill kernels use, in 12 independent chains
// (latency x pipes, with margin). GOP/s counts a multiply and an add per int8 pair. The chains are
// 12 named variables with distinct starts (in the VNNI and dot-product probes each held in a
// register by an empty asm): with an array, g++ 12 interchanged the loops and kept the
// accumulators in memory (620-750 GOP/s on Zen 5), and with equal starts it merged equal chains
// (an overestimate). Where the multiply does not take the accumulator as an input (AVX2's
// maddubs + madd, NEON's smull), g++ 12 computed the product once, outside the loop, and timed
// only the additions: see DotLoopAvx2 and DotLoopNeon.
constexpr long kDotIterations = 20000000;
#define FFLITE_DOT_CHAINS(step) \
  step(a0) step(a1) step(a2) step(a3) step(a4) step(a5) step(a6) step(a7) step(a8) step(a9) \
      step(a10) step(a11)
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double DotLoopAvx512Vnni() {
#define FFLITE_INIT(acc) __m512i acc = _mm512_set1_epi32(__LINE__ + __COUNTER__);
  FFLITE_DOT_CHAINS(FFLITE_INIT)
#undef FFLITE_INIT
  const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
  const double t = Now();
  long done = 0;
  do {
    for (long it = 0; it < kChunk; ++it) {
#define FFLITE_STEP(acc) acc = _mm512_dpbusd_epi32(acc, u, v);
      FFLITE_DOT_CHAINS(FFLITE_STEP)
#undef FFLITE_STEP
      __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
      __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    done += kChunk;
  } while (More(done, kDotIterations, t));
  const double elapsed = Now() - t;
  __m512i s = a0;
#define FFLITE_SUM(acc) s = _mm512_add_epi32(s, acc);
  FFLITE_DOT_CHAINS(FFLITE_SUM)
#undef FFLITE_SUM
  int32_t out[16];
  _mm512_storeu_si512(out, s);
  volatile int32_t sink = out[0];
  (void)sink;
  return 2.0 * 64 * 12 * static_cast<double>(done) / elapsed / 1e9;
}
__attribute__((target("avx2,avxvnni"))) double DotLoopAvxVnni() {
#define FFLITE_INIT(acc) __m256i acc = _mm256_set1_epi32(__LINE__ + __COUNTER__);
  FFLITE_DOT_CHAINS(FFLITE_INIT)
#undef FFLITE_INIT
  const __m256i u = _mm256_set1_epi8(3), v = _mm256_set1_epi8(-2);
  const double t = Now();
  long done = 0;
  do {
    for (long it = 0; it < kChunk; ++it) {
#define FFLITE_STEP(acc) acc = _mm256_dpbusd_avx_epi32(acc, u, v);
      FFLITE_DOT_CHAINS(FFLITE_STEP)
#undef FFLITE_STEP
      __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
      __asm__ volatile("" : "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
    }
    done += kChunk;
  } while (More(done, kDotIterations, t));
  const double elapsed = Now() - t;
  __m256i s = a0;
#define FFLITE_SUM(acc) s = _mm256_add_epi32(s, acc);
  FFLITE_DOT_CHAINS(FFLITE_SUM)
#undef FFLITE_SUM
  int32_t out[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), s);
  volatile int32_t sink = out[0];
  (void)sink;
  return 2.0 * 32 * 12 * static_cast<double>(done) / elapsed / 1e9;
}
// AVX2 without VNNI: maddubs (u8·s8 pairs to s16) + madd (s16 pairs to s32) + add, the
// three-instruction dot product the AVX2 kernels use. The loop is written in assembly: in C,
// g++ 12 computed maddubs(u, v) and its madd once, outside the loop (their inputs do not change),
// so the loop was only additions (194 GOP/s on a Zen 4 VM, its accumulators spilled), and with an
// empty asm making u opaque after each step it still kept most accumulators in memory (a load
// and a store per step). 12 accumulators, u (both operands) and `ones` in registers, one product
// register (renamed by the CPU, so the chains stay independent): 15 of the 16.
__attribute__((target("avx2"))) double DotLoopAvx2() {
#define FFLITE_INIT(acc) __m256i acc = _mm256_set1_epi32(__LINE__ + __COUNTER__);
  FFLITE_DOT_CHAINS(FFLITE_INIT)
#undef FFLITE_INIT
  const __m256i u = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  __m256i p;
  const double t = Now();
  long done = 0;
  do {
    long n = kChunk;
#define FFLITE_STEP(acc)                                                      \
  "vpmaddubsw %[u], %[u], %[p]\n\tvpmaddwd %[ones], %[p], %[p]\n\t" \
  "vpaddd %[p], %[" #acc "], %[" #acc "]\n\t"
#define FFLITE_OPERAND(acc) [acc] "+x"(acc),
    __asm__ volatile("1:\n\t" FFLITE_DOT_CHAINS(FFLITE_STEP) "dec %[n]\n\tjnz 1b"
                     : FFLITE_DOT_CHAINS(FFLITE_OPERAND)[p] "=&x"(p), [n] "+r"(n)
                     : [u] "x"(u), [ones] "x"(ones)
                     : "cc");
#undef FFLITE_OPERAND
#undef FFLITE_STEP
    done += kChunk;
  } while (More(done, kDotIterations, t));
  const double elapsed = Now() - t;
  __m256i s = a0;
#define FFLITE_SUM(acc) s = _mm256_add_epi32(s, acc);
  FFLITE_DOT_CHAINS(FFLITE_SUM)
#undef FFLITE_SUM
  int32_t out[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), s);
  volatile int32_t sink = out[0];
  (void)sink;
  return 2.0 * 32 * 12 * static_cast<double>(done) / elapsed / 1e9;
}
#endif
#if defined(__aarch64__)
// GCC 12 accepts the extension only with an architecture ("+dotprod" alone is refused).
__attribute__((target("arch=armv8.2-a+dotprod"))) double DotLoopNeonDot() {
#define FFLITE_INIT(acc) int32x4_t acc = vdupq_n_s32(__LINE__ + __COUNTER__);
  FFLITE_DOT_CHAINS(FFLITE_INIT)
#undef FFLITE_INIT
  const int8x16_t u = vdupq_n_s8(3), v = vdupq_n_s8(-2);
  const double t = Now();
  long done = 0;
  do {
    for (long it = 0; it < kChunk; ++it) {
#define FFLITE_STEP(acc) acc = vdotq_s32(acc, u, v);
      FFLITE_DOT_CHAINS(FFLITE_STEP)
#undef FFLITE_STEP
      __asm__ volatile("" : "+w"(a0), "+w"(a1), "+w"(a2), "+w"(a3), "+w"(a4), "+w"(a5));
      __asm__ volatile("" : "+w"(a6), "+w"(a7), "+w"(a8), "+w"(a9), "+w"(a10), "+w"(a11));
    }
    done += kChunk;
  } while (More(done, kDotIterations, t));
  const double elapsed = Now() - t;
  int32x4_t s = a0;
#define FFLITE_SUM(acc) s = vaddq_s32(s, acc);
  FFLITE_DOT_CHAINS(FFLITE_SUM)
#undef FFLITE_SUM
  volatile int32_t sink = vgetq_lane_s32(s, 0);
  (void)sink;
  return 2.0 * 16 * 12 * static_cast<double>(done) / elapsed / 1e9;
}
#endif
#if defined(__ARM_NEON)
// Plain NEON: widening multiply (s8 -> s16) and pairwise accumulate (s16 -> s32). An empty asm
// after each step makes u opaque, so that every step multiplies; with 32 registers the
// accumulators need no asm of their own (with one, g++ 12 copied each of them once an iteration:
// 12 moves per 24 operations, on aarch64).
double DotLoopNeon() {
#define FFLITE_INIT(acc) int32x4_t acc = vdupq_n_s32(__LINE__ + __COUNTER__);
  FFLITE_DOT_CHAINS(FFLITE_INIT)
#undef FFLITE_INIT
  int8x8_t u = vdup_n_s8(3);  // made opaque after each step
  const int8x8_t v = vdup_n_s8(-2);
  const double t = Now();
  long done = 0;
  do {
    for (long it = 0; it < kChunk; ++it) {
#define FFLITE_STEP(acc) \
  acc = vpadalq_s16(acc, vmull_s8(u, v));  \
  __asm__ volatile("" : "+w"(u));
      FFLITE_DOT_CHAINS(FFLITE_STEP)
#undef FFLITE_STEP
    }
    done += kChunk;
  } while (More(done, kDotIterations, t));
  const double elapsed = Now() - t;
  int32x4_t s = a0;
#define FFLITE_SUM(acc) s = vaddq_s32(s, acc);
  FFLITE_DOT_CHAINS(FFLITE_SUM)
#undef FFLITE_SUM
  volatile int32_t sink = vgetq_lane_s32(s, 0);
  (void)sink;
  return 2.0 * 8 * 12 * static_cast<double>(done) / elapsed / 1e9;
}
#endif
// Unsigned chains: the multiply-adds wrap (defined), as a signed int32 overflowed within the
// probe (UBSan: 774840981 * 3).
double DotLoopScalar() {
  uint32_t a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = static_cast<uint32_t>(i);
  volatile int8_t u = 3, v = -2;
  const uint32_t p = static_cast<uint32_t>(u * v);
  const double t = Now();
  long done = 0;
  do {
    for (long it = 0; it < kChunk; ++it) {
      for (int i = 0; i < kChains; ++i) a[i] = a[i] * 3u + p;
    }
    done += kChunk;
  } while (More(done, kDotIterations / 8, t));
  const double elapsed = Now() - t;
  uint32_t s = 0;
  for (uint32_t x : a) s += x;
  volatile uint32_t sink = s;
  (void)sink;
  return 2.0 * kChains * static_cast<double>(done) / elapsed / 1e9;
}

}  // namespace

DotPeak MeasureInt8DotPeak(int threads, const std::string& isa) {
  DotPeak peak;
  double (*loop)() = DotLoopScalar;
  peak.isa = "scalar";
  const CpuFeatures& cpu = GetCpuFeatures();
  // The loops this CPU runs, best first.
  std::vector<std::pair<const char*, double (*)()>> loops;
#if defined(__x86_64__) || defined(__i386__)
  if (cpu.HasAll({CpuFeature::kAvx512vnni, CpuFeature::kAvx512bw})) {
    loops.emplace_back("avx512vnni", DotLoopAvx512Vnni);
  }
  if (cpu.HasAll({CpuFeature::kAvxVnni, CpuFeature::kAvx2})) {
    loops.emplace_back("avxvnni", DotLoopAvxVnni);
  }
  if (cpu.Has(CpuFeature::kAvx2)) loops.emplace_back("avx2", DotLoopAvx2);
#endif
#if defined(__aarch64__)
  if (cpu.Has(CpuFeature::kDotProd)) loops.emplace_back("neondot", DotLoopNeonDot);
  loops.emplace_back("neon", DotLoopNeon);
#elif defined(__ARM_NEON)
  loops.emplace_back("neon", DotLoopNeon);
#endif
  loops.emplace_back("scalar", DotLoopScalar);
  for (auto it = loops.rbegin(); it != loops.rend(); ++it) {
    if (isa.empty() || isa == it->first) {
      peak.isa = it->first;
      loop = it->second;
    }
  }
  if (!isa.empty() && peak.isa != isa) {  // not a loop of this CPU's: the best
    peak.isa = loops.front().first;
    loop = loops.front().second;
  }
  (void)cpu;
  peak.gops = BestTogether(threads, loop);
  return peak;
}

double MeasureReadBandwidth(size_t bytes, int passes, int threads) {
  const size_t n = bytes / sizeof(Vec16) / 8 * 8;
  void* p = std::aligned_alloc(64, n * sizeof(Vec16));
  if (p == nullptr || n == 0) {
    std::free(p);
    return 0.0;
  }
  // Touch every page first (otherwise the first pass measures page faults).
  std::vector<float> ones(1024, 1.0f);
  for (size_t off = 0; off < n * sizeof(Vec16); off += ones.size() * sizeof(float)) {
    std::memcpy(static_cast<char*>(p) + off, ones.data(),
                std::min(ones.size() * sizeof(float), n * sizeof(Vec16) - off));
  }
  std::vector<double> rates;
  std::vector<float> sums(static_cast<size_t>(threads));
  float (*const sum)(const Vec16*, size_t) = SumBufferForCpu();
  // Thread i sums its share: a contiguous run of whole groups of 8 vectors.
  const size_t groups = n / 8, share = (groups + static_cast<size_t>(threads) - 1) / threads;
  for (int i = 0; i < passes; ++i) {
    const double t = RunTogether(threads, [&](int k) {
      const size_t first = std::min(groups, share * static_cast<size_t>(k));
      const size_t last = std::min(groups, first + share);
      sums[static_cast<size_t>(k)] =
          sum(static_cast<const Vec16*>(p) + 8 * first, 8 * (last - first));
    });
    rates.push_back(static_cast<double>(n * sizeof(Vec16)) / t / 1e9);
  }
  volatile float sink = 0.0f;
  for (float x : sums) sink = sink + x;
  std::free(p);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

namespace {

// GFLOP/s of BestGemmKernel(F32)'s microkernel over a 128-unit panel and one tile of tokens, both
// in L1 (the values are small normal floats; only their rate is read).
double GemmL1Loop() {
  const GemmKernel& kernel = BestGemmKernel(FloatType::kF32);
  constexpr size_t kUnits = 128;
  constexpr long kCalls = 200000;  // ~0.1-0.3 s natively
  AlignedBuffer<uint32_t> w, x;
  AlignedBuffer<float> y;
  if (!w.Allocate(kUnits * kernel.nr) || !x.Allocate(kUnits * kernel.mr) ||
      !y.Allocate(kernel.mr * kernel.nr)) {
    return 0.0;
  }
  for (size_t i = 0; i < w.size(); ++i) w.data()[i] = 0x3c000000u + (i & 0xff);  // ~2^-7
  for (size_t i = 0; i < x.size(); ++i) x.data()[i] = 0x3c000000u + (i * 7 & 0xff);
  if (kernel.enter != nullptr) kernel.enter();
  const double t = Now();
  long done = 0;
  do {
    for (long c = 0; c < kChunk / 64; ++c) {
      kernel.microkernel(kernel.mr, kernel.nr, kUnits, x.data(), w.data(), nullptr, false, false,
                         0.0f, y.data(), kernel.nr);
    }
    done += kChunk / 64;
  } while (More(done, kCalls, t));
  const double elapsed = Now() - t;
  if (kernel.leave != nullptr) kernel.leave();
  volatile float sink = y.data()[0];
  (void)sink;
  return 2.0 * static_cast<double>(kernel.mr * kernel.nr * kUnits * kernel.kr()) *
         static_cast<double>(done) / elapsed / 1e9;
}

}  // namespace

GemmL1Rate MeasureGemmL1Rate() {
  return {BestTogether(1, GemmL1Loop), BestGemmKernel(FloatType::kF32).isa};
}

FmaPeak MeasureFmaPeak(int threads) {
  FmaPeak peak;
  double (*loop)() = FmaLoopScalar;
  peak.isa = "scalar";
  const CpuFeatures& cpu = GetCpuFeatures();
#if defined(__x86_64__) || defined(__i386__)
  if (cpu.Has(CpuFeature::kAvx512f)) {
    loop = FmaLoopAvx512;
    peak.isa = "avx512f";
  } else if (cpu.HasAll({CpuFeature::kAvx2, CpuFeature::kFma3})) {
    loop = FmaLoopAvx2;
    peak.isa = "avx2+fma";
  }
#endif
#if defined(__ARM_NEON)
  loop = FmaLoopNeon;
  peak.isa = "neon";
#endif
  (void)cpu;
  peak.gflops = BestTogether(threads, loop);
  return peak;
}

}  // namespace bench
}  // namespace fflite
