// Writes the seed corpora of the fuzz targets from the project's own model builders and example
// checkpoints (nothing is committed but crash inputs):
//   make_fuzz_seeds SEED_ROOT   (creates SEED_ROOT/<target>/...)
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "converter/example_checkpoint.h"
#include "converter/gguf_types.h"
#include "format/model.h"
#include "format/quant_layout.h"
#include "format/writer.h"
#include "fuzz_util.h"
#include "kernels/quant_types.h"
#include "testing/gguf_writer.h"
#include "testing/model_builder.h"

namespace {

using namespace fflite;

bool WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// Small models covering every kind of field: dense (every activation, gated or not, biases,
// norms before, after, and both: a sandwich), MoE (softmax, sigmoid with correction bias and
// groups, shared experts with gate).
std::vector<ModelSpec> SeedSpecs() {
  std::vector<ModelSpec> specs;
  testing::Rng rng(99);
  const Activation acts[] = {Activation::RELU, Activation::GELU_ERF, Activation::GELU_TANH,
                             Activation::SILU, Activation::SIGMOID, Activation::SWIGLU_OAI};
  for (int i = 0; i < 6; ++i) {
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
    const NormPlacement placement =
        i == 5 ? NormPlacement::SANDWICH : i % 3 ? NormPlacement::PRE : NormPlacement::POST;
    l.norm = testing::RandomNorm(i % 2 ? NormKind::LAYER_NORM : NormKind::RMS_NORM, placement, 4,
                                 rng);
    if (i == 5) l.output_norm = testing::RandomNorm(NormKind::RMS_NORM, placement, 4, rng);
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

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), {});
}

// fuzz_safetensors: a mode byte, then a file of the project's tiny example checkpoints (see the
// target's header for the modes).
bool WriteSafetensorsSeeds(const std::string& root, int* n) {
  const std::string dir = root + "/fuzz_safetensors", work = root + "/.examples";
  ::mkdir(dir.c_str(), 0755);
  auto seed = [&](uint8_t mode_byte, const std::string& file) {
    std::vector<uint8_t> bytes = ReadFile(file);
    if (bytes.empty()) return false;
    bytes.insert(bytes.begin(), mode_byte);
    return WriteFile(dir + "/seed" + std::to_string((*n)++), bytes);
  };
  bool ok = true;
  for (const char* arch : {"llama", "mixtral"}) {
    const bool moe = std::string(arch) == "mixtral";
    const std::string single = work + "/" + arch + "_1", sharded = work + "/" + arch + "_2";
    for (const auto& [path, shards] : {std::make_pair(single, 1u), std::make_pair(sharded, 2u)}) {
      absl::Status st = converter::MakeExampleCheckpoint(path, fuzz::TinyExample(arch, shards));
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.ToString().c_str());
        return false;
      }
    }
    const std::string weights = single + "/model.safetensors";
    ok = ok && seed(0, weights);                                     // alone
    ok = ok && seed(moe ? 4 : 3, weights);                           // next to its config
    ok = ok && seed(moe ? 4 + 5 * 7 : 3 + 5 * 2, weights);           // other options
    ok = ok && seed(moe ? 2 : 1, sharded + "/model.safetensors.index.json");
    ok = ok && seed(moe ? 2 + 5 * 13 : 1 + 5 * 6, sharded + "/model.safetensors.index.json");
    ok = ok && seed(0, sharded + "/model-00001-of-00002.safetensors");
  }
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
  return ok;
}

// Writes a NaN over the first scale of one of the quantised matrices of the model in `bytes`
// (the `pick`th, modulo their count).
bool PoisonOneScale(int pick, std::vector<uint8_t>* bytes) {
  auto model = Model::LoadBuffer(bytes->data(), bytes->size());
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return false;
  }
  std::vector<const TensorView*> quantized;
  auto see = [&quantized](const FfnView& f) {
    for (const TensorView* t : {&f.up, &f.gate, &f.down}) {
      if (t->quantized()) quantized.push_back(t);
    }
  };
  for (const LayerView& l : (*model)->layers()) {
    see(l.ffn);
    for (const FfnView& f : l.moe.experts) see(f);
    for (const FfnView& f : l.moe.shared_experts) see(f);
  }
  if (quantized.empty()) {
    std::fprintf(stderr, "a quantised seed has no quantised matrix\n");
    return false;
  }
  const TensorView& t = *quantized[static_cast<size_t>(pick) % quantized.size()];
  const uint16_t nan = 0x7e00;  // the panel's scales come first: row 0 of block 0
  std::memcpy(bytes->data() + (t.data - bytes->data()), &nan, sizeof(nan));
  return true;
}

// fuzz_config: the input drives a generator, so seeds are byte strings: the first byte picks the
// model_type (one of 17, fuzz_config.cc's kModelTypes), the rest is a fixed pseudo-random stream
// (3 per model_type; 8 for gpt_oss, the last, whose first 3 streams are all refused early).
bool WriteConfigSeeds(const std::string& root, int* n) {
  const std::string dir = root + "/fuzz_config";
  ::mkdir(dir.c_str(), 0755);
  uint64_t state = 12345;
  for (uint8_t type = 0; type < 17; ++type) {
    for (int variant = 0; variant < (type == 16 ? 8 : 3); ++variant) {
      std::vector<uint8_t> bytes = {type};
      for (int i = 0; i < 127; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        bytes.push_back(static_cast<uint8_t>(state >> 56));
      }
      if (!WriteFile(dir + "/seed" + std::to_string((*n)++), bytes)) return false;
    }
  }
  return true;
}

}  // namespace

// fuzz_gguf: GGUF files of every mapped architecture and every type the converter reads, small
// (d_model 32, or 256 for the types with 256-value blocks). Odd-sized files are converted with
// --dtype f16 by the target: each seed is written once as it is and once with a byte appended.
bool WriteGgufSeeds(const std::string& root, int* n) {
  using testing::GgufWriter;
  const std::string dir = root + "/fuzz_gguf";
  ::mkdir(dir.c_str(), 0755);
  testing::Rng rng(17);
  auto seed = [&](const GgufWriter& g) {
    std::vector<uint8_t> b = g.Bytes();
    if (!WriteFile(dir + "/seed" + std::to_string((*n)++), b)) return false;
    b.push_back(0);
    return WriteFile(dir + "/seed" + std::to_string((*n)++), b);
  };
  auto keys = [](GgufWriter& g, const std::string& arch, uint32_t d, uint32_t layers,
                 uint32_t ff) {
    g.Str("general.architecture", arch);
    g.U32(arch + ".embedding_length", d);
    g.U32(arch + ".block_count", layers);
    g.U32(arch + ".feed_forward_length", ff);
    g.F32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  };
  // Random blocks of any type, bytes below 0x3c so that f16 scales are finite.
  auto raw = [&](uint32_t type, uint64_t numel) {
    const converter::GgmlTypeInfo* info = converter::FindGgmlType(type);
    std::vector<uint8_t> b(numel / info->block_elems * info->block_bytes);
    for (uint8_t& v : b) v = static_cast<uint8_t>(rng.Uniform(0.0f, 59.99f));
    return b;
  };
  auto dense = [&](GgufWriter& g, int layer, uint32_t type, uint32_t d, uint32_t ff,
                   bool fused = false) {
    const std::string b = "blk." + std::to_string(layer);
    g.Matrix(b + ".ffn_norm.weight", {d}, testing::kGgmlF32, rng.Vec(d, 1.0f));
    const bool simple = type == testing::kGgmlF32 || type == testing::kGgmlF16 ||
                        type == testing::kGgmlBF16 || type == testing::kGgmlQ8_0 ||
                        type == testing::kGgmlQ4_0;
    auto matrix = [&](const std::string& name, uint64_t cols, uint64_t rows) {
      if (simple) {
        g.Matrix(name, {cols, rows}, type, rng.Vec(cols * rows, 1.0f));
      } else {
        g.Tensor(name, {cols, rows}, type, raw(type, cols * rows));
      }
    };
    if (fused) {
      matrix(b + ".ffn_up.weight", d, 2 * ff);
    } else {
      matrix(b + ".ffn_gate.weight", d, ff);
      matrix(b + ".ffn_up.weight", d, ff);
    }
    matrix(b + ".ffn_down.weight", ff, d);
  };
  bool ok = true;
  for (const uint32_t type : {testing::kGgmlF32, testing::kGgmlF16, testing::kGgmlBF16,
                              testing::kGgmlQ8_0, testing::kGgmlQ4_0}) {
    GgufWriter g;
    keys(g, "llama", 32, 1, 32);
    dense(g, 0, type, 32, 32);
    ok = ok && seed(g);
  }
  // Every other type the converter reads, on 256-wide matrices.
  for (const uint32_t type : {3u, 6u, 7u, 10u, 11u, 12u, 13u, 14u, 20u, 23u, 39u}) {
    GgufWriter g;
    keys(g, "qwen3", 256, 1, 256);
    dense(g, 0, type, 256, 256);
    ok = ok && seed(g);
  }
  {
    GgufWriter g;  // phi3's fused gate and up
    keys(g, "phi3", 32, 1, 32);
    dense(g, 0, testing::kGgmlQ4_0, 32, 32, /*fused=*/true);
    ok = ok && seed(g);
  }
  // MoE: Mixtral-style stacked experts, qwen2moe's shared expert behind its gate, qwen3moe with
  // a dense first layer.
  for (const std::string arch : {"llama", "qwen2moe", "qwen3moe"}) {
    GgufWriter g;
    keys(g, arch, 32, 2, 32);
    g.U32(arch + ".expert_count", 4);
    g.U32(arch + ".expert_used_count", 2);
    if (arch != "llama") g.U32(arch + ".expert_feed_forward_length", 32);
    dense(g, 0, testing::kGgmlF16, 32, 32);
    g.Matrix("blk.1.ffn_norm.weight", {32}, testing::kGgmlF32, rng.Vec(32, 1.0f));
    g.Matrix("blk.1.ffn_gate_inp.weight", {32, 4}, testing::kGgmlF32, rng.Vec(128, 1.0f));
    g.Matrix("blk.1.ffn_gate_exps.weight", {32, 32, 4}, testing::kGgmlQ4_0, rng.Vec(4096, 1.0f));
    g.Matrix("blk.1.ffn_up_exps.weight", {32, 32, 4}, testing::kGgmlQ4_0, rng.Vec(4096, 1.0f));
    g.Matrix("blk.1.ffn_down_exps.weight", {32, 32, 4}, testing::kGgmlQ8_0, rng.Vec(4096, 1.0f));
    if (arch == "qwen2moe") {
      g.Matrix("blk.1.ffn_gate_shexp.weight", {32, 32}, testing::kGgmlF16, rng.Vec(1024, 1.0f));
      g.Matrix("blk.1.ffn_up_shexp.weight", {32, 32}, testing::kGgmlF16, rng.Vec(1024, 1.0f));
      g.Matrix("blk.1.ffn_down_shexp.weight", {32, 32}, testing::kGgmlF16, rng.Vec(1024, 1.0f));
      g.Matrix("blk.1.ffn_gate_inp_shexp.weight", {32}, testing::kGgmlF32, rng.Vec(32, 1.0f));
    }
    ok = ok && seed(g);
  }
  {
    // deepseek2: a dense first layer, sigmoid routing with the correction bias and 2 groups,
    // shared experts.
    GgufWriter g;
    keys(g, "deepseek2", 32, 2, 32);
    g.U32("deepseek2.expert_count", 4);
    g.U32("deepseek2.expert_used_count", 2);
    g.U32("deepseek2.expert_shared_count", 1);
    g.U32("deepseek2.expert_feed_forward_length", 32);
    g.U32("deepseek2.expert_group_count", 2);
    g.U32("deepseek2.expert_group_used_count", 1);
    g.U32("deepseek2.expert_gating_func", 2);
    g.Bool("deepseek2.expert_weights_norm", true);
    g.F32("deepseek2.expert_weights_scale", 2.5f);
    dense(g, 0, testing::kGgmlQ8_0, 32, 32);
    g.Matrix("blk.1.ffn_norm.weight", {32}, testing::kGgmlF32, rng.Vec(32, 1.0f));
    g.Matrix("blk.1.ffn_gate_inp.weight", {32, 4}, testing::kGgmlF32, rng.Vec(128, 1.0f));
    g.Matrix("blk.1.exp_probs_b.bias", {4}, testing::kGgmlF32, rng.Vec(4, 0.1f));
    for (const char* m : {"gate", "up", "down"}) {
      g.Matrix(std::string("blk.1.ffn_") + m + "_exps.weight", {32, 32, 4}, testing::kGgmlQ4_0,
               rng.Vec(4096, 1.0f));
      g.Matrix(std::string("blk.1.ffn_") + m + "_shexp.weight", {32, 32}, testing::kGgmlF16,
               rng.Vec(1024, 1.0f));
    }
    ok = ok && seed(g);
  }
  {
    // bert: plain FFNs with biases and a post-LayerNorm with a bias.
    GgufWriter g;
    keys(g, "bert", 32, 1, 32);
    g.Matrix("blk.0.ffn_up.weight", {32, 32}, testing::kGgmlF16, rng.Vec(1024, 1.0f));
    g.Matrix("blk.0.ffn_up.bias", {32}, testing::kGgmlF32, rng.Vec(32, 1.0f));
    g.Matrix("blk.0.ffn_down.weight", {32, 32}, testing::kGgmlQ8_0, rng.Vec(1024, 1.0f));
    g.Matrix("blk.0.ffn_down.bias", {32}, testing::kGgmlF32, rng.Vec(32, 1.0f));
    g.Matrix("blk.0.layer_output_norm.weight", {32}, testing::kGgmlF32, rng.Vec(32, 1.0f));
    g.Matrix("blk.0.layer_output_norm.bias", {32}, testing::kGgmlF32, rng.Vec(32, 1.0f));
    ok = ok && seed(g);
  }
  {
    // gpt-oss: MXFP4 experts (bytes below 0x3c; gate's scales set to 120 and up's to [2, 51]: both
    // mxfp4, up's far below f16; down's first scale 0, which mxfp4 does not hold: f32), biases,
    // the router's bias.
    GgufWriter g;
    keys(g, "gpt-oss", 32, 1, 32);
    g.U32("gpt-oss.expert_count", 4);
    g.U32("gpt-oss.expert_used_count", 2);
    g.U32("gpt-oss.expert_feed_forward_length", 32);
    g.Matrix("blk.0.post_attention_norm.weight", {32}, testing::kGgmlF32, rng.Vec(32, 1.0f));
    g.Matrix("blk.0.ffn_gate_inp.weight", {32, 4}, testing::kGgmlF32, rng.Vec(128, 1.0f));
    g.Matrix("blk.0.ffn_gate_inp.bias", {4}, testing::kGgmlF32, rng.Vec(4, 1.0f));
    std::vector<uint8_t> gate = raw(39, 4096);
    for (size_t i = 0; i < gate.size(); i += 17) gate[i] = 120;
    g.Tensor("blk.0.ffn_gate_exps.weight", {32, 32, 4}, 39, gate);
    std::vector<uint8_t> up = raw(39, 4096), down = raw(39, 4096);
    for (size_t i = 0; i < up.size(); i += 17) up[i] = static_cast<uint8_t>(2 + i / 17 % 50);
    down[0] = 0;
    g.Tensor("blk.0.ffn_up_exps.weight", {32, 32, 4}, 39, up);
    g.Tensor("blk.0.ffn_down_exps.weight", {32, 32, 4}, 39, down);
    for (const char* b : {"gate", "up", "down"}) {
      g.Matrix(std::string("blk.0.ffn_") + b + "_exps.bias", {32, 4}, testing::kGgmlF32,
               rng.Vec(128, 1.0f));
    }
    ok = ok && seed(g);
  }
  return ok;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_ROOT\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  const std::string loader = root + "/fuzz_model_loader";
  ::mkdir(root.c_str(), 0755);
  ::mkdir(loader.c_str(), 0755);
  int n = 0, moe_specs = 0;
  for (const ModelSpec& spec : SeedSpecs()) {
    // Unpadded d_ff and a compact data section keep the seeds small for the fuzzer.
    // Float files, quantised ones (I8, I4; plain and rotated layouts) whose scales and panels
    // the fuzzer mutates too, and value rows.
    const std::pair<DType, bool> kinds[] = {{DType::F32, false}, {DType::BF16, false},
                                            {DType::I8, false},  {DType::I8, true},
                                            {DType::I4, false},  {DType::I4, true}};
    for (const auto& [dtype, rotate] : kinds) {
      WriteOptions options;
      options.d_ff_alignment = 1;
      options.data_alignment = 64;
      if (dtype == DType::I8 || dtype == DType::I4) {
        const DType quantized = dtype;
        options.dtype = DType::F32;
        options.matrix_dtype = [quantized](const std::string&, DType) { return quantized; };
        options.quantize.rotate = rotate;
      } else {
        options.dtype = dtype;
      }
      auto bytes = WriteModelBuffer(spec, options);
      if (!bytes.ok()) {
        std::fprintf(stderr, "%s\n", bytes.status().ToString().c_str());
        return 1;
      }
      if (!WriteFile(loader + "/model" + std::to_string(n++) + ".fflite", *bytes)) return 1;
      if (dtype == DType::I8 || dtype == DType::I4) {
        // The same file with a NaN scale in one of its quantised matrices (a different one per
        // seed): it loads, and the runs that read that matrix fail (Model::CheckScales).
        if (!PoisonOneScale(n, &*bytes)) return 1;
        if (!WriteFile(loader + "/model" + std::to_string(n++) + ".fflite", *bytes)) return 1;
      }
    }
    // Every down matrix as value rows (format 1.2), f16: the transposed layout under mutation.
    WriteOptions options;
    options.d_ff_alignment = 1;
    options.data_alignment = 64;
    options.dtype = DType::F16;
    options.down_value_rows = [](const std::string&, const FfnSpec&) { return true; };
    auto bytes = WriteModelBuffer(spec, options);
    if (!bytes.ok()) {
      std::fprintf(stderr, "%s\n", bytes.status().ToString().c_str());
      return 1;
    }
    if (!WriteFile(loader + "/model" + std::to_string(n++) + ".fflite", *bytes)) return 1;
    // MoE: expert records on 4 KiB pages (fflite-convert's default for MoE models), f32 for the
    // first MoE spec and i4 for the second: the padding between records under mutation.
    if (spec.layers[0].kind != LayerKind::kMoe) continue;
    WriteOptions aligned;
    aligned.d_ff_alignment = 1;
    aligned.data_alignment = 64;
    aligned.expert_alignment = kExpertPageAlignment;
    aligned.dtype = DType::F32;
    if (moe_specs++ % 2 == 1) {
      aligned.matrix_dtype = [](const std::string&, DType) { return DType::I4; };
    }
    bytes = WriteModelBuffer(spec, aligned);
    if (!bytes.ok()) {
      std::fprintf(stderr, "%s\n", bytes.status().ToString().c_str());
      return 1;
    }
    if (!WriteFile(loader + "/model" + std::to_string(n++) + ".fflite", *bytes)) return 1;
  }
  // The k-quants (format 1.4: GGUF's Q4_K, Q6_K and Q5_K re-laid; 1.6: Q6_K and Q5_K packed;
  // 1.7: IQ4_XS and IQ4_NL; 1.8: Q3_K in 3-bit planes; 1.9: Q2_K in 2-bit planes with its mins;
  // 1.10: MXFP4's codes; 1.11: Q2_K's scales and mins in GGUF's bytes; 1.12: MXFP4's E8M0 bytes;
  // 1.13: Q3_K's 6-bit scale codes packed; their d, dmin, scales and values under mutation): a
  // gated layer with
  // up and gate of that dtype [16, 256] and an f32 down; and the q4_k file with a 6-bit code of 64 (it loads; the runs that read that matrix fail).
  struct KSeed {
    DType dtype;
    size_t block;          // GGUF block bytes
    size_t d_at, dmin_at;  // where its f16 d (and dmin, or d again) lie in a block
    uint16_t d, dmin;      // values about ±0.1
    bool poisoned;
  };
  const KSeed kseeds[] = {{DType::Q4_K, 144, 0, 2, 0x2000, 0x2400, false},
                          {DType::Q4_K, 144, 0, 2, 0x2000, 0x2400, true},
                          {DType::Q6_K, 210, 208, 208, 0x1800, 0x1800, false},
                          {DType::Q5_K, 176, 0, 2, 0x1c00, 0x2400, false},
                          // Format 1.6: the same two at GGUF's sizes (values in bit planes).
                          {DType::Q6_K_PACKED, 210, 208, 208, 0x1800, 0x1800, false},
                          {DType::Q5_K_PACKED, 176, 0, 2, 0x1c00, 0x2400, false},
                          // Format 1.7: IQ4_XS's level indices in q6_k's scales.
                          {DType::IQ4_XS, 136, 0, 0, 0x0c00, 0x0c00, false},
                          // and IQ4_NL's, an f16 scale per 32 (i8's).
                          {DType::IQ4_NL, 18, 0, 0, 0x1c00, 0x1c00, false},
                          // Format 1.13: Q3_K's values in 3-bit planes, its 6-bit scale codes
                          // packed (GGUF's 12 bytes per 16).
                          {DType::Q3_K_PACKED, 110, 108, 108, 0x1c00, 0x1c00, false},
                          // Format 1.11: Q2_K's values in 2-bit planes, its scale bytes GGUF's
                          // (the mins in their high nibbles), its dmin after the scales.
                          {DType::Q2_K_PACKED, 84, 80, 82, 0x1c00, 0x1c00, false},
                          // Format 1.12: MXFP4's E2M1 codes in IQ4_NL's nibbles, its E8M0 byte
                          // per 32 (the f16 2^-8 written as e = 120).
                          {DType::MXFP4, 17, 0, 0, 0x1c00, 0x1c00, false}};
  for (const KSeed& ks : kseeds) {
    testing::Rng rng(7);
    testing::FfnParams fp;
    fp.d_model = 256;
    fp.d_ff = 16;
    LayerSpec l;
    l.ffn = testing::RandomFfn(fp, rng);
    l.residual = true;
    for (TensorSource* t : {&l.ffn.up, &l.ffn.gate}) {
      std::vector<uint8_t> gguf(16 * ks.block);
      for (uint8_t& b : gguf) b = static_cast<uint8_t>(rng.Uniform(0.0f, 255.99f));
      for (size_t i = 0; i < gguf.size(); i += ks.block) {
        std::memcpy(&gguf[i + ks.d_at], &ks.d, 2);
        std::memcpy(&gguf[i + ks.dmin_at], &ks.dmin, 2);
      }
      auto packed =
          std::make_shared<std::vector<uint8_t>>(QuantMatrixGeometry(ks.dtype, 16, 256).bytes());
      if (ks.dtype == DType::Q4_K) {
        PackQ4KFromGguf(16, 256, gguf.data(), packed->data());
      } else if (ks.dtype == DType::Q2_K_PACKED) {
        PackQ2KFromGguf(16, 256, gguf.data(), packed->data());
      } else if (ks.dtype == DType::Q6_K || ks.dtype == DType::Q6_K_PACKED) {
        PackQ6KFromGguf(ks.dtype, 16, 256, gguf.data(), packed->data());
      } else if (ks.dtype == DType::IQ4_NL || ks.dtype == DType::MXFP4) {
        const int8_t* levels = ks.dtype == DType::MXFP4 ? kMxfp4Levels : kIq4Levels;
        std::vector<int8_t> q(16 * 256);
        std::vector<uint16_t> scales(16 * 256 / 32, ks.d);
        for (size_t i = 0; i < q.size(); ++i) q[i] = levels[gguf[i % gguf.size()] & 15];
        PackQuantMatrix(ks.dtype, 16, 256, q.data(), scales.data(), packed->data());
      } else if (ks.dtype == DType::Q3_K_PACKED || ks.dtype == DType::IQ4_XS) {
        // The block's d, then (the seed's own use of the random bytes) a scale in [-32, 31] per
        // 16 values (Q3_K) or 32 (IQ4_XS), and per value Q3_K's [-4, 3] or one of IQ4_XS's levels.
        const bool q3 = ks.dtype == DType::Q3_K_PACKED;
        PackQ6KFromBlocks(
            ks.dtype, 16, 256,
            [&](uint64_t row, uint64_t, uint16_t* d, int8_t* scales, int8_t* values) {
              const uint8_t* in = gguf.data() + row * ks.block;
              std::memcpy(d, in + ks.d_at, 2);
              for (int j = 0; j < 16; ++j) {
                scales[j] = static_cast<int8_t>((q3 ? in[96 + j % 12] : in[2 + j / 2]) % 64 - 32);
              }
              for (int e = 0; e < 256; ++e) {
                values[e] = q3 ? static_cast<int8_t>(((in[e / 4] >> (2 * (e % 4))) & 7) - 4)
                               : kIq4Levels[(in[8 + e / 2] >> (4 * (e % 2))) & 15];
              }
            },
            packed->data());
      } else {
        PackQ5KFromGguf(ks.dtype, 16, 256, gguf.data(), packed->data());
      }
      if (ks.poisoned && t == &l.ffn.gate) (*packed)[Q4K::ScaleOffset(5) + 3] = 64;
      t->dtype = ks.dtype;
      t->shape = {16, 256};
      t->fill = [packed](uint8_t* dst, uint64_t bytes) -> absl::Status {
        if (bytes != packed->size()) return absl::InternalError("k-quant seed: byte count");
        std::memcpy(dst, packed->data(), bytes);
        return absl::OkStatus();
      };
    }
    ModelSpec spec;
    spec.d_model = 256;
    spec.layers.push_back(std::move(l));
    WriteOptions options;
    options.d_ff_alignment = 1;
    options.data_alignment = 64;
    auto bytes = WriteModelBuffer(spec, options);
    if (!bytes.ok()) {
      std::fprintf(stderr, "%s\n", bytes.status().ToString().c_str());
      return 1;
    }
    if (!WriteFile(loader + "/model" + std::to_string(n++) + ".fflite", *bytes)) return 1;
  }
  std::printf("wrote %d seeds to %s\n", n, loader.c_str());
  int safetensors_seeds = 0, config_seeds = 0, gguf_seeds = 0;
  if (!WriteSafetensorsSeeds(root, &safetensors_seeds) || !WriteConfigSeeds(root, &config_seeds) ||
      !WriteGgufSeeds(root, &gguf_seeds)) {
    std::fprintf(stderr, "cannot write the converter seeds under %s\n", root.c_str());
    return 1;
  }
  std::printf("wrote %d fuzz_safetensors, %d fuzz_config and %d fuzz_gguf seeds\n",
              safetensors_seeds, config_seeds, gguf_seeds);
  return 0;
}
