// The routing of one token, written once for every backend: compiled as plain C++ for the CPU
// backends (moe/routing.cc) and as __host__ __device__ code for the cuda backend, so that scores,
// group limits, the tie rule and the weights cannot drift between them. Header-only, no standard
// library beyond <cmath>, no allocation: the caller passes the scratch.
#ifndef FFLITE_RUNTIME_SRC_MOE_ROUTE_TOKEN_H_
#define FFLITE_RUNTIME_SRC_MOE_ROUTE_TOKEN_H_

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define FFLITE_HOST_DEVICE __host__ __device__
#else
#define FFLITE_HOST_DEVICE
#endif

namespace fflite {
namespace route {

// The schema's enum values, restated so that device code needs no FlatBuffers header
// (routing.cc checks them against the schema at compile time).
enum : uint8_t { kSoftmax = 1, kSigmoid = 2 };
enum : uint8_t { kGroupHighest = 1, kGroupTop2Sum = 2 };

// Plain data: copyable to a device as is.
struct Params {
  uint32_t num_experts;
  uint32_t top_k;
  uint8_t scoring;        // kSoftmax, kSigmoid
  uint8_t group_scoring;  // kGroupHighest, kGroupTop2Sum
  uint8_t normalize_top_k;
  uint32_t n_group;     // >= 1; divides num_experts
  uint32_t topk_group;  // 1 <= topk_group <= n_group
  double routed_scaling_factor;
  const double* score_correction_bias;  // [num_experts] or null, in the caller's memory space
};

// Per-token scratch: scores, choice [num_experts]; group_scores [n_group]; taken [num_experts];
// group_kept [n_group].
struct Scratch {
  double* scores;
  double* choice;
  double* group_scores;
  uint8_t* taken;
  uint8_t* group_kept;
};

// Index of the largest value among entries with !taken[i], ties to the lower index. A NaN never
// compares greater, so the first candidate stands against it.
FFLITE_HOST_DEVICE inline uint32_t ArgMax(const double* v, const uint8_t* taken, uint32_t n) {
  uint32_t best = n;
  for (uint32_t i = 0; i < n; ++i) {
    if (taken[i]) continue;
    if (best == n || v[i] > v[best]) best = i;
  }
  return best;
}

// See RouteToken in moe/routing.h for the semantics.
FFLITE_HOST_DEVICE inline void Route(const Params& p, const double* logits, const Scratch& s,
                                     uint32_t* experts, double* weights) {
  const uint32_t n = p.num_experts;
  double* scores = s.scores;
  double* choice = s.choice;
  uint8_t* taken = s.taken;

  if (p.scoring == kSoftmax) {
    double max = logits[0];
    for (uint32_t e = 1; e < n; ++e) max = logits[e] > max ? logits[e] : max;
    double sum = 0.0;
    for (uint32_t e = 0; e < n; ++e) sum += scores[e] = exp(logits[e] - max);
    for (uint32_t e = 0; e < n; ++e) scores[e] /= sum;
  } else {
    for (uint32_t e = 0; e < n; ++e) scores[e] = 1.0 / (1.0 + exp(-logits[e]));
  }
  for (uint32_t e = 0; e < n; ++e) {
    choice[e] = scores[e] + (p.score_correction_bias ? p.score_correction_bias[e] : 0.0);
    taken[e] = 0;
  }

  if (p.n_group > 1) {
    // Score each group, keep the best topk_group groups, and mark the experts of the others taken.
    const uint32_t per = n / p.n_group;
    for (uint32_t g = 0; g < p.n_group; ++g) {
      const double* c = choice + g * per;
      const uint32_t first = ArgMax(c, taken, per);  // taken is all zero here
      if (p.group_scoring == kGroupHighest) {
        s.group_scores[g] = c[first];
      } else {
        double second = -INFINITY;
        for (uint32_t i = 0; i < per; ++i) {
          if (i != first && c[i] > second) second = c[i];
        }
        s.group_scores[g] = c[first] + second;
      }
    }
    uint8_t* kept = s.group_kept;  // ArgMax skips kept groups: "taken" by the choice
    for (uint32_t g = 0; g < p.n_group; ++g) kept[g] = 0;
    for (uint32_t j = 0; j < p.topk_group; ++j) kept[ArgMax(s.group_scores, kept, p.n_group)] = 1;
    for (uint32_t g = 0; g < p.n_group; ++g) {
      if (kept[g]) continue;
      for (uint32_t i = 0; i < per; ++i) taken[g * per + i] = 1;
    }
  }

  double sum = 0.0;
  for (uint32_t j = 0; j < p.top_k; ++j) {
    const uint32_t e = ArgMax(choice, taken, n);
    taken[e] = 1;
    experts[j] = e;
    weights[j] = scores[e];
    sum += scores[e];
  }
  for (uint32_t j = 0; j < p.top_k; ++j) {
    if (p.normalize_top_k && sum > 0.0) weights[j] /= sum;
    weights[j] *= p.routed_scaling_factor;
  }
}

}  // namespace route
}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_MOE_ROUTE_TOKEN_H_
