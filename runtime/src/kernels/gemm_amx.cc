// The gemm engine's AMX-BF16 kernel (gemm.h): 32 tokens × 32 channels as four 16 × 16 tiles of
// f32 sums, tdpbf16ps over 16 units (32 values) of k per step, weights read as tiles straight from
// the packed panels (16 units of 16 channels, rows nr · 4 bytes apart, already in the pairs layout
// tdpbf16ps reads) and activations packed by rows of 16 units (GemmKernel::x_rows).
//
// One tile source (gemm_amx_tile.inc) for two implementations of the tile operations:
//  - the real tiles, as inline assembly (GCC 12's tile intrinsics neither name the memory they
//    read or write nor take a tile number from a template, so stores could be reordered around
//    them), with the configuration loaded in GemmKernel::enter and the tiles released in leave;
//  - a software model of the same instructions (GemmAmxModelKernel), which runs anywhere: the
//    tests check the layout, the driver and the tile source through it on CPUs without AMX.
// Before "amx-bf16" is listed, the CPU must report AMX-TILE and AMX-BF16, the OS must enable the
// tile state in XCR0 and grant it to the process (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+),
// and a product through the real tiles must match the double product within the tests' bound
// (GemmAmxStatus says which of these failed). Asking Linux for the tile state enlarges the
// process's signal frames by about 8 KiB (a later sigaltstack smaller than that is refused): an
// embedder that cannot have that sets FFLITE_NO_AMX=1, and nothing is asked.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/cpu_features.h"
#include "base/half.h"
#include "kernels/gemm.h"

#if defined(FFLITE_GEMM_AMX)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace fflite {

// Blocks of k and groups of panels for GemmBlock (GemmKernel::block_units, group_bytes): 512
// units (a tile's block of activations and a panel's each 64 KiB) and groups of 256 KiB (4
// panels), where the defaults from mr are 256 units and 128 KiB: calls of 16 steps, each loading
// and storing its four tiles of sums around 64 tile products. Measured on a Xeon with AMX (16
// cores, 2 MiB of L2 each), one thread, a Llama layer's three bf16 products with the ahead form
// (and the first tile streaming the panel 8 KiB ahead, which added nothing measurable to it) in a
// throwaway driver of this kernel, medians of 5-9 in ms, (units, panels per group):
//  - 64 tokens: (256, 4) 27.2, (512, 1) 26.2, (512, 2) 26.5, (512, 4) 26.1, (1024, 1) 26.4,
//    (1024, 2) 27.8, (2048, 1) 28.2; without the ahead form (256, 4) 33.6;
//  - 128 tokens: (256, 4) 45.6, (512, 2) 38.8, (512, 4) 43.3, (1024, 1) 38.1 (another run's,
//    noisier, put all of them at 82-89); without the ahead form (256, 4) 50.6;
//  - 512 tokens: (256, 4) 180.5, (512, 1) 189.6, (512, 2) 177.7, (512, 4) 157.9, (1024, 1)
//    194.1, (1024, 2) 188.1, (2048, 1) 213.9; without the ahead form (256, 4) 198.8.
// With fflite-bench (a Llama bf16 layer, the host's steadiest round): 26.5 / 46.6 / 181 ms at
// 64 / 128 / 512 tokens against 34.3 / 56.1 / 243-279 before.
constexpr size_t kAmxBlockUnits = 512;
constexpr size_t kAmxGroupBytes = size_t{256} << 10;

// --- The software model of the tiles. ---

namespace gemm_amx_model {
namespace {
constexpr size_t kMr = 32, kNr = 32;

// Eight tiles of 16 rows × 64 bytes, as the real kernel configures them.
struct Tiles {
  alignas(64) uint8_t t[8][16][64];

  void Load(int i, const void* p, size_t stride) {
    for (size_t r = 0; r < 16; ++r) std::memcpy(t[i][r], static_cast<const uint8_t*>(p) + r * stride, 64);
  }
  void Store(int i, void* p, size_t stride) const {
    for (size_t r = 0; r < 16; ++r) std::memcpy(static_cast<uint8_t*>(p) + r * stride, t[i][r], 64);
  }
  void Zero(int i) { std::memset(t[i], 0, sizeof(t[i])); }

  static uint32_t Word(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  // A bf16 value as tdpbf16ps reads it: subnormals are zero.
  static float In(uint32_t bits16) {
    const float v = Bf16ToF32(static_cast<uint16_t>(bits16));
    return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
  }
  // A sum as tdpbf16ps writes it: subnormals flushed to zero.
  static float Out(float v) {
    return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
  }
  // tdpbf16ps c, a, b (Intel SDM): for each row m and column n, over the units u of a's row in
  // order, the even pair's product and then the odd one's added to the f32 sum (each product of
  // two bf16 values is exact in f32, so fused or not gives the same sum).
  void Dp(int c, int a, int b) {
    for (size_t m = 0; m < 16; ++m) {
      for (size_t n = 0; n < 16; ++n) {
        float acc = BitsToFloat(Word(t[c][m] + 4 * n));
        for (size_t u = 0; u < 16; ++u) {
          const uint32_t x = Word(t[a][m] + 4 * u), w = Word(t[b][u] + 4 * n);
          acc = Out(acc + In(x & 0xffff) * In(w & 0xffff));
          acc = Out(acc + In(x >> 16) * In(w >> 16));
        }
        const uint32_t bits = FloatBits(acc);
        std::memcpy(t[c][m] + 4 * n, &bits, 4);
      }
    }
  }
};

#define FFLITE_AMX_STATE Tiles tiles;
#define FFLITE_AMX_LOAD(t, p, stride) tiles.Load(t, p, stride)
#define FFLITE_AMX_STORE(t, p, stride) tiles.Store(t, p, stride)
#define FFLITE_AMX_ZERO(t) tiles.Zero(t)
#define FFLITE_AMX_DP(c, a, b) tiles.Dp(c, a, b)
#include "kernels/gemm_amx_tile.inc"
#undef FFLITE_AMX_STATE
#undef FFLITE_AMX_LOAD
#undef FFLITE_AMX_STORE
#undef FFLITE_AMX_ZERO
#undef FFLITE_AMX_DP

const GemmKernel kModel = {"amx-bf16-model", FloatType::kBF16, kMr, kNr, Microkernel,
                           /*pack_tile=*/nullptr, /*unit_align=*/16, /*x_rows=*/true,
                           /*enter=*/nullptr, /*leave=*/nullptr, FloatType::kF32,
                           /*paired_halves=*/false, /*even_tiles=*/false, /*stream=*/nullptr,
                           AheadMicrokernel, /*pack_panels=*/nullptr,
                           /*groups_outer_below_outputs=*/false, kAmxBlockUnits, kAmxGroupBytes};

}  // namespace
}  // namespace gemm_amx_model

const GemmKernel& GemmAmxModelKernel() { return gemm_amx_model::kModel; }

#if !defined(FFLITE_GEMM_AMX)

const char* GemmAmxStatus() { return "not built for this target"; }

#else

// --- The real tiles. ---

namespace gemm_amx_tiles {
namespace {
constexpr size_t kMr = 32, kNr = 32;

// Each operation names the memory it reads or writes ("memory"), so that the compiler keeps the
// stores of y and the blocks before a load and reads them only after a store. AT&T and Intel
// syntax both, as GCC's own tile intrinsics write them.
#define FFLITE_AMX_STATE
#define FFLITE_AMX_LOAD(t, p, stride)                                                    \
  __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm" #t "|tileloadd\t%%tmm" #t ", [%0+%1*1]}" \
                   ::"r"(p), "r"(static_cast<long>(stride)) : "memory")
#define FFLITE_AMX_STORE(t, p, stride)                                                    \
  __asm__ volatile("{tilestored\t%%tmm" #t ", (%0,%1,1)|tilestored\t[%0+%1*1], %%tmm" #t "}" \
                   ::"r"(p), "r"(static_cast<long>(stride)) : "memory")
#define FFLITE_AMX_ZERO(t) __asm__ volatile("tilezero\t%%tmm" #t ::)
#define FFLITE_AMX_DP(c, a, b)                                                          \
  __asm__ volatile("{tdpbf16ps\t%%tmm" #b ", %%tmm" #a ", %%tmm" #c                      \
                   "|tdpbf16ps\t%%tmm" #c ", %%tmm" #a ", %%tmm" #b "}" ::)
#include "kernels/gemm_amx_tile.inc"
#undef FFLITE_AMX_STATE
#undef FFLITE_AMX_LOAD
#undef FFLITE_AMX_STORE
#undef FFLITE_AMX_ZERO
#undef FFLITE_AMX_DP

// LDTILECFG's 64 bytes: palette 1, every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

constexpr TileConfig MakeConfig() {
  TileConfig c{};
  c.palette = 1;
  for (size_t i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  return c;
}
constexpr TileConfig kConfig = MakeConfig();

void Enter() { __asm__ volatile("ldtilecfg\t%0" ::"m"(kConfig) : "memory"); }
void Leave() { __asm__ volatile("tilerelease" ::: "memory"); }

// Linux (5.16+) hands the 8 KiB tile state to a process only when asked.
bool OsGrantsTiles() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

const GemmKernel kAmx = {"amx-bf16", FloatType::kBF16, kMr, kNr, GemmMicrokernelAmxBf16,
                         /*pack_tile=*/nullptr, /*unit_align=*/16, /*x_rows=*/true, Enter, Leave,
                         FloatType::kF32, /*paired_halves=*/false, /*even_tiles=*/false,
                         /*stream=*/nullptr, GemmMicrokernelAmxBf16Ahead,
                         /*pack_panels=*/nullptr, /*groups_outer_below_outputs=*/false,
                         kAmxBlockUnits, kAmxGroupBytes};
// With the AVX-512 packing of its tiles and panels, where the CPU has AVX-512 F (every AMX CPU so
// far).
constexpr GemmKernel WithAvx512Packing(GemmKernel base) {
  base.pack_tile = GemmPackTileAmxBf16;
  base.pack_panels = GemmPackPanelsAmxBf16;
  return base;
}
const GemmKernel kAmxAvx512 = WithAvx512Packing(kAmx);
// Both without the ahead form (GemmKernelWithoutAhead).
const GemmKernel kAmxPlain = GemmWithoutAheadForm(kAmx);
const GemmKernel kAmxAvx512Plain = GemmWithoutAheadForm(kAmxAvx512);

const GemmKernel& Kernel() {
  return GetCpuFeatures().Has(CpuFeature::kAvx512f) ? kAmxAvx512 : kAmx;
}

// A product through the tiles against the double product, with GemmTest's bound: 4 tiles (3 of
// 32 tokens, one of 4), 2 panels (32 channels, 8), k 1100 (units padded, three blocks of k: y
// reloaded between them), a bias and a clamp.
bool SelfCheck() {
  const GemmKernel& g = Kernel();
  constexpr size_t n = 100, k = 1100, rows = 40;
  std::vector<float> x(n * k), bias(rows), y(n * rows);
  std::vector<uint16_t> w(rows * k);
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 8388608.0f - 1.0f;  // [-1, 1)
  };
  for (float& v : x) v = next();
  for (uint16_t& v : w) v = F32ToBf16(next());
  for (float& v : bias) v = next();
  AlignedBuffer<uint32_t> pw, px;
  if (!pw.Allocate(g.WeightBytes(rows, k) / 4) || !px.Allocate(g.ActivationBytes(n, k) / 4)) {
    return false;
  }
  GemmPackWeights(g, rows, k, w.data(), FloatType::kBF16, 0, g.Panels(rows), pw.data());
  GemmPackActivations(g, n, k, x.data(), k, 0, g.Tiles(n), px.data());
  GemmBlock(g, n, k, rows, px.data(), pw.data(), bias.data(), -0.5f, 0, g.Tiles(n), 0,
            g.Panels(rows), y.data(), rows);
  const double eps = std::ldexp(1.0, -24);
  for (size_t t = 0; t < n; ++t) {
    for (size_t o = 0; o < rows; ++o) {
      double sum = bias[o], mag = std::fabs(bias[o]);
      for (size_t j = 0; j < k; ++j) {
        const double term = static_cast<double>(Bf16ToF32(w[o * k + j])) *
                            Bf16ToF32(F32ToBf16(x[t * k + j]));
        sum += term;
        mag += std::fabs(term);
      }
      const double want = std::max(sum, -0.5);
      if (!(std::fabs(y[t * rows + o] - want) <= 4.0 * std::sqrt(k + 1.0) * eps * mag + 1e-30)) {
        return false;
      }
    }
  }
  return true;
}

const char* g_status = "not checked yet";

}  // namespace
}  // namespace gemm_amx_tiles

void GemmMicrokernelAmxBf16(size_t m, size_t n, size_t units, const uint32_t* x,
                            const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                            float out_min, float* y, size_t y_stride) {
  gemm_amx_tiles::Microkernel(m, n, units, x, w, bias, accumulate, clamp, out_min, y, y_stride);
}

void GemmMicrokernelAmxBf16Ahead(size_t m, size_t n, size_t units, const uint32_t* x,
                                 const uint32_t* w, const float* bias, bool accumulate,
                                 bool clamp, float out_min, float* y, size_t y_stride,
                                 const void* ahead, size_t ahead_bytes) {
  gemm_amx_tiles::AheadMicrokernel(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                   y_stride, ahead, ahead_bytes);
}

const GemmKernel& GemmAmxKernel() { return gemm_amx_tiles::Kernel(); }

const GemmKernel* GemmAmxWithoutAhead(const GemmKernel* kernel) {
  using namespace gemm_amx_tiles;
  if (kernel == &kAmx) return &kAmxPlain;
  if (kernel == &kAmxAvx512) return &kAmxAvx512Plain;
  return nullptr;
}

bool GemmAmxUsable() {
  using namespace gemm_amx_tiles;
  // Called once, from AvailableGemmKernels' first use (thread-safe static initialisation).
  const char* off = std::getenv("FFLITE_NO_AMX");
  if (!GetCpuFeatures().Has(CpuFeature::kAmxBf16)) {
    g_status = "no AMX-BF16 on this CPU";
  } else if (off != nullptr && off[0] != '\0' && std::strcmp(off, "0") != 0) {
    g_status = "not requested (FFLITE_NO_AMX is set)";
  } else if (!OsGrantsTiles()) {
    g_status = "the OS refused the AMX tile state";
  } else if (!SelfCheck()) {
    g_status = "self-check failed: the tiles' product is off the double product";
  } else {
    g_status = "listed";
    return true;
  }
  return false;
}

const char* GemmAmxStatus() {
  // The registry runs GemmAmxUsable where the CPU reports AMX-BF16, on first use.
  if (!GetCpuFeatures().Has(CpuFeature::kAmxBf16)) return "no AMX-BF16 on this CPU";
  (void)AvailableGemmKernels(FloatType::kBF16);
  return gemm_amx_tiles::g_status;
}

#endif  // FFLITE_GEMM_AMX

}  // namespace fflite
