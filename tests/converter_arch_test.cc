// Every supported architecture end to end: a tiny checkpoint in the architecture's exact HF
// naming and layout, converted, run through the reference backend, and compared with the FFN or
// MoE computed here from the HF-layout weights by plain loops (the model's own conventions).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "absl/strings/str_format.h"
#include "converter_test_util.h"
#include "testing/testers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace testing {
namespace {

using json = nlohmann::json;
using converter::ConvertOptions;

constexpr uint64_t kD = 10;   // d_model: odd sizes on purpose, padded to 64 by the converter
constexpr uint64_t kFf = 14;  // d_ff

// ---- llama, mistral, qwen2, qwen3: SwiGLU + post_attention_layernorm (RMS) + residual ----

class LlamaFamilyTest : public ConverterTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(LlamaFamilyTest, MatchesHfMlp) {
  Rng rng(1);
  CheckpointWriter w;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    w.AddRandom(p + ".input_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);  // ignored
    w.AddRandom(p + ".self_attn.q_proj.weight", {kD, kD}, rng, 0.5f);       // ignored
    w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
    AddGatedMlp(w, rng, p + ".mlp", kD, kFf);
  }
  w.AddRandom("model.embed_tokens.weight", {7, kD}, rng, 1.0f);
  const json config = {{"model_type", GetParam()}, {"hidden_size", kD},
                       {"intermediate_size", kFf}, {"num_hidden_layers", 2},
                       {"rms_norm_eps", 1e-5},     {"hidden_act", "silu"}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layers().size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    EXPECT_EQ(model->layers()[l].name, p + ".mlp");
    ExpectLayer(*model, l, [&](const Vec& x) {
      const Vec h = HfRmsNorm(x, w.Get(p + ".post_attention_layernorm.weight"), 1e-5);
      return Add(x, HfGatedMlp(w, p + ".mlp", "silu", h));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(All, LlamaFamilyTest,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3"));

TEST_F(ConverterTest, LlamaMlpBias) {
  Rng rng(2);
  CheckpointWriter w;
  const std::string p = "model.layers.0";
  w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
  AddGatedMlp(w, rng, p + ".mlp", kD, kFf);
  w.AddRandom(p + ".mlp.gate_proj.bias", {kFf}, rng, 0.5f);
  w.AddRandom(p + ".mlp.up_proj.bias", {kFf}, rng, 0.5f);
  w.AddRandom(p + ".mlp.down_proj.bias", {kD}, rng, 0.5f);
  const json config = {{"model_type", "llama"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 1}, {"rms_norm_eps", 1e-6}, {"mlp_bias", true}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ExpectLayer(*model, 0, [&](const Vec& x) {
    const Vec h = HfRmsNorm(x, w.Get(p + ".post_attention_layernorm.weight"), 1e-6);
    Vec g = HfLinear(w.Get(p + ".mlp.gate_proj.weight"), &w.Get(p + ".mlp.gate_proj.bias"), h);
    const Vec u = HfLinear(w.Get(p + ".mlp.up_proj.weight"), &w.Get(p + ".mlp.up_proj.bias"), h);
    for (size_t i = 0; i < g.size(); ++i) g[i] = HfAct("silu", g[i]) * u[i];
    return Add(x, HfLinear(w.Get(p + ".mlp.down_proj.weight"), &w.Get(p + ".mlp.down_proj.bias"), g));
  });
}

// ---- gemma: GeGLU with the tanh GELU; RMSNorm · (1 + w) ----

TEST_F(ConverterTest, Gemma) {
  Rng rng(3);
  CheckpointWriter w;
  const std::string p = "model.layers.0";
  w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.3f);  // around 0: (1 + w)
  AddGatedMlp(w, rng, p + ".mlp", kD, kFf);
  // The first Gemma configs say "hidden_act": "gelu"; GemmaMLP ignores it for
  // hidden_activation, which defaults to gelu_pytorch_tanh.
  const json config = {{"model_type", "gemma"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 1}, {"rms_norm_eps", 1e-6}, {"hidden_act", "gelu"},
                       {"hidden_activation", nullptr}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->layers()[0].norm.unit_offset);
  ExpectLayer(*model, 0, [&](const Vec& x) {
    const Vec h = HfRmsNorm(x, w.Get(p + ".post_attention_layernorm.weight"), 1e-6, true);
    return Add(x, HfGatedMlp(w, p + ".mlp", "gelu_pytorch_tanh", h));
  });
}

// ---- gemma3 vision-language checkpoints: their text model's FFNs ----

// Gemma 3's 4B-27B checkpoints (model_type "gemma3") hold the text model's config under
// "text_config" and its tensors under "language_model.model." (transformers before 4.52) or
// "model.language_model." (since), beside a vision tower: each converts to the file its text
// model alone converts to (the same bits), and says where it came from.
TEST_F(ConverterTest, Gemma3VisionLanguageConvertsItsTextModel) {
  Rng rng(31);
  CheckpointWriter text;
  const std::string p = "model.layers.0";
  text.AddRandom(p + ".pre_feedforward_layernorm.weight", {kD}, rng, 0.3f);
  text.AddRandom(p + ".post_feedforward_layernorm.weight", {kD}, rng, 0.3f);
  AddGatedMlp(text, rng, p + ".mlp", kD, kFf);
  const json text_config = {{"model_type", "gemma3_text"}, {"hidden_size", kD},
                            {"intermediate_size", kFf}, {"num_hidden_layers", 1},
                            {"rms_norm_eps", 1e-6}, {"hidden_activation", "gelu_pytorch_tanh"}};
  auto alone = Convert(text, text_config, {}, 1, "text.fflite");
  ASSERT_NE(alone, nullptr);
  Rng xr(5);
  const std::vector<float> x = xr.Vec(3 * alone->d_model(), 1.0f);
  ASSERT_OK_AND_ASSIGN(std::vector<float> want, RunLayer(*alone, "reference", 0, x, 3));
  for (const std::string prefix : {"language_model.model.", "model.language_model."}) {
    SCOPED_TRACE(prefix);
    CheckpointWriter vl;
    for (const char* name : {".pre_feedforward_layernorm.weight",
                             ".post_feedforward_layernorm.weight", ".mlp.gate_proj.weight",
                             ".mlp.up_proj.weight", ".mlp.down_proj.weight"}) {
      const std::string n = p + name;
      const std::vector<float>& v = text.Get(n);
      std::vector<uint64_t> shape = {kD};
      if (v.size() != kD) shape = n.find("down") != std::string::npos
                                      ? std::vector<uint64_t>{kD, kFf}
                                      : std::vector<uint64_t>{kFf, kD};
      vl.Add(prefix + n.substr(6), shape, v);
    }
    vl.AddRandom("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", {8, 4}, rng, 0.5f);
    vl.AddRandom("multi_modal_projector.mm_input_projection_weight", {4, kD}, rng, 0.5f);
    json config = {{"model_type", "gemma3"},
                   {"text_config", text_config},
                   {"vision_config", {{"model_type", "siglip_vision_model"}, {"hidden_size", 4}}}};
    config["text_config"].erase("model_type");  // as Gemma 3's configs: implied
    auto wrapped = Convert(vl, config, {}, 1, "vl.fflite");
    ASSERT_NE(wrapped, nullptr);
    ASSERT_EQ(wrapped->layers().size(), 1u);
    EXPECT_EQ(wrapped->layers()[0].name, p + ".mlp");
    ASSERT_OK_AND_ASSIGN(std::vector<float> got, RunLayer(*wrapped, "reference", 0, x, 3));
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
    bool said = false;
    for (const auto& [key, value] : wrapped->metadata()) {
      if (key == "source.wrapper") said = value == "gemma3";
    }
    EXPECT_TRUE(said) << "source.wrapper";
  }
  // A gemma3 config without its text model's config, and a checkpoint without its tensors: each
  // refused by name.
  const std::string out = out_dir_ + "/bad.fflite";
  ASSERT_OK(text.Write(ckpt_, json{{"model_type", "gemma3"}}.dump()));
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("text_config is missing or not an object")));
  ASSERT_OK(text.Write(ckpt_, json{{"model_type", "gemma3"}, {"text_config", text_config}}.dump()));
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out, {}).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::HasSubstr("no name starts with language_model.model. or "
                                            "model.language_model.")));
  EXPECT_FALSE(std::filesystem::exists(out));
}

// ---- phi3: fused gate_up_proj, gate = first half ----

TEST_F(ConverterTest, Phi3) {
  Rng rng(4);
  CheckpointWriter w;
  const std::string p = "model.layers.0";
  w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
  w.AddRandom(p + ".mlp.gate_up_proj.weight", {2 * kFf, kD}, rng, 0.5f);
  w.AddRandom(p + ".mlp.down_proj.weight", {kD, kFf}, rng, 0.5f);
  const json config = {{"model_type", "phi3"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 1}, {"rms_norm_eps", 1e-5}, {"hidden_act", "silu"}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ExpectLayer(*model, 0, [&](const Vec& x) {
    const Vec h = HfRmsNorm(x, w.Get(p + ".post_attention_layernorm.weight"), 1e-5);
    const Vec gu = HfLinear(w.Get(p + ".mlp.gate_up_proj.weight"), nullptr, h);  // [2·ff]
    Vec a(kFf);
    for (size_t i = 0; i < kFf; ++i) a[i] = gu[kFf + i] * HfAct("silu", gu[i]);  // up · act(gate)
    return Add(x, HfLinear(w.Get(p + ".mlp.down_proj.weight"), nullptr, a));
  });
}

// ---- routing references ----

std::vector<size_t> TopK(const Vec& v, size_t k, const std::vector<bool>& allowed) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < v.size(); ++i) {
    if (allowed[i]) idx.push_back(i);
  }
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] > v[b]; });
  idx.resize(k);
  return idx;
}

Vec Softmax(const Vec& logits) {
  const double m = *std::max_element(logits.begin(), logits.end());
  Vec p(logits.size());
  double s = 0.0;
  for (size_t i = 0; i < p.size(); ++i) s += p[i] = std::exp(logits[i] - m);
  for (double& v : p) v /= s;
  return p;
}

// ---- mixtral ----

TEST_F(ConverterTest, Mixtral) {
  Rng rng(5);
  CheckpointWriter w;
  const size_t E = 4, K = 2;
  const std::string p = "model.layers.0";
  const std::string moe = p + ".block_sparse_moe";
  w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
  w.AddRandom(moe + ".gate.weight", {E, kD}, rng, 1.0f);
  for (size_t e = 0; e < E; ++e) {
    AddGatedMlp(w, rng, moe + ".experts." + std::to_string(e), kD, kFf, "w1", "w3", "w2");
  }
  const json config = {{"model_type", "mixtral"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 1}, {"num_local_experts", E},
                       {"num_experts_per_tok", K}, {"rms_norm_eps", 1e-5}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layers()[0].kind, LayerKind::kMoe);
  EXPECT_EQ(model->layers()[0].name, moe);
  ExpectLayer(*model, 0, [&](const Vec& x) {
    const Vec h = HfRmsNorm(x, w.Get(p + ".post_attention_layernorm.weight"), 1e-5);
    const Vec probs = Softmax(HfLinear(w.Get(moe + ".gate.weight"), nullptr, h));
    const auto top = TopK(probs, K, std::vector<bool>(E, true));
    double sum = 0.0;
    for (size_t e : top) sum += probs[e];
    Vec y = x;
    for (size_t e : top) {
      const Vec o = HfGatedMlp(w, moe + ".experts." + std::to_string(e), "silu", h, "w1", "w3", "w2");
      y = Add(y, o, probs[e] / sum);
    }
    return y;
  }, 5);
}

// Found by fuzz_config: the format stores a layer's experts in one dtype, and a checkpoint
// whose experts differ reached the writer's backstop. Refused by name without --dtype; with it,
// every expert is converted to the one dtype.
TEST_F(ConverterTest, MixtralExpertsOfDifferentDTypes) {
  Rng rng(6);
  CheckpointWriter w;
  const std::string p = "model.layers.0";
  const std::string moe = p + ".block_sparse_moe";
  w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
  w.AddRandom(moe + ".gate.weight", {2, kD}, rng, 1.0f);
  AddGatedMlp(w, rng, moe + ".experts.0", kD, kFf, "w1", "w3", "w2");
  AddGatedMlp(w, rng, moe + ".experts.1", kD, kFf, "w1", "w3", "w2", "BF16");
  const json config = {{"model_type", "mixtral"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 1}, {"num_local_experts", 2},
                       {"num_experts_per_tok", 1}};
  ASSERT_OK(w.Write(ckpt_, config.dump()));
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out_dir_ + "/model.fflite", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(
                           ::testing::HasSubstr(moe + ": expert 1's up weights are bf16 but "
                                                "expert 0's are f32"),
                           ::testing::HasSubstr("--dtype"))));
  EXPECT_TRUE(ListDir(out_dir_).empty());
  ConvertOptions options;
  options.dtype = DType::F32;
  auto model = Convert(w, config, options);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layers()[0].moe.experts.size(), 2u);
  EXPECT_EQ(model->layers()[0].moe.experts[1].down.dtype, DType::F32);
}

// ---- qwen2_moe: dense and sparse layers, shared expert behind a sigmoid gate ----

TEST_F(ConverterTest, Qwen2Moe) {
  Rng rng(6);
  CheckpointWriter w;
  const size_t E = 4, K = 2, moe_ff = 6, shared_ff = 9;
  for (int l = 0; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
    if (l == 1) {  // in mlp_only_layers: dense, intermediate_size
      AddGatedMlp(w, rng, p + ".mlp", kD, kFf);
      continue;
    }
    w.AddRandom(p + ".mlp.gate.weight", {E, kD}, rng, 1.0f);
    for (size_t e = 0; e < E; ++e) AddGatedMlp(w, rng, p + ".mlp.experts." + std::to_string(e), kD, moe_ff);
    AddGatedMlp(w, rng, p + ".mlp.shared_expert", kD, shared_ff);
    w.AddRandom(p + ".mlp.shared_expert_gate.weight", {1, kD}, rng, 1.0f);
  }
  const json config = {{"model_type", "qwen2_moe"}, {"hidden_size", kD},
                       {"intermediate_size", kFf}, {"moe_intermediate_size", moe_ff},
                       {"shared_expert_intermediate_size", shared_ff}, {"num_hidden_layers", 3},
                       {"num_experts", E}, {"num_experts_per_tok", K}, {"norm_topk_prob", false},
                       {"decoder_sparse_step", 1}, {"mlp_only_layers", {1}},
                       {"rms_norm_eps", 1e-6}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layers().size(), 3u);
  EXPECT_EQ(model->layers()[0].kind, LayerKind::kMoe);
  EXPECT_EQ(model->layers()[1].kind, LayerKind::kDense);
  EXPECT_EQ(model->layers()[2].kind, LayerKind::kMoe);
  for (size_t l = 0; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    ExpectLayer(*model, l, [&](const Vec& x) {
      const Vec h = HfRmsNorm(x, w.Get(p + ".post_attention_layernorm.weight"), 1e-6);
      if (l == 1) return Add(x, HfGatedMlp(w, p + ".mlp", "silu", h));
      const Vec probs = Softmax(HfLinear(w.Get(p + ".mlp.gate.weight"), nullptr, h));
      Vec y = x;
      for (size_t e : TopK(probs, K, std::vector<bool>(E, true))) {  // norm_topk_prob: false
        y = Add(y, HfGatedMlp(w, p + ".mlp.experts." + std::to_string(e), "silu", h), probs[e]);
      }
      const double g = HfLinear(w.Get(p + ".mlp.shared_expert_gate.weight"), nullptr, h)[0];
      return Add(y, HfGatedMlp(w, p + ".mlp.shared_expert", "silu", h), 1.0 / (1.0 + std::exp(-g)));
    }, 4);
  }
}

// ---- qwen3_moe: routed experts only; decoder_sparse_step and mlp_only_layers place the MoE
// layers; norm_topk_prob renormalises the top-k softmax weights or leaves them ----

struct Qwen3MoeCase {
  bool norm_topk_prob;
  int decoder_sparse_step;
  std::vector<int> mlp_only_layers;
  const char* kinds;  // per layer, as Qwen3MoeDecoderLayer.__init__ places them: M (MoE), D
};

void PrintTo(const Qwen3MoeCase& c, std::ostream* os) {
  *os << "norm=" << c.norm_topk_prob << "/step=" << c.decoder_sparse_step << "/" << c.kinds;
}

class Qwen3MoeTest : public ConverterTest, public ::testing::WithParamInterface<Qwen3MoeCase> {};

TEST_P(Qwen3MoeTest, MatchesHfSparseMoeBlock) {
  const Qwen3MoeCase& c = GetParam();
  const std::string kinds = c.kinds;
  Rng rng(16);
  CheckpointWriter w;
  const size_t E = 6, K = 3, moe_ff = 6;
  for (size_t l = 0; l < kinds.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
    if (kinds[l] == 'D') {  // a Qwen3MoeMLP of intermediate_size
      AddGatedMlp(w, rng, p + ".mlp", kD, kFf);
      continue;
    }
    w.AddRandom(p + ".mlp.gate.weight", {E, kD}, rng, 1.0f);
    for (size_t e = 0; e < E; ++e) {
      AddGatedMlp(w, rng, p + ".mlp.experts." + std::to_string(e), kD, moe_ff);
    }
  }
  const json config = {{"model_type", "qwen3_moe"}, {"architectures", {"Qwen3MoeForCausalLM"}},
                       {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"moe_intermediate_size", moe_ff}, {"num_hidden_layers", kinds.size()},
                       {"num_experts", E}, {"num_experts_per_tok", K},
                       {"norm_topk_prob", c.norm_topk_prob},
                       {"decoder_sparse_step", c.decoder_sparse_step},
                       {"mlp_only_layers", c.mlp_only_layers}, {"rms_norm_eps", 1e-6},
                       {"hidden_act", "silu"}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layers().size(), kinds.size());
  for (size_t l = 0; l < kinds.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    const LayerView& lv = model->layers()[l];
    EXPECT_EQ(lv.name, p + ".mlp");
    if (kinds[l] == 'D') {
      ASSERT_EQ(lv.kind, LayerKind::kDense) << p;
      EXPECT_EQ(lv.ffn.d_ff, kFf);
    } else {
      ASSERT_EQ(lv.kind, LayerKind::kMoe) << p;
      EXPECT_EQ(lv.moe.experts.size(), E);
      EXPECT_EQ(lv.moe.top_k, K);
      EXPECT_EQ(lv.moe.normalize_top_k, c.norm_topk_prob);
      EXPECT_TRUE(lv.moe.shared_experts.empty());
      EXPECT_FALSE(lv.moe.shared_expert_gate.present());
    }
    ExpectLayer(*model, l, [&](const Vec& x) {
      const Vec h = HfRmsNorm(x, w.Get(p + ".post_attention_layernorm.weight"), 1e-6);
      if (kinds[l] == 'D') return Add(x, HfGatedMlp(w, p + ".mlp", "silu", h));
      // softmax over all experts, then top-k; the k weights divided by their sum iff norm_topk_prob
      const Vec probs = Softmax(HfLinear(w.Get(p + ".mlp.gate.weight"), nullptr, h));
      const auto top = TopK(probs, K, std::vector<bool>(E, true));
      double sum = 0.0;
      for (size_t e : top) sum += probs[e];
      Vec y = x;
      for (size_t e : top) {
        const double weight = c.norm_topk_prob ? probs[e] / sum : probs[e];
        y = Add(y, HfGatedMlp(w, p + ".mlp.experts." + std::to_string(e), "silu", h), weight);
      }
      return y;
    }, 4);
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, Qwen3MoeTest,
    ::testing::Values(Qwen3MoeCase{true, 1, {}, "MMM"},  // Qwen3-30B-A3B's own settings
                      Qwen3MoeCase{false, 1, {}, "MMM"},
                      Qwen3MoeCase{true, 2, {3}, "DMDDDM"},
                      Qwen3MoeCase{false, 1, {0, 2}, "DMDM"}),
    [](const ::testing::TestParamInfo<Qwen3MoeCase>& i) {
      return absl::StrFormat("%s_step%d_%s", i.param.norm_topk_prob ? "norm" : "nonorm",
                             i.param.decoder_sparse_step, i.param.kinds);
    });

// ---- deepseek_v2 / deepseek_v3 ----

struct DeepseekCase {
  const char* model_type;
  const char* topk_method;
  bool norm_topk_prob;
  double routed_scaling_factor;
  size_t top_k;
};

void PrintTo(const DeepseekCase& c, std::ostream* os) {
  *os << c.model_type << "/" << c.topk_method << "/norm=" << c.norm_topk_prob
      << "/scale=" << c.routed_scaling_factor << "/k=" << c.top_k;
}

class DeepseekTest : public ConverterTest, public ::testing::WithParamInterface<DeepseekCase> {};

TEST_P(DeepseekTest, MatchesGroupedRouting) {
  const DeepseekCase& c = GetParam();
  const bool v3 = std::string(c.model_type) == "deepseek_v3";
  Rng rng(7);
  CheckpointWriter w;
  const size_t E = 8, G = 4, TG = 2, moe_ff = 6, shared = 2;
  // Layer 0: dense (first_k_dense_replace = 1); layer 1: MoE.
  w.AddRandom("model.layers.0.post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
  AddGatedMlp(w, rng, "model.layers.0.mlp", kD, kFf);
  const std::string p = "model.layers.1";
  w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
  w.AddRandom(p + ".mlp.gate.weight", {E, kD}, rng, 1.0f);
  if (v3) w.AddRandom(p + ".mlp.gate.e_score_correction_bias", {E}, rng, 0.1f, "F32", 0.05f);
  for (size_t e = 0; e < E; ++e) AddGatedMlp(w, rng, p + ".mlp.experts." + std::to_string(e), kD, moe_ff);
  AddGatedMlp(w, rng, p + ".mlp.shared_experts", kD, moe_ff * shared);
  json config = {{"model_type", c.model_type}, {"hidden_size", kD}, {"intermediate_size", kFf},
                 {"moe_intermediate_size", moe_ff}, {"num_hidden_layers", 2},
                 {"n_routed_experts", E}, {"n_shared_experts", shared},
                 {"num_experts_per_tok", c.top_k}, {"n_group", G}, {"topk_group", TG},
                 {"topk_method", c.topk_method}, {"norm_topk_prob", c.norm_topk_prob},
                 {"routed_scaling_factor", c.routed_scaling_factor},
                 {"first_k_dense_replace", 1}, {"moe_layer_freq", 1}, {"rms_norm_eps", 1e-6},
                 {"hidden_act", "silu"}};
  if (v3) config["scoring_func"] = "sigmoid";
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layers().size(), 2u);
  EXPECT_EQ(model->layers()[0].kind, LayerKind::kDense);
  ASSERT_EQ(model->layers()[1].kind, LayerKind::kMoe);
  EXPECT_EQ(model->layers()[1].moe.shared_experts.size(), 1u);
  EXPECT_EQ(model->layers()[1].moe.shared_experts[0].d_ff, moe_ff * shared);
  ExpectLayer(*model, 0, [&](const Vec& x) {
    const Vec h = HfRmsNorm(x, w.Get("model.layers.0.post_attention_layernorm.weight"), 1e-6);
    return Add(x, HfGatedMlp(w, "model.layers.0.mlp", "silu", h));
  });
  const bool grouped = v3 || std::string(c.topk_method) == "group_limited_greedy";
  ExpectLayer(*model, 1, [&](const Vec& x) {
    const Vec h = HfRmsNorm(x, w.Get(p + ".post_attention_layernorm.weight"), 1e-6);
    const Vec logits = HfLinear(w.Get(p + ".mlp.gate.weight"), nullptr, h);
    Vec scores(E), choice(E);
    if (v3) {
      for (size_t e = 0; e < E; ++e) scores[e] = 1.0 / (1.0 + std::exp(-logits[e]));
      const auto& bias = w.Get(p + ".mlp.gate.e_score_correction_bias");
      for (size_t e = 0; e < E; ++e) choice[e] = scores[e] + bias[e];
    } else {
      scores = Softmax(logits);
      choice = scores;
    }
    std::vector<bool> allowed(E, true);
    if (grouped) {
      // v3: group score = sum of the group's two best choices; v2: the best score.
      const size_t per = E / G;
      Vec group(G);
      for (size_t g = 0; g < G; ++g) {
        Vec in(choice.begin() + static_cast<long>(g * per), choice.begin() + static_cast<long>((g + 1) * per));
        std::sort(in.rbegin(), in.rend());
        group[g] = v3 ? in[0] + in[1] : in[0];
      }
      const auto kept = TopK(group, TG, std::vector<bool>(G, true));
      for (size_t e = 0; e < E; ++e) {
        allowed[e] = std::find(kept.begin(), kept.end(), e / per) != kept.end();
      }
    }
    const auto top = TopK(choice, c.top_k, allowed);
    double sum = 0.0;
    for (size_t e : top) sum += scores[e];
    const bool normalize = c.top_k > 1 && c.norm_topk_prob;
    Vec y = x;
    for (size_t e : top) {
      double weight = scores[e];
      if (v3) {
        weight = (normalize ? weight / sum : weight) * c.routed_scaling_factor;
      } else {
        weight = normalize ? weight / sum : weight * c.routed_scaling_factor;
      }
      y = Add(y, HfGatedMlp(w, p + ".mlp.experts." + std::to_string(e), "silu", h), weight);
    }
    return Add(y, HfGatedMlp(w, p + ".mlp.shared_experts", "silu", h));
  }, 6);
}

INSTANTIATE_TEST_SUITE_P(
    All, DeepseekTest,
    ::testing::Values(DeepseekCase{"deepseek_v3", "noaux_tc", true, 2.5, 3},
                      DeepseekCase{"deepseek_v3", "noaux_tc", false, 1.5, 2},
                      DeepseekCase{"deepseek_v2", "group_limited_greedy", false, 1.5, 2},
                      DeepseekCase{"deepseek_v2", "greedy", true, 16.0, 3}));

// ---- bert: plain FFN with biases, post-LayerNorm over x + FFN(x) ----

TEST_F(ConverterTest, Bert) {
  Rng rng(8);
  CheckpointWriter w;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l);
    w.AddRandom(p + ".attention.self.query.weight", {kD, kD}, rng, 0.5f);  // ignored
    w.AddRandom(p + ".intermediate.dense.weight", {kFf, kD}, rng, 0.5f);
    w.AddRandom(p + ".intermediate.dense.bias", {kFf}, rng, 0.5f);
    w.AddRandom(p + ".output.dense.weight", {kD, kFf}, rng, 0.5f);
    w.AddRandom(p + ".output.dense.bias", {kD}, rng, 0.5f);
    // Layer 1 uses the TF-era gamma/beta names.
    w.AddRandom(p + (l == 0 ? ".output.LayerNorm.weight" : ".output.LayerNorm.gamma"), {kD}, rng,
                0.2f, "", 1.0f);
    w.AddRandom(p + (l == 0 ? ".output.LayerNorm.bias" : ".output.LayerNorm.beta"), {kD}, rng, 0.2f);
  }
  const json config = {{"model_type", "bert"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 2}, {"hidden_act", "gelu"},
                       {"layer_norm_eps", 1e-12}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  for (size_t l = 0; l < 2; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l);
    EXPECT_EQ(model->layers()[l].name, p);
    EXPECT_EQ(model->layers()[l].norm.placement, NormPlacement::POST);
    ExpectLayer(*model, l, [&](const Vec& x) {
      Vec a = HfLinear(w.Get(p + ".intermediate.dense.weight"), &w.Get(p + ".intermediate.dense.bias"), x);
      for (double& v : a) v = HfAct("gelu", v);
      const Vec f = HfLinear(w.Get(p + ".output.dense.weight"), &w.Get(p + ".output.dense.bias"), a);
      const std::string ln = p + ".output.LayerNorm.";
      return HfLayerNorm(Add(f, x), w.Get(ln + (l == 0 ? "weight" : "gamma")),
                         w.Get(ln + (l == 0 ? "bias" : "beta")), 1e-12);
    });
  }
}

// ---- gpt2: Conv1D [in, out] weights, gelu_new, ln_2 pre-norm ----

TEST_F(ConverterTest, Gpt2) {
  Rng rng(9);
  CheckpointWriter w;
  const uint64_t inner = 4 * kD;  // n_inner: null -> 4 · n_embd
  // The original openai-community checkpoints have no "transformer." prefix.
  for (int l = 0; l < 2; ++l) {
    const std::string p = "h." + std::to_string(l);
    w.AddRandom(p + ".ln_2.weight", {kD}, rng, 0.2f, "", 1.0f);
    w.AddRandom(p + ".ln_2.bias", {kD}, rng, 0.2f);
    w.AddRandom(p + ".mlp.c_fc.weight", {kD, inner}, rng, 0.5f);
    w.AddRandom(p + ".mlp.c_fc.bias", {inner}, rng, 0.5f);
    w.AddRandom(p + ".mlp.c_proj.weight", {inner, kD}, rng, 0.3f);
    w.AddRandom(p + ".mlp.c_proj.bias", {kD}, rng, 0.5f);
  }
  const json config = {{"model_type", "gpt2"}, {"n_embd", kD}, {"n_inner", nullptr},
                       {"n_layer", 2}, {"activation_function", "gelu_new"},
                       {"layer_norm_epsilon", 1e-5}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  for (size_t l = 0; l < 2; ++l) {
    const std::string p = "h." + std::to_string(l);
    EXPECT_EQ(model->layers()[l].name, p + ".mlp");
    EXPECT_EQ(model->layers()[l].ffn.d_ff, inner);
    ExpectLayer(*model, l, [&](const Vec& x) {
      const Vec h = HfLayerNorm(x, w.Get(p + ".ln_2.weight"), w.Get(p + ".ln_2.bias"), 1e-5);
      Vec a = HfConv1D(w.Get(p + ".mlp.c_fc.weight"), &w.Get(p + ".mlp.c_fc.bias"), h);
      for (double& v : a) v = HfAct("gelu_new", v);
      return Add(x, HfConv1D(w.Get(p + ".mlp.c_proj.weight"), &w.Get(p + ".mlp.c_proj.bias"), a));
    });
  }
}

// ---- t5: DenseReluDense (relu) and T5 v1.1 gated-gelu, T5LayerNorm, encoder + decoder ----

class T5Test : public ConverterTest, public ::testing::WithParamInterface<bool> {};

TEST_P(T5Test, EncoderAndDecoder) {
  const bool gated = GetParam();
  Rng rng(10);
  CheckpointWriter w;
  std::vector<std::string> names;
  for (const char* stack : {"encoder", "decoder"}) {
    for (int b = 0; b < 2; ++b) {
      const std::string p = std::string(stack) + ".block." + std::to_string(b) + ".layer." +
                            (std::string(stack) == "encoder" ? "1" : "2");
      names.push_back(p);
      w.AddRandom(p + ".layer_norm.weight", {kD}, rng, 0.2f, "", 1.0f);
      if (gated) {
        AddGatedMlp(w, rng, p + ".DenseReluDense", kD, kFf, "wi_0", "wi_1", "wo");
      } else {
        w.AddRandom(p + ".DenseReluDense.wi.weight", {kFf, kD}, rng, 0.5f);
        w.AddRandom(p + ".DenseReluDense.wo.weight", {kD, kFf}, rng, 0.5f);
      }
    }
  }
  w.AddRandom("shared.weight", {5, kD}, rng, 1.0f);
  const json config = {{"model_type", "t5"}, {"d_model", kD}, {"d_ff", kFf}, {"num_layers", 2},
                       {"num_decoder_layers", 2},
                       {"feed_forward_proj", gated ? "gated-gelu" : "relu"},
                       {"layer_norm_epsilon", 1e-6}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layers().size(), 4u);
  for (size_t l = 0; l < 4; ++l) {
    const std::string& p = names[l];
    EXPECT_EQ(model->layers()[l].name, p);
    ExpectLayer(*model, l, [&](const Vec& x) {
      const Vec h = HfRmsNorm(x, w.Get(p + ".layer_norm.weight"), 1e-6);
      if (gated) return Add(x, HfGatedMlp(w, p + ".DenseReluDense", "gelu_new", h, "wi_0", "wi_1", "wo"));
      Vec a = HfLinear(w.Get(p + ".DenseReluDense.wi.weight"), nullptr, h);
      for (double& v : a) v = HfAct("relu", v);
      return Add(x, HfLinear(w.Get(p + ".DenseReluDense.wo.weight"), nullptr, a));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(ReluAndGatedGelu, T5Test, ::testing::Bool());

// ---- whisper: fc1/fc2 with biases, final_layer_norm pre-norm, encoder + decoder ----

TEST_F(ConverterTest, Whisper) {
  Rng rng(11);
  CheckpointWriter w;
  const uint64_t enc_ff = 12, dec_ff = 18;
  std::vector<std::pair<std::string, uint64_t>> layers = {{"model.encoder.layers.0", enc_ff},
                                                          {"model.decoder.layers.0", dec_ff}};
  for (const auto& [p, ff] : layers) {
    w.AddRandom(p + ".final_layer_norm.weight", {kD}, rng, 0.2f, "", 1.0f);
    w.AddRandom(p + ".final_layer_norm.bias", {kD}, rng, 0.2f);
    w.AddRandom(p + ".fc1.weight", {ff, kD}, rng, 0.5f);
    w.AddRandom(p + ".fc1.bias", {ff}, rng, 0.5f);
    w.AddRandom(p + ".fc2.weight", {kD, ff}, rng, 0.5f);
    w.AddRandom(p + ".fc2.bias", {kD}, rng, 0.5f);
  }
  const json config = {{"model_type", "whisper"}, {"d_model", kD}, {"encoder_layers", 1},
                       {"decoder_layers", 1}, {"encoder_ffn_dim", enc_ff},
                       {"decoder_ffn_dim", dec_ff}, {"activation_function", "gelu"}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layers().size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    const std::string p = layers[l].first;
    EXPECT_EQ(model->layers()[l].name, p);
    ExpectLayer(*model, l, [&](const Vec& x) {
      const Vec h = HfLayerNorm(x, w.Get(p + ".final_layer_norm.weight"),
                                w.Get(p + ".final_layer_norm.bias"), 1e-5);
      Vec a = HfLinear(w.Get(p + ".fc1.weight"), &w.Get(p + ".fc1.bias"), h);
      for (double& v : a) v = HfAct("gelu", v);
      return Add(x, HfLinear(w.Get(p + ".fc2.weight"), &w.Get(p + ".fc2.bias"), a));
    });
  }
}

// ---- opt: fc1/fc2 (biases unless enable_bias is false), ReLU, final_layer_norm before the FFN
// (do_layer_norm_before, the default) or after the residual (opt-350m) ----

class OptTest : public ConverterTest,
                public ::testing::WithParamInterface<std::tuple<bool, bool>> {};

TEST_P(OptTest, MatchesHfDecoderLayerFfn) {
  // Plain variables, not a structured binding: clang 14 cannot capture one in the lambda below.
  const bool norm_before = std::get<0>(GetParam()), bias = std::get<1>(GetParam());
  Rng rng(14);
  CheckpointWriter w;
  const uint64_t ff = 4 * kD;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.decoder.layers." + std::to_string(l);
    w.AddRandom(p + ".self_attn.q_proj.weight", {kD, kD}, rng, 0.5f);  // ignored
    w.AddRandom(p + ".final_layer_norm.weight", {kD}, rng, 0.2f, "", 1.0f);
    w.AddRandom(p + ".final_layer_norm.bias", {kD}, rng, 0.2f);
    w.AddRandom(p + ".fc1.weight", {ff, kD}, rng, 0.5f);
    w.AddRandom(p + ".fc2.weight", {kD, ff}, rng, 0.3f);
    if (bias) {
      w.AddRandom(p + ".fc1.bias", {ff}, rng, 0.5f);
      w.AddRandom(p + ".fc2.bias", {kD}, rng, 0.5f);
    }
  }
  json config = {{"model_type", "opt"}, {"hidden_size", kD}, {"ffn_dim", ff},
                 {"num_hidden_layers", 2}, {"activation_function", "relu"},
                 {"do_layer_norm_before", norm_before}};
  if (!bias) config["enable_bias"] = false;
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layers().size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    const std::string p = "model.decoder.layers." + std::to_string(l);
    EXPECT_EQ(model->layers()[l].name, p);
    EXPECT_EQ(model->layers()[l].ffn.activation, Activation::RELU);
    EXPECT_EQ(model->layers()[l].ffn.up_bias.present(), bias);
    ExpectLayer(*model, l, [&](const Vec& x) {
      const std::string ln = p + ".final_layer_norm.";
      const Vec h = norm_before ? HfLayerNorm(x, w.Get(ln + "weight"), w.Get(ln + "bias"), 1e-5) : x;
      Vec a = HfLinear(w.Get(p + ".fc1.weight"), bias ? &w.Get(p + ".fc1.bias") : nullptr, h);
      for (double& v : a) v = HfAct("relu", v);
      const Vec y =
          Add(x, HfLinear(w.Get(p + ".fc2.weight"), bias ? &w.Get(p + ".fc2.bias") : nullptr, a));
      return norm_before ? y : HfLayerNorm(y, w.Get(ln + "weight"), w.Get(ln + "bias"), 1e-5);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(NormBeforeAndAfter, OptTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

// ReLU FFNs are stored with value rows by default (sparse decode), row-major with value_rows
// off; SwiGLU ones never. Both files give the same outputs on xnnpack (and the reference's bits).
TEST_F(ConverterTest, ReluDownIsStoredAsValueRowsByDefault) {
  Rng rng(15);
  CheckpointWriter w;
  const uint64_t ff = 4 * kD;
  const std::string p = "model.decoder.layers.0";
  w.AddRandom(p + ".final_layer_norm.weight", {kD}, rng, 0.2f, "", 1.0f);
  w.AddRandom(p + ".final_layer_norm.bias", {kD}, rng, 0.2f);
  w.AddRandom(p + ".fc1.weight", {ff, kD}, rng, 0.5f);
  w.AddRandom(p + ".fc1.bias", {ff}, rng, 0.5f);
  w.AddRandom(p + ".fc2.weight", {kD, ff}, rng, 0.3f);
  w.AddRandom(p + ".fc2.bias", {kD}, rng, 0.5f);
  const json config = {{"model_type", "opt"}, {"hidden_size", kD}, {"ffn_dim", ff},
                       {"num_hidden_layers", 1}, {"activation_function", "relu"}};
  auto rows = Convert(w, config, {}, 1, "rows.fflite");
  converter::ConvertOptions off;
  off.value_rows = false;
  auto plain = Convert(w, config, off, 1, "plain.fflite");
  ASSERT_NE(rows, nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_TRUE(rows->layers()[0].ffn.down.value_rows());
  EXPECT_FALSE(plain->layers()[0].ffn.down.value_rows());
  EXPECT_EQ(rows->version_minor(), kFormatVersionMinor);
  const std::vector<float> input = Rng(16).Vec(3 * kD, 1.0f);
  ASSERT_OK_AND_ASSIGN(auto want, RunLayer(*plain, "reference", 0, input, 3));
  ASSERT_OK_AND_ASSIGN(auto ref_rows, RunLayer(*rows, "reference", 0, input, 3));
  EXPECT_EQ(want, ref_rows);
  ASSERT_OK_AND_ASSIGN(auto got, RunLayer(*rows, "xnnpack", 0, input, 3));
  testing::ExpectOutputsNear(want, got, 3, kD, testing::kF32RelTol, "xnnpack on value rows");
}

// A LayerNorm without weight and bias (layer_norm_elementwise_affine false) is refused by name.
TEST_F(ConverterTest, OptWithoutElementwiseAffineIsRefused) {
  Rng rng(15);
  CheckpointWriter w;
  const std::string p = "decoder.layers.0";
  w.AddRandom(p + ".fc1.weight", {12, kD}, rng, 0.5f);
  w.AddRandom(p + ".fc1.bias", {12}, rng, 0.5f);
  w.AddRandom(p + ".fc2.weight", {kD, 12}, rng, 0.5f);
  w.AddRandom(p + ".fc2.bias", {kD}, rng, 0.5f);
  const json config = {{"model_type", "opt"}, {"hidden_size", kD}, {"ffn_dim", 12},
                       {"num_hidden_layers", 1}, {"layer_norm_elementwise_affine", false}};
  ASSERT_OK(w.Write(ckpt_, config.dump()));
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out_dir_ + "/model.fflite", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("layer_norm_elementwise_affine")));
  EXPECT_TRUE(ListDir(out_dir_).empty());
}

// A norm of the wrong length is named with the architecture's own config key for d_model.
TEST_F(ConverterTest, NormShapeErrorsNameTheArchitecturesKey) {
  Rng rng(13);
  CheckpointWriter w;
  const std::string p = "model.encoder.layers.0";
  w.AddRandom(p + ".final_layer_norm.weight", {kD + 1}, rng, 0.2f);
  w.AddRandom(p + ".final_layer_norm.bias", {kD}, rng, 0.2f);
  w.AddRandom(p + ".fc1.weight", {12, kD}, rng, 0.5f);
  w.AddRandom(p + ".fc1.bias", {12}, rng, 0.5f);
  w.AddRandom(p + ".fc2.weight", {kD, 12}, rng, 0.5f);
  w.AddRandom(p + ".fc2.bias", {kD}, rng, 0.5f);
  const json config = {{"model_type", "whisper"}, {"d_model", kD}, {"encoder_layers", 1},
                       {"decoder_layers", 0}, {"encoder_ffn_dim", 12}, {"decoder_ffn_dim", 12},
                       {"activation_function", "gelu"}};
  ASSERT_OK(w.Write(ckpt_, config.dump()));
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out_dir_ + "/model.fflite", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(::testing::HasSubstr(p + ".final_layer_norm.weight"),
                                        ::testing::HasSubstr(absl::StrFormat(
                                            "expects [d_model] = [%d]", kD)))));
  EXPECT_TRUE(ListDir(out_dir_).empty());
}

// ---- inputs in f16 and bf16, and sharded checkpoints ----

class DTypeShardTest : public ConverterTest,
                       public ::testing::WithParamInterface<std::tuple<const char*, int>> {};

TEST_P(DTypeShardTest, LlamaMatches) {
  const auto [dtype, shards] = GetParam();
  Rng rng(12);
  CheckpointWriter w;
  w.set_default_dtype(dtype);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
    AddGatedMlp(w, rng, p + ".mlp", kD, kFf);
  }
  const json config = {{"model_type", "llama"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 2}, {"rms_norm_eps", 1e-5}};
  auto model = Convert(w, config, ConvertOptions(), shards);
  ASSERT_NE(model, nullptr);
  const DType want = std::string(dtype) == "F16" ? DType::F16
                     : std::string(dtype) == "BF16" ? DType::BF16 : DType::F32;
  EXPECT_EQ(model->layers()[0].ffn.up.dtype, want);  // default: the source's dtype
  for (size_t l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    ExpectLayer(*model, l, [&](const Vec& x) {
      const Vec h = HfRmsNorm(x, w.Get(p + ".post_attention_layernorm.weight"), 1e-5);
      return Add(x, HfGatedMlp(w, p + ".mlp", "silu", h));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(All, DTypeShardTest,
                         ::testing::Combine(::testing::Values("F32", "F16", "BF16"),
                                            ::testing::Values(1, 3)));

}  // namespace
}  // namespace testing
}  // namespace fflite
