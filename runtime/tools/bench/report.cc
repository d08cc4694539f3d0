// fflite-bench's report of a host run (report.h).
#include "bench/report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/platform.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"

namespace fflite {
namespace bench {

namespace {

// Sparse decode: the fraction of down's value rows and of ReGLU up rows read (1 where none were
// skippable), and the weight bytes read per call with them.
double DownFraction(const Row& w) {
  const BackendStats& v = w.value_rows;
  return v.value_rows_total > 0 ? static_cast<double>(v.value_rows_read) / v.value_rows_total
                                : 1.0;
}
double UpFraction(const Row& w) {
  const BackendStats& v = w.value_rows;
  return v.up_rows_total > 0 ? static_cast<double>(v.up_rows_read) / v.up_rows_total : 1.0;
}
double BytesRead(const Work& work, const Row& w) {
  return work.weight_bytes - (1.0 - DownFraction(w)) * work.value_rows_bytes -
         (1.0 - UpFraction(w)) * work.reglu_up_bytes;
}

Roof RoofAt(const Report& r, int64_t threads) {
  for (const auto& [t, roof] : r.roofs) {
    if (t == threads) return roof;
  }
  return Roof();
}

}  // namespace

void ComputeRatios(Report* r) {
  for (Row& row : r->rows) {
    const double flops = r->work.flops_per_token * static_cast<double>(row.tokens);
    row.gbs = r->work.weight_bytes / row.ours.median / 1e9;
    row.gflops = flops / row.ours.median / 1e9;
    // Roofline time: the larger of streaming the weights once at the bandwidth and the FLOPs at
    // the FMA peak that this many threads measured. Quantised models taking the int8 path: the
    // int8 dot-product peak instead of the FMA's.
    const bool int8 = r->work.quantized && r->gemm_tokens != 0 && row.tokens >= r->gemm_tokens;
    const Roof roof = RoofAt(*r, row.threads);
    const double compute_peak = int8 ? roof.dot : roof.fma;
    const double roof_s =
        std::max(r->work.weight_bytes / (roof.bw * 1e9), flops / (compute_peak * 1e9));
    row.roof_pct = 100.0 * roof_s / row.ours.median;
    row.peak_pct = 100.0 * row.gflops / compute_peak;
    row.int8 = int8;
    if (r->work.moe && row.routed.median > 0) {
      row.routed_gflops = r->work.routed_flops_per_token * static_cast<double>(row.tokens) /
                          row.routed.median / 1e9;
      row.routed_peak_pct = 100.0 * row.routed_gflops / roof.fma;
      const double fma_s =
          r->work.routed_flops_per_token * static_cast<double>(row.tokens) / (roof.fma * 1e9);
      const double routed_read_s = row.routed_bytes / (roof.bw * 1e9);
      row.routed_read_ms = routed_read_s * 1e3;
      row.routed_bound_pct = 100.0 * fma_s / std::max(fma_s, routed_read_s);
      row.routed_serial_pct = 100.0 * fma_s / (fma_s + routed_read_s);
    }
  }
}

void PrintJson(const Report& r) {
  std::printf("{\"model\": \"%s\", \"backend\": \"%s\", \"cold\": %s, \"copies\": %zu,\n",
              r.what.c_str(), r.backend.c_str(), r.cold ? "true" : "false", r.copies);
  std::printf(" \"packed_engine\": \"%s\",\n",
              r.packed_engine.c_str());
  std::printf(" \"platform\": \"%s\", \"kernels\": \"%s\",\n", PlatformSummary().c_str(),
              fflite::BestKernels().isa);
  std::printf(" \"weight_bytes\": %.0f, \"flops_per_token\": %.0f, \"file_bytes\": %" PRIu64
              ",\n",
              r.work.weight_bytes, r.work.flops_per_token, r.file_bytes);
  std::printf(" \"read_bandwidth_gbs\": %.2f, \"fma_peak_gflops\": %.2f, \"fma_isa\": \"%s\",\n",
              r.bw, r.peak.gflops, r.peak.isa.c_str());
  std::printf(" \"gemm_l1_isa\": \"%s\", \"gemm_l1_gflops_before\": %.2f, "
              "\"gemm_l1_gflops_after\": %.2f, \"fma_peak_gflops_before\": %.2f, "
              "\"fma_peak_gflops_after\": %.2f,\n",
              r.gemm_l1_before.isa.c_str(), r.gemm_l1_before.gflops, r.gemm_l1_after.gflops,
              r.one_before.fma, r.one_after.fma);
  std::printf(" \"roofline_by_threads\": [");
  for (size_t i = 0; i < r.roofs.size(); ++i) {
    std::printf("%s{\"threads\": %d, \"read_bandwidth_gbs\": %.2f, \"fma_peak_gflops\": %.2f, "
                "\"int8_dot_peak_gops\": %.2f}",
                i ? ", " : "", static_cast<int>(r.roofs[i].first), r.roofs[i].second.bw,
                r.roofs[i].second.fma, r.roofs[i].second.dot);
  }
  std::printf("],\n");
  std::printf(" \"int8_dot_peak_gops\": %.2f, \"int8_dot_isa\": \"%s\", \"qgemv\": \"%s\", "
              "\"qgemm\": \"%s\", \"quant_gemm_min_tokens\": %zu, "
              "\"quant_gemm_min_tokens_i8\": %zu, \"quant_gemm_min_tokens_i4\": %zu,\n",
              r.dot.gops, r.dot.isa.c_str(), r.qgemv_isa.c_str(), r.qgemm_isa.c_str(),
              r.gemm_tokens, r.gemm_tokens_i8, r.gemm_tokens_i4);
  std::printf(" \"file_read_s\": %.4f, \"load_s\": %.4f, \"create_s\": %.4f, "
              "\"first_call_s\": %.4f,\n",
              r.read_s, r.load_s, r.create_s, r.first_call_s);
  std::printf(
      " \"rss_before_mb\": %.1f, \"rss_after_create_mb\": %.1f, "
      "\"rss_all_copies_mb\": %.1f,\n",
      r.rss_before, r.rss_one, r.rss_all);
  std::printf(" \"rss_end_mb\": %.1f, \"expert_budget_bytes\": %" PRIu64
              ", \"resident_expert_bytes\": %" PRIu64 ", \"expert_bytes\": %.0f, "
              "\"non_expert_bytes\": %.0f,\n",
              r.rss_end, r.budget, r.resident_experts, r.work.expert_bytes,
              r.work.non_expert_bytes);
  std::printf(" \"expert_histogram\": {");
  for (size_t h = 0; h < r.histograms.size(); ++h) {
    std::printf("%s\"%zu\": [", h == 0 ? "" : ", ", r.histograms[h].first);
    for (size_t e = 0; e < r.histograms[h].second.size(); ++e) {
      std::printf("%s%" PRIu64, e == 0 ? "" : ", ", r.histograms[h].second[e]);
    }
    std::printf("]");
  }
  std::printf("},\n");
  std::printf(" \"runs\": [\n");
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const Row& w = r.rows[i];
    std::printf(
        "  {\"threads\": %d, \"tokens\": %zu, \"median_ms\": %.4f, \"min_ms\": %.4f, "
        "\"max_ms\": %.4f, \"weight_gbs\": %.3f, \"gflops\": %.3f, \"roofline_pct\": %.2f, "
        "\"%s_peak_pct\": %.2f, \"routed_median_ms\": %.4f, \"routed_fma_peak_pct\": %.2f, "
        "\"routed_read_mb\": %.3f, \"routed_bound_pct\": %.2f, \"routed_serial_pct\": %.2f",
        w.threads, w.tokens, w.ours.median * 1e3, w.ours.min * 1e3, w.ours.max * 1e3, w.gbs,
        w.gflops, w.roof_pct, w.int8 ? "int8_dot" : "fma", w.peak_pct, w.routed.median * 1e3,
        w.routed_peak_pct, w.routed_bytes / 1e6, w.routed_bound_pct, w.routed_serial_pct);
    if (w.routed_batches > 0) {
      std::printf(", \"routed_batches\": %" PRIu64 ", \"routed_alone_batches\": %" PRIu64,
                  w.routed_batches, w.routed_batches_together);
    }
    if (w.value_rows.value_rows_total > 0 || w.value_rows.up_rows_total > 0) {
      std::printf(", \"value_rows_read_pct\": %.3f, \"up_rows_read_pct\": %.3f, "
                  "\"weight_bytes_read\": %.0f",
                  100.0 * DownFraction(w), 100.0 * UpFraction(w), BytesRead(r.work, w));
    }
    if (w.has_base) {
      std::printf(
          ", \"baseline_median_ms\": %.4f, \"baseline_min_ms\": %.4f, "
          "\"speedup\": %.3f, \"speedup_by_min\": %.3f, \"speedup_paired\": %.3f",
          w.base.median * 1e3, w.base.min * 1e3, w.base.median / w.ours.median,
          w.base.min / w.ours.min, w.paired);
    }
    std::printf("}%s\n", i + 1 < r.rows.size() ? "," : "");
  }
  std::printf(" ]}\n");
}

void PrintTable(const Report& r) {
  std::printf("platform: %s; fflite kernels: %s\n", PlatformSummary().c_str(),
              fflite::BestKernels().isa);
  if (!r.packed_engine.empty()) {
    std::printf("packed float matrices: %s\n", r.packed_engine.c_str());
    if (!r.vs.empty()) {
      std::printf("baseline: the same backend with --vs %s (packed float matrices: %s)\n",
                  r.vs.c_str(), r.vs_engine.c_str());
    }
#if defined(__x86_64__)
    std::printf("amx-bf16 gemm kernel: %s\n", GemmAmxStatus());
#endif
  }
  std::printf("model: %s, %zu layer(s), d_model %u; backend %s%s (%zu cop%s)\n", r.what.c_str(),
              r.layers, r.d_model, r.backend.c_str(), r.cold ? ", cold" : "", r.copies,
              r.copies == 1 ? "y" : "ies");
  std::printf("weights read per call: %.1f MB; %.2f GFLOP per token; file %.1f MB\n",
              r.work.weight_bytes / 1e6, r.work.flops_per_token / 1e9, r.file_bytes / 1e6);
  std::printf(
      "roofline (measured now, 1 thread; each figure the larger of its measurements before and "
      "after the runs): read %.1f GB/s (%d MiB buffer; %.1f before, %.1f after), FMA peak %.1f "
      "GFLOP/s (%s; %.1f before, %.1f after); LLC %.0f MiB%s\n",
      r.bw, r.bandwidth_mib, r.one_before.bw, r.one_after.bw,
      r.peak.gflops, r.peak.isa.c_str(), r.one_before.fma, r.one_after.fma, r.llc / 1048576.0,
      r.llc_reported > 0 ? "" : " (not reported by the CPU; assumed)");
  for (const auto& [t, roof] : r.roofs) {
    if (t <= 1) continue;
    std::printf("roofline, %d threads at once: read %.1f GB/s (%.2fx one thread), FMA peak %.1f "
                "GFLOP/s (%.2fx)",
                static_cast<int>(t), roof.bw, roof.bw / r.bw, roof.fma, roof.fma / r.peak.gflops);
    if (r.work.quantized) {
      std::printf(", int8 peak %.1f GOP/s (%.2fx)", roof.dot, roof.dot / r.dot.gops);
    }
    std::printf("\n");
  }
  // What the FMA peak's percentages can reach: the microkernel's own rate beside each probe.
  auto of_peak = [](double rate, double fma) { return fma > 0 ? 100.0 * rate / fma : 0.0; };
  std::printf("gemm microkernel (%s) on a tile and a panel in L1, 1 thread: %.1f GFLOP/s before "
              "the runs (%.0f%% of that FMA probe), %.1f after (%.0f%%)\n",
              r.gemm_l1_before.isa.c_str(), r.gemm_l1_before.gflops,
              of_peak(r.gemm_l1_before.gflops, r.one_before.fma), r.gemm_l1_after.gflops,
              of_peak(r.gemm_l1_after.gflops, r.one_after.fma));
  if (r.work.quantized) {
    std::printf(
        "quantised weights: int8 dot-product peak %.1f GOP/s (%s); kernels qgemv %s (float "
        "activations), qgemm %s (int8 activations: i8 from %s, i4 from %s tokens)\n",
        r.dot.gops, r.dot.isa.c_str(), r.qgemv_isa.c_str(), r.qgemm_isa.c_str(),
        r.gemm_tokens_i8 != 0 ? absl::StrCat(r.gemm_tokens_i8).c_str() : "no",
        r.gemm_tokens_i4 != 0 ? absl::StrCat(r.gemm_tokens_i4).c_str() : "no");
  }
  std::printf(
      "file read %.3f s, load+validate %.4f s, session creation %.3f s, first call of %d tokens "
      "(prepares the weights it needs) %.3f s\n",
      r.read_s, r.load_s, r.create_s, static_cast<int>(r.max_tokens), r.first_call_s);
  std::printf(
      "RSS: %.1f MB before sessions, %.1f MB after one, %.1f MB after all %zu%s (weights "
      "%.1f MB per copy)\n\n",
      r.rss_before, r.rss_one, r.rss_all, r.copies, r.with_base ? " + baseline copies" : "",
      r.work.weight_bytes / 1e6);
  if (r.work.moe) {
    std::printf(
        "MoE: routed experts %.1f MB packed, non-expert weights %.1f MB; expert budget %s; "
        "weights read per call above = router + chosen + shared experts (decode roofline)\n",
        r.work.expert_bytes / 1e6, r.work.non_expert_bytes / 1e6,
        r.budget > 0 ? absl::StrFormat("%.1f MB (%.3g of the experts)", r.budget / 1e6,
                                       r.budget_fraction).c_str()
                   : "none");
    std::printf(
        "after the runs: RSS %.1f MB (+%.1f over before sessions); resident experts (packed "
        "and mapped) of the first session %.1f MB; budget + non-expert weights = %.1f MB per "
        "session\n",
        r.rss_end, r.rss_end - r.rss_before, r.resident_experts / 1e6,
        (r.budget > 0 ? r.budget : r.work.expert_bytes) / 1e6 + r.work.non_expert_bytes / 1e6);
    const BackendStats& es = r.expert_stats;
    std::printf("experts of the first session: %" PRIu64 " hits, %" PRIu64 " misses",
                es.expert_hits, es.expert_misses);
    if (es.expert_slots != 0) {
      std::printf(
          "; streamed into %" PRIu64 " slots of %.2f MB: %" PRIu64 " reads, %.1f MB through the "
          "page cache, %.1f MB past it (O_DIRECT), %.3f s waited for reads",
          es.expert_slots, es.expert_slot_bytes / 1e6, es.expert_reads,
          es.expert_read_buffered_bytes / 1e6, es.expert_read_direct_bytes / 1e6,
          es.expert_read_wait_seconds);
    }
    std::printf("\n");
    for (const auto& [layer, counts] : r.histograms) {
      uint64_t total = 0, max = 0, min = UINT64_MAX;
      for (uint64_t c : counts) {
        total += c;
        max = std::max(max, c);
        min = std::min(min, c);
      }
      std::printf("expert histogram, layer %zu (tokens routed to each expert over every call; "
                  "total %" PRIu64 ", min %" PRIu64 ", max %" PRIu64 "):\n ",
                  layer, total, min, max);
      for (size_t e = 0; e < counts.size(); ++e) {
        std::printf(" %zu:%" PRIu64 "%s", e, counts[e], (e + 1) % 12 == 0 ? "\n " : "");
      }
      std::printf("\n");
    }
    std::printf("\n");
  }
  std::printf("%7s %6s %10s %10s %10s %8s %9s %7s %6s", "threads", "tokens", "median ms",
              "min ms", "max ms", "GB/s", "GFLOP/s", "roof%", "peak%");
  if (r.with_base)
    std::printf(" %12s %10s %8s %8s %8s", "base med ms", "base min", "speedup", "(by min)",
                "(paired)");
  std::printf("\n");
  for (const Row& w : r.rows) {
    std::printf("%7d %6zu %10.3f %10.3f %10.3f %8.2f %9.2f %6.1f%% %5.1f%%%s", w.threads,
                w.tokens, w.ours.median * 1e3, w.ours.min * 1e3, w.ours.max * 1e3, w.gbs,
                w.gflops, w.roof_pct, w.peak_pct, w.int8 ? " (int8 peak)" : "");
    if (w.has_base) {
      std::printf(" %12.3f %10.3f %7.2fx %7.2fx %7.3fx", w.base.median * 1e3, w.base.min * 1e3,
                  w.base.median / w.ours.median, w.base.min / w.ours.min, w.paired);
    }
    std::printf("\n");
  }
  for (const Row& w : r.rows) {
    if (w.value_rows.value_rows_total == 0 && w.value_rows.up_rows_total == 0) continue;
    const double read = BytesRead(r.work, w);
    const std::string up =
        w.value_rows.up_rows_total > 0
            ? absl::StrFormat(", up %.2f%% of its rows (ReGLU)", 100.0 * UpFraction(w))
            : "";
    std::printf("sparse decode, %d thread(s), %zu token(s): down read %.2f%% of its value "
                "rows%s; weights read %.1f MB per call (of %.1f MB dense), %.2f GB/s of them\n",
                w.threads, w.tokens, 100.0 * DownFraction(w), up.c_str(), read / 1e6,
                r.work.weight_bytes / 1e6, read / w.ours.median / 1e9);
  }
  for (const Row& w : r.rows) {
    if (w.routed.median <= 0) continue;
    std::printf("routed experts, %d thread(s), %zu token(s): median %.3f ms of the call's %.3f ms, "
                "%.2f GFLOP/s = %.1f%% of the FMA peak; they read %.1f MB per call, %.1f ms at "
                "the read bandwidth: from memory at most %.1f%% of the FMA peak with the read "
                "overlapped, %.1f%% without%s\n",
                w.threads, w.tokens, w.routed.median * 1e3, w.ours.median * 1e3, w.routed_gflops,
                w.routed_peak_pct, w.routed_bytes / 1e6, w.routed_read_ms, w.routed_bound_pct,
                w.routed_serial_pct,
                w.routed_batches == 0
                    ? ""
                    : absl::StrFormat("; %d of %d batches ran whole on one thread each",
                                      w.routed_batches_together, w.routed_batches)
                          .c_str());
  }
}

}  // namespace bench
}  // namespace fflite
