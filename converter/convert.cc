// Conversion driver: picks the mapping by model_type, builds the selected sublayers' specs (lazy
// sources over the mapped shards) and hands them to the runtime's atomic writer.
#include "converter/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"
#include "converter/checkpoint.h"
#include "converter/gguf.h"
#include "converter/gguf_convert.h"
#include "converter/safetensors.h"
#include "format/quant_layout.h"
#include "format/writer.h"

namespace fflite {
namespace converter {
namespace {

uint64_t Numel(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

// Counts the tensors of a spec that the writer will fill.
uint64_t CountTensors(const ModelSpec& spec) {
  uint64_t n = 0;
  auto count = [&n](const TensorSource& t) { n += t.present() ? 1 : 0; };
  auto ffn = [&](const FfnSpec& f) {
    for (const TensorSource* t : {&f.up, &f.gate, &f.down, &f.up_bias, &f.gate_bias, &f.down_bias}) {
      count(*t);
    }
  };
  for (const LayerSpec& l : spec.layers) {
    if (l.kind == LayerKind::kDense) {
      ffn(l.ffn);
    } else {
      count(l.moe.router);
      count(l.moe.router_bias);
      count(l.moe.score_correction_bias);
      count(l.moe.shared_expert_gate);
      for (const FfnSpec& f : l.moe.experts) ffn(f);
      for (const FfnSpec& f : l.moe.shared_experts) ffn(f);
    }
    if (l.norm.has_value()) {
      count(l.norm->weight);
      count(l.norm->bias);
    }
  }
  return n;
}

// The dtype most of the source's weight bytes have ("mixed" never: the largest share wins).
std::string SourceDType(const ModelSpec& spec) {
  uint64_t bytes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  auto see = [&](const TensorSource& t) {
    const int i = static_cast<int>(t.dtype);
    if (!t.present() || i < 1 || i > 7) return;
    // A quantised source (a GGUF file's Q8_0 / Q4_0 matrix) counts its stored bytes.
    const QuantGeometry g = QuantMatrixGeometry(t.dtype, t.shape.empty() ? 0 : t.shape[0],
                                                t.shape.size() < 2 ? 0 : t.shape[1]);
    bytes[i] += g.panels > 0 ? g.bytes() : Numel(t.shape) * DTypeSize(t.dtype);
  };
  for (const LayerSpec& l : spec.layers) {
    const std::vector<FfnSpec>* lists[] = {&l.moe.experts, &l.moe.shared_experts};
    if (l.kind == LayerKind::kDense) {
      see(l.ffn.up);
      see(l.ffn.down);
    }
    for (const auto* list : lists) {
      for (const FfnSpec& f : *list) {
        see(f.up);
        see(f.down);
      }
    }
  }
  int best = 1;
  for (int i = 2; i < 8; ++i) best = bytes[i] > bytes[best] ? i : best;
  return DTypeName(static_cast<DType>(best));
}

// The format stores the routed experts of a layer alike (the loader refuses experts whose
// tensors differ in dtype), so a checkpoint that mixes dtypes across experts needs --dtype.
absl::Status CheckExpertDTypes(const LayerSpec& l) {
  if (l.kind != LayerKind::kMoe) return absl::OkStatus();
  const std::vector<FfnSpec>& experts = l.moe.experts;
  for (size_t e = 1; e < experts.size(); ++e) {
    const FfnSpec& a = experts[0];
    const FfnSpec& b = experts[e];
    const std::pair<const char*, std::pair<const TensorSource*, const TensorSource*>> roles[] = {
        {"up", {&a.up, &b.up}},
        {"gate", {&a.gate, &b.gate}},
        {"down", {&a.down, &b.down}},
        {"up_bias", {&a.up_bias, &b.up_bias}},
        {"gate_bias", {&a.gate_bias, &b.gate_bias}},
        {"down_bias", {&a.down_bias, &b.down_bias}}};
    for (const auto& [role, t] : roles) {
      if (t.first->present() && t.second->present() && t.first->dtype != t.second->dtype) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: expert %d's %s weights are %s but expert 0's are %s; the experts of a layer are "
            "stored in one dtype: convert with --dtype f32, f16 or bf16", l.name, e, role,
            DTypeName(t.second->dtype), DTypeName(t.first->dtype)));
      }
    }
  }
  return absl::OkStatus();
}

// The stored dtype of the matrix at `path` ("layers[3].moe.experts[5].down"): that of the first
// --keep rule matching its layer and role, else `quantized` (for the down matrices the _M
// recipes pick when `k_mixed`, of `layers` layers: Q6_K; for Q3_K_M Q5_K or Q4_K).
DType MatrixDType(const std::string& path, const std::vector<KeepRule>& keep, DType quantized,
                  bool k_mixed, size_t layers) {
  size_t layer = 0;
  const size_t open = path.find('['), close = path.find(']');
  if (open != std::string::npos && close != std::string::npos &&
      !absl::SimpleAtoi(path.substr(open + 1, close - open - 1), &layer)) {
    layer = std::numeric_limits<size_t>::max();  // no layer's number: no --keep list names it
  }
  const std::string role = path.substr(path.rfind('.') + 1);
  for (const KeepRule& r : keep) {
    if (r.role != "*" && r.role != role) continue;
    if (!r.layers.empty() && std::find(r.layers.begin(), r.layers.end(), layer) == r.layers.end()) {
      continue;
    }
    return r.dtype;
  }
  if (k_mixed && role == "down" && layer < layers && quantized == DType::Q3_K_PACKED) {
    return layer < layers / 16 ? DType::Q5_K_PACKED : DType::Q4_K;
  }
  if (k_mixed && role == "down" && layer < layers && KMixedMoreBits(layer, layers)) {
    return DType::Q6_K_PACKED;
  }
  return quantized;
}

// The importance matrix for the output `spec` (ConvertOptions::imatrix): per matrix path, the
// importance of its logical columns. Tensors (f32, 1-D, finite, >= 0): "layers[i].input"
// [d_model] for the up and gate matrices of layer i (dense or every expert), and
// "<ffn>.hidden" [d_ff] for the down matrix of <ffn> ("layers[i].ffn",
// "layers[i].moe.experts[e]"). A tensor that names no FFN of the output, or has another length,
// is an error naming it; a matrix without one is quantised unweighted.
absl::StatusOr<std::map<std::string, std::vector<float>>> LoadImportance(
    const std::string& file, const ModelSpec& spec) {
  std::map<std::string, uint64_t> expected;  // name -> length
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    const std::string layer = absl::StrFormat("layers[%d]", i);
    expected[layer + ".input"] = spec.d_model;
    if (l.kind == LayerKind::kDense) {
      expected[layer + ".ffn.hidden"] = l.ffn.d_ff;
    } else {
      for (size_t e = 0; e < l.moe.experts.size(); ++e) {
        expected[absl::StrFormat("%s.moe.experts[%d].hidden", layer, e)] = l.moe.experts[e].d_ff;
      }
    }
  }
  FFLITE_ASSIGN_OR_RETURN(std::shared_ptr<const SafetensorsFile> st, SafetensorsFile::Open(file));
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : st->tensors()) {
    auto it = expected.find(name);
    if (it == expected.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--imatrix %s: tensor \"%s\" names no FFN input or hidden layer of the output (%d "
          "layers; convert with the --layers the importance was computed for)", file, name,
          spec.layers.size()));
    }
    if (t.dtype != "F32" || t.shape.size() != 1 || t.shape[0] != it->second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--imatrix %s: tensor \"%s\" must be F32 of shape [%d]; it is %s of %d dimension(s)%s",
          file, name, it->second, t.dtype, t.shape.size(),
          t.shape.size() == 1 ? absl::StrFormat(" [%d]", t.shape[0]) : std::string()));
    }
    std::vector<float> v(t.shape[0]);
    std::memcpy(v.data(), st->Data(t), v.size() * sizeof(float));
    for (size_t j = 0; j < v.size(); ++j) {
      if (!std::isfinite(v[j]) || v[j] < 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--imatrix %s: tensor \"%s\" element %d is %g: importances are finite and >= 0",
            file, name, j, v[j]));
      }
    }
    out[name] = std::move(v);
  }
  return out;
}

// The importance tensor's name for the matrix at `path`: its layer's input for up and gate, its
// FFN's hidden layer for down.
std::string ImportanceName(const std::string& path) {
  const size_t dot = path.rfind('.');
  const std::string role = path.substr(dot + 1);
  if (role == "down") return path.substr(0, dot) + ".hidden";
  return path.substr(0, path.find('.')) + ".input";
}

}  // namespace

absl::StatusOr<std::vector<size_t>> ParseLayerSelection(const std::string& spec, size_t count) {
  std::set<size_t> chosen;
  const std::string range_help = count == 0 ? std::string("the model has no FFN sublayers")
                                            : absl::StrFormat("valid: 0-%d", count - 1);
  for (absl::string_view part : absl::StrSplit(spec, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--layers \"%s\": empty entry (use e.g. 0-3,7)", spec));
    }
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    uint64_t lo = 0, hi = 0;
    if (!absl::SimpleAtoi(ends[0], &lo) || (ends.size() == 2 && !absl::SimpleAtoi(ends[1], &hi))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--layers \"%s\": \"%s\" is not an index or a range like 2-5", spec, part));
    }
    if (ends.size() == 1) hi = lo;
    if (hi < lo) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--layers \"%s\": range \"%s\" ends before it starts", spec, part));
    }
    if (hi >= count) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--layers \"%s\": index %d is out of range: the model has %d FFN sublayers (%s)", spec,
          hi, count, range_help));
    }
    for (uint64_t i = lo; i <= hi; ++i) chosen.insert(static_cast<size_t>(i));
  }
  return std::vector<size_t>(chosen.begin(), chosen.end());
}

absl::StatusOr<DType> ParseDType(const std::string& name) {
  // The table's names (q5_k and q6_k: GGUF's sizes; q5_k_i8 and q6_k_i8 a byte per value, format
  // 1.4's forms), all but the ones kept from GGUF files alone (no quantiser).
  const DTypeInfo* info = FindDTypeNamed(name);
  if (info != nullptr && (!info->quantized || QuantiserWrites(info->dtype))) return info->dtype;
  return absl::InvalidArgumentError(absl::StrFormat(
      "dtype \"%s\" is not one of f32, f16, bf16, i8, i4, q2_k, q3_k, q4_k, q5_k, q6_k, q5_k_i8, "
      "q6_k_i8",
      name));
}

bool KMixedMoreBits(size_t layer, size_t layers) {
  const size_t eighth = layers / 8;
  return layer < eighth || layer >= 7 * layers / 8 ||
         (layer >= eighth && (layer - eighth) % 3 == 2);
}

absl::StatusOr<std::vector<KeepRule>> ParseKeepRules(const std::string& spec, size_t layer_count) {
  std::vector<KeepRule> rules;
  for (absl::string_view part : absl::StrSplit(spec, ';', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    const std::string rule(part);
    const size_t colon = rule.find(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--keep rule \"%s\": expected DTYPE:ROLE[@LAYERS], e.g. f16:down@0,31", rule));
    }
    KeepRule r;
    auto dtype = ParseDType(rule.substr(0, colon));
    if (!dtype.ok() || *dtype == DType::I4) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--keep rule \"%s\": dtype \"%s\" is not one of f32, f16, bf16, i8, q2_k, q3_k, q4_k, "
          "q5_k, q6_k",
          rule, rule.substr(0, colon)));
    }
    r.dtype = *dtype;
    const std::string rest = rule.substr(colon + 1);
    const size_t at = rest.find('@');
    r.role = rest.substr(0, at);
    if (r.role != "up" && r.role != "gate" && r.role != "down" && r.role != "*") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--keep rule \"%s\": role \"%s\" is not one of up, gate, down, *", rule, r.role));
    }
    if (at != std::string::npos) {
      auto layers = ParseLayerSelection(rest.substr(at + 1), layer_count);
      if (!layers.ok()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("--keep rule \"%s\": %s", rule, layers.status().message()));
      }
      r.layers = *layers;
    }
    rules.push_back(std::move(r));
  }
  return rules;
}

absl::StatusOr<ConvertResult> ConvertCheckpoint(const std::string& dir, const std::string& output,
                                                const ConvertOptions& options) {
  if (options.d_ff_alignment == 0 || options.d_ff_alignment > 65536) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "d_ff alignment %d must be in [1, 65536]", options.d_ff_alignment));
  }
  const bool k_quant = options.quantize.has_value() && IsKQuant(*options.quantize);
  const bool k_quant_kept =
      options.quantize.has_value() && options.keep.find("_k:") != std::string::npos;
  if (options.k_mixed &&
      (!options.quantize.has_value() ||
       (*options.quantize != DType::Q4_K && *options.quantize != DType::Q5_K_PACKED &&
        *options.quantize != DType::Q3_K_PACKED))) {
    return absl::InvalidArgumentError("the _M recipe applies to q3_k, q4_k and q5_k (--dtype "
                                      "q3_k_m, q4_k_m, q5_k_m)");
  }
  if (!options.imatrix.empty() && !k_quant) {
    return absl::InvalidArgumentError(
        "--imatrix applies only with a k-quant --dtype (q2_k, q3_k, q4_k, q5_k, q6_k, q3_k_m, "
        "q4_k_m, q5_k_m)");
  }
  // A k-quant down matrix needs d_ff padded to whole super-blocks of 256.
  const uint64_t d_ff_alignment = k_quant || k_quant_kept
                                      ? std::lcm(uint64_t{options.d_ff_alignment}, uint64_t{256})
                                      : options.d_ff_alignment;
  if (d_ff_alignment > 65536) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "d_ff alignment %d: a k-quant needs a multiple of 256, and the smallest (%d) is above "
        "65536; use a power of two", options.d_ff_alignment, d_ff_alignment));
  }
  FFLITE_RETURN_IF_ERROR(CheckExpertAlignment(options.expert_alignment));
  // A GGUF file, or a Hugging Face checkpoint folder. The checkpoint (or the GGUF file) stays
  // open while the plan's sources read from it.
  std::unique_ptr<Checkpoint> checkpoint;
  std::unique_ptr<ArchContext> ctx;
  std::string model_type;
  std::string shards = "1";
  ArchPlan plan;
  if (LooksLikeGguf(dir)) {
    FFLITE_ASSIGN_OR_RETURN(std::shared_ptr<const GgufFile> gguf, GgufFile::Open(dir));
    GgufPlanOptions gguf_options;
    // Q8_0 / Q4_0 stay quantised unless the output's dtypes are chosen; then every tensor is
    // read as its exact values (f32) and converted as a checkpoint's would be.
    gguf_options.native = !options.dtype.has_value() && !options.quantize.has_value();
    gguf_options.include_norm = options.include_norm;
    FFLITE_ASSIGN_OR_RETURN(plan, PlanGguf(gguf, gguf_options, &model_type));
    model_type = "gguf:" + model_type;
  } else {
    FFLITE_ASSIGN_OR_RETURN(checkpoint, Checkpoint::Open(dir));
    const HfConfig& config = checkpoint->config();
    FFLITE_ASSIGN_OR_RETURN(model_type, config.String("model_type"));
    FFLITE_ASSIGN_OR_RETURN(const ArchEntry* arch, FindArchitecture(model_type));
    ctx = std::make_unique<ArchContext>(
        ArchContext{*checkpoint, config, model_type, options.include_norm,
                    /*native=*/!options.dtype.has_value() && !options.quantize.has_value()});
    FFLITE_ASSIGN_OR_RETURN(plan, arch->convert(*ctx));
    if (plan.sublayers.empty()) {
      return config.Error("model_type", absl::StrFormat(
          "\"%s\": the config gives the model no FFN sublayers (0 layers): nothing to convert",
          model_type));
    }
    shards = absl::StrCat(checkpoint->files().size());
    // A vision-language wrapper converts as its text model; the file says which it came from.
    if (!checkpoint->wrapper().empty()) {
      plan.metadata.emplace_back("source.wrapper", checkpoint->wrapper());
    }
  }

  std::vector<size_t> selected;
  if (options.layers.empty()) {
    for (size_t i = 0; i < plan.sublayers.size(); ++i) selected.push_back(i);
  } else {
    FFLITE_ASSIGN_OR_RETURN(selected, ParseLayerSelection(options.layers, plan.sublayers.size()));
  }
  ModelSpec spec;
  spec.d_model = plan.d_model;
  for (size_t i : selected) {
    FFLITE_ASSIGN_OR_RETURN(LayerSpec layer, plan.sublayers[i].build());
    if (!options.dtype.has_value() && !options.quantize.has_value()) {
      FFLITE_RETURN_IF_ERROR(CheckExpertDTypes(layer));
    }
    if (!options.include_norm) {
      layer.norm.reset();
      layer.residual = false;
    }
    spec.layers.push_back(std::move(layer));
  }

  ConvertResult result;
  result.model_type = model_type;
  result.sublayers_total = plan.sublayers.size();
  result.sublayers_written = spec.layers.size();
  result.tensors = CountTensors(spec);

  spec.metadata = {
      {"source.architecture", model_type},
      {"source.dtype", SourceDType(spec)},
      {"source.sublayers", absl::StrCat(plan.sublayers.size())},
      {"source.shards", shards},
      {"converter.version", kConverterVersion},
      {"converter.dtype", options.dtype.has_value() ? DTypeName(*options.dtype) : "source"},
      {"converter.quantize",
       options.quantize.has_value()
           ? absl::StrFormat("%s%s (scale search %s, block rotation %s)%s%s",
                             DTypeName(*options.quantize), options.k_mixed ? "_m" : "",
                             options.quantize_options.search ? "on" : "off",
                             options.quantize_options.rotate ? "on" : "off",
                             options.keep.empty() ? "" : ", keep " + options.keep,
                             options.imatrix.empty() ? "" : ", importance matrix")
           : "none"},
      {"converter.d_ff_alignment", absl::StrCat(d_ff_alignment)},
      {"converter.layers", options.layers.empty() ? "all" : options.layers},
      {"converter.expert_alignment", options.expert_alignment <= kTensorAlignment
                                         ? std::string("none")
                                         : absl::StrCat(options.expert_alignment)},
      {"converter.page_align_experts", options.page_align_experts ? "true" : "false"},
      {"converter.norm", options.include_norm ? "included" : "omitted (no norm, no residual)"},
      {"converter.value_rows", options.value_rows ? "relu-family down" : "none"},
  };
  for (auto& kv : plan.metadata) spec.metadata.push_back(kv);

  WriteOptions write;
  write.d_ff_alignment = static_cast<uint32_t>(d_ff_alignment);
  write.dtype = options.dtype;
  std::vector<KeepRule> keep;
  std::map<std::string, std::vector<float>> importance;
  if (options.quantize.has_value()) {
    if (!write.dtype.has_value()) write.dtype = DType::F32;
    FFLITE_ASSIGN_OR_RETURN(keep, ParseKeepRules(options.keep, spec.layers.size()));
    const DType quantized = *options.quantize;
    const bool k_mixed = options.k_mixed;
    const size_t layers = spec.layers.size();
    write.matrix_dtype = [&keep, quantized, k_mixed, layers](const std::string& path, DType) {
      return MatrixDType(path, keep, quantized, k_mixed, layers);
    };
    if (!options.imatrix.empty()) {
      FFLITE_ASSIGN_OR_RETURN(importance, LoadImportance(options.imatrix, spec));
      write.importance = [&importance](const std::string& path, uint64_t k) {
        std::vector<float> v;
        auto it = importance.find(ImportanceName(path));
        if (it != importance.end() && it->second.size() <= k) {
          v = it->second;
          v.resize(k, 0.0f);  // the padding columns: zero weights, any error
        }
        return v;
      };
    }
    write.quantize = options.quantize_options;
    write.quantized = [&result](const std::string& path, DType dtype, const QuantStats& stats) {
      result.quantized.push_back({path, dtype, stats});
    };
  } else if (!options.keep.empty()) {
    return absl::InvalidArgumentError("--keep applies only with a quantised --dtype");
  }
  write.expert_alignment = options.expert_alignment;
  write.page_align_experts = options.page_align_experts;
  if (options.value_rows) {
    write.down_value_rows = [](const std::string&, const FfnSpec& f) {
      return f.activation == Activation::RELU;
    };
  }
  uint64_t done = 0;
  write.progress = [&](uint64_t bytes, uint64_t total) {
    ++done;
    result.data_bytes = total;
    if (options.progress) options.progress({done, result.tensors, bytes, total});
  };
  FFLITE_RETURN_IF_ERROR(WriteModelFile(spec, write, output));
  return result;
}

}  // namespace converter
}  // namespace fflite
