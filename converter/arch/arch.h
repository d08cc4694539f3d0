// The architecture table: one mapping per Hugging Face model_type from checkpoint tensors and
// config.json values to fflite layers, plus the small helpers every mapping uses.
// Adding an architecture: write arch/<model_type>.cc with one Convert<Name> function and add one
// line to kArchitectures in arch/registry.cc.
#ifndef FFLITE_CONVERTER_ARCH_ARCH_H_
#define FFLITE_CONVERTER_ARCH_ARCH_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "converter/checkpoint.h"
#include "converter/config.h"
#include "format/writer.h"

namespace fflite {
namespace converter {

struct ArchContext {
  const Checkpoint& checkpoint;
  const HfConfig& config;
  std::string model_type;
  bool include_norm = true;  // false: the norm helpers return no norm (and read nothing)
  // Weights published quantised (gpt-oss's MXFP4 experts) keep their bits in a dtype of their own
  // (mxfp4) where they fit it; false (an output dtype asked for): exact f32 values.
  bool native = false;
};

// One FFN or MoE sublayer of the source model. `build` finds, checks and wraps its tensors
// (lazily: nothing is read until the writer fills them); it runs only for selected sublayers.
struct Sublayer {
  std::string name;  // the HF module prefix, e.g. "model.layers.3.mlp"
  std::function<absl::StatusOr<LayerSpec>()> build;
};

struct ArchPlan {
  uint32_t d_model = 0;
  std::vector<Sublayer> sublayers;  // in model order: the indices of --layers
  // Extra metadata from the config ("source.hidden_act", ...), written with the model.
  std::vector<std::pair<std::string, std::string>> metadata;
};

// Reads the config and plans the sublayers; `ctx` outlives the plan's build functions.
using ArchConvertFn = absl::StatusOr<ArchPlan> (*)(const ArchContext& ctx);

struct ArchEntry {
  const char* model_type;  // config.json's "model_type"
  ArchConvertFn convert;
};

// Every supported architecture, in table order.
absl::Span<const ArchEntry> Architectures();
// The entry for `model_type`; Unimplemented (listing the supported ones) when there is none.
absl::StatusOr<const ArchEntry*> FindArchitecture(const std::string& model_type);

// ---- Helpers for the mappings ----

// The fflite activation of a Hugging Face ACT2FN name: relu; gelu, gelu_python (erf);
// gelu_new, gelu_pytorch_tanh, gelu_fast, gelu_accurate (tanh approximation); silu, swish;
// sigmoid. `key` names the config key in errors. Unimplemented for any other name.
absl::StatusOr<Activation> HfActivation(const HfConfig& config, const std::string& key,
                                        const std::string& name);

// A checkpoint tensor of exactly `shape` (as stored in the checkpoint), of a convertible dtype.
// `dims` says where the expected shape comes from, e.g. "[intermediate_size, hidden_size]".
// Errors: NotFound (missing), InvalidArgument (shape), Unimplemented (dtype).
absl::StatusOr<TensorRef> FindTensor(const ArchContext& ctx, const std::string& name,
                                     const std::vector<uint64_t>& shape, const std::string& dims);
// A tensor used as it is stored: an nn.Linear weight [out, in], a bias or a norm vector.
absl::StatusOr<TensorSource> Tensor(const ArchContext& ctx, const std::string& name,
                                    const std::vector<uint64_t>& shape, const std::string& dims);
// A Conv1D weight stored [in, out], transposed to [out, in].
absl::StatusOr<TensorSource> TransposedTensor(const ArchContext& ctx, const std::string& name,
                                              uint64_t in, uint64_t out, const std::string& dims);
// Rows [row_begin, row_begin + rows) of a stored [total_rows, cols] matrix.
absl::StatusOr<TensorSource> TensorRows(const ArchContext& ctx, const std::string& name,
                                        uint64_t total_rows, uint64_t cols, uint64_t row_begin,
                                        uint64_t rows, const std::string& dims);

// A gated FFN: down(act(gate(x)) * up(x)) from "<prefix>.<gate>.weight" etc. with nn.Linear
// weights [d_ff, d_model] / [d_model, d_ff], and ".bias" tensors when `bias`.
struct GatedNames {
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
};
absl::StatusOr<FfnSpec> GatedFfn(const ArchContext& ctx, const std::string& prefix,
                                 const GatedNames& names, uint32_t d_model, uint32_t d_ff,
                                 const std::string& d_ff_key, Activation activation, bool bias);

// Norm helpers: nothing (and no lookup) when !ctx.include_norm.
absl::StatusOr<std::optional<NormSpec>> RmsNorm(const ArchContext& ctx, const std::string& weight,
                                                uint32_t d_model, double eps, bool unit_offset);
absl::StatusOr<std::optional<NormSpec>> LayerNorm(const ArchContext& ctx,
                                                  const std::string& weight,
                                                  const std::string& bias, uint32_t d_model,
                                                  double eps, NormPlacement placement);
// The Llama-family decoder layer around its MLP / MoE block `layer` (e.g. "model.layers.3"):
// h = x + block(post_attention_layernorm(x)), an RMS pre-norm plus the residual, set on `l`.
absl::Status PostAttentionPreNorm(const ArchContext& ctx, const std::string& layer,
                                  uint32_t d_model, double eps, bool unit_offset, LayerSpec* l);

// The model's architectures: one function per file in converter/arch/.
absl::StatusOr<ArchPlan> ConvertLlama(const ArchContext& ctx);  // llama, mistral, qwen2, qwen3
absl::StatusOr<ArchPlan> ConvertGemma(const ArchContext& ctx);
absl::StatusOr<ArchPlan> ConvertPhi3(const ArchContext& ctx);
absl::StatusOr<ArchPlan> ConvertMixtral(const ArchContext& ctx);
// qwen2_moe.cc: the two generations share the file (qwen3_moe drops the shared expert).
absl::StatusOr<ArchPlan> ConvertQwen2Moe(const ArchContext& ctx);
absl::StatusOr<ArchPlan> ConvertQwen3Moe(const ArchContext& ctx);
absl::StatusOr<ArchPlan> ConvertDeepseek(const ArchContext& ctx);  // deepseek_v2, deepseek_v3
absl::StatusOr<ArchPlan> ConvertBert(const ArchContext& ctx);
absl::StatusOr<ArchPlan> ConvertGpt2(const ArchContext& ctx);
absl::StatusOr<ArchPlan> ConvertT5(const ArchContext& ctx);
absl::StatusOr<ArchPlan> ConvertWhisper(const ArchContext& ctx);
absl::StatusOr<ArchPlan> ConvertOpt(const ArchContext& ctx);
absl::StatusOr<ArchPlan> ConvertGptOss(const ArchContext& ctx);  // MXFP4 experts, SWIGLU_OAI

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_ARCH_ARCH_H_
