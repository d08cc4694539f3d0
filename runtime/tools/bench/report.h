// fflite-bench's report of a host run (the CPU backend, the reference): the rows' figures against
// the roofline measured in the same run, printed as a table or as JSON.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_REPORT_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "bench/roofline.h"
#include "bench/timing.h"
#include "bench/work.h"
#include "format/model.h"

namespace fflite {
namespace bench {

// The roofline of some number of threads at once.
struct Roof {
  double bw = 0, fma = 0, dot = 0;  // GB/s, GFLOP/s, GOP/s
};

struct Row {
  int threads = 1;
  size_t tokens = 1;
  Stats ours, base;
  double paired = 0;  // with a baseline: the median of base / ours over the repetitions
  Stats routed;       // MoE: time in the routed experts
  bool has_base = false;
  double gbs = 0, gflops = 0, roof_pct = 0, peak_pct = 0;
  double routed_gflops = 0, routed_peak_pct = 0;
  // MoE: bytes the routed experts read per call (the forms their batches ran on), that read's
  // time at the measured bandwidth, and the FMA-peak ratios it allows: with the read overlapped
  // by the arithmetic, and with the two one after the other.
  double routed_bytes = 0, routed_read_ms = 0, routed_bound_pct = 0, routed_serial_pct = 0;
  // MoE: the routed batches over the timed calls, and how many ran whole on one thread each.
  uint64_t routed_batches = 0, routed_batches_together = 0;
  // Value-row models: rows read in the timed calls (BackendStats' value_rows_* and up_rows_*).
  BackendStats value_rows;
  bool int8 = false;  // peak_pct is of the int8 dot-product peak (quantised, int8 path)
};

// Everything a host run measured, for the printers.
struct Report {
  std::string what, backend;
  bool cold = false, with_base = false;
  size_t copies = 1;
  std::string packed_engine;      // the CPU backend's packed engine in words, or ""
  std::string vs, vs_engine;      // --vs and the baseline's packed engine, or ""
  Work work;
  uint64_t file_bytes = 0;
  uint32_t d_model = 0;
  size_t layers = 0;
  // The roofline: one thread (the larger of its measurements before and after the runs), each
  // before and after, per thread count; the gemm microkernel in L1; the int8 dot peak.
  double bw = 0;
  FmaPeak peak;
  DotPeak dot;
  Roof one_before, one_after;
  std::vector<std::pair<int64_t, Roof>> roofs;
  GemmL1Rate gemm_l1_before, gemm_l1_after;
  int bandwidth_mib = 0;
  double llc = 0, llc_reported = 0;
  // Quantised weights: the fewest tokens taking the int8 path (all, i8, i4; 0: never).
  size_t gemm_tokens = 0, gemm_tokens_i8 = 0, gemm_tokens_i4 = 0;
  std::string qgemv_isa, qgemm_isa;  // the quantised kernels the runs used
  double read_s = 0, load_s = 0, create_s = 0, first_call_s = 0;
  size_t max_tokens = 0;
  double rss_before = 0, rss_one = 0, rss_all = 0, rss_end = 0;
  uint64_t budget = 0;
  double budget_fraction = 0;
  uint64_t resident_experts = 0;
  BackendStats expert_stats;  // the first session's, after the runs of the first thread count
  std::vector<std::pair<size_t, std::vector<uint64_t>>> histograms;  // (layer, counts)
  std::vector<Row> rows;
};

// The rows' figures from their times and the roofline of their thread count.
void ComputeRatios(Report* report);

void PrintJson(const Report& r);
void PrintTable(const Report& r);

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_REPORT_H_
