// fflite-bench --backend cuda (see cuda_bench.h).
#include "c_status.h"
#include "bench/cuda_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "bench/cuda_roofline.h"
#include "session/session.h"

namespace fflite {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes of a tensor as the cuda backend holds it: f32/f16/bf16 as stored, i8/i4 dequantised to
// f32 on upload.
double DeviceBytes(const TensorView& t) {
  if (!t.present()) return 0.0;
  return static_cast<double>(t.numel()) * (t.quantized() ? 4.0 : DTypeSize(t.dtype));
}

double FfnDeviceBytes(const FfnView& f) {
  return DeviceBytes(f.up) + DeviceBytes(f.gate) + DeviceBytes(f.down);
}

// The weights one decode call reads on the device: dense FFNs whole; for MoE layers the router,
// top_k routed experts, the shared experts and their gate (the CPU bench counts shared experts
// as its packed f32; the device keeps them as stored).
double CudaDecodeBytes(const Model& model) {
  double bytes = 0.0;
  for (const LayerView& l : model.layers()) {
    if (l.kind == LayerKind::kDense) {
      bytes += FfnDeviceBytes(l.ffn);
      continue;
    }
    bytes += DeviceBytes(l.moe.router) + DeviceBytes(l.moe.shared_expert_gate);
    bytes += l.moe.top_k * FfnDeviceBytes(l.moe.experts[0]);
    for (const FfnView& f : l.moe.shared_experts) bytes += FfnDeviceBytes(f);
  }
  return bytes;
}

}  // namespace

int RunCudaBench(const Model& model, double flops_per_token, const std::vector<int64_t>& tokens,
                 int warmup, int reps) {
  const double weight_bytes = CudaDecodeBytes(model);
  absl::StatusOr<CudaRoofline> roof = MeasureCudaRoofline();
  if (!roof.ok()) {
    std::fprintf(stderr, "cuda: %s\n", fflite::StatusText(roof.status()).c_str());
    return 1;
  }
  std::printf("device: %s\n", roof->device.c_str());
  std::printf("roofline: read %.0f GB/s, cuBLAS bf16 GEMM %.1f TFLOP/s, host->device %.1f GB/s\n",
              roof->read_gbps, roof->bf16_gemm_tflops, roof->h2d_gbps);
  const size_t max_tokens = static_cast<size_t>(*std::max_element(tokens.begin(), tokens.end()));
  SessionOptions options;
  options.backend = "cuda";
  options.max_tokens = max_tokens;
  const double t0 = Now();
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Create(model, options);
  if (!session.ok()) {
    std::fprintf(stderr, "creating a cuda session: %s\n", fflite::StatusText(session.status()).c_str());
    return 1;
  }
  std::printf("session creation (upload): %.3f s\n", Now() - t0);
  std::printf("weights read per decode call, as the device holds them: %.1f MB (%.1f us at the "
              "read roofline)\n",
              weight_bytes / 1e6, weight_bytes / (roof->read_gbps * 1e3));
  const size_t d = model.d_model(), bytes = max_tokens * d * sizeof(float);
  absl::StatusOr<void*> in = CudaAlloc(bytes), out = CudaAlloc(bytes);
  if (!in.ok() || !out.ok()) {
    std::fprintf(stderr, "cuda: %s\n", fflite::StatusText((in.ok() ? out : in).status()).c_str());
    return 1;
  }
  std::unique_ptr<void, void (*)(void*)> in_owner(*in, CudaFree), out_owner(*out, CudaFree);
  std::vector<float> host(max_tokens * d, 0.5f), result(max_tokens * d);
  if (!CudaCopy(*in, host.data(), bytes, true).ok()) return 1;

  std::printf("%7s %12s %12s %10s %9s %9s\n", "tokens", "layer ms", "copies ms", "GB/s",
              "%read", "%gemm");
  for (int64_t t : tokens) {
    const size_t n = static_cast<size_t>(t);
    std::vector<double> device_s, host_s;
    for (int r = 0; r < warmup + reps; ++r) {
      double start = Now();
      for (size_t l = 0; l < model.layers().size(); ++l) {
        // Device pointers, the session's stream, finished before returning.
        const absl::Status st =
            (*session)->RunDevice(l, static_cast<const float*>(*in), n,
                                  static_cast<float*>(*out), nullptr);
        if (!st.ok()) {
          std::fprintf(stderr, "run: %s\n", fflite::StatusText(st).c_str());
          return 1;
        }
      }
      if (r >= warmup) device_s.push_back(Now() - start);
      start = Now();
      for (size_t l = 0; l < model.layers().size(); ++l) {
        const absl::Status st = (*session)->Run(l, host.data(), n, result.data());
        if (!st.ok()) {
          std::fprintf(stderr, "run: %s\n", fflite::StatusText(st).c_str());
          return 1;
        }
      }
      if (r >= warmup) host_s.push_back(Now() - start);
    }
    const double layer = Median(device_s), copies = std::max(0.0, Median(host_s) - layer);
    const double gbs = weight_bytes / layer / 1e9;
    const double tflops = flops_per_token * static_cast<double>(n) / layer / 1e12;
    std::printf("%7zu %12.4f %12.4f %10.0f %8.1f%% %8.1f%%\n", n, layer * 1e3, copies * 1e3, gbs,
                100.0 * gbs / roof->read_gbps, 100.0 * tflops / roof->bf16_gemm_tflops);
  }
  std::printf("layer ms: every layer once, device-pointer I/O (median of %d); copies ms: the same "
              "with host buffers minus that\n",
              reps);
  return 0;
}

}  // namespace fflite
