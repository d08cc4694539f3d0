// A layer's steps around its body, written once for every backend, so that norm placement,
// residual order and the norm's weight cannot drift between them:
//   pre-norm:  y = [x +] Body(Norm(x))      post-norm:  y = Norm([x +] Body(x))
// LayerNorm: (x - mean) / sqrt(var + eps) · w' + b      RMSNorm: x / sqrt(mean(x²) + eps) · w'
// w' = 1 + w with unit_offset (Gemma), else w; var is the population variance.
// Body: a dense FFN (the backend's LayerExecutor) or the MoE sublayer (moe/moe_runner.h over the
// backend's ExpertExecutor). A run passes through the layer in chunks of the executor's size.
#ifndef FFLITE_RUNTIME_SRC_LAYER_LAYER_RUNNER_H_
#define FFLITE_RUNTIME_SRC_LAYER_LAYER_RUNNER_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "format/model.h"
#include "layer/neuron_capture.h"
#include "layer/neuron_scales.h"
#include "moe/expert_counts.h"
#include "moe/moe_runner.h"

namespace fflite {

struct LayerSteps {
  bool pre_norm = false;     // Norm(x) feeds the body
  bool post_norm = false;    // Norm([x +] Body(..)) is the output
  bool output_norm = false;  // OutNorm(Body(..)), then [x +]: a sandwich (with pre_norm)
  bool residual = false;     // x is added to the body's output (before a post-norm)
};

LayerSteps StepsOf(const LayerView& layer);

// w' of a present norm as f32, out[d_model].
void NormWeightAsApplied(const NormView& norm, float* out);

// One pass of a layer over a chunk of a run's tokens.
struct LayerPass {
  size_t layer = 0;
  const LayerView* view = nullptr;
  LayerSteps steps;
  const float* x = nullptr;  // [n, d_model]: the chunk's rows of the caller's input
  float* y = nullptr;        // [n, d_model]: the chunk's rows of the caller's output
  size_t t0 = 0;             // the chunk's first token in the run (capture rows)
  size_t n = 0;
  bool last = false;  // the run's last chunk
  const LayerCapture* capture = nullptr;  // the layer's capture, or nullptr
  const float* scale = nullptr;           // a dense layer's neuron edits, or nullptr
};

// What a backend implements for the layer runner, besides its ExpertExecutor. The executor keeps
// the pass's intermediate values (h, the body's output f) in its own buffers, in its own
// precision; the runner decides which steps run, in which order. Errors: a device's (the CPU's
// steps cannot fail but for packing on first use).
class LayerExecutor {
 public:
  virtual ~LayerExecutor() = default;
  // The most tokens of a run that pass through `layer` at once (the executor's buffers' rows).
  virtual size_t PassTokens(const LayerView& layer) const = 0;
  // The whole pass (norms, body, residual) where the executor can run its steps in another
  // order with the same results (say, each thread the steps of its own tokens); returns whether
  // it did. Called first for every pass of a dense layer.
  virtual absl::StatusOr<bool> RunWholePass(const LayerPass& /*pass*/) { return false; }
  // h = Norm(x) with steps.pre_norm, else x: the body's input.
  virtual absl::Status PreNorm(const LayerPass& pass) = 0;
  // f = FFN(h) of a dense layer, with pass.scale's neuron edits, its hidden activations copied to
  // pass.capture where it captures them.
  virtual absl::Status Dense(const LayerPass& pass) = 0;
  // y = Norm(r) with steps.post_norm, else r; r = f' + x with steps.residual (unless the body
  // added x already: residual_added), else f'; f' = OutNorm(f) with steps.output_norm (the body
  // never adds x then), else f.
  virtual absl::Status Finish(const LayerPass& pass, bool residual_added) = 0;
};

// Runs layers on a backend's executors. Holds the MoE runner's buffers and reads the session's
// neuron edits and captures (which outlive it); one thread at a time.
class LayerRunner {
 public:
  // Sizes the MoE runner for `model` and passes of up to max_pass_tokens tokens; the routing
  // statistics go to `counts`. scales, capture, counts: the backend's, outliving the runner.
  void Init(const Model& model, size_t max_pass_tokens, const NeuronScales* scales,
            const NeuronCapture* capture, ExpertCounts* counts);

  // y[n, d_model] = layer(x[n, d_model]), in passes of exec.PassTokens tokens (the MoE body on
  // `experts`, which an MoE layer needs). Errors: the executors'.
  absl::Status Run(const Model& model, size_t layer, LayerExecutor& exec,
                   ExpertExecutor* experts, const float* x, size_t n, float* y);

  MoeRunner& moe() { return moe_; }
  const MoeRunner& moe() const { return moe_; }

 private:
  const NeuronScales* scales_ = nullptr;
  const NeuronCapture* capture_ = nullptr;
  MoeRunner moe_;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_LAYER_LAYER_RUNNER_H_
