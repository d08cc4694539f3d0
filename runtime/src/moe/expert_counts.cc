// Per-layer, per-expert token counters (routing statistics).
#include "moe/expert_counts.h"

#include <algorithm>

namespace fflite {

void ExpertCounts::Init(const Model& model) {
  counts_.assign(model.layers().size(), {});
  for (size_t l = 0; l < model.layers().size(); ++l) {
    const LayerView& v = model.layers()[l];
    if (v.kind == LayerKind::kMoe) counts_[l].assign(v.moe.num_experts, 0);
  }
}

void ExpertCounts::Add(size_t layer, const uint32_t* experts, size_t n) {
  std::vector<uint64_t>& c = counts_[layer];
  for (size_t i = 0; i < n; ++i) ++c[experts[i]];
}

void ExpertCounts::Add(size_t layer, const ExpertGroups& groups) {
  std::vector<uint64_t>& c = counts_[layer];
  for (size_t e = 0; e < c.size(); ++e) c[e] += groups.count(static_cast<uint32_t>(e));
}

void ExpertCounts::Add(size_t layer, const uint64_t* per_expert) {
  std::vector<uint64_t>& c = counts_[layer];
  for (size_t e = 0; e < c.size(); ++e) c[e] += per_expert[e];
}

void ExpertCounts::Reset() {
  for (std::vector<uint64_t>& c : counts_) std::fill(c.begin(), c.end(), 0);
}

}  // namespace fflite
