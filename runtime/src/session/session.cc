// Session creation (backend choice, option checks) and argument checks for run().
#include "session/session.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace fflite {

absl::StatusOr<std::unique_ptr<Session>> Session::Create(const Model& model,
                                                         const SessionOptions& options) {
  if (options.num_threads < 1 || options.num_threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrFormat("num_threads: %d must be in [1, %d]",
                                                      options.num_threads, kMaxThreads));
  }
  if (options.max_tokens < 1 || options.max_tokens > kMaxTokensLimit) {
    return absl::InvalidArgumentError(absl::StrFormat("max_tokens: %d must be in [1, %d]",
                                                      options.max_tokens, kMaxTokensLimit));
  }
  BackendConfig config;
  config.num_threads = options.num_threads;
  config.max_tokens = options.max_tokens;
  config.expert_budget_bytes = options.expert_budget_bytes;
  config.cpu_options = options.cpu_options;
  config.time_routed_experts = options.time_routed_experts;
  config.float_activations = options.float_activations;
  config.parallel_for = options.parallel_for;
  config.parallel_for_context = options.parallel_for_context;
  config.sleep_between_loops = options.sleep_between_loops;
  if (options.backend == "auto") {
    const BackendEntry* chosen = nullptr;
    FFLITE_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                            CreateAutoBackend(Backends(), model, config, &chosen));
    return Finish(model, chosen->name, options.max_tokens, std::move(backend));
  }
  const BackendEntry* entry = FindBackend(options.backend);
  if (entry == nullptr) {
    std::vector<std::string> names;
    for (const BackendEntry& e : Backends()) names.push_back(e.name);
    return absl::FailedPreconditionError(absl::StrFormat(
        "backend '%s' is not built into this fflite (built: %s)", options.backend,
        absl::StrJoin(names, ", ")));
  }
  std::string why;
  if (!entry->available(&why)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("backend '%s' cannot run here: %s", entry->name, why));
  }
  FFLITE_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, entry->create(model, config));
  return Finish(model, entry->name, options.max_tokens, std::move(backend));
}

std::unique_ptr<Session> Session::Finish(const Model& model, const char* backend_name,
                                         size_t max_tokens, std::unique_ptr<Backend> backend) {
  backend->neuron_scales().Init(model);
  backend->neuron_capture().Init(model.layers().size());
  return std::unique_ptr<Session>(
      new Session(model, backend_name, max_tokens, std::move(backend)));
}

absl::Status LayerOutOfRange(int64_t layer, size_t num_layers) {
  return absl::OutOfRangeError(absl::StrFormat(
      "layer %d is out of range: the model has %d layers (0 .. %d)", layer, num_layers,
      static_cast<int64_t>(num_layers) - 1));
}

absl::Status Session::CheckLayer(size_t layer) const {
  const size_t num_layers = model_.layers().size();
  if (layer >= num_layers) return LayerOutOfRange(static_cast<int64_t>(layer), num_layers);
  return absl::OkStatus();
}

absl::Status Session::CheckRun(size_t layer, const float* input, size_t n_tokens,
                              const float* output) const {
  if (input == nullptr) return absl::InvalidArgumentError("input is null");
  if (output == nullptr) return absl::InvalidArgumentError("output is null");
  FFLITE_RETURN_IF_ERROR(CheckLayer(layer));
  if (n_tokens == 0 || n_tokens > max_tokens_) {
    return absl::OutOfRangeError(absl::StrFormat(
        "n_tokens %d must be in [1, max_tokens = %d] (max_tokens is a session option)", n_tokens,
        max_tokens_));
  }
  const size_t bytes = n_tokens * model_.d_model() * sizeof(float);
  const auto in = reinterpret_cast<uintptr_t>(input), out = reinterpret_cast<uintptr_t>(output);
  if (in != out && in < out + bytes && out < in + bytes) {
    return absl::InvalidArgumentError(
        "input and output overlap in part; pass the same buffer (in place) or separate ones");
  }
  return absl::OkStatus();
}

absl::Status Session::Run(size_t layer, const float* input, size_t n_tokens, float* output) {
  FFLITE_RETURN_IF_ERROR(CheckRun(layer, input, n_tokens, output));
  return backend_->Run(layer, input, n_tokens, output);
}

absl::Status Session::RunDevice(size_t layer, const float* input, size_t n_tokens, float* output,
                                void* stream) {
  FFLITE_RETURN_IF_ERROR(CheckRun(layer, input, n_tokens, output));
  absl::Status status = backend_->RunDevice(layer, input, n_tokens, output, stream);
  if (status.code() == absl::StatusCode::kUnimplemented) {
    return absl::UnimplementedError(
        absl::StrFormat("backend '%s': %s", backend_name_, status.message()));
  }
  return status;
}

absl::StatusOr<const FfnView*> Session::EditedFfn(size_t layer, int expert) const {
  FFLITE_RETURN_IF_ERROR(CheckLayer(layer));
  const LayerView& l = model_.layers()[layer];
  if (l.kind == LayerKind::kDense) {
    if (expert != -1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expert %d: layer %d is dense; pass expert -1 for its FFN", expert, layer));
    }
    return &l.ffn;
  }
  if (expert < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "expert %d: layer %d is an MoE layer; pass a routed expert's index (0 .. %d)", expert,
        layer, l.moe.num_experts - 1));
  }
  if (static_cast<uint32_t>(expert) >= l.moe.num_experts) {
    return absl::OutOfRangeError(absl::StrFormat(
        "expert %d is out of range: MoE layer %d has %d routed experts", expert, layer,
        l.moe.num_experts));
  }
  return &l.moe.experts[static_cast<size_t>(expert)];
}

absl::Status Session::SetNeuronScales(size_t layer, int expert, const float* scales,
                                      size_t count) {
  FFLITE_ASSIGN_OR_RETURN(const FfnView* f, EditedFfn(layer, expert));
  if (scales == nullptr) return absl::InvalidArgumentError("scales is null");
  if (count != f->d_ff) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "count %d: the FFN of layer %d%s has d_ff %d, one scale per neuron", count, layer,
        expert < 0 ? "" : absl::StrFormat(" expert %d", expert), f->d_ff));
  }
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(scales[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("scales[%d] is %f: every scale must be finite", i, scales[i]));
    }
  }
  std::vector<float> padded(f->d_ff_padded, 1.0f);
  std::copy(scales, scales + count, padded.begin());
  backend_->neuron_scales().Set(layer, expert, std::move(padded));
  return backend_->NeuronScalesChanged(layer, expert);
}

absl::Status Session::ClearNeuronScales(size_t layer, int expert) {
  FFLITE_RETURN_IF_ERROR(EditedFfn(layer, expert).status());
  backend_->neuron_scales().Set(layer, expert, {});
  return backend_->NeuronScalesChanged(layer, expert);
}

absl::Status Session::SetCapture(size_t layer, float* h, size_t h_capacity, int32_t* experts,
                                 float* weights, size_t route_capacity) {
  FFLITE_RETURN_IF_ERROR(CheckLayer(layer));
  NeuronCapture& capture = backend_->neuron_capture();
  if (h == nullptr && experts == nullptr && weights == nullptr) {
    capture.Set(layer, LayerCapture());
    return absl::OkStatus();
  }
  const LayerView& l = model_.layers()[layer];
  LayerCapture c;
  c.h = h;
  c.experts = experts;
  c.weights = weights;
  if (l.kind == LayerKind::kDense) {
    if (experts != nullptr || weights != nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "experts, weights: layer %d is dense and has no routing to capture; pass NULL", layer));
    }
    c.d_ff = l.ffn.d_ff;
  } else {
    if ((experts == nullptr) != (weights == nullptr)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s is null but %s is not: the routing is captured into both or neither",
          experts == nullptr ? "experts" : "weights", experts == nullptr ? "weights" : "experts"));
    }
    c.d_ff = l.moe.experts.front().d_ff;
    c.top_k = l.moe.top_k;
    const size_t route_needed = max_tokens_ * c.top_k;
    if (experts != nullptr && route_capacity < route_needed) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "route_capacity %d is too small: max_tokens %d x top_k %d needs %d entries",
          route_capacity, max_tokens_, c.top_k, route_needed));
    }
  }
  const size_t h_needed = max_tokens_ * c.top_k * c.d_ff;
  if (h != nullptr && h_capacity < h_needed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "h_capacity %d is too small: max_tokens %d x %sd_ff %d needs %d floats", h_capacity,
        max_tokens_, l.kind == LayerKind::kMoe ? absl::StrFormat("top_k %d x ", c.top_k) : "",
        c.d_ff, h_needed));
  }
  capture.Set(layer, c);
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const uint64_t>> Session::ExpertCounts(size_t layer) {
  FFLITE_RETURN_IF_ERROR(CheckLayer(layer));
  fflite::ExpertCounts* counts = backend_->expert_counts();
  if (counts == nullptr) {
    return absl::UnimplementedError(
        absl::StrFormat("backend '%s' keeps no routing statistics", backend_name_));
  }
  return counts->layer(layer);
}

absl::Status Session::ResetExpertCounts() {
  fflite::ExpertCounts* counts = backend_->expert_counts();
  if (counts == nullptr) {
    return absl::UnimplementedError(
        absl::StrFormat("backend '%s' keeps no routing statistics", backend_name_));
  }
  counts->Reset();
  return absl::OkStatus();
}

}  // namespace fflite
