// Neuron capture, backend-neutral: per layer, the caller's buffers that receive each token's
// hidden activations h (as fed to the down projection: after the activation, the GLU product and
// the neuron edits; logical d_ff) and, for an MoE layer, its routing (experts in rank order and
// their weights) with the routed experts' h in the same order. Set by the session
// (fflite_session_set_capture), which has checked the buffers' sizes against max_tokens; every
// backend copies into them through the helpers below, so the layout means the same everywhere.
#ifndef FFLITE_RUNTIME_SRC_LAYER_NEURON_CAPTURE_H_
#define FFLITE_RUNTIME_SRC_LAYER_NEURON_CAPTURE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fflite {

// One layer's buffers. Rows are tokens of the current run.
struct LayerCapture {
  float* h = nullptr;          // dense [n, d_ff]; MoE [n, top_k, d_ff]; or nullptr
  int32_t* experts = nullptr;  // MoE [n, top_k] or nullptr (then weights too)
  float* weights = nullptr;    // MoE [n, top_k]
  size_t d_ff = 0;             // logical: the row length of h per FFN
  uint32_t top_k = 1;          // 1 for a dense layer

  bool active() const { return h != nullptr || experts != nullptr; }

  // h of tokens [t0, t0 + m) of a dense layer from `hidden` rows [m, stride].
  void DenseRows(size_t t0, const float* hidden, size_t stride, size_t m) const;
  // h of routed expert `expert` for m tokens: row r of `hidden` [m, stride] is token tokens[r]
  // (relative to t0) of the run; chosen [., top_k] holds each token's experts (relative to t0 as
  // well), which places the row in the token's rank order.
  void ExpertRows(size_t t0, uint32_t expert, const uint32_t* tokens, size_t m,
                  const uint32_t* chosen, const float* hidden, size_t stride) const;
  // Where h of routed expert `expert` for token t (relative to t0) goes: the token's slot of that
  // expert in chosen [., top_k] (its rank order).
  float* ExpertRow(size_t t0, size_t t, uint32_t expert, const uint32_t* chosen) const {
    // A token picks an expert at most once; the caller knows it picked this one.
    uint32_t j = 0;
    while (j + 1 < top_k && chosen[t * top_k + j] != expert) ++j;
    return h + ((t0 + t) * top_k + j) * d_ff;
  }
  // The routing of tokens [t0, t0 + n): chosen and weights [n, top_k].
  void Route(size_t t0, size_t n, const uint32_t* chosen, const double* weights) const;
};

class NeuronCapture {
 public:
  void Init(size_t num_layers) {
    slots_.assign(num_layers, LayerCapture());
    count_ = 0;
  }
  // c.active() false clears.
  void Set(size_t layer, const LayerCapture& c);
  // nullptr when the layer captures nothing (also before Init: backends made outside a session).
  const LayerCapture* Get(size_t layer) const {
    return count_ != 0 && slots_[layer].active() ? &slots_[layer] : nullptr;
  }

 private:
  std::vector<LayerCapture> slots_;
  size_t count_ = 0;  // layers capturing
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_LAYER_NEURON_CAPTURE_H_
