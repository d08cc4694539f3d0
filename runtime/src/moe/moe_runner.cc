// The MoE sublayer's steps, once for every backend (see moe_runner.h).
#include "moe/moe_runner.h"

#include <algorithm>
#include <chrono>

#include "base/status_macros.h"

namespace fflite {

void MoeRunner::Init(const Model& model, size_t max_tokens, ExpertCounts* counts) {
  counts_ = counts;
  size_t max_experts = 0, max_k = 0;
  for (const LayerView& l : model.layers()) {
    if (l.kind != LayerKind::kMoe) continue;
    max_experts = std::max<size_t>(max_experts, l.moe.num_experts);
    max_k = std::max<size_t>(max_k, l.moe.top_k);
  }
  if (max_experts == 0) return;
  chosen_.assign(max_tokens * max_k, 0);
  weights_.assign(max_tokens * max_k, 0.0);
  groups_.Reserve(static_cast<uint32_t>(max_experts), max_tokens, static_cast<uint32_t>(max_k));
  batches_.reserve(max_experts);
  ran_.assign(max_experts, 0);
}

absl::StatusOr<bool> MoeRunner::Run(const MoeCall& in, const NeuronScales& scales,
                                    ExpertExecutor& exec) {
  MoeCall call = in;
  if (call.capture == nullptr) {
    FFLITE_ASSIGN_OR_RETURN(const bool fused, exec.RunFused(call));
    if (fused) return true;
  }
  const MoeView& m = *call.moe;
  const uint32_t k = m.top_k, num_experts = m.num_experts;
  const size_t n = call.n;

  // Route, capture the routing, group the tokens by expert (a counting sort, stable in token
  // order), count.
  FFLITE_RETURN_IF_ERROR(exec.Route(call, chosen_.data(), weights_.data()));
  call.chosen = chosen_.data();
  call.route_weights = weights_.data();
  if (call.capture != nullptr) call.capture->Route(call.t0, n, chosen_.data(), weights_.data());
  GroupByExpert(chosen_.data(), weights_.data(), n, k, num_experts, &groups_);
  counts_->Add(call.layer, groups_);
  FFLITE_RETURN_IF_ERROR(exec.BeginExperts(call, groups_));

  // Each active expert once over its tokens (at decode only the top-k are touched), their
  // outputs added in expert order, whichever way each ran.
  batches_.clear();
  for (uint32_t e = 0; e < num_experts; ++e) {
    const size_t c = groups_.count(e);
    if (c == 0) continue;
    const size_t first = groups_.offsets[e];
    ExpertBatch b;
    b.expert = e;
    b.first = first;
    b.group_count = c;
    b.count = c;
    b.tokens = groups_.tokens.data() + first;
    b.weights = groups_.weights.data() + first;
    b.entries = groups_.entries.data() + first;
    b.scale = scales.Get(call.layer, static_cast<int>(e));
    batches_.push_back(b);
  }
  const auto start = time_routed_ ? std::chrono::steady_clock::now()
                                  : std::chrono::steady_clock::time_point();
  std::fill(ran_.begin(), ran_.end(), 0);
  if (call.capture == nullptr) {
    FFLITE_RETURN_IF_ERROR(exec.RunMany(call, absl::MakeConstSpan(batches_), ran_.data()));
  }
  const size_t per = std::max<size_t>(1, exec.ExpertBatchTokens());
  const size_t shared = m.shared_experts.size();
  for (size_t i = 0; i < batches_.size(); ++i) {
    const ExpertBatch& whole = batches_[i];
    if (ran_[i] != 0) {
      FFLITE_RETURN_IF_ERROR(exec.AddExpert(call, whole, /*ran_many=*/true));
      continue;
    }
    for (size_t r0 = 0; r0 < whole.group_count; r0 += per) {
      ExpertBatch b = whole;
      b.offset = r0;
      b.count = std::min(per, whole.group_count - r0);
      b.tokens += r0;
      b.weights += r0;
      b.entries += r0;
      b.last = call.last && shared == 0 && i + 1 == batches_.size() &&
               r0 + b.count == whole.group_count;
      FFLITE_RETURN_IF_ERROR(exec.RunExpert(call, b));
      FFLITE_RETURN_IF_ERROR(exec.AddExpert(call, b, /*ran_many=*/false));
    }
  }
  if (time_routed_) {
    routed_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // Shared experts: every token, behind the gate if any.
  for (size_t s = 0; s < shared; ++s) {
    for (size_t r0 = 0; r0 < n; r0 += per) {
      const size_t rows = std::min(per, n - r0);
      const bool last = call.last && s + 1 == shared && r0 + rows == n;
      FFLITE_RETURN_IF_ERROR(exec.RunShared(call, s, r0, rows, last));
    }
  }
  return false;
}

}  // namespace fflite
