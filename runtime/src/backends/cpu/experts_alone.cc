// Experts alone, each whole on one thread (experts_alone.h).
#include "backends/cpu/experts_alone.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "backends/cpu/ffn.h"
#include "base/status_macros.h"
#include "base/tsan.h"

namespace fflite {

size_t ExpertsAlone::TaskUnits(const PackChoice& c, size_t chunk, size_t d, size_t ff) {
  size_t units = 0;
  for (const GemmKernel* g : {c.gemm_f32, c.gemm_bf16, c.gemm_f16w, c.gemm_bf16w}) {
    if (g != nullptr) units = std::max(units, GemmScratchUnits(*g, chunk, std::max(d, ff)));
  }
  return units;
}

absl::Status ExpertsAlone::Init(const Kernels& kernels, size_t threads, size_t chunk, size_t d,
                                size_t ff, const Task& task0, float* task_floats,
                                uint32_t* task_units, size_t units, size_t quant_gemm_min_tokens,
                                size_t max_experts, float* routed_out) {
  kernels_ = &kernels;
  chunk_ = chunk;
  d_ = d;
  threads_ = threads;
  routed_out_ = routed_out;
  const size_t xs = chunk * DirectStride(d), hs = chunk * DirectStride(ff);
  tasks_.resize(threads);
  tasks_[0] = task0;
  for (size_t t = 1; t < threads; ++t) {
    float* f = task_floats + (t - 1) * (xs + 2 * hs);
    QuantEngine* q = nullptr;
    if (task0.quant != nullptr) {
      quants_.push_back(std::make_unique<QuantEngine>(task0.quant->gemv(), task0.quant->gemm(),
                                                      quant_gemm_min_tokens));
      if (!quants_.back()->Reserve(chunk, std::max(d, ff))) {
        tasks_.clear();
        return absl::ResourceExhaustedError(
            "allocating the quantised engine's per-thread scratch failed");
      }
      q = quants_.back().get();
    }
    tasks_[t] = Task{f, f + xs, f + xs + hs,
                     task0.gemm != nullptr ? task_units + (t - 1) * units : nullptr, q};
  }
  experts_.reserve(max_experts);
  return absl::OkStatus();
}

struct ExpertsAlone::Job {
  const ExpertsAlone* self;
  const float* in;
  std::atomic<size_t> next{0};
};

void ExpertsAlone::RunTask(void* context, size_t task) {
  auto& job = *static_cast<Job*>(context);
  FFLITE_TSAN_ACQUIRE(context);
  const ExpertsAlone& self = *job.self;
  const Task& t = self.tasks_[task];
  for (size_t i = job.next.fetch_add(1); i < self.experts_.size(); i = job.next.fetch_add(1)) {
    self.RunOne(self.experts_[i], t, job.in);
  }
  FFLITE_TSAN_RELEASE(context);
}

void ExpertsAlone::RunOne(const Expert& a, const Task& t, const float* in) const {
  const size_t d = d_;
  // Quantised experts take their tokens DirectStride apart, as on the shared path.
  const size_t stride = a.file != nullptr ? DirectStride(d) : d;
  for (size_t r = 0; r < a.count; ++r) {
    std::memcpy(t.x + r * stride, in + a.tokens[r] * d, d * sizeof(float));
  }
  float* out = routed_out_ + a.first * d;
  if (a.file == nullptr) {
    RunGemmFfnHere(a.ffn, a.count, t.x, d, t.gate, t.hidden, out, t.gemm);
  } else {
    FfnRunner::RunQuantHere(*kernels_, *a.file, a.count, t.x, stride, t.gate,
                            t.hidden, out, a.ffn.scale, *t.quant);
  }
}

absl::Status ExpertsAlone::Run(const Call& call, absl::Span<const ExpertBatch> batches,
                               ExpertStore& store, uint8_t* ran) {
  if (tasks_.empty()) return absl::OkStatus();
  experts_.clear();
  const bool gemm = tasks_[0].gemm != nullptr;
  const bool quantised = tasks_[0].quant != nullptr;
  uint64_t bytes = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const ExpertBatch& b = batches[i];
    const size_t c = b.group_count, slot = call.plan->first_slot + b.expert;
    if (c == 0 || c > chunk_) continue;
    const bool quant = store.slot(slot).all_quantized;
    if (quant ? quantised : gemm && c > call.expert_direct_max) {
      experts_.push_back(
          Expert{i, b.expert, c, b.first, b.tokens, {}, quant ? &store.slot(slot) : nullptr});
      bytes += store.FormBytes(slot, quant ? kFileForm : kPackedForm);
    }
  }
  const uint64_t budget = store.budget();
  if (experts_.size() < kExpertsAlonePerThread * threads_ || (budget != 0 && bytes > budget)) {
    return absl::OkStatus();
  }
  size_t kept = 0;
  for (size_t i = 0; i < experts_.size(); ++i) {
    Expert a = experts_[i];
    const size_t slot = call.plan->first_slot + a.expert;
    const float* scale = batches[a.index].scale;
    if (a.file != nullptr) {
      FFLITE_RETURN_IF_ERROR(store.FileForm(slot));
      a.ffn.scale = scale;  // the edits only
      experts_[kept++] = a;
      store.CountRead(slot, kFileForm);
      continue;
    }
    FFLITE_ASSIGN_OR_RETURN(PackedFfn* f, store.Packed(slot, call.ctx));
    if (!FfnRunner::WholeGemm(*f, &a.ffn)) continue;  // runs in the runner's loop
    a.ffn.scale = scale;
    experts_[kept++] = a;
    store.CountRead(slot, kPackedForm);
  }
  experts_.resize(kept);
  // Largest first (then in expert order), so that the threads' last experts are small ones.
  std::sort(experts_.begin(), experts_.end(), [](const Expert& a, const Expert& b) {
    return a.count != b.count ? a.count > b.count : a.expert < b.expert;
  });
  Job job;
  job.self = this;
  job.in = call.in;
  FFLITE_TSAN_RELEASE(&job);
  call.ctx.pool->For(RunTask, &job, threads_,
                             PoolFlags(call.ctx, /*last=*/false));
  FFLITE_TSAN_ACQUIRE(&job);
  for (const Expert& a : experts_) ran[a.index] = 1;
  count_ += experts_.size();
  return absl::OkStatus();
}

}  // namespace fflite
