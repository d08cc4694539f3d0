// Model summaries for fflite-inspect, computed from the runtime's validated views.
#include "converter/inspect.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "converter/progress.h"
#include "nlohmann/json.hpp"

namespace fflite {
namespace converter {
namespace {

uint64_t Bytes(const TensorView& t) { return t.present() ? t.size : 0; }

uint64_t FfnBytes(const FfnView& f) {
  return Bytes(f.up) + Bytes(f.gate) + Bytes(f.down) + Bytes(f.up_bias) + Bytes(f.gate_bias) +
         Bytes(f.down_bias);
}

// Logical parameters of an FFN: matrices and biases at d_ff, not d_ff_padded.
uint64_t FfnParams(const FfnView& f) {
  const uint64_t d = f.d_model, ff = f.d_ff;
  uint64_t n = (f.gated ? 3 : 2) * d * ff;
  if (f.up_bias.present()) n += ff;
  if (f.gate_bias.present()) n += ff;
  if (f.down_bias.present()) n += d;
  return n;
}

// 2 FLOPs per multiply-accumulate of the matrices; activations and biases are not counted.
uint64_t FfnFlops(const FfnView& f) {
  return 2 * (f.gated ? 3 : 2) * uint64_t{f.d_model} * f.d_ff;
}

// Where the routed experts' records lie in the file: their size, stride and common alignment.
void ExpertRecords(const Model& model, const MoeView& m, LayerSummary* ls) {
  std::vector<uint64_t> starts;
  uint64_t any_start = 0;
  for (const FfnView& f : m.experts) {
    uint64_t start = ~uint64_t{0}, end = 0;
    for (const TensorView* t : {&f.up, &f.gate, &f.down, &f.up_bias, &f.gate_bias, &f.down_bias}) {
      if (!t->present()) continue;
      start = std::min(start, model.FileOffset(*t));
      end = std::max(end, model.FileOffset(*t) + t->size);
    }
    if (end == 0) continue;
    ls->expert_record_bytes = std::max(ls->expert_record_bytes, end - start);
    starts.push_back(start);
    any_start |= start;
  }
  constexpr uint64_t kMaxShown = uint64_t{1} << 30;
  const uint64_t lowest_bit = any_start & (~any_start + 1);
  ls->expert_alignment = any_start == 0 ? kMaxShown : std::min(lowest_bit, kMaxShown);
  if (starts.size() < 2) return;
  const uint64_t stride = starts[1] - starts[0];
  for (size_t i = 2; i < starts.size(); ++i) {
    if (starts[i] - starts[i - 1] != stride) return;  // uneven: stride stays 0
  }
  ls->expert_stride = stride;
}

std::string ActivationLabel(const LayerSummary& l) {
  return l.gated ? absl::StrCat("glu(", l.activation, ")") : l.activation;
}

std::string NormLabel(const NormView& n) {
  if (!n.present) return "none";
  return absl::StrFormat("%s%s %s", n.kind == NormKind::LAYER_NORM ? "layer_norm" : "rms_norm",
                         n.unit_offset ? "(1+w)" : "",
                         n.placement == NormPlacement::PRE        ? "pre"
                         : n.placement == NormPlacement::SANDWICH ? "pre and after the ffn"
                                                                  : "post");
}

}  // namespace

ModelSummary Summarize(const Model& model, const std::string& path) {
  ModelSummary s;
  s.path = path;
  s.file_size = model.file_size();
  s.version_major = model.version_major();
  s.version_minor = model.version_minor();
  s.d_model = model.d_model();
  s.metadata = model.metadata();
  for (size_t i = 0; i < model.layers().size(); ++i) {
    const LayerView& l = model.layers()[i];
    LayerSummary ls;
    ls.index = i;
    ls.name = l.name;
    ls.norm = NormLabel(l.norm);
    ls.residual = l.residual;
    uint64_t norm_bytes = 0, norm_params = 0;
    if (l.norm.present) {
      norm_bytes = Bytes(l.norm.weight) + Bytes(l.norm.bias);
      norm_params = l.norm.weight.numel() + (l.norm.bias.present() ? l.norm.bias.numel() : 0);
    }
    const FfnView* main = nullptr;
    if (l.kind == LayerKind::kDense) {
      ls.kind = "dense";
      main = &l.ffn;
      ls.parameters = FfnParams(l.ffn);
      ls.bytes = FfnBytes(l.ffn);
      ls.bytes_per_token = ls.bytes;
      ls.flops_per_token = FfnFlops(l.ffn);
    } else {
      const MoeView& m = l.moe;
      ls.kind = "moe";
      main = &m.experts[0];
      ls.experts = m.num_experts;
      ls.top_k = m.top_k;
      ls.shared_experts = static_cast<uint32_t>(m.shared_experts.size());
      const uint64_t router_bytes = Bytes(m.router) + Bytes(m.router_bias) +
                                    Bytes(m.score_correction_bias) + Bytes(m.shared_expert_gate);
      // numel() is 0 for an absent tensor.
      const uint64_t router_params = m.router.numel() + m.router_bias.numel() +
                                     m.score_correction_bias.numel() +
                                     m.shared_expert_gate.numel();
      uint64_t shared_bytes = 0, shared_params = 0, shared_flops = 0;
      for (const FfnView& f : m.shared_experts) {
        shared_bytes += FfnBytes(f);
        shared_params += FfnParams(f);
        shared_flops += FfnFlops(f);
        ls.shared_d_ff += f.d_ff;
      }
      const uint64_t expert_bytes = FfnBytes(m.experts[0]);  // experts share one shape
      ls.parameters = router_params + shared_params + m.num_experts * FfnParams(m.experts[0]);
      ls.bytes = router_bytes + shared_bytes + m.num_experts * expert_bytes;
      ls.bytes_per_token = router_bytes + shared_bytes + m.top_k * expert_bytes;
      ls.flops_per_token = 2 * uint64_t{m.num_experts} * model.d_model() +
                           (m.shared_expert_gate.present() ? 2 * uint64_t{model.d_model()} : 0) +
                           shared_flops + m.top_k * FfnFlops(m.experts[0]);
      ExpertRecords(model, m, &ls);
    }
    ls.activation = ActivationName(main->activation);
    ls.gated = main->gated;
    ls.d_model = main->d_model;
    ls.d_ff = main->d_ff;
    ls.d_ff_padded = main->d_ff_padded;
    // The weight matrices' dtype (each named when they differ, as after --keep), with the bits
    // per weight they take as stored (quantised: scales included).
    ls.dtype = DTypeName(main->up.dtype);
    if (main->down.dtype != main->up.dtype || (main->gated && main->gate.dtype != main->up.dtype)) {
      const std::string gate =
          main->gated ? absl::StrCat("gate ", DTypeName(main->gate.dtype), ", ") : std::string();
      ls.dtype = absl::StrFormat("up %s, %sdown %s", DTypeName(main->up.dtype), gate,
                                 DTypeName(main->down.dtype));
    }
    if (main->AnyQuantized()) {
      ls.dtype += absl::StrFormat(" (%.2f bpw)", main->BitsPerWeight());
    }
    if (main->down.value_rows()) ls.dtype += " (down: value rows)";
    ls.parameters += norm_params;
    ls.bytes += norm_bytes;
    ls.bytes_per_token += norm_bytes;
    s.parameters += ls.parameters;
    s.bytes += ls.bytes;
    s.bytes_per_token += ls.bytes_per_token;
    s.flops_per_token += ls.flops_per_token;
    s.layers.push_back(std::move(ls));
  }
  return s;
}

namespace {

std::string Count(uint64_t n) {
  if (n >= 1000000000ull) return absl::StrFormat("%.2fG", n / 1e9);
  if (n >= 1000000ull) return absl::StrFormat("%.2fM", n / 1e6);
  if (n >= 1000ull) return absl::StrFormat("%.1fK", n / 1e3);
  return absl::StrCat(n);
}

}  // namespace

std::string FormatSummaryTable(const ModelSummary& s) {
  size_t name_w = 4;
  for (const LayerSummary& l : s.layers) name_w = std::max(name_w, l.name.size());
  std::string out = absl::StrFormat("%s: fflite format %d.%d, d_model %d, %d layers, %s\n\n",
                                    s.path, s.version_major, s.version_minor, s.d_model,
                                    s.layers.size(), HumanBytes(static_cast<double>(s.file_size)));
  const int w = static_cast<int>(name_w);
  absl::StrAppendFormat(&out, "%5s  %-*s  %-5s  %-14s  %7s  %13s  %9s  %-4s  %-21s  %10s\n", "index",
                        w, "name", "kind", "activation", "d_model", "d_ff (padded)",
                        "experts/k", "dtype", "norm", "bytes");
  for (const LayerSummary& l : s.layers) {
    const std::string experts =
        l.kind == "moe" ? absl::StrFormat("%d/%d%s", l.experts, l.top_k,
                                          l.shared_experts ? absl::StrFormat("+%ds", l.shared_experts)
                                                           : "")
                        : "-";
    absl::StrAppendFormat(&out, "%5d  %-*s  %-5s  %-14s  %7d  %13s  %9s  %-4s  %-21s  %10s\n",
                          l.index, w, l.name, l.kind, ActivationLabel(l), l.d_model,
                          absl::StrFormat("%d (%d)", l.d_ff, l.d_ff_padded), experts, l.dtype,
                          l.norm + (l.residual ? " +res" : ""),
                          HumanBytes(static_cast<double>(l.bytes)));
  }
  bool moe = false;
  for (const LayerSummary& l : s.layers) moe = moe || l.kind == "moe";
  if (moe) {
    // What an expert budget reads per miss: one read per record when records start on pages.
    out += "\nexpert records (bytes from an expert's first tensor to the end of its last; the\n"
           "stride between consecutive experts; the alignment of their starts in the file):\n";
    for (const LayerSummary& l : s.layers) {
      if (l.kind != "moe") continue;
      const std::string stride =
          l.expert_stride != 0
              ? absl::StrFormat("%s (%d)", HumanBytes(static_cast<double>(l.expert_stride)),
                                l.expert_stride)
          : l.experts < 2 ? std::string("-")
                          : std::string("uneven");
      absl::StrAppendFormat(
          &out, "%5d  %-*s  record %s (%d)  stride %s  %s (starts at multiples of %s)\n", l.index,
          w, l.name, HumanBytes(static_cast<double>(l.expert_record_bytes)),
          l.expert_record_bytes, stride,
          l.expert_records_page_aligned() ? "4 KiB aligned" : "not 4 KiB aligned",
          HumanBytes(static_cast<double>(l.expert_alignment)));
    }
  }
  absl::StrAppendFormat(&out, "\nparameters:            %s (%d)\n", Count(s.parameters),
                        s.parameters);
  absl::StrAppendFormat(&out, "weight bytes:          %s (%d)\n",
                        HumanBytes(static_cast<double>(s.bytes)), s.bytes);
  absl::StrAppendFormat(&out, "bytes read per token:  %s (%d)  (dense weights + router + top-k "
                              "and shared experts + norms)\n",
                        HumanBytes(static_cast<double>(s.bytes_per_token)), s.bytes_per_token);
  absl::StrAppendFormat(&out, "FLOPs per token:       %s (%d)  (2 per multiply-accumulate)\n",
                        Count(s.flops_per_token), s.flops_per_token);
  if (!s.metadata.empty()) {
    out += "\nmetadata:\n";
    for (const auto& [k, v] : s.metadata) absl::StrAppendFormat(&out, "  %-28s %s\n", k, v);
  }
  return out;
}

std::string FormatSummaryJson(const ModelSummary& s) {
  nlohmann::ordered_json j;
  j["file"] = s.path;
  j["file_size"] = s.file_size;
  j["format_version"] = absl::StrFormat("%d.%d", s.version_major, s.version_minor);
  j["d_model"] = s.d_model;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const LayerSummary& l : s.layers) {
    nlohmann::ordered_json x;
    x["index"] = l.index;
    x["name"] = l.name;
    x["kind"] = l.kind;
    x["activation"] = l.activation;
    x["gated"] = l.gated;
    x["d_model"] = l.d_model;
    x["d_ff"] = l.d_ff;
    x["d_ff_padded"] = l.d_ff_padded;
    x["experts"] = l.experts;
    x["top_k"] = l.top_k;
    x["shared_experts"] = l.shared_experts;
    x["shared_d_ff"] = l.shared_d_ff;
    x["dtype"] = l.dtype;
    x["norm"] = l.norm;
    x["residual"] = l.residual;
    x["parameters"] = l.parameters;
    x["bytes"] = l.bytes;
    x["bytes_per_token"] = l.bytes_per_token;
    x["flops_per_token"] = l.flops_per_token;
    x["expert_record_bytes"] = l.expert_record_bytes;
    x["expert_stride"] = l.expert_stride;
    x["expert_alignment"] = l.expert_alignment;
    x["expert_records_page_aligned"] = l.expert_records_page_aligned();
    layers.push_back(std::move(x));
  }
  j["layers"] = std::move(layers);
  j["totals"] = {{"parameters", s.parameters},
                 {"bytes", s.bytes},
                 {"bytes_per_token", s.bytes_per_token},
                 {"flops_per_token", s.flops_per_token}};
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : s.metadata) meta[k] = v;
  j["metadata"] = std::move(meta);
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace converter
}  // namespace fflite
