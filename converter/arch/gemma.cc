// gemma: GeGLU MLP (tanh GELU) and an RMSNorm that scales by (1 + weight).
// Source: transformers models/gemma/modeling_gemma.py (GemmaMLP, GemmaRMSNorm, GemmaDecoderLayer).
// gemma2, gemma3_text: the same MLP between pre_feedforward_layernorm and
// post_feedforward_layernorm, y = x + post(mlp(pre(x))) (Gemma2DecoderLayer, Gemma3DecoderLayer):
// a sandwich layer (NormPlacement::SANDWICH).
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {

absl::StatusOr<ArchPlan> ConvertGemma(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("hidden_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t d_ff, c.Dim("intermediate_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, c.Count("num_hidden_layers", 1, 1 << 16));
  // GemmaMLP reads config.hidden_activation and falls back to "gelu_pytorch_tanh" when it is
  // unset: the first Gemma configs shipped "hidden_act": "gelu" (exact GELU), which is not what
  // the model was trained with, so hidden_act is deliberately ignored.
  FFLITE_ASSIGN_OR_RETURN(const std::string act_name,
                          c.String("hidden_activation", "gelu_pytorch_tanh"));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "hidden_activation", act_name));
  FFLITE_ASSIGN_OR_RETURN(const double eps, c.Epsilon("rms_norm_eps", 1e-6));
  plan.metadata = {{"source.hidden_activation", act_name}};
  const uint32_t d = plan.d_model;
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    plan.sublayers.push_back({layer + ".mlp", [&ctx, layer, d, d_ff, act, eps]()
                                                  -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = layer + ".mlp";
      FFLITE_ASSIGN_OR_RETURN(l.ffn, GatedFfn(ctx, layer + ".mlp", GatedNames(), d, d_ff,
                                              "intermediate_size", act, /*bias=*/false));
      // GemmaRMSNorm: x / sqrt(mean(x²) + eps) · (1 + weight)
      if (ctx.model_type == "gemma") {
        FFLITE_RETURN_IF_ERROR(PostAttentionPreNorm(ctx, layer, d, eps, /*unit_offset=*/true, &l));
        return l;
      }
      FFLITE_ASSIGN_OR_RETURN(l.norm, RmsNorm(ctx, layer + ".pre_feedforward_layernorm.weight", d,
                                              eps, /*unit_offset=*/true));
      FFLITE_ASSIGN_OR_RETURN(l.output_norm,
                              RmsNorm(ctx, layer + ".post_feedforward_layernorm.weight", d, eps,
                                      /*unit_offset=*/true));
      if (l.norm.has_value()) {
        l.norm->placement = NormPlacement::SANDWICH;
        l.output_norm->placement = NormPlacement::SANDWICH;
        l.residual = true;
      }
      return l;
    }});
  }
  return plan;
}

}  // namespace converter
}  // namespace fflite
