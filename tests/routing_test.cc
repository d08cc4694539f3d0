// MoE routing on hand-made logits: softmax/sigmoid scores, top-k with and without
// renormalisation, score-correction bias (selection only), group-limited top-k (both group
// scorings), routed scaling factor, and ties (lower expert index wins).
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "moe/grouping.h"
#include "moe/routing.h"

namespace fflite {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;

struct Routed {
  std::vector<uint32_t> experts;
  std::vector<double> weights;
};

Routed Route(const RoutingParams& p, const std::vector<double>& logits) {
  RoutingScratch scratch;
  scratch.Reserve(p.num_experts, p.n_group);
  Routed r;
  r.experts.resize(p.top_k);
  r.weights.resize(p.top_k);
  RouteToken(p, logits.data(), &scratch, r.experts.data(), r.weights.data());
  return r;
}

RoutingParams Softmax(uint32_t experts, uint32_t k, bool normalize) {
  RoutingParams p;
  p.num_experts = experts;
  p.top_k = k;
  p.scoring = Scoring::SOFTMAX;
  p.normalize_top_k = normalize;
  return p;
}

constexpr double kTol = 1e-12;

// logits (0, ln 2, ln 3, 0): softmax = (1, 2, 3, 1) / 7. Top-2 = experts 2 and 1.
TEST(RoutingTest, SoftmaxTopKWithoutRenormalisation) {
  const Routed r = Route(Softmax(4, 2, false), {0, std::log(2.0), std::log(3.0), 0});
  EXPECT_THAT(r.experts, ElementsAre(2u, 1u));
  EXPECT_THAT(r.weights, ElementsAre(DoubleNear(3.0 / 7, kTol), DoubleNear(2.0 / 7, kTol)));
}

TEST(RoutingTest, SoftmaxTopKRenormalised) {
  const Routed r = Route(Softmax(4, 2, true), {0, std::log(2.0), std::log(3.0), 0});
  EXPECT_THAT(r.experts, ElementsAre(2u, 1u));
  EXPECT_THAT(r.weights, ElementsAre(DoubleNear(0.6, kTol), DoubleNear(0.4, kTol)));
}

// Softmax is shift-invariant: huge logits do not overflow.
TEST(RoutingTest, SoftmaxIsStableForLargeLogits) {
  const Routed r = Route(Softmax(4, 2, false), {1000, 1000 + std::log(2.0), 990, 0});
  EXPECT_THAT(r.experts, ElementsAre(1u, 0u));
  const double sum = 1.0 + 2.0 + std::exp(-10.0) + std::exp(-1000.0 - std::log(2.0));
  EXPECT_NEAR(r.weights[0], 2.0 / sum, 1e-12);
  EXPECT_NEAR(r.weights[1], 1.0 / sum, 1e-12);
}

// Equal scores: the lower expert index wins, in every position of the top-k.
TEST(RoutingTest, TiesGoToTheLowerIndex) {
  EXPECT_THAT(Route(Softmax(5, 3, true), {0, 1, 1, 0, 1}).experts, ElementsAre(1u, 2u, 4u));
  EXPECT_THAT(Route(Softmax(4, 2, true), {0, 0, 0, 0}).experts, ElementsAre(0u, 1u));
  const Routed r = Route(Softmax(4, 4, false), {0, 0, 0, 0});
  EXPECT_THAT(r.experts, ElementsAre(0u, 1u, 2u, 3u));
  EXPECT_THAT(r.weights, ::testing::Each(DoubleNear(0.25, kTol)));
}

// Sigmoid scoring with a correction bias that steers selection but not the weights (DeepSeek-V3):
// logits 0 -> scores 0.5 everywhere; bias (0, 0.1, -0.1, 0.2) selects experts 3 then 1; weights
// are the scores 0.5, 0.5; renormalised 0.5, 0.5; times the scaling factor 2.5 -> 1.25 each.
TEST(RoutingTest, SigmoidWithCorrectionBiasForSelectionOnly) {
  RoutingParams p;
  p.num_experts = 4;
  p.top_k = 2;
  p.scoring = Scoring::SIGMOID;
  p.score_correction_bias = {0, 0.1, -0.1, 0.2};
  Routed r = Route(p, {0, 0, 0, 0});
  EXPECT_THAT(r.experts, ElementsAre(3u, 1u));
  EXPECT_THAT(r.weights, ElementsAre(DoubleNear(0.5, kTol), DoubleNear(0.5, kTol)));
  p.normalize_top_k = true;
  p.routed_scaling_factor = 2.5;
  r = Route(p, {0, 0, 0, 0});
  EXPECT_THAT(r.weights, ElementsAre(DoubleNear(1.25, kTol), DoubleNear(1.25, kTol)));
}

// Sigmoid scores: logit ln 3 -> 0.75, 0 -> 0.5, -ln 3 -> 0.25.
TEST(RoutingTest, SigmoidScores) {
  RoutingParams p;
  p.num_experts = 3;
  p.top_k = 2;
  p.scoring = Scoring::SIGMOID;
  const Routed r = Route(p, {-std::log(3.0), std::log(3.0), 0});
  EXPECT_THAT(r.experts, ElementsAre(1u, 2u));
  EXPECT_THAT(r.weights, ElementsAre(DoubleNear(0.75, kTol), DoubleNear(0.5, kTol)));
}

// Group-limited top-k over 8 experts in 4 groups of 2, keeping 2 groups, choosing 2 experts.
// Choice values (sigmoid 0.5 + bias): g0 (0.9, 0.0), g1 (0.5, 0.5), g2 (0.6, 0.45), g3 (0.1, 0.1).
//   highest-score groups: g0 (0.9), g2 (0.6) -> experts 0 (0.9), 4 (0.6)
//   top-2-sum groups:     g2 (1.05), g1 (1.0) -> experts 4 (0.6), then 2 and 3 tie at 0.5 -> 2
// The global top-2 without groups would be 0 and 4.
RoutingParams Grouped(GroupScoring scoring) {
  RoutingParams p;
  p.num_experts = 8;
  p.top_k = 2;
  p.scoring = Scoring::SIGMOID;
  p.n_group = 4;
  p.topk_group = 2;
  p.group_scoring = scoring;
  const double choice[8] = {0.9, 0.0, 0.5, 0.5, 0.6, 0.45, 0.1, 0.1};
  for (double c : choice) p.score_correction_bias.push_back(c - 0.5);
  return p;
}

TEST(RoutingTest, GroupLimitedByHighestScore) {
  const Routed r = Route(Grouped(GroupScoring::HIGHEST), std::vector<double>(8, 0.0));
  EXPECT_THAT(r.experts, ElementsAre(0u, 4u));
}

TEST(RoutingTest, GroupLimitedByTopTwoSum) {
  const Routed r = Route(Grouped(GroupScoring::TOP2_SUM), std::vector<double>(8, 0.0));
  EXPECT_THAT(r.experts, ElementsAre(4u, 2u));
  EXPECT_THAT(r.weights, ElementsAre(DoubleNear(0.5, kTol), DoubleNear(0.5, kTol)));
}

// Equal group scores: the lower group index wins.
TEST(RoutingTest, GroupTiesGoToTheLowerGroup) {
  RoutingParams p = Grouped(GroupScoring::HIGHEST);
  p.score_correction_bias.assign(8, 0.0);
  p.topk_group = 1;
  EXPECT_THAT(Route(p, std::vector<double>(8, 0.0)).experts, ElementsAre(0u, 1u));
}

// NaN logits never crash and route deterministically; the NaN shows in the weights.
TEST(RoutingTest, NanLogitsPropagate) {
  const double nan = std::nan("");
  const Routed r = Route(Softmax(4, 2, true), {nan, 0, 0, 0});
  EXPECT_EQ(r.experts.size(), 2u);
  EXPECT_NE(r.experts[0], r.experts[1]);
  EXPECT_TRUE(std::isnan(r.weights[0]) || std::isnan(r.weights[1]));
}

}  // namespace
}  // namespace fflite

namespace fflite {
namespace {

// Tokens 0..3 route to (top-2): {2, 0}, {0, 1}, {2, 3}, {0, 2}. Expert 0 gets tokens 0, 1, 3;
// expert 1 gets 1; expert 2 gets 0, 2, 3; expert 3 gets 2; expert 4 none.
TEST(GroupingTest, CountingSortByExpertKeepsTokenOrder) {
  const uint32_t experts[] = {2, 0, 0, 1, 2, 3, 0, 2};
  const double weights[] = {0.7, 0.3, 0.6, 0.4, 0.9, 0.1, 0.5, 0.5};
  ExpertGroups g;
  g.Reserve(5, 4, 2);
  GroupByExpert(experts, weights, 4, 2, 5, &g);
  EXPECT_THAT(std::vector<uint32_t>(g.offsets.begin(), g.offsets.begin() + 6),
              ElementsAre(0u, 3u, 4u, 7u, 8u, 8u));
  EXPECT_THAT(std::vector<uint32_t>(g.tokens.begin(), g.tokens.begin() + 8),
              ElementsAre(0u, 1u, 3u, 1u, 0u, 2u, 3u, 2u));
  EXPECT_THAT(std::vector<float>(g.weights.begin(), g.weights.begin() + 8),
              ElementsAre(0.3f, 0.6f, 0.5f, 0.4f, 0.7f, 0.9f, 0.5f, 0.1f));
  EXPECT_EQ(g.count(4), 0u);
  // Regrouping fewer tokens reuses the arrays (no stale counts).
  GroupByExpert(experts, weights, 1, 2, 5, &g);
  EXPECT_THAT(std::vector<uint32_t>(g.offsets.begin(), g.offsets.begin() + 6),
              ElementsAre(0u, 1u, 1u, 2u, 2u, 2u));
}

}  // namespace
}  // namespace fflite
