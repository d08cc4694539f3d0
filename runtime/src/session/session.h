// A session: one model, one backend instance, the caller's limits. Checks run() arguments; the
// backend trusts them.
#ifndef FFLITE_RUNTIME_SRC_SESSION_SESSION_H_
#define FFLITE_RUNTIME_SRC_SESSION_SESSION_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "format/model.h"

namespace fflite {

struct SessionOptions {
  int num_threads = 1;
  std::string backend = "auto";  // "auto" or a registry name
  size_t max_tokens = 512;
  // Most bytes of routed-expert weights a backend keeps in memory; 0: no limit. See
  // BackendConfig::expert_budget_bytes.
  uint64_t expert_budget_bytes = 0;
  // Quantised weights multiply float activations at every token count (batch-invariant
  // results): BackendConfig::float_activations.
  bool float_activations = false;
  // The caller's thread pool and fflite's own pool's wait policy: BackendConfig's fields.
  void (*parallel_for)(void* pool_context, void (*task)(void* context, size_t i), void* context,
                       size_t n) = nullptr;
  void* parallel_for_context = nullptr;
  bool sleep_between_loops = false;
  // For tests and fflite-bench (not in the C API): the CPU backend's tuning (nullptr: its
  // defaults; it must outlive Create), and timing of routed experts (Stats().routed_seconds).
  const CpuBackendOptions* cpu_options = nullptr;
  bool time_routed_experts = false;
};

// The one error for a layer index outside [0, num_layers) (every call that takes a layer, from
// C++ and C alike, negative ones included): OutOfRange naming the index and the valid range.
absl::Status LayerOutOfRange(int64_t layer, size_t num_layers);

inline constexpr size_t kMaxTokensLimit = size_t{1} << 20;
inline constexpr int kMaxThreads = 1024;

// Thread safety: one thread at a time. The model must outlive the session.
class Session {
 public:
  // Errors: InvalidArgument for bad options (threads, max_tokens, unknown backend name),
  // FailedPrecondition when the named backend is not built or cannot run here, and the backend's own errors.
  static absl::StatusOr<std::unique_ptr<Session>> Create(const Model& model,
                                                         const SessionOptions& options);

  // Errors: InvalidArgument (null or overlapping buffers), OutOfRange (layer, n_tokens).
  absl::Status Run(size_t layer, const float* input, size_t n_tokens, float* output);
  // Run with input and output in device memory, queued on `stream` (null: the backend's own,
  // finished before returning). Same checks as Run; Unimplemented on backends that run on host
  // memory.
  absl::Status RunDevice(size_t layer, const float* input, size_t n_tokens, float* output,
                         void* stream);

  // Routing statistics: how many tokens each expert of MoE `layer` received since the session was
  // created or last reset (a token routed to k experts counts once for each). Empty for a dense
  // layer. The span is valid until the next Run or Reset. Errors: OutOfRange (layer),
  // Unimplemented (the backend keeps no statistics).
  absl::StatusOr<absl::Span<const uint64_t>> ExpertCounts(size_t layer);
  // Sets every count to zero. Errors: Unimplemented as above.
  absl::Status ResetExpertCounts();

  // Neuron edits: h_i <- scales[i] · h_i before the down projection of one FFN (expert -1: a dense
  // layer's; 0 .. num_experts - 1: a routed expert of an MoE layer), for later runs. count must
  // be the FFN's d_ff (logical), every value finite; the scales are copied. Errors: OutOfRange
  // (layer, expert >= num_experts), InvalidArgument (null, count, NaN/Inf, expert -1 on an MoE
  // layer or >= 0 on a dense one).
  absl::Status SetNeuronScales(size_t layer, int expert, const float* scales, size_t count);
  // Back to the model's weights for that FFN (no error if nothing was set). Errors as above.
  absl::Status ClearNeuronScales(size_t layer, int expert);

  // Capture (fflite_session_set_capture): the caller's buffers receive each later run's hidden
  // activations (and an MoE layer's routing) of `layer`; capacities in elements must hold
  // max_tokens rows. All null clears. Errors: OutOfRange (layer), InvalidArgument (buffers
  // inconsistent with the layer's kind, capacities).
  absl::Status SetCapture(size_t layer, float* h, size_t h_capacity, int32_t* experts,
                          float* weights, size_t route_capacity);

  // What the backend counted since creation (fflite-bench).
  BackendStats Stats() const { return backend_->Stats(); }
  // fflite_session_prepare: Backend::Prepare.
  absl::Status Prepare() { return backend_->Prepare(); }
  // What the backend holds now (fflite_session_memory).
  BackendMemory Memory() const { return backend_->Memory(); }

  const char* backend_name() const { return backend_name_; }
  // What the backend computes on ("cpu", or the GPU's name and properties).
  const char* device() const { return backend_->device(); }
  const Model& model() const { return model_; }
  size_t max_tokens() const { return max_tokens_; }

 private:
  // OutOfRange naming the layer count unless layer < it.
  absl::Status CheckLayer(size_t layer) const;
  // The FFN (layer, expert) names, or an error naming the bad argument.
  absl::StatusOr<const FfnView*> EditedFfn(size_t layer, int expert) const;
  absl::Status CheckRun(size_t layer, const float* input, size_t n_tokens,
                        const float* output) const;
  // The session over a created backend (its neuron edits and captures sized for the model).
  static std::unique_ptr<Session> Finish(const Model& model, const char* backend_name,
                                         size_t max_tokens, std::unique_ptr<Backend> backend);
  Session(const Model& model, const char* name, size_t max_tokens, std::unique_ptr<Backend> b)
      : model_(model), backend_name_(name), max_tokens_(max_tokens), backend_(std::move(b)) {}
  const Model& model_;
  const char* backend_name_;
  size_t max_tokens_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_SESSION_SESSION_H_
