// fflite-make-example: writes a small Hugging Face style checkpoint (Llama- or Mixtral-style,
// deterministic random weights) to try fflite-convert on. A thin main over MakeExampleCheckpoint.
#include <cstdio>
#include <string>
#include <vector>

#include "c_status.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "base/tool_flags.h"
#include "converter/example_checkpoint.h"

ABSL_FLAG(std::string, arch, "llama", "llama (dense SwiGLU) or mixtral (MoE).");
ABSL_FLAG(uint32_t, layers, 4, "Decoder layers.");
ABSL_FLAG(uint32_t, hidden_size, 64, "d_model.");
ABSL_FLAG(uint32_t, intermediate_size, 176, "d_ff (of each expert for mixtral).");
ABSL_FLAG(uint32_t, experts, 8, "Experts per MoE layer (mixtral).");
ABSL_FLAG(uint32_t, top_k, 2, "Experts per token (mixtral).");
ABSL_FLAG(uint32_t, vocab_size, 256, "Vocabulary size (embedding and lm_head rows).");
ABSL_FLAG(std::string, dtype, "f32", "Weight dtype: f32, f16 or bf16.");
ABSL_FLAG(uint32_t, shards, 1, "Number of safetensors shards (> 1 writes an index).");
ABSL_FLAG(uint64_t, seed, 1, "Random seed.");

int main(int argc, char** argv) {
  fflite::HelpListsFlagsOf(__FILE__, "fflite-make-example");
  absl::SetProgramUsageMessage(
      "writes a small Hugging Face style checkpoint with deterministic random weights.\n"
      "usage: fflite-make-example DIR [--arch llama|mixtral] [--layers N] [--hidden_size N] "
      "[--intermediate_size N] [--experts N] [--top_k N] [--dtype f32|f16|bf16] [--shards N]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  fflite::converter::ExampleOptions o;
  o.arch = absl::GetFlag(FLAGS_arch);
  o.layers = absl::GetFlag(FLAGS_layers);
  o.hidden_size = absl::GetFlag(FLAGS_hidden_size);
  o.intermediate_size = absl::GetFlag(FLAGS_intermediate_size);
  o.experts = absl::GetFlag(FLAGS_experts);
  o.top_k = absl::GetFlag(FLAGS_top_k);
  o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  o.dtype = absl::AsciiStrToUpper(absl::GetFlag(FLAGS_dtype));
  o.shards = absl::GetFlag(FLAGS_shards);
  o.seed = absl::GetFlag(FLAGS_seed);
  const absl::Status st = fflite::converter::MakeExampleCheckpoint(args[1], o);
  if (!st.ok()) {
    std::fprintf(stderr, "fflite-make-example: %s\n", fflite::StatusText(st).c_str());
    return 1;
  }
  std::fprintf(stderr, "fflite-make-example: wrote a %s checkpoint to %s\n", o.arch.c_str(),
               args[1]);
  return 0;
}
