// phi3: one fused gate_up_proj [2·d_ff, d] whose first half is the gate and second half the up
// projection. Source: transformers models/phi3/modeling_phi3.py (Phi3MLP: `gate, up_states =
// up_states.chunk(2, dim=-1)`; `up_states * activation_fn(gate)`), Phi3DecoderLayer.
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {

absl::StatusOr<ArchPlan> ConvertPhi3(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("hidden_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t d_ff, c.Dim("intermediate_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, c.Count("num_hidden_layers", 1, 1 << 16));
  FFLITE_ASSIGN_OR_RETURN(const std::string act_name, c.String("hidden_act", "silu"));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "hidden_act", act_name));
  FFLITE_ASSIGN_OR_RETURN(const double eps, c.Epsilon("rms_norm_eps", 1e-5));
  plan.metadata = {{"source.hidden_act", act_name}};
  const uint32_t d = plan.d_model;
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    plan.sublayers.push_back({layer + ".mlp", [&ctx, layer, d, d_ff, act, eps]()
                                                  -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = layer + ".mlp";
      l.ffn.activation = act;
      l.ffn.gated = true;
      l.ffn.d_ff = d_ff;
      const std::string fused = layer + ".mlp.gate_up_proj.weight";
      const char* dims = "[2 * intermediate_size, hidden_size]";
      FFLITE_ASSIGN_OR_RETURN(l.ffn.gate, TensorRows(ctx, fused, 2 * uint64_t{d_ff}, d, 0, d_ff,
                                                     dims));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.up, TensorRows(ctx, fused, 2 * uint64_t{d_ff}, d, d_ff, d_ff,
                                                   dims));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.down, Tensor(ctx, layer + ".mlp.down_proj.weight", {d, d_ff},
                                                 "[hidden_size, intermediate_size]"));
      FFLITE_RETURN_IF_ERROR(PostAttentionPreNorm(ctx, layer, d, eps, /*unit_offset=*/false, &l));
      return l;
    }});
  }
  return plan;
}

}  // namespace converter
}  // namespace fflite
