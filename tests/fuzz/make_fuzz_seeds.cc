// Writes the seed corpora of the fuzz targets from the project's own model builders:
//   make_fuzz_seeds SEED_ROOT   (creates SEED_ROOT/<target>/...)
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "format/writer.h"
#include "testing/model_builder.h"

namespace {

using namespace fflite;

bool WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// Small models covering every kind of field: dense (every activation, gated or not, biases,
// norms), MoE (softmax, sigmoid with correction bias and groups, shared experts with gate).
std::vector<ModelSpec> SeedSpecs() {
  std::vector<ModelSpec> specs;
  testing::Rng rng(99);
  const Activation acts[] = {Activation::RELU, Activation::GELU_ERF, Activation::GELU_TANH,
                             Activation::SILU, Activation::SIGMOID};
  for (int i = 0; i < 5; ++i) {
    ModelSpec spec;
    spec.d_model = 4;
    testing::FfnParams fp;
    fp.d_model = 4;
    fp.d_ff = 3 + i;
    fp.activation = acts[i];
    fp.gated = i % 2 == 0;
    fp.bias = i % 3 == 0;
    LayerSpec l;
    l.ffn = testing::RandomFfn(fp, rng);
    l.norm = testing::RandomNorm(i % 2 ? NormKind::LAYER_NORM : NormKind::RMS_NORM,
                                 i % 3 ? NormPlacement::PRE : NormPlacement::POST, 4, rng);
    l.residual = i != 1;
    spec.layers.push_back(std::move(l));
    specs.push_back(std::move(spec));
  }
  for (int i = 0; i < 2; ++i) {
    ModelSpec spec;
    spec.d_model = 4;
    testing::MoeParams mp;
    mp.expert.d_model = 4;
    mp.expert.d_ff = 3;
    mp.num_experts = 4;
    mp.top_k = 2;
    if (i == 1) {
      mp.scoring = Scoring::SIGMOID;
      mp.score_correction_bias = true;
      mp.n_group = 2;
      mp.topk_group = 1;
      mp.group_scoring = GroupScoring::TOP2_SUM;
      mp.num_shared = 1;
      mp.shared_d_ff = 5;
      mp.shared_gate = true;
      mp.router_bias = true;
    }
    LayerSpec l;
    l.kind = LayerKind::kMoe;
    l.moe = testing::RandomMoe(mp, rng);
    spec.layers.push_back(std::move(l));
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_ROOT\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  const std::string loader = root + "/fuzz_model_loader";
  ::mkdir(root.c_str(), 0755);
  ::mkdir(loader.c_str(), 0755);
  int n = 0;
  for (const ModelSpec& spec : SeedSpecs()) {
    // Unpadded d_ff and a compact data section keep the seeds small for the fuzzer.
    for (DType dtype : {DType::F32, DType::BF16}) {
      WriteOptions options;
      options.d_ff_alignment = 1;
      options.data_alignment = 64;
      options.dtype = dtype;
      auto bytes = WriteModelBuffer(spec, options);
      if (!bytes.ok()) {
        std::fprintf(stderr, "%s\n", bytes.status().ToString().c_str());
        return 1;
      }
      if (!WriteFile(loader + "/model" + std::to_string(n++) + ".fflite", *bytes)) return 1;
    }
  }
  std::printf("wrote %d seeds to %s\n", n, loader.c_str());
  return 0;
}
