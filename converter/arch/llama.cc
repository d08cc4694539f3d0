// llama, mistral, qwen2, qwen3: SwiGLU MLP with the post-attention RMSNorm as the FFN's pre-norm.
// Source: transformers models/llama/modeling_llama.py (LlamaMLP, LlamaRMSNorm, LlamaDecoderLayer);
// MistralMLP, Qwen2MLP and Qwen3MLP are the same code (bias=False; only Llama reads mlp_bias).
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {

absl::StatusOr<ArchPlan> ConvertLlama(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("hidden_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t d_ff, c.Dim("intermediate_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, c.Count("num_hidden_layers", 1, 1 << 16));
  // act_fn = ACT2FN[config.hidden_act]; the configs' default is "silu".
  FFLITE_ASSIGN_OR_RETURN(const std::string act_name, c.String("hidden_act", "silu"));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "hidden_act", act_name));
  FFLITE_ASSIGN_OR_RETURN(const double eps, c.Epsilon("rms_norm_eps", 1e-6));
  bool bias = false;
  if (ctx.model_type == "llama") {
    FFLITE_ASSIGN_OR_RETURN(bias, c.Bool("mlp_bias", false));
  }
  plan.metadata = {{"source.hidden_act", act_name}};
  const uint32_t d = plan.d_model;
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    plan.sublayers.push_back({layer + ".mlp", [&ctx, layer, d, d_ff, act, eps, bias]()
                                                  -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = layer + ".mlp";
      l.kind = LayerKind::kDense;
      // y = down_proj(act(gate_proj(x)) * up_proj(x))
      FFLITE_ASSIGN_OR_RETURN(l.ffn, GatedFfn(ctx, layer + ".mlp", GatedNames(), d, d_ff,
                                              "intermediate_size", act, bias));
      // h = x + mlp(post_attention_layernorm(x))
      FFLITE_RETURN_IF_ERROR(PostAttentionPreNorm(ctx, layer, d, eps, /*unit_offset=*/false, &l));
      return l;
    }});
  }
  return plan;
}

}  // namespace converter
}  // namespace fflite
