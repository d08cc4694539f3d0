// fflite-bench --kernels: one kernel alone, timed on a weight matrix of a chosen size (in L1, in
// L2, or from memory), to check the performance model (scripts/arm_model.py) against this machine:
// cycles per 32 weights at the core's clock, measured in the same run.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_KERNEL_BENCH_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_KERNEL_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

namespace fflite {
namespace bench {

struct KernelBenchOptions {
  std::vector<std::string> kernels;  // "gemv" (float weights), "qgemv", "qgemm"
  std::vector<std::string> dtypes;   // f32, f16, bf16 (gemv); i8, i4, q4_k, q5_k, q6_k (q*)
  std::vector<int64_t> tokens;
  std::vector<int64_t> kib;          // the weight matrix's size per case
  int reps = 7;
  bool json = false;
};

// Prints one line per kernel, dtype, size and token count; returns a process exit code (2 for
// an unknown kernel or dtype, or a size that cannot be allocated).
int RunKernelBench(const KernelBenchOptions& options);

// The core's clock in GHz, from a chain of dependent register-to-register adds (one cycle each on
// every core fflite runs on; not adds of an immediate, which Intel's Golden Cove folds at rename
// several per cycle), timed with the steady clock: the clock the core runs at now, turbo
// included.
double MeasureCoreClockGhz();

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_KERNEL_BENCH_H_
