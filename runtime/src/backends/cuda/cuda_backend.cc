// The cuda backend's host side: device buffers and each step of the layer and MoE runners as a
// sequence of kernels and cuBLAS products on the session's stream. What a layer means (its steps,
// the MoE's routing, grouping and order of additions) comes from layer/layer_runner.h and
// moe/moe_runner.h, as on every backend; routing runs route::Route on the device, and a few
// tokens' MoE call runs fused on the device (ExpertExecutor::RunFused), no host round trip.
#include "backends/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/cuda/cuda_api.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_weights.h"
#include "base/status_macros.h"
#include "moe/routing.h"

namespace fflite {
namespace {

static_assert(static_cast<uint8_t>(Activation::RELU) == 1 &&
                  static_cast<uint8_t>(Activation::GELU_ERF) == 2 &&
                  static_cast<uint8_t>(Activation::GELU_TANH) == 3 &&
                  static_cast<uint8_t>(Activation::SILU) == 4 &&
                  static_cast<uint8_t>(Activation::SIGMOID) == 5 &&
                  static_cast<uint8_t>(Activation::SWIGLU_OAI) == 6,
              "cuda_device.cuh's Act() switches on these values");

// Up to this many tokens a product runs on the f32-activation kernel (each weight row read once
// per 8 tokens); above it on cuBLAS.
constexpr size_t kGemvMaxTokens = 8;
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// Quantised matrices kept quantised (FFLITE_CUDA_QUANT=packed): a product of more tokens than the
// gemv takes dequantises at most this many bytes of f32 rows at a time for cuBLAS.
constexpr uint64_t kDequantChunkBytes = uint64_t{64} << 20;
constexpr int kDevice = kCudaDevice;

class CudaBackend : public Backend, LayerExecutor, ExpertExecutor {
 public:
  CudaBackend(const Model& model, size_t max_tokens, bool keep_quantised)
      : model_(model), d_(model.d_model()), max_tokens_(max_tokens),
        keep_quantised_(keep_quantised) {}

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

  absl::Status Init(bool time_routed_experts) {
    FFLITE_CUDA_CHECK("cudaSetDevice", cudaSetDevice(kDevice));
    device_name_ = ProbeCudaDevice().device;
    FFLITE_CUDA_CHECK("cudaStreamCreate", cudaStreamCreateWithFlags(&stream_,
                                                                    cudaStreamNonBlocking));
    FFLITE_CUBLAS_CHECK("cublasCreate", Cublas().create(&handle_));
    FFLITE_CUDA_CHECK("cudaEventCreate", cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));

    // Weights: size, allocate, copy. Every quantised matrix is dequantised for the upload, so
    // all their scales are checked now (the loader does not): a bad one fails the creation.
    FFLITE_RETURN_IF_ERROR(model_.CheckAllScales());
    Arena sizing(nullptr);
    PlaceModel(&sizing, model_, keep_quantised_);
    FFLITE_CUDA_CHECK("cudaMalloc (weights)", cudaMalloc(&weights_, std::max<uint64_t>(
                                                                       sizing.size(), 1)));
    device_bytes_ += sizing.size();
    Arena arena(static_cast<uint8_t*>(weights_));
    layers_ = PlaceModel(&arena, model_, keep_quantised_);
    FFLITE_RETURN_IF_ERROR(arena.status());

    // Scratch, sized for max_tokens and the largest layer.
    uint32_t max_ff = 0, max_experts = 0, max_k = 0;
    size_t route_bytes = 0;
    uint64_t deq_bytes = 0;  // the f32 rows a quantised matrix's cuBLAS product takes at a time
    auto see_matrix = [&deq_bytes, this](const DevMatrix& m) {
      if (!m.quantised() || max_tokens_ <= kGemvMaxTokens) return;
      const uint64_t row = uint64_t{m.cols} * 4;
      deq_bytes = std::max(deq_bytes, std::max(row, std::min(row * m.rows, kDequantChunkBytes)));
    };
    auto see = [&max_ff, &see_matrix](const DevFfn& f) {
      max_ff = std::max(max_ff, f.ff);
      see_matrix(f.up);
      if (f.gated) see_matrix(f.gate);
      see_matrix(f.down);
    };
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
    const uint64_t o_deq = reserve(deq_bytes);
    FFLITE_CUDA_CHECK("cudaMalloc (scratch)", cudaMalloc(&scratch_, total));
    device_bytes_ += total;
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
    deq_ = reinterpret_cast<float*>(s + o_deq);
    deq_bytes_ = deq_bytes;
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
    InitRunner(model_, max_tokens_, time_routed_experts);
    return InitFusedDecode();
  }

  // The tables and scratch of the fused decode (DevLayer::fused) and its routing counters.
  absl::Status InitFusedDecode() {
    std::vector<cuda::ExpertPtrs> entries;
    std::vector<size_t> first(layers_.size(), 0);
    uint64_t slots = 0, ldh = 0;
    for (size_t i = 0; i < layers_.size(); ++i) {
      DevLayer& l = layers_[i];
      if (!l.moe || !FusedDecodeTypes(l, d_, &l.fused_hidden_type, &l.fused_down_type)) continue;
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
    device_bytes_ += bytes;
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
  BackendMemory Memory() const override {
    BackendMemory m;
    m.device_bytes = device_bytes_;
    return m;
  }

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
    if (input == output) {
      // In place: the steps read x after they start writing y (the residual, fused MoE calls), so
      // x is copied to the session's input buffer first (device to device, on the same stream).
      FFLITE_CUDA_CHECK("cudaMemcpyAsync (in place input)",
                        cudaMemcpyAsync(in_, input, n_tokens * d_ * sizeof(float),
                                        cudaMemcpyDeviceToDevice, s));
      input = in_;
    }
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
    if (w.quantised()) return QuantProduct(w, x, n, y, s, exact);
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

  // Product of a matrix kept quantised: its own gemv for a few tokens (and `exact`), else its rows
  // dequantised to f32 (exactly) in chunks of deq_ for cuBLAS's f32 product, as the f32 matrix a
  // dequantising upload gives.
  absl::Status QuantProduct(const DevMatrix& w, const float* x, size_t n, float* y,
                            cudaStream_t s, bool exact) {
    if (exact || n <= kGemvMaxTokens) {
      return CudaStatus("quantised gemv kernel",
                        cuda::GemvQuant(w.type, w.data, w.scales, w.rows, w.cols, x, w.cols, n,
                                        y, w.rows, s));
    }
    const uint64_t row_bytes = uint64_t{w.cols} * 4;
    const uint32_t chunk = static_cast<uint32_t>(
        std::min<uint64_t>(w.rows, std::max<uint64_t>(1, deq_bytes_ / row_bytes)));
    const float one = 1.0f, zero = 0.0f;
    const int k = static_cast<int>(w.cols);
    for (uint32_t r0 = 0; r0 < w.rows; r0 += chunk) {
      const uint32_t m = std::min(chunk, w.rows - r0);
      FFLITE_CUDA_CHECK("dequantise kernel",
                        cuda::DequantRows(w.type, w.data, w.scales, r0, m, w.cols, deq_, s));
      // Column-major view, as Product: rows r0 .. r0 + m of Yᵀ[rows, n] = (the chunk as
      // [cols, m])ᵀ · (X as [cols, n]).
      FFLITE_CUBLAS_CHECK(
          "cublasGemmEx",
          Cublas().gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                           static_cast<int>(n), k, &one, deq_, CUDA_R_32F, k, x, CUDA_R_32F, k,
                           &zero, y + r0, CUDA_R_32F, static_cast<int>(w.rows),
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
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
    s_ = s;
    const absl::Status status = runner_.Run(model_, layer, *this, this, x, n, y);
    FFLITE_CUDA_CHECK("cudaEventRecord", cudaEventRecord(done_, s));
    return status;
  }

  // --- LayerExecutor: one pass of the whole run (the scratch holds max_tokens rows) on s_.

  size_t PassTokens(const LayerView& /*layer*/) const override { return max_tokens_; }

  // src_ = Norm(x) in hn_, or x itself.
  absl::Status PreNorm(const LayerPass& pass) override {
    const DevLayer& l = layers_[pass.layer];
    pass_ = &pass;
    src_ = pass.x;
    if (pass.steps.pre_norm) {
      FFLITE_CUDA_CHECK("norm kernel", cuda::Norm(l.norm.layer_norm, pass.x, pass.n, d_,
                                                  l.norm.weight, l.norm.bias, l.norm.eps, hn_,
                                                  s_));
      src_ = hn_;
    }
    return absl::OkStatus();
  }

  // f_ = FFN(src_), its hidden activations copied to the capture where asked.
  absl::Status Dense(const LayerPass& pass) override {
    const DevFfn& f = layers_[pass.layer].ffn;
    if (pass.capture == nullptr) return Ffn(f, src_, pass.n, f_, s_);
    FFLITE_RETURN_IF_ERROR(Hidden(f, src_, pass.n, s_));
    FFLITE_RETURN_IF_ERROR(CopyHidden(0, pass.n, f.ff, pass.capture->h, pass.capture->d_ff,
                                      pass.capture->d_ff, s_));
    return Down(f, pass.n, f_, s_);
  }

  // y = [x +] f_ (into tmp_ first with a post-norm), then the post-norm. A fused MoE call wrote
  // [x +] f there itself.
  absl::Status Finish(const LayerPass& pass, bool residual_added) override {
    const DevLayer& l = layers_[pass.layer];
    const bool post = pass.steps.post_norm;
    const float* body = f_;
    if (pass.steps.output_norm) {  // a sandwich (no post-norm): OutNorm(f) into tmp_ first
      FFLITE_CUDA_CHECK("norm kernel",
                        cuda::Norm(l.output_norm.layer_norm, f_, pass.n, d_, l.output_norm.weight,
                                   l.output_norm.bias, l.output_norm.eps, tmp_, s_));
      body = tmp_;
    }
    if (!residual_added) {
      FFLITE_CUDA_CHECK("residual kernel",
                        cuda::Residual(body, pass.steps.residual ? pass.x : nullptr, pass.n, d_,
                                       post ? tmp_ : pass.y, s_));
    }
    if (post) {
      FFLITE_CUDA_CHECK("norm kernel", cuda::Norm(l.norm.layer_norm, tmp_, pass.n, d_,
                                                  l.norm.weight, l.norm.bias, l.norm.eps, pass.y,
                                                  s_));
    }
    return absl::OkStatus();
  }

  // --- ExpertExecutor: the sum in f_, one expert's tokens gathered into xe_, its output in fe_.

  size_t ExpertBatchTokens() const override { return max_tokens_; }

  // A few tokens, no capture, x aligned for the kernels' 16-byte loads (a caller's device pointer
  // may not be): every chosen expert in one launch per step, into the layer's destination with the
  // residual (FusedExperts).
  absl::StatusOr<bool> RunFused(const MoeCall& call) override {
    const DevLayer& l = layers_[call.layer];
    if (!l.fused || call.n > kGemvMaxTokens || reinterpret_cast<uintptr_t>(src_) % 16 != 0 ||
        pass_->steps.output_norm) {  // the sum must be normed before the residual
      return false;
    }
    FFLITE_RETURN_IF_ERROR(FusedExperts(l, src_, call.n, call.residual,
                                        pass_->steps.post_norm ? tmp_ : pass_->y, s_));
    return true;
  }

  // The routing on the device, then brought to the host (one round trip of n · k entries) for the
  // runner's grouping.
  absl::Status Route(const MoeCall& call, uint32_t* experts, double* weights) override {
    const DevLayer& l = layers_[call.layer];
    const size_t entries = call.n * l.route.top_k;
    FFLITE_RETURN_IF_ERROR(RouteOnDevice(l, src_, call.n, s_));
    FFLITE_CUDA_CHECK("cudaMemcpyAsync (routing)",
                      cudaMemcpyAsync(experts_h_, experts_, entries * sizeof(uint32_t),
                                      cudaMemcpyDeviceToHost, s_));
    FFLITE_CUDA_CHECK("cudaMemcpyAsync (routing)",
                      cudaMemcpyAsync(weights_h_, weights_d_, entries * sizeof(double),
                                      cudaMemcpyDeviceToHost, s_));
    FFLITE_CUDA_CHECK("routing", cudaStreamSynchronize(s_));
    std::memcpy(experts, experts_h_, entries * sizeof(uint32_t));
    std::memcpy(weights, weights_h_, entries * sizeof(double));
    return absl::OkStatus();
  }

  // The grouping's tokens and f32 weights to the device; f_ = 0.
  absl::Status BeginExperts(const MoeCall& call, const ExpertGroups& groups) override {
    const size_t entries = call.n * call.moe->top_k;
    std::memcpy(gtokens_h_, groups.tokens.data(), entries * sizeof(uint32_t));
    std::memcpy(gweights_h_, groups.weights.data(), entries * sizeof(float));
    FFLITE_CUDA_CHECK("cudaMemcpyAsync (groups)",
                      cudaMemcpyAsync(group_tokens_, gtokens_h_, entries * sizeof(uint32_t),
                                      cudaMemcpyHostToDevice, s_));
    FFLITE_CUDA_CHECK("cudaMemcpyAsync (groups)",
                      cudaMemcpyAsync(group_weights_, gweights_h_, entries * sizeof(float),
                                      cudaMemcpyHostToDevice, s_));
    FFLITE_CUDA_CHECK("cudaMemsetAsync", cudaMemsetAsync(f_, 0, call.n * d_ * sizeof(float), s_));
    return absl::OkStatus();
  }

  // fe_ = the expert's FFN of its tokens gathered into xe_; with a capture, each row's hidden
  // activations to its token's slot (rank order): a copy per row.
  absl::Status RunExpert(const MoeCall& call, const ExpertBatch& b) override {
    const DevFfn& f = layers_[call.layer].experts[b.expert];
    const uint32_t* tokens = group_tokens_ + b.first + b.offset;
    FFLITE_CUDA_CHECK("gather kernel", cuda::Gather(src_, tokens, b.count, d_, xe_, s_));
    if (call.capture == nullptr || call.capture->h == nullptr) {
      return Ffn(f, xe_, b.count, fe_, s_);
    }
    FFLITE_RETURN_IF_ERROR(Hidden(f, xe_, b.count, s_));
    const LayerCapture& capture = *call.capture;
    for (size_t r = 0; r < b.count; ++r) {
      float* row = capture.ExpertRow(call.t0, b.tokens[r], b.expert, call.chosen);
      FFLITE_RETURN_IF_ERROR(CopyHidden(r, 1, f.ff, row, capture.d_ff, capture.d_ff, s_));
    }
    return Down(f, b.count, fe_, s_);
  }

  absl::Status AddExpert(const MoeCall& /*call*/, const ExpertBatch& b,
                         bool /*ran_many*/) override {
    const size_t row = b.first + b.offset;
    FFLITE_CUDA_CHECK("scatter kernel", cuda::ScatterAdd(fe_, group_tokens_ + row,
                                                         group_weights_ + row, b.count, d_, f_,
                                                         s_));
    return absl::OkStatus();
  }

  // f_ += [sigmoid(gate · x)] · shared_s(x) over rows [r0, r0 + m); the gate's logits of every
  // row once, before the first shared expert.
  absl::Status RunShared(const MoeCall& call, size_t s, size_t r0, size_t m,
                         bool /*last*/) override {
    const DevLayer& l = layers_[call.layer];
    const bool gate = l.shared_gate.rows != 0;
    if (gate && s == 0 && r0 == 0) {
      FFLITE_RETURN_IF_ERROR(Product(l.shared_gate, src_, call.n, gate_logit_, s_, true));
    }
    FFLITE_RETURN_IF_ERROR(Ffn(l.shared[s], src_ + r0 * d_, m, fe_, s_));
    FFLITE_CUDA_CHECK("shared expert kernel",
                      cuda::AddGated(fe_, gate ? gate_logit_ + r0 : nullptr, m, d_,
                                     f_ + r0 * d_, s_));
    return absl::OkStatus();
  }

  // experts_, weights_d_ [n, top_k] = the routing of x on the device.
  absl::Status RouteOnDevice(const DevLayer& l, const float* x, size_t n, cudaStream_t s) {
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

  // A MoE layer of a few tokens (FusedDecode): the router and routing on the device, then every
  // chosen expert, routed and shared, in one launch per step, their sum with the shared gate
  // and the residual in one more; no round trip to the host (the counts stay on the device until
  // expert_counts()). out = [residual +] the layer's FFN output.
  absl::Status FusedExperts(const DevLayer& l, const float* x, size_t n, const float* residual,
                            float* out, cudaStream_t s) {
    const uint32_t k = l.route.top_k, shared = static_cast<uint32_t>(l.shared.size());
    const uint32_t experts = l.route.num_experts;
    FFLITE_RETURN_IF_ERROR(RouteOnDevice(l, x, n, s));
    const DevFfn& f = l.experts[0];
    FFLITE_CUDA_CHECK("experts kernel",
                      cuda::ExpertsHidden(l.fused_hidden_type, l.table, experts_, n, k, shared,
                                          experts, x, d_, f.activation, f.gated, l.max_ff,
                                          h_slots_, ldh_, s));
    FFLITE_CUDA_CHECK("experts kernel",
                      cuda::ExpertsDown(l.fused_down_type, l.table, experts_, n, k, shared,
                                        experts, h_slots_, ldh_, d_, o_slots_, s));
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
  const bool keep_quantised_;  // I8/I4 stay quantised on the device (FFLITE_CUDA_QUANT=packed)
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
  float* deq_ = nullptr;  // a quantised matrix's rows as f32 for cuBLAS (QuantProduct)
  uint64_t deq_bytes_ = 0;
  void* pinned_ = nullptr;  // host side of the routing round trip
  double* weights_h_ = nullptr;
  uint32_t *experts_h_ = nullptr, *gtokens_h_ = nullptr;
  float* gweights_h_ = nullptr;
  // The fused decode's tables and scratch (InitFusedDecode), one allocation.
  void* decode_ = nullptr;
  float *h_slots_ = nullptr, *o_slots_ = nullptr;  // [slots, ldh_], [slots, d]
  size_t ldh_ = 0;
  uint64_t* counts_d_ = nullptr;  // routed tokens per expert of the fused layers since the last
  size_t counts_total_ = 0;       // expert_counts(), counts_total_ of them
  std::vector<uint64_t> counts_h_;
  // The pass in progress (set by PreNorm) and its stream and input of the body (x or hn_).
  cudaStream_t s_ = nullptr;
  const LayerPass* pass_ = nullptr;
  const float* src_ = nullptr;
  uint64_t device_bytes_ = 0;  // cudaMalloc'd by this backend (weights, scratch)
};

}  // namespace

absl::Status CudaKeepsQuantised(bool* keep) {
  const char* v = std::getenv("FFLITE_CUDA_QUANT");
  const std::string value = v != nullptr ? v : "";
  if (value.empty() || value == "f32") {
    *keep = false;
  } else if (value == "packed") {
    *keep = true;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "FFLITE_CUDA_QUANT is '%s': 'f32' (quantised matrices dequantised to f32 on upload, the "
        "default) or 'packed' (I8/I4 kept quantised on the device)",
        value));
  }
  return absl::OkStatus();
}

bool CublasLoads(std::string* why) {
  if (!Cublas().error.empty() && why != nullptr) *why = Cublas().error;
  return Cublas().error.empty();
}

bool CudaBackendAvailable(std::string* why) {
  const CudaProbe& p = ProbeCudaDevice();
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
  bool keep_quantised = false;
  FFLITE_RETURN_IF_ERROR(CudaKeepsQuantised(&keep_quantised));
  std::string why;
  if (!CudaBackendAvailable(&why)) return absl::FailedPreconditionError(why);
  auto backend = std::make_unique<CudaBackend>(model, config.max_tokens, keep_quantised);
  FFLITE_RETURN_IF_ERROR(backend->Init(config.time_routed_experts));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace fflite
