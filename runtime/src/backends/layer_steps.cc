// A layer's steps around its FFN or MoE (see layer_steps.h).
#include "backends/layer_steps.h"

#include "format/dtype.h"

namespace fflite {

LayerSteps StepsOf(const LayerView& layer) {
  LayerSteps s;
  s.pre_norm = layer.norm.present && layer.norm.placement == NormPlacement::PRE;
  s.post_norm = layer.norm.present && layer.norm.placement == NormPlacement::POST;
  s.residual = layer.residual;
  return s;
}

void NormWeightAsApplied(const NormView& norm, float* out) {
  const uint64_t d = norm.weight.numel();
  FindDType(norm.weight.dtype)->to_f32(norm.weight.data, 0, d, out);
  if (!norm.unit_offset) return;
  for (uint64_t i = 0; i < d; ++i) out[i] += 1.0f;
}

}  // namespace fflite
