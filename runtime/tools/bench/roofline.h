// The machine's own roofline, measured in the benchmark's run: read bandwidth from memory (a
// buffer larger than the caches) and the FMA and int8 dot-product peaks of the ISA in use, with
// one thread or several at once (for the scaling of a multi-thread run).
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_ROOFLINE_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_ROOFLINE_H_

#include <cstddef>
#include <string>

namespace fflite {
namespace bench {

// Median GB/s (1e9 bytes/s) of `passes` vectorised sums over a `bytes` buffer, shared among
// `threads` threads started together. Returns 0 if the buffer cannot be allocated.
double MeasureReadBandwidth(size_t bytes, int passes, int threads = 1);

struct FmaPeak {
  double gflops = 0.0;  // best of a few runs, f32, all threads together
  std::string isa;      // "avx512f", "avx2+fma", "neon", "scalar"
};
// A register-blocked loop of independent FMA chains (enough to cover latency x throughput).
FmaPeak MeasureFmaPeak(int threads = 1);

// The int8 dot-product peak of the instruction the quantised int8 kernels use on this CPU.
struct DotPeak {
  double gops = 0.0;  // best of a few runs, all threads together; a multiply and an add per pair
  std::string isa;    // "avx512vnni", "avxvnni", "avx2", "neondot", "neon", "scalar"
};
// `isa`: that instruction's loop ("avx2" on an AVX-512 VNNI machine, for the AVX2 kernels' own
// peak) where the CPU has it; empty or unknown: the best.
DotPeak MeasureInt8DotPeak(int threads = 1, const std::string& isa = "");

// The f32 gemm microkernel this CPU runs (BestGemmKernel) on one tile and one panel of 128 units
// that stay in L1, one thread: the most a prefill's products can reach here. Its ratio to the FMA
// peak measured beside it shows what the loads cost: on a VM whose host was busy at times, 78-80%
// in some spells and 93-97% in others, where the FMA loop (registers only) held.
struct GemmL1Rate {
  double gflops = 0.0;  // best of a few runs
  std::string isa;      // the kernel's name ("avx512", "avx2", "neon", "scalar")
};
GemmL1Rate MeasureGemmL1Rate();

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_ROOFLINE_H_
