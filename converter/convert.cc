// Conversion driver: picks the mapping by model_type, builds the selected sublayers' specs (lazy
// sources over the mapped shards) and hands them to the runtime's atomic writer.
#include "converter/convert.h"

#include <algorithm>
#include <limits>
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
// --keep rule matching its layer and role, else `quantized`.
DType MatrixDType(const std::string& path, const std::vector<KeepRule>& keep, DType quantized) {
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
  return quantized;
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
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  if (name == "i8") return DType::I8;
  if (name == "i4") return DType::I4;
  return absl::InvalidArgumentError(
      absl::StrFormat("dtype \"%s\" is not one of f32, f16, bf16, i8, i4", name));
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
          "--keep rule \"%s\": dtype \"%s\" is not one of f32, f16, bf16, i8", rule,
          rule.substr(0, colon)));
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
        ArchContext{*checkpoint, config, model_type, options.include_norm});
    FFLITE_ASSIGN_OR_RETURN(plan, arch->convert(*ctx));
    if (plan.sublayers.empty()) {
      return config.Error("model_type", absl::StrFormat(
          "\"%s\": the config gives the model no FFN sublayers (0 layers): nothing to convert",
          model_type));
    }
    shards = absl::StrCat(checkpoint->files().size());
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
           ? absl::StrFormat("%s (scale search %s, block rotation %s)%s",
                             DTypeName(*options.quantize),
                             options.quantize_options.search ? "on" : "off",
                             options.quantize_options.rotate ? "on" : "off",
                             options.keep.empty() ? "" : ", keep " + options.keep)
           : "none"},
      {"converter.d_ff_alignment", absl::StrCat(options.d_ff_alignment)},
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
  write.d_ff_alignment = options.d_ff_alignment;
  write.dtype = options.dtype;
  std::vector<KeepRule> keep;
  if (options.quantize.has_value()) {
    if (!write.dtype.has_value()) write.dtype = DType::F32;
    FFLITE_ASSIGN_OR_RETURN(keep, ParseKeepRules(options.keep, spec.layers.size()));
    const DType quantized = *options.quantize;
    write.matrix_dtype = [&keep, quantized](const std::string& path, DType) {
      return MatrixDType(path, keep, quantized);
    };
    write.quantize = options.quantize_options;
    write.quantized = [&result](const std::string& path, DType dtype, const QuantStats& stats) {
      result.quantized.push_back({path, dtype, stats});
    };
  } else if (!options.keep.empty()) {
    return absl::InvalidArgumentError("--keep applies only with --dtype i8 or i4");
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
