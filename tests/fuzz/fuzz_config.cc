// libFuzzer target: config.json reading and every architecture mapping, fed by a small generator
// of plausible checkpoints. The input drives the generator: a model_type, tiny sizes (hidden and
// intermediate 1-8, gpt_oss's 32 or 64, 0-3 layers, 1-6 experts, top-k 0-7, groups, gpt_oss's
// MXFP4 codes and scales), HF activation names (and now and then an unknown one), booleans; it
// writes config.json and tensors with the names and shapes that
// architecture uses, then sometimes edits them so that they disagree (a key dropped or set to a
// string / negative / huge / float / null value, a tensor dropped, reshaped, renamed or of another
// dtype), picks conversion options, now and then wraps it as Gemma 3's vision-language
// checkpoints are (WrapVisionLanguage), and converts.
// Invariants: no crash, no sanitizer report, no leak; a conversion either returns an error status
// from the converter's own checks (never the writer's backstop "the model spec does not make a
// valid model") and leaves nothing in the output folder, or writes one model that loads and whose
// every layer runs one token on the reference backend. Memory and time are bounded by the generator's small
// sizes (the input only chooses among them; a huge value only ever reaches config.json).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "converter/convert.h"
#include "fuzz_util.h"
#include "nlohmann/json.hpp"
#include "testing/checkpoint_writer.h"

namespace {

using namespace fflite;
using fuzz::ByteReader;
using fuzz::Fail;
using json = nlohmann::json;

const std::vector<std::string> kModelTypes = {
    "llama", "mistral", "qwen2", "qwen3", "gemma", "phi3", "mixtral", "qwen2_moe", "deepseek_v2",
    "deepseek_v3", "bert", "gpt2", "t5", "whisper", "opt", "qwen3_moe", "gpt_oss"};

// transformers' ACT2FN names the converter knows, then ones it does not.
const std::vector<std::string> kActivations = {
    "relu", "gelu", "gelu_python", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_accurate",
    "silu", "swish", "sigmoid", "quick_gelu", "tanh", ""};

struct PlannedTensor {
  std::string name;
  std::vector<uint64_t> shape;
  // F32, F16, BF16; I8 / I64 are written as raw zeros; U8 as random bytes (MXFP4 codes), E8M0 as
  // U8 bytes that are mostly scales f16 can hold (2^-24 .. 2^15) and now and then any byte.
  std::string dtype;
  float center = 0.0f;
};

class Generator {
 public:
  explicit Generator(ByteReader& in) : in_(in) {}

  json& config() { return config_; }
  std::vector<PlannedTensor>& tensors() { return tensors_; }

  uint32_t Dim() { return in_.Range(1, 8); }
  // 1-3 layers; 0 (refused by most mappings) one time in eight.
  uint32_t Layers() { return in_.OneIn(8) ? 0 : in_.Range(1, 3); }
  bool Bool() { return in_.Bool(); }
  bool OneIn(uint32_t n) { return in_.OneIn(n); }
  uint32_t Range(uint32_t lo, uint32_t hi) { return in_.Range(lo, hi); }
  // A top-k for `experts`: mostly valid, now and then anything in 0-7.
  uint32_t TopK(uint32_t experts) { return in_.OneIn(4) ? in_.Range(0, 7) : in_.Range(1, experts); }
  // Mostly a known activation; unknown ones one time in about eight.
  std::string Activation() {
    const uint8_t b = in_.Byte();
    if (b % 8 == 7) return kActivations[10 + b / 8 % 3];
    return kActivations[b / 8 % 10];
  }
  double Eps() {
    static const double kEps[] = {1e-5, 1e-6, 1e-12, 0.0, 0.5};
    return kEps[in_.Range(0, 4)];
  }
  // Sets `key` to `value` unless the generator leaves it out (then the mapping's default applies
  // and the caller must use that default for the tensors).
  template <typename T>
  bool MaybeSet(const std::string& key, const T& value) {
    if (in_.OneIn(4)) return false;
    config_[key] = value;
    return true;
  }

  void Matrix(const std::string& name, uint64_t rows, uint64_t cols) {
    tensors_.push_back({name, {rows, cols}, dtype_, 0.0f});
  }
  void Vector(const std::string& name, uint64_t n, float center = 0.0f) {
    tensors_.push_back({name, {n}, dtype_, center});
  }
  void Gated(const std::string& prefix, uint64_t d, uint64_t ff, const char* gate = "gate_proj",
             const char* up = "up_proj", const char* down = "down_proj", bool bias = false) {
    Matrix(prefix + "." + gate + ".weight", ff, d);
    Matrix(prefix + "." + up + ".weight", ff, d);
    Matrix(prefix + "." + down + ".weight", d, ff);
    if (bias) {
      Vector(prefix + "." + gate + ".bias", ff);
      Vector(prefix + "." + up + ".bias", ff);
      Vector(prefix + "." + down + ".bias", d);
    }
  }
  // A tensor of any rank and dtype (PlannedTensor's).
  void Tensor(const std::string& name, std::vector<uint64_t> shape, const std::string& dtype) {
    tensors_.push_back({name, std::move(shape), dtype, 0.0f});
  }
  const std::string& dtype() const { return dtype_; }
  void set_dtype(std::string dtype) { dtype_ = std::move(dtype); }

 private:
  ByteReader& in_;
  json config_ = json::object();
  std::vector<PlannedTensor> tensors_;
  std::string dtype_ = "F32";
};

// ---- One generator per mapping: config keys and tensors as transformers writes them ----

// llama, mistral, qwen2, qwen3, gemma (GeGLU, hidden_activation), phi3 (fused gate_up_proj).
void GenDecoderMlp(Generator& g, const std::string& type) {
  const uint32_t d = g.Dim(), ff = g.Dim(), layers = g.Layers();
  json& c = g.config();
  c["hidden_size"] = d;
  c["intermediate_size"] = ff;
  c["num_hidden_layers"] = layers;
  if (type == "gemma") {
    g.MaybeSet("hidden_activation", g.Activation());
    g.MaybeSet("hidden_act", "gelu");  // ignored by the mapping
  } else {
    g.MaybeSet("hidden_act", g.Activation());
  }
  g.MaybeSet("rms_norm_eps", g.Eps());
  bool bias = false;
  if (type == "llama" && g.OneIn(3)) {
    bias = g.Bool();
    c["mlp_bias"] = bias;
  }
  if (g.Bool()) g.Matrix("model.embed_tokens.weight", 3, d);  // not an FFN: skipped
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    if (type == "phi3") {
      g.Matrix(layer + ".mlp.gate_up_proj.weight", 2 * ff, d);
      g.Matrix(layer + ".mlp.down_proj.weight", d, ff);
    } else {
      g.Gated(layer + ".mlp", d, ff, "gate_proj", "up_proj", "down_proj", bias);
    }
    g.Vector(layer + ".post_attention_layernorm.weight", d, type == "gemma" ? 0.0f : 1.0f);
  }
}

void GenMixtral(Generator& g) {
  const uint32_t d = g.Dim(), ff = g.Dim(), layers = g.Layers();
  json& c = g.config();
  c["hidden_size"] = d;
  c["intermediate_size"] = ff;
  c["num_hidden_layers"] = layers;
  uint32_t experts = g.Range(1, 6);
  if (!g.MaybeSet("num_local_experts", experts)) experts = 8;  // MixtralConfig's default
  g.MaybeSet("num_experts_per_tok", g.TopK(experts));
  g.MaybeSet("hidden_act", g.Activation());
  g.MaybeSet("rms_norm_eps", g.Eps());
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string moe = absl::StrFormat("model.layers.%d.block_sparse_moe", i);
    g.Matrix(moe + ".gate.weight", experts, d);
    for (uint32_t e = 0; e < experts; ++e) {
      g.Gated(absl::StrFormat("%s.experts.%d", moe, e), d, ff, "w1", "w3", "w2");
    }
    g.Vector(absl::StrFormat("model.layers.%d.post_attention_layernorm.weight", i), d, 1.0f);
  }
}

// qwen2_moe (`shared`: a shared expert behind a sigmoid gate) and qwen3_moe (routed experts only).
void GenQwenMoe(Generator& g, bool shared) {
  const uint32_t d = g.Dim(), layers = g.Layers();
  const uint32_t ff = g.Dim(), moe_ff = g.Dim(), shared_ff = g.Dim();
  json& c = g.config();
  c["hidden_size"] = d;
  c["num_hidden_layers"] = layers;
  c["intermediate_size"] = ff;
  c["moe_intermediate_size"] = moe_ff;
  if (shared) c["shared_expert_intermediate_size"] = shared_ff;
  uint32_t experts = g.Range(0, 6);
  c["num_experts"] = experts;
  uint32_t step = g.Range(1, 2);
  if (!g.MaybeSet("decoder_sparse_step", step)) step = 1;
  g.MaybeSet("num_experts_per_tok", g.TopK(experts == 0 ? 1 : experts));
  g.MaybeSet("norm_topk_prob", g.Bool());
  g.MaybeSet("hidden_act", g.Activation());
  g.MaybeSet("rms_norm_eps", g.Eps());
  std::vector<uint32_t> mlp_only;
  if (g.Bool()) {
    for (uint32_t i = 0; i < layers; ++i) {
      if (g.Bool()) mlp_only.push_back(i);
    }
    c["mlp_only_layers"] = mlp_only;
  }
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    const std::string mlp = layer + ".mlp";
    bool dense = experts == 0 || (i + 1) % step != 0;
    for (uint32_t j : mlp_only) dense = dense || j == i;
    if (dense) {
      g.Gated(mlp, d, ff);
    } else {
      g.Matrix(mlp + ".gate.weight", experts, d);
      for (uint32_t e = 0; e < experts; ++e) g.Gated(absl::StrFormat("%s.experts.%d", mlp, e), d, moe_ff);
      if (shared) {
        g.Gated(mlp + ".shared_expert", d, shared_ff);
        g.Matrix(mlp + ".shared_expert_gate.weight", 1, d);
      }
    }
    g.Vector(layer + ".post_attention_layernorm.weight", d, 1.0f);
  }
}

void GenDeepseek(Generator& g, bool v3) {
  const uint32_t d = g.Dim(), layers = g.Layers(), ff = g.Dim(), moe_ff = g.Dim();
  json& c = g.config();
  c["hidden_size"] = d;
  c["num_hidden_layers"] = layers;
  c["intermediate_size"] = ff;
  c["moe_intermediate_size"] = moe_ff;
  g.MaybeSet("hidden_act", g.Activation());
  g.MaybeSet("rms_norm_eps", g.Eps());
  const bool moe = !g.OneIn(5);
  uint32_t experts = 0, first_dense = 0, freq = 1, shared = 0;
  if (moe) {
    experts = g.Range(1, 6);
    c["n_routed_experts"] = experts;
    c["num_experts_per_tok"] = g.TopK(experts);
    // Left out, each takes DeepseekV3Config's default (0, 1, None = 0).
    first_dense = g.Range(0, 3);
    if (!g.MaybeSet("first_k_dense_replace", first_dense)) first_dense = 0;
    freq = g.Range(1, 2);
    if (!g.MaybeSet("moe_layer_freq", freq)) freq = 1;
    shared = g.Range(0, 2);
    if (!g.MaybeSet("n_shared_experts", shared)) shared = 0;
    g.MaybeSet("norm_topk_prob", g.Bool());
    static const double kScale[] = {1.0, 2.5, 0.0, -1.0};
    const bool odd_scale = g.OneIn(4);
    g.MaybeSet("routed_scaling_factor", kScale[g.Range(0, 1) + (odd_scale ? 2 : 0)]);
    if (g.OneIn(6)) {
      c["scoring_func"] = g.Bool() ? "softmax" : "sigmoid";
    } else {
      g.MaybeSet("scoring_func", v3 ? "sigmoid" : "softmax");
    }
    if (g.OneIn(8)) {
      c["topk_method"] = g.Bool() ? "bogus" : "noaux_tc";
    } else if (v3) {
      g.MaybeSet("topk_method", "noaux_tc");
    } else {
      g.MaybeSet("topk_method", g.Bool() ? "greedy" : "group_limited_greedy");
    }
    // Mostly a divisor of the expert count.
    const uint32_t n_group = g.OneIn(4) ? g.Range(0, 7) : (experts % 2 == 0 && g.Bool() ? 2 : 1);
    g.MaybeSet("n_group", n_group);
    g.MaybeSet("topk_group", g.OneIn(4) ? g.Range(0, n_group + 1) : g.Range(1, std::max(1u, n_group)));
  } else if (g.Bool()) {
    c["n_routed_experts"] = nullptr;
  }
  if (g.OneIn(8)) c["mlp_bias"] = g.Bool();
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    const std::string mlp = layer + ".mlp";
    if (moe && i >= first_dense && i % freq == 0) {
      g.Matrix(mlp + ".gate.weight", experts, d);
      if (v3) g.Vector(mlp + ".gate.e_score_correction_bias", experts);
      for (uint32_t e = 0; e < experts; ++e) g.Gated(absl::StrFormat("%s.experts.%d", mlp, e), d, moe_ff);
      if (shared > 0) g.Gated(mlp + ".shared_experts", d, uint64_t{moe_ff} * shared);
    } else {
      g.Gated(mlp, d, ff);
    }
    g.Vector(layer + ".post_attention_layernorm.weight", d, 1.0f);
  }
}

void GenBert(Generator& g) {
  const uint32_t d = g.Dim(), ff = g.Dim(), layers = g.Layers();
  json& c = g.config();
  c["hidden_size"] = d;
  c["intermediate_size"] = ff;
  c["num_hidden_layers"] = layers;
  g.MaybeSet("hidden_act", g.Activation());
  g.MaybeSet("layer_norm_eps", g.Eps());
  const std::string prefix = g.Bool() ? "bert." : "";
  const bool legacy = g.OneIn(4);  // TF-era LayerNorm.gamma / beta
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string l = absl::StrFormat("%sencoder.layer.%d", prefix, i);
    g.Matrix(l + ".intermediate.dense.weight", ff, d);
    g.Vector(l + ".intermediate.dense.bias", ff);
    g.Matrix(l + ".output.dense.weight", d, ff);
    g.Vector(l + ".output.dense.bias", d);
    g.Vector(l + ".output.LayerNorm." + (legacy ? "gamma" : "weight"), d, 1.0f);
    g.Vector(l + ".output.LayerNorm." + (legacy ? "beta" : "bias"), d);
  }
}

void GenGpt2(Generator& g) {
  const uint32_t d = g.Dim(), layers = g.Layers();
  uint32_t ff = g.Dim();
  json& c = g.config();
  c["n_embd"] = d;
  c["n_layer"] = layers;
  if (!g.MaybeSet("n_inner", ff)) {
    ff = 4 * d;  // GPT2MLP: 4 * hidden_size when n_inner is None
    if (g.Bool()) c["n_inner"] = nullptr;
  }
  g.MaybeSet("activation_function", g.Activation());
  g.MaybeSet("layer_norm_epsilon", g.Eps());
  const std::string prefix = g.Bool() ? "transformer." : "";
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string b = absl::StrFormat("%sh.%d", prefix, i);
    g.Matrix(b + ".mlp.c_fc.weight", d, ff);  // Conv1D: [in, out]
    g.Vector(b + ".mlp.c_fc.bias", ff);
    g.Matrix(b + ".mlp.c_proj.weight", ff, d);
    g.Vector(b + ".mlp.c_proj.bias", d);
    g.Vector(b + ".ln_2.weight", d, 1.0f);
    g.Vector(b + ".ln_2.bias", d);
  }
}

void GenT5(Generator& g) {
  const uint32_t d = g.Dim(), ff = g.Dim(), enc = g.Layers();
  json& c = g.config();
  c["d_model"] = d;
  c["d_ff"] = ff;
  c["num_layers"] = enc;
  uint32_t dec = g.Layers();
  if (!g.MaybeSet("num_decoder_layers", dec)) dec = enc;
  static const std::vector<std::string> kProj = {"relu", "gated-gelu", "gated-silu", "gelu_new",
                                                 "gated-relu", "gated-", "a-b-c", "gelu"};
  const std::string choice = g.OneIn(4) ? kProj[g.Range(5, 7)] : kProj[g.Range(0, 4)];
  const std::string proj = g.MaybeSet("feed_forward_proj", choice) ? choice : "relu";
  bool gated = proj.rfind("gated-", 0) == 0;
  if (g.OneIn(4)) c["dense_act_fn"] = g.Activation();
  if (g.OneIn(4)) c["is_gated_act"] = gated = g.Bool();
  g.MaybeSet("layer_norm_epsilon", g.Eps());
  const bool decoder = g.Bool();  // T5EncoderModel checkpoints have none
  auto block = [&](const std::string& stack, uint32_t i, int ff_index) {
    const std::string n = absl::StrFormat("%s.block.%d.layer.%d", stack, i, ff_index);
    if (gated) {
      g.Gated(n + ".DenseReluDense", d, ff, "wi_0", "wi_1", "wo");
    } else {
      g.Matrix(n + ".DenseReluDense.wi.weight", ff, d);
      g.Matrix(n + ".DenseReluDense.wo.weight", d, ff);
    }
    g.Vector(n + ".layer_norm.weight", d, 1.0f);
  };
  for (uint32_t i = 0; i < enc; ++i) block("encoder", i, 1);
  if (decoder) {
    for (uint32_t i = 0; i < dec; ++i) block("decoder", i, 2);
  }
}

void GenWhisper(Generator& g) {
  const uint32_t d = g.Dim(), enc = g.Layers(), dec = g.Layers();
  const uint32_t enc_ff = g.Dim(), dec_ff = g.Dim();
  json& c = g.config();
  c["d_model"] = d;
  c["encoder_layers"] = enc;
  c["decoder_layers"] = dec;
  c["encoder_ffn_dim"] = enc_ff;
  c["decoder_ffn_dim"] = dec_ff;
  g.MaybeSet("activation_function", g.Activation());
  const std::string prefix = g.Bool() ? "model." : "";
  auto layer = [&](const std::string& stack, uint32_t i, uint32_t ff) {
    const std::string n = absl::StrFormat("%s%s.layers.%d", prefix, stack, i);
    g.Matrix(n + ".fc1.weight", ff, d);
    g.Vector(n + ".fc1.bias", ff);
    g.Matrix(n + ".fc2.weight", d, ff);
    g.Vector(n + ".fc2.bias", d);
    g.Vector(n + ".final_layer_norm.weight", d, 1.0f);
    g.Vector(n + ".final_layer_norm.bias", d);
  };
  for (uint32_t i = 0; i < enc; ++i) layer("encoder", i, enc_ff);
  for (uint32_t i = 0; i < dec; ++i) layer("decoder", i, dec_ff);
}

void GenOpt(Generator& g) {
  const uint32_t d = g.Dim(), ff = g.Dim(), layers = g.Layers();
  json& c = g.config();
  c["hidden_size"] = d;
  c["ffn_dim"] = ff;
  c["num_hidden_layers"] = layers;
  g.MaybeSet("activation_function", g.Activation());
  g.MaybeSet("do_layer_norm_before", g.Bool());
  bool bias = true;
  if (g.OneIn(4)) c["enable_bias"] = bias = g.Bool();
  if (g.OneIn(8)) c["layer_norm_elementwise_affine"] = g.Bool();
  const std::string prefix = g.Bool() ? "model." : "";
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string n = absl::StrFormat("%sdecoder.layers.%d", prefix, i);
    g.Matrix(n + ".fc1.weight", ff, d);
    g.Matrix(n + ".fc2.weight", d, ff);
    if (bias) {
      g.Vector(n + ".fc1.bias", ff);
      g.Vector(n + ".fc2.bias", d);
    }
    g.Vector(n + ".final_layer_norm.weight", d, 1.0f);
    g.Vector(n + ".final_layer_norm.bias", d);
  }
}

// gpt_oss: every layer an MoE with a biased router and SWIGLU_OAI experts, published as MXFP4
// (<name>_blocks and <name>_scales, U8) or dequantised (floats, [experts, in, out]), their fused
// gate/up biases interleaved. Sizes in MXFP4's blocks of 32.
void GenGptOss(Generator& g) {
  const uint32_t d = 32 * g.Range(1, 2), ff = 32 * g.Range(1, 2), layers = g.Layers();
  json& c = g.config();
  c["hidden_size"] = d;
  c["intermediate_size"] = ff;
  c["num_hidden_layers"] = layers;
  const uint32_t experts = g.Range(1, 4);
  c["num_local_experts"] = experts;
  // transformers' key or OpenAI's own (or neither: 4, refused beyond the experts).
  g.MaybeSet(g.Bool() ? "num_experts_per_tok" : "experts_per_token", g.TopK(experts));
  if (g.OneIn(8)) c["swiglu_limit"] = g.Bool() ? 7.0 : 6.0;
  g.MaybeSet("rms_norm_eps", g.Eps());
  const bool packed = !g.OneIn(4);
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    const std::string mlp = layer + ".mlp", ex = mlp + ".experts.";
    g.Matrix(mlp + ".router.weight", experts, d);
    g.Vector(mlp + ".router.bias", experts);
    g.Matrix(ex + "gate_up_proj_bias", experts, 2 * ff);
    g.Matrix(ex + "down_proj_bias", experts, d);
    if (packed) {
      g.Tensor(ex + "gate_up_proj_blocks", {experts, 2 * ff, d / 32, 16}, "U8");
      g.Tensor(ex + "gate_up_proj_scales", {experts, 2 * ff, d / 32}, "E8M0");
      g.Tensor(ex + "down_proj_blocks", {experts, d, ff / 32, 16}, "U8");
      g.Tensor(ex + "down_proj_scales", {experts, d, ff / 32}, "E8M0");
    } else {
      g.Tensor(ex + "gate_up_proj", {experts, d, 2 * ff}, g.dtype());
      g.Tensor(ex + "down_proj", {experts, ff, d}, g.dtype());
    }
    g.Vector(layer + ".post_attention_layernorm.weight", d, 1.0f);
  }
}

// ---- Edits that make config.json and the tensors disagree ----

json OddValue(ByteReader& in) {
  switch (in.Range(0, 11)) {
    case 0: return "8";
    case 1: return -1;
    case 2: return 0;
    case 3: return int64_t{1} << 40;
    case 4: return UINT64_MAX;
    case 5: return 2.5;
    case 6: return 4.0;
    case 7: return nullptr;
    case 8: return true;
    case 9: return json::array({1, 2});
    case 10: return json::object();
    default: return 1e300;
  }
}

void EditConfig(ByteReader& in, json& c) {
  if (c.empty()) return;
  std::vector<std::string> keys;
  for (auto it = c.begin(); it != c.end(); ++it) keys.push_back(it.key());
  const std::string key = in.Pick(keys);
  if (in.OneIn(3)) {
    c.erase(key);
  } else {
    c[key] = OddValue(in);
  }
}

void EditTensor(ByteReader& in, std::vector<PlannedTensor>& tensors) {
  if (tensors.empty()) return;
  const size_t i = in.Range(0, static_cast<uint32_t>(tensors.size() - 1));
  PlannedTensor& t = tensors[i];
  switch (in.Range(0, 6)) {
    case 0:
      tensors.erase(tensors.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    case 1:  // one dimension one larger or smaller (never 0: zero-sized tensors are legal)
      if (uint64_t& dim = t.shape[in.Range(0, static_cast<uint32_t>(t.shape.size() - 1))]; dim > 1 && in.Bool()) {
        --dim;
      } else {
        ++dim;
      }
      break;
    case 2:  // transposed, or a trailing 1 added
      if (t.shape.size() == 2) {
        std::swap(t.shape[0], t.shape[1]);
      } else {
        t.shape.push_back(1);
      }
      break;
    case 3:  // flattened / a leading 1
      if (t.shape.size() == 2) {
        t.shape = {t.shape[0] * t.shape[1]};
      } else {
        t.shape.insert(t.shape.begin(), 1);
      }
      break;
    case 4:
      t.dtype = in.Pick(std::vector<std::string>{"F16", "BF16", "I8", "I64", "F32"});
      break;
    case 5:
      t.name += in.Bool() ? "x" : "";
      t.name.insert(0, "a.");
      break;
    default:  // a zero-sized tensor of the same rank
      t.shape[0] = 0;
      break;
  }
}

absl::Status WriteCheckpoint(ByteReader& in, const std::string& dir, const json& config,
                             const std::vector<PlannedTensor>& tensors, int shards) {
  testing::CheckpointWriter w;
  const uint8_t seed = in.Byte();
  testing::Rng rng(seed);
  uint32_t state = seed * 2654435761u + 1;  // the U8 tensors' bytes
  for (const PlannedTensor& t : tensors) {
    if (t.dtype == "I8" || t.dtype == "I64") {
      w.AddRaw(t.name, t.dtype, t.dtype == "I8" ? 1 : 8, t.shape);
    } else if (t.dtype == "U8" || t.dtype == "E8M0") {
      uint64_t n = 1;
      for (uint64_t dim : t.shape) n *= dim;
      std::vector<uint8_t> bytes(n);
      const bool any = in.OneIn(8);  // E8M0: any byte (255 is NaN; most overflow f16)
      for (uint8_t& b : bytes) {
        state = state * 1664525u + 1013904223u;
        const uint8_t r = static_cast<uint8_t>(state >> 24);
        b = t.dtype == "U8" || any ? r : static_cast<uint8_t>(112 + r % 24);  // 2^-15 .. 2^8
      }
      w.AddRaw(t.name, "U8", 1, t.shape, std::move(bytes));
    } else {
      w.AddRandom(t.name, t.shape, rng, 0.5f, t.dtype, t.center);
    }
  }
  std::string text = config.dump(1);
  if (in.OneIn(64)) text.resize(text.size() / 2);  // not JSON at all
  return w.Write(dir, text, shards);
}

// Gemma 3's vision-language checkpoints wrap a text model: the config under "text_config" (its
// model_type kept, or dropped: gemma3_text then), the tensors under "language_model.model." or
// "model.language_model." (or, to be refused, left as they were), a vision tensor beside them;
// now and then the text_config missing or not an object.
void WrapVisionLanguage(ByteReader& in, Generator& g) {
  json text = g.config();
  if (in.Bool()) text.erase("model_type");
  json wrapped = {{"model_type", "gemma3"}, {"text_config", std::move(text)}};
  if (in.OneIn(8)) {
    if (in.Bool()) {
      wrapped.erase("text_config");
    } else {
      wrapped["text_config"] = "text";
    }
  }
  g.config() = std::move(wrapped);
  static const char* kPrefixes[] = {"language_model.model.", "model.language_model.", ""};
  const std::string prefix = kPrefixes[in.Range(0, 2)];
  for (PlannedTensor& t : g.tensors()) {
    if (!prefix.empty() && t.name.compare(0, 6, "model.") == 0) t.name = prefix + t.name.substr(6);
  }
  g.tensors().push_back({"vision_tower.vision_model.embeddings.patch_embedding.weight", {2, 3},
                         "F32", 0.0f});
}

converter::ConvertOptions Options(ByteReader& in) {
  converter::ConvertOptions o;
  switch (in.Range(0, 3)) {
    case 1: o.dtype = DType::F32; break;
    case 2: o.dtype = DType::F16; break;
    case 3: o.dtype = DType::BF16; break;
    default: break;
  }
  static const uint32_t kAlign[] = {64, 1, 2, 3, 8, 1};
  o.d_ff_alignment = in.OneIn(32) ? 0 : kAlign[in.Range(0, 5)];  // 0 is refused
  if (in.OneIn(4)) {
    static const char* kLayers[] = {"0", "1", "0-1", "1,0", "2-1", "0-2,5", "x", " 0 , 2 "};
    o.layers = kLayers[in.Range(0, 7)];
  }
  o.include_norm = !in.OneIn(4);
  // One byte: 64 KiB per expert kept rare (as in.OneIn(16)); otherwise the expert records start
  // at multiples of 4 KiB (the default), of 256 bytes, or anywhere (0: none).
  const uint8_t align = in.Byte();
  o.page_align_experts = align % 16 == 15;
  static const uint64_t kExpertAlign[] = {kExpertPageAlignment, kExpertPageAlignment, 0, 256};
  o.expert_alignment = kExpertAlign[(align / 16) % 4];
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::ScratchDir() + "/ckpt";
  static const std::string out_dir = fuzz::ScratchDir() + "/out";
  static const bool made = (fuzz::MakeDir(out_dir), true);
  (void)made;
  ByteReader in(data, size);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  fuzz::MakeDir(dir);

  Generator g(in);
  const std::string& type = in.Pick(kModelTypes);
  g.config()["model_type"] = type;
  if (in.OneIn(4)) g.set_dtype(in.Bool() ? "F16" : "BF16");
  if (type == "mixtral") {
    GenMixtral(g);
  } else if (type == "qwen2_moe" || type == "qwen3_moe") {
    GenQwenMoe(g, type == "qwen2_moe");
  } else if (type == "deepseek_v2" || type == "deepseek_v3") {
    GenDeepseek(g, type == "deepseek_v3");
  } else if (type == "bert") {
    GenBert(g);
  } else if (type == "gpt2") {
    GenGpt2(g);
  } else if (type == "t5") {
    GenT5(g);
  } else if (type == "whisper") {
    GenWhisper(g);
  } else if (type == "opt") {
    GenOpt(g);
  } else if (type == "gpt_oss") {
    GenGptOss(g);
  } else {
    GenDecoderMlp(g, type);
  }
  // Most inputs stay consistent so that conversions get through to the writer and the loader.
  const uint32_t edits = in.OneIn(2) ? 0 : in.Range(1, 3);
  for (uint32_t i = 0; i < edits; ++i) {
    if (in.Bool()) {
      EditConfig(in, g.config());
    } else {
      EditTensor(in, g.tensors());
    }
  }
  const int shards = static_cast<int>(in.Range(1, 3));
  const converter::ConvertOptions options = Options(in);
  if (absl::Status st = WriteCheckpoint(in, dir, g.config(), g.tensors(), shards); !st.ok()) {
    Fail("writing the checkpoint: " + st.ToString());
  }
  // Decided by a byte past everything above, so that earlier inputs keep their meaning (an
  // exhausted input reads zeros: no wrap).
  if (in.OneIn(6)) {
    WrapVisionLanguage(in, g);
    std::filesystem::remove_all(dir, ec);
    fuzz::MakeDir(dir);
    if (absl::Status st = WriteCheckpoint(in, dir, g.config(), g.tensors(), shards); !st.ok()) {
      Fail("writing the wrapped checkpoint: " + st.ToString());
    }
  }

  const std::string out = out_dir + "/model.fflite";
  auto result = converter::ConvertCheckpoint(dir, out, options);
  if (getenv("FFLITE_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "%s: %s\n", type.c_str(),
                 result.ok() ? "converted" : result.status().ToString().c_str());
  }
  fuzz::CheckConversion(result.status(), out_dir, out);
  return 0;
}
