// Counting sort of routed (token, expert) pairs by expert.
#include "moe/grouping.h"

#include <algorithm>

namespace fflite {

void ExpertGroups::Reserve(uint32_t num_experts, size_t max_tokens, uint32_t top_k) {
  offsets.resize(std::max<size_t>(offsets.size(), size_t{num_experts} + 1));
  cursor.resize(std::max<size_t>(cursor.size(), num_experts));
  tokens.resize(std::max(tokens.size(), max_tokens * top_k));
  weights.resize(std::max(weights.size(), max_tokens * top_k));
  entries.resize(std::max(entries.size(), max_tokens * top_k));
}

void GroupByExpert(const uint32_t* experts, const double* weights, size_t n_tokens, uint32_t top_k,
                   uint32_t num_experts, ExpertGroups* g) {
  const size_t n = n_tokens * top_k;
  std::fill(g->offsets.begin(), g->offsets.begin() + num_experts + 1, 0u);
  for (size_t i = 0; i < n; ++i) ++g->offsets[experts[i] + 1];
  for (uint32_t e = 0; e < num_experts; ++e) g->offsets[e + 1] += g->offsets[e];
  std::copy(g->offsets.begin(), g->offsets.begin() + num_experts, g->cursor.begin());
  for (size_t t = 0; t < n_tokens; ++t) {
    for (uint32_t j = 0; j < top_k; ++j) {
      const size_t i = t * top_k + j;
      const uint32_t slot = g->cursor[experts[i]]++;
      g->tokens[slot] = static_cast<uint32_t>(t);
      g->weights[slot] = static_cast<float>(weights[i]);
      g->entries[slot] = static_cast<uint32_t>(i);
    }
  }
}

}  // namespace fflite
