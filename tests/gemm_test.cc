// The gemm engine's kernels (kernels/gemm.h): every kernel this CPU runs, scalar twins included,
// against a double product, over shapes with partial tiles, partial panels, several blocks of k
// and odd k; the driver's pieces give the same bits as one call; nothing outside y's named
// outputs is written.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/half.h"
#include "base/platform.h"
#include "gtest/gtest.h"
#include "kernels/gemm.h"
#include "testing/guarded_buffer.h"

namespace fflite {
namespace {

using testing::GuardedBuffer;

struct Shape {
  size_t n, k, rows;
};

// Partial tiles and panels, one unit, several blocks of k (GemmKernel::BlockUnits: 256 to 1536
// units; k = 3100 over 100 tokens is 2 to 7 blocks of every kernel, AMX included), odd k.
const Shape kShapes[] = {{1, 1, 1},     {3, 7, 5},      {12, 64, 32},   {13, 300, 33},
                         {25, 257, 70}, {7, 513, 97},   {40, 1000, 16}, {128, 96, 130},
                         {2, 2049, 31}, {33, 600, 257}, {100, 3100, 20}};

// Everything the product of one kernel needs, packed.
struct Product {
  const GemmKernel* kernel;
  Shape s;
  std::vector<float> x, bias;
  std::vector<uint16_t> w_bf16;  // the weights as bf16 (what both kinds of kernel multiply)
  std::vector<uint16_t> w_f16;   // the same as f16, for a kernel of f16 panels (what it multiplies)
  AlignedBuffer<uint32_t> w, xp;

  Product(const GemmKernel& g, Shape shape, std::mt19937& gen) : kernel(&g), s(shape) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    x.resize(s.n * s.k);
    for (float& v : x) v = dist(gen);
    bias.resize(s.rows);
    for (float& v : bias) v = dist(gen);
    w_bf16.resize(s.rows * s.k);
    for (uint16_t& v : w_bf16) v = F32ToBf16(dist(gen));
    EXPECT_TRUE(w.Allocate(g.WeightBytes(s.rows, s.k) / 4));
    EXPECT_TRUE(xp.Allocate(g.ActivationBytes(s.n, s.k) / 4));
    // f32 kernels take the same values widened (exact), so one reference serves both; f16
    // panels take them as f16 (rounded where bf16's range is wider: the reference uses those).
    if (g.panel == FloatType::kF16) {
      for (uint16_t v : w_bf16) w_f16.push_back(F32ToF16(Bf16ToF32(v)));
      GemmPackWeights(g, s.rows, s.k, w_f16.data(), FloatType::kF16, 0, g.Panels(s.rows), w.data());
    } else {
      GemmPackWeights(g, s.rows, s.k, w_bf16.data(), FloatType::kBF16, 0, g.Panels(s.rows),
                      w.data());
    }
    GemmPackActivations(g, s.n, s.k, x.data(), s.k, 0, g.Tiles(s.n), xp.data());
  }

  // y [n, stride] = max(out_min, bias + x·Wᵀ), tiles [t0, t1) × panels [p0, p1).
  void Run(const float* b, float out_min, size_t t0, size_t t1, size_t p0, size_t p1, float* y,
           size_t stride) const {
    GemmBlock(*kernel, s.n, s.k, s.rows, xp.data(), w.data(), b, out_min, t0, t1, p0, p1, y,
              stride);
  }

  // The exact product in double, with x as the kernel sees it (rounded to bf16 for bf16
  // kernels), and Σ|terms| for the tolerance.
  void Reference(size_t t, size_t o, bool with_bias, double* value, double* magnitude) const {
    double sum = with_bias ? bias[o] : 0.0, mag = with_bias ? std::fabs(bias[o]) : 0.0;
    for (size_t j = 0; j < s.k; ++j) {
      float xv = x[t * s.k + j];
      if (kernel->dtype == FloatType::kBF16) xv = Bf16ToF32(F32ToBf16(xv));
      const size_t i = o * s.k + j;
      const float wv = w_f16.empty() ? Bf16ToF32(w_bf16[i]) : F16ToF32(w_f16[i]);
      const double term = static_cast<double>(wv) * xv;
      sum += term;
      mag += std::fabs(term);
    }
    *value = sum;
    *magnitude = mag;
  }
};

// The 16-bit-panel twins of the f32 kernels this CPU runs (the scalar twin's everywhere).
std::vector<const GemmKernel*> HalfPanelKernels() {
  std::vector<const GemmKernel*> kernels;
  for (const GemmKernel* g : AvailableGemmKernels(FloatType::kF32)) {
    for (FloatType half : {FloatType::kF16, FloatType::kBF16}) {
      if (const GemmKernel* h = HalfPanelKernel(*g, half)) kernels.push_back(h);
    }
  }
  return kernels;
}

// The kernels this CPU runs, for f32 their 16-bit-panel twins too, and for bf16 the AMX kernel's
// software model too (its layout, tile source and driver, checked here where the CPU has no
// AMX), with its AVX-512 packing where the CPU has that.
std::vector<GemmKernel> KernelsUnderTest(FloatType dtype) {
  std::vector<GemmKernel> kernels;
  for (const GemmKernel* g : AvailableGemmKernels(dtype)) kernels.push_back(*g);
  if (dtype == FloatType::kF32) {
    for (const GemmKernel* h : HalfPanelKernels()) kernels.push_back(*h);
  }
  if (dtype == FloatType::kBF16) {
    kernels.push_back(GemmAmxModelKernel());
#if defined(FFLITE_GEMM_X86)
    for (const GemmKernel* g : AvailableGemmKernels(FloatType::kF32)) {
      if (std::string(g->isa) != "avx512") continue;
      GemmKernel packed = GemmAmxModelKernel();
      packed.pack_tile = GemmPackTileAmxBf16;
      packed.pack_panels = GemmPackPanelsAmxBf16;
      kernels.push_back(packed);
    }
#endif
  }
  return kernels;
}

// bf16 arithmetic is chosen only with a kernel faster than f32 arithmetic: never the scalar twin,
// and vdpbf16ps ("avx512bf16") on AMD CPUs but not on Intel ones, where it runs at half the FMA
// rate (checked where the OS names the CPU's maker).
TEST(GemmTest, Bf16ArithmeticOnlyWhereFasterThanF32) {
  const std::string cpu = GetPlatformInfo().cpu_name;
  for (const GemmKernel* g : AvailableGemmKernels(FloatType::kBF16)) {
    const std::string isa = g->isa;
    if (isa == "scalar-bf16") {
      EXPECT_FALSE(GemmBf16ArithmeticFaster(*g));
    } else if (isa == "avx512bf16") {
      if (cpu.find("Intel") != std::string::npos) {
        EXPECT_FALSE(GemmBf16ArithmeticFaster(*g));
      }
      if (cpu.find("AMD") != std::string::npos) {
        EXPECT_TRUE(GemmBf16ArithmeticFaster(*g));
      }
    } else {
      EXPECT_TRUE(GemmBf16ArithmeticFaster(*g)) << isa;
    }
  }
}

// A call's tokens fill its tiles in order, none empty or over mr: evenly (sizes differ by at most
// one) for the FMA kernels, whose short tiles leave the FMA units idle, and full tiles first for
// AMX, whose tiles take 16 tokens. Where each token lands is checked by the products below.
TEST(GemmTest, TilesSplitTheTokens) {
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel& g : KernelsUnderTest(dtype)) {
      EXPECT_EQ(g.even_tiles, !g.x_rows) << g.isa;  // every kernel but AMX's
      for (size_t n = 0; n <= 200; ++n) {
        const size_t tiles = g.Tiles(n);
        ASSERT_EQ(g.TileStart(n, 0), 0u) << g.isa << " n " << n;
        ASSERT_EQ(g.TileStart(n, tiles), n) << g.isa << " n " << n;
        size_t smallest = g.mr, largest = 0;
        for (size_t t = 0; t < tiles; ++t) {
          const size_t m = g.TileStart(n, t + 1) - g.TileStart(n, t);
          ASSERT_GE(m, 1u) << g.isa << " n " << n << " tile " << t;
          ASSERT_LE(m, g.mr) << g.isa << " n " << n << " tile " << t;
          if (!g.even_tiles && t + 1 < tiles) {
            ASSERT_EQ(m, g.mr) << g.isa << " n " << n;
          }
          smallest = std::min(smallest, m);
          largest = std::max(largest, m);
        }
        if (g.even_tiles && tiles > 0) {
          ASSERT_LE(largest - smallest, 1u) << g.isa << " n " << n;
        }
      }
    }
  }
}

// Each output against the double product. The kernels sum in f32 (FMA or not) in blocks: the
// error is at most about k·eps·Σ|terms| (eps = 2^-24), and in practice sqrt(k)·eps·Σ|terms|;
// 4·sqrt(k+1)·eps·Σ|terms| + 1e-30 leaves room for that and nothing else (a wrong index, bias,
// tile or panel moves an output by O(Σ|terms|/sqrt(k))). The bf16 kernels' x is rounded to bf16
// in the reference too, so the same bound holds for them. The 16-bit-panel twins are checked
// here too on CPUs with a vector twin; the scalar twins' bits are those of the scalar f32 kernel
// (HalfPanelsGiveTheBitsOfF32Panels), which saves seconds under emulation.
TEST(GemmTest, EveryKernelMatchesTheDoubleProduct) {
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel& kernel : KernelsUnderTest(dtype)) {
      if (kernel.microkernel == &GemmMicrokernelScalarF16w ||
          kernel.microkernel == &GemmMicrokernelScalarBf16w) {
        continue;
      }
      const GemmKernel* g = &kernel;
      std::mt19937 gen(7);
      for (const Shape& s : kShapes) {
        for (int variant = 0; variant < 2; ++variant) {
          const bool with_bias = variant == 0;
          const float out_min = variant == 1 ? 0.0f : -std::numeric_limits<float>::infinity();
          Product p(*g, s, gen);
          // y with 3 columns of slack per row past `rows`, which must stay untouched.
          const size_t stride = s.rows + 3;
          GuardedBuffer buffer(s.n * stride * sizeof(float));
          float* y = buffer.As<float>();
          std::fill(y, y + s.n * stride, 12345.0f);
          p.Run(with_bias ? p.bias.data() : nullptr, out_min, 0, g->Tiles(s.n), 0,
                g->Panels(s.rows), y, stride);
          const double eps = std::ldexp(1.0, -24);
          for (size_t t = 0; t < s.n; ++t) {
            for (size_t o = 0; o < stride; ++o) {
              const float got = y[t * stride + o];
              if (o >= s.rows) {
                ASSERT_EQ(got, 12345.0f) << g->isa << ": wrote past rows at " << t << ", " << o;
                continue;
              }
              double want, mag;
              p.Reference(t, o, with_bias, &want, &mag);
              if (variant == 1) want = std::max(want, 0.0);
              const double tol = 4.0 * std::sqrt(static_cast<double>(s.k + 1)) * eps * mag + 1e-30;
              ASSERT_NEAR(got, want, tol) << g->isa << " n " << s.n << " k " << s.k << " rows "
                                          << s.rows << " token " << t << " output " << o;
            }
          }
        }
      }
    }
  }
}

// The driver's pieces (any tiles × panels split, as the engine's threads take them) give the
// bits of one call: each output's order of summation depends only on k.
TEST(GemmTest, SplitsGiveTheSameBits) {
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel& kernel : KernelsUnderTest(dtype)) {
      const GemmKernel* g = &kernel;
      std::mt19937 gen(11);
      const Shape s{37, 700, 150};
      Product p(*g, s, gen);
      const size_t tiles = g->Tiles(s.n), panels = g->Panels(s.rows);
      std::vector<float> whole(s.n * s.rows), pieces(s.n * s.rows, -1.0f);
      p.Run(p.bias.data(), -std::numeric_limits<float>::infinity(), 0, tiles, 0, panels,
            whole.data(), s.rows);
      for (size_t t = 0; t < tiles; t += 2) {
        for (size_t q = 0; q < panels; q += 3) {
          p.Run(p.bias.data(), -std::numeric_limits<float>::infinity(), t,
                std::min(tiles, t + 2), q, std::min(panels, q + 3), pieces.data(), s.rows);
        }
      }
      EXPECT_EQ(whole, pieces) << g->isa;
    }
  }
}

// A kernel of 16-bit panels gives the bits of its f32 kernel over f32 panels of the same f16 or
// bf16 weights (the widening is exact and the order of the sums is the f32 kernel's), with bias
// and clamp or without, over every shape: values of the whole range, subnormals and signed zeros
// included (no NaN: vcvtph2ps and the portable widening may quiet a NaN's payload differently).
// Padding channels of the 16-bit panels are zero: the packed buffer starts as 0xff bytes, and
// holds exactly as many nonzero slots as the weights have nonzero values.
TEST(GemmTest, HalfPanelsGiveTheBitsOfF32Panels) {
  size_t checked = 0;
  for (const GemmKernel* f32 : AvailableGemmKernels(FloatType::kF32)) {
    for (FloatType half : {FloatType::kF16, FloatType::kBF16}) {
      const GemmKernel* h = HalfPanelKernel(*f32, half);
      if (h == nullptr) continue;
      ++checked;
      ASSERT_EQ(h->dtype, FloatType::kF32) << h->isa;
      ASSERT_EQ(h->panel, half) << h->isa;
      ASSERT_EQ(h->mr, f32->mr) << h->isa;
      ASSERT_EQ(h->nr, f32->nr) << h->isa;
      EXPECT_EQ(2 * h->WeightBytes(33, 7), f32->WeightBytes(33, 7)) << h->isa;
      std::mt19937 gen(5);
      std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      auto value = [&](float f) { return half == FloatType::kF16 ? F32ToF16(f) : F32ToBf16(f); };
      auto widen = [&](uint16_t v) { return half == FloatType::kF16 ? F16ToF32(v) : Bf16ToF32(v); };
      for (const Shape& s : kShapes) {
        // One value in 8 any finite bit pattern (subnormals, -0, the largest), the others in
        // [-1, 1] (sums whose order shows in the last bits).
        std::vector<uint16_t> w(s.rows * s.k);
        size_t nonzero = 0;
        for (uint16_t& v : w) {
          v = value(dist(gen));
          if (bits(gen) % 8 == 0) {
            do {
              v = static_cast<uint16_t>(bits(gen));
            } while (!std::isfinite(widen(v)));
          }
          nonzero += (v & 0x7fff) != 0;
        }
        std::vector<float> x(s.n * s.k), bias(s.rows);
        for (float& v : x) v = dist(gen);
        for (float& v : bias) v = dist(gen);
        AlignedBuffer<uint32_t> wf, wh, xf, xh;
        ASSERT_TRUE(wf.Allocate(f32->WeightBytes(s.rows, s.k) / 4) &&
                    wh.Allocate(h->WeightBytes(s.rows, s.k) / 4) &&
                    xf.Allocate(f32->ActivationBytes(s.n, s.k) / 4) &&
                    xh.Allocate(h->ActivationBytes(s.n, s.k) / 4));
        std::memset(wh.data(), 0xff, h->WeightBytes(s.rows, s.k));
        GemmPackWeights(*f32, s.rows, s.k, w.data(), half, 0, f32->Panels(s.rows), wf.data());
        GemmPackWeights(*h, s.rows, s.k, w.data(), half, 0, h->Panels(s.rows), wh.data());
        const uint16_t* slots = reinterpret_cast<const uint16_t*>(wh.data());
        const size_t nonzero_slots = static_cast<size_t>(std::count_if(
            slots, slots + h->WeightBytes(s.rows, s.k) / 2,
            [](uint16_t v) { return (v & 0x7fff) != 0; }));
        EXPECT_EQ(nonzero_slots, nonzero) << h->isa << " rows " << s.rows << " k " << s.k;
        GemmPackActivations(*f32, s.n, s.k, x.data(), s.k, 0, f32->Tiles(s.n), xf.data());
        GemmPackActivations(*h, s.n, s.k, x.data(), s.k, 0, h->Tiles(s.n), xh.data());
        for (bool with_bias : {true, false}) {
          const float out_min = with_bias ? -std::numeric_limits<float>::infinity() : 0.0f;
          std::vector<float> want(s.n * s.rows), got(s.n * s.rows);
          GemmBlock(*f32, s.n, s.k, s.rows, xf.data(), wf.data(),
                    with_bias ? bias.data() : nullptr, out_min, 0, f32->Tiles(s.n), 0,
                    f32->Panels(s.rows), want.data(), s.rows);
          GemmBlock(*h, s.n, s.k, s.rows, xh.data(), wh.data(), with_bias ? bias.data() : nullptr,
                    out_min, 0, h->Tiles(s.n), 0, h->Panels(s.rows), got.data(), s.rows);
          ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
              << h->isa << " n " << s.n << " k " << s.k << " rows " << s.rows << " bias "
              << with_bias;
        }
      }
    }
  }
  EXPECT_GE(checked, 2u);  // the scalar twin's, everywhere
}

// A kernel's streaming form (GemmKernel::stream: the panel prefetched ahead, run by GemmBlock for
// its first tile) gives the bits of its microkernel, over every shape and every tile of it.
TEST(GemmTest, StreamingFormsGiveTheBitsOfTheMicrokernel) {
  size_t checked = 0;
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel& kernel : KernelsUnderTest(dtype)) {
      if (kernel.stream == nullptr) continue;
      ++checked;
      GemmKernel plain = kernel, streaming = kernel;
      plain.stream = nullptr;
      streaming.microkernel = kernel.stream;
      std::mt19937 gen(13);
      for (const Shape& s : kShapes) {
        Product p(kernel, s, gen);
        std::vector<float> want(s.n * s.rows), got(s.n * s.rows);
        GemmBlock(plain, s.n, s.k, s.rows, p.xp.data(), p.w.data(), p.bias.data(), 0.0f, 0,
                  kernel.Tiles(s.n), 0, kernel.Panels(s.rows), want.data(), s.rows);
        GemmBlock(streaming, s.n, s.k, s.rows, p.xp.data(), p.w.data(), p.bias.data(), 0.0f, 0,
                  kernel.Tiles(s.n), 0, kernel.Panels(s.rows), got.data(), s.rows);
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << kernel.isa << " n " << s.n << " k " << s.k << " rows " << s.rows;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no kernel with a streaming form on this CPU";
}

// A product of 5 tiles (the last one token short) over 3 blocks of k (the last partial, k odd)
// and `rows` rows: blocked in k on every kernel (more tiles than run k whole).
Shape FiveTilesThreeBlocks(const GemmKernel& kernel, size_t rows) {
  return {5 * kernel.mr - 1, (2 * kernel.BlockUnits() + 4) * kernel.kr() + 1, rows};
}

// GemmBlock's two orders of a blocked product (groups of panels or blocks of k outermost) give
// the same bits, over a shape of 5 tiles (blocked: more than run k unblocked, also from the
// second tile on), 3 blocks of k (the last partial, k odd) and 3 groups of panels (the last
// partial, its last panel too), with bias and clamp, whole and from the second tile and panel
// on. Every kernel under test but the AMX software model, whose speed would make this shape
// slow; the loops are the driver's, the same for every kernel.
TEST(GemmTest, BothOrdersGiveTheSameBits) {
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel& kernel : KernelsUnderTest(dtype)) {
      if (std::string(kernel.isa) == "amx-bf16-model") continue;
      const size_t block = kernel.BlockUnits();
      const size_t group = GemmGroupPanels(kernel, block);
      const Shape s = FiveTilesThreeBlocks(kernel, (2 * group + 1) * kernel.nr - 3);
      ASSERT_EQ(kernel.Tiles(s.n), 5u) << kernel.isa;
      // 2 whole blocks and a partial one (AMX packs units in 16s: 2 blocks + 16 there).
      ASSERT_EQ(kernel.ValueUnits(s.k), 2 * block + 5) << kernel.isa;
      ASSERT_LT(kernel.Units(s.k), 3 * block) << kernel.isa;
      std::mt19937 gen(17);
      Product p(kernel, s, gen);
      const size_t tiles = kernel.Tiles(s.n), panels = kernel.Panels(s.rows);
      for (size_t first : {0, 1}) {
        std::vector<float> groups(s.n * s.rows, -7.0f), blocks(s.n * s.rows, -7.0f);
        GemmBlock(kernel, s.n, s.k, s.rows, p.xp.data(), p.w.data(), p.bias.data(), 0.0f, first,
                  tiles, first, panels, groups.data(), s.rows, GemmOrder::kGroupsOuter);
        GemmBlock(kernel, s.n, s.k, s.rows, p.xp.data(), p.w.data(), p.bias.data(), 0.0f, first,
                  tiles, first, panels, blocks.data(), s.rows, GemmOrder::kBlocksOuter);
        ASSERT_EQ(std::memcmp(groups.data(), blocks.data(), groups.size() * sizeof(float)), 0)
            << kernel.isa << " n " << s.n << " k " << s.k << " rows " << s.rows << " from "
            << first;
      }
    }
  }
}

// A kernel's ahead form (GemmKernel::ahead: a range of the next pass's panels prefetched, run by
// GemmBlock for the tiles of every pass with 2 tiles or more) leaves the bits of its
// microkernel, over every shape, both orders, whole and from the second tile and panel on. The AMX
// software model (slow, and run on every CPU, under emulation too) over one shape only: 4 tiles
// over 2 groups of panels, so that the first pass prefetches the second's.
TEST(GemmTest, AheadFormsGiveTheBitsOfTheMicrokernel) {
  size_t checked = 0;
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel& kernel : KernelsUnderTest(dtype)) {
      if (kernel.ahead == nullptr) continue;
      ++checked;
      GemmKernel plain = kernel;
      plain.stream = nullptr;
      plain.ahead = nullptr;
      std::mt19937 gen(19);
      std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
      // 5 tiles, 3 blocks of k and 3 groups of panels, as in BothOrdersGiveTheSameBits.
      const size_t group = GemmGroupPanels(kernel, kernel.BlockUnits());
      shapes.push_back(FiveTilesThreeBlocks(kernel, (2 * group + 1) * kernel.nr - 3));
      if (std::string(kernel.isa) == "amx-bf16-model") {
        shapes = {{4 * kernel.mr, 96, (group + 1) * kernel.nr + 2}};
      }
      for (const Shape& s : shapes) {
        Product p(kernel, s, gen);
        const size_t tiles = kernel.Tiles(s.n), panels = kernel.Panels(s.rows);
        for (GemmOrder order : {GemmOrder::kGroupsOuter, GemmOrder::kBlocksOuter}) {
          for (size_t first : {0, 1}) {
            if (first >= tiles || first >= panels) continue;
            std::vector<float> want(s.n * s.rows, -7.0f), got(s.n * s.rows, -7.0f);
            GemmBlock(plain, s.n, s.k, s.rows, p.xp.data(), p.w.data(), p.bias.data(), 0.0f,
                      first, tiles, first, panels, want.data(), s.rows, order);
            GemmBlock(kernel, s.n, s.k, s.rows, p.xp.data(), p.w.data(), p.bias.data(), 0.0f,
                      first, tiles, first, panels, got.data(), s.rows, order);
            ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
                << kernel.isa << " n " << s.n << " k " << s.k << " rows " << s.rows
                << " from " << first << " blocks outer " << (order == GemmOrder::kBlocksOuter);
          }
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no kernel with an ahead form on this CPU";
}

// GemmKernelWithoutAhead: every kernel this CPU runs (the 16-bit-panel twins too) without an
// ahead form, and otherwise the same kernel (name, shape, microkernel, streaming form).
TEST(GemmTest, WithoutAheadKeepsEverythingButTheAheadForm) {
  EXPECT_EQ(GemmKernelWithoutAhead(nullptr), nullptr);
  std::vector<const GemmKernel*> kernels = HalfPanelKernels();
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel* g : AvailableGemmKernels(dtype)) kernels.push_back(g);
  }
  for (const GemmKernel* g : kernels) {
    const GemmKernel* plain = GemmKernelWithoutAhead(g);
    ASSERT_NE(plain, nullptr) << g->isa;
    EXPECT_EQ(plain->ahead, nullptr) << g->isa;
    if (g->ahead == nullptr) {
      EXPECT_EQ(plain, g) << g->isa;
    }
    EXPECT_EQ(plain->isa, g->isa);
    EXPECT_EQ(plain->dtype, g->dtype) << g->isa;
    EXPECT_EQ(plain->panel, g->panel) << g->isa;
    EXPECT_EQ(plain->paired_halves, g->paired_halves) << g->isa;
    EXPECT_EQ(plain->mr, g->mr) << g->isa;
    EXPECT_EQ(plain->nr, g->nr) << g->isa;
    EXPECT_EQ(plain->microkernel, g->microkernel) << g->isa;
    EXPECT_EQ(plain->stream, g->stream) << g->isa;
    EXPECT_EQ(plain->pack_tile, g->pack_tile) << g->isa;
    EXPECT_EQ(plain->pack_panels, g->pack_panels) << g->isa;
    EXPECT_EQ(plain->unit_align, g->unit_align) << g->isa;
    EXPECT_EQ(plain->x_rows, g->x_rows) << g->isa;
    EXPECT_EQ(plain->even_tiles, g->even_tiles) << g->isa;
    EXPECT_EQ(plain->enter, g->enter) << g->isa;
    EXPECT_EQ(plain->leave, g->leave) << g->isa;
  }
}

// What GemmBlock asks an ahead form to prefetch, recorded by a wrapper around a kernel's
// microkernel (so the driver is checked on every CPU, with the scalar twin too).
struct AheadRange {
  const char* begin;
  size_t bytes;
};
const GemmKernel* g_recorded_kernel = nullptr;
std::vector<AheadRange>* g_ahead_ranges = nullptr;
void RecordingAhead(size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w,
                    const float* bias, bool accumulate, bool clamp, float out_min, float* y,
                    size_t y_stride, const void* ahead, size_t ahead_bytes) {
  g_ahead_ranges->push_back({static_cast<const char*>(ahead), ahead_bytes});
  g_recorded_kernel->microkernel(m, n, units, x, w, bias, accumulate, clamp, out_min, y,
                                 y_stride);
}

// The driver's prefetches: inside the panels the call computes, no byte twice, and, where every
// group of panels is whole, every piece of every pass but the first (which the first tile
// streams): a product of 5 tiles blocked in k (3 blocks, the last partial) and one of 2 tiles
// whose panels are whole in k, in both orders; and none with one tile.
TEST(GemmTest, AheadPrefetchesEveryLaterPieceOnceWithinTheCallsPanels) {
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel& kernel : KernelsUnderTest(dtype)) {
      if (std::string(kernel.isa) == "amx-bf16-model") continue;  // slow; the same driver
      g_recorded_kernel = &kernel;
      GemmKernel recording = kernel;
      recording.ahead = RecordingAhead;
      const size_t slot = kernel.SlotBytes();
      const size_t block = kernel.BlockUnits(), group = GemmGroupPanels(kernel, block);
      // Whole k for 2 tiles: a panel of half a group's bytes (GroupBytes; at most
      // kGemmWholeKBytes), in groups of 2.
      const size_t whole_units = kernel.GroupBytes() / (2 * kernel.nr * slot);
      ASSERT_LE(whole_units * kernel.nr * slot, kGemmWholeKBytes) << kernel.isa;
      struct Case {
        Shape s;
        size_t piece_units, group;
      };
      const Shape blocked = FiveTilesThreeBlocks(kernel, 2 * group * kernel.nr);
      const Case cases[] = {
          {blocked, block, group},
          {{2 * kernel.mr, whole_units * kernel.kr(), 6 * kernel.nr}, whole_units, 2},
          {{kernel.mr, blocked.k, blocked.rows}, 0, 0}};
      std::mt19937 gen(23);
      for (const Case& c : cases) {
        const Shape& s = c.s;
        Product p(kernel, s, gen);
        const size_t tiles = kernel.Tiles(s.n), panels = kernel.Panels(s.rows);
        const size_t units = kernel.Units(s.k);
        for (GemmOrder order : {GemmOrder::kGroupsOuter, GemmOrder::kBlocksOuter}) {
          for (size_t first : {0, 1}) {
            std::vector<AheadRange> ranges;
            g_ahead_ranges = &ranges;
            std::vector<float> y(s.n * s.rows);
            GemmBlock(recording, s.n, s.k, s.rows, p.xp.data(), p.w.data(), p.bias.data(), 0.0f,
                      0, tiles, first, panels, y.data(), s.rows, order);
            g_ahead_ranges = nullptr;
            const std::string what = std::string(kernel.isa) + " n " + std::to_string(s.n) +
                                     " k " + std::to_string(s.k) + " rows " +
                                     std::to_string(s.rows) + " from panel " +
                                     std::to_string(first) + " order " +
                                     std::to_string(static_cast<int>(order));
            if (tiles == 1) {
              EXPECT_TRUE(ranges.empty()) << what;
              continue;
            }
            const char* lo =
                reinterpret_cast<const char*>(kernel.PanelAt(p.w.data(), units, first, 0));
            const char* hi =
                reinterpret_cast<const char*>(kernel.PanelAt(p.w.data(), units, panels, 0));
            std::sort(ranges.begin(), ranges.end(),
                      [](const AheadRange& a, const AheadRange& b) { return a.begin < b.begin; });
            size_t total = 0;
            for (size_t i = 0; i < ranges.size(); ++i) {
              ASSERT_GT(ranges[i].bytes, 0u) << what;
              ASSERT_GE(ranges[i].begin, lo) << what;
              ASSERT_LE(ranges[i].begin + ranges[i].bytes, hi) << what;
              if (i + 1 < ranges.size()) {
                ASSERT_LE(ranges[i].begin + ranges[i].bytes, ranges[i + 1].begin) << what;
              }
              total += ranges[i].bytes;
            }
            if (first == 0) {
              // Whole groups: everything but the first pass's pieces.
              EXPECT_EQ(total, kernel.WeightBytes(s.rows, s.k) -
                                   c.group * c.piece_units * kernel.nr * slot)
                  << what;
            } else {
              EXPECT_GT(total, 0u) << what;
            }
          }
        }
      }
    }
  }
}

// kAuto runs the blocks of k outermost past 2 MiB of packed activations, except where the kernel
// keeps the groups outermost below its outputs and they are larger: a Llama down matrix's 128
// tokens (k = 11008, about 5.6 MB in f32 and 2.8 MB in bf16 pairs, against 2 MiB of outputs)
// with every kernel; its up matrix's (k = 4096, 2.2 MB in f32, against 5.6 MB of outputs) with
// the kernels that do not keep them (AVX2, NEON), nor with a thread's task of 8 panels (few
// outputs); never an expert's 20 tokens (k = 1408, about 0.1 MB); the count does not wrap where
// size_t has 32 bits.
TEST(GemmTest, BlocksGoOutermostPastTwoMebibytesOfActivations) {
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel* kernel : AvailableGemmKernels(dtype)) {
      const std::string isa = kernel->isa;
      EXPECT_TRUE(GemmBlocksOuter(*kernel, kernel->Tiles(128), 11008, 128, 4096)) << isa;
      EXPECT_FALSE(GemmBlocksOuter(*kernel, kernel->Tiles(20), 1408, 20, 2048)) << isa;
      EXPECT_TRUE(GemmBlocksOuter(*kernel, size_t{1} << 12, size_t{1} << 20, size_t{1} << 16,
                                  size_t{1} << 12))
          << isa;
      const bool past = kernel->ActivationBytes(128, 4096) > kGemmBlocksOuterBytes;
      EXPECT_EQ(GemmBlocksOuter(*kernel, kernel->Tiles(128), 4096, 128, 11008),
                past && !kernel->groups_outer_below_outputs)
          << isa;
      EXPECT_EQ(GemmBlocksOuter(*kernel, kernel->Tiles(128), 4096, 128, 8 * kernel->nr), past)
          << isa;
    }
  }
  // The AVX-512 kernels of f32 arithmetic keep them, those of bf16 pairs do not.
  for (const GemmKernel* kernel : AvailableGemmKernels(FloatType::kF32)) {
    const std::string isa = kernel->isa;
    EXPECT_EQ(kernel->groups_outer_below_outputs, isa == "avx512") << isa;
    const GemmKernel* f16w = HalfPanelKernel(*kernel, FloatType::kF16);
    if (f16w != nullptr) {
      EXPECT_EQ(f16w->groups_outer_below_outputs, isa == "avx512") << f16w->isa;
    }
  }
  for (const GemmKernel* kernel : AvailableGemmKernels(FloatType::kBF16)) {
    EXPECT_FALSE(kernel->groups_outer_below_outputs) << kernel->isa;
  }
}

// Weights stored as f32 or f16 pack to the same panels as their values widened from bf16
// (f32 kernels convert while packing), and padding channels and units are zero.
TEST(GemmTest, PackingConvertsAndPads) {
  for (const GemmKernel* g : AvailableGemmKernels(FloatType::kF32)) {
    const size_t rows = 2 * g->nr + 1, k = 5;
    std::vector<float> f32(rows * k);
    std::vector<uint16_t> f16(rows * k), bf16(rows * k);
    for (size_t i = 0; i < rows * k; ++i) {
      f32[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;  // exact in f16 and bf16
      f16[i] = F32ToF16(f32[i]);
      bf16[i] = F32ToBf16(f32[i]);
    }
    AlignedBuffer<uint32_t> a, b, c;
    const size_t units = g->WeightBytes(rows, k) / 4;
    ASSERT_TRUE(a.Allocate(units) && b.Allocate(units) && c.Allocate(units));
    GemmPackWeights(*g, rows, k, f32.data(), FloatType::kF32, 0, g->Panels(rows), a.data());
    GemmPackWeights(*g, rows, k, f16.data(), FloatType::kF16, 0, g->Panels(rows), b.data());
    GemmPackWeights(*g, rows, k, bf16.data(), FloatType::kBF16, 0, g->Panels(rows), c.data());
    for (size_t i = 0; i < units; ++i) {
      ASSERT_EQ(a.data()[i], b.data()[i]) << g->isa << " unit " << i;
      ASSERT_EQ(a.data()[i], c.data()[i]) << g->isa << " unit " << i;
    }
    // Panel 2 holds one row: its other channels are zero.
    const uint32_t* last = a.data() + 2 * k * g->nr;
    for (size_t u = 0; u < k; ++u) {
      EXPECT_EQ(last[u * g->nr], FloatBits(f32[(2 * g->nr) * k + u]));
      for (size_t j = 1; j < g->nr; ++j) EXPECT_EQ(last[u * g->nr + j], 0u);
    }
  }
}

// A kernel's vector packing of activations (pack_tile) writes the bits of the portable loop:
// partial tiles, k not a multiple of 16 units or odd (bf16 pairs), rows with a stride, and
// values whose bf16 rounding is delicate (ties, NaN, infinities, subnormals). The last row ends
// at a guard page: nothing past k is read.
TEST(GemmTest, VectorPackingMatchesThePortableLoop) {
  const uint32_t specials[] = {0x7fc00000u, 0xff800001u, 0x7f800000u, 0xff800000u, 0x00000001u,
                               0x807fffffu, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu,
                               0x00000000u, 0x80000000u, 0x7fffffffu, 0x3f807fffu};
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  size_t vector_kernels = 0;
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel& kernel : KernelsUnderTest(dtype)) {
      const GemmKernel* g = &kernel;
      if (g->pack_tile == nullptr) continue;
      ++vector_kernels;
      GemmKernel portable = *g;
      portable.pack_tile = nullptr;
      for (size_t n : {1, 5, 12, 13, 25}) {
        for (size_t k : {1, 2, 15, 16, 17, 31, 32, 33, 63, 100}) {
          const size_t stride = k + 3;
          GuardedBuffer xb(((n - 1) * stride + k) * sizeof(float));
          float* x = xb.As<float>();
          for (size_t i = 0; i < (n - 1) * stride + k; ++i) {
            x[i] = i % 5 == 0 ? BitsToFloat(specials[(i / 5) % std::size(specials)]) : dist(gen);
          }
          const size_t units = g->ActivationBytes(n, k) / 4;
          std::vector<uint32_t> want(units, 0xdeadbeefu), got(units, 0x12345678u);
          GemmPackActivations(portable, n, k, x, stride, 0, g->Tiles(n), want.data());
          // Tile by tile from the last: a write past a tile's end would land on a tile already
          // packed (threads pack neighbouring tiles at once).
          for (size_t t = g->Tiles(n); t-- > 0;) {
            GemmPackActivations(*g, n, k, x, stride, t, t + 1, got.data());
          }
          for (size_t i = 0; i < units; ++i) {
            ASSERT_EQ(got[i], want[i]) << g->isa << " n " << n << " k " << k << " unit " << i;
          }
        }
      }
    }
  }
  if (vector_kernels == 0) GTEST_SKIP() << "no vector packing on this CPU";
}

// A kernel's vector packing of weights (pack_panels) writes the bits of the portable loop: rows
// not a multiple of the panel and k not a multiple of the vector chunk (the loop writes the rest)
// or odd (bf16 pairs), any bit patterns, f32 panels from f16 and bf16 weights too (the loop
// alone), each panel packed on its own from the last (as threads pack their shares), into
// aligned and unaligned buffers. The matrix ends at a guard page: nothing past it is read.
TEST(GemmTest, VectorWeightPackingMatchesThePortableLoop) {
  std::mt19937 gen(12);
  size_t vector_kernels = 0;
  for (FloatType dtype : {FloatType::kF32, FloatType::kBF16}) {
    for (const GemmKernel& kernel : KernelsUnderTest(dtype)) {
      const GemmKernel* g = &kernel;
      if (g->pack_panels == nullptr) continue;
      ++vector_kernels;
      GemmKernel portable = *g;
      portable.pack_panels = nullptr;
      std::vector<FloatType> w_dtypes = {g->dtype == FloatType::kBF16 ? FloatType::kBF16
                                                                      : g->panel};
      if (g->dtype == FloatType::kF32 && g->panel == FloatType::kF32) {
        w_dtypes.push_back(FloatType::kF16);
        w_dtypes.push_back(FloatType::kBF16);
      }
      for (FloatType w_dtype : w_dtypes) {
        const size_t bytes = w_dtype == FloatType::kF32 ? 4 : 2;
        for (size_t rows : {1, 15, 16, 17, 32, 33, 70}) {
          for (size_t k : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 100}) {
            GuardedBuffer wb(rows * k * bytes);
            uint8_t* w = wb.As<uint8_t>();
            for (size_t i = 0; i < rows * k * bytes; ++i) w[i] = static_cast<uint8_t>(gen());
            if (w_dtype != FloatType::kF32) {
              // Finite halves, so that widening is exact and the bits compare.
              uint16_t* h = wb.As<uint16_t>();
              for (size_t i = 0; i < rows * k; ++i) h[i] &= 0xbfff;
            }
            const size_t units = g->WeightBytes(rows, k) / 4;
            std::vector<uint32_t> want(units, 0xdeadbeefu);
            GemmPackWeights(portable, rows, k, w, w_dtype, 0, g->Panels(rows), want.data());
            // Into a 64-byte aligned buffer (non-temporal stores) and one 4 bytes past that.
            AlignedBuffer<uint32_t> buffer;
            ASSERT_TRUE(buffer.Allocate(units + 1, 0, /*zero=*/false));
            for (size_t offset : {0, 1}) {
              uint32_t* got = buffer.data() + offset;
              std::fill(got, got + units, 0x12345678u);
              for (size_t p = g->Panels(rows); p-- > 0;) {
                GemmPackWeights(*g, rows, k, w, w_dtype, p, p + 1, got);
              }
              for (size_t i = 0; i < units; ++i) {
                ASSERT_EQ(got[i], want[i])
                    << g->isa << " w " << static_cast<int>(w_dtype) << " rows " << rows << " k "
                    << k << " offset " << offset << " unit " << i;
              }
            }
          }
        }
      }
    }
  }
  if (vector_kernels == 0) GTEST_SKIP() << "no vector packing of weights on this CPU";
}

// Units past k (unit_align) are zero in both packings, and a product whose k is not a multiple of
// the kernel's 16-unit steps reads none of the panel's or tile's neighbours: checked through
// kShapes above; here the packed sizes follow the alignment.
TEST(GemmTest, AlignedUnitsPadTheLayout) {
  const GemmKernel& g = GemmAmxModelKernel();
  EXPECT_EQ(g.Units(1), 16u);
  EXPECT_EQ(g.Units(32), 16u);
  EXPECT_EQ(g.Units(33), 32u);
  EXPECT_EQ(g.ValueUnits(33), 17u);
  EXPECT_EQ(g.WeightBytes(33, 33), 2 * 32 * 32 * 4u);
  EXPECT_EQ(g.ActivationBytes(33, 33), 2 * 32 * 32 * 4u);
  std::vector<float> x(3 * 33, 1.0f);
  std::vector<uint32_t> packed(g.ActivationBytes(3, 33) / 4, 0xdeadbeefu);
  GemmPackActivations(g, 3, 33, x.data(), 33, 0, 1, packed.data());
  const uint32_t one = F32ToBf16(1.0f);
  for (size_t u = 0; u < 32; ++u) {
    for (size_t i = 0; i < 32; ++i) {
      // Token i's unit u at chunk u / 16, row i (x_rows).
      const uint32_t got = packed[(u / 16) * 16 * 32 + i * 16 + u % 16];
      const uint32_t want = i >= 3 || u > 16 ? 0u : u < 16 ? one | one << 16 : one;
      ASSERT_EQ(got, want) << "unit " << u << " token " << i;
    }
  }
}

// Where the CPU has AMX-BF16 and the OS grants the tiles, the real kernel passed its check against
// the double product and is the best bf16 kernel; a failed check is a failure here, not a silent
// fallback.
TEST(GemmTest, AmxIsListedWhereTheCpuRunsIt) {
  const std::string status = GemmAmxStatus();
  EXPECT_EQ(status.rfind("self-check failed", 0), std::string::npos) << status;
  if (status != "listed") GTEST_SKIP() << "amx-bf16: " << status;
  EXPECT_EQ(std::string(BestGemmKernel(FloatType::kBF16).isa), "amx-bf16");
}

}  // namespace
}  // namespace fflite
