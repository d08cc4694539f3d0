// The cuda backend's dense-layer kernels: the f32-activation matrix-vector product for decode and
// routers, conversions, activations, norms, biases and residuals. Matrix products with many
// tokens go to cuBLAS (cuda_backend.cc); routing and the MoE kernels are cuda_moe_kernels.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_device.cuh"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_quant.h"

namespace fflite {
namespace cuda {
namespace {

constexpr int kGemvWarps = 8;   // scalar fallback: rows per block (a warp per row)
constexpr int kGemvTokens = 8;  // tokens per block (grid.y covers the rest)

// y[t][row] = w[row] · x[t]: R rows per warp, WARPS warps per block, NT tokens per blockIdx.y;
// W a float type, or Quant<K> for quantised codes with their scale records (MatrixRows).
// Measured on an H200 (bf16, [28672, 8192] and [8192, 28672]): one token at R 1, U 4, 8 warps
// reads 4080-4190 GB/s, where a warp per row with scalar x loads read 1780; 2-8 tokens at R 4,
// U 2, 4 warps 1600-3780 GB/s, where a warp per row read 240-950. (Quantised types take the same
// shapes, not yet measured.)
template <typename W, int R, int NT, int U, int WARPS>
__global__ void __launch_bounds__(WARPS* kWarp)
    GemvRowsKernel(const void* __restrict__ w, const uint16_t* __restrict__ scales, uint32_t rows,
                   uint32_t cols, const float* __restrict__ x, size_t ldx, size_t n,
                   float* __restrict__ y, size_t ldy) {
  const uint32_t row0 = (blockIdx.x * WARPS + threadIdx.x / kWarp) * R;
  const int lane = threadIdx.x % kWarp;
  if (row0 >= rows) return;
  const size_t t0 = static_cast<size_t>(blockIdx.y) * NT;
  const int nt = static_cast<int>(n - t0 < NT ? n - t0 : NT);
  const void* m[R];
  const uint16_t* sc[R];
  uint32_t rr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = w;
    sc[r] = scales;
    rr[r] = min(row0 + r, rows - 1);
  }
  float acc[R][NT] = {};
  MatrixRows<W, R, NT, U>(m, sc, rr, cols, x + t0 * ldx, ldx, nt, lane, acc);
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float v = WarpSum(acc[r][t]);
      if (lane == 0 && t < nt && row0 + r < rows) y[(t0 + t) * ldy + row0 + r] = v;
    }
  }
}

// The fallback where rows are not 16-byte aligned (quantised: cols not a multiple of the values in
// 16 bytes of codes), or x is not: one warp per row, an element per lane.
template <typename W>
__global__ void GemvScalarKernel(const void* __restrict__ w, const uint16_t* __restrict__ scales,
                                 uint32_t rows, uint32_t cols, const float* __restrict__ x,
                                 size_t ldx, size_t n, float* __restrict__ y, size_t ldy) {
  const uint32_t row = blockIdx.x * kGemvWarps + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const size_t t0 = static_cast<size_t>(blockIdx.y) * kGemvTokens;
  if (row >= rows) return;
  const int nt = static_cast<int>(n - t0 < kGemvTokens ? n - t0 : kGemvTokens);
  const float* xb = x + t0 * ldx;
  float acc[kGemvTokens] = {};
  for (uint32_t c = lane; c < cols; c += kWarp) {
    const float wv = WeightOf<W>(w, scales, row, cols, c);
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t) {
      if (t < nt) acc[t] += wv * xb[t * ldx + c];
    }
  }
#pragma unroll
  for (int t = 0; t < kGemvTokens; ++t) {
    const float s = WarpSum(acc[t]);
    if (lane == 0 && t < nt) y[(t0 + t) * ldy + row] = s;
  }
}

// Calls launch(first token, tokens, grid) for groups of n tokens, `per_block` tokens per
// blockIdx.y and blocks of `block_rows` rows: grid.y is at most 65535, so a launch per 65535
// groups of tokens.
template <typename Launch>
void ForTokenGroups(size_t n, size_t per_block, uint32_t rows, uint32_t block_rows,
                    Launch&& launch) {
  const size_t per_launch = size_t{65535} * per_block;
  for (size_t t = 0; t < n; t += per_launch) {
    const size_t nt = n - t < per_launch ? n - t : per_launch;
    launch(t, nt, dim3((rows + block_rows - 1) / block_rows,
                       static_cast<unsigned>((nt + per_block - 1) / per_block)));
  }
}

template <typename W, int R, int NT, int U, int WARPS>
void LaunchRows(const void* w, const uint16_t* scales, uint32_t rows, uint32_t cols,
                const float* x, size_t ldx, size_t n, float* y, size_t ldy, cudaStream_t stream) {
  ForTokenGroups(n, NT, rows, R * WARPS, [&](size_t t, size_t nt, dim3 grid) {
    GemvRowsKernel<W, R, NT, U, WARPS><<<grid, WARPS * kWarp, 0, stream>>>(
        w, scales, rows, cols, x + t * ldx, ldx, nt, y + t * ldy, ldy);
  });
}

// Whether MatrixRows' 16-byte loads fit: cols a multiple of the values in 16 bytes.
template <typename W>
constexpr uint32_t ValuesPerLoad() {
  if constexpr (QuantOf<W>::kQuant) {
    return ValuesPer16Bytes(QuantOf<W>::kKind);
  } else {
    return Lanes<W>::V;
  }
}

template <typename W>
cudaError_t LaunchGemv(const void* w, const uint16_t* scales, uint32_t rows, uint32_t cols,
                       const float* x, size_t ldx, size_t n, float* y, size_t ldy,
                       cudaStream_t stream) {
  // 16-byte loads need every row of weights and of x to start 16-byte aligned.
  const bool vec = cols % ValuesPerLoad<W>() == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
  if (!vec) {
    ForTokenGroups(n, kGemvTokens, rows, kGemvWarps, [&](size_t t, size_t nt, dim3 grid) {
      GemvScalarKernel<W><<<grid, kGemvWarps * kWarp, 0, stream>>>(
          w, scales, rows, cols, x + t * ldx, ldx, nt, y + t * ldy, ldy);
    });
  } else if (n == 1) {
    LaunchRows<W, 1, 1, 4, 8>(w, scales, rows, cols, x, ldx, n, y, ldy, stream);
  } else if (n == 2) {
    LaunchRows<W, 4, 2, 2, 4>(w, scales, rows, cols, x, ldx, n, y, ldy, stream);
  } else if (n <= 4) {
    LaunchRows<W, 4, 4, 2, 4>(w, scales, rows, cols, x, ldx, n, y, ldy, stream);
  } else {
    LaunchRows<W, 4, 8, 2, 4>(w, scales, rows, cols, x, ldx, n, y, ldy, stream);
  }
  return cudaGetLastError();
}

template <QKind K>
__global__ void DequantRowsKernel(const uint8_t* __restrict__ codes,
                                  const uint16_t* __restrict__ scales, uint32_t first_row,
                                  size_t count, uint32_t cols, float* __restrict__ out) {
  const uint32_t blocks = QuantBlocks(cols);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = WeightAt<K>(codes, scales, blocks, first_row + static_cast<uint32_t>(i / cols),
                         static_cast<uint32_t>(i % cols));
  }
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

__global__ void ActivateKernel(uint8_t activation, bool gated, float* __restrict__ up,
                               const float* __restrict__ gate, const float* __restrict__ up_bias,
                               const float* __restrict__ gate_bias,
                               const float* __restrict__ scale, size_t count, uint32_t ff) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint32_t c = static_cast<uint32_t>(i % ff);
    const float u = up[i] + (up_bias ? up_bias[c] : 0.0f);
    const float h = gated ? Glu(activation, gate[i] + (gate_bias ? gate_bias[c] : 0.0f), u)
                          : Act(activation, u);
    up[i] = scale ? h * scale[c] : h;
  }
}

// One block per token; 1024 threads: with 256, a token of 8192 features took 20 us on an H200
// (each thread's 32 dependent loads per pass).
constexpr int kNormThreads = 1024;

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

}  // namespace

cudaError_t Gemv(WType type, const void* w, uint32_t rows, uint32_t cols, const float* x,
                 size_t ldx, size_t n, float* y, size_t ldy, cudaStream_t stream) {
  if (IsQuantised(type)) return cudaErrorInvalidValue;  // GemvQuant's
  return ByType(type, [&](auto tag) {
    return LaunchGemv<decltype(tag)>(w, nullptr, rows, cols, x, ldx, n, y, ldy, stream);
  });
}

cudaError_t GemvQuant(WType type, const void* codes, const uint16_t* scales, uint32_t rows,
                      uint32_t cols, const float* x, size_t ldx, size_t n, float* y, size_t ldy,
                      cudaStream_t stream) {
  if (!IsQuantised(type)) return cudaErrorInvalidValue;  // Gemv's
  return ByType(type, [&](auto tag) {
    return LaunchGemv<decltype(tag)>(codes, scales, rows, cols, x, ldx, n, y, ldy, stream);
  });
}

cudaError_t DequantRows(WType type, const void* codes, const uint16_t* scales, uint32_t first_row,
                        uint32_t count, uint32_t cols, float* out, cudaStream_t stream) {
  const size_t total = size_t{count} * cols;
  const uint8_t* w = static_cast<const uint8_t*>(codes);
  if (!IsQuantised(type)) return cudaErrorInvalidValue;
  return ByType(type, [&](auto tag) {
    if constexpr (QuantOf<decltype(tag)>::kQuant) {
      DequantRowsKernel<QuantOf<decltype(tag)>::kKind>
          <<<Blocks(total, kThreads), kThreads, 0, stream>>>(w, scales, first_row, total, cols,
                                                             out);
    }
    return cudaGetLastError();
  });
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

}  // namespace cuda
}  // namespace fflite
