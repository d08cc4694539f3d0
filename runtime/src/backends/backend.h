// The interface every backend implements, and the registry that lists them. Adding a backend
// touches its own folder, one line of registry.cc, its sources and option in CMake and, to be
// named from C, an fflite_backend value in fflite.h with its line in c_api.cc; the tests iterate
// the registry. What a layer means is written once, outside every backend: a backend implements
// the executors of layer/layer_runner.h and moe/moe_runner.h and runs its layers through runner_.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_BACKEND_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_BACKEND_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "format/model.h"
#include "layer/layer_runner.h"
#include "layer/neuron_capture.h"
#include "layer/neuron_scales.h"
#include "moe/expert_counts.h"

namespace fflite {

struct CpuBackendOptions;  // backends/cpu/cpu_options.h

struct BackendConfig {
  int num_threads = 1;   // >= 1
  size_t max_tokens = 0; // >= 1: the most tokens one Run may pass
  // Most bytes of routed-expert weights kept in memory (0: no limit): the CPU backend keeps an
  // expert's forms (packed weights, file bytes: read into the slots of moe/expert_pool.h for a
  // file-backed model) on first use and drops the least recently used ones beyond it; the
  // reference reads the model in place and ignores it; cuda refuses a nonzero budget. Results
  // do not depend on it.
  uint64_t expert_budget_bytes = 0;
  // For fflite-bench: time the routed experts of every MoE call (BackendStats::routed_seconds).
  bool time_routed_experts = false;
  // Quantised weights multiply float activations at every token count (the CPU backend's
  // int8-activation kernels are not used): each token's output is the same whatever else is in
  // the call. Backends that always multiply in float ignore it.
  bool float_activations = false;
  // The caller's parallel-for (fflite_session_options.parallel_for), or nullptr: the CPU backend
  // then runs its loops on it, split for num_threads threads, and starts no thread of its own.
  void (*parallel_for)(void* pool_context, void (*task)(void* context, size_t i), void* context,
                       size_t n) = nullptr;
  void* parallel_for_context = nullptr;
  // fflite's own pool's workers sleep after every loop (FFLITE_WAIT_SLEEP) instead of spinning
  // between the loops of a Run.
  bool sleep_between_loops = false;
  // The CPU backend's tuning (tests, fflite-bench), or nullptr: its defaults. Other backends
  // ignore it. It must outlive the backend's creation.
  const CpuBackendOptions* cpu_options = nullptr;
};

// What a backend reports to the tools (fflite-bench), counted since its creation. Zero where a
// backend does not keep a counter.
struct BackendStats {
  // Routed experts' resident forms now, as an expert budget counts them.
  uint64_t resident_expert_bytes = 0;
  // Bytes of the forms routed experts' batches ran on: each batch of an expert's tokens counts
  // the whole form it read (packed weights, or the file's bytes of its matrices).
  uint64_t routed_expert_bytes = 0;
  // Seconds in routed experts (BackendConfig::time_routed_experts; gather, FFN, scatter-add).
  double routed_seconds = 0.0;
  // Batches of routed experts (an expert's tokens in one pass), and how many of them ran many at
  // once (the CPU's experts alone: each whole on one thread).
  uint64_t routed_batches = 0;
  uint64_t routed_batches_together = 0;
  // Value rows (down matrices stored as VALUE_ROWS) read and held by the matrices read; the same
  // for the up rows of ReGLU FFNs that few-token calls compute only for the neurons whose gate
  // fired.
  uint64_t value_rows_read = 0, value_rows_total = 0;
  uint64_t up_rows_read = 0, up_rows_total = 0;
  // Routed experts' forms found resident when a batch needed them, and made for it (a form's
  // first use is a miss).
  uint64_t expert_hits = 0, expert_misses = 0;
  // Streamed experts (an expert budget on a file-backed model, moe/expert_pool.h): the slots
  // and the bytes of one, the experts read into them, the bytes read through the page cache and
  // past it, and the seconds the compute waited for the reads.
  uint64_t expert_slots = 0, expert_slot_bytes = 0;
  uint64_t expert_reads = 0, expert_read_buffered_bytes = 0, expert_read_direct_bytes = 0;
  double expert_read_wait_seconds = 0.0;
  // Streamed experts read ahead (the call's own, and guesses at the next MoE layer's), then used
  // by a batch; read ahead and dropped unused.
  uint64_t expert_prefetches_used = 0, expert_prefetches_wasted = 0;
};

// The memory a backend holds (fflite_memory_info, less the model's).
struct BackendMemory {
  uint64_t prepared_bytes = 0;  // packed dense layers, routers, shared experts
  uint64_t expert_bytes = 0;       // routed experts' resident forms, as the budget counts them
  uint64_t expert_slot_bytes = 0;  // slots reserved for streamed experts
  uint64_t scratch_bytes = 0;   // buffers sized at creation
  uint64_t device_bytes = 0;    // on a device (cuda)
};

// One backend instance serves one session: it may keep scratch and packed weights, and is used by
// one thread at a time. The model outlives it.
class Backend {
 public:
  virtual ~Backend() = default;
  // input, output: [n_tokens, d_model] f32, row-major, the same buffer (in place) or not
  // overlapping. The session has already
  // checked layer < layers().size() and 1 <= n_tokens <= max_tokens.
  virtual absl::Status Run(size_t layer, const float* input, size_t n_tokens, float* output) = 0;
  // The same with input and output in the device's memory, queued on `stream` (the backend's own
  // stream if null, and then finished before returning). Backends that run on host memory refuse
  // it (the default).
  virtual absl::Status RunDevice(size_t layer, const float* input, size_t n_tokens, float* output,
                                 void* stream);
  // Prepares now what calls of up to max_tokens tokens would prepare on first use (dense layers'
  // packed forms, scale checks of dense layers; not routed experts): fflite_session_prepare.
  // Errors: those of the first use; the backend stays usable. The default: nothing to prepare.
  virtual absl::Status Prepare() { return absl::OkStatus(); }
  // What it holds now.
  virtual BackendMemory Memory() const { return {}; }
  // What the session computes on, e.g. "cpu" or "NVIDIA H200 (sm_90, 139.8 GiB)"; lives as long
  // as the backend.
  virtual const char* device() const { return "cpu"; }
  // Routing statistics: tokens each expert of each MoE layer received since creation or the last
  // reset (the MoE runner counts for every backend; a backend that counts elsewhere, on a
  // device, adds its counts here first).
  virtual ExpertCounts* expert_counts() { return &counts_; }
  // The tools' statistics (BackendStats).
  virtual BackendStats Stats() const;

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
  // Sizes the routing statistics and the layer runner for `model` and passes of up to
  // max_pass_tokens tokens (each backend's creation calls it once).
  void InitRunner(const Model& model, size_t max_pass_tokens, bool time_routed_experts);

  NeuronScales neuron_scales_;
  NeuronCapture neuron_capture_;
  ExpertCounts counts_;
  LayerRunner runner_;
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

// `auto`: the first of `entries` (in order) that `auto` may choose, runs here and takes this
// model and config (cuda refuses expert budgets, say, and can run out of device memory): after a
// refusal the next one is tried, and the last refusal is the error returned
// (FAILED_PRECONDITION when none runs here). *chosen: the entry that took it.
absl::StatusOr<std::unique_ptr<Backend>> CreateAutoBackend(absl::Span<const BackendEntry> entries,
                                                           const Model& model,
                                                           const BackendConfig& config,
                                                           const BackendEntry** chosen);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_BACKEND_H_
