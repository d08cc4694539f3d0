// fflite-bench on the host (the CPU backend, registered as "xnnpack", or the reference): sessions
// made as users make them, timed against the machine's roofline measured in the same run, with
// an optional baseline (plain XNNPACK, or the same backend otherwise tuned, budgeted or dense).
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_HOST_BENCH_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_HOST_BENCH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/cpu_options.h"
#include "format/model.h"

namespace fflite {
namespace bench {

// What the baseline of a run is (--baseline and its modifiers).
enum class BaselineKind {
  kNone,
  kPlain,       // plain XNNPACK (baseline.h)
  kAa,          // a second set of the same sessions (--aa)
  kVs,          // the same backend with other tuning (--vs)
  kUnbudgeted,  // the same backend without a budget, on a second mapping (--vs_unbudgeted)
  kDense,       // the same backend reading every value row (--vs_dense)
};

struct HostBench {
  const Model* model = nullptr;
  const Model* second = nullptr;                 // kUnbudgeted: a second mapping of the file
  const std::vector<uint8_t>* file = nullptr;    // --cold: the file's bytes, for copies
  std::string what;                              // "synthetic llama", or the model's path
  std::string backend;                           // a registry name
  std::vector<int64_t> tokens, threads;
  int warmup = 2, reps = 10;
  bool vary = false, cold = false, capture = false, json = false;
  int cold_copies = 0;
  int bandwidth_mib = 1024;
  double budget_fraction = 0.0;
  int64_t quant_gemm_tokens = -1;   // the flag (-1: the backend's default)
  CpuBackendOptions options;        // ours, for the CPU backend
  BaselineKind baseline = BaselineKind::kNone;
  CpuBackendOptions vs_options;     // kVs: the baseline's
  std::string vs;                   // kVs: the flag=value pairs
  double read_s = 0.0, load_s = 0.0;  // the file's read and the model's load, timed by the caller
};

// Runs and prints (a table, or JSON); returns the process's exit code.
int RunHostBench(const HostBench& bench);

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_HOST_BENCH_H_
