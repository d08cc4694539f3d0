// fflite-imatrix: the importance matrix of a model from a calibration run, for
// `fflite-convert --dtype q4_k|q5_k|q6_k|q4_k_m|q5_k_m --imatrix FILE`.
//
// For each layer with calibration tokens it runs the layer through the public C API with a
// capture attached and writes the mean square of what each matrix's columns meet:
//   layers[i].input [d_model]: the input of the up and gate matrices (the tokens after the
//       layer's norm when the norm comes first; the tokens themselves otherwise);
//   layers[i].ffn.hidden [d_ff]: a dense layer's hidden activations (the down matrix's input);
//   layers[i].moe.experts[e].hidden [d_ff]: each routed expert's, over the tokens routed to it,
//       each token's square scaled by its routing weight squared (the weight scales the expert's
//       output, so its error too). Experts no token chose, and shared experts (not captured),
//       get none: the converter quantises them unweighted.
// The output is a safetensors file of those f32 vectors, written whole or not at all.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "base/tool_flags.h"
#include "imatrix.h"

ABSL_FLAG(std::string, inputs, "",
          "folder of calibration tokens: layer<i>.f32 for layer i, raw little-endian f32 "
          "[n_tokens, d_model] as passed to fflite_session_run (layers without a file are "
          "skipped); required");
ABSL_FLAG(std::string, output, "", "the importance matrix to write (safetensors); required");
ABSL_FLAG(int, threads, 1, "threads of the session, >= 1");

int main(int argc, char** argv) {
  fflite::HelpListsFlagsOf(__FILE__, "fflite-imatrix");
  absl::SetProgramUsageMessage(
      "the importance matrix of a model from calibration tokens (the mean square of each "
      "matrix's inputs), for fflite-convert --imatrix.\n"
      "usage: fflite-imatrix MODEL.fflite --inputs DIR --output IMATRIX.safetensors "
      "[--threads T]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  absl::Status st;
  const std::string output = absl::GetFlag(FLAGS_output);
  fflite::imatrix::ImportanceRun run;
  if (output.empty()) {
    st = absl::InvalidArgumentError("--output FILE is required");
  } else {
    auto tensors = fflite::imatrix::ComputeImportance(args[1], absl::GetFlag(FLAGS_inputs),
                                                      absl::GetFlag(FLAGS_threads), &run);
    st = tensors.ok() ? fflite::imatrix::WriteImportance(output, *tensors) : tensors.status();
    if (st.ok()) {
      std::fprintf(stderr, "fflite-imatrix: %zu layer(s), %zu token(s), %zu vectors -> %s\n",
                   run.layers, run.tokens, tensors->size(), output.c_str());
    }
  }
  if (!st.ok()) {
    std::fprintf(stderr, "fflite-imatrix: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
