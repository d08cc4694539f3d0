// gpt_oss (OpenAI's gpt-oss-20b / -120b): every layer an MoE behind an RMS pre-norm. The router is
// a linear layer with a bias; the top num_experts_per_tok logits are chosen and softmaxed among
// themselves (the same weights as a softmax over all experts renormalised over the top k, which
// is how fflite stores it). Each expert is a clamped SwiGLU with biases (Activation::SWIGLU_OAI):
// gate and up interleaved in one gate_up_proj (gate = even output rows, up = odd), then down.
// Source: transformers models/gpt_oss/modeling_gpt_oss.py (GptOssTopKRouter, GptOssExperts) and
// integrations/mxfp4.py (convert_moe_packed_tensors).
//
// The experts are published in MXFP4: <name>_blocks [experts, rows, k/32, 16] uint8 (byte j of a
// block holds its elements 2j, low nibble, and 2j + 1, high nibble, each an e2m1 code) and
// <name>_scales [experts, rows, k/32] uint8 (e8m0: 2^(s - 127)). Without an output dtype
// (fflite-convert --dtype) a tensor whose scales all are in [2, 254] (E8m0ScaleHeld: 2^(s - 128)
// a normal f32) is kept as dtype mxfp4, its codes and scale bytes re-laid (4.25 bits per weight);
// otherwise, and with an output dtype, they are dequantised exactly (every value is an e2m1 value
// times a power of two, exact in f32 and in bf16: --dtype bf16 keeps them exactly at half the
// size of f32). Checkpoints saved dequantised (gate_up_proj [experts, hidden, 2·intermediate],
// down_proj [experts, intermediate, hidden], as the modeling code's parameters) convert too.
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"
#include "converter/gguf_types.h"
#include "format/quant_layout.h"
#include "kernels/quant_types.h"

namespace fflite {
namespace converter {
namespace {

// e2m1 codes: sign bit 3, then exponent and mantissa.
constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

std::string Shape(const std::vector<uint64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += absl::StrFormat("%s%d", i ? ", " : "", s[i]);
  return out + "]";
}

// A checkpoint tensor of exactly `shape` and safetensors dtype `dtype` (U8 blocks and scales,
// which the float lookups refuse).
absl::StatusOr<TensorRef> RawTensor(const ArchContext& ctx, const std::string& name,
                                    const std::vector<uint64_t>& shape, const std::string& dtype,
                                    const std::string& dims) {
  FFLITE_ASSIGN_OR_RETURN(TensorRef ref, ctx.checkpoint.Find(name));
  if (ref.tensor->shape != shape || ref.tensor->dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s is %s %s; gpt_oss expects %s %s = %s", ref.Describe(), ref.tensor->dtype,
        Shape(ref.tensor->shape), dtype, dims, Shape(shape)));
  }
  return ref;
}


// Whether dtype mxfp4 keeps every e8m0 scale s of a checkpoint's _scales tensor (E8m0ScaleHeld).
bool ScalesHeld(const TensorRef& scales) {
  const uint8_t* p = scales.file->Data(*scales.tensor);
  for (uint64_t i = 0; i < scales.tensor->end - scales.tensor->begin; ++i) {
    if (!E8m0ScaleHeld(p[i])) return false;
  }
  return true;
}

// Rows first, first + step, ... (count of them) of expert e's [rows, k] MXFP4 matrix, as f32, or
// (`keep`: the tensor's scales are held, ScalesHeld) as dtype mxfp4: each value's e2m1 code as
// its index and the scale byte as it is, so every value d·level is the same.
TensorSource Mxfp4Rows(const TensorRef& blocks, const TensorRef& scales, uint64_t e,
                       uint64_t rows, uint64_t k, uint64_t first, uint64_t step, uint64_t count,
                       bool keep) {
  TensorSource s;
  s.shape = {count, k};
  if (keep) {
    s.dtype = DType::MXFP4;
    s.fill = [=](uint8_t* dst, uint64_t bytes) -> absl::Status {
      if (bytes != QuantMatrixGeometry(DType::MXFP4, count, k).bytes()) {
        return absl::InternalError(blocks.Describe() + ": byte count");
      }
      const uint64_t nb = k / 32;
      const uint8_t* bp = blocks.file->Data(*blocks.tensor) + e * rows * nb * 16;
      const uint8_t* sp = scales.file->Data(*scales.tensor) + e * rows * nb;
      std::vector<int8_t> q(count * k);
      std::vector<uint8_t> e8m0(count * nb);
      for (uint64_t i = 0; i < count; ++i) {
        const uint64_t r = first + i * step;
        for (uint64_t b = 0; b < nb; ++b) {
          e8m0[i * nb + b] = sp[r * nb + b];
          if (!E8m0ScaleHeld(e8m0[i * nb + b])) {  // checked by ScalesHeld
            return absl::InternalError(scales.Describe() + ": scale range");
          }
          const uint8_t* c = bp + (r * nb + b) * 16;
          int8_t* out = q.data() + i * k + b * 32;
          for (uint64_t j = 0; j < 16; ++j) {
            out[2 * j] = kMxfp4Levels[c[j] & 0xf];
            out[2 * j + 1] = kMxfp4Levels[c[j] >> 4];
          }
        }
      }
      PackMxfp4Matrix(count, k, q.data(), e8m0.data(), dst);
      return absl::OkStatus();
    };
    return s;
  }
  s.dtype = DType::F32;
  s.fill = [=](uint8_t* dst, uint64_t bytes) -> absl::Status {
    if (bytes != count * k * 4) return absl::InternalError(blocks.Describe() + ": byte count");
    const uint64_t nb = k / 32;
    const uint8_t* bp = blocks.file->Data(*blocks.tensor) + e * rows * nb * 16;
    const uint8_t* sp = scales.file->Data(*scales.tensor) + e * rows * nb;
    std::vector<float> row(k);
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t r = first + i * step;
      for (uint64_t b = 0; b < nb; ++b) {
        const int exp = static_cast<int>(sp[r * nb + b]) - 127;
        const uint8_t* q = bp + (r * nb + b) * 16;
        for (uint64_t j = 0; j < 16; ++j) {
          row[b * 32 + 2 * j] = std::ldexp(kE2m1[q[j] & 0xf], exp);
          row[b * 32 + 2 * j + 1] = std::ldexp(kE2m1[q[j] >> 4], exp);
        }
      }
      std::memcpy(dst + i * k * 4, row.data(), k * 4);
    }
    return absl::OkStatus();
  };
  return s;
}

// out[i][j] = t[base + (first + i·step)·row_stride + j·col_stride] as f32: strided rows and
// columns of a float tensor (interleaved halves, transposed matrices, one expert's bias).
TensorSource Strided(const TensorRef& t, std::vector<uint64_t> shape, uint64_t base,
                     uint64_t first, uint64_t step, uint64_t row_stride, uint64_t col_stride) {
  TensorSource s;
  s.dtype = DType::F32;
  s.shape = std::move(shape);
  const uint64_t rows = s.shape.size() == 2 ? s.shape[0] : 1, cols = s.shape.back();
  s.fill = [=](uint8_t* dst, uint64_t bytes) -> absl::Status {
    if (bytes != rows * cols * 4) return absl::InternalError(t.Describe() + ": byte count");
    const uint8_t* p = t.file->Data(*t.tensor);
    FFLITE_ASSIGN_OR_RETURN(const DType dtype, ConvertibleDType(t.tensor->dtype, t.Describe()));
    const size_t size = DTypeSize(dtype);
    for (uint64_t i = 0; i < rows; ++i) {
      for (uint64_t j = 0; j < cols; ++j) {
        // Widened exactly (f16 and bf16 to f32), one element at a time: the strides.
        const uint64_t at = base + (first + i * step) * row_stride + j * col_stride;
        ConvertElements(dtype, p + at * size, DType::F32, dst + (i * cols + j) * 4, 1);
      }
    }
    return absl::OkStatus();
  };
  return s;
}

}  // namespace

absl::StatusOr<ArchPlan> ConvertGptOss(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("hidden_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t ff, c.Dim("intermediate_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, c.Count("num_hidden_layers", 1, 1 << 16));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t experts, c.Count("num_local_experts", 1, 1 << 16));
  // transformers' GptOssConfig calls it num_experts_per_tok; OpenAI's own config experts_per_token.
  const std::string top_k_key =
      c.Has("num_experts_per_tok") || !c.Has("experts_per_token") ? "num_experts_per_tok"
                                                                  : "experts_per_token";
  FFLITE_ASSIGN_OR_RETURN(const uint32_t top_k, c.Count(top_k_key, 1, experts, 4));
  FFLITE_ASSIGN_OR_RETURN(const double limit, c.Float("swiglu_limit", 7.0));
  if (limit != 7.0) {
    return c.Error("swiglu_limit", absl::StrFormat(
        "is %g; fflite's SWIGLU_OAI activation clamps at 7 (gpt-oss's published value)", limit));
  }
  FFLITE_ASSIGN_OR_RETURN(const double eps, c.Epsilon("rms_norm_eps", 1e-5));
  const uint32_t d = plan.d_model;
  if (d % 32 != 0 || ff % 32 != 0) {
    return c.Error("hidden_size", absl::StrFormat(
        "%d and intermediate_size %d must be multiples of 32 (MXFP4 blocks)", d, ff));
  }
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    const std::string mlp = layer + ".mlp";
    plan.sublayers.push_back({mlp, [&ctx, layer, mlp, d, ff, experts, top_k,
                                    eps]() -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = mlp;
      l.kind = LayerKind::kMoe;
      l.moe.top_k = top_k;
      l.moe.scoring = Scoring::SOFTMAX;
      l.moe.normalize_top_k = true;
      FFLITE_ASSIGN_OR_RETURN(l.moe.router, Tensor(ctx, mlp + ".router.weight", {experts, d},
                                                   "[num_local_experts, hidden_size]"));
      FFLITE_ASSIGN_OR_RETURN(l.moe.router_bias, Tensor(ctx, mlp + ".router.bias", {experts},
                                                        "[num_local_experts]"));
      const std::string ex = mlp + ".experts.";
      FFLITE_ASSIGN_OR_RETURN(TensorRef gu_bias,
                              FindTensor(ctx, ex + "gate_up_proj_bias", {experts, 2ull * ff},
                                         "[num_local_experts, 2·intermediate_size]"));
      FFLITE_ASSIGN_OR_RETURN(TensorRef down_bias,
                              FindTensor(ctx, ex + "down_proj_bias", {experts, d},
                                         "[num_local_experts, hidden_size]"));
      const bool packed = ctx.checkpoint.Has(ex + "gate_up_proj_blocks");
      TensorRef gu_blocks, gu_scales, down_blocks, down_scales, gu, down;
      bool keep_gu = false, keep_down = false;
      if (packed) {
        FFLITE_ASSIGN_OR_RETURN(gu_blocks, RawTensor(ctx, ex + "gate_up_proj_blocks",
                                                     {experts, 2ull * ff, d / 32, 16}, "U8",
                                                     "[experts, 2·intermediate, hidden/32, 16]"));
        FFLITE_ASSIGN_OR_RETURN(gu_scales, RawTensor(ctx, ex + "gate_up_proj_scales",
                                                     {experts, 2ull * ff, d / 32}, "U8",
                                                     "[experts, 2·intermediate, hidden/32]"));
        FFLITE_ASSIGN_OR_RETURN(down_blocks, RawTensor(ctx, ex + "down_proj_blocks",
                                                       {experts, d, ff / 32, 16}, "U8",
                                                       "[experts, hidden, intermediate/32, 16]"));
        FFLITE_ASSIGN_OR_RETURN(down_scales, RawTensor(ctx, ex + "down_proj_scales",
                                                       {experts, d, ff / 32}, "U8",
                                                       "[experts, hidden, intermediate/32]"));
        // Per tensor, so that every expert's gate, up and down get one dtype each.
        keep_gu = ctx.native && ScalesHeld(gu_scales);
        keep_down = ctx.native && ScalesHeld(down_scales);
      } else {
        FFLITE_ASSIGN_OR_RETURN(gu, FindTensor(ctx, ex + "gate_up_proj", {experts, d, 2ull * ff},
                                               "[experts, hidden_size, 2·intermediate_size]"));
        FFLITE_ASSIGN_OR_RETURN(down, FindTensor(ctx, ex + "down_proj", {experts, ff, d},
                                                 "[experts, intermediate_size, hidden_size]"));
      }
      for (uint64_t e = 0; e < experts; ++e) {
        FfnSpec f;
        f.activation = Activation::SWIGLU_OAI;
        f.gated = true;
        f.d_ff = ff;
        if (packed) {
          f.gate = Mxfp4Rows(gu_blocks, gu_scales, e, 2ull * ff, d, 0, 2, ff, keep_gu);
          f.up = Mxfp4Rows(gu_blocks, gu_scales, e, 2ull * ff, d, 1, 2, ff, keep_gu);
          f.down = Mxfp4Rows(down_blocks, down_scales, e, d, ff, 0, 1, d, keep_down);
        } else {
          // gate_up_proj[e] is [hidden, 2·ff] (x @ W): gate row i is column 2i.
          f.gate = Strided(gu, {ff, d}, e * d * 2 * ff, 0, 2, 1, 2ull * ff);
          f.up = Strided(gu, {ff, d}, e * d * 2 * ff, 1, 2, 1, 2ull * ff);
          f.down = Strided(down, {d, ff}, e * ff * d, 0, 1, 1, d);
        }
        f.gate_bias = Strided(gu_bias, {ff}, e * 2 * ff, 0, 1, 1, 2);
        f.up_bias = Strided(gu_bias, {ff}, e * 2 * ff, 1, 1, 1, 2);
        f.down_bias = Strided(down_bias, {d}, e * d, 0, 1, 0, 1);
        l.moe.experts.push_back(std::move(f));
      }
      FFLITE_RETURN_IF_ERROR(PostAttentionPreNorm(ctx, layer, d, eps, /*unit_offset=*/false, &l));
      return l;
    }});
  }
  plan.metadata = {{"source.swiglu_limit", "7"}};
  return plan;
}

}  // namespace converter
}  // namespace fflite
