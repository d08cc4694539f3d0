// The cuda backend's kernels: the f32-activation matrix-vector product for decode and routers,
// activations, norms, residuals, MoE gather/scatter and routing. Matrix products with many tokens
// go to cuBLAS (cuda_backend.cc).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_kernels.h"

namespace fflite {
namespace cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kGemvWarps = 8;   // rows per block (a warp per row)
constexpr int kGemvTokens = 8;  // tokens per block (grid.y covers the rest)

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Accumulates the weights w[c0, c0 + V) against the tokens' x.
template <typename W, int V>
__device__ __forceinline__ void GemvChunk(const W* wv, const float* x, size_t ldx, int nt,
                                          uint32_t c0, float (&acc)[kGemvTokens]) {
#pragma unroll
  for (int t = 0; t < kGemvTokens; ++t) {
    if (t < nt) {
      const float* xt = x + t * ldx + c0;
#pragma unroll
      for (int v = 0; v < V; ++v) acc[t] += ToF32(wv[v]) * xt[v];
    }
  }
}

// One warp per weight row, a group of up to 8 tokens per blockIdx.y. With `vec` the row and x
// are read 16 bytes at a time (the caller checked alignment), else one element per lane.
template <typename W, bool kVec>
__global__ void GemvKernel(const W* __restrict__ w, uint32_t rows, uint32_t cols,
                           const float* __restrict__ x, size_t ldx, size_t n,
                           float* __restrict__ y, size_t ldy) {
  const uint32_t row = blockIdx.x * kGemvWarps + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const size_t t0 = static_cast<size_t>(blockIdx.y) * kGemvTokens;
  if (row >= rows) return;
  const int nt = static_cast<int>(n - t0 < kGemvTokens ? n - t0 : kGemvTokens);
  const float* xb = x + t0 * ldx;
  const W* wr = w + static_cast<size_t>(row) * cols;
  float acc[kGemvTokens] = {};
  if constexpr (kVec) {
    constexpr uint32_t V = 16 / sizeof(W), kStep = kWarp * V;
    uint32_t c0 = lane * V;
    // Four 16-byte loads in flight per lane (decode is a stream of weights), then the tail.
    for (; c0 + 3 * kStep < cols; c0 += 4 * kStep) {
      uint4 raw[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        raw[u] = __ldg(reinterpret_cast<const uint4*>(wr + c0 + u * kStep));
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        GemvChunk<W, V>(reinterpret_cast<const W*>(&raw[u]), xb, ldx, nt, c0 + u * kStep, acc);
      }
    }
    for (; c0 < cols; c0 += kStep) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(wr + c0));
      GemvChunk<W, V>(reinterpret_cast<const W*>(&raw), xb, ldx, nt, c0, acc);
    }
  } else {
    for (uint32_t c0 = lane; c0 < cols; c0 += kWarp) {
      const W wv = wr[c0];
      GemvChunk<W, 1>(&wv, xb, ldx, nt, c0, acc);
    }
  }
#pragma unroll
  for (int t = 0; t < kGemvTokens; ++t) {
    const float s = WarpSum(acc[t]);
    if (lane == 0 && t < nt) y[(t0 + t) * ldy + row] = s;
  }
}

template <typename W>
cudaError_t LaunchGemv(const void* w, uint32_t rows, uint32_t cols, const float* x, size_t ldx,
                       size_t n, float* y, size_t ldy, cudaStream_t stream) {
  const dim3 block(kGemvWarps * kWarp);
  constexpr uint32_t V = 16 / sizeof(W);
  // 16-byte loads of weights need every row to start 16-byte aligned.
  const bool vec = cols % V == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const W* wt = static_cast<const W*>(w);
  // grid.y is at most 65535: launch again for every 65535 groups of tokens.
  constexpr size_t kMaxTokensPerLaunch = size_t{65535} * kGemvTokens;
  for (size_t t = 0; t < n; t += kMaxTokensPerLaunch) {
    const size_t nt = n - t < kMaxTokensPerLaunch ? n - t : kMaxTokensPerLaunch;
    const dim3 grid((rows + kGemvWarps - 1) / kGemvWarps,
                    static_cast<unsigned>((nt + kGemvTokens - 1) / kGemvTokens));
    if (vec) {
      GemvKernel<W, true><<<grid, block, 0, stream>>>(wt, rows, cols, x + t * ldx, ldx, nt,
                                                      y + t * ldy, ldy);
    } else {
      GemvKernel<W, false><<<grid, block, 0, stream>>>(wt, rows, cols, x + t * ldx, ldx, nt,
                                                       y + t * ldy, ldy);
    }
  }
  return cudaGetLastError();
}

unsigned Blocks(size_t count, unsigned threads) {
  const size_t b = (count + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535u * 16u ? b : 65535u * 16u);  // grid-stride beyond
}

__device__ __forceinline__ void StoreRounded(float v, __half* out) { *out = __float2half_rn(v); }
__device__ __forceinline__ void StoreRounded(float v, __nv_bfloat16* out) {
  *out = __float2bfloat16_rn(v);
}

template <typename H>
__global__ void ConvertKernel(const float* __restrict__ in, size_t count, H* __restrict__ out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    StoreRounded(in[i], out + i);
  }
}

// The activations in f32, the formulas of the reference backend (ReferenceActivation).
__device__ __forceinline__ float Act(uint8_t activation, float v) {
  switch (activation) {
    case 1: return v > 0.0f ? v : 0.0f;                              // RELU
    case 2: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));  // GELU_ERF
    case 3:                                                              // GELU_TANH
      return 0.5f * v * (1.0f + tanhf(0.79788456080286535588f * (v + 0.044715f * v * v * v)));
    case 4: return v / (1.0f + expf(-v));  // SILU
    default: return 1.0f / (1.0f + expf(-v));  // SIGMOID (the loader refuses other values)
  }
}

__global__ void ActivateKernel(uint8_t activation, bool gated, float* __restrict__ up,
                               const float* __restrict__ gate, const float* __restrict__ up_bias,
                               const float* __restrict__ gate_bias,
                               const float* __restrict__ scale, size_t count, uint32_t ff) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint32_t c = static_cast<uint32_t>(i % ff);
    const float u = up[i] + (up_bias ? up_bias[c] : 0.0f);
    const float h = gated ? Act(activation, gate[i] + (gate_bias ? gate_bias[c] : 0.0f)) * u
                          : Act(activation, u);
    up[i] = scale ? h * scale[c] : h;
  }
}

constexpr int kNormThreads = 256;

__device__ double BlockSum(double v, double* shared) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();  // `shared` may still be read from the previous sum
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double s = 0.0;
  for (int i = 0; i < kNormThreads / kWarp; ++i) s += shared[i];
  return s;
}

// One block per token.
__global__ void NormKernel(bool layer_norm, const float* __restrict__ in, uint32_t d,
                           const float* __restrict__ weight, const float* __restrict__ bias,
                           float eps, float* __restrict__ out) {
  __shared__ double shared[kNormThreads / kWarp];
  const float* x = in + static_cast<size_t>(blockIdx.x) * d;
  float* y = out + static_cast<size_t>(blockIdx.x) * d;
  double mean = 0.0;
  if (layer_norm) {
    double s = 0.0;
    for (uint32_t i = threadIdx.x; i < d; i += kNormThreads) s += x[i];
    mean = BlockSum(s, shared) / d;
  }
  double sq = 0.0;
  for (uint32_t i = threadIdx.x; i < d; i += kNormThreads) {
    const double c = x[i] - mean;
    sq += c * c;
  }
  const double inv = 1.0 / sqrt(BlockSum(sq, shared) / d + static_cast<double>(eps));
  for (uint32_t i = threadIdx.x; i < d; i += kNormThreads) {
    const double v = (x[i] - mean) * inv * weight[i] + (bias ? bias[i] : 0.0f);
    y[i] = static_cast<float>(v);
  }
}

__global__ void AddBiasKernel(float* __restrict__ y, const float* __restrict__ b, size_t count,
                              uint32_t d) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    y[i] += b[i % d];
  }
}

__global__ void ResidualKernel(const float* __restrict__ f, const float* __restrict__ x,
                               size_t count, float* __restrict__ out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = x ? f[i] + x[i] : f[i];
  }
}

__global__ void GatherKernel(const float* __restrict__ in, const uint32_t* __restrict__ tokens,
                             size_t count, uint32_t d, float* __restrict__ out) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count * d;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t j = i / d, c = i % d;
    out[i] = in[static_cast<size_t>(tokens[j]) * d + c];
  }
}

__global__ void ScatterAddKernel(const float* __restrict__ f, const uint32_t* __restrict__ tokens,
                                 const float* __restrict__ weights, size_t count, uint32_t d,
                                 float* __restrict__ acc) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count * d;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t j = i / d, c = i % d;
    acc[static_cast<size_t>(tokens[j]) * d + c] += weights[j] * f[i];
  }
}

__global__ void AddGatedKernel(const float* __restrict__ f, const float* __restrict__ gate_logit,
                               size_t count, uint32_t d, float* __restrict__ acc) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    // The gate in double, as the reference computes it, rounded once.
    const float s =
        gate_logit ? static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(gate_logit[i / d]))))
                   : 1.0f;
    acc[i] += s * f[i];
  }
}

// Per-token scratch layout: doubles logits, scores, choice [E] and group_scores [G], then bytes
// taken [E] and group_kept [G].
__host__ __device__ size_t RouteDoubles(const route::Params& p) {
  return 3 * size_t{p.num_experts} + p.n_group;
}

__global__ void RouteKernel(route::Params p, const float* __restrict__ logits, size_t n,
                            unsigned char* scratch, size_t per_token, uint32_t* experts,
                            double* weights) {
  const size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (t >= n) return;
  const uint32_t e_count = p.num_experts;
  double* d = reinterpret_cast<double*>(scratch + t * per_token);
  uint8_t* b = reinterpret_cast<uint8_t*>(d + RouteDoubles(p));
  for (uint32_t e = 0; e < e_count; ++e) d[e] = logits[t * e_count + e];
  const route::Scratch s{d + e_count, d + 2 * e_count, d + 3 * e_count, b, b + e_count};
  route::Route(p, d, s, experts + t * p.top_k, weights + t * p.top_k);
}

constexpr int kReadThreads = 256;

__global__ void ReadAllKernel(const float4* __restrict__ in, size_t count4, float* sum) {
  float s = 0.0f;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count4;
       i += size_t{gridDim.x} * blockDim.x) {
    const float4 v = __ldg(in + i);
    s += v.x + v.y + v.z + v.w;
  }
  s = WarpSum(s);
  if (threadIdx.x % kWarp == 0) atomicAdd(sum, s);
}

constexpr unsigned kThreads = 256;

}  // namespace

cudaError_t Gemv(WType type, const void* w, uint32_t rows, uint32_t cols, const float* x,
                 size_t ldx, size_t n, float* y, size_t ldy, cudaStream_t stream) {
  switch (type) {
    case WType::kF16: return LaunchGemv<__half>(w, rows, cols, x, ldx, n, y, ldy, stream);
    case WType::kBF16:
      return LaunchGemv<__nv_bfloat16>(w, rows, cols, x, ldx, n, y, ldy, stream);
    default: return LaunchGemv<float>(w, rows, cols, x, ldx, n, y, ldy, stream);
  }
}

cudaError_t ConvertF32(WType type, const float* in, size_t count, void* out, cudaStream_t stream) {
  if (type == WType::kF16) {
    ConvertKernel<__half><<<Blocks(count, kThreads), kThreads, 0, stream>>>(
        in, count, static_cast<__half*>(out));
  } else {
    ConvertKernel<__nv_bfloat16><<<Blocks(count, kThreads), kThreads, 0, stream>>>(
        in, count, static_cast<__nv_bfloat16*>(out));
  }
  return cudaGetLastError();
}

cudaError_t Activate(uint8_t activation, bool gated, float* up, const float* gate,
                     const float* up_bias, const float* gate_bias, const float* scale, size_t n,
                     uint32_t ff, cudaStream_t stream) {
  const size_t count = n * ff;
  ActivateKernel<<<Blocks(count, kThreads), kThreads, 0, stream>>>(
      activation, gated, up, gate, up_bias, gate_bias, scale, count, ff);
  return cudaGetLastError();
}

cudaError_t Norm(bool layer_norm, const float* in, size_t n, uint32_t d, const float* weight,
                 const float* bias, float eps, float* out, cudaStream_t stream) {
  NormKernel<<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(layer_norm, in, d, weight,
                                                                     bias, eps, out);
  return cudaGetLastError();
}

cudaError_t AddBias(float* y, const float* b, size_t n, uint32_t d, cudaStream_t stream) {
  AddBiasKernel<<<Blocks(n * d, kThreads), kThreads, 0, stream>>>(y, b, n * d, d);
  return cudaGetLastError();
}

cudaError_t Residual(const float* f, const float* x, size_t n, uint32_t d, float* out,
                     cudaStream_t stream) {
  ResidualKernel<<<Blocks(n * d, kThreads), kThreads, 0, stream>>>(f, x, n * d, out);
  return cudaGetLastError();
}

cudaError_t Gather(const float* in, const uint32_t* tokens, size_t count, uint32_t d, float* out,
                   cudaStream_t stream) {
  GatherKernel<<<Blocks(count * d, kThreads), kThreads, 0, stream>>>(in, tokens, count, d, out);
  return cudaGetLastError();
}

cudaError_t ScatterAdd(const float* f, const uint32_t* tokens, const float* weights, size_t count,
                       uint32_t d, float* acc, cudaStream_t stream) {
  ScatterAddKernel<<<Blocks(count * d, kThreads), kThreads, 0, stream>>>(f, tokens, weights,
                                                                         count, d, acc);
  return cudaGetLastError();
}

cudaError_t AddGated(const float* f, const float* gate_logit, size_t n, uint32_t d, float* acc,
                     cudaStream_t stream) {
  AddGatedKernel<<<Blocks(n * d, kThreads), kThreads, 0, stream>>>(f, gate_logit, n * d, d, acc);
  return cudaGetLastError();
}

size_t RouteScratchBytes(const route::Params& p) {
  const size_t bytes = RouteDoubles(p) * sizeof(double) + p.num_experts + p.n_group;
  return (bytes + 7) / 8 * 8;  // keeps every token's doubles aligned
}

cudaError_t Route(const route::Params& params, const float* logits, size_t n, void* scratch,
                  uint32_t* experts, double* weights, cudaStream_t stream) {
  constexpr unsigned kRouteThreads = 64;
  const unsigned blocks = static_cast<unsigned>((n + kRouteThreads - 1) / kRouteThreads);
  RouteKernel<<<blocks, kRouteThreads, 0, stream>>>(params, logits, n,
                                                    static_cast<unsigned char*>(scratch),
                                                    RouteScratchBytes(params), experts, weights);
  return cudaGetLastError();
}

cudaError_t ReadAll(const float* in, size_t count, float* sum, cudaStream_t stream) {
  int device = 0, sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  ReadAllKernel<<<static_cast<unsigned>(sms) * 8, kReadThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(in), count / 4, sum);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace fflite
