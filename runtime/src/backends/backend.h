// The interface every backend implements, and the registry that lists them. Adding a backend
// touches its own folder and one line of registry.cc; the tests iterate the registry.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_BACKEND_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_BACKEND_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "format/model.h"
#include "backends/neuron_capture.h"
#include "backends/neuron_scales.h"
#include "moe/expert_counts.h"

namespace fflite {

struct BackendConfig {
  int num_threads = 1;   // >= 1
  size_t max_tokens = 0; // >= 1: the most tokens one Run may pass
  // Most bytes of packed routed-expert weights kept in memory (0: no limit). Backends that pack
  // weights (xnnpack) pack experts on first use and drop the least recently used ones beyond it;
  // backends that read the model in place ignore it. Results do not depend on it.
  uint64_t expert_budget_bytes = 0;
};

// One backend instance serves one session: it may keep scratch and packed weights, and is used by
// one thread at a time. The model outlives it.
class Backend {
 public:
  virtual ~Backend() = default;
  // input, output: [n_tokens, d_model] f32, row-major, not overlapping. The session has already
  // checked layer < layers().size() and 1 <= n_tokens <= max_tokens.
  virtual absl::Status Run(size_t layer, const float* input, size_t n_tokens, float* output) = 0;
  // The same with input and output in the device's memory, queued on `stream` (the backend's own
  // stream if null, and then finished before returning). Backends that run on host memory refuse
  // it (the default).
  virtual absl::Status RunDevice(size_t layer, const float* input, size_t n_tokens, float* output,
                                 void* stream);
  // What the session computes on, e.g. "cpu" or "NVIDIA H200 (sm_90, 139.8 GiB)"; lives as long
  // as the backend.
  virtual const char* device() const { return "cpu"; }
  // Routing statistics: tokens each expert of each MoE layer received since creation or the last
  // reset (every backend counts through the shared ExpertCounts). nullptr: not kept.
  virtual ExpertCounts* expert_counts() { return nullptr; }

  // Neuron edits (Session::SetNeuronScales): every backend applies neuron_scales() to the hidden
  // activations of each FFN before its down projection. NeuronScalesChanged is called after the
  // scales of (layer, expert) changed, between runs; backends that keep copies (on a device)
  // update them.
  NeuronScales& neuron_scales() { return neuron_scales_; }
  virtual absl::Status NeuronScalesChanged(size_t /*layer*/, int /*expert*/) {
    return absl::OkStatus();
  }

  // Neuron capture (Session::SetCapture): every backend copies each run's hidden activations (and
  // an MoE layer's routing) into neuron_capture().Get(layer)'s buffers when it is set.
  NeuronCapture& neuron_capture() { return neuron_capture_; }

 protected:
  NeuronScales neuron_scales_;
  NeuronCapture neuron_capture_;
};

struct BackendEntry {
  const char* name;
  // Whether the backend can run here; if not, `why` says why (for example "no CUDA device").
  bool (*available)(std::string* why);
  absl::StatusOr<std::unique_ptr<Backend>> (*create)(const Model& model,
                                                     const BackendConfig& config);
  // Whether `auto` may choose it (where available). A backend that has not yet passed the suite
  // on real hardware is built and can be named, but is not chosen by `auto`.
  bool auto_choice;
};

// Every backend compiled in, in the order `auto` prefers them.
absl::Span<const BackendEntry> Backends();
// nullptr if no backend has that name.
const BackendEntry* FindBackend(const std::string& name);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_BACKEND_H_
