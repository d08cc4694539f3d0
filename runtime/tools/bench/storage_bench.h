// fflite-bench --storage: an MoE model whose experts stream from storage, measured as users run it
// (issue 45): in one run, the storage's read bandwidth (direct sequential reads of the model file,
// its pages dropped first), the all-resident time (no budget, the file in the page cache), and,
// inside a memory cgroup (--memory_limit_mib) with the file's pages dropped again, the streamed
// session (an expert budget) and the same file mapped without a budget, at decode (each layer's
// output fed to the next) and at prefill.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_STORAGE_BENCH_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_STORAGE_BENCH_H_

#include <cstdint>
#include <string>

#include "backends/cpu/cpu_options.h"
#include "format/model.h"

namespace fflite {
namespace bench {

struct StorageBench {
  std::string path;             // the model file (read again, its pages dropped)
  const Model* model = nullptr;  // loaded from `path`
  double budget_fraction = 0.25;
  int64_t memory_limit_mib = 0;  // 0: no cgroup
  int threads = 1;
  int decode_steps = 8;          // decode tokens timed (each through every layer)
  int prefill_tokens = 256;      // 0: no prefill run
  bool mmap_baseline = true;     // also the mapped file without a budget, under the same limit
  bool resident_run = true;      // the all-resident time (needs the file in memory)
  CpuBackendOptions options;     // the sessions' (the expert policy among them)
};

// Prints the report; returns the process's exit code (2: no cgroup could be made).
int RunStorageBench(const StorageBench& b);

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_STORAGE_BENCH_H_
