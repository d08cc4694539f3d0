// The MoE sublayer, written once for every backend: route -> group the tokens by expert -> each
// active expert once over its tokens -> combine in expert order -> shared experts and their gate,
// with the routing statistics and the capture. Backends implement ExpertExecutor (the router,
// running one expert over gathered tokens, running many at once where they can, the shared
// experts); the order of every step and of every addition into the sum is decided here, so
// results do not depend on the expert budget, the thread count or which path ran an expert.
#ifndef FFLITE_RUNTIME_SRC_MOE_MOE_RUNNER_H_
#define FFLITE_RUNTIME_SRC_MOE_MOE_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "format/model.h"
#include "layer/neuron_capture.h"
#include "layer/neuron_scales.h"
#include "moe/expert_counts.h"
#include "moe/grouping.h"

namespace fflite {

// One call of an MoE layer on a chunk of tokens, as the runner hands it to the executor (whose
// buffers hold the chunk's input: the layer's pre-normed rows).
struct MoeCall {
  size_t layer = 0;
  const MoeView* moe = nullptr;
  size_t t0 = 0;  // the chunk's first token in the session's run (capture rows)
  size_t n = 0;   // tokens in the chunk
  bool last = false;                       // the run's last chunk
  const LayerCapture* capture = nullptr;   // the layer's capture, or nullptr
  // The chunk's rows of the layer's input x [n, d_model] when the layer adds its input to the
  // output (a fused path may add it itself: RunFused), else nullptr.
  const float* residual = nullptr;
  // After routing: each token's experts in rank order and their weights, [n, top_k].
  const uint32_t* chosen = nullptr;
  const double* route_weights = nullptr;
};

// One batch of one expert's tokens: rows [offset, offset + count) of the `group_count` tokens
// routed to it in the call, which are rows [first, first + group_count) of the grouping.
struct ExpertBatch {
  uint32_t expert = 0;
  size_t first = 0;        // the expert's first row in the grouping (ExpertGroups::offsets)
  size_t group_count = 0;  // tokens routed to the expert in this call
  size_t offset = 0;       // this batch's first row within the expert's tokens
  size_t count = 0;        // this batch's rows
  const uint32_t* tokens = nullptr;   // [count]: each row's token in the chunk
  const float* weights = nullptr;     // [count]: each row's routing weight, as f32
  const uint32_t* entries = nullptr;  // [count]: each row's entry t · top_k + j in the routing
  const float* scale = nullptr;       // the expert's neuron edits [d_ff_padded], or nullptr
  bool last = false;  // the last product of the run (no shared expert follows)
};

// What a backend implements for the MoE runner. Its methods are called in the order the runner
// documents (MoeRunner::Run) and trust their arguments.
class ExpertExecutor {
 public:
  virtual ~ExpertExecutor() = default;

  // The most tokens of one expert (and rows of a shared expert) one RunExpert (RunShared) takes:
  // larger groups come in batches of this many, in order.
  virtual size_t ExpertBatchTokens() const = 0;

  // The whole sublayer of the call on the executor's own routing, where it can do it without the
  // routing on the host (a GPU's fused decode): the same experts, the same sum in the same order,
  // with call.residual added; the routing statistics kept by the executor. Returns whether it
  // ran; called first, and only when the layer captures nothing.
  virtual absl::StatusOr<bool> RunFused(const MoeCall& /*call*/) { return false; }

  // experts, weights [n, top_k]: each token's routing (the router's product, then route::Route).
  virtual absl::Status Route(const MoeCall& call, uint32_t* experts, double* weights) = 0;

  // Before the experts run: the sum over the call's tokens is set to zero; `groups` is the
  // call's grouping (the rows every ExpertBatch names).
  virtual absl::Status BeginExperts(const MoeCall& call, const ExpertGroups& groups) = 0;

  // Run many: may run any of `batches` (one per active expert, each whole, in expert order) at
  // once, keeping each output for AddExpert, and sets ran[i] for each one it ran. Called only
  // when the layer captures nothing. The default runs none.
  virtual absl::Status RunMany(const MoeCall& /*call*/, absl::Span<const ExpertBatch> /*batches*/,
                               uint8_t* /*ran*/) {
    return absl::OkStatus();
  }

  // Run one: the expert's FFN over the batch's tokens (neuron edits applied, its hidden
  // activations copied to call.capture where it captures them), its output kept for AddExpert.
  virtual absl::Status RunExpert(const MoeCall& call, const ExpertBatch& batch) = 0;

  // sum[tokens[r]] += weight[r] · out[r] for the batch's rows, out the output RunExpert (or, with
  // ran_many, RunMany) kept for them.
  virtual absl::Status AddExpert(const MoeCall& call, const ExpertBatch& batch,
                                 bool ran_many) = 0;

  // Shared expert s over rows [r0, r0 + m) of the chunk: sum += g · shared_s(h), g the sigmoid of
  // the shared-expert gate's product with h where the layer has one, else 1. `last`: the last
  // product of the run.
  virtual absl::Status RunShared(const MoeCall& call, size_t s, size_t r0, size_t m,
                                 bool last) = 0;
};

// The runner's buffers, sized once for a model; Run allocates nothing. One thread at a time, like
// the backend that owns it.
class MoeRunner {
 public:
  // Sizes the buffers for the model's MoE layers and chunks of up to max_tokens tokens; counts:
  // where the routing statistics go (outlives the runner).
  void Init(const Model& model, size_t max_tokens, ExpertCounts* counts);

  // The MoE sublayer of `call` (call.n <= max_tokens):
  //   1. RunFused, where the layer captures nothing; if it ran, nothing else does;
  //   2. Route; the routing to call.capture; the tokens grouped by expert; the counts;
  //   3. BeginExperts; RunMany (no capture); for each expert with tokens, in expert order: the
  //      ones RunMany ran added (AddExpert), the others in batches of ExpertBatchTokens, each
  //      RunExpert then AddExpert;
  //   4. each shared expert in order, in batches of ExpertBatchTokens rows (RunShared).
  // Returns whether call.residual was added (by RunFused). Errors: the executor's.
  absl::StatusOr<bool> Run(const MoeCall& call, const NeuronScales& scales,
                           ExpertExecutor& exec);

  // Whether Run times its routed experts (step 3) into routed_seconds (fflite-bench).
  void set_time_routed(bool on) { time_routed_ = on; }
  double routed_seconds() const { return routed_seconds_; }

 private:
  ExpertCounts* counts_ = nullptr;
  std::vector<uint32_t> chosen_;  // [max_tokens, max top_k]
  std::vector<double> weights_;   // [max_tokens, max top_k]
  ExpertGroups groups_;
  std::vector<ExpertBatch> batches_;  // [max num_experts]: this call's active experts
  std::vector<uint8_t> ran_;          // [max num_experts]: which of batches_ RunMany ran
  bool time_routed_ = false;
  double routed_seconds_ = 0.0;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_MOE_MOE_RUNNER_H_
