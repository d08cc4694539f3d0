// The architecture table: config.json's model_type -> the mapping that converts it.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {
namespace {

// One line per model_type. Several model_types share a mapping where their HF modeling files
// share the FFN code (llama/mistral/qwen2/qwen3; deepseek_v2/v3 differ only in routing).
constexpr ArchEntry kArchitectures[] = {
    {"llama", ConvertLlama},
    {"mistral", ConvertLlama},
    {"qwen2", ConvertLlama},
    {"qwen3", ConvertLlama},
    {"gemma", ConvertGemma},
    {"gemma2", ConvertGemma},
    {"gemma3_text", ConvertGemma},
    {"phi3", ConvertPhi3},
    {"mixtral", ConvertMixtral},
    {"qwen2_moe", ConvertQwen2Moe},
    {"qwen3_moe", ConvertQwen3Moe},
    {"deepseek_v2", ConvertDeepseek},
    {"deepseek_v3", ConvertDeepseek},
    {"bert", ConvertBert},
    {"gpt2", ConvertGpt2},
    {"t5", ConvertT5},
    {"whisper", ConvertWhisper},
    {"opt", ConvertOpt},
    {"gpt_oss", ConvertGptOss},
};

}  // namespace

absl::Span<const ArchEntry> Architectures() { return kArchitectures; }

absl::StatusOr<const ArchEntry*> FindArchitecture(const std::string& model_type) {
  for (const ArchEntry& e : kArchitectures) {
    if (model_type == e.model_type) return &e;
  }
  std::vector<std::string> names;
  for (const ArchEntry& e : kArchitectures) names.push_back(e.model_type);
  return absl::UnimplementedError(absl::StrFormat(
      "model_type \"%s\" is not supported; supported: %s", model_type, absl::StrJoin(names, ", ")));
}

}  // namespace converter
}  // namespace fflite
