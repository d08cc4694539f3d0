// Neuron edits, backend-neutral: per FFN (a dense layer's, or a routed expert's), a scale per
// neuron applied as h_i <- s_i · h_i to the hidden activations (after the activation and the GLU
// product) before the down projection; 0 switches a neuron off. Set and cleared at run time by the
// session (fflite_session_set_neuron_scales), never in the model file. Every backend reads them
// here, so the edit means the same everywhere.
#ifndef FFLITE_RUNTIME_SRC_LAYER_NEURON_SCALES_H_
#define FFLITE_RUNTIME_SRC_LAYER_NEURON_SCALES_H_

#include <cstddef>
#include <vector>

#include "format/model.h"

namespace fflite {

class NeuronScales {
 public:
  // One slot per dense layer and per routed expert of each MoE layer, all empty.
  void Init(const Model& model);
  // scales: [d_ff_padded] of that FFN (the padding's entries 1), or empty to clear. expert: -1 for
  // a dense layer. The session has checked the arguments.
  void Set(size_t layer, int expert, std::vector<float> scales);
  // [d_ff_padded] or nullptr when that FFN has none (also before Init: backends made outside a
  // session have no edits).
  const float* Get(size_t layer, int expert) const {
    if (count_ == 0) return nullptr;
    const std::vector<float>& s = slots_[layer][expert < 0 ? 0 : static_cast<size_t>(expert)];
    return s.empty() ? nullptr : s.data();
  }

 private:
  std::vector<std::vector<std::vector<float>>> slots_;  // [layer][expert, or 0 for dense]
  size_t count_ = 0;                                    // slots set
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_LAYER_NEURON_SCALES_H_
