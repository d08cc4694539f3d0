// fflite's own matrix product for many tokens over float weights (the "gemm" engine):
//   y[t·y_stride + o] = max(out_min, (bias ? bias[o] : 0) + Σ_{j<k} W[o, j] · x[t·x_stride + j])
// with W packed once into panels and x packed per call, computed by a register-blocked
// microkernel per instruction set (AVX-512, AVX-512 BF16, AMX-BF16, AVX2, NEON, NEON BF16) with a
// portable scalar twin.
//
// Layout. Everything is counted in 32-bit units along k: a unit is one f32 value (f32 kernels) or
// a pair of bf16 values k = 2u, 2u + 1 (bf16 kernels: vdpbf16ps multiplies pairs). units(k) =
// ceil(k / kr), kr = 1 or 2, rounded up to a multiple of the kernel's unit_align (16 for AMX).
//  - packed weights: panels of `nr` output channels, panel p at p · units(k) · nr units, within it
//    unit u of channel j at u · nr + j. Channels past `rows` are zero. (16 units of a 16-channel
//    half panel are an AMX tile in its pairs layout, rows nr · 4 bytes apart.)
//  - 16-bit panels (an f32 kernel with `panel` F16 or BF16): the same with 2-byte slots, each
//    holding the file's f16 or bf16 value as it is; the microkernel widens it to f32 as it loads
//    it, which is exact, so the products and sums are those of the f32 panels of the same
//    weights, bit for bit, from half the bytes. With `paired_halves` the nr slots of a unit hold
//    channel pairs: 32-bit word j < nr/2 is channel j in its low half and j + nr/2 in its high
//    half (one shift and one mask widen them on AVX2; see gemm_avx2.cc).
//  - packed activations: tiles of up to `mr` tokens (GemmKernel::TileStart), tile t at
//    t · units(k) · mr units, within it unit u of its token i at u · mr + i (or by rows of 16
//    units, GemmKernel::x_rows). Rows past the tile's tokens and k values past k are zero.
// The microkernel multiplies one tile by one panel over a block of units, keeping mr × nr sums in
// registers; the driver (GemmBlock) walks the blocks so that a block of panels stays in L2 while
// every tile passes over it, and a tile's units stay in L1 while it passes over the panels; with
// an ahead form (AVX-512, AMX), the tiles' passes over one block of panels prefetch the next.
//
// Sums: each output is summed in an order that depends only on k and the kernel (units in order,
// the running sum stored to y and reloaded exactly between blocks), not on the token count, the
// blocking or how the work is split among threads: results are bit-identical however a call is
// split.
// The bf16 kernels round x to bf16 (nearest even) when they pack it; the products and sums are
// f32 (vdpbf16ps treats bf16 subnormals as zero; Arm's bfdot rounds a pair's sum its own way
// before FEAT_EBF16). The tests bound every kernel against a double product.
#ifndef FFLITE_RUNTIME_SRC_KERNELS_GEMM_H_
#define FFLITE_RUNTIME_SRC_KERNELS_GEMM_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/types.h"

namespace fflite {

// One microkernel call: y[i·y_stride + j] for i < m (1..mr), j < n (1..nr) over `units` units of
// the tile x (stride mr units) and the panel w (stride nr units). The sums start from y itself
// when `accumulate`, else from bias[j] (bias may be nullptr: zero). With `clamp` the result is
// max(out_min, sum). Writes exactly the m × n outputs named.
using GemmMicrokernelFn = void (*)(size_t m, size_t n, size_t units, const uint32_t* x,
                                   const uint32_t* w, const float* bias, bool accumulate,
                                   bool clamp, float out_min, float* y, size_t y_stride);

// A microkernel call as above that also prefetches `ahead_bytes` from `ahead` into L2, spread
// over its units (GemmKernel::ahead). Prefetches never fault; the sums are the microkernel's.
using GemmAheadMicrokernelFn = void (*)(size_t m, size_t n, size_t units, const uint32_t* x,
                                        const uint32_t* w, const float* bias, bool accumulate,
                                        bool clamp, float out_min, float* y, size_t y_stride,
                                        const void* ahead, size_t ahead_bytes);

// Packs one tile of activations: m tokens (1..mr) at x, x + x_stride, ... (k values each) into
// tile (units(k) · mr units), as GemmPackActivations does.
using GemmPackTileFn = void (*)(size_t m, size_t k, const float* x, size_t x_stride,
                                uint32_t* tile);

// Packs panels [first, last) of W as GemmPackWeights does, from weights in the packed slots' own
// type (f32 for f32 panels, bf16 for a BF16 kernel's pairs, the `panel` dtype for 16-bit slots),
// each panel's units from 0 in whole chunks (16 units, 8 on AVX2) while the chunk's values all
// exist; returns that count of units, the same for every panel. GemmPackWeights's portable loop
// writes the units past it; the bits are the portable loop's.
using GemmPackPanelsFn = size_t (*)(size_t rows, size_t k, const void* w, size_t first,
                                    size_t last, uint32_t* packed);

// Panels of weights in L2 while every tile of a call passes over them (per block of units; a
// group of panels in GemmBlock): 128 KiB, an eighth of Zen 5's L2 (1 MiB), the rest for the next
// group (which the ahead form prefetches), the call's activations and outputs. Measured on a Zen
// 5 VM against 256 KiB (see GemmBlock): the same at 64-128 tokens, 11-26% faster at 13-36.
constexpr size_t kGemmGroupBytes = size_t{128} << 10;

struct GemmKernel {
  // "scalar", "avx2", "avx512", "neon"; "scalar-bf16", "avx512bf16", "amx-bf16", "neon-bf16"
  // "avx2-f16w", "avx2-bf16w", "avx512-f16w", "avx512-bf16w", "scalar-f16w", "scalar-bf16w"
  // (16-bit panels)
  const char* isa;
  FloatType dtype;      // the packed element type: F32 (kr 1) or BF16 (kr 2)
  size_t mr, nr;    // tokens per tile, output channels per panel
  GemmMicrokernelFn microkernel;
  // A vector packing of the activations for this kernel's mr and dtype, or nullptr: the portable
  // loop. Both write the same bits.
  GemmPackTileFn pack_tile = nullptr;
  // Units of k are counted in multiples of this (zero past k, in weights and activations alike):
  // 16 for AMX, whose tiles take 16 units of k per row.
  size_t unit_align = 1;
  // The layout of a tile of activations: false, unit u of token i at u · mr + i (a unit of every
  // token, broadcast one by one); true (AMX), in chunks of 16 units, chunk c at c · 16 · mr, within
  // it token i's 16 units at i · 16 (the rows of a tile of tokens). Both put unit u0 of the tile at
  // u0 · mr for u0 a multiple of 16, where the driver's blocks start.
  bool x_rows = false;
  // Run by GemmBlock on its thread before its first microkernel call and after its last, or
  // nullptr: AMX loads its tile configuration and releases the tiles.
  void (*enter)() = nullptr;
  void (*leave)() = nullptr;
  // The weights' slots (an F32 kernel only): F32, or F16 / BF16 as in the file, 2 bytes each.
  FloatType panel = FloatType::kF32;
  bool paired_halves = false;  // 16-bit slots in channel pairs (see the layout above)
  // How a call's n tokens fill its Tiles(n) tiles. true: as evenly as possible (sizes differ by
  // at most one), so that 8 tokens on a 6-token kernel run as two tiles of 4, not 6 and 2: a tile
  // of m tokens keeps 2m (AVX2) or 4m (NEON) independent sums, and fewer than the FMA latency
  // times the FMA ports (8 on current cores) leave the FMA units idle. The tiles and the sums are
  // the same either way. false (AMX, whose tiles take 16 tokens): full tiles, the last partial.
  bool even_tiles = true;
  // The same sums as `microkernel`, prefetching the panel ahead of its loads, or nullptr (none;
  // the avx2 and avx512 kernels have one): GemmBlock runs it for its first tile over each group of
  // panels that no earlier pass prefetched (with `ahead`, the first pass only; an expert's few
  // tokens in one tile read every panel once). The later tiles find the panels in L2, where the
  // prefetches would only take load slots.
  GemmMicrokernelFn stream = nullptr;
  // The same sums as `microkernel`, prefetching a given range into L2 as it goes, or nullptr
  // (the AVX-512 and AMX kernels have one). With it, GemmBlock has every tile of a pass over a
  // group of panels (2 tiles or more) prefetch its share of the next pass's panels, so that the
  // next pass finds them in L2 instead of its first tile waiting on memory (see GemmBlock).
  GemmAheadMicrokernelFn ahead = nullptr;
  // A vector packing of the weights in the slots' own type (GemmPackPanelsFn), or nullptr: the
  // portable loop. The AVX2, AVX-512 and NEON kernels have one, and the AMX kernel where the CPU
  // has AVX-512 F: a transpose of 4, 8 or 16 units at a time (written with non-temporal stores on
  // x86), instead of one store per value.
  GemmPackPanelsFn pack_panels = nullptr;
  // Where a product's packed activations outgrow kGemmBlocksOuterBytes but not its outputs, keep
  // the groups of panels outermost (GemmBlocksOuter): the AVX-512 kernels of f32 arithmetic (and
  // their 16-bit panels), measured faster so on a Zen 5 VM (see GemmBlock). Elsewhere the blocks
  // go outermost past that size whatever the outputs: AVX2 (measured on a Zen 4 VM) and AVX-512
  // BF16 (on Zen 5, Llama at 512 tokens: 0.4-8% slower with the groups outermost in 5 rounds).
  bool groups_outer_below_outputs = false;
  // Units per block of k and bytes per group of panels in GemmBlock where nonzero, in place of
  // the defaults from mr (BlockUnits) and kGemmGroupBytes: the AMX kernel's, whose calls load
  // and store four tiles of sums around their tile products and so want more units per call
  // (measured in gemm_amx.cc).
  size_t block_units = 0;
  size_t group_bytes = 0;

  size_t kr() const { return dtype == FloatType::kBF16 ? 2 : 1; }
  // Units holding k's values, and units as packed (rounded up to unit_align).
  size_t ValueUnits(size_t k) const { return (k + kr() - 1) / kr(); }
  size_t Units(size_t k) const {
    return (ValueUnits(k) + unit_align - 1) / unit_align * unit_align;
  }
  // Units per block of k in GemmBlock: a tile's block of activations (mr · units · 4 bytes) is
  // about 24 KiB, which stays in a 32 KiB L1 while the tile passes over the panels (whose blocks
  // stream from L2), and at least 256 units; a multiple of unit_align. 1024 units for AVX2 and
  // NEON (mr 6), 512 for AVX-512 (mr 12); AMX sets its own (block_units). Measured on a Zen 4
  // VM (AVX2), Llama f32 prefill of 128 tokens, 3 runs each: 1024 units 464-488 ms (1 thread)
  // and 218-246 ms (2 threads) against 256 units 522-546 and 271-419: fewer calls of the
  // microkernel and fewer reloads of y per product.
  size_t BlockUnits() const {
    if (block_units != 0) return block_units;
    const size_t units = std::max<size_t>(256, (size_t{24} << 10) / (mr * 4));
    return units / unit_align * unit_align;
  }
  // Bytes of panels per group in GemmBlock (GemmGroupPanels): kGemmGroupBytes, or group_bytes.
  size_t GroupBytes() const { return group_bytes != 0 ? group_bytes : kGemmGroupBytes; }
  size_t Panels(size_t rows) const { return (rows + nr - 1) / nr; }
  size_t Tiles(size_t tokens) const { return (tokens + mr - 1) / mr; }
  // The first token of tile t (0 <= t <= Tiles(n); t = Tiles(n): n) of a call of n tokens.
  size_t TileStart(size_t n, size_t t) const {
    if (!even_tiles) return std::min(n, t * mr);
    const size_t tiles = Tiles(n);
    return tiles == 0 ? 0 : n * t / tiles;
  }
  // Bytes of the packed weights of a [rows, k] matrix, and of n tokens' packed activations.
  size_t SlotBytes() const { return panel == FloatType::kF32 ? 4 : 2; }
  size_t WeightBytes(size_t rows, size_t k) const {
    return Panels(rows) * nr * Units(k) * SlotBytes();
  }
  // Unit u0 of panel p in the packed weights.
  const uint32_t* PanelAt(const uint32_t* packed, size_t units, size_t p, size_t u0) const {
    return reinterpret_cast<const uint32_t*>(reinterpret_cast<const char*>(packed) +
                                             (p * units + u0) * nr * SlotBytes());
  }
  size_t ActivationBytes(size_t n, size_t k) const { return Tiles(n) * mr * Units(k) * 4; }
};

// Packs panels [first, last) of W: [rows, k] row-major, elements of w_type (F32, F16, BF16; a
// BF16 kernel takes BF16 only and a kernel of 16-bit panels its `panel` dtype only: their values
// are not rounded). packed: the whole matrix's buffer (WeightBytes), 4-byte aligned; the panels
// given are written whole, padding included.
void GemmPackWeights(const GemmKernel& kernel, size_t rows, size_t k, const void* w,
                     FloatType w_type, size_t first, size_t last, uint32_t* packed);

// Packs tiles [first, last) of x: [n, x_stride] f32 (k values read per token) into `packed`
// (the whole call's buffer, ActivationBytes(n, k)).
void GemmPackActivations(const GemmKernel& kernel, size_t n, size_t k, const float* x,
                         size_t x_stride, size_t first, size_t last, uint32_t* packed);

// A panel's bytes (all of k) up to which GemmBlock runs a product of a few tiles unblocked in k
// (see GemmBlock): 256 KiB.
constexpr size_t kGemmWholeKBytes = size_t{256} << 10;

// Panels in one group of GemmBlock for blocks of `block` units of k: as many as fit
// kernel.GroupBytes(), at least one.
size_t GemmGroupPanels(const GemmKernel& kernel, size_t block);

// How GemmBlock walks a product blocked in k: each group of panels through every block of k
// (kGroupsOuter), or each block of k over every group (kBlocksOuter); kAuto: blocks outermost
// where GemmBlocksOuter says so. The sums, and so the bits of every output, are the same.
enum class GemmOrder { kAuto, kGroupsOuter, kBlocksOuter };

// Bytes of packed activations (all blocks of k of a product's tiles) past which kAuto runs the
// blocks of k outermost: 2 MiB, twice the L2 of Zen 4 and Zen 5 (measured in GemmBlock).
constexpr uint64_t kGemmBlocksOuterBytes = uint64_t{2} << 20;

// Whether kAuto runs the blocks of k outermost for `tiles` tiles (`tokens` tokens) over k values
// and `channels` output channels (a task's panels): where their packed activations (tiles · mr ·
// Units(k) · 4 bytes) exceed kGemmBlocksOuterBytes, unless the kernel keeps the groups outermost
// below its outputs (GemmKernel::groups_outer_below_outputs) and the outputs (tokens · channels ·
// 4 bytes) are at least as many bytes.
bool GemmBlocksOuter(const GemmKernel& kernel, size_t tiles, size_t k, size_t tokens,
                     size_t channels);

// Computes the outputs of tokens in tiles [t0, t1) and channels in panels [p0, p1): bias [rows]
// or nullptr, y [n, y_stride] f32 (rows columns; no other element is written). packed_x and
// packed_w as packed above for the same n, k and rows.
void GemmBlock(const GemmKernel& kernel, size_t n, size_t k, size_t rows,
               const uint32_t* packed_x, const uint32_t* packed_w, const float* bias,
               float out_min, size_t t0, size_t t1, size_t p0, size_t p1, float* y,
               size_t y_stride, GemmOrder order = GemmOrder::kAuto);

// The kernels this CPU can run for packed `dtype` (F32 or BF16), scalar first; the best one (the
// last of the list). The BF16 list has the scalar twin everywhere, "avx512bf16" on CPUs with
// AVX-512 BF16, "amx-bf16" on x86-64 Linux CPUs with AMX-BF16 whose kernel grants the tile state
// and whose tiles pass a check against the scalar twin when first listed (GemmAmxStatus), and
// "neon-bf16" on aarch64 CPUs with FEAT_BF16.
std::vector<const GemmKernel*> AvailableGemmKernels(FloatType dtype);
const GemmKernel& BestGemmKernel(FloatType dtype);

// Whether bf16 arithmetic with `kernel` (a BF16 kernel) beats f32 arithmetic over 16-bit panels
// of the same weights on this CPU, so that rounding the activations to bf16 buys speed. False for
// the scalar twin, and for "avx512bf16" on Intel CPUs: there vdpbf16ps runs at half the rate of
// vfmadd231ps in flops (measured on a Xeon VM, family 6 model 207: 71-81 against 158-166
// GFLOP/s, 4-24 chains), so the f32 kernel's 2 FMAs a cycle do more (Llama prefill of 128
// tokens, bf16 weights: 330-393 ms with "avx512-bf16w" against 462-510 with "avx512bf16"). AMD's
// Zen 4 and Zen 5 run vdpbf16ps at the FMA rate, twice the flops; AMX and Arm's bfdot likewise.
bool GemmBf16ArithmeticFaster(const GemmKernel& kernel);

// The kernel that multiplies like `f32` (an F32 kernel) from 16-bit panels of `half` (F16 or
// BF16) weights, or nullptr where there is none: "avx2" has "avx2-f16w" and "avx2-bf16w",
// "avx512" "avx512-f16w" and "avx512-bf16w", the scalar twin "scalar-f16w" and "scalar-bf16w".
// Its results are the f32 kernel's bits for the same weights; f16/bf16 files pack to half the
// bytes of f32 panels.
const GemmKernel* HalfPanelKernel(const GemmKernel& f32, FloatType half);

// `base` without its ahead form: how the kernels without one that GemmKernelWithoutAhead returns
// are built.
constexpr GemmKernel GemmWithoutAheadForm(GemmKernel base) {
  base.ahead = nullptr;
  return base;
}

// `kernel` without its ahead form (GemmKernel::ahead, the AVX-512 kernels'), the same otherwise:
// the same sums, with each pass's panels streamed by its first tile as with one tile. `kernel`
// itself where it has no ahead form (or is nullptr).
const GemmKernel* GemmKernelWithoutAhead(const GemmKernel* kernel);

// Whether the ahead forms run by default on this CPU (CpuBackendOptions::gemm_ahead): yes,
// unless cpuinfo reports less than 1 MiB of L2 per core (a pass keeps its group of panels, the
// next one and its block of activations there: about 550 KiB at 128 tokens); yes also where it
// reports no L2 (a VM that hides the cache leaves: Debian's cpuinfo reads AMD's caches from leaf
// 0x8000001D only). Measured with 2 MiB of L2 (an Intel Xeon VM, family 6 model 207) and 1 MiB
// (an AMD Zen 5 VM, family 26 model 2, where cpuinfo read no caches and CPUID 0x80000006 said
// 1024 KiB): faster or the same in every product measured on both (README.md says how much).
bool GemmAheadByDefault();

// Why "amx-bf16" is or is not listed, in a few words: "listed", "no AMX-BF16 on this CPU", "not
// requested (FFLITE_NO_AMX is set)", "the OS refused the AMX tile state", "self-check failed:
// ...", "not built for this target".
const char* GemmAmxStatus();

// The AMX kernel's arithmetic on a software model of the tiles (tileloadd, tdpbf16ps with bf16
// subnormals read as zero, tilestored on 8 tiles of 16 rows × 64 bytes), with the real kernel's
// layout, tile source and driver: what the tests check on CPUs without AMX. It runs anywhere and
// slowly; never chosen. isa "amx-bf16-model".
const GemmKernel& GemmAmxModelKernel();

// The scalar twins' tile: tokens per tile and channels per panel.
inline constexpr size_t kGemmScalarMr = 4, kGemmScalarNr = 8;

// The microkernels by name (for the selection and the tests).
void GemmMicrokernelScalar(size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w,
                           const float* bias, bool accumulate, bool clamp, float out_min,
                           float* y, size_t y_stride);
void GemmMicrokernelScalarBf16(size_t m, size_t n, size_t units, const uint32_t* x,
                               const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                               float out_min, float* y, size_t y_stride);
// The scalar twin over 16-bit panels of f16 / bf16 weights (f32 arithmetic, natural order).
void GemmMicrokernelScalarF16w(size_t m, size_t n, size_t units, const uint32_t* x,
                               const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                               float out_min, float* y, size_t y_stride);
void GemmMicrokernelScalarBf16w(size_t m, size_t n, size_t units, const uint32_t* x,
                                const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                                float out_min, float* y, size_t y_stride);
#if defined(__x86_64__) || defined(__i386__)
#define FFLITE_GEMM_X86 1
// AVX2 + FMA3 (+ F16C): 6 tokens × 16 channels. Call only when the CPU has all three.
void GemmMicrokernelAvx2(size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w,
                         const float* bias, bool accumulate, bool clamp, float out_min, float* y,
                         size_t y_stride);
// The same over 16-bit panels: f16 widened by vcvtph2ps, bf16 in channel pairs (paired_halves)
// widened by a shift and a mask.
void GemmMicrokernelAvx2F16w(size_t m, size_t n, size_t units, const uint32_t* x,
                             const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                             float out_min, float* y, size_t y_stride);
void GemmMicrokernelAvx2Bf16w(size_t m, size_t n, size_t units, const uint32_t* x,
                              const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                              float out_min, float* y, size_t y_stride);
// Their streaming forms (GemmKernel::stream): the same sums, the panel prefetched ahead.
void GemmMicrokernelAvx2Stream(size_t m, size_t n, size_t units, const uint32_t* x,
                               const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                               float out_min, float* y, size_t y_stride);
void GemmMicrokernelAvx2F16wStream(size_t m, size_t n, size_t units, const uint32_t* x,
                                   const uint32_t* w, const float* bias, bool accumulate,
                                   bool clamp, float out_min, float* y, size_t y_stride);
void GemmMicrokernelAvx2Bf16wStream(size_t m, size_t n, size_t units, const uint32_t* x,
                                    const uint32_t* w, const float* bias, bool accumulate,
                                    bool clamp, float out_min, float* y, size_t y_stride);
// AVX2 packing of 6-token tiles (f32 units).
void GemmPackTileAvx2(size_t m, size_t k, const float* x, size_t x_stride, uint32_t* tile);
// AVX-512 F: 12 tokens × 32 channels.
void GemmMicrokernelAvx512(size_t m, size_t n, size_t units, const uint32_t* x,
                           const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                           float out_min, float* y, size_t y_stride);
// AVX-512 F + BF16 (vdpbf16ps): 12 tokens × 32 channels, pairs of k.
void GemmMicrokernelAvx512Bf16(size_t m, size_t n, size_t units, const uint32_t* x,
                               const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                               float out_min, float* y, size_t y_stride);
// Their streaming forms (GemmKernel::stream): the same sums, the panel prefetched ahead.
void GemmMicrokernelAvx512Stream(size_t m, size_t n, size_t units, const uint32_t* x,
                                 const uint32_t* w, const float* bias, bool accumulate,
                                 bool clamp, float out_min, float* y, size_t y_stride);
void GemmMicrokernelAvx512Bf16Stream(size_t m, size_t n, size_t units, const uint32_t* x,
                                     const uint32_t* w, const float* bias, bool accumulate,
                                     bool clamp, float out_min, float* y, size_t y_stride);
// The AVX-512 f32 kernel over 16-bit panels: f16 widened by vcvtph2ps, bf16 in channel pairs
// (paired_halves) widened by a shift and a mask; the avx512 kernel's bits. And their streaming
// forms.
void GemmMicrokernelAvx512F16w(size_t m, size_t n, size_t units, const uint32_t* x,
                               const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                               float out_min, float* y, size_t y_stride);
void GemmMicrokernelAvx512Bf16w(size_t m, size_t n, size_t units, const uint32_t* x,
                                const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                                float out_min, float* y, size_t y_stride);
void GemmMicrokernelAvx512F16wStream(size_t m, size_t n, size_t units, const uint32_t* x,
                                     const uint32_t* w, const float* bias, bool accumulate,
                                     bool clamp, float out_min, float* y, size_t y_stride);
void GemmMicrokernelAvx512Bf16wStream(size_t m, size_t n, size_t units, const uint32_t* x,
                                      const uint32_t* w, const float* bias, bool accumulate,
                                      bool clamp, float out_min, float* y, size_t y_stride);
// The ahead forms of the four AVX-512 kernels (GemmKernel::ahead).
void GemmMicrokernelAvx512Ahead(size_t m, size_t n, size_t units, const uint32_t* x,
                                const uint32_t* w, const float* bias, bool accumulate,
                                bool clamp, float out_min, float* y, size_t y_stride,
                                const void* ahead, size_t ahead_bytes);
void GemmMicrokernelAvx512Bf16Ahead(size_t m, size_t n, size_t units, const uint32_t* x,
                                    const uint32_t* w, const float* bias, bool accumulate,
                                    bool clamp, float out_min, float* y, size_t y_stride,
                                    const void* ahead, size_t ahead_bytes);
void GemmMicrokernelAvx512F16wAhead(size_t m, size_t n, size_t units, const uint32_t* x,
                                    const uint32_t* w, const float* bias, bool accumulate,
                                    bool clamp, float out_min, float* y, size_t y_stride,
                                    const void* ahead, size_t ahead_bytes);
void GemmMicrokernelAvx512Bf16wAhead(size_t m, size_t n, size_t units, const uint32_t* x,
                                     const uint32_t* w, const float* bias, bool accumulate,
                                     bool clamp, float out_min, float* y, size_t y_stride,
                                     const void* ahead, size_t ahead_bytes);
// AVX-512 F packing of 32-channel panels (GemmKernel::pack_panels): f32 from f32, a BF16
// kernel's pairs from bf16, 16-bit slots from f16 (in order) and bf16 (channel pairs).
size_t GemmPackPanelsAvx512(size_t rows, size_t k, const void* w, size_t first, size_t last,
                            uint32_t* packed);
size_t GemmPackPanelsAvx512Bf16(size_t rows, size_t k, const void* w, size_t first, size_t last,
                                uint32_t* packed);
// The AMX kernel's panels: the bf16 pairs above, units rounded up to 16 (unit_align).
size_t GemmPackPanelsAmxBf16(size_t rows, size_t k, const void* w, size_t first, size_t last,
                             uint32_t* packed);
size_t GemmPackPanelsAvx512F16w(size_t rows, size_t k, const void* w, size_t first, size_t last,
                                uint32_t* packed);
size_t GemmPackPanelsAvx512Bf16w(size_t rows, size_t k, const void* w, size_t first, size_t last,
                                 uint32_t* packed);
// The same for AVX2's 16-channel panels: f32, 16-bit slots of f16 (in order) and bf16 (channel
// pairs).
size_t GemmPackPanelsAvx2(size_t rows, size_t k, const void* w, size_t first, size_t last,
                          uint32_t* packed);
size_t GemmPackPanelsAvx2F16w(size_t rows, size_t k, const void* w, size_t first, size_t last,
                              uint32_t* packed);
size_t GemmPackPanelsAvx2Bf16w(size_t rows, size_t k, const void* w, size_t first, size_t last,
                               uint32_t* packed);
// AVX-512 F packing of 12-token tiles: f32 units, or bf16 pairs rounded as F32ToBf16 does.
void GemmPackTileAvx512(size_t m, size_t k, const float* x, size_t x_stride, uint32_t* tile);
void GemmPackTileAvx512Bf16(size_t m, size_t k, const float* x, size_t x_stride,
                            uint32_t* tile);
// AVX-512 F packing of the AMX kernel's 32-token tiles (x_rows, 16-unit chunks), bf16 pairs
// rounded as F32ToBf16 does.
void GemmPackTileAmxBf16(size_t m, size_t k, const float* x, size_t x_stride, uint32_t* tile);
#endif
#if defined(__x86_64__) && defined(__linux__) && !defined(__ANDROID__)
#define FFLITE_GEMM_AMX 1
// AMX-BF16 (tdpbf16ps): 32 tokens × 32 channels in four 16 × 16 tiles of sums, 16 units of k
// per step. Call only through GemmBlock (its enter loads the tile configuration) on a CPU where
// GemmAmxStatus() is "listed".
void GemmMicrokernelAmxBf16(size_t m, size_t n, size_t units, const uint32_t* x,
                            const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                            float out_min, float* y, size_t y_stride);
// The AMX kernel, and whether this CPU and OS run it correctly (detected and checked once; for
// AvailableGemmKernels).
const GemmKernel& GemmAmxKernel();
bool GemmAmxUsable();
// The AMX kernel's ahead form (GemmKernel::ahead).
void GemmMicrokernelAmxBf16Ahead(size_t m, size_t n, size_t units, const uint32_t* x,
                                 const uint32_t* w, const float* bias, bool accumulate,
                                 bool clamp, float out_min, float* y, size_t y_stride,
                                 const void* ahead, size_t ahead_bytes);
// `kernel` without its ahead form where it is an AMX kernel (GemmKernelWithoutAhead), else
// nullptr.
const GemmKernel* GemmAmxWithoutAhead(const GemmKernel* kernel);
#endif
#if defined(__aarch64__)
#define FFLITE_GEMM_NEON 1
// aarch64 NEON: 6 tokens × 16 channels.
void GemmMicrokernelNeon(size_t m, size_t n, size_t units, const uint32_t* x, const uint32_t* w,
                         const float* bias, bool accumulate, bool clamp, float out_min, float* y,
                         size_t y_stride);
// Their packings of weights (GemmKernel::pack_panels): f32, and bf16 pairs (plain NEON).
size_t GemmPackPanelsNeon(size_t rows, size_t k, const void* w, size_t first, size_t last,
                          uint32_t* packed);
size_t GemmPackPanelsNeonBf16(size_t rows, size_t k, const void* w, size_t first, size_t last,
                              uint32_t* packed);
// aarch64 NEON with BF16 (bfdot): 6 tokens × 16 channels, pairs of k. Call only when the CPU
// has FEAT_BF16.
void GemmMicrokernelNeonBf16(size_t m, size_t n, size_t units, const uint32_t* x,
                             const uint32_t* w, const float* bias, bool accumulate, bool clamp,
                             float out_min, float* y, size_t y_stride);
#endif

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_GEMM_H_
