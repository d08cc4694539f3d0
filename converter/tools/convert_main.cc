// fflite-convert: converts a Hugging Face checkpoint folder (config.json + safetensors) into one
// .fflite model file holding its FFN / MoE sublayers. A thin main over ConvertCheckpoint.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "converter/convert.h"
#include "converter/progress.h"

ABSL_FLAG(std::string, output, "", "Output model file (or give it as the second argument).");
ABSL_FLAG(std::string, dtype, "", "Output dtype of every tensor: f32, f16 or bf16 (default: the "
                                  "checkpoint's own dtype, tensor by tensor).");
ABSL_FLAG(uint32_t, d_ff_alignment, 64, "Pad d_ff with zeros to a multiple of this (>= 1).");
ABSL_FLAG(std::string, layers, "", "Convert only these FFN sublayers, by index in model order, "
                                   "e.g. 0-3,7 (default: all).");
ABSL_FLAG(bool, page_align_experts, false, "Start each MoE expert on a 64 KiB boundary so that it "
                                           "can be paged in and out on its own.");
ABSL_FLAG(bool, no_norm, false, "Leave out the norms and the residual add: each layer is the bare "
                                "FFN/MoE, y = FFN(x), and the caller applies its own norm and "
                                "residual.");
ABSL_FLAG(bool, quiet, false, "No progress bar or summary line.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "converts a Hugging Face checkpoint to an fflite model file.\n"
      "usage: fflite-convert CHECKPOINT_DIR OUTPUT.fflite [--dtype f32|f16|bf16] "
      "[--d_ff_alignment N] [--layers 0-3,7] [--page_align_experts] [--no_norm]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  std::string output = absl::GetFlag(FLAGS_output);
  if (args.size() == 3 && output.empty()) output = args[2];
  if (args.size() < 2 || args.size() > 3 || output.empty() ||
      (args.size() == 3 && output != args[2])) {
    std::fprintf(stderr, "%s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  fflite::converter::ConvertOptions options;
  if (!absl::GetFlag(FLAGS_dtype).empty()) {
    auto dtype = fflite::converter::ParseDType(absl::GetFlag(FLAGS_dtype));
    if (!dtype.ok()) {
      std::fprintf(stderr, "fflite-convert: --%s\n", std::string(dtype.status().message()).c_str());
      return 2;
    }
    options.dtype = *dtype;
  }
  options.d_ff_alignment = absl::GetFlag(FLAGS_d_ff_alignment);
  options.layers = absl::GetFlag(FLAGS_layers);
  options.page_align_experts = absl::GetFlag(FLAGS_page_align_experts);
  options.include_norm = !absl::GetFlag(FLAGS_no_norm);
  const bool quiet = absl::GetFlag(FLAGS_quiet);
  fflite::converter::ProgressReporter reporter(stderr, ::isatty(STDERR_FILENO) == 1);
  if (!quiet) {
    options.progress = [&](const fflite::converter::ConvertProgress& p) { reporter.Update(p); };
  }
  auto result = fflite::converter::ConvertCheckpoint(args[1], output, options);
  if (!result.ok()) {
    reporter.Abort();
    std::fprintf(stderr, "fflite-convert: %s\n", result.status().ToString().c_str());
    return 1;
  }
  if (!quiet) reporter.Finish(output, *result);
  return 0;
}
