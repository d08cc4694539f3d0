// MoE routing: scores, group-limited top-k with index tie-breaking, renormalisation, scaling.
#include "moe/routing.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/half.h"

namespace fflite {
namespace {

double LoadScalar(const TensorView& t, uint64_t i) {
  uint16_t h;
  float f;
  switch (t.dtype) {
    case DType::F16: std::memcpy(&h, t.data + 2 * i, 2); return F16ToF32(h);
    case DType::BF16: std::memcpy(&h, t.data + 2 * i, 2); return Bf16ToF32(h);
    default: std::memcpy(&f, t.data + 4 * i, 4); return f;
  }
}

// Index of the largest value among entries with !taken[i], ties to the lower index. A NaN never
// compares greater, so the first candidate stands against it.
uint32_t ArgMax(const double* v, const uint8_t* taken, uint32_t n) {
  uint32_t best = n;
  for (uint32_t i = 0; i < n; ++i) {
    if (taken[i]) continue;
    if (best == n || v[i] > v[best]) best = i;
  }
  return best;
}

}  // namespace

RoutingParams MakeRoutingParams(const MoeView& moe) {
  RoutingParams p;
  p.num_experts = moe.num_experts;
  p.top_k = moe.top_k;
  p.scoring = moe.scoring;
  p.normalize_top_k = moe.normalize_top_k;
  p.routed_scaling_factor = moe.routed_scaling_factor;
  if (moe.score_correction_bias.present()) {
    p.score_correction_bias.resize(moe.num_experts);
    for (uint32_t e = 0; e < moe.num_experts; ++e) {
      p.score_correction_bias[e] = LoadScalar(moe.score_correction_bias, e);
    }
  }
  p.n_group = moe.n_group;
  p.topk_group = moe.topk_group;
  p.group_scoring = moe.group_scoring;
  return p;
}

void RoutingScratch::Reserve(uint32_t num_experts, uint32_t n_group) {
  scores.resize(num_experts);
  choice.resize(num_experts);
  group_scores.resize(n_group);
  taken.resize(num_experts);
  group_kept.resize(n_group);
}

void RouteToken(const RoutingParams& p, const double* logits, RoutingScratch* s,
                uint32_t* experts, double* weights) {
  const uint32_t n = p.num_experts;
  double* scores = s->scores.data();
  double* choice = s->choice.data();
  uint8_t* taken = s->taken.data();

  if (p.scoring == Scoring::SOFTMAX) {
    double max = logits[0];
    for (uint32_t e = 1; e < n; ++e) max = std::max(max, logits[e]);
    double sum = 0.0;
    for (uint32_t e = 0; e < n; ++e) sum += scores[e] = std::exp(logits[e] - max);
    for (uint32_t e = 0; e < n; ++e) scores[e] /= sum;
  } else {
    for (uint32_t e = 0; e < n; ++e) scores[e] = 1.0 / (1.0 + std::exp(-logits[e]));
  }
  for (uint32_t e = 0; e < n; ++e) {
    choice[e] = scores[e] + (p.score_correction_bias.empty() ? 0.0 : p.score_correction_bias[e]);
  }

  std::memset(taken, 0, s->taken.size());
  if (p.n_group > 1) {
    // Score each group, keep the best topk_group groups, and mark the experts of the others taken.
    const uint32_t per = n / p.n_group;
    for (uint32_t g = 0; g < p.n_group; ++g) {
      const double* c = choice + g * per;
      if (p.group_scoring == GroupScoring::HIGHEST) {
        s->group_scores[g] = *std::max_element(c, c + per);
      } else {
        const uint32_t first = ArgMax(c, taken, per);  // taken is all zero here
        double second = -std::numeric_limits<double>::infinity();
        for (uint32_t i = 0; i < per; ++i) {
          if (i != first) second = std::max(second, c[i]);
        }
        s->group_scores[g] = c[first] + second;
      }
    }
    uint8_t* kept = s->group_kept.data();  // ArgMax skips kept groups: "taken" by the choice
    std::memset(kept, 0, p.n_group);
    for (uint32_t j = 0; j < p.topk_group; ++j) {
      kept[ArgMax(s->group_scores.data(), kept, p.n_group)] = 1;
    }
    for (uint32_t g = 0; g < p.n_group; ++g) {
      if (!kept[g]) std::memset(taken + g * per, 1, per);
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
  const double scale = p.routed_scaling_factor;
  for (uint32_t j = 0; j < p.top_k; ++j) {
    if (p.normalize_top_k && sum > 0.0) weights[j] /= sum;
    weights[j] *= scale;
  }
}

}  // namespace fflite
