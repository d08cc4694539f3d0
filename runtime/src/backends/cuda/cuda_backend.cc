// The cuda backend's host side: device probing, the weight upload, scratch, and each layer's
// sequence of kernels and cuBLAS products. Layer semantics (norm placement, residual order,
// routing, grouping) are those of the reference backend; routing runs route::Route on the device
// and grouping the shared GroupByExpert on the host.
#include "backends/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/layer_steps.h"
#include "base/status_macros.h"
#include "format/dtype.h"
#include "moe/expert_counts.h"
#include "moe/grouping.h"
#include "moe/routing.h"

namespace fflite {
namespace {

using cuda::WType;

static_assert(static_cast<uint8_t>(Activation::RELU) == 1 &&
                  static_cast<uint8_t>(Activation::GELU_ERF) == 2 &&
                  static_cast<uint8_t>(Activation::GELU_TANH) == 3 &&
                  static_cast<uint8_t>(Activation::SILU) == 4 &&
                  static_cast<uint8_t>(Activation::SIGMOID) == 5,
              "cuda_kernels.cu's Act() switches on these values");

// Up to this many tokens a product runs on the f32-activation kernel (each weight row read once
// per 8 tokens); above it on cuBLAS.
constexpr size_t kGemvMaxTokens = 8;
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
constexpr int kDevice = 0;

absl::Status CudaStatus(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // clear a non-sticky error so that later calls do not report it again
  if (e == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(absl::StrFormat("%s: out of device memory", what));
  }
  return absl::InternalError(
      absl::StrFormat("%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}

// cuBLAS, opened on first use rather than linked: linking it costs every process that loads
// libfflite ~0.4 s at start-up (measured: an empty program linked to libcublas.so.13 starts in
// 0.37 s instead of 0.005 s), GPU or not, and a machine without the CUDA libraries could not load
// libfflite at all.
struct CublasApi {
  std::string error;  // why it could not be opened; empty when every entry point was found
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // cublasGemmEx (C++ sees overloads, so the type is spelled out)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
};

const CublasApi& Cublas() {
  static const CublasApi api = [] {
    CublasApi a;
    // The soname, then the toolkit's library folder this fflite was built against.
    void* lib = dlopen(FFLITE_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen(FFLITE_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      a.error = absl::StrFormat("cuBLAS (%s) cannot be loaded: %s", FFLITE_CUBLAS_SONAME,
                                e != nullptr ? e : "dlopen failed");
      return a;
    }
    bool ok = true;
    auto find = [&](const char* name, auto* fn) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      if (*fn == nullptr && ok) {
        ok = false;
        a.error = absl::StrFormat("cuBLAS (%s) has no %s", FFLITE_CUBLAS_SONAME, name);
      }
    };
    find("cublasCreate_v2", &a.create);
    find("cublasDestroy_v2", &a.destroy);
    find("cublasSetStream_v2", &a.set_stream);
    find("cublasSetWorkspace_v2", &a.set_workspace);
    find("cublasGemmEx", &a.gemm_ex);
    find("cublasGetStatusName", &a.status_name);
    return a;  // the library stays open for the process's life
  }();
  return api;
}

absl::Status CublasStatus(const char* what, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  if (s == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(absl::StrFormat("%s: out of device memory", what));
  }
  return absl::InternalError(absl::StrFormat("%s: %s", what, Cublas().status_name(s)));
}

#define FFLITE_CUDA_CHECK(what, expr) FFLITE_RETURN_IF_ERROR(CudaStatus(what, (expr)))
#define FFLITE_CUBLAS_CHECK(what, expr) FFLITE_RETURN_IF_ERROR(CublasStatus(what, (expr)))

struct Probe {
  bool ok = false;
  std::string why;
  std::string device;
};

// Asked once per process: the answer does not change while it runs.
const Probe& ProbeDevice() {
  static const Probe probe = [] {
    Probe p;
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    cudaGetLastError();
    if (e == cudaErrorInsufficientDriver) {
      p.why = absl::StrFormat(
          "no NVIDIA driver, or one older than this fflite's CUDA runtime %d.%d needs "
          "(cudaErrorInsufficientDriver)",
          CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
      return p;
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
      p.why = "no CUDA device (cudaErrorNoDevice; check CUDA_VISIBLE_DEVICES)";
      return p;
    }
    if (e != cudaSuccess) {
      p.why = absl::StrFormat("cudaGetDeviceCount: %s (%s)", cudaGetErrorName(e),
                              cudaGetErrorString(e));
      return p;
    }
    cudaDeviceProp prop;
    const cudaError_t pe = cudaGetDeviceProperties(&prop, kDevice);
    if (pe != cudaSuccess) {
      cudaGetLastError();
      p.why = absl::StrFormat("cudaGetDeviceProperties: %s", cudaGetErrorString(pe));
      return p;
    }
    p.device = absl::StrFormat("%s (sm_%d%d, %.1f GiB, device %d)", prop.name, prop.major,
                               prop.minor, static_cast<double>(prop.totalGlobalMem) / (1 << 30),
                               kDevice);
    if (prop.major < 8) {
      p.why = absl::StrFormat(
          "device %d, %s, has compute capability %d.%d; this fflite has kernels for 8.0 and newer",
          kDevice, prop.name, prop.major, prop.minor);
      return p;
    }
    if (!Cublas().error.empty()) {
      p.why = Cublas().error;
      return p;
    }
    p.ok = true;
    return p;
  }();
  return probe;
}

// --- The weights on the device. ---

struct DevMatrix {
  const void* data = nullptr;
  WType type = WType::kF32;
  uint32_t rows = 0, cols = 0;
};

struct DevFfn {
  DevMatrix up, gate, down;
  const float* up_bias = nullptr;  // null when absent
  const float* gate_bias = nullptr;
  const float* down_bias = nullptr;
  uint8_t activation = 0;
  bool gated = false;
  uint32_t ff = 0;  // d_ff_padded
  float* scale = nullptr;  // neuron edits [ff] in device memory (owned by the backend) or null
};

struct DevNorm {
  bool present = false, layer_norm = false, pre = false;
  float eps = 0.0f;
  const float* weight = nullptr;  // unit offset applied
  const float* bias = nullptr;
};

struct DevLayer {
  bool moe = false;
  bool residual = false;
  DevNorm norm;
  DevFfn ffn;  // dense
  // MoE
  DevMatrix router;
  const float* router_bias = nullptr;
  route::Params route{};  // score_correction_bias in device memory
  std::vector<DevFfn> experts, shared;
  DevMatrix shared_gate;  // rows 0 when absent
  // A few tokens run every chosen expert in one launch per step (cuda::ExpertsHidden) where the
  // experts allow it (FusedDecodeType): their table, routed experts then shared ones.
  bool fused = false;
  WType fused_type = WType::kF32;
  cuda::ExpertPtrs* table = nullptr;  // device memory
  uint32_t max_ff = 0;                // of the experts in the table
  size_t counts_at = 0;               // where fused: its first counter in the device counters
};

// The offset of `bytes` placed after *total (256-byte aligned, as cuBLAS and 16-byte loads like),
// and *total advanced past them: the layout of one allocation holding several buffers.
uint64_t PlaceAfter(uint64_t* total, uint64_t bytes) {
  const uint64_t at = (*total + 255) / 256 * 256;
  *total = at + bytes;
  return at;
}

// Bytes of one element of a matrix type.
size_t TypeBytes(WType t) { return t == WType::kF32 ? 4 : 2; }

// Whether the fused decode kernels can run a MoE layer's experts, and their weight type: one type
// and one activation for every routed and shared expert, rows of 16-byte multiples at 16-byte
// aligned addresses (the kernels' loads), and top_k within CombineExperts' limit.
bool FusedDecodeType(const DevLayer& l, uint32_t d, WType* type) {
  if (l.experts.empty() || l.route.top_k > cuda::kCombineMaxK) return false;
  const DevFfn& first = l.experts[0];
  *type = first.up.type;
  const auto fits = [&](const DevMatrix& m, uint32_t cols) {
    return m.type == *type && m.cols == cols && (cols * TypeBytes(*type)) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(m.data) % 16 == 0;
  };
  const auto ok = [&](const DevFfn& f) {
    return f.gated == first.gated && f.activation == first.activation && f.ff % 4 == 0 &&
           fits(f.up, d) && (!f.gated || fits(f.gate, d)) && fits(f.down, f.ff);
  };
  return std::all_of(l.experts.begin(), l.experts.end(), ok) &&
         std::all_of(l.shared.begin(), l.shared.end(), ok);
}

cuda::ExpertPtrs ExpertEntry(const DevFfn& f) {
  return cuda::ExpertPtrs{f.up.data,   f.gate.data, f.down.data, f.up_bias, f.gate_bias,
                          f.down_bias, f.scale,     f.ff,        0};
}

// Places tensors in one device allocation. Run twice: first with no base to size it, then with the
// allocation to copy (conversions happen only then).
class Arena {
 public:
  explicit Arena(uint8_t* base) : base_(base) {}
  uint64_t size() const { return size_; }
  const absl::Status& status() const { return status_; }

  const void* PlaceRaw(const void* src, uint64_t bytes) {
    uint8_t* at = Reserve(bytes);
    if (base_ != nullptr && status_.ok()) {
      status_ = CudaStatus("cudaMemcpy (weights)", cudaMemcpy(at, src, bytes,
                                                              cudaMemcpyHostToDevice));
    }
    return at;
  }
  // `count` floats produced by fill(out) on the host.
  const float* PlaceFloats(uint64_t count, const std::function<void(float*)>& fill) {
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

 private:
  uint8_t* Reserve(uint64_t bytes) {
    const uint64_t at = (size_ + 255) / 256 * 256;  // cuBLAS and 16-byte loads like alignment
    size_ = at + bytes;
    return base_ == nullptr ? nullptr : base_ + at;
  }
  uint8_t* base_;
  uint64_t size_ = 0;
  absl::Status status_;
  std::vector<float> staging_;
};

// A float vector of any float dtype as f32 (null when absent).
const float* PlaceVector(Arena* a, const TensorView& t) {
  if (!t.present()) return nullptr;
  const uint64_t n = t.numel();
  return a->PlaceFloats(n, [&t, n](float* out) { FindDType(t.dtype)->to_f32(t.data, 0, n, out); });
}

// f32/f16/bf16 matrices as stored; quantised ones dequantised to f32 (exactly: q · scale).
DevMatrix PlaceMatrix(Arena* a, const TensorView& t) {
  DevMatrix m;
  m.rows = static_cast<uint32_t>(t.shape[0]);
  m.cols = static_cast<uint32_t>(t.shape.size() > 1 ? t.shape[1] : 1);
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

DevFfn PlaceFfn(Arena* a, const FfnView& f) {
  DevFfn d;
  d.up = PlaceMatrix(a, f.up);
  if (f.gated) d.gate = PlaceMatrix(a, f.gate);
  d.down = PlaceMatrix(a, f.down);
  d.up_bias = PlaceVector(a, f.up_bias);
  d.gate_bias = f.gated ? PlaceVector(a, f.gate_bias) : nullptr;
  d.down_bias = PlaceVector(a, f.down_bias);
  d.activation = static_cast<uint8_t>(f.activation);
  d.gated = f.gated;
  d.ff = f.d_ff_padded;
  return d;
}

std::vector<DevLayer> PlaceModel(Arena* a, const Model& model) {
  std::vector<DevLayer> layers;
  for (const LayerView& l : model.layers()) {
    DevLayer d;
    const LayerSteps steps = StepsOf(l);
    d.residual = steps.residual;
    if (l.norm.present) {
      d.norm.present = true;
      d.norm.layer_norm = l.norm.kind == NormKind::LAYER_NORM;
      d.norm.pre = steps.pre_norm;
      d.norm.eps = l.norm.eps;
      const NormView& n = l.norm;
      d.norm.weight = a->PlaceFloats(n.weight.numel(),
                                     [&n](float* out) { NormWeightAsApplied(n, out); });
      d.norm.bias = PlaceVector(a, l.norm.bias);
    }
    if (l.kind == LayerKind::kDense) {
      d.ffn = PlaceFfn(a, l.ffn);
    } else {
      const MoeView& m = l.moe;
      d.moe = true;
      d.router = PlaceMatrix(a, m.router);
      d.router_bias = PlaceVector(a, m.router_bias);
      const RoutingParams host = MakeRoutingParams(m);
      d.route = ToRouteParams(host);
      if (!host.score_correction_bias.empty()) {
        d.route.score_correction_bias = static_cast<const double*>(a->PlaceRaw(
            host.score_correction_bias.data(), host.score_correction_bias.size() * sizeof(double)));
      }
      for (const FfnView& f : m.experts) d.experts.push_back(PlaceFfn(a, f));
      for (const FfnView& f : m.shared_experts) d.shared.push_back(PlaceFfn(a, f));
      if (m.shared_expert_gate.present()) d.shared_gate = PlaceMatrix(a, m.shared_expert_gate);
    }
    layers.push_back(std::move(d));
  }
  return layers;
}

// --- The backend. ---

class CudaBackend : public Backend {
 public:
  CudaBackend(const Model& model, size_t max_tokens)
      : model_(model), d_(model.d_model()), max_tokens_(max_tokens) {}

  // Copies the session's scales of (layer, expert) to the device, after the runs queued so far.
  absl::Status NeuronScalesChanged(size_t layer, int expert) override {
    FFLITE_CUDA_CHECK("cudaSetDevice", cudaSetDevice(kDevice));
    DevLayer& l = layers_[layer];
    DevFfn& f = expert < 0 ? l.ffn : l.experts[static_cast<size_t>(expert)];
    FFLITE_CUDA_CHECK("cudaEventSynchronize", cudaEventSynchronize(done_));
    const float* host = neuron_scales_.Get(layer, expert);
    if (host == nullptr) {
      cudaFree(f.scale);
      f.scale = nullptr;
    } else {
      if (f.scale == nullptr) {
        void* p = nullptr;
        FFLITE_CUDA_CHECK("cudaMalloc (neuron scales)", cudaMalloc(&p, f.ff * sizeof(float)));
        f.scale = static_cast<float*>(p);
      }
      FFLITE_CUDA_CHECK("cudaMemcpy (neuron scales)",
                        cudaMemcpy(f.scale, host, f.ff * sizeof(float), cudaMemcpyHostToDevice));
    }
    if (expert >= 0 && l.fused) {  // the expert's table entry points to the scales too
      FFLITE_CUDA_CHECK("cudaMemcpy (expert table)",
                        cudaMemcpy(&l.table[expert].scale, &f.scale, sizeof(f.scale),
                                   cudaMemcpyHostToDevice));
    }
    return absl::OkStatus();
  }

  ~CudaBackend() override {
    for (DevLayer& l : layers_) {
      cudaFree(l.ffn.scale);
      for (DevFfn& f : l.experts) cudaFree(f.scale);
    }
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (handle_ != nullptr) Cublas().destroy(handle_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    cudaFree(weights_);
    cudaFree(scratch_);
    cudaFree(decode_);
    cudaFreeHost(pinned_);
  }

  absl::Status Init() {
    FFLITE_CUDA_CHECK("cudaSetDevice", cudaSetDevice(kDevice));
    device_name_ = ProbeDevice().device;
    FFLITE_CUDA_CHECK("cudaStreamCreate", cudaStreamCreateWithFlags(&stream_,
                                                                    cudaStreamNonBlocking));
    FFLITE_CUBLAS_CHECK("cublasCreate", Cublas().create(&handle_));
    FFLITE_CUDA_CHECK("cudaEventCreate", cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));

    // Weights: size, allocate, copy.
    Arena sizing(nullptr);
    PlaceModel(&sizing, model_);
    FFLITE_CUDA_CHECK("cudaMalloc (weights)", cudaMalloc(&weights_, std::max<uint64_t>(
                                                                       sizing.size(), 1)));
    Arena arena(static_cast<uint8_t*>(weights_));
    layers_ = PlaceModel(&arena, model_);
    FFLITE_RETURN_IF_ERROR(arena.status());

    // Scratch, sized for max_tokens and the largest layer.
    uint32_t max_ff = 0, max_experts = 0, max_k = 0;
    size_t route_bytes = 0;
    auto see = [&max_ff](const DevFfn& f) { max_ff = std::max(max_ff, f.ff); };
    for (const DevLayer& l : layers_) {
      if (!l.moe) {
        see(l.ffn);
        continue;
      }
      for (const DevFfn& f : l.experts) see(f);
      for (const DevFfn& f : l.shared) see(f);
      max_experts = std::max(max_experts, l.route.num_experts);
      max_k = std::max(max_k, l.route.top_k);
      route_bytes = std::max(route_bytes, cuda::RouteScratchBytes(l.route));
    }
    const uint64_t t = max_tokens_, d = d_;
    uint64_t total = 0;
    auto reserve = [&total](uint64_t bytes) { return PlaceAfter(&total, bytes); };
    const uint64_t o_in = reserve(t * d * 4), o_out = reserve(t * d * 4), o_hn = reserve(t * d * 4);
    const uint64_t o_f = reserve(t * d * 4), o_tmp = reserve(t * d * 4), o_xe = reserve(t * d * 4);
    const uint64_t o_fe = reserve(t * d * 4), o_up = reserve(t * max_ff * 4);
    const uint64_t o_gate = reserve(t * max_ff * 4);
    const uint64_t o_half = reserve(t * std::max<uint64_t>(d, max_ff) * 2);
    const uint64_t o_logits = reserve(t * max_experts * 4), o_glogit = reserve(t * 4);
    const uint64_t o_route = reserve(t * route_bytes);
    const uint64_t o_experts = reserve(t * max_k * 4), o_weights = reserve(t * max_k * 8);
    const uint64_t o_gtokens = reserve(t * max_k * 4), o_gweights = reserve(t * max_k * 4);
    const uint64_t o_ws = reserve(kCublasWorkspaceBytes);
    FFLITE_CUDA_CHECK("cudaMalloc (scratch)", cudaMalloc(&scratch_, total));
    uint8_t* s = static_cast<uint8_t*>(scratch_);
    in_ = reinterpret_cast<float*>(s + o_in);
    out_ = reinterpret_cast<float*>(s + o_out);
    hn_ = reinterpret_cast<float*>(s + o_hn);
    f_ = reinterpret_cast<float*>(s + o_f);
    tmp_ = reinterpret_cast<float*>(s + o_tmp);
    xe_ = reinterpret_cast<float*>(s + o_xe);
    fe_ = reinterpret_cast<float*>(s + o_fe);
    up_ = reinterpret_cast<float*>(s + o_up);
    gate_ = reinterpret_cast<float*>(s + o_gate);
    half_ = s + o_half;
    logits_ = reinterpret_cast<float*>(s + o_logits);
    gate_logit_ = reinterpret_cast<float*>(s + o_glogit);
    route_scratch_ = s + o_route;
    experts_ = reinterpret_cast<uint32_t*>(s + o_experts);
    weights_d_ = reinterpret_cast<double*>(s + o_weights);
    group_tokens_ = reinterpret_cast<uint32_t*>(s + o_gtokens);
    group_weights_ = reinterpret_cast<float*>(s + o_gweights);
    FFLITE_CUBLAS_CHECK("cublasSetWorkspace",
                        Cublas().set_workspace(handle_, s + o_ws, kCublasWorkspaceBytes));

    // Pinned host buffers for the routing round trip.
    const uint64_t entries = t * max_k;
    FFLITE_CUDA_CHECK("cudaMallocHost", cudaMallocHost(&pinned_, std::max<uint64_t>(
                                                                     entries * 20, 1)));
    uint8_t* p = static_cast<uint8_t*>(pinned_);
    weights_h_ = reinterpret_cast<double*>(p);
    experts_h_ = reinterpret_cast<uint32_t*>(p + entries * 8);
    gtokens_h_ = reinterpret_cast<uint32_t*>(p + entries * 12);
    gweights_h_ = reinterpret_cast<float*>(p + entries * 16);
    if (max_experts > 0) groups_.Reserve(max_experts, max_tokens_, max_k);
    counts_.Init(model_);
    return InitFusedDecode();
  }

  // The tables and scratch of the fused decode (DevLayer::fused) and its routing counters.
  absl::Status InitFusedDecode() {
    std::vector<cuda::ExpertPtrs> entries;
    std::vector<size_t> first(layers_.size(), 0);
    uint64_t slots = 0, ldh = 0;
    for (size_t i = 0; i < layers_.size(); ++i) {
      DevLayer& l = layers_[i];
      if (!l.moe || !FusedDecodeType(l, d_, &l.fused_type)) continue;
      l.fused = true;
      l.counts_at = counts_total_;
      counts_total_ += l.route.num_experts;
      first[i] = entries.size();
      for (const std::vector<DevFfn>* group : {&l.experts, &l.shared}) {
        for (const DevFfn& f : *group) {
          entries.push_back(ExpertEntry(f));
          l.max_ff = std::max(l.max_ff, f.ff);
        }
      }
      const uint64_t tokens = std::min<uint64_t>(max_tokens_, kGemvMaxTokens);
      slots = std::max<uint64_t>(slots, tokens * (l.route.top_k + l.shared.size()));
      ldh = std::max<uint64_t>(ldh, l.max_ff);
    }
    if (entries.empty()) return absl::OkStatus();
    ldh_ = ldh;
    uint64_t bytes = 0;
    const uint64_t table_bytes = entries.size() * sizeof(cuda::ExpertPtrs);
    PlaceAfter(&bytes, table_bytes);
    const uint64_t h_at = PlaceAfter(&bytes, slots * ldh * 4);
    const uint64_t o_at = PlaceAfter(&bytes, slots * d_ * 4);
    const uint64_t c_at = PlaceAfter(&bytes, counts_total_ * sizeof(uint64_t));
    FFLITE_CUDA_CHECK("cudaMalloc (decode scratch)", cudaMalloc(&decode_, bytes));
    uint8_t* base = static_cast<uint8_t*>(decode_);
    FFLITE_CUDA_CHECK("cudaMemcpy (expert tables)",
                      cudaMemcpy(base, entries.data(), table_bytes, cudaMemcpyHostToDevice));
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (layers_[i].fused) layers_[i].table = reinterpret_cast<cuda::ExpertPtrs*>(base) + first[i];
    }
    h_slots_ = reinterpret_cast<float*>(base + h_at);
    o_slots_ = reinterpret_cast<float*>(base + o_at);
    counts_d_ = reinterpret_cast<uint64_t*>(base + c_at);
    FFLITE_CUDA_CHECK("cudaMemset (expert counters)",
                      cudaMemset(counts_d_, 0, counts_total_ * sizeof(uint64_t)));
    counts_h_.assign(counts_total_, 0);
    return absl::OkStatus();
  }

  // The routing statistics, with the counts the fused decode kept on the device added (after the
  // runs queued so far); if the device cannot be read they stay as they were.
  ExpertCounts* expert_counts() override {
    if (counts_total_ > 0 && cudaSetDevice(kDevice) == cudaSuccess &&
        cudaEventSynchronize(done_) == cudaSuccess &&
        cudaMemcpy(counts_h_.data(), counts_d_, counts_total_ * sizeof(uint64_t),
                   cudaMemcpyDeviceToHost) == cudaSuccess &&
        cudaMemset(counts_d_, 0, counts_total_ * sizeof(uint64_t)) == cudaSuccess) {
      for (size_t i = 0; i < layers_.size(); ++i) {
        if (layers_[i].fused) counts_.Add(i, counts_h_.data() + layers_[i].counts_at);
      }
    }
    return &counts_;
  }
  const char* device() const override { return device_name_.c_str(); }

  absl::Status Run(size_t layer, const float* input, size_t n_tokens, float* output) override {
    FFLITE_CUDA_CHECK("cudaSetDevice", cudaSetDevice(kDevice));
    const size_t bytes = n_tokens * d_ * sizeof(float);
    FFLITE_CUDA_CHECK("cudaMemcpyAsync (input)",
                      cudaMemcpyAsync(in_, input, bytes, cudaMemcpyHostToDevice, stream_));
    FFLITE_RETURN_IF_ERROR(RunOn(layer, in_, n_tokens, out_, stream_));
    FFLITE_CUDA_CHECK("cudaMemcpyAsync (output)",
                      cudaMemcpyAsync(output, out_, bytes, cudaMemcpyDeviceToHost, stream_));
    FFLITE_CUDA_CHECK("the run", cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::Status RunDevice(size_t layer, const float* input, size_t n_tokens, float* output,
                         void* stream) override {
    FFLITE_CUDA_CHECK("cudaSetDevice", cudaSetDevice(kDevice));
    FFLITE_RETURN_IF_ERROR(CheckDevicePointer("input", input));
    FFLITE_RETURN_IF_ERROR(CheckDevicePointer("output", output));
    cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : stream_;
    FFLITE_RETURN_IF_ERROR(RunOn(layer, input, n_tokens, output, s));
    if (stream == nullptr) FFLITE_CUDA_CHECK("the run", cudaStreamSynchronize(s));
    return absl::OkStatus();
  }

 private:
  absl::Status CheckDevicePointer(const char* what, const void* p) const {
    cudaPointerAttributes a;
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s is not device memory (cudaPointerGetAttributes: %s)", what, cudaGetErrorString(e)));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s is %s memory, not device memory: use fflite_session_run for host buffers", what,
          a.type == cudaMemoryTypeHost ? "pinned host" : "host"));
    }
    if (a.device != kDevice) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s is on device %d; the session runs on device %d", what, a.device, kDevice));
    }
    return absl::OkStatus();
  }

  // y[n, rows] = x[n, cols] · Wᵀ. `exact`: keep f32 activations whatever the token count.
  absl::Status Product(const DevMatrix& w, const float* x, size_t n, float* y, cudaStream_t s,
                       bool exact = false) {
    if (exact || n <= kGemvMaxTokens) {
      return CudaStatus("gemv kernel", cuda::Gemv(w.type, w.data, w.rows, w.cols, x, w.cols, n, y,
                                                  w.rows, s));
    }
    // Column-major view: Yᵀ[rows, n] = (W as [cols, rows])ᵀ · (X as [cols, n]).
    const float one = 1.0f, zero = 0.0f;
    const void* b = x;
    cudaDataType_t type = CUDA_R_32F;
    if (w.type != WType::kF32) {
      type = w.type == WType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
      FFLITE_CUDA_CHECK("convert kernel", cuda::ConvertF32(w.type, x, n * w.cols, half_, s));
      b = half_;
    }
    const int m = static_cast<int>(w.rows), k = static_cast<int>(w.cols);
    FFLITE_CUBLAS_CHECK(
        "cublasGemmEx",
        Cublas().gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, static_cast<int>(n), k, &one,
                         w.data, type, k, b, type, k, &zero, y, CUDA_R_32F, m,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }

  // out[n, d] = FFN(x[n, d]); uses up_ and gate_.
  absl::Status Ffn(const DevFfn& f, const float* x, size_t n, float* out, cudaStream_t s) {
    FFLITE_RETURN_IF_ERROR(Hidden(f, x, n, s));
    return Down(f, n, out, s);
  }

  // The FFN's first half: up_[n, f.ff] = h, the hidden activations (neuron edits applied).
  absl::Status Hidden(const DevFfn& f, const float* x, size_t n, cudaStream_t s) {
    FFLITE_RETURN_IF_ERROR(Product(f.up, x, n, up_, s));
    if (f.gated) FFLITE_RETURN_IF_ERROR(Product(f.gate, x, n, gate_, s));
    FFLITE_CUDA_CHECK("activation kernel",
                      cuda::Activate(f.activation, f.gated, up_, gate_, f.up_bias, f.gate_bias,
                                     f.scale, n, f.ff, s));
    return absl::OkStatus();
  }

  // Copies rows of up_ (h of an FFN of `ff` padded columns) to the capture's host buffer: row r
  // to dst + r · dst_pitch floats, `count` floats each, one 2-D copy (the caller's pageable
  // memory: the copy completes before the call returns).
  absl::Status CopyHidden(size_t first_row, size_t rows, uint32_t ff, float* dst,
                          size_t dst_pitch, size_t count, cudaStream_t s) {
    FFLITE_CUDA_CHECK("cudaMemcpy2DAsync (capture)",
                      cudaMemcpy2DAsync(dst, dst_pitch * sizeof(float), up_ + first_row * ff,
                                        ff * sizeof(float), count * sizeof(float), rows,
                                        cudaMemcpyDeviceToHost, s));
    return absl::OkStatus();
  }

  // The FFN's second half: out[n, d] = down(up_) + b.
  absl::Status Down(const DevFfn& f, size_t n, float* out, cudaStream_t s) {
    FFLITE_RETURN_IF_ERROR(Product(f.down, up_, n, out, s));
    if (f.down_bias != nullptr) {
      FFLITE_CUDA_CHECK("bias kernel", cuda::AddBias(out, f.down_bias, n, d_, s));
    }
    return absl::OkStatus();
  }

  // Runs the layer on stream `s`, after every earlier run of this session whatever its stream
  // (they share the scratch): each run waits for the event the previous one recorded.
  absl::Status RunOn(size_t layer, const float* x, size_t n, float* y, cudaStream_t s) {
    FFLITE_CUDA_CHECK("cudaStreamWaitEvent", cudaStreamWaitEvent(s, done_, 0));
    FFLITE_CUBLAS_CHECK("cublasSetStream", Cublas().set_stream(handle_, s));
    const absl::Status status = Layer(layer, x, n, y, s);
    FFLITE_CUDA_CHECK("cudaEventRecord", cudaEventRecord(done_, s));
    return status;
  }

  // pre-norm:  y = [x +] FFN(Norm(x))      post-norm:  y = Norm([x +] FFN(x))
  absl::Status Layer(size_t layer, const float* x, size_t n, float* y, cudaStream_t s) {
    const DevLayer& l = layers_[layer];
    const float* src = x;
    if (l.norm.present && l.norm.pre) {
      FFLITE_CUDA_CHECK("norm kernel", cuda::Norm(l.norm.layer_norm, x, n, d_, l.norm.weight,
                                                  l.norm.bias, l.norm.eps, hn_, s));
      src = hn_;
    }
    const LayerCapture* capture = neuron_capture_.Get(layer);
    if (l.moe) {
      // The fused decode writes the layer's output before the post-norm itself.
      if (FusedDecode(l, src, n, capture)) {
        FFLITE_RETURN_IF_ERROR(FusedExperts(l, src, n, l.residual ? x : nullptr,
                                            l.norm.present && !l.norm.pre ? tmp_ : y, s));
        return PostNorm(l, n, y, s);
      }
      FFLITE_RETURN_IF_ERROR(Moe(layer, l, src, n, f_, s, capture));
    } else if (capture != nullptr) {
      FFLITE_RETURN_IF_ERROR(Hidden(l.ffn, src, n, s));
      FFLITE_RETURN_IF_ERROR(CopyHidden(0, n, l.ffn.ff, capture->h, capture->d_ff,
                                        capture->d_ff, s));
      FFLITE_RETURN_IF_ERROR(Down(l.ffn, n, f_, s));
    } else {
      FFLITE_RETURN_IF_ERROR(Ffn(l.ffn, src, n, f_, s));
    }
    const bool post = l.norm.present && !l.norm.pre;
    FFLITE_CUDA_CHECK("residual kernel",
                      cuda::Residual(f_, l.residual ? x : nullptr, n, d_, post ? tmp_ : y, s));
    return PostNorm(l, n, y, s);
  }

  // y = Norm(tmp_) for a post-norm layer.
  absl::Status PostNorm(const DevLayer& l, size_t n, float* y, cudaStream_t s) {
    if (l.norm.present && !l.norm.pre) {
      FFLITE_CUDA_CHECK("norm kernel", cuda::Norm(l.norm.layer_norm, tmp_, n, d_, l.norm.weight,
                                                  l.norm.bias, l.norm.eps, y, s));
    }
    return absl::OkStatus();
  }

  // Whether a MoE layer's call of n tokens runs on the fused decode kernels: few tokens, no
  // capture (it needs the routing on the host), x aligned for the kernels' 16-byte loads (a
  // caller's device pointer may not be).
  bool FusedDecode(const DevLayer& l, const float* x, size_t n, const LayerCapture* capture) const {
    return l.fused && n <= kGemvMaxTokens && capture == nullptr &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0;
  }

  // experts_, weights_d_ [n, top_k] = the routing of x on the device.
  absl::Status Route(const DevLayer& l, const float* x, size_t n, cudaStream_t s) {
    // The router with f32 activations: rounding them could change which experts win.
    FFLITE_RETURN_IF_ERROR(Product(l.router, x, n, logits_, s, /*exact=*/true));
    if (l.router_bias != nullptr) {
      FFLITE_CUDA_CHECK("bias kernel",
                        cuda::AddBias(logits_, l.router_bias, n, l.route.num_experts, s));
    }
    FFLITE_CUDA_CHECK("routing kernel", cuda::Route(l.route, logits_, n, route_scratch_,
                                                    experts_, weights_d_, s));
    return absl::OkStatus();
  }

  // out = Σ_{e in top-k} w_e · expert_e(x) + [sigmoid(gate·x)] · Σ_s shared_s(x)
  // capture: the layer's, or nullptr.
  absl::Status Moe(size_t layer, const DevLayer& l, const float* x, size_t n, float* out,
                   cudaStream_t s, const LayerCapture* capture) {
    const uint32_t experts = l.route.num_experts, k = l.route.top_k;
    FFLITE_RETURN_IF_ERROR(Route(l, x, n, s));

    // Grouping on the host (moe/grouping.cc): one round trip of n · k entries.
    FFLITE_CUDA_CHECK("cudaMemcpyAsync (routing)",
                      cudaMemcpyAsync(experts_h_, experts_, n * k * sizeof(uint32_t),
                                      cudaMemcpyDeviceToHost, s));
    FFLITE_CUDA_CHECK("cudaMemcpyAsync (routing)",
                      cudaMemcpyAsync(weights_h_, weights_d_, n * k * sizeof(double),
                                      cudaMemcpyDeviceToHost, s));
    FFLITE_CUDA_CHECK("routing", cudaStreamSynchronize(s));
    for (size_t t = 0; t < n; ++t) counts_.Add(layer, experts_h_ + t * k, k);
    if (capture != nullptr) capture->Route(0, n, experts_h_, weights_h_);
    GroupByExpert(experts_h_, weights_h_, n, k, experts, &groups_);
    std::memcpy(gtokens_h_, groups_.tokens.data(), n * k * sizeof(uint32_t));
    std::memcpy(gweights_h_, groups_.weights.data(), n * k * sizeof(float));
    FFLITE_CUDA_CHECK("cudaMemcpyAsync (groups)",
                      cudaMemcpyAsync(group_tokens_, gtokens_h_, n * k * sizeof(uint32_t),
                                      cudaMemcpyHostToDevice, s));
    FFLITE_CUDA_CHECK("cudaMemcpyAsync (groups)",
                      cudaMemcpyAsync(group_weights_, gweights_h_, n * k * sizeof(float),
                                      cudaMemcpyHostToDevice, s));
    FFLITE_CUDA_CHECK("cudaMemsetAsync", cudaMemsetAsync(out, 0, n * d_ * sizeof(float), s));
    for (uint32_t e = 0; e < experts; ++e) {
      const uint32_t count = groups_.count(e);
      if (count == 0) continue;
      const uint32_t* tokens = group_tokens_ + groups_.offsets[e];
      FFLITE_CUDA_CHECK("gather kernel", cuda::Gather(x, tokens, count, d_, xe_, s));
      if (capture != nullptr && capture->h != nullptr) {
        // Each gathered row goes to its token's slot (rank order): a copy per row.
        FFLITE_RETURN_IF_ERROR(Hidden(l.experts[e], xe_, count, s));
        const uint32_t* host_tokens = groups_.tokens.data() + groups_.offsets[e];
        for (uint32_t r = 0; r < count; ++r) {
          FFLITE_RETURN_IF_ERROR(CopyHidden(r, 1, l.experts[e].ff,
                                            capture->ExpertRow(0, host_tokens[r], e, experts_h_),
                                            capture->d_ff, capture->d_ff, s));
        }
        FFLITE_RETURN_IF_ERROR(Down(l.experts[e], count, fe_, s));
      } else {
        FFLITE_RETURN_IF_ERROR(Ffn(l.experts[e], xe_, count, fe_, s));
      }
      FFLITE_CUDA_CHECK("scatter kernel",
                        cuda::ScatterAdd(fe_, tokens, group_weights_ + groups_.offsets[e], count,
                                         d_, out, s));
    }
    if (l.shared.empty()) return absl::OkStatus();
    const bool gate = l.shared_gate.rows != 0;
    if (gate) FFLITE_RETURN_IF_ERROR(Product(l.shared_gate, x, n, gate_logit_, s, true));
    for (const DevFfn& f : l.shared) {
      FFLITE_RETURN_IF_ERROR(Ffn(f, x, n, fe_, s));
      FFLITE_CUDA_CHECK("shared expert kernel",
                        cuda::AddGated(fe_, gate ? gate_logit_ : nullptr, n, d_, out, s));
    }
    return absl::OkStatus();
  }

  // A MoE layer of a few tokens (FusedDecode): the router and routing on the device, then every
  // chosen expert, routed and shared, in one launch per step, their sum with the shared gate
  // and the residual in one more; no round trip to the host (the counts stay on the device until
  // expert_counts()). out = [residual +] the layer's FFN output.
  absl::Status FusedExperts(const DevLayer& l, const float* x, size_t n, const float* residual,
                            float* out, cudaStream_t s) {
    const uint32_t k = l.route.top_k, shared = static_cast<uint32_t>(l.shared.size());
    const uint32_t experts = l.route.num_experts;
    FFLITE_RETURN_IF_ERROR(Route(l, x, n, s));
    const DevFfn& f = l.experts[0];
    FFLITE_CUDA_CHECK("experts kernel",
                      cuda::ExpertsHidden(l.fused_type, l.table, experts_, n, k, shared, experts,
                                          x, d_, f.activation, f.gated, l.max_ff, h_slots_, ldh_,
                                          s));
    FFLITE_CUDA_CHECK("experts kernel",
                      cuda::ExpertsDown(l.fused_type, l.table, experts_, n, k, shared, experts,
                                        h_slots_, ldh_, d_, o_slots_, s));
    const bool gate = shared > 0 && l.shared_gate.rows != 0;
    FFLITE_CUDA_CHECK(
        "combine kernel",
        cuda::CombineExperts(experts_, weights_d_, n, k, shared,
                             gate ? l.shared_gate.data : nullptr, l.shared_gate.type, x,
                             o_slots_, d_, residual, out,
                             reinterpret_cast<unsigned long long*>(counts_d_ + l.counts_at), s));
    return absl::OkStatus();
  }

  const Model& model_;
  const uint32_t d_;
  const size_t max_tokens_;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  cudaEvent_t done_ = nullptr;  // recorded at the end of every run
  void* weights_ = nullptr;  // every layer's weights, one allocation
  std::vector<DevLayer> layers_;
  void* scratch_ = nullptr;  // every buffer below, one allocation
  float *in_ = nullptr, *out_ = nullptr, *hn_ = nullptr, *f_ = nullptr, *tmp_ = nullptr;
  float *xe_ = nullptr, *fe_ = nullptr, *up_ = nullptr, *gate_ = nullptr;
  void* half_ = nullptr;  // activations rounded for the tensor cores
  float *logits_ = nullptr, *gate_logit_ = nullptr;
  void* route_scratch_ = nullptr;
  uint32_t* experts_ = nullptr;
  double* weights_d_ = nullptr;
  uint32_t* group_tokens_ = nullptr;
  float* group_weights_ = nullptr;
  void* pinned_ = nullptr;  // host side of the routing round trip
  double* weights_h_ = nullptr;
  uint32_t *experts_h_ = nullptr, *gtokens_h_ = nullptr;
  float* gweights_h_ = nullptr;
  ExpertGroups groups_;
  ExpertCounts counts_;
  // The fused decode's tables and scratch (InitFusedDecode), one allocation.
  void* decode_ = nullptr;
  float *h_slots_ = nullptr, *o_slots_ = nullptr;  // [slots, ldh_], [slots, d]
  size_t ldh_ = 0;
  uint64_t* counts_d_ = nullptr;  // routed tokens per expert of the fused layers since the last
  size_t counts_total_ = 0;       // expert_counts(), counts_total_ of them
  std::vector<uint64_t> counts_h_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

bool CublasLoads(std::string* why) {
  if (!Cublas().error.empty() && why != nullptr) *why = Cublas().error;
  return Cublas().error.empty();
}

bool CudaBackendAvailable(std::string* why) {
  const Probe& p = ProbeDevice();
  if (!p.ok && why != nullptr) *why = p.why;
  return p.ok;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const Model& model,
                                                           const BackendConfig& config) {
  if (config.expert_budget_bytes != 0) {
    return absl::InvalidArgumentError(
        "expert_budget_bytes: the cuda backend keeps every expert in device memory; pass 0 "
        "(a budget of device memory for routed experts is not implemented)");
  }
  std::string why;
  if (!CudaBackendAvailable(&why)) return absl::FailedPreconditionError(why);
  auto backend = std::make_unique<CudaBackend>(model, config.max_tokens);
  FFLITE_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<void*> CudaAlloc(size_t bytes) {
  void* p = nullptr;
  FFLITE_CUDA_CHECK("cudaSetDevice", cudaSetDevice(kDevice));
  FFLITE_CUDA_CHECK("cudaMalloc", cudaMalloc(&p, bytes));
  return p;
}

void CudaFree(void* p) { cudaFree(p); }

absl::Status CudaCopy(void* to, const void* from, size_t bytes, bool to_device) {
  return CudaStatus("cudaMemcpy", cudaMemcpy(to, from, bytes, to_device ? cudaMemcpyHostToDevice
                                                                         : cudaMemcpyDeviceToHost));
}

absl::StatusOr<CudaRoofline> MeasureCudaRoofline() {
  std::string why;
  if (!CudaBackendAvailable(&why)) return absl::FailedPreconditionError(why);
  CudaRoofline r;
  r.device = ProbeDevice().device;
  FFLITE_CUDA_CHECK("cudaSetDevice", cudaSetDevice(kDevice));
  cudaEvent_t start, stop;
  FFLITE_CUDA_CHECK("cudaEventCreate", cudaEventCreate(&start));
  FFLITE_CUDA_CHECK("cudaEventCreate", cudaEventCreate(&stop));
  auto time_ms = [&](const std::function<absl::Status()>& f, int reps) -> absl::StatusOr<double> {
    FFLITE_RETURN_IF_ERROR(f());  // warm-up
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
      FFLITE_CUDA_CHECK("cudaEventRecord", cudaEventRecord(start, nullptr));
      FFLITE_RETURN_IF_ERROR(f());
      FFLITE_CUDA_CHECK("cudaEventRecord", cudaEventRecord(stop, nullptr));
      FFLITE_CUDA_CHECK("cudaEventSynchronize", cudaEventSynchronize(stop));
      float t = 0.0f;
      FFLITE_CUDA_CHECK("cudaEventElapsedTime", cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
    }
    return Median(ms);
  };

  // Read bandwidth: 1 GiB summed.
  constexpr size_t kReadBytes = size_t{1} << 30;
  FFLITE_ASSIGN_OR_RETURN(void* buf, CudaAlloc(kReadBytes + 256));
  std::unique_ptr<void, void (*)(void*)> buf_owner(buf, CudaFree);
  float* sum = reinterpret_cast<float*>(static_cast<uint8_t*>(buf) + kReadBytes);
  FFLITE_CUDA_CHECK("cudaMemset", cudaMemset(buf, 0, kReadBytes));
  FFLITE_ASSIGN_OR_RETURN(
      double read_ms, time_ms([&] {
        return CudaStatus("read kernel", cuda::ReadAll(static_cast<const float*>(buf),
                                                       kReadBytes / 4, sum, nullptr));
      }, 9));
  r.read_gbps = static_cast<double>(kReadBytes) / (read_ms * 1e6);

  // cuBLAS bf16 GEMM 8192³ (A, B bf16 in the 1 GiB buffer, C f32 after them).
  constexpr int kN = 8192;
  cublasHandle_t handle = nullptr;
  FFLITE_CUBLAS_CHECK("cublasCreate", Cublas().create(&handle));
  std::unique_ptr<cublasContext, decltype(&cublasDestroy_v2)> handle_owner(handle,
                                                                            Cublas().destroy);
  uint8_t* base = static_cast<uint8_t*>(buf);
  const size_t half_bytes = size_t{kN} * kN * 2;
  void *a = base, *b = base + half_bytes, *c = base + 2 * half_bytes;  // 128+128+256 MiB
  const float one = 1.0f, zero = 0.0f;
  FFLITE_ASSIGN_OR_RETURN(
      double gemm_ms, time_ms([&] {
        return CublasStatus("cublasGemmEx",
                            Cublas().gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, kN, kN, kN, &one,
                                             a, CUDA_R_16BF, kN, b, CUDA_R_16BF, kN, &zero, c,
                                             CUDA_R_32F, kN, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT));
      }, 5));
  r.bf16_gemm_tflops = 2.0 * kN * kN * static_cast<double>(kN) / (gemm_ms * 1e9);

  // Host -> device from pageable memory, 64 MiB.
  std::vector<uint8_t> host(size_t{64} << 20, 1);
  std::vector<double> secs;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    FFLITE_RETURN_IF_ERROR(CudaCopy(buf, host.data(), host.size(), true));
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  r.h2d_gbps = static_cast<double>(host.size()) / Median(secs) / 1e9;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return r;
}

}  // namespace fflite
