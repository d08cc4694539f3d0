// Routing statistics shared by every backend: how many tokens each expert of each MoE layer has
// received since the session started (or since the last reset).
#ifndef FFLITE_RUNTIME_SRC_MOE_EXPERT_COUNTS_H_
#define FFLITE_RUNTIME_SRC_MOE_EXPERT_COUNTS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "format/model.h"
#include "moe/grouping.h"

namespace fflite {

// Sized once from the model (so counting never allocates); one thread at a time, like the
// backend that owns it. A (token, expert) pair counts once: a token routed to k experts adds 1 to
// each of them.
class ExpertCounts {
 public:
  // One counter per expert of each MoE layer; none for dense layers.
  void Init(const Model& model);
  // counts[layer][experts[i]] += 1 for i < n.
  void Add(size_t layer, const uint32_t* experts, size_t n);
  // counts[layer][e] += groups.count(e) for every expert e.
  void Add(size_t layer, const ExpertGroups& groups);
  // counts[layer][e] += per_expert[e] for every expert e (counts kept elsewhere, e.g. on a GPU).
  void Add(size_t layer, const uint64_t* per_expert);
  // [num_experts] of `layer`; empty for a dense layer. `layer` < the model's layer count.
  absl::Span<const uint64_t> layer(size_t layer) const { return counts_[layer]; }
  void Reset();

 private:
  std::vector<std::vector<uint64_t>> counts_;  // [layers][num_experts or 0]
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_MOE_EXPERT_COUNTS_H_
