// Neuron edits (see neuron_scales.h).
#include "layer/neuron_scales.h"

#include <utility>

namespace fflite {

void NeuronScales::Init(const Model& model) {
  slots_.clear();
  count_ = 0;
  for (const LayerView& l : model.layers()) {
    slots_.emplace_back(l.kind == LayerKind::kMoe ? l.moe.num_experts : 1);
  }
}

void NeuronScales::Set(size_t layer, int expert, std::vector<float> scales) {
  std::vector<float>& slot = slots_[layer][expert < 0 ? 0 : static_cast<size_t>(expert)];
  count_ -= slot.empty() ? 0 : 1;
  slot = std::move(scales);
  count_ += slot.empty() ? 0 : 1;
}

}  // namespace fflite
