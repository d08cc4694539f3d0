// Writes the small two-layer model (dense + MoE with a shared expert) that the C tests and the
// install test load: make_test_model OUTPUT_PATH.
#include <cstdio>

#include "format/writer.h"
#include "testing/model_builder.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT.fflite\n", argv[0]);
    return 2;
  }
  using namespace fflite;
  testing::Rng rng(2024);
  ModelSpec spec;
  spec.d_model = 16;
  testing::FfnParams fp;
  fp.d_model = 16;
  fp.d_ff = 40;
  fp.activation = Activation::GELU_TANH;
  LayerSpec dense;
  dense.name = "dense";
  dense.ffn = testing::RandomFfn(fp, rng);
  dense.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, 16, rng);
  dense.residual = true;
  spec.layers.push_back(std::move(dense));
  testing::MoeParams mp;
  mp.expert = fp;
  mp.expert.activation = Activation::SILU;
  mp.num_experts = 4;
  mp.top_k = 2;
  mp.num_shared = 1;
  mp.shared_gate = true;
  LayerSpec moe;
  moe.name = "moe";
  moe.kind = LayerKind::kMoe;
  moe.moe = testing::RandomMoe(mp, rng);
  spec.layers.push_back(std::move(moe));
  const absl::Status st = WriteModelFile(spec, WriteOptions(), argv[1]);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
