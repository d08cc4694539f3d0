// MoE routing shared by every backend: router logits -> scores -> (group-limited) top-k ->
// weights. Ties are broken by expert index: of equal scores, the lower expert index wins.
#ifndef FFLITE_RUNTIME_SRC_MOE_ROUTING_H_
#define FFLITE_RUNTIME_SRC_MOE_ROUTING_H_

#include <cstdint>
#include <vector>

#include "format/model.h"
#include "moe/route_token.h"

namespace fflite {

// Routing parameters of one MoE layer, decoded once from the model (biases in double).
struct RoutingParams {
  uint32_t num_experts = 0;
  uint32_t top_k = 0;
  Scoring scoring = Scoring::SOFTMAX;
  bool normalize_top_k = false;
  double routed_scaling_factor = 1.0;
  std::vector<double> score_correction_bias;  // [num_experts] or empty
  uint32_t n_group = 1;
  uint32_t topk_group = 1;
  GroupScoring group_scoring = GroupScoring::HIGHEST;
};

RoutingParams MakeRoutingParams(const MoeView& moe);

// Scratch for RouteToken, sized once per layer shape.
struct RoutingScratch {
  std::vector<double> scores;        // [num_experts]
  std::vector<double> choice;        // [num_experts] scores + correction bias, masked groups
  std::vector<double> group_scores;  // [n_group]
  std::vector<uint8_t> taken;        // [num_experts] chosen or masked out
  std::vector<uint8_t> group_kept;   // [n_group]
  void Reserve(uint32_t num_experts, uint32_t n_group);
};

// Routes one token. `logits`: [num_experts], the router product including its bias.
//   scores  = softmax(logits) or sigmoid(logits)
//   choice  = scores + score_correction_bias (selection only)
//   groups  : if n_group > 1, keep the topk_group groups by max (or sum of top 2) of choice
//   experts = the top_k of choice among the kept groups, in descending order, ties -> lower index
//   weights = scores[experts], divided by their sum if normalize_top_k, times the scaling factor
// Writes top_k entries to `experts` and `weights`. NaN scores route deterministically (the lowest
// index wins) and propagate into the weights; nothing here can fail.
// The same parameters as plain data for route::Route (the bias stays in `params`, which must
// outlive the result).
route::Params ToRouteParams(const RoutingParams& params);

// Routes one token (route::Route, moe/route_token.h, written once for every backend).
void RouteToken(const RoutingParams& params, const double* logits, RoutingScratch* scratch,
                uint32_t* experts, double* weights);

// Routes rows of f32 logits, as the CPU backends' routers produce them: each row widened to double,
// then RouteToken. Sized once (Reserve); Route allocates nothing.
class HostRouter {
 public:
  void Reserve(uint32_t num_experts, uint32_t n_group);
  // logits [n, stride]: the first params.num_experts of each row; experts, weights [n, top_k].
  void Route(const RoutingParams& params, const float* logits, size_t stride, size_t n,
             uint32_t* experts, double* weights);

 private:
  std::vector<double> row_;  // [max num_experts]: one token's logits
  RoutingScratch scratch_;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_MOE_ROUTING_H_
