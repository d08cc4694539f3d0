// GGUF -> fflite layers. The names and keys are llama.cpp's (src/llama-arch.cpp: LLM_TENSOR_*,
// LLM_KV_*); the semantics of each architecture are those of its safetensors mapping in arch/.
#include "converter/gguf_convert.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "converter/gguf_relay.h"

namespace fflite {
namespace converter {
namespace {

using GgufPtr = std::shared_ptr<const GgufFile>;
using View = GgufView;

std::string ShapeString(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// What each architecture's FFN is. `post_norm`: the FFN output goes through a second RMSNorm
// before the residual (gemma2/3's post_feedforward_layernorm, blk.N.post_ffw_norm): the layer is
// a sandwich (NormPlacement::SANDWICH with an output norm).
struct GgufArch {
  const char* name;
  Activation activation;
  bool fused_gate_up;    // phi3: ffn_up holds gate then up, [2·d_ff, d_model]
  bool post_norm;
  bool normalize_top_k;  // the top-k weights renormalised (unless expert_weights_norm says)
  const char* norm = "ffn_norm";  // the FFN's pre-norm: blk.N.<norm>.weight
  // BERT: a plain FFN with biases, then LayerNorm(x + ffn(x)) (layer_output_norm, with a bias).
  bool bert = false;
};

constexpr GgufArch kGgufArchs[] = {
    {"llama", Activation::SILU, false, false, true},  // Mixtral-style experts renormalise
    {"qwen2", Activation::SILU, false, false, false},
    {"qwen3", Activation::SILU, false, false, false},
    {"qwen2moe", Activation::SILU, false, false, false},
    {"qwen3moe", Activation::SILU, false, false, true},
    {"gemma", Activation::GELU_TANH, false, false, false},
    {"gemma2", Activation::GELU_TANH, false, true, false},
    {"gemma3", Activation::GELU_TANH, false, true, false},
    {"phi3", Activation::SILU, true, false, false},
    // deepseek2 (DeepSeek-V2, -V3 and R1): leading dense layers, routed experts, shared experts
    // (ffn_*_shexp, one FFN of expert_shared_count experts' width), routing in Routing().
    {"deepseek2", Activation::SILU, false, false, false},
    // bert: GELU with erf, as transformers' "gelu" (llama.cpp runs its tanh approximation).
    {"bert", Activation::GELU_ERF, false, false, false, "", true},
    // gpt-oss: softmax over the top-k logits (= softmax renormalised over the top k), experts
    // with biases, the clamped SwiGLU, and its FFN norm stored as post_attention_norm.
    {"gpt-oss", Activation::SWIGLU_OAI, false, false, true, "post_attention_norm"},
};

// An FFN weight matrix of a block (blk.N.ffn_*.weight, 2-D or 3-D; not a router).
bool IsFfnMatrix(const GgufTensor& t) {
  const std::string& n = t.name;
  return n.rfind("blk.", 0) == 0 && n.find(".ffn_") != std::string::npos && n.size() > 7 &&
         n.compare(n.size() - 7, 7, ".weight") == 0 && t.ne.size() >= 2 &&
         n.find("_inp") == std::string::npos;
}

struct Ctx {
  GgufPtr file;
  const GgufArch* arch;
  GgufPlanOptions options;
  uint32_t d = 0;
  std::map<const GgufTensor*, bool> int8_fits;  // Int8Fits' answers

  // The tensor `name`, of exactly `ne` (`why` says where ne comes from), of a type this
  // converter reads.
  absl::StatusOr<const GgufTensor*> Need(const std::string& name, const std::vector<uint64_t>& ne,
                                         const std::string& why) const {
    const GgufTensor* t = file->Find(name);
    if (t == nullptr) {
      return absl::NotFoundError(absl::StrFormat(
          "'%s': tensor \"%s\" is missing; %s expects it with ne %s (%s)", file->path(), name,
          arch->name, ShapeString(ne), why));
    }
    if (t->ne != ne) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'%s': tensor \"%s\" has ne %s; %s expects %s (%s)", file->path(), name,
          ShapeString(t->ne), arch->name, ShapeString(ne), why));
    }
    if (t->type == nullptr || (!t->type->dequantizable && FloatDType(t->type->type) ==
                                                              DType::INVALID)) {
      return absl::UnimplementedError(absl::StrFormat(
          "'%s': tensor \"%s\" is of type %s, which this converter does not read (it reads F32, "
          "F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K, IQ4_NL, IQ4_XS and MXFP4)",
          file->path(), name, t->TypeName()));
    }
    return t;
  }
  // A vector [n] ("blk.3.ffn_norm.weight").
  absl::StatusOr<TensorSource> Vector(const std::string& name, uint64_t n,
                                      const std::string& why, std::vector<uint64_t> shape = {}) {
    FFLITE_ASSIGN_OR_RETURN(const GgufTensor* t, Need(name, {n}, why));
    if (shape.empty()) shape = {n};
    return GgufSource(View{file, t, 0, 1, n}, std::move(shape), false, options.native, false);
  }
  // Row `row` of a [rows, n] tensor (ne = [n, rows]) as a vector [n]: one expert's bias.
  absl::StatusOr<TensorSource> Row(const std::string& name, const std::vector<uint64_t>& ne,
                                   uint64_t row, const std::string& why) {
    FFLITE_ASSIGN_OR_RETURN(const GgufTensor* t, Need(name, ne, why));
    return GgufSource(View{file, t, row, 1, ne[0]}, {ne[0]}, false, options.native, false);
  }
  // A matrix [rows, cols] (ne = [cols, rows]), or rows [first, first + rows) of a [total, cols]
  // one, or expert e of a 3-D [experts, rows, cols] one (ne = [cols, rows, experts]).
  absl::StatusOr<TensorSource> Matrix(const std::string& name, const std::vector<uint64_t>& ne,
                                      uint64_t first_row, uint64_t rows, bool matrix,
                                      const std::string& why) {
    FFLITE_ASSIGN_OR_RETURN(const GgufTensor* t, Need(name, ne, why));
    return GgufSource(View{file, t, first_row, rows, ne[0]}, {rows, ne[0]}, matrix,
                      options.native, matrix && options.native && Int8Fits(t));
  }
  // Whether every block of `t` is an integer times a scale its kept dtype holds (i8's f16,
  // mxfp4's E8M0 bytes in [2, 254]: GgufScalesFitInt8), once per tensor: an MXFP4 tensor's scales
  // are read here, before any of its experts is planned.
  bool Int8Fits(const GgufTensor* t) {
    auto it = int8_fits.find(t);
    if (it != int8_fits.end()) return it->second;
    const bool fits = GgufScalesFitInt8(t->type->type, file->Data(*t), t->numel);
    int8_fits[t] = fits;
    return fits;
  }

  // A dimension key "<arch>.<key>": an integer in [1, 2^20], or element `layer` of an array.
  absl::StatusOr<uint32_t> Dim(const std::string& key, uint32_t layer) const {
    const std::string full = absl::StrCat(arch->name, ".", key);
    const HfConfig& m = file->metadata();
    if (m.Has(full) && m.json()[full].is_array()) {
      const nlohmann::json& a = m.json()[full];
      if (layer >= a.size() || !a[layer].is_number_integer() || a[layer].get<int64_t>() < 1 ||
          a[layer].get<int64_t>() > kMaxConfigDim) {
        return m.Error(full, absl::StrFormat("has no dimension in [1, %d] for layer %d",
                                             kMaxConfigDim, layer));
      }
      return static_cast<uint32_t>(a[layer].get<int64_t>());
    }
    return m.Dim(full);
  }
  std::string Key(const std::string& key) const { return absl::StrCat(arch->name, ".", key); }
};

absl::StatusOr<FfnSpec> GatedFfn(Ctx& c, const std::string& blk, const std::string& suffix,
                                 uint32_t ff, const std::string& ff_key) {
  FfnSpec f;
  f.activation = c.arch->activation;
  f.gated = true;
  f.d_ff = ff;
  const std::string why = absl::StrFormat("d_model %d, d_ff %d from %s", c.d, ff, ff_key);
  if (c.arch->fused_gate_up) {
    const std::string up = absl::StrCat(blk, ".ffn_up", suffix, ".weight");
    FFLITE_ASSIGN_OR_RETURN(f.gate, c.Matrix(up, {c.d, 2ull * ff}, 0, ff, true, why));
    FFLITE_ASSIGN_OR_RETURN(f.up, c.Matrix(up, {c.d, 2ull * ff}, ff, ff, true, why));
  } else {
    FFLITE_ASSIGN_OR_RETURN(
        f.gate, c.Matrix(absl::StrCat(blk, ".ffn_gate", suffix, ".weight"), {c.d, ff}, 0, ff,
                         true, why));
    FFLITE_ASSIGN_OR_RETURN(
        f.up, c.Matrix(absl::StrCat(blk, ".ffn_up", suffix, ".weight"), {c.d, ff}, 0, ff, true,
                       why));
  }
  FFLITE_ASSIGN_OR_RETURN(
      f.down, c.Matrix(absl::StrCat(blk, ".ffn_down", suffix, ".weight"), {ff, c.d}, 0, c.d, true,
                       why));
  return f;
}

// The routing keys (llama.cpp's expert_gating_func: 1 softmax, 2 sigmoid, 3 softmax over the
// top-k logits only, the same weights as a softmax renormalised over the top k). deepseek2 keeps
// its checkpoints' semantics (arch/deepseek.cc): softmax is DeepSeek-V2 (group score the highest
// expert score; the scale only without renormalisation), sigmoid DeepSeek-V3 (selection on the
// scores plus exp_probs_b, group score the sum of the top 2, the scale always); groups from
// expert_group_count / expert_group_used_count (absent: none, as llama.cpp routes then).
absl::Status Routing(Ctx& c, uint32_t experts, MoeSpec* moe) {
  const HfConfig& m = c.file->metadata();
  const bool deepseek = std::string(c.arch->name) == "deepseek2";
  FFLITE_ASSIGN_OR_RETURN(bool normalize,
                          m.Bool(c.Key("expert_weights_norm"), c.arch->normalize_top_k));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t gating, m.Count(c.Key("expert_gating_func"), 1, 3, 1));
  if (gating == 2 && !deepseek) {
    return absl::UnimplementedError(absl::StrFormat(
        "'%s': %s is 2 (sigmoid); the mapping of %s reads softmax routing (1 or 3) only",
        c.file->path(), c.Key("expert_gating_func"), c.arch->name));
  }
  if (gating == 3) normalize = true;
  moe->scoring = gating == 2 ? Scoring::SIGMOID : Scoring::SOFTMAX;
  FFLITE_ASSIGN_OR_RETURN(double scale, m.Float(c.Key("expert_weights_scale"), 1.0));
  if (!(scale > 0.0) || scale > std::numeric_limits<float>::max()) {
    return m.Error(c.Key("expert_weights_scale"),
                   absl::StrFormat("%g must be positive and at most %g (stored as float32)",
                                   scale, std::numeric_limits<float>::max()));
  }
  if (deepseek) {
    normalize = normalize && moe->top_k > 1;
    if (gating != 2 && normalize) scale = 1.0;  // V2 scales only unnormalised weights
    moe->group_scoring = gating == 2 ? GroupScoring::TOP2_SUM : GroupScoring::HIGHEST;
    FFLITE_ASSIGN_OR_RETURN(moe->n_group, m.Count(c.Key("expert_group_count"), 1, experts, 1));
    FFLITE_ASSIGN_OR_RETURN(moe->topk_group,
                            m.Count(c.Key("expert_group_used_count"), 1, moe->n_group, 1));
    if (experts % moe->n_group != 0) {
      return m.Error(c.Key("expert_group_count"),
                     absl::StrFormat("%d does not divide %s = %d", moe->n_group,
                                     c.Key("expert_count"), experts));
    }
    if (moe->n_group == 1) moe->topk_group = 1;
    const uint32_t per_group = experts / moe->n_group;
    if (moe->n_group > 1 && gating == 2 && per_group < 2) {
      return m.Error(c.Key("expert_group_count"), absl::StrFormat(
          "%d leaves %d expert per group; a group is scored by the sum of its top 2 experts",
          moe->n_group, per_group));
    }
    if (moe->n_group > 1 && uint64_t{moe->top_k} > uint64_t{moe->topk_group} * per_group) {
      return m.Error(c.Key("expert_used_count"), absl::StrFormat(
          "%d exceeds the %d experts of %d kept groups of %d", moe->top_k,
          uint64_t{moe->topk_group} * per_group, moe->topk_group, per_group));
    }
  }
  moe->normalize_top_k = normalize;
  moe->routed_scaling_factor = static_cast<float>(scale);
  return absl::OkStatus();
}

// BERT's layer (arch/bert.cc): LayerNorm(x + down(gelu(up·x + b_up)) + b_down).
absl::StatusOr<LayerSpec> BuildBertLayer(Ctx& c, uint32_t i) {
  const std::string blk = absl::StrFormat("blk.%d", i);
  const HfConfig& m = c.file->metadata();
  const uint32_t d = c.d;
  LayerSpec l;
  l.name = blk;
  l.kind = LayerKind::kDense;
  FFLITE_ASSIGN_OR_RETURN(const uint32_t ff, c.Dim("feed_forward_length", i));
  const std::string why = absl::StrFormat("d_model %d, d_ff %d from %s", d, ff,
                                          c.Key("feed_forward_length"));
  l.ffn.activation = c.arch->activation;
  l.ffn.gated = false;
  l.ffn.d_ff = ff;
  FFLITE_ASSIGN_OR_RETURN(l.ffn.up, c.Matrix(blk + ".ffn_up.weight", {d, ff}, 0, ff, true, why));
  FFLITE_ASSIGN_OR_RETURN(l.ffn.up_bias, c.Vector(blk + ".ffn_up.bias", ff, why));
  FFLITE_ASSIGN_OR_RETURN(l.ffn.down, c.Matrix(blk + ".ffn_down.weight", {ff, d}, 0, d, true,
                                               why));
  FFLITE_ASSIGN_OR_RETURN(l.ffn.down_bias, c.Vector(blk + ".ffn_down.bias", d, why));
  if (c.options.include_norm) {
    FFLITE_ASSIGN_OR_RETURN(const double eps,
                            m.Epsilon(c.Key("attention.layer_norm_epsilon"), 1e-12));
    NormSpec n;
    n.kind = NormKind::LAYER_NORM;
    n.placement = NormPlacement::POST;
    n.eps = static_cast<float>(eps);
    FFLITE_ASSIGN_OR_RETURN(n.weight, c.Vector(blk + ".layer_output_norm.weight", d, "[d_model]"));
    FFLITE_ASSIGN_OR_RETURN(n.bias, c.Vector(blk + ".layer_output_norm.bias", d, "[d_model]"));
    l.norm = std::move(n);
    l.residual = true;
  }
  return l;
}

absl::StatusOr<LayerSpec> BuildLayer(Ctx& c, uint32_t i) {
  if (c.arch->bert) return BuildBertLayer(c, i);
  const std::string blk = absl::StrFormat("blk.%d", i);
  const HfConfig& m = c.file->metadata();
  LayerSpec l;
  l.name = blk;
  const uint32_t d = c.d;
  if (c.file->Find(blk + ".ffn_gate_inp.weight") == nullptr) {
    l.kind = LayerKind::kDense;
    FFLITE_ASSIGN_OR_RETURN(const uint32_t ff, c.Dim("feed_forward_length", i));
    FFLITE_ASSIGN_OR_RETURN(l.ffn, GatedFfn(c, blk, "", ff, c.Key("feed_forward_length")));
  } else {
    l.kind = LayerKind::kMoe;
    FFLITE_ASSIGN_OR_RETURN(const uint32_t experts,
                            m.Count(c.Key("expert_count"), 1, 1 << 16));
    FFLITE_ASSIGN_OR_RETURN(l.moe.top_k, m.Count(c.Key("expert_used_count"), 1, experts));
    FFLITE_RETURN_IF_ERROR(Routing(c, experts, &l.moe));
    FFLITE_ASSIGN_OR_RETURN(
        l.moe.router, c.Matrix(blk + ".ffn_gate_inp.weight", {d, experts}, 0, experts, false,
                               absl::StrFormat("d_model %d, %d experts from %s", d, experts,
                                               c.Key("expert_count"))));
    // Experts' d_ff: expert_feed_forward_length where the architecture has it (qwen2moe,
    // qwen3moe), else feed_forward_length (Mixtral-style llama).
    const std::string ff_key = m.Has(c.Key("expert_feed_forward_length"))
                                   ? "expert_feed_forward_length"
                                   : "feed_forward_length";
    FFLITE_ASSIGN_OR_RETURN(const uint32_t ff, c.Dim(ff_key, i));
    const std::string why = absl::StrFormat("d_model %d, d_ff %d from %s, %d experts", d, ff,
                                            c.Key(ff_key), experts);
    if (l.moe.scoring == Scoring::SIGMOID && c.file->Find(blk + ".exp_probs_b.bias") != nullptr) {
      // DeepSeek-V3's e_score_correction_bias.
      FFLITE_ASSIGN_OR_RETURN(l.moe.score_correction_bias,
                              c.Vector(blk + ".exp_probs_b.bias", experts,
                                       "the score correction bias, [experts]"));
    }
    if (c.file->Find(blk + ".ffn_gate_inp.bias") != nullptr) {  // gpt-oss's router bias
      FFLITE_ASSIGN_OR_RETURN(l.moe.router_bias, c.Vector(blk + ".ffn_gate_inp.bias", experts,
                                                          "the router's bias, [experts]"));
    }
    // Expert biases (gpt-oss): [experts, d_ff] for gate and up, [experts, d_model] for down.
    const bool biases = c.file->Find(blk + ".ffn_gate_exps.bias") != nullptr;
    const bool stacked = c.file->Find(blk + ".ffn_gate_exps.weight") != nullptr ||
                         c.file->Find(blk + ".ffn_up_exps.weight") != nullptr;
    for (uint32_t e = 0; e < experts; ++e) {
      if (!stacked) {  // older files: one tensor per expert, blk.N.ffn_gate.E.weight
        FFLITE_ASSIGN_OR_RETURN(FfnSpec f, GatedFfn(c, blk, absl::StrCat(".", e), ff,
                                                    c.Key(ff_key)));
        l.moe.experts.push_back(std::move(f));
        continue;
      }
      FfnSpec f;
      f.activation = c.arch->activation;
      f.gated = true;
      f.d_ff = ff;
      FFLITE_ASSIGN_OR_RETURN(f.gate, c.Matrix(blk + ".ffn_gate_exps.weight", {d, ff, experts},
                                               uint64_t{e} * ff, ff, true, why));
      FFLITE_ASSIGN_OR_RETURN(f.up, c.Matrix(blk + ".ffn_up_exps.weight", {d, ff, experts},
                                             uint64_t{e} * ff, ff, true, why));
      FFLITE_ASSIGN_OR_RETURN(f.down, c.Matrix(blk + ".ffn_down_exps.weight", {ff, d, experts},
                                               uint64_t{e} * d, d, true, why));
      if (biases) {
        FFLITE_ASSIGN_OR_RETURN(f.gate_bias, c.Row(blk + ".ffn_gate_exps.bias", {ff, experts}, e,
                                                   why));
        FFLITE_ASSIGN_OR_RETURN(f.up_bias, c.Row(blk + ".ffn_up_exps.bias", {ff, experts}, e, why));
        FFLITE_ASSIGN_OR_RETURN(f.down_bias, c.Row(blk + ".ffn_down_exps.bias", {d, experts}, e,
                                                   why));
      }
      l.moe.experts.push_back(std::move(f));
    }
    if (const GgufTensor* up = c.file->Find(blk + ".ffn_up_shexp.weight"); up != nullptr) {
      // qwen2moe's shared expert, behind sigmoid(ffn_gate_inp_shexp · x); deepseek2's
      // expert_shared_count experts as one FFN of that many times the experts' d_ff.
      uint32_t sff = 0;
      std::string sff_key = c.Key("expert_shared_feed_forward_length");
      if (m.Has(sff_key)) {
        FFLITE_ASSIGN_OR_RETURN(sff, c.Dim("expert_shared_feed_forward_length", i));
      } else if (m.Has(c.Key("expert_shared_count"))) {
        sff_key = c.Key("expert_shared_count");
        FFLITE_ASSIGN_OR_RETURN(const uint32_t count, m.Count(sff_key, 1, 1 << 16));
        if (uint64_t{count} * ff > static_cast<uint64_t>(kMaxConfigDim)) {
          return m.Error(sff_key, absl::StrFormat("%d times the experts' d_ff %d exceeds %d",
                                                  count, ff, kMaxConfigDim));
        }
        sff = count * ff;
      } else if (up->ne.size() == 2 && up->ne[1] >= 1 && up->ne[1] <= kMaxConfigDim) {
        sff = static_cast<uint32_t>(up->ne[1]);
      } else {
        return absl::InvalidArgumentError(absl::StrFormat(
            "'%s': tensor \"%s\" has ne %s; a shared expert's up matrix is [d_model, d_ff]",
            c.file->path(), up->name, ShapeString(up->ne)));
      }
      FFLITE_ASSIGN_OR_RETURN(FfnSpec f, GatedFfn(c, blk, "_shexp", sff, sff_key));
      l.moe.shared_experts.push_back(std::move(f));
      if (c.file->Find(blk + ".ffn_gate_inp_shexp.weight") != nullptr) {
        FFLITE_ASSIGN_OR_RETURN(l.moe.shared_expert_gate,
                                c.Vector(blk + ".ffn_gate_inp_shexp.weight", d,
                                         "the shared expert's gate, [d_model]", {1, d}));
      }
    }
  }
  // The Llama-family pre-norm: h = x + ffn(rms_norm(x)·w). llama.cpp's converter stores Gemma's
  // weights with its 1 already added, so no unit offset here.
  if (c.options.include_norm) {
    FFLITE_ASSIGN_OR_RETURN(const double eps,
                            m.Epsilon(c.Key("attention.layer_norm_rms_epsilon"), 1e-5));
    NormSpec n;
    n.kind = NormKind::RMS_NORM;
    n.placement = c.arch->post_norm ? NormPlacement::SANDWICH : NormPlacement::PRE;
    n.eps = static_cast<float>(eps);
    n.unit_offset = false;
    FFLITE_ASSIGN_OR_RETURN(n.weight, c.Vector(absl::StrCat(blk, ".", c.arch->norm, ".weight"), d,
                                               "[d_model]"));
    if (c.arch->post_norm) {  // gemma2/3: y = x + rms_norm(ffn(rms_norm(x)·w1))·w2
      NormSpec out = n;
      FFLITE_ASSIGN_OR_RETURN(out.weight,
                              c.Vector(blk + ".post_ffw_norm.weight", d, "[d_model]"));
      l.output_norm = std::move(out);
    }
    l.norm = std::move(n);
    l.residual = true;
  }
  return l;
}

}  // namespace

std::string DescribeGguf(GgufPtr file) {
  std::string out = absl::StrFormat("%s: GGUF version %d, %d key-values, %d tensors\n",
                                    file->path(), file->version(), file->key_types().size(),
                                    file->tensors().size());
  std::string arch;
  auto plan = PlanGguf(file, GgufPlanOptions(), &arch);
  if (plan.ok()) {
    absl::StrAppendFormat(&out, "architecture %s: %d FFN sublayers, d_model %d\n", arch,
                          plan->sublayers.size(), plan->d_model);
  } else {
    absl::StrAppendFormat(&out, "does not convert: %s\n", plan.status().message());
  }
  struct Row {
    int count = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, Row> rows;
  std::map<std::string, std::string> how;
  for (const GgufTensor& t : file->tensors()) {
    if (!IsFfnMatrix(t)) continue;
    Row& r = rows[t.TypeName()];
    ++r.count;
    r.bytes += t.bytes;
    std::string h = "not read (no dequantisation for this type)";
    if (t.type != nullptr) {
      const GgmlType ty = t.type->type;
      if (FloatDType(ty) != DType::INVALID) {
        h = "as is";
      } else if (KeptDType(ty) != DType::INVALID) {
        h = std::string(DTypeName(KeptDType(ty))) + ", bits kept";
      } else if (ty == GgmlType::MXFP4) {
        h = "mxfp4, bits kept (f32, exact, where a block's E8M0 scale is 0, 1 or 255)";
      } else if (GgufScalesFitInt8(ty, nullptr, 0)) {
        h = "i8, bits kept";
      } else if (t.type->dequantizable) {
        h = "f32, exact values (no fflite kernels for this type yet)";
      }
    }
    how[t.TypeName()] = h;
  }
  out += "FFN weight matrices by type:\n";
  for (const auto& [type, r] : rows) {
    absl::StrAppendFormat(&out, "  %-8s %5d tensors %10.1f MiB  -> %s\n", type, r.count,
                          static_cast<double>(r.bytes) / (1 << 20), how[type]);
  }
  return out;
}

std::string GgufArchitectures() {
  std::vector<std::string> names;
  for (const GgufArch& a : kGgufArchs) names.push_back(a.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<ArchPlan> PlanGguf(GgufPtr file, const GgufPlanOptions& options,
                                  std::string* architecture) {
  const HfConfig& m = file->metadata();
  FFLITE_ASSIGN_OR_RETURN(const std::string name, m.String("general.architecture"));
  *architecture = name;
  const GgufArch* arch = nullptr;
  for (const GgufArch& a : kGgufArchs) {
    if (name == a.name) arch = &a;
  }
  if (arch == nullptr) {
    return absl::UnimplementedError(absl::StrFormat(
        "'%s': general.architecture \"%s\" is not supported; supported GGUF architectures: %s",
        file->path(), name, GgufArchitectures()));
  }
  if (arch->activation == Activation::SWIGLU_OAI && m.Has(absl::StrCat(name, ".swiglu_limit"))) {
    FFLITE_ASSIGN_OR_RETURN(const double limit, m.Float(absl::StrCat(name, ".swiglu_limit"), 7.0));
    if (limit != 7.0) {
      return m.Error(absl::StrCat(name, ".swiglu_limit"),
                     absl::StrFormat("is %g; fflite's SWIGLU_OAI clamps at 7", limit));
    }
  }
  auto ctx = std::make_shared<Ctx>();
  ctx->file = file;
  ctx->arch = arch;
  ctx->options = options;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, m.Dim(ctx->Key("embedding_length")));
  ctx->d = plan.d_model;
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, m.Count(ctx->Key("block_count"), 1, 1 << 16));
  plan.metadata = {{"source.format", absl::StrFormat("GGUF version %d", file->version())}};
  if (m.Has("general.name")) {
    FFLITE_ASSIGN_OR_RETURN(const std::string model_name, m.String("general.name"));
    plan.metadata.push_back({"source.name", model_name});
  }
  // The types of the file's FFN weight matrices ("Q4_K: 64, Q6_K: 32"), so that a converted
  // file says which of its matrices kept their bits.
  std::map<std::string, int> types;
  for (const GgufTensor& t : file->tensors()) {
    if (IsFfnMatrix(t)) ++types[t.TypeName()];
  }
  std::vector<std::string> parts;
  for (const auto& [type, count] : types) parts.push_back(absl::StrCat(type, ": ", count));
  plan.metadata.push_back({"source.gguf_ffn_types", absl::StrJoin(parts, ", ")});
  for (uint32_t i = 0; i < layers; ++i) {
    plan.sublayers.push_back({absl::StrFormat("blk.%d", i),
                              [ctx, i]() { return BuildLayer(*ctx, i); }});
  }
  return plan;
}

}  // namespace converter
}  // namespace fflite
