// A layer's steps around its FFN or MoE, the same on every backend (one definition, so that norm
// placement, residual order and the norm's weight cannot drift between them):
//   pre-norm:  y = [x +] FFN(Norm(x))      post-norm:  y = Norm([x +] FFN(x))
// LayerNorm: (x - mean) / sqrt(var + eps) · w' + b      RMSNorm: x / sqrt(mean(x²) + eps) · w'
// w' = 1 + w with unit_offset (Gemma), else w; var is the population variance.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_LAYER_STEPS_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_LAYER_STEPS_H_

#include "format/model.h"

namespace fflite {

struct LayerSteps {
  bool pre_norm = false;   // Norm(x) feeds the FFN
  bool post_norm = false;  // Norm([x +] FFN(..)) is the output
  bool residual = false;   // x is added to the FFN's output (before a post-norm)
};

LayerSteps StepsOf(const LayerView& layer);

// w' of a present norm as f32, out[d_model].
void NormWeightAsApplied(const NormView& norm, float* out);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_LAYER_STEPS_H_
