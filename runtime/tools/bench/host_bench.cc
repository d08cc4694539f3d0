// fflite-bench on the host (host_bench.h).
#include "c_status.h"
#include "bench/host_bench.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <list>
#include <memory>

#include "absl/strings/str_format.h"
#include "base/cpu_features.h"
#include "bench/baseline.h"
#include "bench/report.h"
#include "bench/roofline.h"
#include "bench/timing.h"
#include "bench/work.h"
#include "kernels/quant_kernels.h"
#include "session/session.h"

namespace fflite {
namespace bench {

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A /proc field in kB (VmRSS in /proc/self/status, MemAvailable in /proc/meminfo); 0 if absent.
uint64_t ProcKb(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      uint64_t kb = 0;
      std::sscanf(line.c_str() + key.size() + 1, "%" SCNu64, &kb);
      return kb;
    }
  }
  return 0;
}
double RssMb() { return ProcKb("/proc/self/status", "VmRSS") / 1024.0; }

// A session as a user makes one, with the bench's tuning for the CPU backend and its routed
// experts timed.
absl::StatusOr<std::unique_ptr<Runner>> MakeSession(const Model& model, const std::string& backend,
                                                    int threads, size_t max_tokens,
                                                    uint64_t budget,
                                                    const CpuBackendOptions& options) {
  SessionOptions so;
  so.backend = backend;
  so.num_threads = threads;
  so.max_tokens = max_tokens;
  so.expert_budget_bytes = budget;
  so.cpu_options = &options;
  so.time_routed_experts = true;
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Create(model, so);
  if (!session.ok()) return session.status();
  return std::unique_ptr<Runner>(new SessionRunner(std::move(*session)));
}

// --capture: every layer of the session captures into buffers of max_tokens rows (kept in the
// lists for the run, as a user's would be).
absl::Status SetCaptures(const Model& model, size_t max_tokens, Session* session,
                         std::list<std::vector<float>>* floats,
                         std::list<std::vector<int32_t>>* ints) {
  for (size_t l = 0; l < model.layers().size(); ++l) {
    const LayerView& lv = model.layers()[l];
    const bool moe = lv.kind == LayerKind::kMoe;
    const size_t d_ff = moe ? lv.moe.experts.front().d_ff : lv.ffn.d_ff;
    const size_t k = moe ? lv.moe.top_k : 1;
    floats->emplace_back(max_tokens * k * d_ff);
    float* h = floats->back().data();
    int32_t* experts = nullptr;
    float* weights = nullptr;
    if (moe) {
      ints->emplace_back(max_tokens * k);
      experts = ints->back().data();
      floats->emplace_back(max_tokens * k);
      weights = floats->back().data();
    }
    const absl::Status st = session->SetCapture(l, h, max_tokens * k * d_ff, experts, weights,
                                                moe ? max_tokens * k : 0);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

int RunHostBench(const HostBench& b) {
  const Model& model = *b.model;
  Report report;
  report.what = b.what;
  report.backend = b.backend;
  report.work = CountWork(model);
  const Work& work = report.work;
  report.file_bytes = model.file_size();
  report.d_model = model.d_model();
  report.layers = model.layers().size();
  report.read_s = b.read_s;
  report.load_s = b.load_s;
  report.max_tokens = static_cast<size_t>(*std::max_element(b.tokens.begin(), b.tokens.end()));
  report.bandwidth_mib = b.bandwidth_mib;
  report.budget_fraction = b.budget_fraction;
  if (b.backend == "xnnpack") report.packed_engine = CpuPackedEngineName(b.options);
  if (b.baseline == BaselineKind::kVs) {
    report.vs = b.vs;
    report.vs_engine = CpuPackedEngineName(b.vs_options);
  }
  const uint64_t budget =
      b.budget_fraction > 0
          ? std::max<uint64_t>(1, static_cast<uint64_t>(b.budget_fraction * work.expert_bytes))
          : 0;
  report.budget = budget;
  // Packed bytes of one session: what the cold mode's copies cost.
  const double packed_bytes =
      work.non_expert_bytes + (budget > 0 ? std::min<double>(budget, work.expert_bytes)
                                          : work.expert_bytes);

  // The roofline of this machine, measured now, with one thread and with each thread count of
  // the run (all threads at once: a multi-thread row is held against what that many threads
  // measure, not against the one-thread figure times the threads). Measured again after the
  // runs, each figure the larger of its two measurements, so that a probe that ran in a slow
  // second on a shared machine does not inflate the percentages (on a VM, one run read 131% of
  // an FMA peak probed low).
  const size_t bw_bytes = static_cast<size_t>(b.bandwidth_mib) << 20;
  report.bw = MeasureReadBandwidth(bw_bytes, 5);
  report.peak = MeasureFmaPeak();
  // The gemm microkernel in L1 beside it (before and after the runs, each with its FMA peak).
  report.gemm_l1_before = MeasureGemmL1Rate();
  // Quantised models: the int8 dot-product peak too (the many-token kernels' limit).
  // The quantised kernels of the run (the options' or the best) and the peak of the int8 one's
  // instruction set.
  const QGemvKernel& qgemv = b.options.qgemv != nullptr ? *b.options.qgemv : BestQGemvKernel();
  const QGemmKernel& qgemm = b.options.qgemm != nullptr ? *b.options.qgemm : BestQGemmKernel();
  report.qgemv_isa = qgemv.isa;
  report.qgemm_isa = qgemm.isa;
  report.dot = work.quantized ? MeasureInt8DotPeak(1, qgemm.isa) : DotPeak();
  auto measure_roof = [&](int64_t t) {
    const int n = static_cast<int>(t);
    return Roof{MeasureReadBandwidth(bw_bytes, 5, n), MeasureFmaPeak(n).gflops,
                work.quantized ? MeasureInt8DotPeak(n, qgemm.isa).gops : 0.0};
  };
  for (int64_t t : b.threads) {
    report.roofs.emplace_back(
        t, t > 1 ? measure_roof(t) : Roof{report.bw, report.peak.gflops, report.dot.gops});
  }
  report.one_before = Roof{report.bw, report.peak.gflops, report.dot.gops};
  // The fewest tokens taking the int8 path, per dtype, and the fewest for any matrix of the model
  // (0: never).
  auto gemm_tokens_of = [&](QuantType type) {
    return b.quant_gemm_tokens >= 0
               ? static_cast<size_t>(b.quant_gemm_tokens)
               : DefaultQuantGemmMinTokens(type, qgemv, qgemm);
  };
  report.gemm_tokens_i8 = gemm_tokens_of(QuantType::kQ8);
  report.gemm_tokens_i4 = gemm_tokens_of(QuantType::kQ4);
  const bool i4_first =
      work.has_i4 && (!work.has_i8 || report.gemm_tokens_i4 < report.gemm_tokens_i8);
  report.gemm_tokens = i4_first ? report.gemm_tokens_i4 : report.gemm_tokens_i8;

  // Cold mode: enough copies of the packed weights that the caches hold none of them by the time
  // a copy is used again (> 4x LLC), bounded by half of the available memory.
  report.cold = b.cold;
  report.with_base = b.baseline != BaselineKind::kNone;
  // The last-level cache, or 32 MiB where cpuinfo cannot tell (it failed, or reports no caches,
  // as on a Zen 5 VM that hides AMD's cache leaves).
  report.llc_reported = GetCpuFeatures().llc_bytes;
  report.llc = report.llc_reported > 0 ? report.llc_reported : (32u << 20);
  size_t copies = 1;
  if (b.cold) {
    const size_t automatic = std::max<size_t>(
        2, static_cast<size_t>(std::ceil(4.0 * report.llc / work.weight_bytes)));
    copies = b.cold_copies > 0 ? static_cast<size_t>(b.cold_copies) : automatic;
    const double avail = ProcKb("/proc/meminfo", "MemAvailable") * 1024.0;
    const size_t fit =
        static_cast<size_t>(avail / 2 / (packed_bytes * (report.with_base ? 2 : 1)));
    copies = std::max<size_t>(1, std::min(copies, fit));
  }
  report.copies = copies;

  // Quantised weights and f16/bf16 dense layers are read from the model's mapping, not packed:
  // cold copies need copies of the file's bytes (each its own model over its own buffer).
  std::vector<std::unique_ptr<Model>> cold_models;
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> cold_buffers;
  if (b.cold && (work.quantized || work.reads_file)) {
    for (size_t c = 1; c < copies; ++c) {
      const size_t size = static_cast<size_t>(model.file_size());
      cold_buffers.emplace_back(
          static_cast<uint8_t*>(std::aligned_alloc(65536, (size + 65535) / 65536 * 65536)),
          &std::free);
      if (cold_buffers.back() == nullptr) {
        std::fprintf(stderr, "cold copies: out of memory\n");
        return 1;
      }
      std::memcpy(cold_buffers.back().get(), b.file->data(), size);
      absl::StatusOr<std::unique_ptr<Model>> m =
          Model::LoadBuffer(cold_buffers.back().get(), size);
      if (!m.ok()) {
        std::fprintf(stderr, "cold copies: %s\n", fflite::StatusText(m.status()).c_str());
        return 1;
      }
      cold_models.push_back(std::move(*m));
    }
  }
  auto copy_of = [&](size_t c) -> const Model& {
    return c == 0 || cold_models.empty() ? model : *cold_models[c - 1];
  };
  // The baselines' CPU tuning: vs_options for --vs, every value row read for --vs_dense.
  CpuBackendOptions dense = b.options;
  dense.value_rows_dense_fraction = 0.0;

  report.rss_before = RssMb();
  bool with_base = report.with_base;
  for (int64_t threads : b.threads) {
    const int n_threads = static_cast<int>(threads);
    RunnerSet ours, base;
    std::list<std::vector<float>> capture_floats;  // --capture's buffers, kept for the run
    std::list<std::vector<int32_t>> capture_ints;
    // Copies of ours and of the baseline are created in turn, so that neither gets all the
    // memory allocated first (an A/A run on this VM showed the set created first ~15% slower at
    // cold decode).
    for (size_t c = 0; c < copies; ++c) {
      const double t = Now();
      absl::StatusOr<std::unique_ptr<Runner>> r =
          MakeSession(copy_of(c), b.backend, n_threads, report.max_tokens, budget, b.options);
      if (!r.ok()) {
        std::fprintf(stderr, "creating %s: %s\n", b.backend.c_str(), fflite::StatusText(r.status()).c_str());
        return 1;
      }
      if (c == 0 && threads == b.threads.front()) {
        report.create_s = Now() - t;
        report.rss_one = RssMb();
      }
      if (b.capture) {
        Session& session = static_cast<SessionRunner&>(**r).session();
        const absl::Status st = SetCaptures(copy_of(c), report.max_tokens, &session,
                                            &capture_floats, &capture_ints);
        if (!st.ok()) {
          std::fprintf(stderr, "capture: %s\n", fflite::StatusText(st).c_str());
          return 1;
        }
      }
      ours.push_back(std::move(*r));
      if (!with_base) continue;
      switch (b.baseline) {
        case BaselineKind::kAa:
          r = MakeSession(model, b.backend, n_threads, report.max_tokens, budget, b.options);
          break;
        case BaselineKind::kVs:  // the same copy of the weights as ours[c], tuned otherwise
          r = MakeSession(copy_of(c), b.backend, n_threads, report.max_tokens, budget,
                          b.vs_options);
          break;
        case BaselineKind::kUnbudgeted:  // its own mapping: a budget releases its model's pages
          r = MakeSession(*b.second, b.backend, n_threads, report.max_tokens, 0, b.options);
          break;
        case BaselineKind::kDense:  // the same copy of the weights as ours[c]
          r = MakeSession(copy_of(c), b.backend, n_threads, report.max_tokens, budget, dense);
          break;
        default: {
          BackendConfig config;
          config.num_threads = n_threads;
          config.max_tokens = report.max_tokens;
          absl::StatusOr<std::unique_ptr<Backend>> plain = CreateBaseline(model, config);
          if (plain.ok()) {
            r = std::unique_ptr<Runner>(new BackendRunner(std::move(*plain)));
          } else {
            r = plain.status();
          }
        }
      }
      if (!r.ok()) {
        std::fprintf(stderr, "baseline: %s\n", fflite::StatusText(r.status()).c_str());
        return 1;
      }
      base.push_back(std::move(*r));
    }
    if (threads == b.threads.front()) {
      // The first call prepares what it needs (packing on first use): timed on its own.
      const size_t n = report.max_tokens, d = model.d_model();
      std::vector<float> x(n * d, 0.5f), y(n * d);
      const double t = Now();
      for (size_t l = 0; l < model.layers().size(); ++l) {
        const absl::Status st = ours[0]->Run(l, x.data(), n, y.data());
        if (!st.ok()) {
          std::fprintf(stderr, "first call: %s\n", fflite::StatusText(st).c_str());
          return 1;
        }
        std::swap(x, y);
      }
      report.first_call_s = Now() - t;
      report.rss_all = RssMb();
    }
    for (int64_t tokens : b.tokens) {
      Row row;
      row.threads = n_threads;
      row.tokens = static_cast<size_t>(tokens);
      std::vector<RunnerSet*> sets = {&ours};
      if (with_base) sets.push_back(&base);
      BackendStats before;
      for (const auto& o : ours) {
        const BackendStats v = o->Stats();
        before.value_rows_read += v.value_rows_read;
        before.value_rows_total += v.value_rows_total;
        before.up_rows_read += v.up_rows_read;
        before.up_rows_total += v.up_rows_total;
      }
      Timing timing;
      const absl::Status st =
          Time(sets, model, row.tokens, b.warmup, b.reps, b.vary, &timing);
      if (!st.ok()) {
        std::fprintf(stderr, "run: %s\n", fflite::StatusText(st).c_str());
        return 1;
      }
      row.ours = timing.stats[0];
      row.paired = timing.paired;
      row.routed = timing.routed;
      row.routed_bytes = timing.routed_bytes;
      row.routed_batches = timing.routed_batches;
      row.routed_batches_together = timing.routed_batches_together;
      BackendStats& v = row.value_rows;
      for (const auto& o : ours) {
        const BackendStats s = o->Stats();
        v.value_rows_read += s.value_rows_read;
        v.value_rows_total += s.value_rows_total;
        v.up_rows_read += s.up_rows_read;
        v.up_rows_total += s.up_rows_total;
      }
      v.value_rows_read -= before.value_rows_read;
      v.value_rows_total -= before.value_rows_total;
      v.up_rows_read -= before.up_rows_read;
      v.up_rows_total -= before.up_rows_total;
      if (with_base) {
        row.base = timing.stats[1];
        row.has_base = true;
      }
      report.rows.push_back(row);
    }
    if (threads == b.threads.front()) {
      report.rss_end = RssMb();
      report.expert_stats = ours.front()->Stats();
      report.resident_experts = report.expert_stats.resident_expert_bytes;
      // The expert histogram of this run: every call of every copy of ours.
      for (size_t l = 0; l < model.layers().size(); ++l) {
        if (model.layers()[l].kind != LayerKind::kMoe) continue;
        std::vector<uint64_t> sum(model.layers()[l].moe.num_experts, 0);
        for (const auto& o : ours) {
          absl::StatusOr<absl::Span<const uint64_t>> c =
              static_cast<SessionRunner&>(*o).session().ExpertCounts(l);
          if (!c.ok()) continue;
          for (size_t e = 0; e < sum.size(); ++e) sum[e] += (*c)[e];
        }
        report.histograms.emplace_back(l, std::move(sum));
      }
    }
  }

  // The roofline again, each figure the larger of its two measurements; then every row's ratios.
  report.one_after = Roof{MeasureReadBandwidth(bw_bytes, 5), MeasureFmaPeak().gflops,
                          work.quantized ? MeasureInt8DotPeak(1, qgemm.isa).gops : 0.0};
  report.gemm_l1_after = MeasureGemmL1Rate();
  report.bw = std::max(report.bw, report.one_after.bw);
  report.peak.gflops = std::max(report.peak.gflops, report.one_after.fma);
  report.dot.gops = std::max(report.dot.gops, report.one_after.dot);
  for (auto& [t, r] : report.roofs) {
    const Roof again =
        t > 1 ? measure_roof(t) : Roof{report.bw, report.peak.gflops, report.dot.gops};
    r = {std::max(r.bw, again.bw), std::max(r.fma, again.fma), std::max(r.dot, again.dot)};
  }
  ComputeRatios(&report);
  if (b.json) {
    PrintJson(report);
  } else {
    PrintTable(report);
  }
  return 0;
}

}  // namespace bench
}  // namespace fflite
