// Builders of small random models for tests: random FFN / MoE / norm specs, written with the
// real writer and loaded with the real loader.
#ifndef FFLITE_TESTS_TESTING_MODEL_BUILDER_H_
#define FFLITE_TESTS_TESTING_MODEL_BUILDER_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "format/model.h"
#include "format/writer.h"

namespace fflite {
namespace testing {

class Rng {
 public:
  explicit Rng(uint32_t seed) : gen_(seed) {}
  float Uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  // n values uniform in [-scale, scale].
  std::vector<float> Vec(size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = Uniform(-scale, scale);
    return v;
  }

 private:
  std::mt19937 gen_;
};

struct FfnParams {
  uint32_t d_model = 16;
  uint32_t d_ff = 24;
  Activation activation = Activation::SILU;
  bool gated = true;
  bool bias = false;
};

// Weights uniform in ±1/sqrt(fan_in), so activations stay O(1) whatever the size.
FfnSpec RandomFfn(const FfnParams& p, Rng& rng);
NormSpec RandomNorm(NormKind kind, NormPlacement placement, uint32_t d_model, Rng& rng);

struct MoeParams {
  uint32_t num_experts = 8;
  uint32_t top_k = 2;
  Scoring scoring = Scoring::SOFTMAX;
  bool normalize_top_k = true;
  float routed_scaling_factor = 1.0f;
  bool router_bias = false;
  bool score_correction_bias = false;
  uint32_t n_group = 1;
  uint32_t topk_group = 1;
  GroupScoring group_scoring = GroupScoring::HIGHEST;
  uint32_t num_shared = 0;
  uint32_t shared_d_ff = 32;
  bool shared_gate = false;
  FfnParams expert;
};

MoeSpec RandomMoe(const MoeParams& p, Rng& rng);

struct LoadedModel {
  std::vector<uint8_t> bytes;  // the file's bytes; the model points into them
  std::unique_ptr<Model> model;
};

// Writes `spec` in memory and loads it back.
absl::StatusOr<LoadedModel> BuildModel(const ModelSpec& spec, const WriteOptions& options = {});
// Writes `spec` to a file in the test's temporary directory named `name` and loads it with
// Model::LoadFile (file-backed: what expert budgets stream from); the file is removed again (the
// model keeps it open). `bytes` stays empty.
absl::StatusOr<LoadedModel> BuildModelFile(const ModelSpec& spec, const std::string& name,
                                           const WriteOptions& options = {});

// Runs one layer through a session of `backend` and returns output [tokens, d_model].
absl::StatusOr<std::vector<float>> RunLayer(const Model& model, const std::string& backend,
                                            size_t layer, const std::vector<float>& input,
                                            size_t tokens, int threads = 1,
                                            uint64_t expert_budget_bytes = 0,
                                            bool float_activations = false);

}  // namespace testing
}  // namespace fflite

#endif  // FFLITE_TESTS_TESTING_MODEL_BUILDER_H_
