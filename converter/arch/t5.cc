// t5: DenseReluDense (wi, wo; or T5 v1.1's gated wi_0 / wi_1, wo), no biases, with T5LayerNorm
// (an RMSNorm: no mean subtraction, no bias) as pre-norm and the residual. Encoder blocks hold the
// FFN at layer.1, decoder blocks at layer.2. Source: transformers models/t5/modeling_t5.py
// (T5LayerNorm, T5DenseActDense, T5DenseGatedActDense, T5LayerFF) and configuration_t5.py
// (feed_forward_proj "{act}" or "gated-{act}"; "gated-gelu" means gelu_new).
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {

absl::StatusOr<ArchPlan> ConvertT5(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("d_model"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t d_ff, c.Dim("d_ff"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t enc_layers, c.Count("num_layers", 1, 1 << 16));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t dec_layers,
                          c.Count("num_decoder_layers", 0, 1 << 16, enc_layers));
  FFLITE_ASSIGN_OR_RETURN(const double eps, c.Epsilon("layer_norm_epsilon", 1e-6));
  FFLITE_ASSIGN_OR_RETURN(const std::string proj, c.String("feed_forward_proj", "relu"));
  const std::vector<std::string> parts = absl::StrSplit(proj, '-');
  if (parts.size() > 2 || (parts.size() == 2 && parts[0] != "gated")) {
    return c.Error("feed_forward_proj", absl::StrFormat("\"%s\" is not of the form \"{ACT_FN}\" "
                                                        "or \"gated-{ACT_FN}\"", proj));
  }
  std::string act_name = parts.back();
  bool gated = parts[0] == "gated";
  if (proj == "gated-gelu") act_name = "gelu_new";  // T5Config's backwards compatibility rule
  // T5Config stores the derived dense_act_fn / is_gated_act, and values in config.json win.
  FFLITE_ASSIGN_OR_RETURN(act_name, c.String("dense_act_fn", act_name));
  FFLITE_ASSIGN_OR_RETURN(gated, c.Bool("is_gated_act", gated));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "dense_act_fn", act_name));
  // A T5EncoderModel checkpoint has no decoder.
  const bool has_decoder = dec_layers > 0 && ctx.checkpoint.HasPrefix("decoder.block.");
  plan.metadata = {{"source.feed_forward_proj", proj}, {"source.dense_act_fn", act_name}};
  const uint32_t d = plan.d_model;
  auto add = [&](const std::string& stack, uint32_t i, int ff_index) {
    const std::string name = absl::StrFormat("%s.block.%d.layer.%d", stack, i, ff_index);
    plan.sublayers.push_back({name, [&ctx, name, d, d_ff, act, gated, eps]()
                                        -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = name;
      const std::string drd = name + ".DenseReluDense.";
      if (gated) {
        // wo(act(wi_0(x)) * wi_1(x))
        GatedNames names;
        names.gate = "wi_0";
        names.up = "wi_1";
        names.down = "wo";
        FFLITE_ASSIGN_OR_RETURN(l.ffn, GatedFfn(ctx, name + ".DenseReluDense", names, d, d_ff,
                                                "d_ff", act, false));
      } else {
        // wo(act(wi(x)))
        l.ffn.activation = act;
        l.ffn.d_ff = d_ff;
        FFLITE_ASSIGN_OR_RETURN(l.ffn.up, Tensor(ctx, drd + "wi.weight", {d_ff, d},
                                                 "[d_ff, d_model]"));
        FFLITE_ASSIGN_OR_RETURN(l.ffn.down, Tensor(ctx, drd + "wo.weight", {d, d_ff},
                                                   "[d_model, d_ff]"));
      }
      // h = x + DenseReluDense(layer_norm(x)); T5LayerNorm = RMSNorm.
      FFLITE_ASSIGN_OR_RETURN(l.norm, RmsNorm(ctx, name + ".layer_norm.weight", d, eps, false));
      l.residual = true;
      return l;
    }});
  };
  for (uint32_t i = 0; i < enc_layers; ++i) add("encoder", i, 1);
  if (has_decoder) {
    for (uint32_t i = 0; i < dec_layers; ++i) add("decoder", i, 2);
  }
  return plan;
}

}  // namespace converter
}  // namespace fflite
