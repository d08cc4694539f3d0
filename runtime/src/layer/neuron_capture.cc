// Neuron capture (see neuron_capture.h).
#include "layer/neuron_capture.h"

#include <cstring>

namespace fflite {

void LayerCapture::DenseRows(size_t t0, const float* hidden, size_t stride, size_t m) const {
  if (h == nullptr) return;
  for (size_t r = 0; r < m; ++r) {
    std::memcpy(h + (t0 + r) * d_ff, hidden + r * stride, d_ff * sizeof(float));
  }
}

void LayerCapture::ExpertRows(size_t t0, uint32_t expert, const uint32_t* tokens, size_t m,
                              const uint32_t* chosen, const float* hidden, size_t stride) const {
  if (h == nullptr) return;
  for (size_t r = 0; r < m; ++r) {
    std::memcpy(ExpertRow(t0, tokens[r], expert, chosen), hidden + r * stride,
                d_ff * sizeof(float));
  }
}

void LayerCapture::Route(size_t t0, size_t n, const uint32_t* chosen,
                         const double* route_weights) const {
  if (experts == nullptr) return;
  for (size_t i = 0; i < n * top_k; ++i) {
    experts[t0 * top_k + i] = static_cast<int32_t>(chosen[i]);
    weights[t0 * top_k + i] = static_cast<float>(route_weights[i]);
  }
}

void NeuronCapture::Set(size_t layer, const LayerCapture& c) {
  LayerCapture& slot = slots_[layer];
  count_ -= slot.active() ? 1 : 0;
  slot = c.active() ? c : LayerCapture();
  count_ += slot.active() ? 1 : 0;
}

}  // namespace fflite
