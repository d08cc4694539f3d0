// Baseline: xnn_create_fully_connected_nc_f32 per matrix (whole matrix, one operator), scalar
// activations, norms and residual, on the same pthreadpool setup as the xnnpack backend.
#include "bench/baseline.h"

#include <pthreadpool.h>
#include <xnnpack.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/aligned_buffer.h"
#include "format/writer.h"

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
    default: return 1.0f / (1.0f + std::exp(-x));
  }
}

struct Layer {
  xnn_operator_t up = nullptr, gate = nullptr, down = nullptr;
  const LayerView* view = nullptr;
  std::vector<float> norm_w, norm_b;  // [d], f32 (unit offset added)
};

class Baseline : public Backend {
 public:
  explicit Baseline(const Model& model) : model_(model) {}
  ~Baseline() override {
    for (Layer& l : layers_) {
      for (xnn_operator_t op : {l.up, l.gate, l.down}) {
        if (op != nullptr) xnn_delete_operator(op);
      }
    }
    if (pool_ != nullptr) pthreadpool_destroy(pool_);
  }

  absl::Status Init(const BackendConfig& config) {
    if (xnn_initialize(nullptr) != xnn_status_success) {
      return absl::FailedPreconditionError("xnn_initialize failed");
    }
    if (config.num_threads > 1) pool_ = pthreadpool_create(config.num_threads);
    const size_t d = model_.d_model();
    size_t max_ff = 0;
    for (const LayerView& lv : model_.layers()) {
      if (lv.kind != LayerKind::kDense) {
        return absl::UnimplementedError("the baseline runs dense layers only");
      }
      Layer l;
      l.view = &lv;
      const FfnView& f = lv.ffn;
      const float inf = std::numeric_limits<float>::infinity();
      auto make = [&](const TensorView& w, const TensorView& b, xnn_operator_t* op) {
        const std::vector<float> wf = ToF32(w), bf = ToF32(b);
        const size_t out = w.shape[0], in = w.shape[1];
        return xnn_create_fully_connected_nc_f32(in, out, in, out, wf.data(),
                                                 bf.empty() ? nullptr : bf.data(), -inf, inf, 0,
                                                 op) == xnn_status_success;
      };
      bool ok = make(f.up, f.up_bias, &l.up) && make(f.down, f.down_bias, &l.down);
      if (f.gated) ok = ok && make(f.gate, f.gate_bias, &l.gate);
      if (!ok) return absl::InternalError("xnn_create_fully_connected_nc_f32 failed");
      if (lv.norm.present) {
        l.norm_w = ToF32(lv.norm.weight);
        for (float& w : l.norm_w) w += lv.norm.unit_offset ? 1.0f : 0.0f;
        l.norm_b = ToF32(lv.norm.bias);
      }
      max_ff = std::max<size_t>(max_ff, f.d_ff_padded);
      layers_.push_back(std::move(l));
    }
    const size_t t = config.max_tokens;
    if (!x_.Allocate(t * d, XNN_EXTRA_BYTES) || !a_.Allocate(t * max_ff, XNN_EXTRA_BYTES) ||
        !g_.Allocate(t * max_ff) || !f_.Allocate(t * d)) {
      return absl::ResourceExhaustedError("baseline scratch");
    }
    return absl::OkStatus();
  }

  absl::Status Run(size_t layer, const float* input, size_t n, float* output) override {
    const Layer& l = layers_[layer];
    const LayerView& lv = *l.view;
    const size_t d = model_.d_model(), ff = lv.ffn.d_ff_padded;
    const bool pre = lv.norm.present && lv.norm.placement == NormPlacement::PRE;
    const bool post = lv.norm.present && !pre;
    for (size_t t = 0; t < n; ++t) {
      if (pre) {
        Norm(l, input + t * d, x_.data() + t * d);
      } else {
        std::memcpy(x_.data() + t * d, input + t * d, d * sizeof(float));
      }
    }
    if (!Fc(l.up, n, x_.data(), a_.data())) return absl::InternalError("up");
    if (lv.ffn.gated) {
      if (!Fc(l.gate, n, x_.data(), g_.data())) return absl::InternalError("gate");
      for (size_t i = 0; i < n * ff; ++i) a_.data()[i] *= Act(lv.ffn.activation, g_.data()[i]);
    } else {
      for (size_t i = 0; i < n * ff; ++i) a_.data()[i] = Act(lv.ffn.activation, a_.data()[i]);
    }
    if (!Fc(l.down, n, a_.data(), f_.data())) return absl::InternalError("down");
    for (size_t i = 0; i < n * d; ++i) f_.data()[i] += lv.residual ? input[i] : 0.0f;
    for (size_t t = 0; t < n; ++t) {
      if (post) {
        Norm(l, f_.data() + t * d, output + t * d);
      } else {
        std::memcpy(output + t * d, f_.data() + t * d, d * sizeof(float));
      }
    }
    return absl::OkStatus();
  }

 private:
  static std::vector<float> ToF32(const TensorView& t) {
    std::vector<float> v;
    if (!t.present()) return v;
    v.resize(t.numel());
    ConvertElements(t.dtype, t.data, DType::F32, reinterpret_cast<uint8_t*>(v.data()), t.numel());
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
