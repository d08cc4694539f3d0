// Reads a model file: FlatBuffers verifier first, then semantic validation of every offset, size,
// shape, dtype, enum, alignment and MoE parameter, reading no weight byte; the scales of quantised
// matrices are checked on first use (Model::CheckScales).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "flatbuffers/flatbuffers.h"
#include "format/model.h"
#include "format/quant_layout.h"

namespace fflite {

size_t DTypeSize(DType dtype) {
  const DTypeInfo* info = FindDType(dtype);
  return info != nullptr && info->block_elems == 1 ? info->block_bytes : 0;
}

const char* ActivationName(Activation activation) {
  switch (activation) {
    case Activation::RELU: return "relu";
    case Activation::GELU_ERF: return "gelu";
    case Activation::GELU_TANH: return "gelu_tanh";
    case Activation::SILU: return "silu";
    case Activation::SIGMOID: return "sigmoid";
    case Activation::SWIGLU_OAI: return "swiglu_oai";
    default: return "invalid";
  }
}

absl::Status CheckHostByteOrder(bool host_is_little_endian) {
  if (host_is_little_endian) return absl::OkStatus();
  return absl::UnimplementedError(
      "this host is big-endian; fflite files are little-endian and are read only on "
      "little-endian hosts");
}

namespace {

// Largest d_model / d_ff accepted: far above any real model, small enough that shapes cannot
// overflow 64-bit sizes.
constexpr uint64_t kMaxDim = 1u << 20;
constexpr uint32_t kMaxExperts = 1u << 16;
constexpr uint32_t kMaxLayers = 1u << 16;

bool HostIsLittleEndian() {
  const uint16_t probe = 1;
  uint8_t first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

absl::Status Bad(const std::string& msg) { return absl::DataLossError(msg); }

std::string ShapeString(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

struct Range {
  uint64_t begin, end;
  std::string name;
};

}  // namespace

class ModelParser {
 public:
  ModelParser(Model* model, const schema::Model* root) : model_(model), root_(root) {}

  absl::Status Parse();

 private:
  // `weight_matrix`: an FFN's up, gate or down matrix, the only tensors that may be quantised;
  // `value_rows_ok`: a down matrix, the only tensor that may be stored as VALUE_ROWS.
  absl::Status ParseTensor(const schema::Tensor* t, const std::string& path,
                           const std::vector<uint64_t>& expected_shape, bool required,
                           TensorView* out, bool weight_matrix = false,
                           bool value_rows_ok = false);
  absl::Status ParseFfn(const schema::Ffn* f, const std::string& path, FfnView* out);
  absl::Status ParseMoe(const schema::Moe* m, const std::string& path, MoeView* out);
  absl::Status ParseNorm(const schema::Norm* n, const std::string& path, NormView* out);
  absl::Status CheckOverlaps();

  Model* model_;
  const schema::Model* root_;
  std::vector<Range> ranges_;
};

absl::Status ModelParser::ParseTensor(const schema::Tensor* t, const std::string& path,
                                      const std::vector<uint64_t>& expected_shape, bool required,
                                      TensorView* out, bool weight_matrix, bool value_rows_ok) {
  *out = TensorView();
  if (t == nullptr) {
    if (required) return Bad(absl::StrCat(path, ": required tensor is missing"));
    return absl::OkStatus();
  }
  const DType dtype = t->dtype();
  const DTypeInfo* info = FindDType(dtype);
  if (info == nullptr) {
    return Bad(absl::StrFormat(
        "%s: dtype %d is not a known dtype (%s); the file may come from a newer fflite", path,
        static_cast<int>(dtype), KnownDTypesString()));
  }
  if (dtype == DType::Q2_K_PACKED && model_->version_minor_ < 11) {
    // Format 1.9 and 1.10 kept Q2_K's scales and mins in bytes of their own (2.875 bits per
    // weight); 1.11 keeps GGUF's bytes (2.625). The same GGUF or checkpoint converts again.
    return Bad(absl::StrFormat(
        "%s: dtype q2_k of format %d.%d (2.875 bits per weight) is no longer read; this fflite "
        "reads q2_k of format 1.11 (GGUF's 2.625): convert the model again",
        path, model_->version_major_, model_->version_minor_));
  }
  if (dtype == DType::MXFP4 && model_->version_minor_ < 12) {
    // Format 1.10 and 1.11 kept MXFP4's scale as an f16 (4.5 bits per weight); 1.12 keeps its
    // E8M0 byte (4.25).
    return Bad(absl::StrFormat(
        "%s: dtype mxfp4 of format %d.%d (4.5 bits per weight) is no longer read; this fflite "
        "reads mxfp4 of format 1.12 (its E8M0 scale bytes, 4.25): convert the model again",
        path, model_->version_major_, model_->version_minor_));
  }
  if (dtype == DType::Q3_K_PACKED && model_->version_minor_ < 13) {
    // Format 1.8 to 1.12 kept Q3_K's 6-bit scale codes as bytes (3.5625 bits per weight); 1.13
    // packs them as GGUF does (3.4375).
    return Bad(absl::StrFormat(
        "%s: dtype q3_k of format %d.%d (3.5625 bits per weight) is no longer read; this fflite "
        "reads q3_k of format 1.13 (GGUF's 3.4375): convert the model again",
        path, model_->version_major_, model_->version_minor_));
  }
  if (info->quantized && !weight_matrix) {
    return Bad(absl::StrFormat("%s: dtype %s is only allowed for the up, gate and down matrices",
                               path, info->name));
  }
  const Layout layout = t->layout();
  if (!LayoutValidFor(dtype, layout)) {
    return Bad(absl::StrFormat("%s: layout %d (%s) is not a layout of dtype %s", path,
                               static_cast<int>(layout), LayoutName(layout), info->name));
  }
  if (layout == Layout::VALUE_ROWS && !value_rows_ok) {
    return Bad(absl::StrFormat("%s: layout value_rows is only allowed for down matrices", path));
  }
  // The verifier does not check the 8-byte alignment of a vector's elements, so a crafted file
  // can misalign them: copy the bytes out instead of loading them as uint64_t.
  const uint32_t rank = t->shape() == nullptr ? 0 : t->shape()->size();
  if (rank != expected_shape.size()) {
    return Bad(absl::StrFormat("%s: shape has %d dimensions, expected %s", path, rank,
                               ShapeString(expected_shape)));
  }
  std::vector<uint64_t> shape(rank);
  if (rank > 0) std::memcpy(shape.data(), t->shape()->Data(), rank * sizeof(uint64_t));
  if (shape != expected_shape) {
    return Bad(absl::StrFormat("%s: shape %s does not match the expected %s", path,
                               ShapeString(shape), ShapeString(expected_shape)));
  }
  if (info->quantized && info->block_elems > kQuantBlock && rank == 2 &&
      shape[1] % info->block_elems != 0) {
    return Bad(absl::StrFormat("%s: in_features %d is not a multiple of %d, which dtype %s needs",
                               path, shape[1], info->block_elems, info->name));
  }
  // Each dimension <= kMaxDim and rank <= 2: no overflow.
  const uint64_t expected_size = TensorBytes(dtype, shape, layout);
  if (t->size() != expected_size) {
    return Bad(absl::StrFormat("%s: size %d bytes does not match shape %s of %s (%d bytes)", path,
                               t->size(), ShapeString(shape), DTypeName(dtype), expected_size));
  }
  const uint64_t data_size = model_->data_size_;
  if (t->offset() % kTensorAlignment != 0) {
    return Bad(absl::StrFormat("%s: offset %d is not a multiple of %d", path, t->offset(),
                               kTensorAlignment));
  }
  if (t->offset() > data_size || t->size() > data_size - t->offset()) {
    return Bad(absl::StrFormat("%s: offset %d + size %d exceeds data section of %d bytes", path,
                               t->offset(), t->size(), data_size));
  }
  out->dtype = dtype;
  out->shape = std::move(shape);
  out->offset = t->offset();
  out->size = t->size();
  out->layout = layout;
  out->data = model_->bytes_ + model_->data_offset_ + t->offset();
  if (info->quantized) {
    // Its scales are checked on first use (Model::CheckScales), not here: that reads the whole
    // matrix, and loading reads only the metadata.
    if (model_->quant_paths_.size() >= kNoQuantId) {
      return Bad(absl::StrFormat("%s: more than %d quantised matrices", path, kNoQuantId - 1));
    }
    out->quant_id = static_cast<uint32_t>(model_->quant_paths_.size());
    model_->quant_paths_.push_back(path);
  }
  if (t->size() > 0) ranges_.push_back({t->offset(), t->offset() + t->size(), path});
  return absl::OkStatus();
}

absl::Status ModelParser::ParseFfn(const schema::Ffn* f, const std::string& path, FfnView* out) {
  if (f == nullptr) return Bad(absl::StrCat(path, ": missing"));
  const auto act = f->activation();
  if (act == Activation::INVALID || act > Activation::MAX) {
    return Bad(absl::StrFormat("%s.activation: value %d is not a known activation (1..%d)", path,
                               static_cast<int>(act), static_cast<int>(Activation::MAX)));
  }
  out->activation = act;
  out->gated = f->gated();
  out->d_model = f->d_model();
  out->d_ff = f->d_ff();
  out->d_ff_padded = f->d_ff_padded();
  if (out->d_model != model_->d_model_) {
    return Bad(absl::StrFormat("%s.d_model: %d differs from the model's d_model %d", path,
                               out->d_model, model_->d_model_));
  }
  if (out->d_ff == 0) return Bad(absl::StrCat(path, ".d_ff: must be at least 1, got 0"));
  if (out->d_ff_padded < out->d_ff || out->d_ff_padded > kMaxDim) {
    return Bad(absl::StrFormat("%s.d_ff_padded: %d must be in [d_ff = %d, %d]", path,
                               out->d_ff_padded, out->d_ff, kMaxDim));
  }
  const uint64_t d = out->d_model, ff = out->d_ff_padded;
  FFLITE_RETURN_IF_ERROR(ParseTensor(f->up(), path + ".up", {ff, d}, true, &out->up, true));
  if (out->gated) {
    FFLITE_RETURN_IF_ERROR(ParseTensor(f->gate(), path + ".gate", {ff, d}, true, &out->gate, true));
  } else if (f->gate() != nullptr) {
    return Bad(absl::StrCat(path, ".gate: present but the FFN is not gated"));
  }
  FFLITE_RETURN_IF_ERROR(ParseTensor(f->down(), path + ".down", {d, ff}, true, &out->down, true,
                                     /*value_rows_ok=*/true));
  FFLITE_RETURN_IF_ERROR(ParseTensor(f->up_bias(), path + ".up_bias", {ff}, false, &out->up_bias));
  if (!out->gated && f->gate_bias() != nullptr) {
    return Bad(absl::StrCat(path, ".gate_bias: present but the FFN is not gated"));
  }
  FFLITE_RETURN_IF_ERROR(
      ParseTensor(f->gate_bias(), path + ".gate_bias", {ff}, false, &out->gate_bias));
  FFLITE_RETURN_IF_ERROR(
      ParseTensor(f->down_bias(), path + ".down_bias", {d}, false, &out->down_bias));
  return absl::OkStatus();
}

namespace {

// Experts of one MoE share one shape so that they can be batched and packed alike.
std::string FfnShapeDifference(const FfnView& a, const FfnView& b) {
  if (a.activation != b.activation) {
    return absl::StrFormat("activation %s vs %s", ActivationName(b.activation),
                           ActivationName(a.activation));
  }
  if (a.gated != b.gated) return absl::StrFormat("gated %d vs %d", b.gated, a.gated);
  if (a.d_ff != b.d_ff) return absl::StrFormat("d_ff %d vs %d", b.d_ff, a.d_ff);
  if (a.d_ff_padded != b.d_ff_padded) {
    return absl::StrFormat("d_ff_padded %d vs %d", b.d_ff_padded, a.d_ff_padded);
  }
  const TensorView* ta[] = {&a.up, &a.gate, &a.down, &a.up_bias, &a.gate_bias, &a.down_bias};
  const TensorView* tb[] = {&b.up, &b.gate, &b.down, &b.up_bias, &b.gate_bias, &b.down_bias};
  const char* names[] = {"up", "gate", "down", "up_bias", "gate_bias", "down_bias"};
  for (int i = 0; i < 6; ++i) {
    if (ta[i]->present() != tb[i]->present()) {
      return absl::StrFormat("%s %s vs %s", names[i], tb[i]->present() ? "present" : "absent",
                             ta[i]->present() ? "present" : "absent");
    }
    if (ta[i]->present() && ta[i]->dtype != tb[i]->dtype) {
      return absl::StrFormat("%s dtype %s vs %s", names[i], DTypeName(tb[i]->dtype),
                             DTypeName(ta[i]->dtype));
    }
    if (ta[i]->present() && ta[i]->layout != tb[i]->layout) {
      return absl::StrFormat("%s layout %s vs %s", names[i], LayoutName(tb[i]->layout),
                             LayoutName(ta[i]->layout));
    }
  }
  return "";
}

}  // namespace

absl::Status ModelParser::ParseMoe(const schema::Moe* m, const std::string& path, MoeView* out) {
  out->num_experts = m->num_experts();
  out->top_k = m->top_k();
  out->scoring = m->scoring();
  out->normalize_top_k = m->normalize_top_k();
  out->routed_scaling_factor = m->routed_scaling_factor();
  out->n_group = m->n_group();
  out->topk_group = m->topk_group();
  out->group_scoring = m->group_scoring();
  const uint32_t e = out->num_experts;
  if (e == 0 || e > kMaxExperts) {
    return Bad(absl::StrFormat("%s.num_experts: %d must be in [1, %d]", path, e, kMaxExperts));
  }
  if (out->top_k == 0 || out->top_k > e) {
    return Bad(absl::StrFormat("%s.top_k: %d must be in [1, num_experts = %d]", path, out->top_k,
                               e));
  }
  if (out->scoring != Scoring::SOFTMAX && out->scoring != Scoring::SIGMOID) {
    return Bad(absl::StrFormat("%s.scoring: value %d is not a known scoring (softmax=1, sigmoid=2)",
                               path, static_cast<int>(out->scoring)));
  }
  if (!std::isfinite(out->routed_scaling_factor) || out->routed_scaling_factor <= 0.0f) {
    return Bad(absl::StrFormat("%s.routed_scaling_factor: %g must be finite and positive", path,
                               out->routed_scaling_factor));
  }
  if (out->n_group == 0 || out->n_group > e || e % out->n_group != 0) {
    return Bad(absl::StrFormat("%s.n_group: %d must divide num_experts = %d", path, out->n_group,
                               e));
  }
  if (out->n_group > 1) {
    if (out->topk_group == 0 || out->topk_group > out->n_group) {
      return Bad(absl::StrFormat("%s.topk_group: %d must be in [1, n_group = %d]", path,
                                 out->topk_group, out->n_group));
    }
    const uint32_t per_group = e / out->n_group;
    if (out->top_k > out->topk_group * per_group) {
      return Bad(absl::StrFormat(
          "%s.top_k: %d exceeds the %d experts in topk_group = %d groups of %d", path,
          out->top_k, out->topk_group * per_group, out->topk_group, per_group));
    }
    if (out->group_scoring != GroupScoring::HIGHEST && out->group_scoring != GroupScoring::TOP2_SUM) {
      return Bad(absl::StrFormat(
          "%s.group_scoring: value %d is not a known group scoring (highest=1, top2_sum=2)", path,
          static_cast<int>(out->group_scoring)));
    }
    if (out->group_scoring == GroupScoring::TOP2_SUM && per_group < 2) {
      return Bad(absl::StrFormat("%s.group_scoring: top2_sum needs at least 2 experts per group, "
                                 "got %d", path, per_group));
    }
  }
  const uint64_t d = model_->d_model_;
  FFLITE_RETURN_IF_ERROR(ParseTensor(m->router(), path + ".router", {e, d}, true, &out->router));
  FFLITE_RETURN_IF_ERROR(
      ParseTensor(m->router_bias(), path + ".router_bias", {e}, false, &out->router_bias));
  FFLITE_RETURN_IF_ERROR(ParseTensor(m->score_correction_bias(), path + ".score_correction_bias",
                                     {e}, false, &out->score_correction_bias));
  const auto* experts = m->experts();
  const uint32_t n_experts = experts == nullptr ? 0 : experts->size();
  if (n_experts != e) {
    return Bad(absl::StrFormat("%s.experts: %d experts stored, num_experts is %d", path, n_experts,
                               e));
  }
  out->experts.resize(e);
  for (uint32_t i = 0; i < e; ++i) {
    const std::string p = absl::StrFormat("%s.experts[%d]", path, i);
    FFLITE_RETURN_IF_ERROR(ParseFfn(experts->Get(i), p, &out->experts[i]));
    const std::string diff = FfnShapeDifference(out->experts[0], out->experts[i]);
    if (!diff.empty()) {
      return Bad(absl::StrFormat("%s: shape differs from experts[0] (%s)", p, diff));
    }
  }
  if (m->shared_experts() != nullptr) {
    if (m->shared_experts()->size() > kMaxExperts) {
      return Bad(absl::StrFormat("%s.shared_experts: %d exceeds %d", path,
                                 m->shared_experts()->size(), kMaxExperts));
    }
    out->shared_experts.resize(m->shared_experts()->size());
    for (uint32_t i = 0; i < out->shared_experts.size(); ++i) {
      FFLITE_RETURN_IF_ERROR(ParseFfn(m->shared_experts()->Get(i),
                                      absl::StrFormat("%s.shared_experts[%d]", path, i),
                                      &out->shared_experts[i]));
    }
  }
  if (m->shared_expert_gate() != nullptr && out->shared_experts.empty()) {
    return Bad(absl::StrCat(path, ".shared_expert_gate: present but there are no shared experts"));
  }
  FFLITE_RETURN_IF_ERROR(ParseTensor(m->shared_expert_gate(), path + ".shared_expert_gate",
                                     {1, d}, false, &out->shared_expert_gate));
  return absl::OkStatus();
}

absl::Status ModelParser::ParseNorm(const schema::Norm* n, const std::string& path,
                                    NormView* out) {
  if (n == nullptr) return absl::OkStatus();
  out->present = true;
  out->kind = n->kind();
  out->placement = n->placement();
  out->eps = n->eps();
  out->unit_offset = n->unit_offset();
  if (out->kind != NormKind::LAYER_NORM && out->kind != NormKind::RMS_NORM) {
    return Bad(absl::StrFormat("%s.kind: value %d is not a known norm (layer_norm=1, rms_norm=2)",
                               path, static_cast<int>(out->kind)));
  }
  if (out->placement != NormPlacement::PRE && out->placement != NormPlacement::POST &&
      out->placement != NormPlacement::SANDWICH) {
    return Bad(absl::StrFormat(
        "%s.placement: value %d is not a known placement (pre=1, post=2, sandwich=3)", path,
        static_cast<int>(out->placement)));
  }
  if (!std::isfinite(out->eps) || out->eps < 0.0f) {
    return Bad(absl::StrFormat("%s.eps: %g must be finite and not negative", path, out->eps));
  }
  const uint64_t d = model_->d_model_;
  FFLITE_RETURN_IF_ERROR(ParseTensor(n->weight(), path + ".weight", {d}, true, &out->weight));
  if (n->bias() != nullptr && out->kind != NormKind::LAYER_NORM) {
    return Bad(absl::StrCat(path, ".bias: only a layer_norm has a bias"));
  }
  FFLITE_RETURN_IF_ERROR(ParseTensor(n->bias(), path + ".bias", {d}, false, &out->bias));
  return absl::OkStatus();
}

absl::Status ModelParser::CheckOverlaps() {
  std::sort(ranges_.begin(), ranges_.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges_.size(); ++i) {
    if (ranges_[i].begin < ranges_[i - 1].end) {
      return Bad(absl::StrFormat("%s: bytes [%d, %d) overlap %s [%d, %d)", ranges_[i].name,
                                 ranges_[i].begin, ranges_[i].end, ranges_[i - 1].name,
                                 ranges_[i - 1].begin, ranges_[i - 1].end));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelParser::Parse() {
  const schema::Model* r = root_;
  model_->version_major_ = r->version_major();
  model_->version_minor_ = r->version_minor();
  if (r->version_major() == 0) {
    return Bad("version_major: 0 is not a valid format version (the first is 1)");
  }
  if (r->version_major() > kFormatVersionMajor) {
    return absl::UnimplementedError(absl::StrFormat(
        "file format version %d.%d is newer than this fflite reads (%d.%d); upgrade fflite",
        r->version_major(), r->version_minor(), kFormatVersionMajor, kFormatVersionMinor));
  }
  const uint64_t size = model_->size_;
  const uint64_t off = r->data_offset();
  const uint64_t data_size = r->data_size();
  const uint64_t flatbuffer_end = 4 + static_cast<uint64_t>(flatbuffers::ReadScalar<uint32_t>(model_->bytes_));
  // Writers start the data section on a page (kDataAlignment); readers need only the tensor
  // alignment, so that compact files (a model in flash, a fuzzer's seeds) load too.
  if (off % kTensorAlignment != 0 || off < flatbuffer_end) {
    return Bad(absl::StrFormat(
        "data_offset: %d must be a multiple of %d at or after the metadata's end (%d)", off,
        kTensorAlignment, flatbuffer_end));
  }
  if (off > size || data_size > size - off) {
    return Bad(absl::StrFormat("data section: offset %d + size %d exceeds file of %d bytes", off,
                               data_size, size));
  }
  model_->data_offset_ = off;
  model_->data_size_ = data_size;
  model_->d_model_ = r->d_model();
  if (r->d_model() == 0 || r->d_model() > kMaxDim) {
    return Bad(absl::StrFormat("d_model: %d must be in [1, %d]", r->d_model(), kMaxDim));
  }
  if (r->metadata() != nullptr) {
    for (uint32_t i = 0; i < r->metadata()->size(); ++i) {
      const schema::KeyValue* kv = r->metadata()->Get(i);
      if (kv == nullptr || kv->key() == nullptr) {
        return Bad(absl::StrFormat("metadata[%d]: missing key", i));
      }
      model_->metadata_.emplace_back(kv->key()->str(),
                                     kv->value() == nullptr ? "" : kv->value()->str());
    }
  }
  const auto* layers = r->layers();
  if (layers == nullptr || layers->size() == 0) return Bad("layers: the model has no layers");
  if (layers->size() > kMaxLayers) {
    return Bad(absl::StrFormat("layers: %d exceeds %d", layers->size(), kMaxLayers));
  }
  model_->layers_.resize(layers->size());
  for (uint32_t i = 0; i < layers->size(); ++i) {
    const schema::Layer* l = layers->Get(i);
    LayerView& out = model_->layers_[i];
    const std::string path = absl::StrFormat("layers[%d]", i);
    out.name = l->name() == nullptr ? "" : l->name()->str();
    out.residual = l->residual();
    switch (l->body_type()) {
      case schema::Body::Ffn:
        out.kind = LayerKind::kDense;
        FFLITE_RETURN_IF_ERROR(ParseFfn(l->body_as_Ffn(), path + ".ffn", &out.ffn));
        break;
      case schema::Body::Moe:
        out.kind = LayerKind::kMoe;
        if (l->body_as_Moe() == nullptr) return Bad(path + ".moe: missing");
        FFLITE_RETURN_IF_ERROR(ParseMoe(l->body_as_Moe(), path + ".moe", &out.moe));
        break;
      default:
        return Bad(absl::StrFormat("%s.body: missing or unknown body type %d (ffn=1, moe=2)", path,
                                   static_cast<int>(l->body_type())));
    }
    FFLITE_RETURN_IF_ERROR(ParseNorm(l->norm(), path + ".norm", &out.norm));
    FFLITE_RETURN_IF_ERROR(ParseNorm(l->output_norm(), path + ".output_norm", &out.output_norm));
    // A sandwich: the norm before the body and the output norm after it, both SANDWICH.
    const bool sandwich = out.norm.present && out.norm.placement == NormPlacement::SANDWICH;
    if (sandwich && !out.output_norm.present) {
      return Bad(path + ".output_norm: missing (the norm's placement is sandwich)");
    }
    if (!sandwich && out.output_norm.present) {
      return Bad(path +
                 ".output_norm: present, but the layer's norm is not a sandwich (placement 3)");
    }
    if (sandwich && out.output_norm.placement != NormPlacement::SANDWICH) {
      return Bad(absl::StrFormat("%s.output_norm.placement: value %d, must be sandwich (3)", path,
                                 static_cast<int>(out.output_norm.placement)));
    }
  }
  FFLITE_RETURN_IF_ERROR(CheckOverlaps());
  const size_t quantised = model_->quant_paths_.size();
  model_->scales_checked_.reset(new std::atomic<bool>[quantised]);
  for (size_t i = 0; i < quantised; ++i) {
    model_->scales_checked_[i].store(false, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<const schema::Model*> VerifyRoot(const uint8_t* bytes, uint64_t size) {
  FFLITE_RETURN_IF_ERROR(CheckHostByteOrder(HostIsLittleEndian()));
  if (bytes == nullptr) return absl::InvalidArgumentError("model buffer is null");
  constexpr uint64_t kMinSize = 12;  // size prefix, root offset, file identifier
  if (size < kMinSize) {
    return Bad(absl::StrFormat(
        "file is %d bytes, too small for an fflite header (at least %d)", size, kMinSize));
  }
  if (std::memcmp(bytes, "GGUF", 4) == 0) {
    return Bad("not an fflite file but a GGUF file (llama.cpp's format): convert it first with "
               "`fflite-convert MODEL.gguf OUT.fflite`");
  }
  if (std::memcmp(bytes + 8, schema::ModelIdentifier(), 4) != 0) {
    std::string got;
    for (int i = 8; i < 12; ++i) {
      const char c = static_cast<char>(bytes[i]);
      got += (c >= 32 && c < 127) ? std::string(1, c) : absl::StrFormat("\\x%02x", bytes[i]);
    }
    return Bad(absl::StrFormat("not an fflite file: identifier '%s' (expected 'FFLT')", got));
  }
  // The verifier checks field alignment relative to the buffer; scalars are then read in place,
  // so the buffer itself must be aligned for the widest scalar (8 bytes). Mappings always are.
  if (reinterpret_cast<uintptr_t>(bytes) % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model buffer at %p is not 8-byte aligned (64-byte alignment is best)",
        static_cast<const void*>(bytes)));
  }
  const uint64_t fb_size = flatbuffers::ReadScalar<uint32_t>(bytes);
  if (fb_size > size - 4) {
    return Bad(absl::StrFormat("metadata: size %d exceeds the %d bytes after the size prefix "
                               "(file truncated?)", fb_size, size - 4));
  }
  if (fb_size + 4 >= FLATBUFFERS_MAX_BUFFER_SIZE) {
    return Bad(absl::StrFormat("metadata: size %d exceeds the FlatBuffers limit", fb_size));
  }
  flatbuffers::Verifier verifier(bytes, static_cast<size_t>(fb_size + 4));
  if (!schema::VerifySizePrefixedModelBuffer(verifier)) {
    return Bad(absl::StrFormat("metadata: %d bytes fail FlatBuffers verification (corrupt or "
                               "truncated file)", fb_size));
  }
  return schema::GetSizePrefixedModel(bytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::LoadBuffer(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  FFLITE_ASSIGN_OR_RETURN(const schema::Model* root, VerifyRoot(bytes, size));
  std::unique_ptr<Model> model(new Model());
  model->bytes_ = bytes;
  model->size_ = size;
  FFLITE_RETURN_IF_ERROR(ModelParser(model.get(), root).Parse());
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> Model::LoadFile(const std::string& path) {
  FFLITE_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  absl::StatusOr<std::unique_ptr<Model>> model = LoadBuffer(file->data(), file->size());
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat(path, ": ", model.status().message()));
  }
  // Routed experts streamed into an expert budget's slots read past the page cache where they
  // are not in it (moe/expert_pool.h).
  file->EnableDirectReads(path);
  (*model)->file_ = std::move(file);
  return model;
}

Model::~Model() = default;

namespace {
uint64_t FfnBytes(const FfnView& f) {
  uint64_t bytes = 0;
  for (const TensorView* t : {&f.up, &f.gate, &f.down, &f.up_bias, &f.gate_bias, &f.down_bias}) {
    if (t->present()) bytes += t->size;
  }
  return bytes;
}
uint64_t NormBytes(const NormView& n) {
  if (!n.present) return 0;
  return (n.weight.present() ? n.weight.size : 0) + (n.bias.present() ? n.bias.size : 0);
}
}  // namespace

uint64_t LayerBytes(const LayerView& layer) {
  uint64_t bytes = NormBytes(layer.norm) + NormBytes(layer.output_norm);
  if (layer.kind == LayerKind::kDense) return bytes + FfnBytes(layer.ffn);
  const MoeView& m = layer.moe;
  for (const TensorView* t : {&m.router, &m.router_bias, &m.score_correction_bias,
                              &m.shared_expert_gate}) {
    if (t->present()) bytes += t->size;
  }
  for (const FfnView& e : m.experts) bytes += FfnBytes(e);
  for (const FfnView& e : m.shared_experts) bytes += FfnBytes(e);
  return bytes;
}

void Model::ReleaseTensorPages(const TensorView& tensor) const {
  if (file_ == nullptr || !tensor.present()) return;
  file_->Release(static_cast<size_t>(data_offset_ + tensor.offset), static_cast<size_t>(tensor.size));
}

absl::Status Model::ReadFileRange(uint64_t offset, size_t size, void* dst, uint64_t* buffered,
                                  uint64_t* direct) const {
  if (file_ == nullptr) return absl::FailedPreconditionError("the model is not file-backed");
  MappedFile::ReadCounts counts;
  const absl::Status status = file_->ReadAt(offset, size, dst, &counts);
  *buffered += counts.buffered;
  *direct += counts.direct;
  return status;
}

absl::Status Model::CheckScales(const TensorView& t, const uint8_t* bytes) const {
  if (!t.quantized()) return absl::OkStatus();
  // Not one of this model's matrices (a view made by hand): checked every time, unnamed.
  const bool known = t.quant_id < quant_paths_.size();
  // Acquire: pairs with the release below, so that a thread that sees the flag also sees what
  // the checking thread did before it (nothing the kernels need, but TSan then sees no race).
  if (known && scales_checked_[t.quant_id].load(std::memory_order_acquire)) {
    return absl::OkStatus();
  }
  const QuantGeometry g = QuantMatrixGeometry(t.dtype, t.shape[0], t.shape[1]);
  uint64_t row = 0, block = 0;
  const char *what = "", *problem = "";
  if (!QuantScalesValid(t.dtype, g, bytes != nullptr ? bytes : t.data, &row, &block, &what,
                        &problem)) {
    return Bad(absl::StrFormat("%s: the %s of row %d, block %d (columns [%d, %d)) %s",
                               known ? quant_paths_[t.quant_id] : "a quantised matrix", what, row,
                               block, block * kQuantBlock, (block + 1) * kQuantBlock, problem));
  }
  // Several threads may get here for one matrix, each having scanned it: they store the same.
  if (known) scales_checked_[t.quant_id].store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status Model::CheckFfnScales(const FfnView& f) const {
  FFLITE_RETURN_IF_ERROR(CheckScales(f.up));
  if (f.gated) FFLITE_RETURN_IF_ERROR(CheckScales(f.gate));
  return CheckScales(f.down);
}

absl::Status Model::CheckAllScales() const {
  for (const LayerView& l : layers_) {
    if (l.kind == LayerKind::kDense) {
      FFLITE_RETURN_IF_ERROR(CheckFfnScales(l.ffn));
      continue;
    }
    for (const FfnView& f : l.moe.experts) FFLITE_RETURN_IF_ERROR(CheckFfnScales(f));
    for (const FfnView& f : l.moe.shared_experts) FFLITE_RETURN_IF_ERROR(CheckFfnScales(f));
  }
  return absl::OkStatus();
}

void Model::PopulateTensorPages(const TensorView& tensor) const {
  if (file_ == nullptr || !tensor.present()) return;
  file_->Populate(static_cast<size_t>(data_offset_ + tensor.offset),
                  static_cast<size_t>(tensor.size));
}

}  // namespace fflite
