// MoE routing: scores, group-limited top-k with index tie-breaking, renormalisation, scaling.
#include "moe/routing.h"

#include <algorithm>
#include <cstring>

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

static_assert(route::kSoftmax == static_cast<uint8_t>(Scoring::SOFTMAX) &&
              route::kSigmoid == static_cast<uint8_t>(Scoring::SIGMOID));
static_assert(route::kGroupHighest == static_cast<uint8_t>(GroupScoring::HIGHEST) &&
              route::kGroupTop2Sum == static_cast<uint8_t>(GroupScoring::TOP2_SUM));

route::Params ToRouteParams(const RoutingParams& p) {
  route::Params r;
  r.num_experts = p.num_experts;
  r.top_k = p.top_k;
  r.scoring = static_cast<uint8_t>(p.scoring);
  r.group_scoring = static_cast<uint8_t>(p.group_scoring);
  r.normalize_top_k = p.normalize_top_k ? 1 : 0;
  r.n_group = p.n_group;
  r.topk_group = p.topk_group;
  r.routed_scaling_factor = p.routed_scaling_factor;
  r.score_correction_bias =
      p.score_correction_bias.empty() ? nullptr : p.score_correction_bias.data();
  return r;
}

void RouteToken(const RoutingParams& p, const double* logits, RoutingScratch* s,
                uint32_t* experts, double* weights) {
  const route::Scratch scratch{s->scores.data(), s->choice.data(), s->group_scores.data(),
                               s->taken.data(), s->group_kept.data()};
  route::Route(ToRouteParams(p), logits, scratch, experts, weights);
}

void HostRouter::Reserve(uint32_t num_experts, uint32_t n_group) {
  row_.resize(std::max<size_t>(row_.size(), num_experts));
  scratch_.Reserve(std::max<uint32_t>(num_experts, static_cast<uint32_t>(scratch_.scores.size())),
                   std::max<uint32_t>(n_group, static_cast<uint32_t>(scratch_.group_kept.size())));
}

void HostRouter::Route(const RoutingParams& params, const float* logits, size_t stride, size_t n,
                       uint32_t* experts, double* weights) {
  const uint32_t e_count = params.num_experts, k = params.top_k;
  for (size_t t = 0; t < n; ++t) {
    const float* l = logits + t * stride;
    for (uint32_t e = 0; e < e_count; ++e) row_[e] = l[e];
    RouteToken(params, row_.data(), &scratch_, experts + t * k, weights + t * k);
  }
}

}  // namespace fflite
