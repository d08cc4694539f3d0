// Experts alone: the CPU backend's "run many" of the MoE runner (moe/moe_runner.h). With a pool
// and many routed experts active in a call, splitting each expert's three products among the
// threads costs two waits per product (its activations packed or quantised, then its rows) and
// leaves the gathers and the scatter-add on one thread: qwen-moe at 128 tokens has ~60 experts of
// ~8 tokens each, 360 waits per call. Instead, when a call gives at least kExpertsAlonePerThread
// such experts per thread (at most `chunk` tokens each: packed ones, with more than the experts'
// direct limit and every matrix on the gemm engine, or quantised ones on the file's weights),
// each of them runs whole on one thread (gather, gate, up, activation, down: RunGemmFfnHere, or
// FfnRunner::RunQuantHere on a quantised engine of its own), the threads taking them largest
// first from a shared counter; one wait in all. Their outputs land at their grouping rows and the
// runner adds them into the sum in expert order with the others, so the bits are the same as the
// shared products'. Each task has its own scratch: task 0 the session's, the others their own.
// Under a budget, only when the call's experts fit it together (each must stay resident until
// every task is done).
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_EXPERTS_ALONE_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_EXPERTS_ALONE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "backends/cpu/engines.h"
#include "backends/cpu/expert_store.h"
#include "backends/cpu/plans.h"
#include "backends/cpu/quant_engine.h"
#include "moe/moe_runner.h"

namespace fflite {

class ExpertsAlone {
 public:
  // Whether a session can take the path: enabled, a pool, enough experts for every thread, and
  // experts that can run alone (a gemm engine for packed ones, or quantised ones).
  static bool Possible(bool enabled, size_t threads, size_t max_experts, bool gemm,
                       bool quantised) {
    return enabled && threads >= 2 && max_experts >= kExpertsAlonePerThread * threads &&
           (gemm || quantised);
  }
  // Units of packed activations one task needs for experts of d_model d and d_ff_padded ff.
  static size_t TaskUnits(const PackChoice& expert_choice, size_t chunk, size_t d, size_t ff);

  // Where this session's tasks work. Task 0 uses the session's buffers; tasks 1 .. threads - 1
  // the scratch's task regions (CpuScratch) and quantised engines of their own.
  struct Task {
    float* x;       // [chunk, DirectStride(d_model)]: the expert's tokens, gathered
    float* gate;    // [chunk, DirectStride(d_ff)]
    float* hidden;  // [chunk, DirectStride(d_ff)]
    uint32_t* gemm; // the gemm engine's packed activations (nullptr: no gemm engine)
    QuantEngine* quant;  // for quantised experts (nullptr: none)
  };
  // Sets up `threads` tasks: task0 as given; the others over task_floats (each x then gate and
  // hidden, sized for chunk tokens of d_model d and d_ff ff) and task_units (`units` each), with
  // quantised engines of quant's kernels and quant_gemm_min_tokens (the option) where task0 has
  // one. routed_out: the outputs' rows. ResourceExhausted when an engine's scratch cannot be
  // allocated.
  absl::Status Init(const Kernels& kernels, size_t threads, size_t chunk, size_t d, size_t ff,
                    const Task& task0, float* task_floats, uint32_t* task_units, size_t units,
                    size_t quant_gemm_min_tokens, size_t max_experts, float* routed_out);
  bool active() const { return !tasks_.empty(); }

  // Runs the eligible experts of `batches` alone when there are enough of them (see above),
  // their tokens gathered from `in` [n, d_model], and marks them in ran; the experts' direct
  // limit, the chunk and the store decide eligibility. Outputs at out(batch).
  struct Call {
    const MoePlan* plan;
    const float* in;
    size_t expert_direct_max;
    EngineContext ctx;
  };
  absl::Status Run(const Call& call, absl::Span<const ExpertBatch> batches, ExpertStore& store,
                   uint8_t* ran);
  // The output rows of a batch that ran alone: [group_count, d_model].
  const float* out(const ExpertBatch& b) const { return routed_out_ + b.first * d_; }
  // Batches run alone so far.
  uint64_t count() const { return count_; }

 private:
  struct Expert {
    size_t index;  // in the call's batches
    uint32_t expert;
    size_t count;
    size_t first;
    const uint32_t* tokens;
    GemmFfn ffn;                    // packed: its matrices (and neuron edits)
    const FileFfn* file = nullptr;  // quantised: its file weights (then ffn.scale the edits)
  };
  struct Job;
  static void RunTask(void* context, size_t task);
  // One expert on the calling thread with task t's scratch.
  void RunOne(const Expert& a, const Task& t, const float* in) const;

  const Kernels* kernels_ = nullptr;
  size_t chunk_ = 0, d_ = 0, threads_ = 0;
  std::vector<Task> tasks_;  // [threads]; empty where no call can take the path
  std::vector<std::unique_ptr<QuantEngine>> quants_;  // tasks 1 ..
  float* routed_out_ = nullptr;
  std::vector<Expert> experts_;  // this call's, reserved [max experts]
  uint64_t count_ = 0;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_EXPERTS_ALONE_H_
