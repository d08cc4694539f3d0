// Helpers shared by the architecture mappings: activation names, checked tensor lookups, the
// gated FFN every SwiGLU/GeGLU model uses, and norms.
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {
namespace {

std::string ShapeString(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<Activation> HfActivation(const HfConfig& config, const std::string& key,
                                        const std::string& name) {
  // transformers/activations.py ACT2CLS: "gelu" and "gelu_python" are the exact erf GELU;
  // "gelu_new", "gelu_pytorch_tanh", "gelu_fast" and "gelu_accurate" all compute
  // 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) up to rounding; "swish" is SiLU.
  static const std::map<std::string, Activation> kNames = {
      {"relu", Activation::RELU},
      {"gelu", Activation::GELU_ERF},
      {"gelu_python", Activation::GELU_ERF},
      {"gelu_new", Activation::GELU_TANH},
      {"gelu_pytorch_tanh", Activation::GELU_TANH},
      {"gelu_fast", Activation::GELU_TANH},
      {"gelu_accurate", Activation::GELU_TANH},
      {"silu", Activation::SILU},
      {"swish", Activation::SILU},
      {"sigmoid", Activation::SIGMOID},
  };
  auto it = kNames.find(name);
  if (it != kNames.end()) return it->second;
  std::vector<std::string> known;
  for (const auto& [k, v] : kNames) known.push_back(k);
  return absl::UnimplementedError(absl::StrFormat(
      "'%s': %s \"%s\" is not a supported activation (supported: %s)", config.path(), key, name,
      absl::StrJoin(known, ", ")));
}

absl::StatusOr<TensorRef> FindTensor(const ArchContext& ctx, const std::string& name,
                                     const std::vector<uint64_t>& shape, const std::string& dims) {
  absl::StatusOr<TensorRef> ref = ctx.checkpoint.Find(name);
  if (!ref.ok()) {
    return absl::Status(ref.status().code(),
                        absl::StrFormat("%s; %s expects it with shape %s = %s", ref.status().message(),
                                        ctx.model_type, dims, ShapeString(shape)));
  }
  if (ref->tensor->shape != shape) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s has shape %s; %s expects %s = %s from '%s'", ref->Describe(),
        ShapeString(ref->tensor->shape), ctx.model_type, dims, ShapeString(shape),
        ctx.config.path()));
  }
  FFLITE_RETURN_IF_ERROR(ConvertibleDType(ref->tensor->dtype, ref->Describe()).status());
  return ref;
}

absl::StatusOr<TensorSource> Tensor(const ArchContext& ctx, const std::string& name,
                                    const std::vector<uint64_t>& shape, const std::string& dims) {
  FFLITE_ASSIGN_OR_RETURN(TensorRef ref, FindTensor(ctx, name, shape, dims));
  FFLITE_ASSIGN_OR_RETURN(DType dtype, ConvertibleDType(ref.tensor->dtype, ref.Describe()));
  return SourceAsIs(ref, dtype, shape);
}

absl::StatusOr<TensorSource> TransposedTensor(const ArchContext& ctx, const std::string& name,
                                              uint64_t in, uint64_t out, const std::string& dims) {
  FFLITE_ASSIGN_OR_RETURN(TensorRef ref, FindTensor(ctx, name, {in, out}, dims));
  FFLITE_ASSIGN_OR_RETURN(DType dtype, ConvertibleDType(ref.tensor->dtype, ref.Describe()));
  return SourceTransposed(ref, dtype);
}

absl::StatusOr<TensorSource> TensorRows(const ArchContext& ctx, const std::string& name,
                                        uint64_t total_rows, uint64_t cols, uint64_t row_begin,
                                        uint64_t rows, const std::string& dims) {
  FFLITE_ASSIGN_OR_RETURN(TensorRef ref, FindTensor(ctx, name, {total_rows, cols}, dims));
  FFLITE_ASSIGN_OR_RETURN(DType dtype, ConvertibleDType(ref.tensor->dtype, ref.Describe()));
  return SourceRows(ref, dtype, row_begin, rows);
}

namespace {

// config.json's name for d_model in this architecture, for shape messages.
const char* DModelKey(const ArchContext& ctx) {
  if (ctx.model_type == "t5" || ctx.model_type == "whisper") return "d_model";
  if (ctx.model_type == "gpt2") return "n_embd";
  return "hidden_size";
}

}  // namespace

absl::StatusOr<FfnSpec> GatedFfn(const ArchContext& ctx, const std::string& prefix,
                                 const GatedNames& names, uint32_t d_model, uint32_t d_ff,
                                 const std::string& d_ff_key, Activation activation, bool bias) {
  const char* d_key = DModelKey(ctx);
  const std::string in_dims = absl::StrFormat("[%s, %s]", d_ff_key, d_key);
  const std::string out_dims = absl::StrFormat("[%s, %s]", d_key, d_ff_key);
  FfnSpec f;
  f.activation = activation;
  f.gated = true;
  f.d_ff = d_ff;
  const std::string p = prefix + ".";
  FFLITE_ASSIGN_OR_RETURN(f.gate, Tensor(ctx, p + names.gate + ".weight", {d_ff, d_model}, in_dims));
  FFLITE_ASSIGN_OR_RETURN(f.up, Tensor(ctx, p + names.up + ".weight", {d_ff, d_model}, in_dims));
  FFLITE_ASSIGN_OR_RETURN(f.down,
                          Tensor(ctx, p + names.down + ".weight", {d_model, d_ff}, out_dims));
  if (bias) {
    const std::string ff_dims = absl::StrFormat("[%s]", d_ff_key);
    FFLITE_ASSIGN_OR_RETURN(f.gate_bias, Tensor(ctx, p + names.gate + ".bias", {d_ff}, ff_dims));
    FFLITE_ASSIGN_OR_RETURN(f.up_bias, Tensor(ctx, p + names.up + ".bias", {d_ff}, ff_dims));
    FFLITE_ASSIGN_OR_RETURN(f.down_bias,
                            Tensor(ctx, p + names.down + ".bias", {d_model},
                                   absl::StrFormat("[%s]", d_key)));
  }
  return f;
}

absl::StatusOr<std::optional<NormSpec>> RmsNorm(const ArchContext& ctx, const std::string& weight,
                                                uint32_t d_model, double eps, bool unit_offset) {
  if (!ctx.include_norm) return std::optional<NormSpec>();
  NormSpec n;
  n.kind = NormKind::RMS_NORM;
  n.placement = NormPlacement::PRE;
  n.eps = static_cast<float>(eps);
  n.unit_offset = unit_offset;
  FFLITE_ASSIGN_OR_RETURN(n.weight,
                          Tensor(ctx, weight, {d_model}, absl::StrFormat("[%s]", DModelKey(ctx))));
  return std::optional<NormSpec>(std::move(n));
}

absl::StatusOr<std::optional<NormSpec>> LayerNorm(const ArchContext& ctx,
                                                  const std::string& weight,
                                                  const std::string& bias, uint32_t d_model,
                                                  double eps, NormPlacement placement) {
  if (!ctx.include_norm) return std::optional<NormSpec>();
  NormSpec n;
  n.kind = NormKind::LAYER_NORM;
  n.placement = placement;
  n.eps = static_cast<float>(eps);
  const std::string dims = absl::StrFormat("[%s]", DModelKey(ctx));
  FFLITE_ASSIGN_OR_RETURN(n.weight, Tensor(ctx, weight, {d_model}, dims));
  FFLITE_ASSIGN_OR_RETURN(n.bias, Tensor(ctx, bias, {d_model}, dims));
  return std::optional<NormSpec>(std::move(n));
}

absl::Status PostAttentionPreNorm(const ArchContext& ctx, const std::string& layer,
                                  uint32_t d_model, double eps, bool unit_offset, LayerSpec* l) {
  FFLITE_ASSIGN_OR_RETURN(l->norm, RmsNorm(ctx, layer + ".post_attention_layernorm.weight",
                                           d_model, eps, unit_offset));
  l->residual = true;
  return absl::OkStatus();
}

}  // namespace converter
}  // namespace fflite
