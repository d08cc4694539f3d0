// Device code shared by the cuda backend's two kernel files (cuda_kernels.cu: the dense layer's
// kernels; cuda_moe_kernels.cu: routing and the MoE kernels): element conversions, warp sums, a
// warp's pass over rows of weights (WarpRows, which the decode gemv and the experts' kernels share
// so that both give the same bits), the activations and launch helpers. Included only by those
// two files; everything is in an unnamed namespace, each file's own copy as when they were one.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_DEVICE_CUH_
#define FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_DEVICE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/cuda_kernels.h"

namespace fflite {
namespace cuda {
namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Two 16-bit values, low half first, as f32.
__device__ __forceinline__ float2 PairToF32(uint32_t u, __nv_bfloat16) {
  return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));  // the top half
}
__device__ __forceinline__ float2 PairToF32(uint32_t u, __half) {
  __half2 h;
  memcpy(&h, &u, sizeof(h));
  return __half22float2(h);
}

// 16 bytes of weights as V floats: Lanes<W>::Unpack.
template <typename H>  // __half, __nv_bfloat16
struct Lanes {
  static constexpr int V = 8;
  __device__ static void Unpack(const uint4& r, float (&f)[V]) {
    const uint32_t u[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = PairToF32(u[i], H());
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
};

template <>
struct Lanes<float> {
  static constexpr int V = 4;
  __device__ static void Unpack(const uint4& r, float (&f)[V]) {
    f[0] = __uint_as_float(r.x);
    f[1] = __uint_as_float(r.y);
    f[2] = __uint_as_float(r.z);
    f[3] = __uint_as_float(r.w);
  }
};

// Weights are read once per product: 16 bytes, not kept in L1 (which then holds x, read by
// every row).
__device__ __forceinline__ uint4 LoadOnce(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// acc[r][t] += Σ_c wr[r][c] · x[t][c] over this lane's columns: each lane takes 16 bytes of
// every row in turn (a warp reads 512 contiguous bytes per row and load), U loads per row in
// flight; x (f32) is read through L1, once per R rows. cols % V == 0, rows 16-byte aligned.
template <typename W, int R, int NT, int U>
__device__ __forceinline__ void WarpRows(const W* const (&wr)[R], const float* xb, size_t ldx,
                                         int nt, uint32_t cols, int lane, float (&acc)[R][NT]) {
  constexpr int V = Lanes<W>::V;
  constexpr uint32_t kStep = kWarp * V;
  uint32_t c0 = lane * V;
  const auto step = [&](uint32_t c, const uint4 (&raw)[R]) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < nt) {
        float xv[V];
#pragma unroll
        for (int q = 0; q < V / 4; ++q) {
          const float4 a = __ldg(reinterpret_cast<const float4*>(xb + t * ldx + c) + q);
          xv[4 * q] = a.x;
          xv[4 * q + 1] = a.y;
          xv[4 * q + 2] = a.z;
          xv[4 * q + 3] = a.w;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float f[V];
          Lanes<W>::Unpack(raw[r], f);
#pragma unroll
          for (int v = 0; v < V; ++v) acc[r][t] += f[v] * xv[v];
        }
      }
    }
  };
  for (; c0 + (U - 1) * kStep < cols; c0 += U * kStep) {
    uint4 raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int r = 0; r < R; ++r) raw[u][r] = LoadOnce(wr[r] + c0 + u * kStep);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) step(c0 + u * kStep, raw[u]);
  }
  for (; c0 < cols; c0 += kStep) {
    uint4 raw[R];
#pragma unroll
    for (int r = 0; r < R; ++r) raw[r] = LoadOnce(wr[r] + c0);
    step(c0, raw);
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
    case 6: {                                // SWIGLU_OAI's gate part: c·σ(1.702·c), c = min(v, 7)
      const float c = v > 7.0f ? 7.0f : v;
      return c / (1.0f + expf(-1.702f * c));
    }
    default: return 1.0f / (1.0f + expf(-v));  // SIGMOID (the loader refuses other values)
  }
}

// A GLU's product of the activated gate g and the up value u: act(g)·u, except SWIGLU_OAI's
// act(g)·(clamp(u, -7, 7) + 1).
__device__ __forceinline__ float Glu(uint8_t activation, float g, float u) {
  if (activation == 6) u = (u > 7.0f ? 7.0f : (u < -7.0f ? -7.0f : u)) + 1.0f;
  return Act(activation, g) * u;
}

constexpr unsigned kThreads = 256;

// f(W()) with W the C++ type of `type`'s elements.
template <typename F>
cudaError_t ByType(WType type, F&& f) {
  switch (type) {
    case WType::kF16: return f(__half());
    case WType::kBF16: return f(__nv_bfloat16());
    default: return f(float());
  }
}

unsigned Blocks(size_t count, unsigned threads) {
  const size_t b = (count + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535u * 16u ? b : 65535u * 16u);  // grid-stride beyond
}

}  // namespace
}  // namespace cuda
}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_DEVICE_CUH_
