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
#include "backends/cuda/cuda_quant.h"

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

// xv = the V floats at p (16-byte aligned), in 16-byte loads through L1 (every row reads them).
template <int V>
__device__ __forceinline__ void LoadX(const float* p, float (&xv)[V]) {
#pragma unroll
  for (int q = 0; q < V / 4; ++q) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p) + q);
    xv[4 * q] = a.x;
    xv[4 * q + 1] = a.y;
    xv[4 * q + 2] = a.z;
    xv[4 * q + 3] = a.w;
  }
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
        LoadX<V>(xb + t * ldx + c, xv);
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

// The element type W of quantised matrices in the kernels templated on it (Quant<K>), as float,
// __half and __nv_bfloat16 are of the float types.
template <QKind K>
struct Quant {};
template <typename W>
struct QuantOf {
  static constexpr bool kQuant = false;
};
template <QKind K>
struct QuantOf<Quant<K>> {
  static constexpr bool kQuant = true;
  static constexpr QKind kKind = K;
};

// Blocks of 32 values in a row of `cols`: its scale groups.
__device__ __forceinline__ uint32_t QuantBlocks(uint32_t cols) {
  return (cols + kQBlock - 1) / kQBlock;
}

// WarpRows over quantised rows (cuda_quant.h's layout): acc[r][t] += Σ_j weight(r, j) · x[t][j]
// over this lane's chunks: each lane takes 16 bytes of codes of every row in turn (a warp reads
// 512 contiguous bytes of a row per load, U loads per row in flight, not kept in L1), sums their
// 16 (byte codes) or 32 (nibbles) values times x in f32 (DotOf16, the code the tests check on the
// CPU) and adds that times their scale, less their min times their Σx where there is one (summed
// once for the R rows: the 16 or 32 values of a lane share one scale and min). wr[r], sr[r]: row
// r's codes and scale record. cols a multiple of the values per 16 bytes and xb 16-byte aligned,
// ldx % 4 == 0: no lane reads past a row of x.
template <QKind K, int R, int NT, int U>
__device__ __forceinline__ void QuantWarpRows(const uint8_t* const (&wr)[R],
                                              const uint16_t* const (&sr)[R], const float* xb,
                                              size_t ldx, int nt, uint32_t cols, int lane,
                                              float (&acc)[R][NT]) {
  constexpr uint32_t kVals = ValuesPer16Bytes(K);
  const uint32_t chunks = cols / kVals;  // of 16 bytes per row
  const uint32_t blocks = QuantBlocks(cols);
  for (uint32_t c0 = lane; c0 < chunks; c0 += U * kWarp) {
    uint4 raw[U][R];
    float s[U][R], m[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t c = c0 + u * kWarp;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        raw[u][r] = c < chunks ? LoadOnce(wr[r] + 16 * static_cast<uint64_t>(c)) : uint4{};
        s[u][r] = 0.0f;
        m[u][r] = 0.0f;
        if (c < chunks) ScaleMinAt<K>(sr[r], blocks, c * kVals, &s[u][r], &m[u][r]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t c = c0 + u * kWarp;
      if (c >= chunks) break;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < nt) {
          float xv[kVals];
          LoadX<kVals>(xb + t * ldx + c * kVals, xv);
          [[maybe_unused]] float sum_x = 0.0f;
          if constexpr (HasMin(K)) {
#pragma unroll
            for (uint32_t i = 0; i < kVals; ++i) sum_x += xv[i];
          }
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const uint32_t w[4] = {raw[u][r].x, raw[u][r].y, raw[u][r].z, raw[u][r].w};
            if constexpr (HasMin(K)) {
              acc[r][t] += DotOf16<K>(w, xv) * s[u][r] - m[u][r] * sum_x;
            } else {
              acc[r][t] += DotOf16<K>(w, xv) * s[u][r];
            }
          }
        }
      }
    }
  }
}

// acc[r][t] += row rows[r] of matrix m[r] (`cols` columns of W; W = Quant<K>: quantised codes
// with their scale records sc[r]) · x[t]: WarpRows or QuantWarpRows, which the decode gemv (R rows
// of one matrix) and the experts' kernels (the same row of up and gate) share, so that both give
// the same bits.
template <typename W, int R, int NT, int U>
__device__ __forceinline__ void MatrixRows(const void* const (&m)[R],
                                           const uint16_t* const (&sc)[R],
                                           const uint32_t (&rows)[R], uint32_t cols,
                                           const float* xb, size_t ldx, int nt, int lane,
                                           float (&acc)[R][NT]) {
  if constexpr (QuantOf<W>::kQuant) {
    constexpr QKind K = QuantOf<W>::kKind;
    const uint32_t blocks = QuantBlocks(cols);
    const uint8_t* wr[R];
    const uint16_t* sr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      wr[r] = static_cast<const uint8_t*>(m[r]) + rows[r] * RowBytes(K, blocks);
      sr[r] = sc[r] + static_cast<size_t>(rows[r]) * ScaleWords(K, blocks);
    }
    QuantWarpRows<K, R, NT, U>(wr, sr, xb, ldx, nt, cols, lane, acc);
  } else {
    const W* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      wr[r] = static_cast<const W*>(m[r]) + static_cast<size_t>(rows[r]) * cols;
    }
    WarpRows<W, R, NT, U>(wr, xb, ldx, nt, cols, lane, acc);
  }
}

// Weight (row, c) of a matrix as f32: W's element, or a quantised one's (WeightAt).
template <typename W>
__device__ __forceinline__ float WeightOf(const void* w, const uint16_t* scales, uint32_t row,
                                          uint32_t cols, uint32_t c) {
  if constexpr (QuantOf<W>::kQuant) {
    return WeightAt<QuantOf<W>::kKind>(static_cast<const uint8_t*>(w), scales, QuantBlocks(cols),
                                       row, c);
  } else {
    return ToF32(static_cast<const W*>(w)[static_cast<size_t>(row) * cols + c]);
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

// f(W()) with W the C++ type of `type`'s elements (quantised: Quant<K>).
template <typename F>
cudaError_t ByType(WType type, F&& f) {
  switch (type) {
    case WType::kF16: return f(__half());
    case WType::kBF16: return f(__nv_bfloat16());
    case WType::kQ8: return f(Quant<QKind::kQ8>());
    case WType::kQ4: return f(Quant<QKind::kQ4>());
    case WType::kQ4K: return f(Quant<QKind::kQ4K>());
    case WType::kQ6K: return f(Quant<QKind::kQ6K>());
    case WType::kQ5K: return f(Quant<QKind::kQ5K>());
    case WType::kQ2K: return f(Quant<QKind::kQ2K>());
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
