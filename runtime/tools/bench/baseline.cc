// Baseline: xnn_create_fully_connected_nc_f32 per matrix (whole matrix, one operator), scalar
// activations, norms and residual, on the same pthreadpool setup as the CPU backend. MoE layers
// as a general engine's loop of dense operators would run them: the router as one operator, then
// per active expert its plain operators over the gathered tokens, and the shared experts the same
// way, in the steps of fflite's layer and MoE runners (what differs is only how each step
// computes).
#include "bench/baseline.h"

#include <pthreadpool.h>
#include <xnnpack.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/aligned_buffer.h"
#include "format/writer.h"
#include "layer/layer_runner.h"
#include "moe/moe_runner.h"
#include "moe/routing.h"

namespace fflite {
namespace bench {

namespace {

float Act(Activation a, float x) {
  switch (a) {
    case Activation::RELU: return x > 0.0f ? x : 0.0f;
    case Activation::GELU_ERF: return 0.5f * x * (1.0f + std::erf(x * 0.70710678f));
    case Activation::GELU_TANH:
      return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
    case Activation::SILU: return x / (1.0f + std::exp(-x));
    case Activation::SWIGLU_OAI: {
      const float c = std::min(x, 7.0f);
      return c / (1.0f + std::exp(-1.702f * c));
    }
    default: return 1.0f / (1.0f + std::exp(-x));
  }
}

// act(g)·u, with gpt-oss's clamp(u, -7, 7) + 1 for SWIGLU_OAI.
float Glu(Activation a, float g, float u) {
  if (a == Activation::SWIGLU_OAI) u = std::min(std::max(u, -7.0f), 7.0f) + 1.0f;
  return Act(a, g) * u;
}

struct Ffn {
  xnn_operator_t up = nullptr, gate = nullptr, down = nullptr;
  const FfnView* view = nullptr;
};

struct Layer {
  Ffn ffn;  // dense
  const LayerView* view = nullptr;
  std::vector<float> norm_w, norm_b;  // [d], f32 (unit offset added)
  // MoE
  xnn_operator_t router = nullptr;  // [E, d] (+ bias)
  RoutingParams routing;
  std::vector<Ffn> experts, shared;
  std::vector<float> shared_gate;  // [d] or empty
};

class Baseline : public Backend, LayerExecutor, ExpertExecutor {
 public:
  explicit Baseline(const Model& model) : model_(model) {}
  ~Baseline() override {
    auto drop = [](Ffn& f) {
      for (xnn_operator_t op : {f.up, f.gate, f.down}) {
        if (op != nullptr) xnn_delete_operator(op);
      }
    };
    for (Layer& l : layers_) {
      drop(l.ffn);
      for (Ffn& f : l.experts) drop(f);
      for (Ffn& f : l.shared) drop(f);
      if (l.router != nullptr) xnn_delete_operator(l.router);
    }
    if (pool_ != nullptr) pthreadpool_destroy(pool_);
  }

  absl::Status Init(const BackendConfig& config) {
    if (xnn_initialize(nullptr) != xnn_status_success) {
      return absl::FailedPreconditionError("xnn_initialize failed");
    }
    // Every quantised matrix is dequantised below: its scales first (the loader leaves them).
    if (absl::Status scales = model_.CheckAllScales(); !scales.ok()) return scales;
    if (config.num_threads > 1) pool_ = pthreadpool_create(config.num_threads);
    const size_t d = model_.d_model();
    size_t max_ff = 0;
    size_t max_e = 0, max_groups = 1;
    const float inf = std::numeric_limits<float>::infinity();
    auto make = [&](const TensorView& w, const TensorView& b, xnn_operator_t* op) {
      const std::vector<float> wf = ToF32(w), bf = ToF32(b);
      const size_t out = w.shape[0], in = w.shape[1];
      return xnn_create_fully_connected_nc_f32(in, out, in, out, wf.data(),
                                               bf.empty() ? nullptr : bf.data(), -inf, inf, 0,
                                               op) == xnn_status_success;
    };
    auto make_ffn = [&](const FfnView& f, Ffn* out) {
      out->view = &f;
      bool ok = make(f.up, f.up_bias, &out->up) && make(f.down, f.down_bias, &out->down);
      if (f.gated) ok = ok && make(f.gate, f.gate_bias, &out->gate);
      max_ff = std::max<size_t>(max_ff, f.d_ff_padded);
      return ok;
    };
    for (const LayerView& lv : model_.layers()) {
      Layer l;
      l.view = &lv;
      bool ok = true;
      if (lv.kind == LayerKind::kDense) {
        ok = make_ffn(lv.ffn, &l.ffn);
      } else {
        const MoeView& m = lv.moe;
        l.routing = MakeRoutingParams(m);
        ok = make(m.router, m.router_bias, &l.router);
        l.experts.resize(m.experts.size());
        for (size_t e = 0; ok && e < m.experts.size(); ++e) ok = make_ffn(m.experts[e], &l.experts[e]);
        l.shared.resize(m.shared_experts.size());
        for (size_t e = 0; ok && e < m.shared_experts.size(); ++e) {
          ok = make_ffn(m.shared_experts[e], &l.shared[e]);
        }
        l.shared_gate = ToF32(m.shared_expert_gate);
        max_e = std::max<size_t>(max_e, m.num_experts);
        max_groups = std::max<size_t>(max_groups, m.n_group);
      }
      if (!ok) return absl::InternalError("xnn_create_fully_connected_nc_f32 failed");
      if (lv.norm.present) {
        l.norm_w = ToF32(lv.norm.weight);
        for (float& w : l.norm_w) w += lv.norm.unit_offset ? 1.0f : 0.0f;
        l.norm_b = ToF32(lv.norm.bias);
      }
      layers_.push_back(std::move(l));
    }
    if (max_e > 0) {
      const size_t t = config.max_tokens;
      if (!gx_.Allocate(t * d, XNN_EXTRA_BYTES) || !eo_.Allocate(t * d) ||
          !logits_.Allocate(t * max_e)) {
        return absl::ResourceExhaustedError("baseline scratch");
      }
      router_.Reserve(static_cast<uint32_t>(max_e), static_cast<uint32_t>(max_groups));
    }
    const size_t t = config.max_tokens;
    if (!x_.Allocate(t * d, XNN_EXTRA_BYTES) || !a_.Allocate(t * max_ff, XNN_EXTRA_BYTES) ||
        !g_.Allocate(t * max_ff) || !f_.Allocate(t * d)) {
      return absl::ResourceExhaustedError("baseline scratch");
    }
    max_tokens_ = t;
    InitRunner(model_, t, /*time_routed_experts=*/false);
    return absl::OkStatus();
  }

  absl::Status Run(size_t layer, const float* input, size_t n, float* output) override {
    const absl::Status status = runner_.Run(model_, layer, *this, this, input, n, output);
    // XNNPACK's operators leave the pool's threads spinning after each run; put them to sleep,
    // as the CPU backend does at the end of a Run, so that neither side of a comparison runs
    // while the other's workers spin on the same cores.
    if (pool_ != nullptr) {
      pthreadpool_parallelize_1d(pool_, [](void*, size_t) {}, nullptr,
                                 pthreadpool_get_threads_count(pool_),
                                 PTHREADPOOL_FLAG_YIELD_WORKERS);
    }
    return status;
  }

 private:
  // --- The layer's steps: x_ = [Norm](x), f_ = body(x_), y = [Norm]([x +] f_), in f32.
  size_t PassTokens(const LayerView& /*layer*/) const override { return max_tokens_; }

  absl::Status PreNorm(const LayerPass& pass) override {
    const size_t d = model_.d_model();
    for (size_t t = 0; t < pass.n; ++t) {
      if (pass.steps.pre_norm) {
        Norm(layers_[pass.layer], pass.x + t * d, x_.data() + t * d);
      } else {
        std::memcpy(x_.data() + t * d, pass.x + t * d, d * sizeof(float));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Dense(const LayerPass& pass) override {
    if (!RunFfn(layers_[pass.layer].ffn, pass.n, x_.data(), f_.data())) {
      return absl::InternalError("ffn");
    }
    return absl::OkStatus();
  }

  absl::Status Finish(const LayerPass& pass, bool /*residual_added*/) override {
    const size_t d = model_.d_model();
    for (size_t i = 0; i < pass.n * d; ++i) f_.data()[i] += pass.steps.residual ? pass.x[i] : 0.0f;
    for (size_t t = 0; t < pass.n; ++t) {
      if (pass.steps.post_norm) {
        Norm(layers_[pass.layer], f_.data() + t * d, pass.y + t * d);
      } else {
        std::memcpy(pass.y + t * d, f_.data() + t * d, d * sizeof(float));
      }
    }
    return absl::OkStatus();
  }

  // --- The MoE's steps: f_ = Σ_e w · expert_e(x_) + [sigmoid(gate·x_)] · Σ shared(x_).
  size_t ExpertBatchTokens() const override { return max_tokens_; }

  absl::Status Route(const MoeCall& call, uint32_t* experts, double* weights) override {
    const Layer& l = layers_[call.layer];
    if (!Fc(l.router, call.n, x_.data(), logits_.data())) return absl::InternalError("router");
    router_.Route(l.routing, logits_.data(), call.moe->num_experts, call.n, experts, weights);
    return absl::OkStatus();
  }

  absl::Status BeginExperts(const MoeCall& call, const ExpertGroups& /*groups*/) override {
    std::memset(f_.data(), 0, call.n * model_.d_model() * sizeof(float));
    return absl::OkStatus();
  }

  absl::Status RunExpert(const MoeCall& call, const ExpertBatch& b) override {
    const size_t d = model_.d_model();
    for (size_t r = 0; r < b.count; ++r) {
      std::memcpy(gx_.data() + r * d, x_.data() + b.tokens[r] * d, d * sizeof(float));
    }
    if (!RunFfn(layers_[call.layer].experts[b.expert], b.count, gx_.data(), eo_.data())) {
      return absl::InternalError("expert");
    }
    return absl::OkStatus();
  }

  absl::Status AddExpert(const MoeCall& /*call*/, const ExpertBatch& b,
                         bool /*ran_many*/) override {
    const size_t d = model_.d_model();
    for (size_t r = 0; r < b.count; ++r) {
      for (size_t i = 0; i < d; ++i) {
        f_.data()[b.tokens[r] * d + i] += b.weights[r] * eo_.data()[r * d + i];
      }
    }
    return absl::OkStatus();
  }

  absl::Status RunShared(const MoeCall& call, size_t s, size_t r0, size_t m,
                         bool /*last*/) override {
    const Layer& l = layers_[call.layer];
    const size_t d = model_.d_model();
    if (!RunFfn(l.shared[s], m, x_.data() + r0 * d, eo_.data())) {
      return absl::InternalError("shared expert");
    }
    for (size_t t = 0; t < m; ++t) {
      const float* x = x_.data() + (r0 + t) * d;
      float g = 1.0f;
      if (!l.shared_gate.empty()) {
        float dot = 0.0f;
        for (size_t i = 0; i < d; ++i) dot += l.shared_gate[i] * x[i];
        g = 1.0f / (1.0f + std::exp(-dot));
      }
      for (size_t i = 0; i < d; ++i) f_.data()[(r0 + t) * d + i] += g * eo_.data()[t * d + i];
    }
    return absl::OkStatus();
  }

  // out[n, d] = FFN(in[n, d])
  bool RunFfn(const Ffn& f, size_t n, const float* in, float* out) {
    const FfnView& v = *f.view;
    const size_t ff = v.d_ff_padded;
    if (!Fc(f.up, n, in, a_.data())) return false;
    if (v.gated) {
      if (!Fc(f.gate, n, in, g_.data())) return false;
      for (size_t i = 0; i < n * ff; ++i) a_.data()[i] = Glu(v.activation, g_.data()[i], a_.data()[i]);
    } else {
      for (size_t i = 0; i < n * ff; ++i) a_.data()[i] = Act(v.activation, a_.data()[i]);
    }
    return Fc(f.down, n, a_.data(), out);
  }

  static std::vector<float> ToF32(const TensorView& t) {
    std::vector<float> v;
    if (!t.present()) return v;
    v.resize(t.numel());
    // Quantised weights are dequantised: plain XNNPACK 2022 has no block-quantised product, so
    // the baseline is what a user of the library alone would run on such a model.
    const uint64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, k = t.shape.back();
    DequantizeRows(t.dtype, t.layout, rows, k, t.data, 0, rows, v.data());
    return v;
  }

  bool Fc(xnn_operator_t op, size_t n, const float* in, float* out) {
    return xnn_setup_fully_connected_nc_f32(op, n, in, out, pool_) == xnn_status_success &&
           xnn_run_operator(op, pool_) == xnn_status_success;
  }

  void Norm(const Layer& l, const float* in, float* out) const {
    const size_t d = model_.d_model();
    const bool ln = l.view->norm.kind == NormKind::LAYER_NORM;
    float mean = 0.0f;
    if (ln) {
      for (size_t i = 0; i < d; ++i) mean += in[i];
      mean /= static_cast<float>(d);
    }
    float sq = 0.0f;
    for (size_t i = 0; i < d; ++i) sq += (in[i] - mean) * (in[i] - mean);
    const float inv = 1.0f / std::sqrt(sq / static_cast<float>(d) + l.view->norm.eps);
    for (size_t i = 0; i < d; ++i) {
      out[i] = (in[i] - mean) * inv * l.norm_w[i] + (l.norm_b.empty() ? 0.0f : l.norm_b[i]);
    }
  }

  const Model& model_;
  pthreadpool_t pool_ = nullptr;
  std::vector<Layer> layers_;
  AlignedBuffer<float> x_, a_, g_, f_;  // [T, d] + tail, [T, ff] + tail, [T, ff], [T, d]
  // MoE: gathered tokens [T, d] + tail, expert output [T, d], logits [T, E]
  AlignedBuffer<float> gx_, eo_, logits_;
  HostRouter router_;
  size_t max_tokens_ = 1;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBaseline(const Model& model,
                                                        const BackendConfig& config) {
  auto b = std::make_unique<Baseline>(model);
  absl::Status status = b->Init(config);
  if (!status.ok()) return status;
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace bench
}  // namespace fflite
