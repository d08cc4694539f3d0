// fflite-convert: converts a Hugging Face checkpoint folder (config.json + safetensors) or a GGUF
// file into one .fflite model file holding its FFN / MoE sublayers. A thin main over
// ConvertCheckpoint.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "c_status.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "base/tool_flags.h"
#include "converter/convert.h"
#include "converter/progress.h"

ABSL_FLAG(std::string, output, "", "Output model file (or give it as the second argument).");
ABSL_FLAG(std::string, dtype, "",
          "Output dtype: f32, f16 or bf16 for every tensor (default: the checkpoint's own dtype, "
          "tensor by tensor); i8 or i4 to quantise the FFN weight matrices (up, gate, down) in "
          "blocks of 32 with an f16 scale each, everything else (routers, norms, biases, the "
          "shared-expert gate) in f32; q2_k, q3_k, q4_k, q5_k or q6_k for GGUF's k-quants "
          "(super-blocks of 256: d_ff is padded to a multiple of 256, a matrix whose d_model is "
          "not one falls back to i4 for q2_k, q3_k and q4_k, i8 otherwise); q4_k_m or q5_k_m for "
          "those with the down matrices of the first and last eighth of the layers and every third "
          "layer between in q6_k, q3_k_m for q3_k with the down matrices in q4_k (q5_k in the "
          "first sixteenth of the layers) (the mixes llama.cpp calls Q4_K_M, Q5_K_M and Q3_K_M); "
          "q5_k_i8 or q6_k_i8 for q5_k or q6_k with a byte per value (the format 1.4 form; q5_k "
          "and q6_k are GGUF's sizes).");
ABSL_FLAG(std::string, imatrix, "",
          "With a k-quant --dtype: an importance matrix (safetensors, written by fflite-imatrix "
          "from a calibration run of a model converted with the same --layers) that weights each "
          "column's quantisation error by the mean square of the inputs it met.");
ABSL_FLAG(std::string, keep, "",
          "With a quantised --dtype: keep some matrices at higher precision, ';'-separated rules "
          "DTYPE:ROLE[@LAYERS], e.g. \"f16:down@0,31;i8:gate\" (ROLE up, gate, down or *; "
          "LAYERS as for --layers, indices in the output file; the first matching rule wins).");
ABSL_FLAG(bool, quant_search, true,
          "With --dtype i8|i4: search each block's scale for the least squared error (false: "
          "plain absmax rounding, as llama.cpp's Q8_0/Q4_0).");
ABSL_FLAG(bool, rotate, true,
          "With --dtype i8|i4: rotate each block of 32 weights by a signed Hadamard transform "
          "(the runtime rotates the activations alike; exact in exact arithmetic), which spreads "
          "an outlier weight over its block: on heavy-tailed weights it cut the output error of "
          "i4 by 76% and of i8 by 89%, on Gaussian ones it changes nothing (--norotate).");
ABSL_FLAG(std::string, quant_report, "",
          "With a quantised --dtype: also write the per-matrix error table (TSV) to this file.");
ABSL_FLAG(uint32_t, d_ff_alignment, 64, "Pad d_ff with zeros to a multiple of this (>= 1).");
ABSL_FLAG(std::string, layers, "", "Convert only these FFN sublayers, by index in model order, "
                                   "e.g. 0-3,7 (default: all).");
ABSL_FLAG(uint64_t, expert_alignment, fflite::kExpertPageAlignment,
          "MoE models: store each expert's tensors (matrices with their scales, then biases) as "
          "one record starting at a multiple of this many bytes (a power of two >= 64; 0 or 64: "
          "no padding), so that under an expert budget an expert is one aligned direct read. "
          "Models without experts are unaffected.");
ABSL_FLAG(bool, page_align_experts, false, "Start each MoE expert on a 64 KiB boundary so that it "
                                           "can be paged in and out on its own (as "
                                           "--expert_alignment 65536).");
ABSL_FLAG(bool, no_norm, false, "Leave out the norms and the residual add: each layer is the bare "
                                "FFN/MoE, y = FFN(x), and the caller applies its own norm and "
                                "residual.");
ABSL_FLAG(bool, value_rows, true, "Store the down matrix of ReLU-family FFNs (ReLU, ReGLU) as value "
          "rows, one contiguous row per neuron, so that decode reads only the neurons that fire "
          "(float dtypes). --novalue_rows keeps the row-major down.");
ABSL_FLAG(bool, quiet, false, "No progress bar or summary line.");

int main(int argc, char** argv) {
  fflite::HelpListsFlagsOf(__FILE__, "fflite-convert");
  absl::SetProgramUsageMessage(
      "converts a Hugging Face checkpoint or a GGUF file to an fflite model file.\n"
      "usage: fflite-convert CHECKPOINT_DIR|MODEL.gguf OUTPUT.fflite [--dtype "
      "f32|f16|bf16|i8|i4|q2_k|q3_k|q4_k|q5_k|q6_k|q3_k_m|q4_k_m|q5_k_m] [--imatrix FILE] "
      "[--keep f16:down@0,31] [--rotate] [--quant_report FILE] [--d_ff_alignment N] "
      "[--layers 0-3,7] [--expert_alignment BYTES] [--page_align_experts] [--no_norm] "
      "[--novalue_rows]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  std::string output = absl::GetFlag(FLAGS_output);
  if (args.size() == 3 && output.empty()) output = args[2];
  if (args.size() < 2 || args.size() > 3 || output.empty() ||
      (args.size() == 3 && output != args[2])) {
    std::fprintf(stderr, "%s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  fflite::converter::ConvertOptions options;
  std::string dtype_name = absl::GetFlag(FLAGS_dtype);
  if (dtype_name == "q3_k_m" || dtype_name == "q4_k_m" || dtype_name == "q5_k_m") {
    options.k_mixed = true;
    dtype_name.resize(dtype_name.size() - 2);
  }
  if (!dtype_name.empty()) {
    auto dtype = fflite::converter::ParseDType(dtype_name);
    if (!dtype.ok()) {
      std::fprintf(stderr, "fflite-convert: --%s, q3_k_m, q4_k_m, q5_k_m\n",
                   std::string(dtype.status().message()).c_str());
      return 2;
    }
    if (fflite::FindDType(*dtype)->quantized) {
      options.quantize = *dtype;
    } else {
      options.dtype = *dtype;
    }
  }
  options.keep = absl::GetFlag(FLAGS_keep);
  options.imatrix = absl::GetFlag(FLAGS_imatrix);
  options.quantize_options.search = absl::GetFlag(FLAGS_quant_search);
  options.quantize_options.rotate = absl::GetFlag(FLAGS_rotate);
  options.d_ff_alignment = absl::GetFlag(FLAGS_d_ff_alignment);
  options.layers = absl::GetFlag(FLAGS_layers);
  options.expert_alignment = absl::GetFlag(FLAGS_expert_alignment);
  if (absl::Status st = fflite::CheckExpertAlignment(options.expert_alignment); !st.ok()) {
    std::fprintf(stderr, "fflite-convert: --%s\n", std::string(st.message()).c_str());
    return 2;
  }
  options.page_align_experts = absl::GetFlag(FLAGS_page_align_experts);
  options.include_norm = !absl::GetFlag(FLAGS_no_norm);
  options.value_rows = absl::GetFlag(FLAGS_value_rows);
  const bool quiet = absl::GetFlag(FLAGS_quiet);
  fflite::converter::ProgressReporter reporter(stderr, ::isatty(STDERR_FILENO) == 1);
  if (!quiet) {
    options.progress = [&](const fflite::converter::ConvertProgress& p) { reporter.Update(p); };
  }
  auto result = fflite::converter::ConvertCheckpoint(args[1], output, options);
  if (!result.ok()) {
    reporter.Abort();
    std::fprintf(stderr, "fflite-convert: %s\n", fflite::StatusText(result.status()).c_str());
    return 1;
  }
  if (!quiet) reporter.Finish(output, *result);
  // Per quantised matrix: its error against the source and the heaviness of the source's tails.
  std::FILE* report = nullptr;
  if (!absl::GetFlag(FLAGS_quant_report).empty()) {
    report = std::fopen(absl::GetFlag(FLAGS_quant_report).c_str(), "w");
    if (report == nullptr) {
      std::fprintf(stderr, "fflite-convert: cannot write --quant_report %s\n",
                   absl::GetFlag(FLAGS_quant_report).c_str());
      return 1;
    }
    std::fprintf(report, "matrix\tdtype\tnmse\tmax_abs_error\tkurtosis\n");
  }
  double worst = 0.0, sum = 0.0;
  for (const auto& q : result->quantized) {
    worst = std::max(worst, q.stats.nmse);
    sum += q.stats.nmse;
    if (report != nullptr) {
      std::fprintf(report, "%s\t%s\t%.3e\t%.3e\t%.2f\n", q.path.c_str(),
                   fflite::DTypeName(q.dtype), q.stats.nmse, q.stats.max_abs_error,
                   q.stats.kurtosis);
    }
    if (!quiet && result->quantized.size() <= 64) {
      std::fprintf(stderr, "  %-40s %s  nmse %.2e  max err %.2e  kurtosis %.1f\n", q.path.c_str(),
                   fflite::DTypeName(q.dtype), q.stats.nmse, q.stats.max_abs_error,
                   q.stats.kurtosis);
    }
  }
  if (!quiet && !result->quantized.empty()) {
    std::fprintf(stderr, "fflite-convert: %d matrices quantised, NMSE mean %.2e, worst %.2e\n",
                 static_cast<int>(result->quantized.size()),
                 sum / static_cast<double>(result->quantized.size()), worst);
  }
  if (report != nullptr && std::fclose(report) != 0) {
    std::fprintf(stderr, "fflite-convert: writing --quant_report failed\n");
    return 1;
  }
  return 0;
}
