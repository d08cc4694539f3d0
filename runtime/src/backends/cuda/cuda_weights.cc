// The cuda backend's weights on the device (cuda_weights.h).
#include "backends/cuda/cuda_weights.h"

#include <algorithm>

#include "backends/cuda/cuda_api.h"
#include "format/dtype.h"
#include "layer/layer_runner.h"
#include "moe/routing.h"

namespace fflite {

uint64_t PlaceAfter(uint64_t* total, uint64_t bytes) {
  const uint64_t at = (*total + 255) / 256 * 256;
  *total = at + bytes;
  return at;
}

size_t TypeBytes(WType t) { return t == WType::kF32 ? 4 : 2; }

bool FusedDecodeTypes(const DevLayer& l, uint32_t d, WType* hidden, WType* down) {
  if (l.experts.empty() || l.route.top_k > cuda::kCombineMaxK) return false;
  const DevFfn& first = l.experts[0];
  *hidden = first.up.type;
  *down = first.down.type;
  const auto fits = [&](const DevMatrix& m, uint32_t cols, WType type) {
    if (m.type != type || m.cols != cols || reinterpret_cast<uintptr_t>(m.data) % 16 != 0) {
      return false;
    }
    if (m.quantised()) {  // whole 16-byte loads of codes within each row (QuantWarpRows)
      return cols % cuda::ValuesPer16Bytes(cuda::KindOf(type)) == 0;
    }
    return (cols * TypeBytes(type)) % 16 == 0;
  };
  const auto ok = [&](const DevFfn& f) {
    return f.gated == first.gated && f.activation == first.activation && f.ff % 4 == 0 &&
           fits(f.up, d, *hidden) && (!f.gated || fits(f.gate, d, *hidden)) &&
           fits(f.down, f.ff, *down);
  };
  return std::all_of(l.experts.begin(), l.experts.end(), ok) &&
         std::all_of(l.shared.begin(), l.shared.end(), ok);
}

cuda::ExpertPtrs ExpertEntry(const DevFfn& f) {
  return cuda::ExpertPtrs{f.up.data,   f.gate.data,   f.down.data,   f.up_bias,
                          f.gate_bias, f.down_bias,   f.scale,       f.ff,
                          0,           f.up.scales,   f.gate.scales, f.down.scales};
}

const void* Arena::PlaceRaw(const void* src, uint64_t bytes) {
  uint8_t* at = Reserve(bytes);
  if (base_ != nullptr && status_.ok()) {
    status_ = CudaStatus("cudaMemcpy (weights)", cudaMemcpy(at, src, bytes,
                                                            cudaMemcpyHostToDevice));
  }
  return at;
}

const float* Arena::PlaceFloats(uint64_t count, const std::function<void(float*)>& fill) {
  uint8_t* at = Reserve(count * sizeof(float));
  if (base_ != nullptr && status_.ok()) {
    staging_.resize(count);
    fill(staging_.data());
    status_ = CudaStatus("cudaMemcpy (weights)", cudaMemcpy(at, staging_.data(),
                                                            count * sizeof(float),
                                                            cudaMemcpyHostToDevice));
  }
  return reinterpret_cast<const float*>(at);
}

void Arena::PlaceQuant(const TensorView& t, cuda::QKind kind, const void** codes,
                       const uint16_t** scales) {
  const uint64_t rows = t.shape[0], cols = t.shape[1];
  const uint64_t code_bytes = cuda::DeviceCodeBytes(kind, rows, cols);
  const uint64_t scale_bytes = cuda::DeviceScaleBytes(kind, rows, cols);
  uint8_t* c = Reserve(code_bytes);
  uint8_t* s = Reserve(scale_bytes);
  *codes = c;
  *scales = reinterpret_cast<const uint16_t*>(s);
  if (base_ == nullptr || !status_.ok()) return;
  codes_staging_.resize(code_bytes);
  scales_staging_.resize(scale_bytes / 2);
  cuda::RelayForDevice(t, kind, codes_staging_.data(), scales_staging_.data());
  status_ = CudaStatus("cudaMemcpy (weights)",
                       cudaMemcpy(c, codes_staging_.data(), code_bytes, cudaMemcpyHostToDevice));
  if (status_.ok()) {
    status_ = CudaStatus("cudaMemcpy (weights)", cudaMemcpy(s, scales_staging_.data(), scale_bytes,
                                                            cudaMemcpyHostToDevice));
  }
}

uint8_t* Arena::Reserve(uint64_t bytes) {
  const uint64_t at = (size_ + 255) / 256 * 256;  // cuBLAS and 16-byte loads like alignment
  size_ = at + bytes;
  return base_ == nullptr ? nullptr : base_ + at;
}

namespace {

// A float vector of any float dtype as f32 (null when absent).
const float* PlaceVector(Arena* a, const TensorView& t) {
  if (!t.present()) return nullptr;
  const uint64_t n = t.numel();
  return a->PlaceFloats(n, [&t, n](float* out) { FindDType(t.dtype)->to_f32(t.data, 0, n, out); });
}

// f32/f16/bf16 matrices as stored; quantised ones kept quantised where asked and possible
// (cuda_quant.h), else dequantised to f32 (exactly: q · scale).
DevMatrix PlaceMatrix(Arena* a, const TensorView& t, bool keep_quantised) {
  DevMatrix m;
  m.rows = static_cast<uint32_t>(t.shape[0]);
  m.cols = static_cast<uint32_t>(t.shape.size() > 1 ? t.shape[1] : 1);
  cuda::QKind kind;
  if (keep_quantised && cuda::KeepsQuantisedOnDevice(t, &kind)) {
    m.type = cuda::TypeOf(kind);
    a->PlaceQuant(t, kind, &m.data, &m.scales);
    return m;
  }
  if (t.quantized()) {
    const uint64_t rows = m.rows, cols = m.cols;
    m.type = WType::kF32;
    m.data = a->PlaceFloats(rows * cols, [&t, rows, cols](float* out) {
      DequantizeRows(t.dtype, t.layout, rows, cols, t.data, 0, rows, out);
    });
    return m;
  }
  m.type = t.dtype == DType::F16    ? WType::kF16
           : t.dtype == DType::BF16 ? WType::kBF16
                                    : WType::kF32;
  std::vector<uint8_t> transposed;  // a VALUE_ROWS down matrix goes up as [rows, cols]
  const TensorView row_major = RowMajorView(t, &transposed);
  m.data = a->PlaceRaw(row_major.data, row_major.size);
  return m;
}

DevFfn PlaceFfn(Arena* a, const FfnView& f, bool keep_quantised) {
  DevFfn d;
  d.up = PlaceMatrix(a, f.up, keep_quantised);
  if (f.gated) d.gate = PlaceMatrix(a, f.gate, keep_quantised);
  d.down = PlaceMatrix(a, f.down, keep_quantised);
  d.up_bias = PlaceVector(a, f.up_bias);
  d.gate_bias = f.gated ? PlaceVector(a, f.gate_bias) : nullptr;
  d.down_bias = PlaceVector(a, f.down_bias);
  d.activation = static_cast<uint8_t>(f.activation);
  d.gated = f.gated;
  d.ff = f.d_ff_padded;
  return d;
}

}  // namespace

std::vector<DevLayer> PlaceModel(Arena* a, const Model& model, bool keep_quantised) {
  std::vector<DevLayer> layers;
  for (const LayerView& l : model.layers()) {
    DevLayer d;
    const LayerSteps steps = StepsOf(l);
    d.residual = steps.residual;
    auto place_norm = [a](const NormView& n, bool pre, DevNorm* out) {
      if (!n.present) return;
      out->present = true;
      out->layer_norm = n.kind == NormKind::LAYER_NORM;
      out->pre = pre;
      out->eps = n.eps;
      out->weight = a->PlaceFloats(n.weight.numel(),
                                   [&n](float* w) { NormWeightAsApplied(n, w); });
      out->bias = PlaceVector(a, n.bias);
    };
    place_norm(l.norm, steps.pre_norm, &d.norm);
    place_norm(l.output_norm, false, &d.output_norm);
    if (l.kind == LayerKind::kDense) {
      d.ffn = PlaceFfn(a, l.ffn, keep_quantised);
    } else {
      const MoeView& m = l.moe;
      d.moe = true;
      d.router = PlaceMatrix(a, m.router, keep_quantised);
      d.router_bias = PlaceVector(a, m.router_bias);
      const RoutingParams host = MakeRoutingParams(m);
      d.route = ToRouteParams(host);
      if (!host.score_correction_bias.empty()) {
        d.route.score_correction_bias = static_cast<const double*>(a->PlaceRaw(
            host.score_correction_bias.data(), host.score_correction_bias.size() * sizeof(double)));
      }
      for (const FfnView& f : m.experts) d.experts.push_back(PlaceFfn(a, f, keep_quantised));
      for (const FfnView& f : m.shared_experts) {
        d.shared.push_back(PlaceFfn(a, f, keep_quantised));
      }
      if (m.shared_expert_gate.present()) {
        d.shared_gate = PlaceMatrix(a, m.shared_expert_gate, /*keep_quantised=*/false);
      }
    }
    layers.push_back(std::move(d));
  }
  return layers;
}

}  // namespace fflite
