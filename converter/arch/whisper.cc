// whisper: encoder and decoder layers each hold a plain FFN (fc1, fc2, with biases) behind
// final_layer_norm (a pre-LayerNorm, eps 1e-5: nn.LayerNorm's default) and the residual.
// Source: transformers models/whisper/modeling_whisper.py (WhisperEncoderLayer,
// WhisperDecoderLayer: `hidden = final_layer_norm(h); fc2(act(fc1(hidden))); residual + ...`).
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {

absl::StatusOr<ArchPlan> ConvertWhisper(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("d_model"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t enc_layers, c.Count("encoder_layers", 0, 1 << 16));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t dec_layers, c.Count("decoder_layers", 0, 1 << 16));
  uint32_t enc_ff = 0, dec_ff = 0;
  if (enc_layers > 0) {
    FFLITE_ASSIGN_OR_RETURN(enc_ff, c.Dim("encoder_ffn_dim"));
  }
  if (dec_layers > 0) {
    FFLITE_ASSIGN_OR_RETURN(dec_ff, c.Dim("decoder_ffn_dim"));
  }
  FFLITE_ASSIGN_OR_RETURN(const std::string act_name, c.String("activation_function", "gelu"));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "activation_function", act_name));
  constexpr double kEps = 1e-5;  // nn.LayerNorm(embed_dim): not configurable
  // WhisperForConditionalGeneration saves under "model."; a bare WhisperModel without.
  std::string prefix;
  if (ctx.checkpoint.HasPrefix("model.encoder.layers.") ||
      ctx.checkpoint.HasPrefix("model.decoder.layers.")) {
    prefix = "model.";
  } else if (!ctx.checkpoint.HasPrefix("encoder.layers.") &&
             !ctx.checkpoint.HasPrefix("decoder.layers.")) {
    return absl::NotFoundError(absl::StrFormat(
        "'%s': no Whisper layers: expected names starting with \"model.encoder.layers.0.\" or "
        "\"encoder.layers.0.\"", ctx.checkpoint.dir()));
  }
  plan.metadata = {{"source.activation_function", act_name}, {"source.prefix", prefix}};
  const uint32_t d = plan.d_model;
  auto add = [&](const std::string& stack, uint32_t i, uint32_t d_ff) {
    const std::string name = absl::StrFormat("%s%s.layers.%d", prefix, stack, i);
    plan.sublayers.push_back({name, [&ctx, name, d, d_ff, act]() -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = name;
      l.ffn.activation = act;
      l.ffn.d_ff = d_ff;
      const char* ff_key = "[encoder_ffn_dim or decoder_ffn_dim, d_model]";
      FFLITE_ASSIGN_OR_RETURN(l.ffn.up, Tensor(ctx, name + ".fc1.weight", {d_ff, d}, ff_key));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.up_bias, Tensor(ctx, name + ".fc1.bias", {d_ff}, "[ffn_dim]"));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.down, Tensor(ctx, name + ".fc2.weight", {d, d_ff},
                                                 "[d_model, ffn_dim]"));
      FFLITE_ASSIGN_OR_RETURN(l.ffn.down_bias, Tensor(ctx, name + ".fc2.bias", {d}, "[d_model]"));
      FFLITE_ASSIGN_OR_RETURN(l.norm, LayerNorm(ctx, name + ".final_layer_norm.weight",
                                                name + ".final_layer_norm.bias", d, kEps,
                                                NormPlacement::PRE));
      l.residual = true;
      return l;
    }});
  };
  for (uint32_t i = 0; i < enc_layers; ++i) add("encoder", i, enc_ff);
  for (uint32_t i = 0; i < dec_layers; ++i) add("decoder", i, dec_ff);
  return plan;
}

}  // namespace converter
}  // namespace fflite
