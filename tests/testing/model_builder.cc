// Random model specs for tests, built with the real writer and loader.
#include "testing/model_builder.h"

#include <cmath>
#include <cstdio>

#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "session/session.h"

namespace fflite {
namespace testing {

FfnSpec RandomFfn(const FfnParams& p, Rng& rng) {
  FfnSpec f;
  f.activation = p.activation;
  f.gated = p.gated;
  f.d_ff = p.d_ff;
  const uint64_t d = p.d_model, ff = p.d_ff;
  const float s_in = 1.0f / std::sqrt(static_cast<float>(d));
  const float s_ff = 1.0f / std::sqrt(static_cast<float>(ff));
  f.up = TensorFromF32({ff, d}, rng.Vec(ff * d, s_in));
  if (p.gated) f.gate = TensorFromF32({ff, d}, rng.Vec(ff * d, s_in));
  f.down = TensorFromF32({d, ff}, rng.Vec(d * ff, s_ff));
  if (p.bias) {
    f.up_bias = TensorFromF32({ff}, rng.Vec(ff, 0.5f));
    if (p.gated) f.gate_bias = TensorFromF32({ff}, rng.Vec(ff, 0.5f));
    f.down_bias = TensorFromF32({d}, rng.Vec(d, 0.5f));
  }
  return f;
}

NormSpec RandomNorm(NormKind kind, NormPlacement placement, uint32_t d_model, Rng& rng) {
  NormSpec n;
  n.kind = kind;
  n.placement = placement;
  n.eps = 1e-5f;
  std::vector<float> w(d_model);
  for (float& x : w) x = rng.Uniform(0.5f, 1.5f);
  n.weight = TensorFromF32({d_model}, std::move(w));
  if (kind == NormKind::LAYER_NORM) n.bias = TensorFromF32({d_model}, rng.Vec(d_model, 0.2f));
  return n;
}

MoeSpec RandomMoe(const MoeParams& p, Rng& rng) {
  MoeSpec m;
  m.top_k = p.top_k;
  m.scoring = p.scoring;
  m.normalize_top_k = p.normalize_top_k;
  m.routed_scaling_factor = p.routed_scaling_factor;
  const uint64_t d = p.expert.d_model, e = p.num_experts;
  m.router = TensorFromF32({e, d}, rng.Vec(e * d, 2.0f / std::sqrt(static_cast<float>(d))));
  if (p.router_bias) m.router_bias = TensorFromF32({e}, rng.Vec(e, 0.5f));
  if (p.score_correction_bias) m.score_correction_bias = TensorFromF32({e}, rng.Vec(e, 0.3f));
  m.n_group = p.n_group;
  m.topk_group = p.topk_group;
  m.group_scoring = p.group_scoring;
  for (uint32_t i = 0; i < p.num_experts; ++i) m.experts.push_back(RandomFfn(p.expert, rng));
  for (uint32_t i = 0; i < p.num_shared; ++i) {
    FfnParams sp = p.expert;
    sp.d_ff = p.shared_d_ff;
    m.shared_experts.push_back(RandomFfn(sp, rng));
  }
  if (p.shared_gate) m.shared_expert_gate = TensorFromF32({1, d}, rng.Vec(d, 1.0f));
  return m;
}

absl::StatusOr<LoadedModel> BuildModel(const ModelSpec& spec, const WriteOptions& options) {
  LoadedModel out;
  FFLITE_ASSIGN_OR_RETURN(out.bytes, WriteModelBuffer(spec, options));
  FFLITE_ASSIGN_OR_RETURN(out.model, Model::LoadBuffer(out.bytes.data(), out.bytes.size()));
  return out;
}

absl::StatusOr<LoadedModel> BuildModelFile(const ModelSpec& spec, const std::string& name,
                                           const WriteOptions& options) {
  const std::string path = ::testing::TempDir() + "/" + name;
  FFLITE_RETURN_IF_ERROR(WriteModelFile(spec, options, path));
  LoadedModel out;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::LoadFile(path);
  std::remove(path.c_str());
  FFLITE_ASSIGN_OR_RETURN(out.model, std::move(model));
  return out;
}

absl::StatusOr<std::vector<float>> RunLayer(const Model& model, const std::string& backend,
                                            size_t layer, const std::vector<float>& input,
                                            size_t tokens, int threads,
                                            uint64_t expert_budget_bytes,
                                            bool float_activations) {
  SessionOptions options;
  options.float_activations = float_activations;
  options.backend = backend;
  options.num_threads = threads;
  options.max_tokens = tokens;
  options.expert_budget_bytes = expert_budget_bytes;
  FFLITE_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Create(model, options));
  std::vector<float> output(tokens * model.d_model(), 0.0f);
  FFLITE_RETURN_IF_ERROR(session->Run(layer, input.data(), tokens, output.data()));
  return output;
}

}  // namespace testing
}  // namespace fflite
