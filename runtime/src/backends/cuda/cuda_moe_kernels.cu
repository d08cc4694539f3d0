// The cuda backend's MoE kernels: gathering and scattering tokens, the shared expert's gate,
// routing on the device (route::Route's results bit for bit), and the MoE decode: every chosen
// expert of a few tokens in three launches (cuda_kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/cuda_device.cuh"
#include "backends/cuda/cuda_kernels.h"

namespace fflite {
namespace cuda {
namespace {

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

// One thread per token: grouped routing (n_group > 1), and experts too many for RouteWarpKernel's
// shared memory. Its scratch is in shared memory where a block's tokens fit (in global memory
// the single thread's loads and stores of the scratch took 41 us per token on an H200 for 60
// experts; in shared memory 36), else in `scratch`.
__global__ void RouteKernel(route::Params p, const float* __restrict__ logits, size_t n,
                            unsigned char* scratch, size_t per_token, bool in_shared,
                            uint32_t* experts, double* weights) {
  extern __shared__ double route_shared[];
  const size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (t >= n) return;
  const uint32_t e_count = p.num_experts;
  unsigned char* mine = in_shared ? reinterpret_cast<unsigned char*>(route_shared) +
                                        threadIdx.x * per_token
                                  : scratch + t * per_token;
  double* d = reinterpret_cast<double*>(mine);
  uint8_t* b = reinterpret_cast<uint8_t*>(d + RouteDoubles(p));
  for (uint32_t e = 0; e < e_count; ++e) d[e] = logits[t * e_count + e];
  const route::Scratch s{d + e_count, d + 2 * e_count, d + 3 * e_count, b, b + e_count};
  route::Route(p, d, s, experts + t * p.top_k, weights + t * p.top_k);
}

// --- MoE decode: every chosen expert of a few tokens in one launch per step. ---

constexpr int kExpertWarps = 8;

__device__ __forceinline__ uint32_t SlotExpert(uint32_t slot, const uint32_t* experts, size_t n,
                                               uint32_t k, uint32_t shared, uint32_t num_experts,
                                               size_t* token) {
  const size_t routed = n * k;
  if (slot < routed) {
    *token = slot / k;
    return experts[slot];
  }
  const size_t j = slot - routed;
  *token = j / shared;
  return num_experts + static_cast<uint32_t>(j % shared);
}

// A warp per row of up (and gate) of the slot's expert: the rows of the products at one token
// with the same loop as GemvRowsKernel<W, 1, 1, 4, 8> (MatrixRows; W = Quant<K> for quantised
// types), so the bits of the grouped path's.
template <typename W>
__global__ void __launch_bounds__(kExpertWarps* kWarp)
    ExpertsHiddenKernel(const ExpertPtrs* __restrict__ table, const uint32_t* __restrict__ experts,
                        size_t n, uint32_t k, uint32_t shared, uint32_t num_experts,
                        const float* __restrict__ x, uint32_t d, uint8_t activation, bool gated,
                        float* __restrict__ h, size_t ldh) {
  size_t token = 0;
  const uint32_t e = SlotExpert(blockIdx.y, experts, n, k, shared, num_experts, &token);
  const ExpertPtrs p = table[e];
  const uint32_t row = blockIdx.x * kExpertWarps + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= p.ff) return;
  const float* xb = x + token * d;
  float u = 0.0f, g = 0.0f;
  if (gated) {
    const void* m[2] = {p.up, p.gate};
    const uint16_t* sc[2] = {p.up_scales, p.gate_scales};
    const uint32_t rows[2] = {row, row};
    float acc[2][1] = {};
    MatrixRows<W, 2, 1, 4>(m, sc, rows, d, xb, d, 1, lane, acc);
    u = WarpSum(acc[0][0]);
    g = WarpSum(acc[1][0]);
  } else {
    const void* m[1] = {p.up};
    const uint16_t* sc[1] = {p.up_scales};
    const uint32_t rows[1] = {row};
    float acc[1][1] = {};
    MatrixRows<W, 1, 1, 4>(m, sc, rows, d, xb, d, 1, lane, acc);
    u = WarpSum(acc[0][0]);
  }
  if (lane != 0) return;
  u += p.up_bias ? p.up_bias[row] : 0.0f;
  const float v = gated ? Glu(activation, g + (p.gate_bias ? p.gate_bias[row] : 0.0f), u)
                        : Act(activation, u);
  h[blockIdx.y * ldh + row] = p.scale ? v * p.scale[row] : v;
}

template <typename W>
__global__ void __launch_bounds__(kExpertWarps* kWarp)
    ExpertsDownKernel(const ExpertPtrs* __restrict__ table, const uint32_t* __restrict__ experts,
                      size_t n, uint32_t k, uint32_t shared, uint32_t num_experts,
                      const float* __restrict__ h, size_t ldh, uint32_t d, float* __restrict__ o) {
  size_t token = 0;
  const uint32_t e = SlotExpert(blockIdx.y, experts, n, k, shared, num_experts, &token);
  const ExpertPtrs p = table[e];
  const uint32_t row = blockIdx.x * kExpertWarps + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= d) return;
  const void* m[1] = {p.down};
  const uint16_t* sc[1] = {p.down_scales};
  const uint32_t rows[1] = {row};
  float acc[1][1] = {};
  MatrixRows<W, 1, 1, 4>(m, sc, rows, p.ff, h + blockIdx.y * ldh, ldh, 1, lane, acc);
  const float v = WarpSum(acc[0][0]);
  if (lane == 0) {
    float y = v;
    if (p.down_bias != nullptr) y += p.down_bias[row];
    o[blockIdx.y * size_t{d} + row] = y;
  }
}

__device__ __forceinline__ float LoadF32(const void* p, WType type, size_t i) {
  switch (type) {
    case WType::kF16: return ToF32(static_cast<const __half*>(p)[i]);
    case WType::kBF16: return ToF32(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

constexpr int kCombineThreads = 256;

// Blocks of kCombineThreads columns (grid.x) of one token (grid.y). Each block sorts the token's
// choices and, with a shared gate, computes the gate's logit itself (the row is small).
__global__ void __launch_bounds__(kCombineThreads)
    CombineKernel(const uint32_t* __restrict__ experts, const double* __restrict__ weights,
                  size_t n, uint32_t k, uint32_t shared, const void* __restrict__ gate_w,
                  WType gate_type, const float* __restrict__ x, const float* __restrict__ o,
                  uint32_t d, const float* __restrict__ residual, float* __restrict__ out,
                  unsigned long long* counts) {
  __shared__ uint32_t order[kCombineMaxK];
  __shared__ float sums[kCombineThreads / kWarp];
  const size_t t = blockIdx.y;
  const uint32_t* ex = experts + t * k;
  if (threadIdx.x == 0) {
    // The token's choices in ascending expert order (the grouped path adds experts in turn).
    for (uint32_t i = 0; i < k; ++i) order[i] = i;
    for (uint32_t i = 1; i < k; ++i) {
      const uint32_t v = order[i];
      uint32_t j = i;
      for (; j > 0 && ex[order[j - 1]] > ex[v]; --j) order[j] = order[j - 1];
      order[j] = v;
    }
    if (counts != nullptr && blockIdx.x == 0) {
      for (uint32_t i = 0; i < k; ++i) atomicAdd(counts + ex[i], 1ull);
    }
  }
  float s = 1.0f;
  if (gate_w != nullptr) {
    float part = 0.0f;
    for (uint32_t c = threadIdx.x; c < d; c += kCombineThreads) {
      part += LoadF32(gate_w, gate_type, c) * x[t * d + c];
    }
    part = WarpSum(part);
    if (threadIdx.x % kWarp == 0) sums[threadIdx.x / kWarp] = part;
  }
  __syncthreads();
  if (gate_w != nullptr) {
    float logit = 0.0f;
    for (int i = 0; i < kCombineThreads / kWarp; ++i) logit += sums[i];
    // The gate in double, as the reference computes it, rounded once.
    s = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(logit))));
  }
  const uint32_t c = blockIdx.x * kCombineThreads + threadIdx.x;
  if (c >= d) return;
  float acc = 0.0f;
  for (uint32_t i = 0; i < k; ++i) {
    const uint32_t j = order[i];
    acc += static_cast<float>(weights[t * k + j]) * o[(t * k + j) * d + c];
  }
  for (uint32_t j = 0; j < shared; ++j) acc += s * o[(n * k + t * shared + j) * d + c];
  out[t * d + c] = residual != nullptr ? acc + residual[t * d + c] : acc;
}

template <typename W>
cudaError_t LaunchExperts(const ExpertPtrs* table, const uint32_t* experts, size_t n, uint32_t k,
                          uint32_t shared, uint32_t num_experts, const float* x, uint32_t d,
                          uint8_t activation, bool gated, uint32_t max_ff, float* h, size_t ldh,
                          cudaStream_t stream) {
  const dim3 grid((max_ff + kExpertWarps - 1) / kExpertWarps,
                  static_cast<unsigned>(n * (k + shared)));
  ExpertsHiddenKernel<W><<<grid, kExpertWarps * kWarp, 0, stream>>>(
      table, experts, n, k, shared, num_experts, x, d, activation, gated, h, ldh);
  return cudaGetLastError();
}

template <typename W>
cudaError_t LaunchExpertsDown(const ExpertPtrs* table, const uint32_t* experts, size_t n,
                              uint32_t k, uint32_t shared, uint32_t num_experts, const float* h,
                              size_t ldh, uint32_t d, float* o, cudaStream_t stream) {
  const dim3 grid((d + kExpertWarps - 1) / kExpertWarps, static_cast<unsigned>(n * (k + shared)));
  ExpertsDownKernel<W><<<grid, kExpertWarps * kWarp, 0, stream>>>(table, experts, n, k, shared,
                                                                  num_experts, h, ldh, d, o);
  return cudaGetLastError();
}

// Routing without groups (n_group 1), one warp per token: the lanes compute the scores and each
// choice's arg max over the experts, lane 0 the sums in route::Route's order, so the results are
// route::Route's bit for bit (the same expressions; the arg max as route::ArgMax: the first expert
// not taken if its choice is NaN, else the largest choice that is not NaN, the lowest index among
// equals). One thread per token took 36 us for 60 experts on an H200 (its exp and divisions in
// double, one after another), the longest step of a MoE decode.
constexpr int kRouteWarps = 4;
constexpr uint32_t kFullMask = 0xffffffffu;

__host__ __device__ size_t RouteWarpBytes(uint32_t experts) {
  return 2 * size_t{experts} * sizeof(double) + (experts + 7) / 8 * 8;
}

__global__ void __launch_bounds__(kRouteWarps* kWarp)
    RouteWarpKernel(route::Params p, const float* __restrict__ logits, size_t n,
                    uint32_t* __restrict__ experts, double* __restrict__ weights) {
  extern __shared__ double route_warp_shared[];
  const uint32_t count = p.num_experts;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const size_t t = blockIdx.x * size_t{kRouteWarps} + warp;
  if (t >= n) return;  // the whole warp
  double* scores = reinterpret_cast<double*>(reinterpret_cast<unsigned char*>(route_warp_shared) +
                                             warp * RouteWarpBytes(count));
  double* choice = scores + count;
  uint8_t* taken = reinterpret_cast<uint8_t*>(choice + count);
  const float* lg = logits + t * count;
  if (p.scoring == route::kSoftmax) {
    // route::Route's max: logits[0] if it is NaN, else the largest of those that are not.
    double max = -INFINITY;
    for (uint32_t e = lane; e < count; e += kWarp) {
      const double v = lg[e];
      if (v > max) max = v;
    }
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const double other = __shfl_xor_sync(kFullMask, max, o);
      if (other > max) max = other;
    }
    if (isnan(lg[0])) max = lg[0];
    for (uint32_t e = lane; e < count; e += kWarp) scores[e] = exp(static_cast<double>(lg[e]) - max);
    __syncwarp();
    double sum = 0.0;
    if (lane == 0) {
      for (uint32_t e = 0; e < count; ++e) sum += scores[e];
    }
    sum = __shfl_sync(kFullMask, sum, 0);
    for (uint32_t e = lane; e < count; e += kWarp) scores[e] /= sum;
  } else {
    for (uint32_t e = lane; e < count; e += kWarp) {
      scores[e] = 1.0 / (1.0 + exp(-static_cast<double>(lg[e])));
    }
  }
  for (uint32_t e = lane; e < count; e += kWarp) {
    choice[e] = scores[e] + (p.score_correction_bias ? p.score_correction_bias[e] : 0.0);
    taken[e] = 0;
  }
  __syncwarp();
  double total = 0.0;
  for (uint32_t j = 0; j < p.top_k; ++j) {
    uint32_t first = count, best = count;
    double value = 0.0;
    for (uint32_t e = lane; e < count; e += kWarp) {
      if (taken[e]) continue;
      if (first == count) first = e;
      const double v = choice[e];
      if (isnan(v)) continue;
      if (best == count || v > value) {
        best = e;
        value = v;
      }
    }
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const uint32_t other_first = __shfl_xor_sync(kFullMask, first, o);
      first = other_first < first ? other_first : first;
      const uint32_t other = __shfl_xor_sync(kFullMask, best, o);
      const double other_value = __shfl_xor_sync(kFullMask, value, o);
      if (other != count &&
          (best == count || other_value > value || (other_value == value && other < best))) {
        best = other;
        value = other_value;
      }
    }
    const uint32_t e = isnan(choice[first]) ? first : best;
    if (lane == 0) {
      taken[e] = 1;
      experts[t * p.top_k + j] = e;
      weights[t * p.top_k + j] = scores[e];
      total += scores[e];
    }
    __syncwarp();
  }
  if (lane == 0) {
    for (uint32_t j = 0; j < p.top_k; ++j) {
      double& w = weights[t * p.top_k + j];
      if (p.normalize_top_k && total > 0.0) w /= total;
      w *= p.routed_scaling_factor;
    }
  }
}

}  // namespace

cudaError_t ExpertsHidden(WType type, const ExpertPtrs* table, const uint32_t* experts, size_t n,
                          uint32_t k, uint32_t shared, uint32_t num_experts, const float* x,
                          uint32_t d, uint8_t activation, bool gated, uint32_t max_ff, float* h,
                          size_t ldh, cudaStream_t stream) {
  const auto launch = [&](auto tag) {
    return LaunchExperts<decltype(tag)>(table, experts, n, k, shared, num_experts, x, d,
                                        activation, gated, max_ff, h, ldh, stream);
  };
  return ByType(type, launch);
}

cudaError_t ExpertsDown(WType type, const ExpertPtrs* table, const uint32_t* experts, size_t n,
                        uint32_t k, uint32_t shared, uint32_t num_experts, const float* h,
                        size_t ldh, uint32_t d, float* o, cudaStream_t stream) {
  const auto launch = [&](auto tag) {
    return LaunchExpertsDown<decltype(tag)>(table, experts, n, k, shared, num_experts, h, ldh, d,
                                            o, stream);
  };
  return ByType(type, launch);
}

cudaError_t CombineExperts(const uint32_t* experts, const double* weights, size_t n, uint32_t k,
                           uint32_t shared, const void* gate_w, WType gate_type, const float* x,
                           const float* o, uint32_t d, const float* residual, float* out,
                           unsigned long long* counts, cudaStream_t stream) {
  const dim3 grid((d + kCombineThreads - 1) / kCombineThreads, static_cast<unsigned>(n));
  CombineKernel<<<grid, kCombineThreads, 0, stream>>>(experts, weights, n, k, shared, gate_w,
                                                      gate_type, x, o, d, residual, out, counts);
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
  constexpr size_t kSharedBytes = 48 * 1024;  // a block's shared memory without opting in
  if (params.n_group == 1 && kRouteWarps * RouteWarpBytes(params.num_experts) <= kSharedBytes) {
    const unsigned blocks = static_cast<unsigned>((n + kRouteWarps - 1) / kRouteWarps);
    RouteWarpKernel<<<blocks, kRouteWarps * kWarp,
                      kRouteWarps * RouteWarpBytes(params.num_experts), stream>>>(
        params, logits, n, experts, weights);
    return cudaGetLastError();
  }
  const size_t per_token = RouteScratchBytes(params);
  const bool in_shared = per_token <= kSharedBytes;
  const unsigned threads =
      in_shared ? static_cast<unsigned>(std::min<size_t>(64, kSharedBytes / per_token)) : 64;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  RouteKernel<<<blocks, threads, in_shared ? threads * per_token : 0, stream>>>(
      params, logits, n, static_cast<unsigned char*>(scratch), per_token, in_shared, experts,
      weights);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace fflite
