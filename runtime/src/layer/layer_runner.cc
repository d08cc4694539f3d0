// A layer's steps around its body, once for every backend (see layer_runner.h).
#include "layer/layer_runner.h"

#include <algorithm>

#include "base/status_macros.h"
#include "format/dtype.h"

namespace fflite {

LayerSteps StepsOf(const LayerView& layer) {
  LayerSteps s;
  s.pre_norm = layer.norm.present && (layer.norm.placement == NormPlacement::PRE ||
                                      layer.norm.placement == NormPlacement::SANDWICH);
  s.post_norm = layer.norm.present && layer.norm.placement == NormPlacement::POST;
  s.output_norm = layer.output_norm.present;
  s.residual = layer.residual;
  return s;
}

void NormWeightAsApplied(const NormView& norm, float* out) {
  const uint64_t d = norm.weight.numel();
  FindDType(norm.weight.dtype)->to_f32(norm.weight.data, 0, d, out);
  if (!norm.unit_offset) return;
  for (uint64_t i = 0; i < d; ++i) out[i] += 1.0f;
}

void LayerRunner::Init(const Model& model, size_t max_pass_tokens, const NeuronScales* scales,
                       const NeuronCapture* capture, ExpertCounts* counts) {
  scales_ = scales;
  capture_ = capture;
  moe_.Init(model, max_pass_tokens, counts);
}

absl::Status LayerRunner::Run(const Model& model, size_t layer, LayerExecutor& exec,
                              ExpertExecutor* experts, const float* x, size_t n, float* y) {
  const LayerView& l = model.layers()[layer];
  const size_t d = model.d_model();
  const size_t per = std::max<size_t>(1, exec.PassTokens(l));
  LayerPass pass;
  pass.layer = layer;
  pass.view = &l;
  pass.steps = StepsOf(l);
  pass.capture = capture_->Get(layer);
  pass.scale = l.kind == LayerKind::kDense ? scales_->Get(layer, -1) : nullptr;
  for (size_t t0 = 0; t0 < n; t0 += per) {
    pass.t0 = t0;
    pass.n = std::min(per, n - t0);
    pass.x = x + t0 * d;
    pass.y = y + t0 * d;
    pass.last = t0 + pass.n == n;
    bool residual_added = false;
    if (l.kind == LayerKind::kDense) {
      FFLITE_ASSIGN_OR_RETURN(const bool whole, exec.RunWholePass(pass));
      if (whole) continue;
      FFLITE_RETURN_IF_ERROR(exec.PreNorm(pass));
      FFLITE_RETURN_IF_ERROR(exec.Dense(pass));
    } else {
      FFLITE_RETURN_IF_ERROR(exec.PreNorm(pass));
      MoeCall call;
      call.layer = layer;
      call.moe = &l.moe;
      call.t0 = t0;
      call.n = pass.n;
      call.last = pass.last;
      call.capture = pass.capture;
      // With an output norm the residual comes after it, in Finish.
      call.residual = pass.steps.residual && !pass.steps.output_norm ? pass.x : nullptr;
      FFLITE_ASSIGN_OR_RETURN(residual_added, moe_.Run(call, *scales_, *experts));
    }
    FFLITE_RETURN_IF_ERROR(exec.Finish(pass, residual_added));
  }
  return absl::OkStatus();
}

}  // namespace fflite
