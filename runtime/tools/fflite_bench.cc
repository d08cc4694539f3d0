// fflite-bench: latency of a model's layers (a .fflite file or a synthetic shape) per backend,
// token count and thread count, against the machine's own measured roofline and plain XNNPACK.
// This file holds the flags and prepares the model; the modes run in bench/: host_bench (the CPU
// backend and the reference, through sessions as users make them) and cuda_bench.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "c_status.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/backend.h"
#include "backends/cpu/cpu_options.h"
#ifdef FFLITE_HAVE_CUDA
#include "bench/cuda_bench.h"
#endif
#include "base/status_macros.h"
#include "base/tool_flags.h"
#include "bench/host_bench.h"
#include "bench/kernel_bench.h"
#include "bench/storage_bench.h"
#include "bench/synthetic.h"
#include "bench/work.h"
#include "format/model.h"
#include "format/writer.h"
#include "kernels/gemm.h"

ABSL_FLAG(std::string, model, "", "a .fflite file to run");
ABSL_FLAG(std::string, synthetic, "",
          "a built-in shape instead of --model: " FFLITE_SYNTHETIC_SHAPES);
ABSL_FLAG(std::optional<int64_t>, layers, std::nullopt,
          "--synthetic: this many layers (at least 1; each with weights of its own) instead of the "
          "shape's own (48 for qwen3-30b-a3b, 1 for the others): sizes the file to the machine");
ABSL_FLAG(std::string, synthetic_out, "",
          "--synthetic: write the model to this path and keep it (run it again with --model)");
ABSL_FLAG(bool, storage, false,
          "MoE experts streamed from storage (needs --expert_budget_fraction): the storage's "
          "read bandwidth, the all-resident time, then the streamed session and the mapped file "
          "without a budget, the file's pages dropped first, under --memory_limit_mib; --reps "
          "decode tokens through every layer, and a prefill of --prefill_tokens");
ABSL_FLAG(int64_t, memory_limit_mib, 0,
          "--storage: run the streamed and mapped sessions inside a memory cgroup of this many "
          "MiB (v1 or v2; root); refused where none can be made");
ABSL_FLAG(int64_t, prefill_tokens, 256, "--storage: tokens of the prefill call (0: none)");
ABSL_FLAG(bool, mmap_baseline, true,
          "--storage: also time the mapped file without a budget under the same limit");
ABSL_FLAG(double, routing_skew, 0.0,
          "--synthetic MoE shapes: skew the routing towards a few experts (a router bias: the "
          "experts' shares fall about as a Zipf law of this exponent; 0: about uniform)");
ABSL_FLAG(std::string, expert_policy, "frequency",
          "under an expert budget, which resident expert goes first: lru, or frequency (the "
          "least used lately among the least recently used)");
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
ABSL_FLAG(std::string, kernels, "",
          "time kernels alone instead of a model: gemv, qgemv, qgemm (comma-separated), each on "
          "the dtypes of --kernel_dtypes it takes, at each --tokens and --kernel_kib, with this "
          "CPU's chosen kernels; cycles per 32 weights at the core clock measured in the run (to "
          "check scripts/arm_model.py's model)");
ABSL_FLAG(std::string, kernel_dtypes, "f32,f16,bf16,i8,i4,q4_k,q5_k,q6_k",
          "--kernels: the weight dtypes");
ABSL_FLAG(std::string, kernel_kib, "16,512,262144",
          "--kernels: the weight matrix's size in KiB per case (k = 4096; about L1, L2 and "
          "memory by default)");
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
ABSL_FLAG(std::string, quant_isa, "",
          "xnnpack with quantised weights: the kernels by name, GEMV[,GEMM] (float-activation "
          "kernel: scalar, avx2, avx512, neon; int8-activation kernel: scalar, avx2, avxvnni, "
          "avx512vnni, neon, neondot, i8mm; one name: that name for both where the CPU has it; "
          "empty: the best for this CPU), e.g. avx2 to measure the AVX2 kernels on an AVX-512 "
          "machine");
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
          "--synthetic: dtype of the FFN weight matrices: f32, f16, bf16, i8, i4, q2_k, q3_k, "
          "q4_k, q5_k or q6_k (quantised by the converter's quantiser; a k-quant matrix whose "
          "in_features is not whole super-blocks of 256 falls back to i4 or i8 as fflite-convert "
          "does; every other tensor f32)");
ABSL_FLAG(bool, rotate, true,
          "--synthetic with --dtype i8|i4: the block-rotated layout (the converter's default)");
ABSL_FLAG(int64_t, quant_gemm_tokens, -1,
          "xnnpack: the fewest tokens in a quantised product that take the int8-activation "
          "kernel (0: never; default: the backend's)");
ABSL_FLAG(double, expert_budget_fraction, 0.0,
          "MoE: the session's expert budget as a fraction of all routed experts' packed bytes "
          "(0: no budget; experts are prepared on first use either way)");
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

// The CPU backend's options from the tuning flags (every one of them, --vs's too).
absl::StatusOr<CpuBackendOptions> BenchCpuOptions() {
  CpuBackendOptions options;
  const std::string engine = absl::GetFlag(FLAGS_engine);
  if (engine == "gemm") {
    options.packed_engine = CpuBackendOptions::PackedEngine::kGemm;
  } else if (engine == "xnnpack") {
    options.packed_engine = CpuBackendOptions::PackedEngine::kXnnpack;
  } else if (engine != "auto") {
    return absl::InvalidArgumentError("--engine: auto, gemm or xnnpack, not " + engine);
  }
  const std::string isa = absl::GetFlag(FLAGS_gemm_isa);
  if (!isa.empty()) {
    for (FloatType type : {FloatType::kF32, FloatType::kBF16}) {
      for (const GemmKernel* g : AvailableGemmKernels(type)) {
        if (isa == g->isa) (type == FloatType::kF32 ? options.gemm_f32 : options.gemm_bf16) = g;
      }
    }
    if (options.gemm_f32 == nullptr && options.gemm_bf16 == nullptr) {
      return absl::InvalidArgumentError("--gemm_isa: this CPU has no gemm kernel " + isa);
    }
  }
  const std::string quant_isa = absl::GetFlag(FLAGS_quant_isa);
  if (!quant_isa.empty()) {
    const size_t comma = quant_isa.find(',');
    const std::string gemv = quant_isa.substr(0, comma);
    const std::string gemm = comma == std::string::npos ? gemv : quant_isa.substr(comma + 1);
    for (const QGemvKernel* k : AvailableQGemvKernels()) {
      if (gemv == k->isa) options.qgemv = k;
    }
    for (const QGemmKernel* k : AvailableQGemmKernels()) {
      if (gemm == k->isa) options.qgemm = k;
    }
    const bool both = comma != std::string::npos;
    if ((both && (options.qgemv == nullptr || options.qgemm == nullptr)) ||
        (!both && options.qgemv == nullptr && options.qgemm == nullptr)) {
      return absl::InvalidArgumentError("--quant_isa: this CPU has no quantised kernel " +
                                        quant_isa);
    }
  }
  const std::string policy = absl::GetFlag(FLAGS_expert_policy);
  if (policy == "lru") {
    options.expert_policy = ResidencyPolicy::kLru;
  } else if (policy != "frequency") {
    return absl::InvalidArgumentError("--expert_policy: lru or frequency, not " + policy);
  }
  options.bf16_arithmetic = absl::GetFlag(FLAGS_bf16_arithmetic);
  options.half_panels = absl::GetFlag(FLAGS_half_panels);
  options.experts_alone = absl::GetFlag(FLAGS_experts_alone);
  const std::string ahead = absl::GetFlag(FLAGS_gemm_ahead);
  using GemmAhead = CpuBackendOptions::GemmAhead;
  if (ahead == "on") {
    options.gemm_ahead = GemmAhead::kOn;
  } else if (ahead == "off") {
    options.gemm_ahead = GemmAhead::kOff;
  } else if (ahead != "auto") {
    return absl::InvalidArgumentError("--gemm_ahead: auto, on or off, not " + ahead);
  }
  if (absl::GetFlag(FLAGS_value_rows_dense_fraction) >= 0.0) {
    options.value_rows_dense_fraction = absl::GetFlag(FLAGS_value_rows_dense_fraction);
  }
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
  return options;
}

// --vs: the tuning flags that the baseline sets otherwise.
constexpr const char* kVsFlags[] = {
    "engine",      "gemm_isa",         "bf16_arithmetic", "half_panels",       "gemm_ahead",
    "slice_kib",   "token_chunk",      "expert_slice_kib", "direct_tokens",    "quant_gemm_tokens",
    "value_rows_dense_fraction", "experts_alone", "quant_isa"};

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

std::string ResolveBackend(const std::string& name) {
  if (name != "auto") return name;
  for (const BackendEntry& e : Backends()) {
    std::string why;
    if (e.auto_choice && e.available(&why)) return e.name;
  }
  return "reference";
}

// The dtypes --synthetic writes its matrices in.
constexpr DType kSyntheticDTypes[] = {DType::F32,         DType::F16,         DType::BF16,
                                      DType::I8,          DType::I4,          DType::Q2_K_PACKED,
                                      DType::Q3_K_PACKED, DType::Q4_K,        DType::Q5_K_PACKED,
                                      DType::Q6_K_PACKED};

std::optional<DType> ParseDTypeName(const std::string& name) {
  for (DType d : kSyntheticDTypes) {
    if (name == DTypeName(d)) return d;
  }
  return std::nullopt;
}

int Main() {
  if (!absl::GetFlag(FLAGS_kernels).empty()) {
    KernelBenchOptions k;
    k.kernels = absl::StrSplit(absl::GetFlag(FLAGS_kernels), ',', absl::SkipEmpty());
    k.dtypes = absl::StrSplit(absl::GetFlag(FLAGS_kernel_dtypes), ',', absl::SkipEmpty());
    k.tokens = ParseList("tokens", absl::GetFlag(FLAGS_tokens));
    k.kib = ParseList("kernel_kib", absl::GetFlag(FLAGS_kernel_kib));
    k.reps = std::max(1, absl::GetFlag(FLAGS_reps));
    k.json = absl::GetFlag(FLAGS_json);
    return RunKernelBench(k);
  }
  const std::string model_path = absl::GetFlag(FLAGS_model);
  const std::string synthetic = absl::GetFlag(FLAGS_synthetic);
  if (model_path.empty() == synthetic.empty()) {
    std::fprintf(stderr,
                 "give exactly one of --model PATH or --synthetic "
                 "llama|llama-70b|bert|tiny|tiny-moe|mixtral-mini|qwen-moe|qwen3-30b-a3b\n");
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
    absl::StatusOr<ModelSpec> spec = SyntheticSpec(synthetic, absl::GetFlag(FLAGS_layers));
    if (!spec.ok()) {
      std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
      return 2;
    }
    const char* tmp = std::getenv("TMPDIR");
    path = absl::StrFormat("%s/fflite-bench-%d-%s.fflite", tmp != nullptr ? tmp : "/tmp",
                           static_cast<int>(getpid()), synthetic);
    if (!absl::GetFlag(FLAGS_synthetic_out).empty()) path = absl::GetFlag(FLAGS_synthetic_out);
    WriteOptions write;
    // MoE shapes: expert records on 4 KiB pages, as fflite-convert writes MoE models.
    write.expert_alignment = kExpertPageAlignment;
    auto dtype = ParseDTypeName(absl::GetFlag(FLAGS_dtype));
    if (!dtype.has_value()) {
      std::string names;
      for (DType d : kSyntheticDTypes) {
        names += std::string(names.empty() ? "" : ", ") + DTypeName(d);
      }
      std::fprintf(stderr, "--dtype: '%s' is not one of %s\n", absl::GetFlag(FLAGS_dtype).c_str(),
                   names.c_str());
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
    if (absl::GetFlag(FLAGS_routing_skew) != 0.0) {
      const absl::Status skew = SetRoutingSkew(absl::GetFlag(FLAGS_routing_skew), &*spec);
      if (!skew.ok()) {
        std::fprintf(stderr, "%s\n", std::string(skew.message()).c_str());
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
      std::fprintf(stderr, "writing the synthetic model: %s\n", fflite::StatusText(st).c_str());
      return 1;
    }
  }
  if (synthetic.empty() && absl::GetFlag(FLAGS_sparsity) >= 0.0) {
    std::fprintf(stderr, "--sparsity applies to --synthetic models only\n");
    return 2;
  }
  if (synthetic.empty() && absl::GetFlag(FLAGS_layers).has_value()) {
    std::fprintf(stderr, "--layers applies to --synthetic models only\n");
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
  // The file's bytes, kept for cold copies of a model read in place (host_bench.cc).
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
  // The mappings keep it alive (--storage reads it again by name: removed after).
  const bool remove_file = !synthetic.empty() && absl::GetFlag(FLAGS_synthetic_out).empty();
  if (remove_file && !absl::GetFlag(FLAGS_storage)) std::remove(path.c_str());
  if (!loaded.ok() || !second.ok()) {
    std::fprintf(stderr, "%s\n",
                 fflite::StatusText(loaded.ok() ? second.status() : loaded.status()).c_str());
    return 1;
  }
  const Model& model = **loaded;
  if (absl::GetFlag(FLAGS_storage)) {
    StorageBench sb;
    sb.path = path;
    sb.model = &model;
    sb.budget_fraction = absl::GetFlag(FLAGS_expert_budget_fraction);
    sb.memory_limit_mib = absl::GetFlag(FLAGS_memory_limit_mib);
    sb.threads = static_cast<int>(thread_list.front());
    sb.decode_steps = std::max(1, absl::GetFlag(FLAGS_reps));
    sb.prefill_tokens = static_cast<int>(absl::GetFlag(FLAGS_prefill_tokens));
    sb.mmap_baseline = absl::GetFlag(FLAGS_mmap_baseline);
    int rc = 2;
    absl::StatusOr<CpuBackendOptions> cpu = BenchCpuOptions();
    if (!cpu.ok()) {
      std::fprintf(stderr, "%s\n", std::string(cpu.status().message()).c_str());
    } else if (sb.budget_fraction <= 0.0 || sb.budget_fraction >= 1.0) {
      std::fprintf(stderr, "--storage needs --expert_budget_fraction in (0, 1)\n");
    } else if (sb.memory_limit_mib < 0 || sb.prefill_tokens < 0) {
      std::fprintf(stderr, "--memory_limit_mib and --prefill_tokens must be >= 0\n");
    } else {
      sb.options = *cpu;
      rc = RunStorageBench(sb);
    }
    if (remove_file) std::remove(path.c_str());
    return rc;
  }
#ifdef FFLITE_HAVE_CUDA
  if (backend == "cuda") {
    return RunCudaBench(model, CountWork(model).flops_per_token, token_list,
                        absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_reps));
  }
#endif
  if (absl::GetFlag(FLAGS_cold_copies) < 0) {
    std::fprintf(stderr, "--cold_copies must be 0 (automatic) or more\n");
    return 1;
  }
  HostBench bench;
  bench.model = &model;
  bench.second = second->get();
  bench.file = &file_bytes;
  bench.what = synthetic.empty() ? model_path : "synthetic " + synthetic;
  bench.backend = backend;
  bench.tokens = token_list;
  bench.threads = thread_list;
  bench.warmup = absl::GetFlag(FLAGS_warmup);
  bench.reps = absl::GetFlag(FLAGS_reps);
  bench.vary = absl::GetFlag(FLAGS_vary_tokens);
  bench.cold = absl::GetFlag(FLAGS_cold);
  bench.cold_copies = absl::GetFlag(FLAGS_cold_copies);
  bench.capture = absl::GetFlag(FLAGS_capture);
  bench.json = json;
  bench.bandwidth_mib = static_cast<int>(absl::GetFlag(FLAGS_bandwidth_mib));
  bench.budget_fraction = absl::GetFlag(FLAGS_expert_budget_fraction);
  bench.quant_gemm_tokens = absl::GetFlag(FLAGS_quant_gemm_tokens);
  bench.read_s = read_s;
  bench.load_s = load_s;
  absl::StatusOr<CpuBackendOptions> options = BenchCpuOptions();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  bench.options = *options;
  if (absl::GetFlag(FLAGS_baseline)) {
    bench.baseline = absl::GetFlag(FLAGS_aa)              ? BaselineKind::kAa
                     : !vs.empty()                         ? BaselineKind::kVs
                     : absl::GetFlag(FLAGS_vs_unbudgeted) ? BaselineKind::kUnbudgeted
                     : absl::GetFlag(FLAGS_vs_dense)      ? BaselineKind::kDense
                                                          : BaselineKind::kPlain;
  }
  if (bench.baseline == BaselineKind::kVs) {
    absl::StatusOr<CpuBackendOptions> vs_options = WithFlags(vs, BenchCpuOptions);
    if (!vs_options.ok()) {
      std::fprintf(stderr, "%s\n", std::string(vs_options.status().message()).c_str());
      return 2;
    }
    bench.vs_options = *vs_options;
    bench.vs = absl::GetFlag(FLAGS_vs);
  }
  return RunHostBench(bench);
}

}  // namespace
}  // namespace bench
}  // namespace fflite

int main(int argc, char** argv) {
  fflite::HelpListsFlagsOf(__FILE__, "fflite-bench");
  absl::SetProgramUsageMessage(
      "fflite-bench --synthetic SHAPE|--model MODEL.fflite [--layers N] --tokens 1,128 --threads "
      "1,2 [--cold] [--baseline] [--expert_budget_fraction 0.25 [--vary_tokens] "
      "[--vs_unbudgeted]] [--json]\nSHAPE: " FFLITE_SYNTHETIC_SHAPES);
  absl::ParseCommandLine(argc, argv);
  return fflite::bench::Main();
}
