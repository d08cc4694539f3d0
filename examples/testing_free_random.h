// Deterministic random weights for the example's built-in demo models (no test libraries).
#ifndef FFLITE_EXAMPLES_TESTING_FREE_RANDOM_H_
#define FFLITE_EXAMPLES_TESTING_FREE_RANDOM_H_

#include <cmath>
#include <random>
#include <vector>

#include "format/writer.h"

namespace fflite {
namespace examples {

class Random {
 public:
  explicit Random(uint32_t seed) : gen_(seed) {}
  std::vector<float> Vec(size_t n, float scale) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(gen_);
    return v;
  }

 private:
  std::mt19937 gen_;
};

inline FfnSpec RandomFfn(Random& rng, uint32_t d, uint32_t d_ff, Activation act, bool gated) {
  FfnSpec f;
  f.activation = act;
  f.gated = gated;
  f.d_ff = d_ff;
  const float s_in = 1.0f / std::sqrt(static_cast<float>(d));
  const float s_ff = 1.0f / std::sqrt(static_cast<float>(d_ff));
  f.up = TensorFromF32({d_ff, d}, rng.Vec(size_t{d_ff} * d, s_in));
  if (gated) f.gate = TensorFromF32({d_ff, d}, rng.Vec(size_t{d_ff} * d, s_in));
  f.down = TensorFromF32({d, d_ff}, rng.Vec(size_t{d} * d_ff, s_ff));
  return f;
}

inline NormSpec RmsNorm(Random& rng, uint32_t d) {
  NormSpec n;
  n.kind = NormKind::RMS_NORM;
  n.placement = NormPlacement::PRE;
  n.eps = 1e-5f;
  std::vector<float> w = rng.Vec(d, 0.2f);
  for (float& x : w) x += 1.0f;
  n.weight = TensorFromF32({d}, std::move(w));
  return n;
}

}  // namespace examples
}  // namespace fflite

#endif  // FFLITE_EXAMPLES_TESTING_FREE_RANDOM_H_
