// GGUF files -> fflite: the reader's checks on malformed headers, every mapped architecture
// against the safetensors mapping of the same weights (bit for bit through the reference
// backend), Q8_0 / Q4_0 kept as I8 / I4 with every value and scale as the file holds them, the
// other types dequantised exactly, and the errors a user meets by name. Files are written by
// tests/testing/gguf_writer.h, from the specification.
#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/half.h"
#include "base/status_macros.h"
#include "converter/gguf.h"
#include "converter/gguf_convert.h"
#include "converter/gguf_types.h"
#include "converter_test_util.h"
#include "format/quant_layout.h"
#include "format/quantize.h"
#include "format/quantize_kquant.h"
#include "testing/gguf_writer.h"

namespace fflite {
namespace testing {
namespace {

using converter::GgufFile;
using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr uint64_t kD = 64;

// The same weights as a Hugging Face checkpoint and as a GGUF file.
struct Twin {
  CheckpointWriter hf;
  GgufWriter gguf;
  Rng rng{7};
  // An nn.Linear weight [rows, cols] (a vector when rows == 0), ne = [cols, rows].
  std::vector<float> Add(const std::string& hf_name, const std::string& gguf_name, uint64_t rows,
                         uint64_t cols, float center = 0.0f) {
    std::vector<float> v = rng.Vec(std::max<uint64_t>(rows, 1) * cols, 0.5f);
    for (float& x : v) x += center;
    if (rows == 0) {
      hf.Add(hf_name, {cols}, v);
      gguf.Matrix(gguf_name, {cols}, kGgmlF32, v);
    } else {
      hf.Add(hf_name, {rows, cols}, v);
      if (!gguf_name.empty()) gguf.Matrix(gguf_name, {cols, rows}, kGgmlF32, v);
    }
    return v;
  }
  // Experts' matrices [rows, cols] each ("<prefix>.<e>.<suffix>"), one 3-D GGUF tensor
  // ne = [cols, rows, experts].
  void AddExperts(const std::string& prefix, const std::string& suffix,
                  const std::string& gguf_name, uint64_t experts, uint64_t rows, uint64_t cols) {
    std::vector<float> all;
    for (uint64_t e = 0; e < experts; ++e) {
      const std::vector<float> v = Add(absl::StrCat(prefix, ".", e, ".", suffix), "", rows, cols);
      all.insert(all.end(), v.begin(), v.end());
    }
    gguf.Matrix(gguf_name, {cols, rows, experts}, kGgmlF32, all);
  }
};

class GgufTest : public ConverterTest {
 protected:
  std::string WriteGguf(const GgufWriter& g, const std::string& name = "model.gguf") {
    const std::string path = root_ + "/" + name;
    EXPECT_TRUE(g.Write(path));
    return path;
  }
  absl::StatusOr<std::unique_ptr<Model>> ConvertGguf(const std::string& path,
                                                     converter::ConvertOptions options = {},
                                                     const std::string& name = "gguf.fflite") {
    const std::string out = out_dir_ + "/" + name;
    FFLITE_RETURN_IF_ERROR(converter::ConvertCheckpoint(path, out, options).status());
    return Model::LoadFile(out);
  }
  // Converts both twins and expects every layer's output equal, bit for bit.
  void ExpectSameAsSafetensors(const Twin& t, const json& config, size_t layers,
                               converter::ConvertOptions options = {}) {
    auto hf = Convert(t.hf, config, options, 1, "hf.fflite");
    ASSERT_NE(hf, nullptr);
    ASSERT_OK_AND_ASSIGN(auto gg, ConvertGguf(WriteGguf(t.gguf), options));
    ASSERT_EQ(gg->layers().size(), layers);
    ASSERT_EQ(hf->layers().size(), layers);
    Rng rng(11);
    const std::vector<float> x = rng.Vec(3 * kD, 1.0f);
    for (size_t l = 0; l < layers; ++l) {
      ASSERT_OK_AND_ASSIGN(auto want, RunLayer(*hf, "reference", l, x, 3));
      ASSERT_OK_AND_ASSIGN(auto got, RunLayer(*gg, "reference", l, x, 3));
      EXPECT_EQ(got, want) << "layer " << l;
      EXPECT_EQ(gg->layers()[l].residual, hf->layers()[l].residual);
      EXPECT_EQ(gg->layers()[l].norm.present, hf->layers()[l].norm.present);
      // The routing, field by field (random inputs may not reach every difference).
      const MoeView& a = gg->layers()[l].moe;
      const MoeView& b = hf->layers()[l].moe;
      ASSERT_EQ(gg->layers()[l].kind, hf->layers()[l].kind);
      EXPECT_EQ(a.num_experts, b.num_experts);
      EXPECT_EQ(a.top_k, b.top_k);
      EXPECT_EQ(a.scoring, b.scoring);
      EXPECT_EQ(a.normalize_top_k, b.normalize_top_k);
      EXPECT_EQ(a.routed_scaling_factor, b.routed_scaling_factor);
      EXPECT_EQ(a.n_group, b.n_group);
      EXPECT_EQ(a.topk_group, b.topk_group);
      EXPECT_EQ(a.group_scoring, b.group_scoring);
      EXPECT_EQ(a.router_bias.present(), b.router_bias.present());
      EXPECT_EQ(a.score_correction_bias.present(), b.score_correction_bias.present());
      EXPECT_EQ(a.shared_experts.size(), b.shared_experts.size());
      EXPECT_EQ(a.shared_expert_gate.present(), b.shared_expert_gate.present());
    }
  }
};

void LlamaKeys(GgufWriter& g, const std::string& arch, uint32_t layers, uint32_t ff) {
  g.Str("general.architecture", arch);
  g.Str("general.name", "test model");
  g.U32(arch + ".embedding_length", kD);
  g.U32(arch + ".block_count", layers);
  g.U32(arch + ".feed_forward_length", ff);
  g.F32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  g.StrArray("tokenizer.ggml.tokens", {"<s>", "</s>", "a"});  // read past, not used
}

// ---- architectures, against their safetensors mappings ----

TEST_F(GgufTest, LlamaQwenDense) {
  for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
    SCOPED_TRACE(arch);
    Twin t;
    constexpr uint32_t kFf = 96;  // padded to 128 in the file
    LlamaKeys(t.gguf, arch, 2, kFf);
    for (int i = 0; i < 2; ++i) {
      const std::string p = absl::StrFormat("model.layers.%d", i), b = absl::StrFormat("blk.%d", i);
      t.Add(p + ".post_attention_layernorm.weight", b + ".ffn_norm.weight", 0, kD, 1.0f);
      t.Add(p + ".mlp.gate_proj.weight", b + ".ffn_gate.weight", kFf, kD);
      t.Add(p + ".mlp.up_proj.weight", b + ".ffn_up.weight", kFf, kD);
      t.Add(p + ".mlp.down_proj.weight", b + ".ffn_down.weight", kD, kFf);
    }
    const json config = {{"model_type", arch}, {"hidden_size", kD}, {"intermediate_size", kFf},
                         {"num_hidden_layers", 2}, {"rms_norm_eps", 1e-5f},
                         {"hidden_act", "silu"}};
    ExpectSameAsSafetensors(t, config, 2);
  }
}

TEST_F(GgufTest, GemmaNormStoredWithItsOffset) {
  Twin t;
  constexpr uint32_t kFf = 64;
  LlamaKeys(t.gguf, "gemma", 1, kFf);
  // HF stores w and computes (1 + w); llama.cpp's converter stores 1 + w.
  const std::vector<float> w = t.rng.Vec(kD, 0.3f);
  std::vector<float> w1(w);
  for (float& v : w1) v += 1.0f;
  t.hf.Add("model.layers.0.post_attention_layernorm.weight", {kD}, w);
  t.gguf.Matrix("blk.0.ffn_norm.weight", {kD}, kGgmlF32, w1);
  t.Add("model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight", kFf, kD);
  t.Add("model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", kFf, kD);
  t.Add("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight", kD, kFf);
  const json config = {{"model_type", "gemma"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 1}, {"rms_norm_eps", 1e-5f}};
  // 1 + w in f32 is not always exactly what fflite's unit offset computes: compare the bare FFN
  // bit for bit, and the normed layer against the hand reference on the stored 1 + w.
  converter::ConvertOptions bare;
  bare.include_norm = false;
  ExpectSameAsSafetensors(t, config, 1, bare);
  ASSERT_OK_AND_ASSIGN(auto gg, ConvertGguf(WriteGguf(t.gguf), {}, "normed.fflite"));
  ExpectLayer(*gg, 0, [&](const Vec& x) {
    const Vec h = HfRmsNorm(x, w1, 1e-5);
    return Add(x, HfGatedMlp(t.hf, "model.layers.0.mlp", "gelu_pytorch_tanh", h));
  });
}

// gemma2/gemma3: y = x + post(mlp(pre(x))), both RMSNorms by (1 + w): HF stores w, llama.cpp's
// converter 1 + w (ffn_norm and post_ffw_norm). Both conversions against the hand formula of
// Gemma2DecoderLayer's FFN half, and the bare FFNs bit for bit.
TEST_F(GgufTest, Gemma2And3NormBeforeAndAfterTheFfn) {
  for (const auto& [gguf_arch, hf_type] : {std::pair<std::string, std::string>{"gemma2", "gemma2"},
                                           {"gemma3", "gemma3_text"}}) {
    SCOPED_TRACE(gguf_arch);
    Twin t;
    constexpr uint32_t kFf = 64;
    LlamaKeys(t.gguf, gguf_arch, 1, kFf);
    const std::vector<float> pre = t.rng.Vec(kD, 0.3f), post = t.rng.Vec(kD, 0.3f);
    std::vector<float> pre1(pre), post1(post);
    for (float& v : pre1) v += 1.0f;
    for (float& v : post1) v += 1.0f;
    t.hf.Add("model.layers.0.pre_feedforward_layernorm.weight", {kD}, pre);
    t.hf.Add("model.layers.0.post_feedforward_layernorm.weight", {kD}, post);
    t.gguf.Matrix("blk.0.ffn_norm.weight", {kD}, kGgmlF32, pre1);
    t.gguf.Matrix("blk.0.post_ffw_norm.weight", {kD}, kGgmlF32, post1);
    t.Add("model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight", kFf, kD);
    t.Add("model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", kFf, kD);
    t.Add("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight", kD, kFf);
    const json config = {{"model_type", hf_type}, {"hidden_size", kD}, {"intermediate_size", kFf},
                         {"num_hidden_layers", 1}, {"rms_norm_eps", 1e-5f},
                         {"hidden_activation", "gelu_pytorch_tanh"}};
    converter::ConvertOptions bare;
    bare.include_norm = false;
    ExpectSameAsSafetensors(t, config, 1, bare);
    auto want = [&](const Vec& x) {
      const Vec h = HfRmsNorm(x, pre1, 1e-5);
      return Add(x, HfRmsNorm(HfGatedMlp(t.hf, "model.layers.0.mlp", "gelu_pytorch_tanh", h),
                              post1, 1e-5));
    };
    ASSERT_OK_AND_ASSIGN(auto gg, ConvertGguf(WriteGguf(t.gguf), {}, gguf_arch + ".fflite"));
    const LayerView& l = gg->layers()[0];
    EXPECT_EQ(l.norm.placement, NormPlacement::SANDWICH);
    EXPECT_TRUE(l.output_norm.present);
    EXPECT_FALSE(l.output_norm.unit_offset);  // stored with its 1 added
    ExpectLayer(*gg, 0, want);
    ASSERT_OK(t.hf.Write(ckpt_, config.dump(1)));
    const std::string out = out_dir_ + "/" + hf_type + "_hf.fflite";
    ASSERT_OK(converter::ConvertCheckpoint(ckpt_, out, {}).status());
    ASSERT_OK_AND_ASSIGN(auto hf, Model::LoadFile(out));
    EXPECT_TRUE(hf->layers()[0].output_norm.unit_offset);
    ExpectLayer(*hf, 0, want);
  }
}

TEST_F(GgufTest, Phi3FusedGateUp) {
  Twin t;
  constexpr uint32_t kFf = 64;
  LlamaKeys(t.gguf, "phi3", 1, kFf);
  t.Add("model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight", 0, kD, 1.0f);
  t.Add("model.layers.0.mlp.gate_up_proj.weight", "blk.0.ffn_up.weight", 2 * kFf, kD);
  t.Add("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight", kD, kFf);
  const json config = {{"model_type", "phi3"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 1}, {"rms_norm_eps", 1e-5f}, {"hidden_act", "silu"}};
  ExpectSameAsSafetensors(t, config, 1);
}

TEST_F(GgufTest, MixtralStackedAndPerExpert) {
  for (const bool stacked : {true, false}) {
    SCOPED_TRACE(stacked ? "ffn_*_exps" : "ffn_*.E");
    Twin t;
    constexpr uint32_t kFf = 32, kE = 4;
    LlamaKeys(t.gguf, "llama", 1, kFf);
    t.gguf.U32("llama.expert_count", kE);
    t.gguf.U32("llama.expert_used_count", 2);
    const std::string p = "model.layers.0.block_sparse_moe";
    t.Add("model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight", 0, kD, 1.0f);
    t.Add(p + ".gate.weight", "blk.0.ffn_gate_inp.weight", kE, kD);
    if (stacked) {
      t.AddExperts(p + ".experts", "w1.weight", "blk.0.ffn_gate_exps.weight", kE, kFf, kD);
      t.AddExperts(p + ".experts", "w3.weight", "blk.0.ffn_up_exps.weight", kE, kFf, kD);
      t.AddExperts(p + ".experts", "w2.weight", "blk.0.ffn_down_exps.weight", kE, kD, kFf);
    } else {
      for (uint32_t e = 0; e < kE; ++e) {
        const std::string hp = absl::StrFormat("%s.experts.%d", p, e);
        t.Add(hp + ".w1.weight", absl::StrFormat("blk.0.ffn_gate.%d.weight", e), kFf, kD);
        t.Add(hp + ".w3.weight", absl::StrFormat("blk.0.ffn_up.%d.weight", e), kFf, kD);
        t.Add(hp + ".w2.weight", absl::StrFormat("blk.0.ffn_down.%d.weight", e), kD, kFf);
      }
    }
    const json config = {{"model_type", "mixtral"}, {"hidden_size", kD},
                         {"intermediate_size", kFf}, {"num_hidden_layers", 1},
                         {"num_local_experts", kE}, {"num_experts_per_tok", 2},
                         {"rms_norm_eps", 1e-5f}};
    ExpectSameAsSafetensors(t, config, 1);
  }
}

TEST_F(GgufTest, QwenMoeSharedExpertDenseLayersAndNormKey) {
  for (const std::string arch : {"qwen2moe", "qwen3moe"}) {
    SCOPED_TRACE(arch);
    Twin t;
    constexpr uint32_t kFf = 96, kMoeFf = 32, kSharedFf = 64, kE = 4;
    const bool shared = arch == "qwen2moe";
    LlamaKeys(t.gguf, arch, 2, kFf);
    t.gguf.U32(arch + ".expert_count", kE);
    t.gguf.U32(arch + ".expert_used_count", 2);
    t.gguf.U32(arch + ".expert_feed_forward_length", kMoeFf);
    if (shared) t.gguf.U32(arch + ".expert_shared_feed_forward_length", kSharedFf);
    // Layer 0 dense (mlp_only_layers), layer 1 sparse.
    t.Add("model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight", 0, kD, 1.0f);
    t.Add("model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight", kFf, kD);
    t.Add("model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", kFf, kD);
    t.Add("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight", kD, kFf);
    const std::string p = "model.layers.1.mlp";
    t.Add("model.layers.1.post_attention_layernorm.weight", "blk.1.ffn_norm.weight", 0, kD, 1.0f);
    t.Add(p + ".gate.weight", "blk.1.ffn_gate_inp.weight", kE, kD);
    t.AddExperts(p + ".experts", "gate_proj.weight", "blk.1.ffn_gate_exps.weight", kE, kMoeFf, kD);
    t.AddExperts(p + ".experts", "up_proj.weight", "blk.1.ffn_up_exps.weight", kE, kMoeFf, kD);
    t.AddExperts(p + ".experts", "down_proj.weight", "blk.1.ffn_down_exps.weight", kE, kD, kMoeFf);
    if (shared) {
      t.Add(p + ".shared_expert.gate_proj.weight", "blk.1.ffn_gate_shexp.weight", kSharedFf, kD);
      t.Add(p + ".shared_expert.up_proj.weight", "blk.1.ffn_up_shexp.weight", kSharedFf, kD);
      t.Add(p + ".shared_expert.down_proj.weight", "blk.1.ffn_down_shexp.weight", kD, kSharedFf);
      const std::vector<float> g = t.rng.Vec(kD, 0.5f);
      t.hf.Add(p + ".shared_expert_gate.weight", {1, kD}, g);
      t.gguf.Matrix("blk.1.ffn_gate_inp_shexp.weight", {kD}, kGgmlF32, g);
    }
    const std::string hf_type = shared ? "qwen2_moe" : "qwen3_moe";
    json config = {{"model_type", hf_type}, {"hidden_size", kD}, {"intermediate_size", kFf},
                   {"num_hidden_layers", 2}, {"num_experts", kE}, {"num_experts_per_tok", 2},
                   {"moe_intermediate_size", kMoeFf}, {"mlp_only_layers", {0}},
                   {"rms_norm_eps", 1e-5f}, {"norm_topk_prob", !shared}};
    if (shared) config["shared_expert_intermediate_size"] = kSharedFf;
    ExpectSameAsSafetensors(t, config, 2);
  }
}

// DeepSeek-V3 (sigmoid, correction bias, 4 groups keep 1, top-2 renormalised, scale 2.5) and V2
// (softmax, groups by their best score, not renormalised, scale 16) from deepseek2 GGUF files,
// against the deepseek_v3 / deepseek_v2 safetensors mappings: a dense first layer, then routed
// and shared experts.
TEST_F(GgufTest, Deepseek2V3AndV2) {
  for (const bool v3 : {true, false}) {
    SCOPED_TRACE(v3 ? "v3" : "v2");
    Twin t;
    constexpr uint32_t kFf = 96, kMoeFf = 32, kE = 8, kShared = 2;
    LlamaKeys(t.gguf, "deepseek2", 2, kFf);
    t.gguf.U32("deepseek2.leading_dense_block_count", 1);
    t.gguf.U32("deepseek2.expert_count", kE);
    t.gguf.U32("deepseek2.expert_used_count", 2);
    t.gguf.U32("deepseek2.expert_shared_count", kShared);
    t.gguf.U32("deepseek2.expert_feed_forward_length", kMoeFf);
    t.gguf.U32("deepseek2.expert_group_count", 4);
    t.gguf.U32("deepseek2.expert_group_used_count", 1);  // one group of 2 kept: top-2 inside it
    t.gguf.F32("deepseek2.expert_weights_scale", v3 ? 2.5f : 16.0f);
    t.gguf.Bool("deepseek2.expert_weights_norm", v3);
    t.gguf.U32("deepseek2.expert_gating_func", v3 ? 2 : 1);
    t.Add("model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight", 0, kD, 1.0f);
    t.Add("model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight", kFf, kD);
    t.Add("model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", kFf, kD);
    t.Add("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight", kD, kFf);
    const std::string p = "model.layers.1.mlp";
    t.Add("model.layers.1.post_attention_layernorm.weight", "blk.1.ffn_norm.weight", 0, kD, 1.0f);
    t.Add(p + ".gate.weight", "blk.1.ffn_gate_inp.weight", kE, kD);
    if (v3) t.Add(p + ".gate.e_score_correction_bias", "blk.1.exp_probs_b.bias", 0, kE, 0.05f);
    t.AddExperts(p + ".experts", "gate_proj.weight", "blk.1.ffn_gate_exps.weight", kE, kMoeFf, kD);
    t.AddExperts(p + ".experts", "up_proj.weight", "blk.1.ffn_up_exps.weight", kE, kMoeFf, kD);
    t.AddExperts(p + ".experts", "down_proj.weight", "blk.1.ffn_down_exps.weight", kE, kD, kMoeFf);
    const uint64_t sff = kMoeFf * kShared;
    t.Add(p + ".shared_experts.gate_proj.weight", "blk.1.ffn_gate_shexp.weight", sff, kD);
    t.Add(p + ".shared_experts.up_proj.weight", "blk.1.ffn_up_shexp.weight", sff, kD);
    t.Add(p + ".shared_experts.down_proj.weight", "blk.1.ffn_down_shexp.weight", kD, sff);
    json config = {{"model_type", v3 ? "deepseek_v3" : "deepseek_v2"}, {"hidden_size", kD},
                   {"intermediate_size", kFf}, {"moe_intermediate_size", kMoeFf},
                   {"num_hidden_layers", 2}, {"n_routed_experts", kE},
                   {"n_shared_experts", kShared}, {"num_experts_per_tok", 2}, {"n_group", 4},
                   {"topk_group", 1},
                   {"topk_method", v3 ? "noaux_tc" : "group_limited_greedy"},
                   {"norm_topk_prob", v3}, {"routed_scaling_factor", v3 ? 2.5 : 16.0},
                   {"first_k_dense_replace", 1}, {"rms_norm_eps", 1e-5f}, {"hidden_act", "silu"}};
    if (v3) config["scoring_func"] = "sigmoid";
    ExpectSameAsSafetensors(t, config, 2);
  }
  // A group count that does not divide the experts is refused by key.
  GgufWriter g;
  LlamaKeys(g, "deepseek2", 1, 32);
  g.U32("deepseek2.expert_count", 6);
  g.U32("deepseek2.expert_used_count", 2);
  g.U32("deepseek2.expert_group_count", 4);
  Rng rng(4);
  g.Matrix("blk.0.ffn_gate_inp.weight", {kD, 6}, kGgmlF32, rng.Vec(6 * kD, 1.0f));
  EXPECT_THAT(ConvertGguf(WriteGguf(g)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("deepseek2.expert_group_count")));
}

TEST_F(GgufTest, BertPostLayerNorm) {
  Twin t;
  constexpr uint32_t kFf = 96;
  t.gguf.Str("general.architecture", "bert");
  t.gguf.U32("bert.embedding_length", kD);
  t.gguf.U32("bert.block_count", 2);
  t.gguf.U32("bert.feed_forward_length", kFf);
  t.gguf.F32("bert.attention.layer_norm_epsilon", 1e-12f);
  for (int i = 0; i < 2; ++i) {
    const std::string p = absl::StrFormat("bert.encoder.layer.%d", i);
    const std::string b = absl::StrFormat("blk.%d", i);
    t.Add(p + ".intermediate.dense.weight", b + ".ffn_up.weight", kFf, kD);
    t.Add(p + ".intermediate.dense.bias", b + ".ffn_up.bias", 0, kFf);
    t.Add(p + ".output.dense.weight", b + ".ffn_down.weight", kD, kFf);
    t.Add(p + ".output.dense.bias", b + ".ffn_down.bias", 0, kD);
    t.Add(p + ".output.LayerNorm.weight", b + ".layer_output_norm.weight", 0, kD, 1.0f);
    t.Add(p + ".output.LayerNorm.bias", b + ".layer_output_norm.bias", 0, kD);
  }
  const json config = {{"model_type", "bert"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 2}, {"layer_norm_eps", 1e-12f},
                       {"hidden_act", "gelu"}};
  ExpectSameAsSafetensors(t, config, 2);
}

// ---- gpt-oss: MXFP4 experts, biases, the clamped SwiGLU ----

// e2m1 from its bits (sign, 2-bit exponent, 1-bit mantissa; exponent 0 is subnormal: m/2).
double E2m1(int code) {
  const int e = (code >> 1) & 3, m = code & 1;
  const double v = e == 0 ? 0.5 * m : (1.0 + 0.5 * m) * std::ldexp(1.0, e - 1);
  return (code & 8) != 0 ? -v : v;
}

// One expert's matrix [rows, k] as MXFP4 codes and e8m0 scales (one per 32 of a row).
struct Mx {
  uint64_t rows, k;
  std::vector<uint8_t> codes, scales;
  double At(uint64_t r, uint64_t j) const {
    return E2m1(codes[r * k + j]) * std::ldexp(1.0, scales[r * (k / 32) + j / 32] - 127);
  }
  std::vector<float> Values() const {
    std::vector<float> v(rows * k);
    for (uint64_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(At(i / k, i % k));
    return v;
  }
};
Mx RandomMx(Rng& rng, uint64_t rows, uint64_t k) {
  Mx m{rows, k, std::vector<uint8_t>(rows * k), std::vector<uint8_t>(rows * k / 32)};
  for (uint8_t& c : m.codes) c = static_cast<uint8_t>(rng.Uniform(0.0f, 15.99f));
  for (uint8_t& s : m.scales) s = static_cast<uint8_t>(rng.Uniform(120.0f, 127.99f));
  return m;
}
// transformers' packing: rows of k/32 blocks of 16 bytes, byte j = elements 2j (low), 2j + 1.
void PackHf(const Mx& m, std::vector<uint8_t>* blocks, std::vector<uint8_t>* scales) {
  for (uint64_t i = 0; i < m.rows * m.k; i += 2) {
    blocks->push_back(static_cast<uint8_t>(m.codes[i] | (m.codes[i + 1] << 4)));
  }
  scales->insert(scales->end(), m.scales.begin(), m.scales.end());
}
// ggml's block_mxfp4: the e8m0 byte, then 16 bytes, byte j = elements j (low) and j + 16 (high).
void PackGgml(const Mx& m, std::vector<uint8_t>* out) {
  for (uint64_t b = 0; b < m.rows * m.k / 32; ++b) {
    out->push_back(m.scales[b]);
    for (uint64_t j = 0; j < 16; ++j) {
      out->push_back(static_cast<uint8_t>(m.codes[b * 32 + j] | (m.codes[b * 32 + j + 16] << 4)));
    }
  }
}

TEST_F(GgufTest, GptOssFromSafetensorsAndGguf) {
  constexpr uint64_t kFf = 64, kE = 4, kK = 2;
  Rng rng(21);
  std::vector<Mx> gate, up, down;
  for (uint64_t e = 0; e < kE; ++e) {
    gate.push_back(RandomMx(rng, kFf, kD));
    up.push_back(RandomMx(rng, kFf, kD));
    down.push_back(RandomMx(rng, kD, kFf));
  }
  const std::vector<float> router = rng.Vec(kE * kD, 0.5f), router_bias = rng.Vec(kE, 0.5f);
  const std::vector<float> norm = rng.Vec(kD, 0.5f), down_bias = rng.Vec(kE * kD, 0.5f);
  const std::vector<float> gu_bias = rng.Vec(kE * 2 * kFf, 2.0f);  // biases that reach the clamps
  for (float& v : const_cast<std::vector<float>&>(norm)) v += 1.0f;

  // transformers' checkpoint: gate_up_proj interleaved (gate = even rows), MXFP4 blocks.
  const std::string p = "model.layers.0";
  std::vector<uint8_t> gu_blocks, gu_scales, d_blocks, d_scales;
  for (uint64_t e = 0; e < kE; ++e) {
    Mx gu{2 * kFf, kD, {}, {}};
    for (uint64_t i = 0; i < kFf; ++i) {
      for (const Mx* half : {&gate[e], &up[e]}) {
        gu.codes.insert(gu.codes.end(), half->codes.begin() + static_cast<long>(i * kD),
                        half->codes.begin() + static_cast<long>((i + 1) * kD));
        gu.scales.insert(gu.scales.end(), half->scales.begin() + static_cast<long>(i * kD / 32),
                         half->scales.begin() + static_cast<long>((i + 1) * kD / 32));
      }
    }
    PackHf(gu, &gu_blocks, &gu_scales);
    PackHf(down[e], &d_blocks, &d_scales);
  }
  auto make_hf = [&](const std::vector<uint8_t>& down_scales) {
    CheckpointWriter w;
    w.Add(p + ".post_attention_layernorm.weight", {kD}, norm);
    w.Add(p + ".mlp.router.weight", {kE, kD}, router);
    w.Add(p + ".mlp.router.bias", {kE}, router_bias);
    w.AddRaw(p + ".mlp.experts.gate_up_proj_blocks", "U8", 1, {kE, 2 * kFf, kD / 32, 16},
             gu_blocks);
    w.AddRaw(p + ".mlp.experts.gate_up_proj_scales", "U8", 1, {kE, 2 * kFf, kD / 32}, gu_scales);
    w.Add(p + ".mlp.experts.gate_up_proj_bias", {kE, 2 * kFf}, gu_bias);
    w.AddRaw(p + ".mlp.experts.down_proj_blocks", "U8", 1, {kE, kD, kFf / 32, 16}, d_blocks);
    w.AddRaw(p + ".mlp.experts.down_proj_scales", "U8", 1, {kE, kD, kFf / 32}, down_scales);
    w.Add(p + ".mlp.experts.down_proj_bias", {kE, kD}, down_bias);
    return w;
  };
  const CheckpointWriter hf = make_hf(d_scales);
  const json config = {{"model_type", "gpt_oss"}, {"hidden_size", kD},
                       {"intermediate_size", kFf}, {"num_hidden_layers", 1},
                       {"num_local_experts", kE}, {"num_experts_per_tok", kK},
                       {"swiglu_limit", 7.0}, {"rms_norm_eps", 1e-5f}};
  auto model = Convert(hf, config, {}, 1, "hf.fflite");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->layers()[0].moe.experts[0].activation, Activation::SWIGLU_OAI);
  // Every scale fits f16 (e8m0 120-127): the experts keep their MXFP4 codes (dtype mxfp4).
  for (const FfnView& e : model->layers()[0].moe.experts) {
    EXPECT_EQ(e.gate.dtype, DType::MXFP4);
    EXPECT_EQ(e.up.dtype, DType::MXFP4);
    EXPECT_EQ(e.down.dtype, DType::MXFP4);
  }

  // By hand: top-k of the biased logits, softmax among them, each expert
  // down·((clamp(up·h + b_u, ±7) + 1) · c·σ(1.702·c)) + b_d with c = min(gate·h + b_g, 7).
  ExpectLayer(*model, 0, [&](const Vec& x) {
    const Vec h = HfRmsNorm(x, norm, 1e-5f);
    Vec logits = HfLinear(router, &router_bias, h);
    std::vector<size_t> order(kE);
    for (size_t e = 0; e < kE; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return logits[a] > logits[b]; });
    double z = 0.0;
    for (size_t r = 0; r < kK; ++r) z += std::exp(logits[order[r]] - logits[order[0]]);
    Vec y = x;
    for (size_t r = 0; r < kK; ++r) {
      const size_t e = order[r];
      const double w = std::exp(logits[e] - logits[order[0]]) / z;
      Vec a(kFf);
      for (uint64_t i = 0; i < kFf; ++i) {
        double g = gu_bias[e * 2 * kFf + 2 * i], u = gu_bias[e * 2 * kFf + 2 * i + 1];
        for (uint64_t j = 0; j < kD; ++j) {
          g += gate[e].At(i, j) * h[j];
          u += up[e].At(i, j) * h[j];
        }
        const double c = std::min(g, 7.0);
        a[i] = c / (1.0 + std::exp(-1.702 * c)) * (std::min(std::max(u, -7.0), 7.0) + 1.0);
      }
      for (uint64_t o = 0; o < kD; ++o) {
        double v = down_bias[e * kD + o];
        for (uint64_t i = 0; i < kFf; ++i) v += down[e].At(o, i) * a[i];
        y[o] += w * v;
      }
    }
    return y;
  });

  // The same weights saved dequantised (bf16 holds every MXFP4 value exactly), and as llama.cpp
  // writes gpt-oss to GGUF (gate and up apart, MXFP4 blocks in ggml's order): the same bits out.
  CheckpointWriter plain;
  plain.Add(p + ".post_attention_layernorm.weight", {kD}, norm);
  plain.Add(p + ".mlp.router.weight", {kE, kD}, router);
  plain.Add(p + ".mlp.router.bias", {kE}, router_bias);
  std::vector<float> gu_plain, down_plain;  // [E, d, 2ff] and [E, ff, d]: x @ W
  for (uint64_t e = 0; e < kE; ++e) {
    for (uint64_t j = 0; j < kD; ++j) {
      for (uint64_t i = 0; i < kFf; ++i) {
        gu_plain.push_back(static_cast<float>(gate[e].At(i, j)));
        gu_plain.push_back(static_cast<float>(up[e].At(i, j)));
      }
    }
    for (uint64_t i = 0; i < kFf; ++i) {
      for (uint64_t o = 0; o < kD; ++o) down_plain.push_back(static_cast<float>(down[e].At(o, i)));
    }
  }
  plain.Add(p + ".mlp.experts.gate_up_proj", {kE, kD, 2 * kFf}, gu_plain, "BF16");
  plain.Add(p + ".mlp.experts.gate_up_proj_bias", {kE, 2 * kFf}, gu_bias);
  plain.Add(p + ".mlp.experts.down_proj", {kE, kFf, kD}, down_plain, "BF16");
  plain.Add(p + ".mlp.experts.down_proj_bias", {kE, kD}, down_bias);
  std::filesystem::remove_all(ckpt_);
  std::filesystem::create_directories(ckpt_);
  auto from_plain = Convert(plain, config, {}, 1, "plain.fflite");
  ASSERT_NE(from_plain, nullptr);

  GgufWriter g;
  g.Str("general.architecture", "gpt-oss");
  g.U32("gpt-oss.embedding_length", kD);
  g.U32("gpt-oss.block_count", 1);
  g.U32("gpt-oss.expert_count", kE);
  g.U32("gpt-oss.expert_used_count", kK);
  g.U32("gpt-oss.expert_feed_forward_length", kFf);
  g.F32("gpt-oss.attention.layer_norm_rms_epsilon", 1e-5f);
  g.Matrix("blk.0.post_attention_norm.weight", {kD}, kGgmlF32, norm);
  g.Matrix("blk.0.ffn_gate_inp.weight", {kD, kE}, kGgmlF32, router);
  g.Matrix("blk.0.ffn_gate_inp.bias", {kE}, kGgmlF32, router_bias);
  std::vector<uint8_t> gb, ub, db;
  std::vector<float> gbias, ubias;
  for (uint64_t e = 0; e < kE; ++e) {
    PackGgml(gate[e], &gb);
    PackGgml(up[e], &ub);
    PackGgml(down[e], &db);
    for (uint64_t i = 0; i < kFf; ++i) {
      gbias.push_back(gu_bias[e * 2 * kFf + 2 * i]);
      ubias.push_back(gu_bias[e * 2 * kFf + 2 * i + 1]);
    }
  }
  constexpr uint32_t kMxfp4 = 39;
  g.Tensor("blk.0.ffn_gate_exps.weight", {kD, kFf, kE}, kMxfp4, gb);
  g.Tensor("blk.0.ffn_up_exps.weight", {kD, kFf, kE}, kMxfp4, ub);
  g.Tensor("blk.0.ffn_down_exps.weight", {kFf, kD, kE}, kMxfp4, db);
  g.Matrix("blk.0.ffn_gate_exps.bias", {kFf, kE}, kGgmlF32, gbias);
  g.Matrix("blk.0.ffn_up_exps.bias", {kFf, kE}, kGgmlF32, ubias);
  g.Matrix("blk.0.ffn_down_exps.bias", {kD, kE}, kGgmlF32, down_bias);
  ASSERT_OK_AND_ASSIGN(auto from_gguf, ConvertGguf(WriteGguf(g)));
  const std::vector<float> x = rng.Vec(3 * kD, 1.0f);
  ASSERT_OK_AND_ASSIGN(auto want, RunLayer(*model, "reference", 0, x, 3));
  ASSERT_OK_AND_ASSIGN(auto got_plain, RunLayer(*from_plain, "reference", 0, x, 3));
  ASSERT_OK_AND_ASSIGN(auto got_gguf, RunLayer(*from_gguf, "reference", 0, x, 3));
  EXPECT_EQ(got_plain, want);
  EXPECT_EQ(got_gguf, want);
  EXPECT_EQ(from_gguf->layers()[0].moe.experts[1].up.dtype, DType::MXFP4);
  // One down scale mxfp4 does not hold (E8M0's NaN, 255): down as f32 (the specification's
  // values), gate and up still mxfp4; with --dtype every expert matrix is read as its exact
  // values.
  {
    std::vector<uint8_t> scales = d_scales;
    scales[5] = 255;
    const CheckpointWriter odd = make_hf(scales);
    std::filesystem::remove_all(ckpt_);
    std::filesystem::create_directories(ckpt_);
    auto m = Convert(odd, config, {}, 1, "odd.fflite");
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->layers()[0].moe.experts[2].gate.dtype, DType::MXFP4);
    EXPECT_EQ(m->layers()[0].moe.experts[2].down.dtype, DType::F32);
    converter::ConvertOptions f32;
    f32.dtype = DType::F32;
    std::filesystem::remove_all(ckpt_);
    std::filesystem::create_directories(ckpt_);
    auto all = Convert(hf, config, f32, 1, "f32.fflite");
    ASSERT_NE(all, nullptr);
    EXPECT_EQ(all->layers()[0].moe.experts[0].up.dtype, DType::F32);
    ASSERT_OK_AND_ASSIGN(auto got_f32, RunLayer(*all, "reference", 0, x, 3));
    EXPECT_EQ(got_f32, want);
  }
  // A swiglu_limit fflite's activation does not have is refused by name.
  json other = config;
  other["swiglu_limit"] = 10.0;
  std::filesystem::remove_all(ckpt_);
  std::filesystem::create_directories(ckpt_);
  ASSERT_OK(hf.Write(ckpt_, other.dump()));
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out_dir_ + "/x.fflite", {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("swiglu_limit")));
}

// ---- types ----

// Q8_0 and Q4_0 become I8 and I4: every value and scale as the file holds them (the
// specification's x = q·d), padding zero; the layer matches the hand reference on those values.
TEST_F(GgufTest, Q8AndQ4KeptAsStored) {
  GgufWriter g;
  constexpr uint32_t kFf = 96, kE = 3;  // d_ff padded to 128: whole blocks of zeros in down
  LlamaKeys(g, "qwen3moe", 1, kFf);
  g.U32("qwen3moe.expert_count", kE);
  g.U32("qwen3moe.expert_used_count", 2);
  g.U32("qwen3moe.expert_feed_forward_length", kFf);
  Rng rng(3);
  const std::vector<float> norm = g.Matrix("blk.0.ffn_norm.weight", {kD}, kGgmlF32,
                                           rng.Vec(kD, 0.5f));
  const std::vector<float> router = g.Matrix("blk.0.ffn_gate_inp.weight", {kD, kE}, kGgmlF16,
                                             rng.Vec(kE * kD, 0.5f));
  const std::vector<float> gate = g.Matrix("blk.0.ffn_gate_exps.weight", {kD, kFf, kE}, kGgmlQ4_0,
                                           rng.Vec(kE * kFf * kD, 0.5f));
  const std::vector<float> up = g.Matrix("blk.0.ffn_up_exps.weight", {kD, kFf, kE}, kGgmlQ4_0,
                                         rng.Vec(kE * kFf * kD, 0.5f));
  const std::vector<float> down = g.Matrix("blk.0.ffn_down_exps.weight", {kFf, kD, kE}, kGgmlQ8_0,
                                           rng.Vec(kE * kD * kFf, 0.5f));
  ASSERT_OK_AND_ASSIGN(auto model, ConvertGguf(WriteGguf(g)));
  const MoeView& moe = model->layers()[0].moe;
  ASSERT_EQ(moe.experts.size(), kE);
  auto expect_values = [](const TensorView& t, DType dtype, const std::vector<float>& held,
                          uint64_t first, uint64_t rows, uint64_t k) {
    ASSERT_EQ(t.dtype, dtype);
    ASSERT_EQ(t.layout, Layout::PANEL16_K4);
    const QuantGeometry geo = QuantMatrixGeometry(dtype, t.shape[0], t.shape[1]);
    for (uint64_t r = 0; r < t.shape[0]; ++r) {
      for (uint64_t j = 0; j < t.shape[1]; ++j) {
        const float v = static_cast<float>(QuantValueAt(dtype, geo, t.data, r, j)) *
                        QuantBlockScale(dtype, geo, t.data, r, j / 32);
        const float want = r < rows && j < k ? held[(first + r) * k + j] : 0.0f;
        ASSERT_EQ(FloatBits(v), FloatBits(want)) << "row " << r << " col " << j;
        if (r >= rows || j >= k) {
          ASSERT_EQ(QuantValueAt(dtype, geo, t.data, r, j), 0);
        }
      }
    }
  };
  for (uint32_t e = 0; e < kE; ++e) {
    SCOPED_TRACE(e);
    expect_values(moe.experts[e].gate, DType::I4, gate, uint64_t{e} * kFf, kFf, kD);
    expect_values(moe.experts[e].up, DType::I4, up, uint64_t{e} * kFf, kFf, kD);
    expect_values(moe.experts[e].down, DType::I8, down, uint64_t{e} * kD, kD, kFf);
  }
  ASSERT_EQ(moe.router.dtype, DType::F16);
  const std::string described = converter::DescribeGguf(*GgufFile::Open(root_ + "/model.gguf"));
  EXPECT_THAT(described, HasSubstr("architecture qwen3moe: 1 FFN sublayers"));
  EXPECT_THAT(described, HasSubstr("-> i4, bits kept"));
  EXPECT_THAT(described, HasSubstr("-> i8, bits kept"));
  bool types_noted = false;
  for (const auto& [k, v] : model->metadata()) {
    if (k == "source.gguf_ffn_types") types_noted = v == "Q4_0: 2, Q8_0: 1";
  }
  EXPECT_TRUE(types_noted);
  // The layer on the same values, computed by hand: softmax top-2, renormalised (qwen3moe).
  ExpectLayer(*model, 0, [&](const Vec& x) {
    const Vec h = HfRmsNorm(x, norm, 1e-5f);
    const Vec logits = HfLinear(router, nullptr, h);
    std::vector<size_t> order = {0, 1, 2};
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return logits[a] > logits[b];
    });
    const double m = logits[order[0]];
    const double p0 = 1.0, p1 = std::exp(logits[order[1]] - m), s = p0 + p1;
    Vec y = x;
    for (size_t rank = 0; rank < 2; ++rank) {
      const size_t e = order[rank];
      auto slice = [&](const std::vector<float>& all, uint64_t rows, uint64_t k) {
        return std::vector<float>(all.begin() + static_cast<long>(e * rows * k),
                                  all.begin() + static_cast<long>((e + 1) * rows * k));
      };
      Vec gv = HfLinear(slice(gate, kFf, kD), nullptr, h);
      const Vec uv = HfLinear(slice(up, kFf, kD), nullptr, h);
      for (size_t i = 0; i < kFf; ++i) gv[i] = HfAct("silu", gv[i]) * uv[i];
      y = Add(y, HfLinear(slice(down, kD, kFf), nullptr, gv), (rank == 0 ? p0 : p1) / s);
    }
    return y;
  });
}

// Q5_0, IQ4_NL and MXFP4 are an integer times a scale per 32 too: Q5_0 stored as I8, IQ4_NL
// as iq4_nl (its level indices) and MXFP4 as mxfp4 (its E2M1 codes and E8M0 bytes), each value
// exactly the specification's (DequantizeGguf, checked against the specification in
// gguf_types_test); an MXFP4 tensor with a scale byte mxfp4 does not hold (0, 1: scales whose half
// is below f32's normal range; 255: E8M0's NaN) is stored as f32 instead.
TEST_F(GgufTest, Q5_0AsI8Iq4nlAsIq4nlMxfp4AsMxfp4) {
  constexpr uint32_t kFf = 96;
  Rng rng(8);
  // MXFP4: each block's byte in [mxfp4_exp, mxfp4_exp + 7], and the middle block's `odd` (if not
  // -1).
  auto blocks = [&](uint32_t type, uint64_t rows, uint64_t cols, int mxfp4_exp, int odd) {
    const size_t bb = type == 39 ? 17 : (type == 6 ? 22 : 18);
    std::vector<uint8_t> b(rows * cols / 32 * bb);
    for (uint8_t& v : b) v = static_cast<uint8_t>(rng.Uniform(0.0f, 255.99f));
    for (size_t i = 0; i < b.size(); i += bb) {
      if (type == 39) {
        b[i] = static_cast<uint8_t>(mxfp4_exp + static_cast<int>(rng.Uniform(0.0f, 7.99f)));
        if (odd >= 0 && i / bb == b.size() / bb / 2) b[i] = static_cast<uint8_t>(odd);
      } else {
        const uint16_t h = F32ToF16(rng.Uniform(-0.1f, 0.1f));
        std::memcpy(&b[i], &h, 2);
      }
    }
    return b;
  };
  for (const auto& [type, exp, odd, stored] :
       {std::tuple<uint32_t, int, int, DType>{6, 0, -1, DType::I8}, {20, 0, -1, DType::IQ4_NL},
        {39, 120, -1, DType::MXFP4}, {39, 100, -1, DType::MXFP4} /* 2^-28: below f16 */,
        {39, 137, -1, DType::MXFP4} /* up to 2^16: above f16 */,
        {39, 2, -1, DType::MXFP4} /* down to 2^-126, f32's least normal power of 2 */,
        {39, 247, 254, DType::MXFP4} /* up to 2^126 (its largest values overflow in f32, in the
                                        specification's dequantisation and fflite's alike) */,
        {39, 120, 255, DType::F32} /* E8M0's NaN */, {39, 120, 1, DType::F32},
        {39, 120, 0, DType::F32} /* 2^-128: below f32's normal range */}) {
    SCOPED_TRACE(absl::StrCat(type, " ", exp, " ", odd));
    GgufWriter g;
    LlamaKeys(g, "llama", 1, kFf);
    g.Matrix("blk.0.ffn_norm.weight", {kD}, kGgmlF32, rng.Vec(kD, 1.0f));
    const auto gate = blocks(type, kFf, kD, exp, odd), up = blocks(type, kFf, kD, exp, odd);
    const auto down = blocks(type, kD, kFf, exp, odd);
    g.Tensor("blk.0.ffn_gate.weight", {kD, kFf}, type, gate);
    g.Tensor("blk.0.ffn_up.weight", {kD, kFf}, type, up);
    g.Tensor("blk.0.ffn_down.weight", {kFf, kD}, type, down);
    ASSERT_OK_AND_ASSIGN(auto model, ConvertGguf(WriteGguf(g)));
    const FfnView& f = model->layers()[0].ffn;
    const std::pair<const TensorView*, const std::vector<uint8_t>*> cases[] = {
        {&f.gate, &gate}, {&f.up, &up}, {&f.down, &down}};
    for (const auto& [t, src] : cases) {
      ASSERT_EQ(t->dtype, stored);
      const uint64_t rows = t == &f.down ? kD : kFf, k = t == &f.down ? kFf : kD;
      std::vector<float> want(rows * k);
      ASSERT_OK(converter::DequantizeGguf(static_cast<converter::GgmlType>(type), src->data(),
                                          want.size(), want.data()));
      if (stored == DType::F32) {  // rows padded to the stored d_ff
        for (uint64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(std::memcmp(t->data + r * t->shape[1] * 4, &want[r * k], k * 4), 0) << r;
        }
        continue;
      }
      const QuantGeometry geo = QuantMatrixGeometry(stored, t->shape[0], t->shape[1]);
      for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t j = 0; j < k; ++j) {
          const float v = static_cast<float>(QuantValueAt(stored, geo, t->data, r, j)) *
                          QuantBlockScale(stored, geo, t->data, r, j / 32);
          ASSERT_EQ(FloatBits(v), FloatBits(want[r * k + j])) << "row " << r << " col " << j;
        }
      }
    }
  }
}

// A 3-D MXFP4 tensor is stored in one dtype for all its experts (mxfp4): one expert's scale byte
// mxfp4 does not hold (0) makes every expert of that tensor f32 (a layer's experts share their
// dtypes).
TEST_F(GgufTest, Mxfp4ExpertsShareOneDtype) {
  GgufWriter g;
  LlamaKeys(g, "qwen3moe", 1, 32);
  g.U32("qwen3moe.expert_count", 2);
  g.U32("qwen3moe.expert_used_count", 1);
  g.U32("qwen3moe.expert_feed_forward_length", 32);
  Rng rng(12);
  g.Matrix("blk.0.ffn_norm.weight", {kD}, kGgmlF32, rng.Vec(kD, 1.0f));
  g.Matrix("blk.0.ffn_gate_inp.weight", {kD, 2}, kGgmlF32, rng.Vec(2 * kD, 1.0f));
  auto mx = [&](uint64_t n, bool small_in_second) {
    std::vector<uint8_t> b(n / 32 * 17);
    for (size_t i = 0; i < b.size(); ++i) {
      b[i] = static_cast<uint8_t>(rng.Uniform(0.0f, 255.99f));
      if (i % 17 == 0) b[i] = small_in_second && i >= b.size() / 2 ? 0 : 124;
    }
    return b;
  };
  g.Tensor("blk.0.ffn_gate_exps.weight", {kD, 32, 2}, 39, mx(2 * 32 * kD, true));
  g.Tensor("blk.0.ffn_up_exps.weight", {kD, 32, 2}, 39, mx(2 * 32 * kD, false));
  g.Tensor("blk.0.ffn_down_exps.weight", {32, kD, 2}, 39, mx(2 * 32 * kD, false));
  ASSERT_OK_AND_ASSIGN(auto model, ConvertGguf(WriteGguf(g)));
  for (const FfnView& e : model->layers()[0].moe.experts) {
    EXPECT_EQ(e.gate.dtype, DType::F32);
    EXPECT_EQ(e.up.dtype, DType::MXFP4);
    EXPECT_EQ(e.down.dtype, DType::MXFP4);
  }
}

// Q4_K, Q5_K and Q6_K are kept as q4_k, q5_k and q6_k, their bits re-laid: each value fflite
// dequantises (DequantizeRows, what the reference backend multiplies) is the specification's
// (DequantizeGguf,
// itself checked against the specification in gguf_types_test) bit for bit; Q3_K, IQ4_XS and Q2_K
// (in further files) likewise as q3_k, iq4_xs and q2_k, and fflite-inspect's summary says so.
TEST_F(GgufTest, KQuantsKeptOrDequantisedExactly) {
  GgufWriter g;
  constexpr uint32_t kFf = 256;  // a k-quant block is 256 values of a row
  constexpr uint32_t kQ5K = 13;  // d, dmin, scales[12], qh[32], qs[128]
  LlamaKeys(g, "llama", 1, kFf);
  g.U32("llama.embedding_length", 256);  // replaced below: keys are unique
  GgufWriter g2;
  g2.Str("general.architecture", "llama");
  g2.U32("llama.embedding_length", 256);
  g2.U32("llama.block_count", 1);
  g2.U32("llama.feed_forward_length", kFf);
  Rng rng(5);
  auto random_blocks = [&](uint32_t type, uint64_t rows, uint64_t cols) {
    const size_t block = type == kGgmlQ4_K ? 144 : type == kQ5K ? 176 : 210;
    std::vector<uint8_t> b(rows * cols / 256 * block);
    for (uint8_t& v : b) v = static_cast<uint8_t>(rng.Uniform(0.0f, 255.99f));
    for (size_t i = 0; i < b.size(); i += block) {  // finite f16 scales: d (and dmin) in [-1, 1]
      for (size_t at : type != kGgmlQ6_K ? std::vector<size_t>{0, 2} : std::vector<size_t>{208}) {
        const uint16_t h = F32ToF16(rng.Uniform(-1.0f, 1.0f));
        std::memcpy(&b[i + at], &h, 2);
      }
    }
    return b;
  };
  const auto gate = random_blocks(kGgmlQ4_K, kFf, 256);
  const auto up = random_blocks(kQ5K, kFf, 256);
  const auto down = random_blocks(kGgmlQ6_K, 256, kFf);
  g2.Matrix("blk.0.ffn_norm.weight", {256}, kGgmlF32, rng.Vec(256, 1.0f));
  g2.Tensor("blk.0.ffn_gate.weight", {256, kFf}, kGgmlQ4_K, gate);
  g2.Tensor("blk.0.ffn_up.weight", {256, kFf}, kQ5K, up);
  g2.Tensor("blk.0.ffn_down.weight", {kFf, 256}, kGgmlQ6_K, down);
  ASSERT_OK_AND_ASSIGN(auto model, ConvertGguf(WriteGguf(g2)));
  const FfnView& f = model->layers()[0].ffn;
  const std::pair<const TensorView*, std::pair<converter::GgmlType, const std::vector<uint8_t>*>>
      cases[] = {{&f.gate, {converter::GgmlType::Q4_K, &gate}},
                 {&f.up, {converter::GgmlType::Q5_K, &up}},
                 {&f.down, {converter::GgmlType::Q6_K, &down}}};
  for (const auto& [t, src] : cases) {
    std::vector<float> want(t->numel());
    ASSERT_OK(converter::DequantizeGguf(src.first, src.second->data(), want.size(), want.data()));
    // At GGUF's sizes (the packed forms).
    ASSERT_EQ(t->dtype, src.first == converter::GgmlType::Q4_K   ? DType::Q4_K
                        : src.first == converter::GgmlType::Q5_K ? DType::Q5_K_PACKED
                                                                 : DType::Q6_K_PACKED);
    std::vector<float> got(t->numel());
    DequantizeRows(t->dtype, t->layout, t->shape[0], t->shape[1], t->data, 0, t->shape[0],
                   got.data());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << DTypeName(t->dtype);
  }
  // Q3_K, IQ4_XS and Q2_K: kept in q6_k's scales (Q3_K's values in 3-bit planes, q3_k; IQ4_XS's
  // as their level indices, iq4_xs; Q2_K's in 2-bit planes with their mins, q2_k), each value the
  // specification's; the CPU backend's kernels on them against the reference.
  struct Q6Like {
    uint32_t type;
    converter::GgmlType ggml;
    size_t block;
    std::vector<size_t> d_at;  // the f16 scales
    DType dtype;
    const char* summary;
  };
  const Q6Like q6like[] = {
      {11, converter::GgmlType::Q3_K, 110, {108}, DType::Q3_K_PACKED, "-> q3_k, bits kept"},
      {23, converter::GgmlType::IQ4_XS, 136, {0}, DType::IQ4_XS, "-> iq4_xs, bits kept"},
      {10, converter::GgmlType::Q2_K, 84, {80, 82}, DType::Q2_K_PACKED, "-> q2_k, bits kept"}};
  for (const Q6Like& c : q6like) {
    SCOPED_TRACE(c.type);
    GgufWriter g3;
    g3.Str("general.architecture", "llama");
    g3.U32("llama.embedding_length", 256);
    g3.U32("llama.block_count", 1);
    g3.U32("llama.feed_forward_length", kFf);
    std::vector<uint8_t> q3[3];
    for (auto& b : q3) {
      b.resize(kFf * 256 / 256 * c.block);
      for (uint8_t& v : b) v = static_cast<uint8_t>(rng.Uniform(0.0f, 255.99f));
      for (size_t i = 0; i < b.size(); i += c.block) {
        for (size_t at : c.d_at) {
          const uint16_t h = F32ToF16(rng.Uniform(-1.0f, 1.0f) / 64);
          std::memcpy(&b[i + at], &h, 2);
        }
      }
    }
    g3.Matrix("blk.0.ffn_norm.weight", {256}, kGgmlF32, rng.Vec(256, 1.0f));
    g3.Tensor("blk.0.ffn_gate.weight", {256, kFf}, c.type, q3[0]);
    g3.Tensor("blk.0.ffn_up.weight", {256, kFf}, c.type, q3[1]);
    g3.Tensor("blk.0.ffn_down.weight", {kFf, 256}, c.type, q3[2]);
    const std::string name = "q6like" + std::to_string(c.type);
    const std::string gguf_path = WriteGguf(g3, name + ".gguf");
    ASSERT_OK_AND_ASSIGN(auto m3, ConvertGguf(gguf_path, {}, name + ".fflite"));
    EXPECT_THAT(converter::DescribeGguf(*GgufFile::Open(gguf_path)), HasSubstr(c.summary));
    const FfnView& f3 = m3->layers()[0].ffn;
    const TensorView* ts[3] = {&f3.gate, &f3.up, &f3.down};
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(ts[i]->dtype, c.dtype);
      std::vector<float> want(ts[i]->numel());
      ASSERT_OK(converter::DequantizeGguf(c.ggml, q3[i].data(), want.size(), want.data()));
      std::vector<float> got(ts[i]->numel());
      DequantizeRows(ts[i]->dtype, ts[i]->layout, ts[i]->shape[0], ts[i]->shape[1], ts[i]->data,
                     0, ts[i]->shape[0], got.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << i;
    }
    // One token with float activations (asked for: the f32 tolerance) and 9 with the default
    // (int8 activations where the CPU's kernels take them: quantised per block of 32, ~1% of each
    // product; NMSE bound 1e-3).
    Rng xr(8);
    for (size_t tokens : {size_t{1}, size_t{9}}) {
      const std::vector<float> x = xr.Vec(256 * tokens, 1.0f);
      ASSERT_OK_AND_ASSIGN(std::vector<float> want, RunLayer(*m3, "reference", 0, x, tokens));
      ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                           RunLayer(*m3, "xnnpack", 0, x, tokens, 1, 0, tokens == 1));
      double err = 0, ss = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        err += (got[i] - want[i]) * (got[i] - want[i]);
        ss += static_cast<double>(want[i]) * want[i];
      }
      EXPECT_LT(err / ss, 1e-3) << tokens << " tokens";
      const double rms = std::sqrt(ss / static_cast<double>(want.size()));
      for (size_t i = 0; tokens == 1 && i < want.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], testing::kF32RelTol * (std::fabs(want[i]) + rms)) << i;
      }
    }
  }
  // The layer on the CPU backend against the reference on the same file (q4_k, q5_k and q6_k
  // matrices mixed; float activations asked for, one token: the f32 tolerance).
  {
    Rng xr(6);
    const std::vector<float> x = xr.Vec(256, 1.0f);
    ASSERT_OK_AND_ASSIGN(std::vector<float> want, RunLayer(*model, "reference", 0, x, 1));
    ASSERT_OK_AND_ASSIGN(std::vector<float> got, RunLayer(*model, "xnnpack", 0, x, 1, 1, 0, true));
    double ss = 0;
    for (float v : want) ss += static_cast<double>(v) * v;
    const double rms = std::sqrt(ss / 256);
    for (size_t i = 0; i < 256; ++i) {
      EXPECT_NEAR(got[i], want[i], testing::kF32RelTol * (std::fabs(want[i]) + rms)) << i;
    }
  }
  // With --dtype f16 the same values are rounded once, as a checkpoint's would be.
  converter::ConvertOptions f16;
  f16.dtype = DType::F16;
  ASSERT_OK_AND_ASSIGN(auto half, ConvertGguf(WriteGguf(g2), f16, "f16.fflite"));
  EXPECT_EQ(half->layers()[0].ffn.up.dtype, DType::F16);
  // A file that also has the first file's duplicate key is refused by name.
  EXPECT_THAT(ConvertGguf(WriteGguf(g, "dup.gguf")).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("llama.embedding_length")));
}

// ---- errors a user meets ----

GgufWriter SmallLlama(uint32_t q_type = kGgmlF32) {
  GgufWriter g;
  LlamaKeys(g, "llama", 1, 32);
  Rng rng(1);
  g.Matrix("blk.0.ffn_norm.weight", {kD}, kGgmlF32, rng.Vec(kD, 1.0f));
  g.Matrix("blk.0.ffn_gate.weight", {kD, 32}, q_type, rng.Vec(32 * kD, 1.0f));
  g.Matrix("blk.0.ffn_up.weight", {kD, 32}, q_type, rng.Vec(32 * kD, 1.0f));
  g.Matrix("blk.0.ffn_down.weight", {32, kD}, q_type, rng.Vec(32 * kD, 1.0f));
  return g;
}

// fflite's own k-quant quantiser writes GGUF's blocks: the specification's dequantisation of
// them (gguf_types, checked against hand-made blocks above) equals, bit for bit, what the
// stored matrix QuantizeMatrix packs from them dequantises to.
TEST(GgufOwnQuantiser, BlocksDequantiseBySpecificationToTheStoredMatrix) {
  const uint64_t rows = 5, k = 512;
  Rng rng(77);
  const std::vector<float> w = rng.Vec(rows * k, 0.3f);
  struct Case {
    DType dtype;
    converter::GgmlType type;
    uint64_t block_bytes;
    void (*row)(const float*, const float*, uint64_t, uint8_t*);
  };
  using converter::GgmlType;
  for (const Case& c : {Case{DType::Q4_K, GgmlType::Q4_K, kQ4KBlockBytes, &QuantizeQ4KRow},
                        Case{DType::Q5_K_PACKED, GgmlType::Q5_K, kQ5KBlockBytes, &QuantizeQ5KRow},
                        Case{DType::Q6_K_PACKED, GgmlType::Q6_K, kQ6KBlockBytes, &QuantizeQ6KRow},
                        Case{DType::Q5_K, GgmlType::Q5_K, kQ5KBlockBytes, &QuantizeQ5KRow},
                        Case{DType::Q6_K, GgmlType::Q6_K, kQ6KBlockBytes, &QuantizeQ6KRow}}) {
    SCOPED_TRACE(DTypeName(c.dtype));
    std::vector<uint8_t> blocks(rows * k / 256 * c.block_bytes);
    for (uint64_t r = 0; r < rows; ++r) {
      c.row(&w[r * k], nullptr, k, blocks.data() + r * k / 256 * c.block_bytes);
    }
    std::vector<float> spec(rows * k);
    ASSERT_OK(DequantizeGguf(c.type, blocks.data(), rows * k, spec.data()));
    std::vector<uint8_t> stored(TensorBytes(c.dtype, {rows, k}, Layout::PANEL16_K4));
    ASSERT_OK(QuantizeMatrix(c.dtype, rows, k, w.data(), QuantizeOptions{true, false}, "w",
                             stored.data(), nullptr));
    std::vector<float> back(rows * k);
    DequantizeRows(c.dtype, Layout::PANEL16_K4, rows, k, stored.data(), 0, rows, back.data());
    for (uint64_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], spec[i]) << i;
  }
}

TEST_F(GgufTest, MappingErrorsNameTheProblem) {
  {
    GgufWriter g;
    LlamaKeys(g, "mamba", 1, 32);
    EXPECT_THAT(ConvertGguf(WriteGguf(g)).status(),
                StatusIs(absl::StatusCode::kUnimplemented,
                         AllOf(HasSubstr("\"mamba\""), HasSubstr("qwen3moe"))));
  }
  {
    GgufWriter g;
    LlamaKeys(g, "llama", 1, 32);
    EXPECT_THAT(ConvertGguf(WriteGguf(g)).status(),
                StatusIs(absl::StatusCode::kNotFound, HasSubstr("blk.0.ffn_gate.weight")));
  }
  {
    GgufWriter g;
    LlamaKeys(g, "llama", 1, 48);  // the tensors say 32
    Rng rng(1);
    g.Matrix("blk.0.ffn_gate.weight", {kD, 32}, kGgmlF32, rng.Vec(32 * kD, 1.0f));
    EXPECT_THAT(ConvertGguf(WriteGguf(g)).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("blk.0.ffn_gate.weight"), HasSubstr("[64, 32]"),
                               HasSubstr("llama.feed_forward_length"))));
  }
  {
    GgufWriter g;
    g.Str("general.architecture", "llama");
    g.U32("llama.block_count", 1);
    EXPECT_THAT(ConvertGguf(WriteGguf(g)).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("llama.embedding_length")));
  }
  {
    GgufWriter g;
    LlamaKeys(g, "llama", 1, 32);
    g.Tensor("blk.0.ffn_gate.weight", {kD, 32}, 9 /* Q8_1 */, std::vector<uint8_t>(36 * 64));
    EXPECT_THAT(ConvertGguf(WriteGguf(g)).status(),
                StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("type Q8_1")));
  }
  // Q8_0's -128 and a scale that is not finite: refused by tensor, row and block, no output.
  for (const int bad : {0, 1}) {
    GgufWriter g = SmallLlama();
    std::vector<uint8_t> blocks;
    Rng rng(2);
    const std::vector<float> v = rng.Vec(32 * kD, 1.0f);
    for (size_t i = 0; i < v.size(); i += 32) {
      const auto b = GgufWriter::QuantizeQ8_0(&v[i]);
      blocks.insert(blocks.end(), b.begin(), b.end());
    }
    // Two blocks per row: block 1 is row 0's second, block 3 row 1's second.
    if (bad == 0) blocks[34 * 1 + 2 + 7] = 0x80;  // q = -128
    if (bad == 1) {
      blocks[34 * 3] = 0;
      blocks[34 * 3 + 1] = 0x7c;  // d = +inf
    }
    GgufWriter q;
    LlamaKeys(q, "llama", 1, 32);
    q.Matrix("blk.0.ffn_norm.weight", {kD}, kGgmlF32, rng.Vec(kD, 1.0f));
    q.Tensor("blk.0.ffn_gate.weight", {kD, 32}, kGgmlQ8_0, blocks);
    q.Matrix("blk.0.ffn_up.weight", {kD, 32}, kGgmlQ8_0, rng.Vec(32 * kD, 1.0f));
    q.Matrix("blk.0.ffn_down.weight", {32, kD}, kGgmlQ8_0, rng.Vec(32 * kD, 1.0f));
    const std::string out = out_dir_ + "/bad.fflite";
    EXPECT_THAT(converter::ConvertCheckpoint(WriteGguf(q), out, {}).status(),
                StatusIs(bad == 0 ? absl::StatusCode::kUnimplemented
                                  : absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("blk.0.ffn_gate.weight"),
                               HasSubstr(bad == 0 ? "row 0, block 1" : "row 1, block 1"))));
    EXPECT_FALSE(std::filesystem::exists(out));
    // Read as values (--dtype f32) the same files convert: -128·d is a value like any other.
    if (bad == 0) {
      converter::ConvertOptions f32;
      f32.dtype = DType::F32;
      EXPECT_OK(converter::ConvertCheckpoint(WriteGguf(q), out_dir_ + "/f32.fflite", f32).status());
    }
  }
}

// ---- the reader on malformed files ----

absl::Status Open(const std::vector<uint8_t>& b) {
  return GgufFile::FromBuffer(b.data(), b.size(), "t.gguf").status();
}

TEST(GgufReader, ReadsWhatTheWriterWrote) {
  GgufWriter g = SmallLlama(kGgmlQ4_0);
  g.U32Array("llama.some_array", {1, 2, 3});
  g.Bool("llama.flag", true);
  const std::vector<uint8_t> b = g.Bytes();
  ASSERT_OK_AND_ASSIGN(auto f, GgufFile::FromBuffer(b.data(), b.size(), "t.gguf"));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 4u);
  const converter::GgufTensor* t = f->Find("blk.0.ffn_down.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne, (std::vector<uint64_t>{32, kD}));
  EXPECT_EQ(t->Shape(), (std::vector<uint64_t>{kD, 32}));
  EXPECT_EQ(t->TypeName(), "Q4_0");
  EXPECT_EQ(t->bytes, kD * 18u);
  EXPECT_EQ(t->offset % 32, 0u);
  EXPECT_EQ(f->metadata().json()["llama.some_array"], json({1, 2, 3}));
  EXPECT_EQ(f->metadata().json()["llama.flag"], json(true));
  EXPECT_EQ(f->metadata().json()["general.architecture"], json("llama"));
}

TEST(GgufReader, EveryTruncationIsAnError) {
  const std::vector<uint8_t> b = SmallLlama().Bytes();
  // Every prefix up to the end of the last tensor's data fails cleanly (ASan checks the reads).
  for (size_t n = 0; n < b.size(); n += (n < 2048 ? 1 : 61)) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + static_cast<long>(n));
    EXPECT_FALSE(Open(cut).ok()) << n;
  }
  EXPECT_OK(Open(b));
}

TEST(GgufReader, MalformedHeadersAreRefusedByName) {
  auto expect = [](const GgufWriter& g, absl::StatusCode code, const std::string& text) {
    EXPECT_THAT(Open(g.Bytes()), StatusIs(code, HasSubstr(text)));
  };
  {
    std::vector<uint8_t> b = SmallLlama().Bytes();
    b[0] = 'X';
    EXPECT_THAT(Open(b), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a GGUF file")));
  }
  GgufWriter g = SmallLlama();
  g.version = 1;
  expect(g, absl::StatusCode::kUnimplemented, "version 1");
  g.version = 0x03000000u;
  expect(g, absl::StatusCode::kUnimplemented, "big-endian");
  g.version = 7;
  expect(g, absl::StatusCode::kDataLoss, "version 7");
  g.version = 3;
  g.tensor_count = int64_t{1} << 40;
  expect(g, absl::StatusCode::kDataLoss, "tensor count");
  {
    GgufWriter h;
    h.U32("a", 1);
    h.kv_count = 1000;  // the padding's zeros read as key 1: an empty string
    expect(h, absl::StatusCode::kDataLoss, "key 1 is empty");
    h.alignment = 1;  // no padding: the file ends where key 1's length should be
    expect(h, absl::StatusCode::kDataLoss, "truncated");
  }
  {
    GgufWriter h;
    std::vector<uint8_t> v;
    GgufWriter::Put<uint64_t>(&v, uint64_t{1} << 62);  // a string length far past the end
    h.RawKv("general.name", kGgufString, v);
    expect(h, absl::StatusCode::kDataLoss, "general.name");
  }
  {
    GgufWriter h;
    std::vector<uint8_t> v;
    GgufWriter::Put<uint32_t>(&v, kGgufU32);
    GgufWriter::Put<uint64_t>(&v, uint64_t{1} << 40);  // an array count the file cannot hold
    h.RawKv("llama.arr", kGgufArray, v);
    expect(h, absl::StatusCode::kDataLoss, "does not fit");
  }
  {
    GgufWriter h;
    h.RawKv("x", 13, {});
    expect(h, absl::StatusCode::kDataLoss, "value type 13");
  }
  {
    GgufWriter h;
    h.RawKv("x", kGgufBool, {2});
    expect(h, absl::StatusCode::kDataLoss, "neither 0 nor 1");
  }
  {
    GgufWriter h;
    std::vector<uint8_t> v;
    for (int i = 0; i < 6; ++i) {  // arrays of arrays, deeper than the limit
      GgufWriter::Put<uint32_t>(&v, kGgufArray);
      GgufWriter::Put<uint64_t>(&v, 1);
    }
    GgufWriter::Put<uint32_t>(&v, kGgufU8);
    GgufWriter::Put<uint64_t>(&v, 0);
    h.RawKv("deep", kGgufArray, v);
    expect(h, absl::StatusCode::kDataLoss, "nested");
  }
  {
    GgufWriter h;
    h.U32("general.alignment", 48);
    expect(h, absl::StatusCode::kDataLoss, "general.alignment");
  }
  {
    GgufWriter h;
    h.U32("a", 1);
    h.U32("a", 2);
    expect(h, absl::StatusCode::kDataLoss, "appears twice");
  }
  {
    GgufWriter h;
    h.Tensor("t", {32, 2}, kGgmlF32, std::vector<uint8_t>(256));
    h.Tensor("t", {32, 2}, kGgmlF32, std::vector<uint8_t>(256));
    expect(h, absl::StatusCode::kDataLoss, "appears twice");
  }
  {
    GgufWriter h;
    h.Tensor("t", {}, kGgmlF32, {});
    expect(h, absl::StatusCode::kDataLoss, "0 dimensions");
  }
  {
    GgufWriter h;
    h.Tensor("t", {1, 1, 1, 1, 1}, kGgmlF32, std::vector<uint8_t>(4));
    expect(h, absl::StatusCode::kDataLoss, "5 dimensions");
  }
  {
    GgufWriter h;
    h.Tensor("t", {32, 0}, kGgmlF32, {});
    expect(h, absl::StatusCode::kDataLoss, "dimension 1 is 0");
  }
  {
    GgufWriter h;
    h.Tensor("t", {uint64_t{1} << 30, uint64_t{1} << 30}, kGgmlF32, {});
    expect(h, absl::StatusCode::kDataLoss, "2^50");
  }
  {
    GgufWriter h;
    h.Tensor("t", {48, 2}, kGgmlQ4_0, std::vector<uint8_t>(64));
    expect(h, absl::StatusCode::kDataLoss, "not a multiple of Q4_0's block of 32");
  }
  {
    GgufWriter h;
    h.Tensor("t", {32, 2}, kGgmlF32, std::vector<uint8_t>(256), 8);
    expect(h, absl::StatusCode::kDataLoss, "not a multiple of the alignment");
  }
  {
    GgufWriter h;
    h.Tensor("t", {32, 2}, kGgmlF32, std::vector<uint8_t>(64));  // 256 bytes declared
    expect(h, absl::StatusCode::kDataLoss, "runs past the end");
  }
  {
    GgufWriter h;
    h.Tensor("a", {32, 2}, kGgmlF32, std::vector<uint8_t>(256));
    h.Tensor("b", {32, 2}, kGgmlF32, std::vector<uint8_t>(256), 128);
    expect(h, absl::StatusCode::kDataLoss, "overlap");
  }
  {
    // An unknown type id is kept (a file may hold tensors fflite never reads) and refused by name
    // when a layer needs it.
    GgufWriter h;
    h.Tensor("t", {32, 2}, 77, {});
    const std::vector<uint8_t> b = h.Bytes();
    ASSERT_OK_AND_ASSIGN(auto f, GgufFile::FromBuffer(b.data(), b.size(), "t.gguf"));
    EXPECT_EQ(f->Find("t")->TypeName(), "ggml type 77");
  }
}

}  // namespace
}  // namespace testing
}  // namespace fflite
