// opt: each decoder layer's FFN is fc1 -> activation (ReLU in every released OPT) -> fc2, with
// biases (unless enable_bias is false), the residual, and final_layer_norm before the FFN when
// do_layer_norm_before (125m, 1.3b and up) or after the residual otherwise (350m). Source:
// transformers models/opt/modeling_opt.py (OPTDecoderLayer: `residual = h; if
// do_layer_norm_before: h = final_layer_norm(h); h = fc2(act(fc1(h))); h = residual + h; if not
// do_layer_norm_before: h = final_layer_norm(h)`; final_layer_norm = nn.LayerNorm(hidden_size,
// elementwise_affine=config.layer_norm_elementwise_affine), eps 1e-5) and configuration_opt.py.
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {

absl::StatusOr<ArchPlan> ConvertOpt(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("hidden_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t d_ff, c.Dim("ffn_dim"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, c.Count("num_hidden_layers", 1, 1 << 16));
  FFLITE_ASSIGN_OR_RETURN(const std::string act_name, c.String("activation_function", "relu"));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "activation_function", act_name));
  FFLITE_ASSIGN_OR_RETURN(const bool norm_before, c.Bool("do_layer_norm_before", true));
  FFLITE_ASSIGN_OR_RETURN(const bool bias, c.Bool("enable_bias", true));
  FFLITE_ASSIGN_OR_RETURN(const bool affine, c.Bool("layer_norm_elementwise_affine", true));
  if (!affine && ctx.include_norm) {
    return c.Error("layer_norm_elementwise_affine",
                   "false (a LayerNorm without weight and bias) is not supported");
  }
  constexpr double kEps = 1e-5;  // nn.LayerNorm(hidden_size): not configurable
  // OPTForCausalLM saves under "model.decoder."; a bare OPTModel under "decoder.".
  std::string prefix;
  if (ctx.checkpoint.HasPrefix("model.decoder.layers.")) {
    prefix = "model.";
  } else if (!ctx.checkpoint.HasPrefix("decoder.layers.")) {
    return absl::NotFoundError(absl::StrFormat(
        "'%s': no OPT layers: expected names starting with \"model.decoder.layers.0.\" or "
        "\"decoder.layers.0.\"", ctx.checkpoint.dir()));
  }
  plan.metadata = {{"source.activation_function", act_name},
                   {"source.do_layer_norm_before", norm_before ? "true" : "false"},
                   {"source.prefix", prefix}};
  const uint32_t d = plan.d_model;
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string name = absl::StrFormat("%sdecoder.layers.%d", prefix, i);
    plan.sublayers.push_back({name, [&ctx, name, d, d_ff, act, norm_before, bias]()
                                        -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = name;
      l.ffn.activation = act;
      l.ffn.d_ff = d_ff;
      FFLITE_ASSIGN_OR_RETURN(l.ffn.up, Tensor(ctx, name + ".fc1.weight", {d_ff, d},
                                               "[ffn_dim, hidden_size]"));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.down, Tensor(ctx, name + ".fc2.weight", {d, d_ff},
                                                 "[hidden_size, ffn_dim]"));
      if (bias) {
        FFLITE_ASSIGN_OR_RETURN(l.ffn.up_bias,
                                Tensor(ctx, name + ".fc1.bias", {d_ff}, "[ffn_dim]"));
        FFLITE_ASSIGN_OR_RETURN(l.ffn.down_bias,
                                Tensor(ctx, name + ".fc2.bias", {d}, "[hidden_size]"));
      }
      FFLITE_ASSIGN_OR_RETURN(
          l.norm, LayerNorm(ctx, name + ".final_layer_norm.weight",
                            name + ".final_layer_norm.bias", d, kEps,
                            norm_before ? NormPlacement::PRE : NormPlacement::POST));
      l.residual = true;
      return l;
    }});
  }
  return plan;
}

}  // namespace converter
}  // namespace fflite
