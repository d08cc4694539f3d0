// Groups routed tokens by expert with a counting sort, so that each active expert runs once over
// a gathered batch of its tokens. Deterministic: within an expert, entries are in token order.
#ifndef FFLITE_RUNTIME_SRC_MOE_GROUPING_H_
#define FFLITE_RUNTIME_SRC_MOE_GROUPING_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fflite {

// The (token, weight) entries of each expert, in one flat array ordered by expert.
struct ExpertGroups {
  std::vector<uint32_t> offsets;  // [num_experts + 1]: expert e owns [offsets[e], offsets[e+1])
  std::vector<uint32_t> tokens;   // [n_tokens · top_k] token index of each entry
  std::vector<float> weights;     // [n_tokens · top_k] routing weight of each entry, as f32
  // [n_tokens · top_k] where each entry came from in the routing: t · top_k + j for token t's
  // j-th choice (its rank), which gives its weight in double and its place in a capture.
  std::vector<uint32_t> entries;
  std::vector<uint32_t> cursor;   // [num_experts] scratch

  // Sizes the arrays once, so that Group() does not allocate.
  void Reserve(uint32_t num_experts, size_t max_tokens, uint32_t top_k);
  uint32_t count(uint32_t expert) const { return offsets[expert + 1] - offsets[expert]; }
};

// experts, weights: [n_tokens, top_k] from routing (distinct experts per token). Fills `groups`
// (which must be Reserve()d for at least these sizes).
void GroupByExpert(const uint32_t* experts, const double* weights, size_t n_tokens, uint32_t top_k,
                   uint32_t num_experts, ExpertGroups* groups);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_MOE_GROUPING_H_
