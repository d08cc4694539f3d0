// Reference backend: every formula is written out once, in double, one token at a time.
#include "backends/reference/reference_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "base/status_macros.h"
#include "moe/routing.h"

namespace fflite {

bool ReferenceBackendAvailable(std::string* /*why*/) { return true; }

double ReferenceActivation(Activation activation, double x) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
  switch (activation) {
    case Activation::RELU: return x > 0.0 ? x : 0.0;
    case Activation::GELU_ERF: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::GELU_TANH:
      return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
    case Activation::SILU: return x / (1.0 + std::exp(-x));
    case Activation::SIGMOID: return 1.0 / (1.0 + std::exp(-x));
    case Activation::SWIGLU_OAI: {  // transformers GptOssExperts: the gate clamped above at 7
      const double c = std::min(x, 7.0);
      return c / (1.0 + std::exp(-1.702 * c));
    }
    default: return x;  // unreachable: the loader refuses unknown activations
  }
}

double ReferenceGlu(Activation activation, double gate, double up) {
  // gpt-oss: (clamp(up, -7, 7) + 1) · act(gate).
  if (activation == Activation::SWIGLU_OAI) up = std::min(std::max(up, -7.0), 7.0) + 1.0;
  return ReferenceActivation(activation, gate) * up;
}

namespace {

double Load(const TensorView& t, uint64_t i) {
  uint16_t h;
  float f;
  switch (t.dtype) {
    case DType::F16: std::memcpy(&h, t.data + 2 * i, 2); return F16ToF32(h);
    case DType::BF16: std::memcpy(&h, t.data + 2 * i, 2); return Bf16ToF32(h);
    default: std::memcpy(&f, t.data + 4 * i, 4); return f;
  }
}

// y = W·x (+ b)   W:[rows, cols] x:[cols] y:[rows]
// Quantised W is dequantised a row at a time through the dtype table (exactly: q · scale, and
// rotated layouts rotated back), into `row` [cols].
void MatVec(const TensorView& w, const TensorView& b, const double* x, double* y,
            std::vector<float>* row) {
  const uint64_t rows = w.shape[0], cols = w.shape[1];
  for (uint64_t r = 0; r < rows; ++r) {
    double acc = b.present() ? Load(b, r) : 0.0;
    if (w.quantized() || w.value_rows()) {
      DequantizeRows(w.dtype, w.layout, rows, cols, w.data, r, 1, row->data());
      for (uint64_t c = 0; c < cols; ++c) acc += static_cast<double>((*row)[c]) * x[c];
    } else {
      for (uint64_t c = 0; c < cols; ++c) acc += Load(w, r * cols + c) * x[c];
    }
    y[r] = acc;
  }
}

// One token at a time (passes of one token), every value in double: the layer's steps come from
// the layer runner and an MoE layer's from the MoE runner, like every backend's; the arithmetic
// of each step is written out here. Each FFN's quantised scales are checked before it runs
// (Model::CheckScales: a scan on first use, an atomic load after).
class ReferenceBackend : public Backend, LayerExecutor, ExpertExecutor {
 public:
  explicit ReferenceBackend(const Model& model) : model_(model) {
    const size_t d = model.d_model();
    size_t max_ff = 0, max_experts = 0, max_groups = 1;
    auto see = [&](const FfnView& f) { max_ff = std::max<size_t>(max_ff, f.d_ff_padded); };
    for (const LayerView& l : model.layers()) {
      if (l.kind == LayerKind::kDense) {
        see(l.ffn);
      } else {
        for (const FfnView& f : l.moe.experts) see(f);
        for (const FfnView& f : l.moe.shared_experts) see(f);
        max_experts = std::max<size_t>(max_experts, l.moe.num_experts);
        max_groups = std::max<size_t>(max_groups, l.moe.n_group);
      }
      routing_.push_back(l.kind == LayerKind::kMoe ? MakeRoutingParams(l.moe) : RoutingParams());
    }
    x_.resize(d);
    h_.resize(d);
    f_.resize(d);
    y_.resize(d);
    a_.resize(max_ff);
    b_.resize(max_ff);
    row_.resize(std::max(d, max_ff));
    logits_.resize(max_experts);
    expert_out_.resize(d);
    scratch_.Reserve(static_cast<uint32_t>(max_experts), static_cast<uint32_t>(max_groups));
    InitRunner(model, /*max_pass_tokens=*/1, /*time_routed_experts=*/false);
  }

  absl::Status Run(size_t layer, const float* input, size_t n_tokens, float* output) override {
    return runner_.Run(model_, layer, *this, this, input, n_tokens, output);
  }

 private:
  // --- LayerExecutor: one token per pass, x_ -> h_ -> f_ -> y_ in double.

  size_t PassTokens(const LayerView& /*layer*/) const override { return 1; }

  absl::Status PreNorm(const LayerPass& pass) override {
    const size_t d = model_.d_model();
    for (size_t i = 0; i < d; ++i) x_[i] = pass.x[i];
    if (pass.steps.pre_norm) {
      Norm(pass.view->norm, x_.data(), h_.data());
    } else {
      h_ = x_;
    }
    return absl::OkStatus();
  }

  absl::Status Dense(const LayerPass& pass) override {
    FFLITE_RETURN_IF_ERROR(model_.CheckFfnScales(pass.view->ffn));
    Ffn(pass.view->ffn, h_.data(), f_.data(), pass.scale,
        pass.capture != nullptr && pass.capture->h != nullptr
            ? pass.capture->h + pass.t0 * pass.capture->d_ff
            : nullptr);
    return absl::OkStatus();
  }

  absl::Status Finish(const LayerPass& pass, bool /*residual_added*/) override {
    const size_t d = model_.d_model();
    if (pass.steps.output_norm) {
      Norm(pass.view->output_norm, f_.data(), y_.data());
      f_ = y_;
    }
    for (size_t i = 0; i < d; ++i) f_[i] += pass.steps.residual ? x_[i] : 0.0;
    if (pass.steps.post_norm) {
      Norm(pass.view->norm, f_.data(), y_.data());
    } else {
      y_ = f_;
    }
    for (size_t i = 0; i < d; ++i) pass.y[i] = static_cast<float>(y_[i]);
    return absl::OkStatus();
  }

  // --- ExpertExecutor, f_ the sum (the token's experts in expert order, the runner's):
  //   out = Σ_{e in top-k} w_e · expert_e(x) + [sigmoid(gate·x)] · Σ_s shared_s(x)

  size_t ExpertBatchTokens() const override { return 1; }

  absl::Status Route(const MoeCall& call, uint32_t* experts, double* weights) override {
    const MoeView& m = *call.moe;
    MatVec(m.router, m.router_bias, h_.data(), logits_.data(), &row_);
    RouteToken(routing_[call.layer], logits_.data(), &scratch_, experts, weights);
    return absl::OkStatus();
  }

  absl::Status BeginExperts(const MoeCall& /*call*/, const ExpertGroups& /*groups*/) override {
    std::fill(f_.begin(), f_.end(), 0.0);
    return absl::OkStatus();
  }

  // The token's output of the expert (its capture row is the expert's rank j among the token's).
  absl::Status RunExpert(const MoeCall& call, const ExpertBatch& batch) override {
    const uint32_t j = batch.entries[0] % call.moe->top_k;
    const LayerCapture* capture = call.capture;
    FFLITE_RETURN_IF_ERROR(model_.CheckFfnScales(call.moe->experts[batch.expert]));
    Ffn(call.moe->experts[batch.expert], h_.data(), expert_out_.data(), batch.scale,
        capture != nullptr && capture->h != nullptr
            ? capture->h + (call.t0 * call.moe->top_k + j) * capture->d_ff
            : nullptr);
    return absl::OkStatus();
  }

  absl::Status AddExpert(const MoeCall& call, const ExpertBatch& batch,
                         bool /*ran_many*/) override {
    const size_t d = model_.d_model();
    const double w = call.route_weights[batch.entries[0]];  // in double, as routing gave it
    for (size_t i = 0; i < d; ++i) f_[i] += w * expert_out_[i];
    return absl::OkStatus();
  }

  absl::Status RunShared(const MoeCall& call, size_t s, size_t /*r0*/, size_t /*m*/,
                         bool /*last*/) override {
    const MoeView& m = *call.moe;
    FFLITE_RETURN_IF_ERROR(model_.CheckFfnScales(m.shared_experts[s]));
    const size_t d = model_.d_model();
    double gate = 1.0;
    if (m.shared_expert_gate.present()) {
      double g = 0.0;
      for (size_t i = 0; i < d; ++i) g += Load(m.shared_expert_gate, i) * h_[i];
      gate = 1.0 / (1.0 + std::exp(-g));
    }
    Ffn(m.shared_experts[s], h_.data(), expert_out_.data(), nullptr, nullptr);
    for (size_t i = 0; i < d; ++i) f_[i] += gate * expert_out_[i];
    return absl::OkStatus();
  }

  // LayerNorm: (x - mean) / sqrt(var + eps) · w' + b      RMSNorm: x / sqrt(mean(x²) + eps) · w'
  // w' = 1 + w with unit_offset (Gemma), else w. var is the population variance.
  void Norm(const NormView& n, const double* in, double* out) const {
    const size_t d = model_.d_model();
    double mean = 0.0;
    if (n.kind == NormKind::LAYER_NORM) {
      for (size_t i = 0; i < d; ++i) mean += in[i];
      mean /= static_cast<double>(d);
    }
    double sq = 0.0;
    for (size_t i = 0; i < d; ++i) sq += (in[i] - mean) * (in[i] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + n.eps);
    for (size_t i = 0; i < d; ++i) {
      const double w = Load(n.weight, i) + (n.unit_offset ? 1.0 : 0.0);
      const double b = n.bias.present() ? Load(n.bias, i) : 0.0;
      out[i] = (in[i] - mean) * inv * w + b;
    }
  }

  // plain: out = down( s ⊙ act(up·x + b_up) ) + b_down
  // gated: out = down( s ⊙ act(gate·x + b_gate) ⊙ (up·x + b_up) ) + b_down
  //   x:[d] up,gate:[d_ff_padded, d] down:[d, d_ff_padded]; s: neuron scales [d_ff_padded] or
  //   nullptr (all 1); captured: [d_ff] receives the hidden activations, or nullptr
  void Ffn(const FfnView& f, const double* x, double* out, const float* s, float* captured) {
    const size_t ff = f.d_ff_padded;
    MatVec(f.up, f.up_bias, x, a_.data(), &row_);
    if (f.gated) {
      MatVec(f.gate, f.gate_bias, x, b_.data(), &row_);
      for (size_t i = 0; i < ff; ++i) a_[i] = ReferenceGlu(f.activation, b_[i], a_[i]);
    } else {
      for (size_t i = 0; i < ff; ++i) a_[i] = ReferenceActivation(f.activation, a_[i]);
    }
    if (s != nullptr) {
      for (size_t i = 0; i < ff; ++i) a_[i] *= s[i];
    }
    if (captured != nullptr) {
      for (size_t i = 0; i < f.d_ff; ++i) captured[i] = static_cast<float>(a_[i]);
    }
    MatVec(f.down, f.down_bias, a_.data(), out, &row_);
  }

  const Model& model_;
  std::vector<RoutingParams> routing_;  // [layers], empty params for dense layers
  // Scratch, sized at creation: [d_model] vectors (expert_out_: one expert's output), [max
  // d_ff_padded] hiddens, [max experts] logits.
  std::vector<double> x_, h_, f_, y_, a_, b_, logits_, expert_out_;
  std::vector<float> row_;  // [max(d_model, d_ff_padded)]: one dequantised weight row
  RoutingScratch scratch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateReferenceBackend(const Model& model,
                                                                const BackendConfig& /*config*/) {
  return std::unique_ptr<Backend>(new ReferenceBackend(model));
}

}  // namespace fflite
