// bert: a plain FFN with biases (intermediate.dense, output.dense) and a post-LayerNorm over the
// residual sum. Source: transformers models/bert/modeling_bert.py (BertIntermediate:
// act(dense(x)); BertOutput: LayerNorm(dropout(dense(h)) + input_tensor)).
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {

absl::StatusOr<ArchPlan> ConvertBert(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("hidden_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t d_ff, c.Dim("intermediate_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, c.Count("num_hidden_layers", 1, 1 << 16));
  FFLITE_ASSIGN_OR_RETURN(const std::string act_name, c.String("hidden_act", "gelu"));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "hidden_act", act_name));
  FFLITE_ASSIGN_OR_RETURN(const double eps, c.Epsilon("layer_norm_eps", 1e-12));
  // BertForPreTraining / BertForMaskedLM / ... save under "bert."; a bare BertModel saves without.
  std::string prefix;
  if (ctx.checkpoint.HasPrefix("bert.encoder.layer.")) {
    prefix = "bert.";
  } else if (!ctx.checkpoint.HasPrefix("encoder.layer.")) {
    return absl::NotFoundError(absl::StrFormat(
        "'%s': no BERT encoder tensors: expected names starting with \"bert.encoder.layer.0.\" or "
        "\"encoder.layer.0.\"", ctx.checkpoint.dir()));
  }
  plan.metadata = {{"source.hidden_act", act_name}, {"source.prefix", prefix}};
  const uint32_t d = plan.d_model;
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("%sencoder.layer.%d", prefix, i);
    plan.sublayers.push_back({layer, [&ctx, layer, d, d_ff, act, eps]()
                                         -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = layer;
      l.ffn.activation = act;
      l.ffn.gated = false;
      l.ffn.d_ff = d_ff;
      FFLITE_ASSIGN_OR_RETURN(l.ffn.up, Tensor(ctx, layer + ".intermediate.dense.weight",
                                               {d_ff, d}, "[intermediate_size, hidden_size]"));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.up_bias, Tensor(ctx, layer + ".intermediate.dense.bias",
                                                    {d_ff}, "[intermediate_size]"));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.down, Tensor(ctx, layer + ".output.dense.weight", {d, d_ff},
                                                 "[hidden_size, intermediate_size]"));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.down_bias, Tensor(ctx, layer + ".output.dense.bias", {d},
                                                      "[hidden_size]"));
      // Old TF-converted checkpoints name the LayerNorm parameters gamma/beta (transformers
      // renames them on load).
      const std::string ln = layer + ".output.LayerNorm.";
      const bool legacy = !ctx.checkpoint.Has(ln + "weight") && ctx.checkpoint.Has(ln + "gamma");
      FFLITE_ASSIGN_OR_RETURN(l.norm, LayerNorm(ctx, ln + (legacy ? "gamma" : "weight"),
                                                ln + (legacy ? "beta" : "bias"), d, eps,
                                                NormPlacement::POST));
      l.residual = true;
      return l;
    }});
  }
  return plan;
}

}  // namespace converter
}  // namespace fflite
