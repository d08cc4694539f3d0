// The gemm engine's portable parts (gemm.h): packing, the blocked driver, the scalar twins of the
// microkernels, and the choice of kernel for this CPU.
#include "kernels/gemm.h"


#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "base/half.h"

namespace fflite {

namespace {

// Value j of row r of W as f32 (any float dtype).
float WeightAt(const void* w, FloatType w_type, size_t index) {
  switch (w_type) {
    case FloatType::kF16: return F16ToF32(static_cast<const uint16_t*>(w)[index]);
    case FloatType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(w)[index]);
    default: return static_cast<const float*>(w)[index];
  }
}

// At most this many tiles in a product may run k unblocked (see GemmBlock).
constexpr size_t kWholeKTiles = 3;

}  // namespace

void GemmPackWeights(const GemmKernel& kernel, size_t rows, size_t k, const void* w,
                     FloatType w_type, size_t first, size_t last, uint32_t* packed) {
  const size_t nr = kernel.nr, units = kernel.Units(k), values = kernel.ValueUnits(k);
  // The vector packing's whole chunks of units (weights in the slots' own type only), then this
  // loop from there.
  const bool own_type = kernel.panel != FloatType::kF32 || kernel.dtype == FloatType::kBF16 ||
                        w_type == FloatType::kF32;
  const size_t done = kernel.pack_panels != nullptr && own_type && first < last
                          ? kernel.pack_panels(rows, k, w, first, last, packed)
                          : 0;
  if (kernel.panel != FloatType::kF32) {
    // 16-bit slots: the file's values as they are (w_type is kernel.panel), in channel pairs
    // where paired_halves.
    const uint16_t* src = static_cast<const uint16_t*>(w);
    for (size_t p = first; p < last; ++p) {
      uint16_t* panel = reinterpret_cast<uint16_t*>(packed) + p * units * nr;
      for (size_t j = 0; j < nr; ++j) {
        const size_t slot = !kernel.paired_halves ? j
                            : j < nr / 2          ? 2 * j
                                                  : 2 * (j - nr / 2) + 1;
        const size_t r = p * nr + j, v = r < rows ? values : 0;
        for (size_t u = done; u < v; ++u) panel[u * nr + slot] = src[r * k + u];
        for (size_t u = std::max(v, done); u < units; ++u) panel[u * nr + slot] = 0;
      }
    }
    return;
  }
  for (size_t p = first; p < last; ++p) {
    uint32_t* panel = packed + p * units * nr;
    // In spans of 16 units: a span's writes (16 · nr units) stay in L1 while the rows are read.
    constexpr size_t kSpan = 16;
    for (size_t u0 = done; u0 < units; u0 += kSpan) {
      const size_t u1 = std::min(units, u0 + kSpan);
      for (size_t j = 0; j < nr; ++j) {
        const size_t r = p * nr + j;
        // Units past k's values (unit_align) are zero like channels past rows.
        const size_t v1 = r >= rows ? u0 : std::max(u0, std::min(u1, values));
        for (size_t u = v1; u < u1; ++u) panel[u * nr + j] = 0;
        if (kernel.dtype == FloatType::kBF16) {
          // Pairs of the file's bf16 values as they are (the caller passes BF16 weights only).
          const uint16_t* row = static_cast<const uint16_t*>(w) + r * k;
          for (size_t u = u0; u < v1; ++u) {
            const uint32_t lo = row[2 * u];
            const uint32_t hi = 2 * u + 1 < k ? row[2 * u + 1] : 0;
            panel[u * nr + j] = lo | (hi << 16);
          }
        } else if (w_type == FloatType::kF32) {
          const float* row = static_cast<const float*>(w) + r * k;
          for (size_t u = u0; u < v1; ++u) panel[u * nr + j] = FloatBits(row[u]);
        } else {
          for (size_t u = u0; u < v1; ++u) {
            panel[u * nr + j] = FloatBits(WeightAt(w, w_type, r * k + u));
          }
        }
      }
    }
  }
}

void GemmPackActivations(const GemmKernel& kernel, size_t n, size_t k, const float* x,
                         size_t x_stride, size_t first, size_t last, uint32_t* packed) {
  const size_t mr = kernel.mr, units = kernel.Units(k), values = kernel.ValueUnits(k);
  for (size_t t = first; t < last; ++t) {
    uint32_t* tile = packed + t * units * mr;
    const size_t first_token = kernel.TileStart(n, t);
    const size_t m = kernel.TileStart(n, t + 1) - first_token;
    const float* rows = x + first_token * x_stride;
    if (kernel.pack_tile != nullptr) {
      kernel.pack_tile(m, k, rows, x_stride, tile);
      continue;
    }
    // Where unit u of token i goes: see GemmKernel::x_rows.
    auto at = [&](size_t u, size_t i) -> uint32_t& {
      return kernel.x_rows ? tile[(u / 16) * 16 * mr + i * 16 + u % 16] : tile[u * mr + i];
    };
    for (size_t i = 0; i < mr; ++i) {
      const size_t v = i < m ? values : 0;  // tokens past m and units past k: zero
      for (size_t u = v; u < units; ++u) at(u, i) = 0;
      const float* row = rows + i * x_stride;
      if (kernel.dtype == FloatType::kBF16) {
        for (size_t u = 0; u < v; ++u) {
          const uint32_t lo = F32ToBf16(row[2 * u]);
          const uint32_t hi = 2 * u + 1 < k ? F32ToBf16(row[2 * u + 1]) : 0;
          at(u, i) = lo | (hi << 16);
        }
      } else {
        for (size_t u = 0; u < v; ++u) at(u, i) = FloatBits(row[u]);
      }
    }
  }
}

size_t GemmGroupPanels(const GemmKernel& kernel, size_t block) {
  return std::max<size_t>(1, kernel.GroupBytes() / (kernel.nr * block * kernel.SlotBytes()));
}

bool GemmBlocksOuter(const GemmKernel& kernel, size_t tiles, size_t k, size_t tokens,
                     size_t channels) {
  const uint64_t activations = static_cast<uint64_t>(tiles) * kernel.mr * kernel.Units(k) * 4;
  const uint64_t outputs = static_cast<uint64_t>(tokens) * channels * 4;
  if (activations <= kGemmBlocksOuterBytes) return false;
  return !kernel.groups_outer_below_outputs || activations > outputs;
}

void GemmBlock(const GemmKernel& kernel, size_t n, size_t k, size_t rows,
               const uint32_t* packed_x, const uint32_t* packed_w, const float* bias,
               float out_min, size_t t0, size_t t1, size_t p0, size_t p1, float* y,
               size_t y_stride, GemmOrder order) {
  const size_t mr = kernel.mr, nr = kernel.nr, units = kernel.Units(k);
  // A few tiles (a few dozen tokens; an expert's batch): k is not blocked where a whole panel
  // stays in L2 for the other tiles (or there are no others), so that each panel is one stream
  // from memory instead of pieces of 32 KiB the prefetcher restarts on. The sums are the same
  // either way: a block's sums are stored to y and reloaded exactly. Measured on a Zen 5 VM,
  // mixtral-mini routed experts at 128 tokens (11-24 per expert), 1 / 2 threads: always blocked
  // 59-67% / 55-60% of the FMA peak, up to 3 tiles 67-76% / 63-67%.
  // With 2-3 tiles the later tiles' passes run from L2 while the memory idles. On a Zen 4 VM
  // (AVX2; f32 expert matrices of 1408 x 2048 from memory, 7-12 tokens, 1 and 2 threads) none of
  // these beat this loop: the tiles taking turns over 64-256-unit pieces of each panel; the later
  // tiles prefetching the next group into L2, spread over their passes (which the AVX-512
  // kernels now do, for every pass: on an Intel Xeon it gained, see `ahead` below); a 12-token x
  // 8-channel kernel that reads each panel once (its broadcast per multiply-add made it slower).
  // The order of the blocks of k and the groups of panels (GemmOrder): with the groups outermost,
  // each group passes through every block of k before the next, so the tiles' activations are
  // read once per group, from L3 where they outgrow L2; with the blocks outermost, one block's
  // activations stay in L2 for every group, and the outputs are reloaded once per block. Measured
  // on a Zen 4 VM (AVX2, 1 MiB L2), one thread, 128 tokens, 11-31 rounds alternated, medians
  // (GFLOP/s, groups / blocks outermost): Llama's down matrix [4096, 11008] (5.8 MB of packed
  // activations) 63.5-66.2 / 70.8-74.8 in two runs, llama-70b's [8192, 28672] 63.7 / 70.2 and
  // [28672, 8192] 65.6 / 68.6; Llama's up [11008, 4096] (2.2 MB) and BERT's [768, 3072] (1.6 MB)
  // equal; but 16-40 expert matrices from memory ([1024, 3584], [2048, 1408]; 20-64 tokens, at
  // most 0.95 MB) 57-72 / 54-69, 2-7% slower with the blocks outermost in every case (each
  // panel's blocks are then separate streams from memory). At 2 threads (tasks of about 8
  // panels) both orders measured the same on Llama's matrices.
  // With the AVX-512 kernels of f32 arithmetic, the larger of the two sets decides where the
  // activations outgrow 2 MiB (GemmKernel::groups_outer_below_outputs): on a Zen 5 VM (1 MiB L2),
  // one thread, matrices from memory, groups of 256 KiB, 15 rounds alternated, medians (GFLOP/s,
  // groups / blocks outermost): Llama's up [11008, 4096] at 128 tokens (2.2 MB of activations,
  // 5.6 MB of outputs) 200-215 / 177-201 in four runs, at 200 tokens 208 / 199, at 512
  // 197 / 189; its down [4096, 11008] (activations larger than outputs) at 128 tokens
  // 205-208 / 210-214, at 200 202 / 211, at 512 166 / 197.
  // The size of a group (kGemmGroupBytes): on the same VM, one thread, f32 kernel with its ahead
  // form, matrices from memory, 15 rounds alternated in one process, medians in GFLOP/s for
  // groups of 64 / 128 / 256 KiB: Llama's up [11008, 4096] at 13 tokens 111 / 129 / 115, at 24
  // 209 / 198 / 176, at 48 213 / 203 / 190, at 128 216 / 217 / 215; in a second run (best of 15)
  // at 13, 16, 20, 30, 36 tokens 114 / 140 / 111, 181 / 189 / 152, 199 / 203 / 176,
  // 177 / 187 / 159, 197 / 211 / 190, at 64 and 96 tokens alike, and its down matrix the same
  // way; mixtral-mini's expert matrices [3584, 1024] and [1024, 3584] at 20 tokens (128 / 256
  // KiB) 173 / 153 and 194 / 166, at 32-40 tokens 188-203 / 182-195. The AVX2 kernel (no ahead
  // form) measured alike with either.
  const size_t tiles = t1 - t0;
  const size_t slot = kernel.SlotBytes();
  const bool whole_k =
      tiles == 1 || (tiles <= kWholeKTiles && units * nr * slot <= kGemmWholeKBytes);
  const size_t block = whole_k ? std::max<size_t>(units, 1) : kernel.BlockUnits();
  const size_t blocks = std::max<size_t>(1, (units + block - 1) / block);
  const size_t group = GemmGroupPanels(kernel, block);
  const bool clamp = out_min != -std::numeric_limits<float>::infinity();
  const bool blocks_outer =
      order == GemmOrder::kBlocksOuter ||
      (order == GemmOrder::kAuto &&
       GemmBlocksOuter(kernel, tiles, k, kernel.TileStart(n, t1) - kernel.TileStart(n, t0),
                       std::min(rows, p1 * nr) - p0 * nr));
  // The passes (block b of k over the group of panels from pg), in order.
  struct Pass {
    size_t b, pg;
  };
  const size_t groups = (p1 - p0 + group - 1) / group;
  const size_t passes = blocks * groups;
  auto pass_at = [&](size_t i) -> Pass {
    return blocks_outer ? Pass{i / groups, p0 + i % groups * group}
                        : Pass{i % blocks, p0 + i / blocks * group};
  };
  auto group_end = [&](size_t pg) { return std::min(p1, pg + group); };
  // With an ahead form and 2 tiles or more, the tiles of each pass prefetch the next pass's
  // pieces of panels into L2, each tile a share of each: while computing on panel pg + j, the
  // next pass's panel pg' + j (panels of the next pass past this pass's count are not
  // prefetched). So only the first pass's first tile waits on memory (with the streaming form),
  // and the memory works while every later pass computes. A panel the previous pass prefetched
  // is shared among all the tiles' prefetches; one it did not, the first tile streams and the
  // others share. Measured on an Intel Xeon VM (AVX-512, family 6 model 207, 2 MiB L2), one
  // thread, matrices read from memory unless said, 5-11 rounds alternated in each of 1-3 runs,
  // medians in GFLOP/s (FMA peak 166), the loop without / with the ahead form: Llama's [11008,
  // 4096] at 128 tokens 104-116 / 115-117, [4096, 11008] 101-133 / 123-142; BERT's (from L3)
  // [3072, 768] 135-148 / 131-164 and [768, 3072] 124-138 / 149; mixtral-mini's expert matrices
  // at 32 tokens (3 tiles) [3584, 1024] 85-104 / 101-137 and [1024, 3584] 85-92 / 96-118, at 20
  // tokens [3584, 1024] 76 / 79; qwen-moe's [1408, 2048] at 16, 24 and 30 tokens 57 / 58,
  // 78 / 84, 78 / 90. Then 15-21 rounds, medians of the paired ratios with / without: Llama's
  // 1.05 and 1.02, mixtral-mini's 1.18 and 1.24, BERT's 1.10 and 1.10. The same ahead form
  // for the AVX2 kernel (6-token tiles), on that Xeon (fflite-bench --gemm_isa avx2 --gemm_ahead
  // on --baseline --vs gemm_ahead=off, 2 runs, paired ratios at 1 and 2 threads): Llama f32
  // 0.80-0.92, bf16 0.87-0.93, BERT 0.85-0.89 (one 1.04), mixtral-mini 0.89-1.11, qwen-moe
  // 0.93-1.03; not kept.
  const bool ahead = kernel.ahead != nullptr && tiles >= 2;
  size_t prefetched = 0;  // panels of this pass, from its first, that the previous pass prefetched
  if (kernel.enter != nullptr) kernel.enter();
  for (size_t i = 0; i < passes; ++i) {
    const Pass pass = pass_at(i);
    const size_t pe = group_end(pass.pg);
    const size_t u0 = pass.b * block, ub = std::min(block, units - u0);
    const bool final = pass.b + 1 == blocks;
    // The next pass's pieces to prefetch: block next.b of its next_count panels from next.pg.
    const bool has_next = ahead && i + 1 < passes;
    const Pass next = has_next ? pass_at(i + 1) : Pass{0, 0};
    const size_t next_count = has_next ? group_end(next.pg) - next.pg : 0;
    const size_t next_u0 = next.b * block;
    const size_t next_bytes = has_next ? std::min(block, units - next_u0) * nr * slot : 0;
    for (size_t t = t0; t < t1; ++t) {
      const size_t first_token = kernel.TileStart(n, t);
      const size_t m = kernel.TileStart(n, t + 1) - first_token;
      const uint32_t* xt = packed_x + (t * units + u0) * mr;
      float* yt = y + first_token * y_stride;
      for (size_t p = pass.pg; p < pe; ++p) {
        const size_t c = std::min(nr, rows - p * nr);
        const size_t j = p - pass.pg;
        const uint32_t* wp = kernel.PanelAt(packed_w, units, p, u0);
        const float* bp = bias != nullptr ? bias + p * nr : nullptr;
        float* yp = yt + p * nr;
        const bool in_l2 = j < prefetched;
        // The pass that brings the panel from memory: the first tile streams it.
        if (t == t0 && !in_l2) {
          const GemmMicrokernelFn first =
              kernel.stream != nullptr ? kernel.stream : kernel.microkernel;
          first(m, c, ub, xt, wp, bp, pass.b > 0, final && clamp, out_min, yp, y_stride);
          continue;
        }
        if (j < next_count) {
          // This tile's share of the next pass's piece of its panel j (none where the piece has
          // fewer lines than the tiles).
          const size_t sharers = in_l2 ? tiles : tiles - 1, share = in_l2 ? t - t0 : t - t0 - 1;
          const size_t lo = next_bytes * share / sharers / 64 * 64;
          const size_t hi = share + 1 == sharers ? next_bytes
                                                 : next_bytes * (share + 1) / sharers / 64 * 64;
          if (hi > lo) {
            const char* next_piece = reinterpret_cast<const char*>(
                kernel.PanelAt(packed_w, units, next.pg + j, next_u0));
            kernel.ahead(m, c, ub, xt, wp, bp, pass.b > 0, final && clamp, out_min, yp,
                         y_stride, next_piece + lo, hi - lo);
            continue;
          }
        }
        kernel.microkernel(m, c, ub, xt, wp, bp, pass.b > 0, final && clamp, out_min, yp,
                           y_stride);
      }
    }
    prefetched = has_next ? std::min(next_count, pe - pass.pg) : 0;
  }
  if (kernel.leave != nullptr) kernel.leave();
}

// --- Scalar twins: 4 tokens × 8 channels, units in order. ---

namespace {
constexpr size_t kScalarMr = kGemmScalarMr, kScalarNr = kGemmScalarNr;

// What a scalar twin's weight slots hold: f32 units, bf16 pairs (with bf16 activations), or
// 16-bit f16 / bf16 slots (with f32 activations).
enum class Slots { kF32, kBf16Pairs, kF16, kBf16 };

template <Slots kSlots>
void ScalarMicrokernel(size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w,
                       const float* bias, bool accumulate, bool clamp, float out_min, float* y,
                       size_t y_stride) {
  const uint16_t* w16 = reinterpret_cast<const uint16_t*>(w);
  float acc[kScalarMr][kScalarNr];
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      acc[i][j] = accumulate ? y[i * y_stride + j] : bias != nullptr ? bias[j] : 0.0f;
    }
  }
  for (size_t u = 0; u < units; ++u) {
    for (size_t i = 0; i < m; ++i) {
      const uint32_t xu = x[u * kScalarMr + i];
      for (size_t j = 0; j < n; ++j) {
        if (kSlots == Slots::kF16 || kSlots == Slots::kBf16) {
          const uint16_t h = w16[u * kScalarNr + j];
          const float wf = kSlots == Slots::kF16 ? F16ToF32(h) : Bf16ToF32(h);
          acc[i][j] += wf * BitsToFloat(xu);
          continue;
        }
        const uint32_t wu = w[u * kScalarNr + j];
        if (kSlots == Slots::kBf16Pairs) {
          // vdpbf16ps's order: the odd pair's product first, then the even one's (each exact).
          acc[i][j] += Bf16ToF32(static_cast<uint16_t>(wu >> 16)) *
                       Bf16ToF32(static_cast<uint16_t>(xu >> 16));
          acc[i][j] += Bf16ToF32(static_cast<uint16_t>(wu)) * Bf16ToF32(static_cast<uint16_t>(xu));
        } else {
          acc[i][j] += BitsToFloat(wu) * BitsToFloat(xu);
        }
      }
    }
  }
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      y[i * y_stride + j] = clamp ? std::max(out_min, acc[i][j]) : acc[i][j];
    }
  }
}

}  // namespace

void GemmMicrokernelScalar(size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w,
                           const float* bias, bool accumulate, bool clamp, float out_min,
                           float* y, size_t y_stride) {
  ScalarMicrokernel<Slots::kF32>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                 y_stride);
}

void GemmMicrokernelScalarBf16(size_t m, size_t n, size_t units, const uint32_t* x,
                               const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                               float out_min, float* y, size_t y_stride) {
  ScalarMicrokernel<Slots::kBf16Pairs>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                       y_stride);
}

void GemmMicrokernelScalarF16w(size_t m, size_t n, size_t units, const uint32_t* x,
                               const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                               float out_min, float* y, size_t y_stride) {
  ScalarMicrokernel<Slots::kF16>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                 y_stride);
}

void GemmMicrokernelScalarBf16w(size_t m, size_t n, size_t units, const uint32_t* x,
                                const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                                float out_min, float* y, size_t y_stride) {
  ScalarMicrokernel<Slots::kBf16>(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                  y_stride);
}

}  // namespace fflite
