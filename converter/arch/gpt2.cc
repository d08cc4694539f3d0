// gpt2: a plain FFN whose Conv1D weights are stored [in, out] (transposed here), with biases,
// and ln_2 as a pre-LayerNorm. Source: transformers models/gpt2/modeling_gpt2.py (GPT2MLP:
// c_proj(act(c_fc(x))), act = ACT2FN[activation_function]; GPT2Block; pytorch_utils.Conv1D:
// x @ weight + bias with weight [nx, nf]).
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {

absl::StatusOr<ArchPlan> ConvertGpt2(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("n_embd"));
  const uint32_t d = plan.d_model;
  // inner_dim = n_inner if not None else 4 * hidden_size
  uint32_t d_ff = 0;
  if (c.Has("n_inner")) {
    FFLITE_ASSIGN_OR_RETURN(d_ff, c.Dim("n_inner"));
  } else {
    if (uint64_t{4} * d > static_cast<uint64_t>(kMaxConfigDim)) {
      return c.Error("n_embd", "times 4 (the default n_inner) is too large");
    }
    d_ff = 4 * d;
  }
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, c.Count("n_layer", 1, 1 << 16));
  FFLITE_ASSIGN_OR_RETURN(const std::string act_name, c.String("activation_function", "gelu_new"));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "activation_function", act_name));
  FFLITE_ASSIGN_OR_RETURN(const double eps, c.Epsilon("layer_norm_epsilon", 1e-5));
  // GPT2LMHeadModel saves under "transformer."; the original openai-community checkpoints (a bare
  // GPT2Model) have no prefix.
  std::string prefix;
  if (ctx.checkpoint.HasPrefix("transformer.h.")) {
    prefix = "transformer.";
  } else if (!ctx.checkpoint.HasPrefix("h.")) {
    return absl::NotFoundError(absl::StrFormat(
        "'%s': no GPT-2 blocks: expected names starting with \"transformer.h.0.\" or \"h.0.\"",
        ctx.checkpoint.dir()));
  }
  plan.metadata = {{"source.activation_function", act_name}, {"source.prefix", prefix}};
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string block = absl::StrFormat("%sh.%d", prefix, i);
    plan.sublayers.push_back({block + ".mlp", [&ctx, block, d, d_ff, act, eps]()
                                                  -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = block + ".mlp";
      l.ffn.activation = act;
      l.ffn.gated = false;
      l.ffn.d_ff = d_ff;
      // c_fc.weight [n_embd, n_inner] -> up [n_inner, n_embd]; c_proj.weight [n_inner, n_embd]
      // -> down [n_embd, n_inner].
      FFLITE_ASSIGN_OR_RETURN(l.ffn.up, TransposedTensor(ctx, block + ".mlp.c_fc.weight", d, d_ff,
                                                         "[n_embd, n_inner] (Conv1D)"));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.up_bias,
                              Tensor(ctx, block + ".mlp.c_fc.bias", {d_ff}, "[n_inner]"));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.down, TransposedTensor(ctx, block + ".mlp.c_proj.weight", d_ff,
                                                           d, "[n_inner, n_embd] (Conv1D)"));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.down_bias,
                              Tensor(ctx, block + ".mlp.c_proj.bias", {d}, "[n_embd]"));
      // h = x + mlp(ln_2(x))
      FFLITE_ASSIGN_OR_RETURN(l.norm, LayerNorm(ctx, block + ".ln_2.weight", block + ".ln_2.bias",
                                                d, eps, NormPlacement::PRE));
      l.residual = true;
      return l;
    }});
  }
  return plan;
}

}  // namespace converter
}  // namespace fflite
