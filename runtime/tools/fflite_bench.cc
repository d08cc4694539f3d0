// fflite-bench: latency of a model's layers (a .fflite file or a synthetic shape) per backend,
// token count and thread count, against the machine's own measured roofline and plain XNNPACK.
#include <cpuinfo.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <list>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/backend.h"
#include "backends/xnnpack/xnnpack_backend.h"
#ifdef FFLITE_HAVE_CUDA
#include "bench/cuda_bench.h"
#endif
#include "base/platform.h"
#include "base/status_macros.h"
#include "base/tool_flags.h"
#include "bench/baseline.h"
#include "bench/roofline.h"
#include "bench/synthetic.h"
#include "format/model.h"
#include "format/writer.h"
#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"
#include "session/session.h"

ABSL_FLAG(std::string, model, "", "a .fflite file to run");
ABSL_FLAG(std::string, synthetic, "",
          "a built-in shape instead of --model: llama, llama-70b (one 8192/28672 FFN), bert, tiny, "
          "tiny-moe, mixtral-mini, qwen-moe");
ABSL_FLAG(std::string, tokens, "1,128", "token counts per call, comma-separated");
ABSL_FLAG(std::string, threads, "1", "thread counts, comma-separated");
ABSL_FLAG(std::string, backend, "auto", "auto, or a backend name (xnnpack, reference, cuda: device-pointer I/O against the GPU's "
          "roofline, host<->device copies shown apart)");
ABSL_FLAG(int, warmup, 2, "untimed runs before the timed ones");
ABSL_FLAG(int, reps, 10, "timed runs (median, min, max are reported)");
ABSL_FLAG(bool, cold, false,
          "rotate through enough sessions (each its own packed weights, > 4x the last-level "
          "cache in total) that every run reads its weights from memory");
ABSL_FLAG(int, cold_copies, 0,
          "with --cold: this many sessions instead (0: enough for > 4x the last-level cache); "
          "fewer copies leave some weights in the caches (the smoke tests use 3)");
ABSL_FLAG(
    bool, baseline, false,
    "also run plain XNNPACK (one operator per matrix, scalar activations) and print the ratio");
ABSL_FLAG(bool, aa, false,
          "with --baseline: compare against a second instance of the same backend instead (an A/A "
          "run: the ratio shows the measurement's own bias on this machine)");
ABSL_FLAG(std::string, vs, "",
          "with --baseline: compare against the same backend with tuning flags set otherwise, "
          "flag=value pairs separated by commas (engine, gemm_isa, bf16_arithmetic, "
          "half_panels, gemm_ahead, slice_kib, token_chunk, expert_slice_kib, direct_tokens, "
          "quant_gemm_tokens, value_rows_dense_fraction, experts_alone), e.g. --vs "
          "gemm_isa=avx2 (an A/B run: both in one process, alternating, each with the other's "
          "threads idle)");
ABSL_FLAG(bool, json, false, "print JSON instead of a table");
ABSL_FLAG(int64_t, slice_kib, -1, "xnnpack: KiB of packed weights per operator (0: unsliced)");
ABSL_FLAG(int64_t, token_chunk, 0, "xnnpack: tokens per chunk (0: the default)");
ABSL_FLAG(int64_t, expert_slice_kib, -1,
          "xnnpack MoE: KiB of packed weights per operator of routed experts (-1: the default)");
ABSL_FLAG(int64_t, direct_tokens, -1,
          "xnnpack MoE: experts with at most this many tokens in a call run the direct kernel on "
          "the file's weights (-1: the default; 0: never)");
ABSL_FLAG(std::string, engine, "auto",
          "xnnpack: the engine of packed float matrices (auto, gemm: fflite's own, xnnpack)");
ABSL_FLAG(std::string, gemm_isa, "",
          "xnnpack with the gemm engine: a kernel by name (scalar, avx2, avx512, neon; for bf16 "
          "weights scalar-bf16, avx512bf16, amx-bf16; empty: the best for this CPU)");
ABSL_FLAG(bool, bf16_arithmetic, true,
          "xnnpack with the gemm engine: multiply bf16 weights in bf16 where the CPU does that "
          "faster than f32 (false: f32 arithmetic, over 16-bit panels where --half_panels)");
ABSL_FLAG(bool, half_panels, true,
          "xnnpack with the gemm engine: f16/bf16 weights stay 16-bit in the packed panels where "
          "the kernel has such a twin (avx2, avx512; the same results; false: f32 panels)");
ABSL_FLAG(bool, experts_alone, true,
          "xnnpack MoE: a call with enough experts per thread on packed (gemm engine) or "
          "quantised weights runs each of them whole on one thread (false: every expert's "
          "products shared among the threads; the same results)");
ABSL_FLAG(std::string, gemm_ahead, "auto",
          "xnnpack with the gemm engine: whether the AVX-512 and AMX kernels prefetch the next "
          "pass's panels while they compute (auto: unless a core has less than 1 MiB of L2; on; "
          "off; the same results; compare with --gemm_ahead on --baseline --vs gemm_ahead=off)");
ABSL_FLAG(int64_t, bandwidth_mib, 1024, "buffer for the read-bandwidth measurement");
ABSL_FLAG(std::string, dtype, "f32",
          "--synthetic: dtype of the FFN weight matrices: f32, f16, bf16, i8 or i4 (quantised by "
          "the converter's quantiser; every other tensor f32)");
ABSL_FLAG(bool, rotate, true,
          "--synthetic with --dtype i8|i4: the block-rotated layout (the converter's default)");
ABSL_FLAG(int64_t, quant_gemm_tokens, -1,
          "xnnpack: the fewest tokens in a quantised product that take the int8-activation "
          "kernel (0: never; default: the backend's)");
ABSL_FLAG(double, expert_budget_fraction, 0.0,
          "MoE: the session's expert budget as a fraction of all routed experts' packed bytes "
          "(0: no budget, every expert packed at creation)");
ABSL_FLAG(bool, vary_tokens, false,
          "a different random input for each call (from a pool of 64), so that MoE routing "
          "varies from call to call; both sets get the same inputs");
ABSL_FLAG(bool, vs_unbudgeted, false,
          "with --baseline and --expert_budget_fraction: compare against the same backend "
          "without a budget instead of plain XNNPACK");

ABSL_FLAG(double, sparsity, -1.0,
          "with --synthetic llama-reglu, opt or tiny-relu: make this fraction of the neurons "
          "silent for every token (a pre-activation bias shift; -1: the weights as they are)");
ABSL_FLAG(bool, value_rows, true,
          "synthetic models: store the down matrix of ReLU-family layers as value rows, as "
          "fflite-convert does (--novalue_rows: row-major, the dense layout)");
ABSL_FLAG(bool, vs_dense, false,
          "with --baseline on a value-row model: compare against the same backend reading every "
          "value row (the dense path, --value_rows_dense_fraction 0) on the same weights");
ABSL_FLAG(bool, capture, false,
          "capture every layer's hidden activations (and MoE routing) in the measured sessions, "
          "as fflite_session_set_capture does; with --baseline --aa the baseline does not: the "
          "cost of capture in one run");
ABSL_FLAG(double, value_rows_dense_fraction, -1.0,
          "xnnpack: read every value row when more than this fraction of neurons fire (0: always "
          "every row, 1: always only the firing ones; -1: the default)");

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

std::vector<int64_t> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      std::fprintf(stderr, "--%s: '%s' is not a list of positive integers\n", flag.c_str(),
                   text.c_str());
      std::exit(2);
    }
    values.push_back(v);
  }
  return values;
}

// Work per call, over every layer: bytes of weights read at decode (f32 as packed, f16/bf16 dense
// layers as stored in the file, which the direct kernel reads; for MoE the bytes actually needed:
// the router and shared experts as packed (f32), top_k routed experts as stored in the file) and
// FLOPs per token; and what the packed weights take.
struct Work {
  double weight_bytes = 0.0;
  double flops_per_token = 0.0;
  double routed_flops_per_token = 0.0;  // MoE: the top_k routed experts' share
  double expert_bytes = 0.0;      // every routed expert, packed (what a budget limits)
  double non_expert_bytes = 0.0;  // everything else, f32: dense layers, routers, shared experts
  bool moe = false;
  bool quantized = false;  // some weight matrix is I8/I4
  bool has_i8 = false, has_i4 = false;
  bool reads_file = false;  // some weights are read from the mapping (quantised, f16/bf16 dense)
  double value_rows_bytes = 0.0;  // of weight_bytes: dense down matrices stored as value rows
  double reglu_up_bytes = 0.0;    // of weight_bytes: up matrices of dense ReGLU FFNs (float)
};

Work CountWork(const Model& model) {
  Work w;
  // Bytes read: quantised matrices as stored (data + scales, read from the file), float ones at
  // `bytes_per_weight` (4 as packed, or the file's element size for the direct kernel).
  auto ffn = [](const FfnView& f, double bytes_per_weight, Work* out, double times) {
    const double matrix = static_cast<double>(f.d_model) * f.d_ff_padded;
    const double params = matrix * (f.gated ? 3 : 2);
    for (const TensorView* t : {&f.up, &f.gate, &f.down}) {
      if (!t->present()) continue;
      out->weight_bytes +=
          times * (t->quantized() ? static_cast<double>(t->size) : matrix * bytes_per_weight);
      out->quantized |= t->quantized();
      out->has_i8 |= t->dtype == DType::I8;
      out->has_i4 |= t->dtype == DType::I4;
    }
    out->flops_per_token += times * 2.0 * params;
  };
  auto f32_ffn = [](const FfnView& f) {
    return 4.0 * f.d_model * f.d_ff_padded * (f.gated ? 3 : 2);
  };
  for (const LayerView& l : model.layers()) {
    w.non_expert_bytes += 4.0 * model.d_model() * (l.norm.present ? 2 : 0);
    if (l.kind == LayerKind::kDense) {
      // Dense f16/bf16 layers decode on the file's rows (the direct kernel); f32 ones packed.
      bool half = true;
      for (const TensorView* t : {&l.ffn.up, &l.ffn.gate, &l.ffn.down}) {
        if (t->present() && !t->quantized() && t->dtype == DType::F32) half = false;
      }
      ffn(l.ffn, half ? 2.0 : 4.0, &w, 1.0);
      w.reads_file |= half || l.ffn.down.value_rows();
      if (l.ffn.gated && l.ffn.activation == Activation::RELU && !l.ffn.up.quantized()) {
        w.reglu_up_bytes += (half || l.ffn.down.value_rows() ? DTypeSize(l.ffn.up.dtype) : 4.0) *
                            l.ffn.d_model * l.ffn.d_ff_padded;
      }
      if (l.ffn.down.value_rows()) {
        w.value_rows_bytes += static_cast<double>(DTypeSize(l.ffn.down.dtype)) *
                              l.ffn.d_model * l.ffn.d_ff_padded;
      }
      w.non_expert_bytes += f32_ffn(l.ffn);
    } else {
      w.moe = true;
      for (const FfnView& e : l.moe.experts) w.expert_bytes += XnnpackPackedFfnBytes(e);
      w.non_expert_bytes += 4.0 * (l.moe.router.numel() + l.moe.shared_expert_gate.numel());
      for (const FfnView& s : l.moe.shared_experts) w.non_expert_bytes += f32_ffn(s);
      w.weight_bytes += 4.0 * l.moe.router.numel();
      w.flops_per_token += 2.0 * l.moe.router.numel();
      const double before = w.flops_per_token;
      ffn(l.moe.experts[0], static_cast<double>(DTypeSize(l.moe.experts[0].up.dtype)), &w,
          l.moe.top_k);
      w.routed_flops_per_token += w.flops_per_token - before;
      for (const FfnView& s : l.moe.shared_experts) ffn(s, 4.0, &w, 1.0);
    }
  }
  return w;
}

struct Stats {
  double median = 0, min = 0, max = 0;  // seconds
};

Stats Summarise(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back()};
}

// Runs every layer in turn (each layer's output is the next one's input), on runner `r % n` of
// each set. With two sets (ours, baseline) the runs alternate, so that the load of a shared
// machine falls on both alike, and so does the order within a repetition.
// With `vary`, each repetition takes the next of 64 random inputs (made before timing).
absl::Status Time(const std::vector<std::vector<std::unique_ptr<Backend>>*>& sets,
                  const Model& model, size_t tokens, int warmup, int reps, bool vary,
                  std::vector<Stats>* stats, double* paired, Stats* routed,
                  double* routed_bytes, ExpertsAloneCount* alone) {
  const size_t d = model.d_model();
  std::vector<std::vector<float>> inputs(vary ? 64 : 1, std::vector<float>(tokens * d));
  std::vector<float> a, b(tokens * d);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& input : inputs) {
    for (float& v : input) v = dist(gen);
  }
  std::vector<std::vector<double>> times(sets.size());
  std::vector<double> routed_times;  // the first set's, per call
  double routed_read = 0;            // the first set's bytes read by routed experts, all calls
  ExpertsAloneCount alone_sum;       // the first set's routed batches, all calls
  // Every runner's first call is untimed (it may prepare weights: dense layers and experts are
  // packed on first use).
  for (const auto* set : sets) warmup = std::max(warmup, static_cast<int>(set->size()));
  for (int r = 0; r < warmup + reps; ++r) {
    for (size_t k = 0; k < sets.size(); ++k) {
      // Which set goes first alternates too: on this class of machine the first of two
      // back-to-back runs measured ~10-20% slower in an A/A test (ours against ours).
      const size_t s = (k + static_cast<size_t>(r)) % sets.size();
      Backend& runner = *(*sets[s])[static_cast<size_t>(r) % sets[s]->size()];
      a = inputs[static_cast<size_t>(r) % inputs.size()];
      const double routed_before = XnnpackRoutedExpertSeconds(&runner);
      const uint64_t read_before = XnnpackRoutedExpertBytes(&runner);
      const ExpertsAloneCount alone_before = XnnpackExpertsAlone(&runner);
      const double t = Now();
      for (size_t l = 0; l < model.layers().size(); ++l) {
        FFLITE_RETURN_IF_ERROR(runner.Run(l, a.data(), tokens, b.data()));
        std::swap(a, b);
      }
      if (r >= warmup) times[s].push_back(Now() - t);
      if (r >= warmup && s == 0) {
        routed_times.push_back(XnnpackRoutedExpertSeconds(&runner) - routed_before);
        routed_read += static_cast<double>(XnnpackRoutedExpertBytes(&runner) - read_before);
        const ExpertsAloneCount alone_after = XnnpackExpertsAlone(&runner);
        alone_sum.alone += alone_after.alone - alone_before.alone;
        alone_sum.batches += alone_after.batches - alone_before.batches;
      }
    }
  }
  stats->clear();
  for (auto& t : times) stats->push_back(Summarise(t));
  // With two sets: the median over repetitions of the second's time over the first's in the
  // same repetition (a spell of a shared machine falls on both sides of a pair alike).
  std::vector<double> ratios;
  for (size_t r = 0; times.size() == 2 && r < times[0].size(); ++r) {
    ratios.push_back(times[1][r] / times[0][r]);
  }
  *paired = ratios.empty() ? 0.0 : Summarise(ratios).median;
  *routed = Summarise(routed_times);
  *routed_bytes =
      routed_times.empty() ? 0.0 : routed_read / static_cast<double>(routed_times.size());
  *alone = alone_sum;
  return absl::OkStatus();
}

struct Row {
  std::string backend;
  int threads = 1;
  size_t tokens = 1;
  Stats ours, base;
  double paired = 0;  // with a baseline: the median of base / ours over the repetitions
  Stats routed;  // MoE, xnnpack: time in the routed experts
  bool has_base = false;
  double gbs = 0, gflops = 0, roof_pct = 0, peak_pct = 0;
  double routed_gflops = 0, routed_peak_pct = 0;
  // MoE: bytes the routed experts read per call (the forms their batches ran on), that read's
  // time at the measured bandwidth, and the FMA-peak ratios it allows: with the read overlapped
  // by the arithmetic, and with the two one after the other.
  double routed_bytes = 0, routed_read_ms = 0, routed_bound_pct = 0, routed_serial_pct = 0;
  // MoE, xnnpack: the routed batches over the timed calls, and how many of them ran whole on one
  // thread each (XnnpackBackendOptions::experts_alone).
  ExpertsAloneCount alone;
  ValueRowsRead value_rows;  // xnnpack, value-row models: rows read in the timed calls
  bool int8 = false;  // peak_pct is of the int8 dot-product peak (quantised, int8 path)
};

// Sparse decode: the fraction of down's value rows and of ReGLU up rows read (1 where none were
// skippable), and the weight bytes read per call with them.
double DownFraction(const Row& r) {
  return r.value_rows.total > 0 ? static_cast<double>(r.value_rows.read) / r.value_rows.total
                                : 1.0;
}
double UpFraction(const Row& r) {
  return r.value_rows.up_total > 0
             ? static_cast<double>(r.value_rows.up_read) / r.value_rows.up_total
             : 1.0;
}
double BytesRead(const Work& w, const Row& r) {
  return w.weight_bytes - (1.0 - DownFraction(r)) * w.value_rows_bytes -
         (1.0 - UpFraction(r)) * w.reglu_up_bytes;
}

// The xnnpack backend's options from the tuning flags.
absl::StatusOr<XnnpackBackendOptions> BenchXnnpackOptions() {
  XnnpackBackendOptions options;
  const std::string engine = absl::GetFlag(FLAGS_engine);
  if (engine == "gemm") {
    options.packed_engine = XnnpackBackendOptions::PackedEngine::kGemm;
  } else if (engine == "xnnpack") {
    options.packed_engine = XnnpackBackendOptions::PackedEngine::kXnnpack;
  } else if (engine != "auto") {
    return absl::InvalidArgumentError("--engine: auto, gemm or xnnpack, not " + engine);
  }
  const std::string isa = absl::GetFlag(FLAGS_gemm_isa);
  if (!isa.empty()) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (const GemmKernel* g : AvailableGemmKernels(dtype)) {
        if (isa == g->isa) (dtype == DType::F32 ? options.gemm_f32 : options.gemm_bf16) = g;
      }
    }
    if (options.gemm_f32 == nullptr && options.gemm_bf16 == nullptr) {
      return absl::InvalidArgumentError("--gemm_isa: this CPU has no gemm kernel " + isa);
    }
  }
  options.bf16_arithmetic = absl::GetFlag(FLAGS_bf16_arithmetic);
  options.half_panels = absl::GetFlag(FLAGS_half_panels);
  options.experts_alone = absl::GetFlag(FLAGS_experts_alone);
  const std::string ahead = absl::GetFlag(FLAGS_gemm_ahead);
  using GemmAhead = XnnpackBackendOptions::GemmAhead;
  if (ahead == "on") {
    options.gemm_ahead = GemmAhead::kOn;
  } else if (ahead == "off") {
    options.gemm_ahead = GemmAhead::kOff;
  } else if (ahead != "auto") {
    return absl::InvalidArgumentError("--gemm_ahead: auto, on or off, not " + ahead);
  }
  return options;
}

// A session's backend, made the way Session::Create makes it (or with the xnnpack tuning flags).
// dense_fraction >= 0 overrides --value_rows_dense_fraction.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const Model& model, const std::string& name,
                                                     const BackendConfig& config,
                                                     double dense_fraction = -1.0) {
  if (name == "xnnpack") {
    auto bench_options = BenchXnnpackOptions();
    if (!bench_options.ok()) return bench_options.status();
    XnnpackBackendOptions options = *bench_options;
    options.time_routed_experts = true;
    if (absl::GetFlag(FLAGS_value_rows_dense_fraction) >= 0.0) {
      options.value_rows_dense_fraction = absl::GetFlag(FLAGS_value_rows_dense_fraction);
    }
    if (dense_fraction >= 0.0) options.value_rows_dense_fraction = dense_fraction;
    if (absl::GetFlag(FLAGS_expert_slice_kib) >= 0) {
      options.expert_slice_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_expert_slice_kib)) * 1024;
    }
    if (absl::GetFlag(FLAGS_direct_tokens) >= 0) {
      options.direct_max_tokens = static_cast<size_t>(absl::GetFlag(FLAGS_direct_tokens));
    }
    if (absl::GetFlag(FLAGS_slice_kib) >= 0) {
      options.slice_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_slice_kib)) * 1024;
    }
    if (absl::GetFlag(FLAGS_quant_gemm_tokens) >= 0) {
      options.quant_gemm_min_tokens = static_cast<size_t>(absl::GetFlag(FLAGS_quant_gemm_tokens));
    }
    if (absl::GetFlag(FLAGS_token_chunk) > 0) {
      options.token_chunk = static_cast<size_t>(absl::GetFlag(FLAGS_token_chunk));
    }
    return CreateXnnpackBackendWithOptions(model, config, options);
  }
  const BackendEntry* entry = FindBackend(name);
  if (entry == nullptr) return absl::InvalidArgumentError("unknown backend " + name);
  return entry->create(model, config);
}

// --vs: the tuning flags that the baseline sets otherwise.
constexpr const char* kVsFlags[] = {
    "engine",      "gemm_isa",         "bf16_arithmetic", "half_panels",       "gemm_ahead",
    "slice_kib",   "token_chunk",      "expert_slice_kib", "direct_tokens",    "quant_gemm_tokens",
    "value_rows_dense_fraction", "experts_alone"};

using FlagValues = std::vector<std::pair<std::string, std::string>>;

// Sets each flag of `values` (in order) and returns the values they had, for SetFlags to put
// back in reverse order. Fails, naming the pair, where a value does not parse; the flags before it
// are then set back.
absl::StatusOr<FlagValues> SetFlags(const FlagValues& values) {
  FlagValues before;
  for (const auto& [name, value] : values) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string error;
    const std::string current = flag != nullptr ? flag->CurrentValue() : "";
    if (flag == nullptr || !flag->ParseFrom(value, &error)) {
      for (auto it = before.rbegin(); it != before.rend(); ++it) {
        absl::FindCommandLineFlag(it->first)->ParseFrom(it->second, &error);
      }
      return absl::InvalidArgumentError(absl::StrFormat(
          "--vs: %s=%s: %s", name, value, flag == nullptr ? "no such flag" : error));
    }
    before.emplace_back(name, current);
  }
  std::reverse(before.begin(), before.end());
  return before;
}

// --vs's pairs, checked: each a tuning flag with a value it parses.
absl::StatusOr<FlagValues> ParseVs(const std::string& spec) {
  FlagValues values;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const size_t eq = item.find('=');
    const std::string name(item.substr(0, eq));
    if (eq == absl::string_view::npos || name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--vs: '%s' is not flag=value", std::string(item)));
    }
    if (std::find_if(std::begin(kVsFlags), std::end(kVsFlags),
                     [&](const char* f) { return name == f; }) == std::end(kVsFlags)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--vs: %s is not one of the tuning flags (%s)", name,
          absl::StrJoin(std::begin(kVsFlags), std::end(kVsFlags), ", ")));
    }
    values.emplace_back(name, std::string(item.substr(eq + 1)));
  }
  if (values.empty()) return absl::InvalidArgumentError("--vs: no flag=value given");
  FFLITE_ASSIGN_OR_RETURN(FlagValues before, SetFlags(values));
  FFLITE_RETURN_IF_ERROR(SetFlags(before).status());
  return values;
}

// `make()` with the flags of `values` set, and then as they were.
template <typename Make>
auto WithFlags(const FlagValues& values, Make make) -> decltype(make()) {
  FFLITE_ASSIGN_OR_RETURN(FlagValues before, SetFlags(values));
  auto made = make();
  FFLITE_RETURN_IF_ERROR(SetFlags(before).status());
  return made;
}

// What packs float matrices in the xnnpack backend this run makes.
std::string PackedEngineName() {
  auto options = BenchXnnpackOptions();
  return options.ok() ? XnnpackPackedEngineName(*options) : "";
}

std::string ResolveBackend(const std::string& name) {
  if (name != "auto") return name;
  for (const BackendEntry& e : Backends()) {
    std::string why;
    if (e.auto_choice && e.available(&why)) return e.name;
  }
  return "reference";
}

std::optional<DType> ParseDTypeName(const std::string& name) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::I4}) {
    if (name == DTypeName(d)) return d;
  }
  return std::nullopt;
}

int Main() {
  const std::string model_path = absl::GetFlag(FLAGS_model);
  const std::string synthetic = absl::GetFlag(FLAGS_synthetic);
  if (model_path.empty() == synthetic.empty()) {
    std::fprintf(stderr,
                 "give exactly one of --model PATH or --synthetic "
                 "llama|llama-70b|bert|tiny|tiny-moe|mixtral-mini|qwen-moe\n");
    return 2;
  }
  const std::vector<int64_t> token_list = ParseList("tokens", absl::GetFlag(FLAGS_tokens));
  const std::vector<int64_t> thread_list = ParseList("threads", absl::GetFlag(FLAGS_threads));
  const std::string backend = ResolveBackend(absl::GetFlag(FLAGS_backend));
  const bool json = absl::GetFlag(FLAGS_json);
  // What the baseline is: plain XNNPACK, or one of these.
  const int against = absl::GetFlag(FLAGS_aa) + absl::GetFlag(FLAGS_vs_unbudgeted) +
                      absl::GetFlag(FLAGS_vs_dense) + !absl::GetFlag(FLAGS_vs).empty();
  if (against > 1) {
    std::fprintf(stderr, "give at most one of --aa, --vs_unbudgeted, --vs_dense and --vs\n");
    return 2;
  }
  FlagValues vs;
  if (!absl::GetFlag(FLAGS_vs).empty()) {
    absl::StatusOr<FlagValues> parsed = ParseVs(absl::GetFlag(FLAGS_vs));
    if (!parsed.ok()) {
      std::fprintf(stderr, "%s\n", std::string(parsed.status().message()).c_str());
      return 2;
    }
    if (!absl::GetFlag(FLAGS_baseline) || backend != "xnnpack") {
      std::fprintf(stderr, "--vs compares two xnnpack sessions: give it with --baseline and the "
                           "xnnpack backend (this run's backend: %s)\n", backend.c_str());
      return 2;
    }
    vs = std::move(*parsed);
  }

  // The model: a file, or the synthetic shape written with the writer into a temporary file (so
  // that it is mapped like a real model and its pages can be released after packing).
  std::string path = model_path;
  if (!synthetic.empty()) {
    absl::StatusOr<ModelSpec> spec = SyntheticSpec(synthetic);
    if (!spec.ok()) {
      std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
      return 2;
    }
    const char* tmp = std::getenv("TMPDIR");
    path = absl::StrFormat("%s/fflite-bench-%d-%s.fflite", tmp != nullptr ? tmp : "/tmp",
                           static_cast<int>(getpid()), synthetic);
    WriteOptions write;
    auto dtype = ParseDTypeName(absl::GetFlag(FLAGS_dtype));
    if (!dtype.has_value()) {
      std::fprintf(stderr, "--dtype: '%s' is not one of f32, f16, bf16, i8, i4\n",
                   absl::GetFlag(FLAGS_dtype).c_str());
      return 2;
    }
    const DType matrices = *dtype;
    write.matrix_dtype = [matrices](const std::string&, DType) { return matrices; };
    if (absl::GetFlag(FLAGS_sparsity) >= 0.0) {
      const absl::Status sparse = SetSparsity(absl::GetFlag(FLAGS_sparsity), &*spec);
      if (!sparse.ok()) {
        std::fprintf(stderr, "%s\n", std::string(sparse.message()).c_str());
        return 2;
      }
    }
    if (absl::GetFlag(FLAGS_value_rows)) {
      write.down_value_rows = [](const std::string&, const FfnSpec& f) {
        return f.activation == Activation::RELU;
      };
    }
    write.quantize.rotate = absl::GetFlag(FLAGS_rotate);
    const absl::Status st = WriteModelFile(*spec, write, path);
    if (!st.ok()) {
      std::fprintf(stderr, "writing the synthetic model: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  if (synthetic.empty() && absl::GetFlag(FLAGS_sparsity) >= 0.0) {
    std::fprintf(stderr, "--sparsity applies to --synthetic models only\n");
    return 2;
  }
  // File read time: one sequential read() of the whole file (from the page cache if it is there).
  double read_s = 0.0;
  {
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
      std::vector<char> buf(size_t{16} << 20);
      const double t = Now();
      while (read(fd, buf.data(), buf.size()) > 0) {
      }
      read_s = Now() - t;
      close(fd);
    }
  }
  // The file's bytes, kept for cold copies of a model read in place (see below).
  std::vector<uint8_t> file_bytes;
  if (absl::GetFlag(FLAGS_cold)) {
    std::ifstream in(path, std::ios::binary);
    file_bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const double t_load = Now();
  absl::StatusOr<std::unique_ptr<Model>> loaded = Model::LoadFile(path);
  const double load_s = Now() - t_load;
  // --vs_unbudgeted compares with unbudgeted sessions on a second mapping of the file: a budget
  // releases expert pages of its model's mapping, which would slow other sessions of that model.
  absl::StatusOr<std::unique_ptr<Model>> second = std::unique_ptr<Model>();
  if (absl::GetFlag(FLAGS_vs_unbudgeted)) second = Model::LoadFile(path);
  if (!synthetic.empty()) std::remove(path.c_str());  // the mappings keep it alive
  if (!loaded.ok() || !second.ok()) {
    std::fprintf(stderr, "%s\n",
                 (loaded.ok() ? second.status() : loaded.status()).ToString().c_str());
    return 1;
  }
  const Model& model = **loaded;
  const Work work = CountWork(model);
#ifdef FFLITE_HAVE_CUDA
  if (backend == "cuda") {
    return RunCudaBench(model, work.flops_per_token, token_list,
                        absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_reps));
  }
#endif
  const double budget_fraction = absl::GetFlag(FLAGS_expert_budget_fraction);
  const uint64_t budget =
      budget_fraction > 0 ? std::max<uint64_t>(1, static_cast<uint64_t>(budget_fraction *
                                                                        work.expert_bytes))
                          : 0;
  // Packed bytes of one session: what the cold mode's copies cost.
  const double packed_bytes =
      work.non_expert_bytes + (budget > 0 ? std::min<double>(budget, work.expert_bytes)
                                          : work.expert_bytes);

  // The roofline of this machine, measured now, with one thread and with each thread count of
  // the run (all threads at once: a multi-thread row is held against what that many threads
  // measure, not against the one-thread figure times the threads).
  // Measured again after the runs, each figure the larger of its two measurements (one_before and
  // one_after: one thread's), so that a probe that ran in a slow second on a shared machine does
  // not inflate the percentages (on a VM, one run read 131% of an FMA peak probed low).
  const size_t bw_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_bandwidth_mib)) << 20;
  double bw = MeasureReadBandwidth(bw_bytes, 5);
  FmaPeak peak = MeasureFmaPeak();
  // The gemm microkernel in L1 beside it (before and after the runs, each with its FMA peak).
  const GemmL1Rate gemm_l1_before = MeasureGemmL1Rate();
  // Quantised models: the int8 dot-product peak too (the many-token kernels' limit).
  DotPeak dot = work.quantized ? MeasureInt8DotPeak() : DotPeak();
  struct Roof {
    double bw = 0, fma = 0, dot = 0;
  };
  auto measure_roof = [&](int64_t t) {
    const int n = static_cast<int>(t);
    return Roof{MeasureReadBandwidth(bw_bytes, 5, n), MeasureFmaPeak(n).gflops,
                work.quantized ? MeasureInt8DotPeak(n).gops : 0.0};
  };
  std::vector<std::pair<int64_t, Roof>> roofs;  // (threads, roofline of that many threads)
  for (int64_t t : thread_list) {
    roofs.emplace_back(t, t > 1 ? measure_roof(t) : Roof{bw, peak.gflops, dot.gops});
  }
  const Roof one_before{bw, peak.gflops, dot.gops};
  auto roof_at = [&roofs](int64_t t) {
    for (const auto& [threads, r] : roofs) {
      if (threads == t) return r;
    }
    return Roof();
  };
  // The fewest tokens taking the int8 path, per dtype, and the fewest for any matrix of the model
  // (0: never).
  auto gemm_tokens_of = [](DType dtype) {
    return absl::GetFlag(FLAGS_quant_gemm_tokens) >= 0
               ? static_cast<size_t>(absl::GetFlag(FLAGS_quant_gemm_tokens))
               : DefaultQuantGemmMinTokens(dtype, BestQGemvKernel(), BestQGemmKernel());
  };
  const size_t gemm_tokens_i8 = gemm_tokens_of(DType::I8), gemm_tokens_i4 = gemm_tokens_of(DType::I4);
  const size_t gemm_tokens = work.has_i4 && (!work.has_i8 || gemm_tokens_i4 < gemm_tokens_i8)
                                 ? gemm_tokens_i4
                                 : gemm_tokens_i8;

  // Cold mode: enough copies of the packed weights that the caches hold none of them by the time
  // a copy is used again (> 4x LLC), bounded by half of the available memory.
  const bool cold = absl::GetFlag(FLAGS_cold);
  if (absl::GetFlag(FLAGS_cold_copies) < 0) {
    std::fprintf(stderr, "--cold_copies must be 0 (automatic) or more\n");
    return 1;
  }
  bool with_base = absl::GetFlag(FLAGS_baseline);
  // The last-level cache, or 32 MiB where cpuinfo cannot tell (it failed, or reports no caches,
  // as on a Zen 5 VM that hides AMD's cache leaves).
  const double llc_reported = cpuinfo_initialize() ? cpuinfo_get_max_cache_size() : 0.0;
  const double llc = llc_reported > 0 ? llc_reported : (32u << 20);
  size_t copies = 1;
  if (cold) {
    const int asked = absl::GetFlag(FLAGS_cold_copies);
    const size_t automatic =
        std::max<size_t>(2, static_cast<size_t>(std::ceil(4.0 * llc / work.weight_bytes)));
    copies = asked > 0 ? static_cast<size_t>(asked) : automatic;
    const double avail = ProcKb("/proc/meminfo", "MemAvailable") * 1024.0;
    const size_t fit = static_cast<size_t>(avail / 2 / (packed_bytes * (with_base ? 2 : 1)));
    copies = std::max<size_t>(1, std::min(copies, fit));
  }

  // Quantised weights and f16/bf16 dense layers are read from the model's mapping, not packed:
  // cold copies need copies of the file's bytes (each its own model over its own buffer).
  std::vector<std::unique_ptr<Model>> cold_models;
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> cold_buffers;
  if (cold && (work.quantized || work.reads_file)) {
    for (size_t c = 1; c < copies; ++c) {
      const size_t size = static_cast<size_t>(model.file_size());
      cold_buffers.emplace_back(static_cast<uint8_t*>(std::aligned_alloc(65536, (size + 65535) / 65536 * 65536)), &std::free);
      if (cold_buffers.back() == nullptr) {
        std::fprintf(stderr, "cold copies: out of memory\n");
        return 1;
      }
      std::memcpy(cold_buffers.back().get(), file_bytes.data(), size);
      absl::StatusOr<std::unique_ptr<Model>> m = Model::LoadBuffer(cold_buffers.back().get(), size);
      if (!m.ok()) {
        std::fprintf(stderr, "cold copies: %s\n", m.status().ToString().c_str());
        return 1;
      }
      cold_models.push_back(std::move(*m));
    }
  }
  file_bytes.clear();
  file_bytes.shrink_to_fit();

  std::vector<Row> rows;
  double create_s = 0.0, rss_before = RssMb(), rss_one = 0.0, rss_all = 0.0, rss_end = 0.0;
  double first_call_s = 0.0;  // the first session's first call of the largest token count
  uint64_t resident_experts = 0;
  std::vector<std::pair<size_t, std::vector<uint64_t>>> histograms;  // (layer, counts)
  for (int64_t threads : thread_list) {
    BackendConfig config;
    config.num_threads = static_cast<int>(threads);
    config.max_tokens =
        static_cast<size_t>(*std::max_element(token_list.begin(), token_list.end()));
    config.expert_budget_bytes = budget;
    BackendConfig unbudgeted = config;
    unbudgeted.expert_budget_bytes = 0;
    std::vector<std::unique_ptr<Backend>> ours, base;
    // --capture: the buffers of every copy of ours (a list: pointers into it stay valid).
    std::list<std::vector<float>> capture_h, capture_weights;
    std::list<std::vector<int32_t>> capture_experts;
    // Copies of ours and of the baseline are created in turn, so that neither gets all the
    // memory allocated first (an A/A run on this VM showed the set created first ~15% slower at
    // cold decode).
    for (size_t c = 0; c < copies; ++c) {
      const double t = Now();
      absl::StatusOr<std::unique_ptr<Backend>> b =
          MakeBackend(c == 0 || cold_models.empty() ? model : *cold_models[c - 1], backend, config);
      if (!b.ok()) {
        std::fprintf(stderr, "creating %s: %s\n", backend.c_str(), b.status().ToString().c_str());
        return 1;
      }
      if (c == 0 && threads == thread_list.front()) {
        create_s = Now() - t;
        rss_one = RssMb();
      }
      if (absl::GetFlag(FLAGS_capture)) {
        // Buffers for max_tokens rows of every layer (kept for the run), as the session sets them.
        NeuronCapture& nc = (*b)->neuron_capture();
        nc.Init(model.layers().size());
        for (size_t l = 0; l < model.layers().size(); ++l) {
          const LayerView& lv = model.layers()[l];
          LayerCapture lc;
          const bool moe = lv.kind == LayerKind::kMoe;
          lc.d_ff = moe ? lv.moe.experts.front().d_ff : lv.ffn.d_ff;
          lc.top_k = moe ? lv.moe.top_k : 1;
          capture_h.emplace_back(config.max_tokens * lc.top_k * lc.d_ff);
          lc.h = capture_h.back().data();
          if (moe) {
            capture_experts.emplace_back(config.max_tokens * lc.top_k);
            capture_weights.emplace_back(config.max_tokens * lc.top_k);
            lc.experts = capture_experts.back().data();
            lc.weights = capture_weights.back().data();
          }
          nc.Set(l, lc);
        }
      }
      ours.push_back(std::move(*b));
      if (with_base) {
        if (absl::GetFlag(FLAGS_aa)) {
          b = MakeBackend(model, backend, config);
        } else if (!vs.empty()) {
          // The same copy of the weights as ours[c], packed by the baseline's own engine.
          b = WithFlags(vs, [&] {
            return MakeBackend(c == 0 || cold_models.empty() ? model : *cold_models[c - 1],
                               backend, config);
          });
        } else if (absl::GetFlag(FLAGS_vs_unbudgeted)) {
          b = MakeBackend(**second, backend, unbudgeted);
        } else if (absl::GetFlag(FLAGS_vs_dense)) {
          // The same copy of the weights as ours[c], every value row read.
          b = MakeBackend(c == 0 || cold_models.empty() ? model : *cold_models[c - 1], backend,
                          config, /*dense_fraction=*/0.0);
        } else {
          b = CreateBaseline(model, config);
        }
        if (absl::IsUnimplemented(b.status())) {
          std::fprintf(stderr, "no baseline: %s\n", std::string(b.status().message()).c_str());
          with_base = false;
        } else if (!b.ok()) {
          std::fprintf(stderr, "baseline: %s\n", b.status().ToString().c_str());
          return 1;
        } else {
          base.push_back(std::move(*b));
        }
      }
    }
    if (threads == thread_list.front()) {
      // The first call prepares what it needs (packing on first use): timed on its own.
      const size_t n = config.max_tokens, d = model.d_model();
      std::vector<float> a(n * d, 0.5f), b(n * d);
      const double t = Now();
      for (size_t l = 0; l < model.layers().size(); ++l) {
        const absl::Status st = ours[0]->Run(l, a.data(), n, b.data());
        if (!st.ok()) {
          std::fprintf(stderr, "first call: %s\n", st.ToString().c_str());
          return 1;
        }
        std::swap(a, b);
      }
      first_call_s = Now() - t;
      rss_all = RssMb();
    }
    for (int64_t tokens : token_list) {
      Row row;
      row.backend = backend;
      row.threads = static_cast<int>(threads);
      row.tokens = static_cast<size_t>(tokens);
      std::vector<std::vector<std::unique_ptr<Backend>>*> sets = {&ours};
      if (with_base) sets.push_back(&base);
      std::vector<Stats> stats;
      ValueRowsRead rows_before;
      for (const auto& o : ours) {
        const ValueRowsRead v = XnnpackValueRowsRead(o.get());
        rows_before.read += v.read;
        rows_before.total += v.total;
        rows_before.up_read += v.up_read;
        rows_before.up_total += v.up_total;
      }
      const absl::Status st = Time(sets, model, row.tokens, absl::GetFlag(FLAGS_warmup),
                                   absl::GetFlag(FLAGS_reps), absl::GetFlag(FLAGS_vary_tokens),
                                   &stats, &row.paired, &row.routed, &row.routed_bytes,
                                   &row.alone);
      if (!st.ok()) {
        std::fprintf(stderr, "run: %s\n", st.ToString().c_str());
        return 1;
      }
      row.ours = stats[0];
      for (const auto& o : ours) {
        const ValueRowsRead v = XnnpackValueRowsRead(o.get());
        row.value_rows.read += v.read;
        row.value_rows.total += v.total;
        row.value_rows.up_read += v.up_read;
        row.value_rows.up_total += v.up_total;
      }
      row.value_rows.read -= rows_before.read;
      row.value_rows.total -= rows_before.total;
      row.value_rows.up_read -= rows_before.up_read;
      row.value_rows.up_total -= rows_before.up_total;
      if (with_base) {
        row.base = stats[1];
        row.has_base = true;
      }
      rows.push_back(row);
    }
    if (threads == thread_list.front()) {
      rss_end = RssMb();
      resident_experts = XnnpackResidentExpertBytes(ours.front().get());
      // The expert histogram of this run: every call of every copy of ours.
      for (size_t l = 0; l < model.layers().size(); ++l) {
        if (model.layers()[l].kind != LayerKind::kMoe) continue;
        std::vector<uint64_t> sum(model.layers()[l].moe.num_experts, 0);
        for (const auto& o : ours) {
          const ExpertCounts* c = o->expert_counts();
          if (c == nullptr) continue;
          for (size_t e = 0; e < sum.size(); ++e) sum[e] += c->layer(l)[e];
        }
        histograms.emplace_back(l, std::move(sum));
      }
    }
  }

  // The roofline again, each figure the larger of its two measurements; then every row's ratios.
  const Roof one_after{MeasureReadBandwidth(bw_bytes, 5), MeasureFmaPeak().gflops,
                       work.quantized ? MeasureInt8DotPeak().gops : 0.0};
  const GemmL1Rate gemm_l1_after = MeasureGemmL1Rate();
  bw = std::max(bw, one_after.bw);
  peak.gflops = std::max(peak.gflops, one_after.fma);
  dot.gops = std::max(dot.gops, one_after.dot);
  for (auto& [t, r] : roofs) {
    const Roof again = t > 1 ? measure_roof(t) : Roof{bw, peak.gflops, dot.gops};
    r = {std::max(r.bw, again.bw), std::max(r.fma, again.fma), std::max(r.dot, again.dot)};
  }
  for (Row& row : rows) {
    const double flops = work.flops_per_token * static_cast<double>(row.tokens);
    row.gbs = work.weight_bytes / row.ours.median / 1e9;
    row.gflops = flops / row.ours.median / 1e9;
    // Roofline time: the larger of streaming the weights once at the bandwidth and the FLOPs at
    // the FMA peak that this many threads measured. Quantised models taking the int8 path: the
    // int8 dot-product peak instead of the FMA's.
    const bool int8 = work.quantized && gemm_tokens != 0 && row.tokens >= gemm_tokens;
    const Roof roof = roof_at(row.threads);
    const double compute_peak = int8 ? roof.dot : roof.fma;
    const double roof_s =
        std::max(work.weight_bytes / (roof.bw * 1e9), flops / (compute_peak * 1e9));
    row.roof_pct = 100.0 * roof_s / row.ours.median;
    row.peak_pct = 100.0 * row.gflops / compute_peak;
    row.int8 = int8;
    if (work.moe && row.routed.median > 0) {
      row.routed_gflops = work.routed_flops_per_token * static_cast<double>(row.tokens) /
                          row.routed.median / 1e9;
      row.routed_peak_pct = 100.0 * row.routed_gflops / roof.fma;
      const double fma_s =
          work.routed_flops_per_token * static_cast<double>(row.tokens) / (roof.fma * 1e9);
      const double routed_read_s = row.routed_bytes / (roof.bw * 1e9);
      row.routed_read_ms = routed_read_s * 1e3;
      row.routed_bound_pct = 100.0 * fma_s / std::max(fma_s, routed_read_s);
      row.routed_serial_pct = 100.0 * fma_s / (fma_s + routed_read_s);
    }
  }

  const std::string what = synthetic.empty() ? model_path : "synthetic " + synthetic;
  if (json) {
    std::printf("{\"model\": \"%s\", \"backend\": \"%s\", \"cold\": %s, \"copies\": %zu,\n",
                what.c_str(), backend.c_str(), cold ? "true" : "false", copies);
    std::printf(" \"packed_engine\": \"%s\",\n",
                backend == "xnnpack" ? PackedEngineName().c_str() : "");
    std::printf(" \"platform\": \"%s\", \"kernels\": \"%s\",\n", PlatformSummary().c_str(),
                fflite::BestKernels().isa);
    std::printf(" \"weight_bytes\": %.0f, \"flops_per_token\": %.0f, \"file_bytes\": %" PRIu64
                ",\n",
                work.weight_bytes, work.flops_per_token, model.file_size());
    std::printf(" \"read_bandwidth_gbs\": %.2f, \"fma_peak_gflops\": %.2f, \"fma_isa\": \"%s\",\n",
                bw, peak.gflops, peak.isa.c_str());
    std::printf(" \"gemm_l1_isa\": \"%s\", \"gemm_l1_gflops_before\": %.2f, "
                "\"gemm_l1_gflops_after\": %.2f, \"fma_peak_gflops_before\": %.2f, "
                "\"fma_peak_gflops_after\": %.2f,\n",
                gemm_l1_before.isa.c_str(), gemm_l1_before.gflops, gemm_l1_after.gflops,
                one_before.fma, one_after.fma);
    std::printf(" \"roofline_by_threads\": [");
    for (size_t i = 0; i < roofs.size(); ++i) {
      std::printf("%s{\"threads\": %d, \"read_bandwidth_gbs\": %.2f, \"fma_peak_gflops\": %.2f, "
                  "\"int8_dot_peak_gops\": %.2f}",
                  i ? ", " : "", static_cast<int>(roofs[i].first), roofs[i].second.bw,
                  roofs[i].second.fma, roofs[i].second.dot);
    }
    std::printf("],\n");
    std::printf(" \"int8_dot_peak_gops\": %.2f, \"int8_dot_isa\": \"%s\", \"qgemv\": \"%s\", "
                "\"qgemm\": \"%s\", \"quant_gemm_min_tokens\": %zu, "
                "\"quant_gemm_min_tokens_i8\": %zu, \"quant_gemm_min_tokens_i4\": %zu,\n",
                dot.gops, dot.isa.c_str(), BestQGemvKernel().isa, BestQGemmKernel().isa,
                gemm_tokens, gemm_tokens_i8, gemm_tokens_i4);
    std::printf(" \"file_read_s\": %.4f, \"load_s\": %.4f, \"create_s\": %.4f, "
                "\"first_call_s\": %.4f,\n",
                read_s, load_s, create_s, first_call_s);
    std::printf(
        " \"rss_before_mb\": %.1f, \"rss_after_create_mb\": %.1f, "
        "\"rss_all_copies_mb\": %.1f,\n",
        rss_before, rss_one, rss_all);
    std::printf(" \"rss_end_mb\": %.1f, \"expert_budget_bytes\": %" PRIu64
                ", \"resident_expert_bytes\": %" PRIu64 ", \"expert_bytes\": %.0f, "
                "\"non_expert_bytes\": %.0f,\n",
                rss_end, budget, resident_experts, work.expert_bytes, work.non_expert_bytes);
    std::printf(" \"expert_histogram\": {");
    for (size_t h = 0; h < histograms.size(); ++h) {
      std::printf("%s\"%zu\": [", h == 0 ? "" : ", ", histograms[h].first);
      for (size_t e = 0; e < histograms[h].second.size(); ++e) {
        std::printf("%s%" PRIu64, e == 0 ? "" : ", ", histograms[h].second[e]);
      }
      std::printf("]");
    }
    std::printf("},\n");
    std::printf(" \"runs\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf(
          "  {\"threads\": %d, \"tokens\": %zu, \"median_ms\": %.4f, \"min_ms\": %.4f, "
          "\"max_ms\": %.4f, \"weight_gbs\": %.3f, \"gflops\": %.3f, \"roofline_pct\": %.2f, "
          "\"%s_peak_pct\": %.2f, \"routed_median_ms\": %.4f, \"routed_fma_peak_pct\": %.2f, "
          "\"routed_read_mb\": %.3f, \"routed_bound_pct\": %.2f, \"routed_serial_pct\": %.2f",
          r.threads, r.tokens, r.ours.median * 1e3, r.ours.min * 1e3, r.ours.max * 1e3, r.gbs,
          r.gflops, r.roof_pct, r.int8 ? "int8_dot" : "fma", r.peak_pct, r.routed.median * 1e3,
          r.routed_peak_pct, r.routed_bytes / 1e6, r.routed_bound_pct, r.routed_serial_pct);
      if (r.alone.batches > 0) {
        std::printf(", \"routed_batches\": %" PRIu64 ", \"routed_alone_batches\": %" PRIu64,
                    r.alone.batches, r.alone.alone);
      }
      if (r.value_rows.total > 0 || r.value_rows.up_total > 0) {
        std::printf(", \"value_rows_read_pct\": %.3f, \"up_rows_read_pct\": %.3f, "
                    "\"weight_bytes_read\": %.0f",
                    100.0 * DownFraction(r), 100.0 * UpFraction(r), BytesRead(work, r));
      }
      if (r.has_base) {
        std::printf(
            ", \"baseline_median_ms\": %.4f, \"baseline_min_ms\": %.4f, "
            "\"speedup\": %.3f, \"speedup_by_min\": %.3f, \"speedup_paired\": %.3f",
            r.base.median * 1e3, r.base.min * 1e3, r.base.median / r.ours.median,
            r.base.min / r.ours.min, r.paired);
      }
      std::printf("}%s\n", i + 1 < rows.size() ? "," : "");
    }
    std::printf(" ]}\n");
    return 0;
  }
  std::printf("platform: %s; fflite kernels: %s\n", PlatformSummary().c_str(),
              fflite::BestKernels().isa);
  if (backend == "xnnpack") {
    std::printf("packed float matrices: %s\n", PackedEngineName().c_str());
    if (!vs.empty()) {
      const absl::StatusOr<std::string> engine =
          WithFlags(vs, []() -> absl::StatusOr<std::string> { return PackedEngineName(); });
      std::printf("baseline: the same backend with --vs %s (packed float matrices: %s)\n",
                  absl::GetFlag(FLAGS_vs).c_str(), engine.ok() ? engine->c_str() : "?");
    }
#if defined(__x86_64__)
    std::printf("amx-bf16 gemm kernel: %s\n", GemmAmxStatus());
#endif
  }
  std::printf("model: %s, %zu layer(s), d_model %u; backend %s%s (%zu cop%s)\n", what.c_str(),
              model.layers().size(), model.d_model(), backend.c_str(), cold ? ", cold" : "", copies,
              copies == 1 ? "y" : "ies");
  std::printf("weights read per call: %.1f MB; %.2f GFLOP per token; file %.1f MB\n",
              work.weight_bytes / 1e6, work.flops_per_token / 1e9, model.file_size() / 1e6);
  std::printf(
      "roofline (measured now, 1 thread; each figure the larger of its measurements before and "
      "after the runs): read %.1f GB/s (%d MiB buffer; %.1f before, %.1f after), FMA peak %.1f "
      "GFLOP/s (%s; %.1f before, %.1f after); LLC %.0f MiB%s\n",
      bw, static_cast<int>(absl::GetFlag(FLAGS_bandwidth_mib)), one_before.bw, one_after.bw,
      peak.gflops, peak.isa.c_str(), one_before.fma, one_after.fma, llc / 1048576.0,
      llc_reported > 0 ? "" : " (not reported by the CPU; assumed)");
  for (const auto& [t, r] : roofs) {
    if (t <= 1) continue;
    std::printf("roofline, %d threads at once: read %.1f GB/s (%.2fx one thread), FMA peak %.1f "
                "GFLOP/s (%.2fx)",
                static_cast<int>(t), r.bw, r.bw / bw, r.fma, r.fma / peak.gflops);
    if (work.quantized) std::printf(", int8 peak %.1f GOP/s (%.2fx)", r.dot, r.dot / dot.gops);
    std::printf("\n");
  }
  // What the FMA peak's percentages can reach: the microkernel's own rate beside each probe.
  auto of_peak = [](double rate, double fma) { return fma > 0 ? 100.0 * rate / fma : 0.0; };
  std::printf("gemm microkernel (%s) on a tile and a panel in L1, 1 thread: %.1f GFLOP/s before "
              "the runs (%.0f%% of that FMA probe), %.1f after (%.0f%%)\n",
              gemm_l1_before.isa.c_str(), gemm_l1_before.gflops,
              of_peak(gemm_l1_before.gflops, one_before.fma), gemm_l1_after.gflops,
              of_peak(gemm_l1_after.gflops, one_after.fma));
  if (work.quantized) {
    std::printf(
        "quantised weights: int8 dot-product peak %.1f GOP/s (%s); kernels qgemv %s (float "
        "activations), qgemm %s (int8 activations: i8 from %s, i4 from %s tokens)\n",
        dot.gops, dot.isa.c_str(), BestQGemvKernel().isa, BestQGemmKernel().isa,
        gemm_tokens_i8 != 0 ? absl::StrCat(gemm_tokens_i8).c_str() : "no",
        gemm_tokens_i4 != 0 ? absl::StrCat(gemm_tokens_i4).c_str() : "no");
  }
  std::printf(
      "file read %.3f s, load+validate %.4f s, session creation %.3f s, first call of %d tokens "
      "(prepares the weights it needs) %.3f s\n",
      read_s, load_s, create_s,
      static_cast<int>(*std::max_element(token_list.begin(), token_list.end())), first_call_s);
  std::printf(
      "RSS: %.1f MB before sessions, %.1f MB after one, %.1f MB after all %zu%s (weights "
      "%.1f MB per copy)\n\n",
      rss_before, rss_one, rss_all, copies, with_base ? " + baseline copies" : "",
      work.weight_bytes / 1e6);
  if (work.moe) {
    std::printf(
        "MoE: routed experts %.1f MB packed, non-expert weights %.1f MB; expert budget %s; "
        "weights read per call above = router + chosen + shared experts (decode roofline)\n",
        work.expert_bytes / 1e6, work.non_expert_bytes / 1e6,
        budget > 0 ? absl::StrFormat("%.1f MB (%.3g of the experts)", budget / 1e6,
                                     budget_fraction).c_str()
                   : "none");
    std::printf(
        "after the runs: RSS %.1f MB (+%.1f over before sessions); resident experts (packed "
        "and mapped) of the first session %.1f MB; budget + non-expert weights = %.1f MB per session\n",
        rss_end, rss_end - rss_before, resident_experts / 1e6,
        (budget > 0 ? budget : work.expert_bytes) / 1e6 + work.non_expert_bytes / 1e6);
    for (const auto& [layer, counts] : histograms) {
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
  if (with_base)
    std::printf(" %12s %10s %8s %8s %8s", "base med ms", "base min", "speedup", "(by min)",
                "(paired)");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("%7d %6zu %10.3f %10.3f %10.3f %8.2f %9.2f %6.1f%% %5.1f%%%s", r.threads,
                r.tokens, r.ours.median * 1e3, r.ours.min * 1e3, r.ours.max * 1e3, r.gbs,
                r.gflops, r.roof_pct, r.peak_pct, r.int8 ? " (int8 peak)" : "");
    if (r.has_base) {
      std::printf(" %12.3f %10.3f %7.2fx %7.2fx %7.3fx", r.base.median * 1e3, r.base.min * 1e3,
                  r.base.median / r.ours.median, r.base.min / r.ours.min, r.paired);
    }
    std::printf("\n");
  }
  for (const Row& r : rows) {
    if (r.value_rows.total == 0 && r.value_rows.up_total == 0) continue;
    const double read = BytesRead(work, r);
    const std::string up =
        r.value_rows.up_total > 0
            ? absl::StrFormat(", up %.2f%% of its rows (ReGLU)", 100.0 * UpFraction(r))
            : "";
    std::printf("sparse decode, %d thread(s), %zu token(s): down read %.2f%% of its value "
                "rows%s; weights read %.1f MB per call (of %.1f MB dense), %.2f GB/s of them\n",
                r.threads, r.tokens, 100.0 * DownFraction(r), up.c_str(), read / 1e6,
                work.weight_bytes / 1e6, read / r.ours.median / 1e9);
  }
  for (const Row& r : rows) {
    if (r.routed.median <= 0) continue;
    std::printf("routed experts, %d thread(s), %zu token(s): median %.3f ms of the call's %.3f ms, "
                "%.2f GFLOP/s = %.1f%% of the FMA peak; they read %.1f MB per call, %.1f ms at "
                "the read bandwidth: from memory at most %.1f%% of the FMA peak with the read "
                "overlapped, %.1f%% without%s\n",
                r.threads, r.tokens, r.routed.median * 1e3, r.ours.median * 1e3, r.routed_gflops,
                r.routed_peak_pct, r.routed_bytes / 1e6, r.routed_read_ms, r.routed_bound_pct,
                r.routed_serial_pct,
                r.alone.batches == 0
                    ? ""
                    : absl::StrFormat("; %d of %d batches ran whole on one thread each",
                                      r.alone.alone, r.alone.batches)
                          .c_str());
  }
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace fflite

int main(int argc, char** argv) {
  fflite::HelpListsFlagsOf(__FILE__);
  absl::SetProgramUsageMessage(
      "fflite-bench --synthetic llama|mixtral-mini|qwen-moe --tokens 1,128 --threads 1,2 [--cold] "
      "[--baseline] [--expert_budget_fraction 0.25 [--vary_tokens] [--vs_unbudgeted]] [--json]");
  absl::ParseCommandLine(argc, argv);
  return fflite::bench::Main();
}
