// The machine's own roofline, measured in the benchmark's run: read bandwidth from memory (a
// buffer larger than the caches) and the single-thread FMA peak of the ISA in use.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_ROOFLINE_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_ROOFLINE_H_

#include <cstddef>
#include <string>

namespace fflite {
namespace bench {

// Median GB/s (1e9 bytes/s) of `passes` vectorised sums over a `bytes` buffer, one thread.
// Returns 0 if the buffer cannot be allocated.
double MeasureReadBandwidth(size_t bytes, int passes);

struct FmaPeak {
  double gflops = 0.0;  // best of a few runs, one thread, f32
  std::string isa;      // "avx512f", "avx2+fma", "neon", "scalar"
};
// A register-blocked loop of independent FMA chains (enough to cover latency x throughput).
FmaPeak MeasureFmaPeak();

// The int8 dot-product peak of the instruction the quantised int8 kernels use on this CPU.
struct DotPeak {
  double gops = 0.0;  // best of a few runs, one thread; a multiply and an add per int8 pair
  std::string isa;    // "avx512vnni", "avxvnni", "avx2", "neondot", "neon", "scalar"
};
DotPeak MeasureInt8DotPeak();

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_ROOFLINE_H_
