// Block-quantised weights as stored and read, one traits type per quantised type: the converter
// writes this layout (format/quant_layout.h), the loader checks it, the reference dequantises it
// and every kernel reads it straight from the file's mapping (no repacking, no second copy).
//
// A matrix W[rows, k] (rows = out_features, k = in_features) is quantised in blocks of kBlock = 32
// consecutive elements of a row, each with an f16 scale s: W[r, j] ≈ s · q. k is padded with
// zeros to k_blocks · 32 and rows to panels · 16 (zero values, zero scales), which changes no
// product. Rows are grouped in panels of kQuantPanelRows = 16; panel p holds rows [16p, 16p + 16)
// and is `panel_bytes` long:
//
//   scales: f16 [k_blocks][16]          (scale of row 16p + r, block b at index b·16 + r),
//           padded with zeros to a multiple of 64 bytes (scale_bytes)
//   then per block b < k_blocks, the type's kBlockPanelBytes each (16 rows × one block):
//     Q8 (i8): 8 groups g of 64 bytes; byte g·64 + 4r + i = q[16p + r][32b + 4g + i]   (int8)
//     Q4 (i4): 4 chunks c of 64 bytes; byte c·64 + 4r + i holds
//           low nibble  = q[16p + r][32b + 4c + i] + 8,
//           high nibble = q[16p + r][32b + 4(c + 4) + i] + 8                        (q in [-8, 7])
//
// So one 64-byte load is 16 rows × 4 consecutive k: a 16-lane int32 dot-product step (AVX-512
// VNNI), two 8-lane ones (AVX2) or four 4-lane ones (NEON sdot); a Q4 load unpacks into the
// same shape for groups c and c + 4 with one mask and one shift. Every panel and block starts
// 64-byte aligned. Threads split a matrix at panel boundaries.
//
// Rotated layout (PANEL16_K4_HADAMARD32): the stored matrix is W' = W·Rᵀ per block, where
// R = H·D / sqrt(32), H the 32×32 Sylvester-Hadamard matrix and D = diag(signs of
// kHadamardSigns). R is orthogonal, so W·x = W'·(R·x): the runtime applies R to each block of 32
// activations (Rotate32) and multiplies by the stored weights; one huge weight is spread over its
// block instead of setting the block's scale.
//
// A type is its traits (below) plus its kernels: the scalar twins (qgemv_scalar.cc,
// qgemm_scalar.cc) read any type through Value and the scales; the SIMD kernels unpack each
// type's bytes their own way (their decoders, chosen at compile time on the traits).
#ifndef FFLITE_RUNTIME_SRC_KERNELS_QUANT_TYPES_H_
#define FFLITE_RUNTIME_SRC_KERNELS_QUANT_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/types.h"

namespace fflite {

inline constexpr size_t kQuantBlock = 32;      // elements of a row per scale (Q8, Q4)
inline constexpr size_t kQuantPanelRows = 16;  // rows per panel
// Bit j set: element j of a block is negated before the Hadamard transform (D in R = H·D/√32).
inline constexpr uint32_t kHadamardSigns = 0x9e3779b9u;

struct QuantGeometry {
  uint64_t rows = 0, k = 0;
  uint64_t panels = 0;             // ceil(rows / 16)
  uint64_t k_blocks = 0;           // ceil(k / 32) (Q4K, Q6K: whole super-blocks, ceil(k/256)·8)
  uint64_t block_panel_bytes = 0;  // the type's kBlockPanelBytes (16 rows × one block)
  uint64_t scale_bytes = 0;        // k_blocks · 32 rounded up to 64 (Q4K, Q6K: k_blocks / 8 ·
                                   // the type's kSuperBytes, rounded up to 64)
  uint64_t panel_bytes = 0;        // scale_bytes + k_blocks · block_panel_bytes
  uint64_t bytes() const { return panels * panel_bytes; }
};

// Q8: int8 values in [-127, 127], an f16 scale per block of 32: 8.5 bits per weight.
struct Q8 {
  static constexpr QuantType kType = QuantType::kQ8;
  static constexpr bool kLut = false;  // values are codes, not indices into kIq4Levels
  static constexpr QuantType kScheme = QuantType::kQ8;  // scales and arithmetic
  static constexpr bool kPacked = false;
  static constexpr size_t kBits = 8;
  static constexpr uint64_t kBlockPanelBytes = 8 * 64;
  static constexpr int kMinValue = -127, kMaxValue = 127;  // what the quantiser writes
  static constexpr int kOffset = 0;  // stored byte = q + kOffset (two's complement)
  // Value j (0 .. 31) of panel row r (0 .. 15) in a block's bytes, and its writing.
  static int Value(const uint8_t* blk, size_t r, size_t j) {
    return static_cast<int8_t>(blk[(j / 4) * 64 + 4 * r + j % 4]);
  }
  static void SetValue(uint8_t* blk, size_t r, size_t j, int q) {
    blk[(j / 4) * 64 + 4 * r + j % 4] = static_cast<uint8_t>(static_cast<int8_t>(q));
  }
  // How the converter quantises a block (format/quantize.cc): the plain scale maps the block's
  // largest magnitude `amax` to 127; the search tries scales mapping it to 127 ± 1 (255 levels:
  // the rounding error barely depends on the exact scale, a coarse grid suffices), each as
  // consider(levels the largest magnitude maps to).
  static float PlainScale(float amax, float /*signed_max*/) { return amax / 127.0f; }
  template <typename Consider>
  static void SearchScales(float /*sign*/, Consider&& consider) {
    for (int d = -4; d <= 4; ++d) consider(127.0f + 0.25f * static_cast<float>(d));
  }
};

// Q4: values in [-8, 7] stored as nibbles q + 8, an f16 scale per block of 32: 4.5 bits per
// weight.
struct Q4 {
  static constexpr QuantType kType = QuantType::kQ4;
  static constexpr bool kLut = false;
  static constexpr QuantType kScheme = QuantType::kQ4;  // scales and arithmetic
  static constexpr bool kPacked = false;
  static constexpr size_t kBits = 4;
  static constexpr uint64_t kBlockPanelBytes = 4 * 64;
  static constexpr int kMinValue = -8, kMaxValue = 7;
  static constexpr int kOffset = 8;  // stored nibble = q + kOffset
  static int Value(const uint8_t* blk, size_t r, size_t j) {
    const size_t group = j / 4;
    const uint8_t byte = blk[(group % 4) * 64 + 4 * r + j % 4];
    return (group < 4 ? (byte & 0xf) : (byte >> 4)) - kOffset;
  }
  static void SetValue(uint8_t* blk, size_t r, size_t j, int q) {
    const size_t group = j / 4;
    uint8_t& byte = blk[(group % 4) * 64 + 4 * r + j % 4];
    const unsigned nib = static_cast<unsigned>(q + kOffset) & 0xfu;
    byte = static_cast<uint8_t>(group < 4 ? (byte & 0xf0u) | nib : (byte & 0x0fu) | (nib << 4));
  }
  // The plain scale maps the block's signed largest element to -8 (as llama.cpp's Q4_0); the
  // search tries both signs, the largest magnitude to +7 or to -8, each ± 1 in steps of 0.1.
  static float PlainScale(float /*amax*/, float signed_max) { return signed_max / -8.0f; }
  template <typename Consider>
  static void SearchScales(float sign, Consider&& consider) {
    for (int d = -10; d <= 10; ++d) {
      consider(sign * (7.0f + 0.1f * static_cast<float>(d)));
      consider(-sign * (8.0f + 0.1f * static_cast<float>(d)));
    }
  }
};

// Q4K: GGUF's Q4_K with its bits, re-laid in panels. A super-block is 8 blocks (256 values of a
// row) with an f16 d and dmin; each block of 32 has a 6-bit scale sc and min m; a value is the
// nibble n in [0, 15], stored as Q4's nibbles are (the same chunks, no offset):
//   W[r, j] = (d·sc)·n - (dmin·m), each product in f32,
// exactly GGUF's dequantisation (d·sc and dmin·m have at most 17 significant bits, (d·sc)·n at
// most 21: every product is exact in f32, so a fused multiply-add gives the same bits). The scale
// area of a panel is, per super-block s, kSuperBytes = 320 bytes:
//   d: f16 [16 rows], dmin: f16 [16 rows], then per block b of s: sc u8 [16 rows], m u8 [16 rows]
// so block b's sc/m are at ScaleOffset(b) and its super-block's d/dmin at SuperOffset(b). k is a
// multiple of 256 (the loader refuses any other: GGUF's rows are whole super-blocks). 4.625 bits
// per weight (GGUF's 4.5: its 6-bit codes are kept as bytes, each block's two in one 32-byte
// row of the panel).
struct Q4K {
  static constexpr QuantType kType = QuantType::kQ4K;
  static constexpr bool kLut = false;
  static constexpr QuantType kScheme = QuantType::kQ4K;  // scales and arithmetic
  static constexpr bool kPacked = false;
  static constexpr size_t kBits = 4;
  static constexpr uint64_t kBlockPanelBytes = 4 * 64;
  static constexpr int kMinValue = 0, kMaxValue = 15;
  static constexpr int kOffset = 0;
  static constexpr size_t kSuperBlocks = 8;          // blocks of 32 per super-block
  static constexpr uint64_t kSuperBytes = 64 + 8 * 32;  // a super-block's share of the scale area
  static constexpr uint8_t kMaxCode = 63;            // sc and m are 6-bit
  // The kernels sum (n - kMinOffset)·x (Q4's nibble sums) and add (kMinOffset·s - m)·Σx.
  static constexpr int kMinOffset = 8;
  static int Value(const uint8_t* blk, size_t r, size_t j) { return Q4::Value(blk, r, j) + 8; }
  static void SetValue(uint8_t* blk, size_t r, size_t j, int n) { Q4::SetValue(blk, r, j, n - 8); }
  static constexpr uint64_t SuperOffset(uint64_t b) { return b / kSuperBlocks * kSuperBytes; }
  static constexpr uint64_t ScaleOffset(uint64_t b) {
    return SuperOffset(b) + 64 + b % kSuperBlocks * 32;
  }
};

// Q6K: GGUF's Q6_K with its bits. A super-block is 8 blocks (256 values of a row) with an f16 d;
// each half-block of 16 values has a signed 8-bit scale sc; a value is q - 32 in [-32, 31] (q
// GGUF's 6-bit code), kept as int8 in Q8's layout (the same bytes, the same Value):
//   W[r, j] = (d·sc)·(q - 32), each product in f32,
// exactly GGUF's dequantisation (d·sc has at most 18 significant bits, times q - 32 at most 23:
// exact in f32). The scale area of a panel is, per super-block s, kSuperBytes = 288 bytes:
//   d: f16 [16 rows], then per block b of s: sc of its first 16 values int8 [16 rows], of its
//   last 16 int8 [16 rows]
// (rounded up to 64 bytes after the last super-block). k is a multiple of 256. 8.5625 bits per
// weight (GGUF's 6.5625: each 6-bit value kept as a byte, which the int8 kernels read as Q8's).
// The kernels take any value in [-127, 127]: IQ4X's levels (in [-127, 113], scales in [-32, 31]:
// d·sc at most 17 significant bits, times a level at most 24, still exact) decode into this form;
// the converter keeps GGUF's Q6_K as Q6KP and Q3_K as Q3KP (below), which hold 6 and 3 bits.
// Files of format 1.4 and 1.5 hold their Q6_K and Q5_K in this form.
struct Q6K {
  static constexpr QuantType kType = QuantType::kQ6K;
  static constexpr bool kLut = false;
  static constexpr QuantType kScheme = QuantType::kQ6K;  // scales and arithmetic
  static constexpr bool kPacked = false;
  static constexpr size_t kBits = 8;
  static constexpr uint64_t kBlockPanelBytes = 8 * 64;
  static constexpr int kMinValue = -32, kMaxValue = 31;
  static constexpr int kOffset = 0;
  static constexpr size_t kSuperBlocks = 8;
  static constexpr uint64_t kSuperBytes = 32 + 8 * 32;
  // The bits of a scale byte that are the scale (Q2KP keeps its min in the high nibble).
  static constexpr uint8_t kScaleMask = 0xff;
  static int Value(const uint8_t* blk, size_t r, size_t j) { return Q8::Value(blk, r, j); }
  static void SetValue(uint8_t* blk, size_t r, size_t j, int q) { Q8::SetValue(blk, r, j, q); }
  static constexpr uint64_t SuperOffset(uint64_t b) { return b / kSuperBlocks * kSuperBytes; }
  static constexpr uint64_t ScaleOffset(uint64_t b) {
    return SuperOffset(b) + 32 + b % kSuperBlocks * 32;
  }
};

// Q5K: GGUF's Q5_K with its bits: Q4K's super-blocks, scales, mins and scale area, the value n in
// [0, 31] (4 bits and GGUF's fifth) kept as int8 n - 16 in Q8's layout, which the int8 kernels
// read:
//   W[r, j] = (d·sc)·n - (dmin·m), each product in f32 (exact: at most 22 significant bits).
// 8.625 bits per weight (GGUF's 5.5: each value a byte).
struct Q5K {
  static constexpr QuantType kType = QuantType::kQ5K;
  static constexpr bool kLut = false;
  static constexpr QuantType kScheme = QuantType::kQ5K;  // scales and arithmetic
  static constexpr bool kPacked = false;
  static constexpr size_t kBits = 8;
  static constexpr uint64_t kBlockPanelBytes = 8 * 64;
  static constexpr int kMinValue = 0, kMaxValue = 31;
  static constexpr int kOffset = 0;
  static constexpr size_t kSuperBlocks = 8;
  static constexpr uint64_t kSuperBytes = 64 + 8 * 32;
  static constexpr uint8_t kMaxCode = 63;
  static constexpr int kMinOffset = 16;  // the kernels sum (n - 16)·x, the stored int8
  static int Value(const uint8_t* blk, size_t r, size_t j) { return Q8::Value(blk, r, j) + 16; }
  static void SetValue(uint8_t* blk, size_t r, size_t j, int n) { Q8::SetValue(blk, r, j, n - 16); }
  static constexpr uint64_t SuperOffset(uint64_t b) { return Q4K::SuperOffset(b); }
  static constexpr uint64_t ScaleOffset(uint64_t b) { return Q4K::ScaleOffset(b); }
};

// The packed k-quants: GGUF's Q6_K and Q5_K at GGUF's own sizes. The same scale area, scales and
// arithmetic as Q6K and Q5K (kScheme), and a block's values in bit planes instead of a byte each.
// Per block of 16 rows x 32 values, with p = 4r + i the byte position of row r and value i of a
// group of 4 (as Q8's groups: group g holds values 4g .. 4g + 3):
//   L[c], c = 0..3, 64 bytes at 64c: byte p's low nibble = the low 4 bits of group 2c's code at p,
//          its high nibble = those of group 2c + 1;
//   Q6KP: H[h], h = 0..1, 64 bytes at 256 + 64h: bits 2j, 2j + 1 of byte p = the high 2 bits of
//          group 4h + j's code (so each half of 16 values, with its own scales, is L[2h], L[2h + 1]
//          and H[h]); code = q - 32 + 32 = GGUF's 6-bit q, the value q - 32;
//   Q5KP: H, 64 bytes at 256: bit g of byte p = the fifth bit of group g's n, the value n - 16
//          as Q5K stores it.
// A kernel decodes group g's bytes at positions [o, o + w) from the same positions of L[g / 2] and
// H into exactly the int8 values Q6K / Q5K keep (LoadGroup in each kernel file), then does Q6K's /
// Q5K's arithmetic: results equal the wide types' bit for bit. 6.5625 bits per weight as GGUF's
// Q6_K, 5.625 against GGUF's Q5_K's 5.5 (its 6-bit codes kept as bytes, as Q4K's).
struct Q6KP : Q6K {
  static constexpr QuantType kType = QuantType::kQ6KP;
  static constexpr bool kPacked = true;
  static constexpr int kCodeOffset = 32;  // the decoded code (GGUF's q) = value + 32
  static constexpr uint64_t kBlockPanelBytes = 4 * 64 + 2 * 64;
  static constexpr uint64_t kHighOffset = 4 * 64;  // H[0]
  static int Value(const uint8_t* blk, size_t r, size_t j) {
    const size_t g = j / 4, p = 4 * r + j % 4;
    const int lo = (blk[(g / 2) * 64 + p] >> (4 * (g % 2))) & 0xf;
    const int hi = (blk[kHighOffset + (g / 4) * 64 + p] >> (2 * (g % 4))) & 3;
    return (lo | hi << 4) - 32;
  }
  static void SetValue(uint8_t* blk, size_t r, size_t j, int q) {
    const size_t g = j / 4, p = 4 * r + j % 4;
    const unsigned code = static_cast<unsigned>(q + 32) & 63u;
    uint8_t& l = blk[(g / 2) * 64 + p];
    const unsigned ls = 4 * (g % 2), hs = 2 * (g % 4);
    l = static_cast<uint8_t>((l & ~(0xfu << ls)) | ((code & 0xfu) << ls));
    uint8_t& h = blk[kHighOffset + (g / 4) * 64 + p];
    h = static_cast<uint8_t>((h & ~(3u << hs)) | ((code >> 4) << hs));
  }
};
struct Q5KP : Q5K {
  static constexpr QuantType kType = QuantType::kQ5KP;
  static constexpr bool kPacked = true;
  static constexpr int kCodeOffset = 16;  // the decoded code n = Q5K's int8 value + 16
  static constexpr uint64_t kBlockPanelBytes = 4 * 64 + 64;
  static constexpr uint64_t kHighOffset = 4 * 64;
  static int Value(const uint8_t* blk, size_t r, size_t j) {  // n in [0, 31]
    const size_t g = j / 4, p = 4 * r + j % 4;
    const int lo = (blk[(g / 2) * 64 + p] >> (4 * (g % 2))) & 0xf;
    const int hi = (blk[kHighOffset + p] >> g) & 1;
    return lo | hi << 4;
  }
  static void SetValue(uint8_t* blk, size_t r, size_t j, int n) {
    const size_t g = j / 4, p = 4 * r + j % 4;
    const unsigned code = static_cast<unsigned>(n) & 31u;
    uint8_t& l = blk[(g / 2) * 64 + p];
    const unsigned ls = 4 * (g % 2);
    l = static_cast<uint8_t>((l & ~(0xfu << ls)) | ((code & 0xfu) << ls));
    uint8_t& h = blk[kHighOffset + p];
    h = static_cast<uint8_t>((h & ~(1u << g)) | ((code >> 4) << g));
  }
};

// The 2-bit planes L[c], 64 bytes at 64c, of Q3KP's low bits and Q2KP's values: value j of
// row r (group g = j / 4) in bits 2(g % 4), 2(g % 4) + 1 of byte 64(g / 4) + 4r + j % 4.
struct Plane2 {
  static unsigned Get(const uint8_t* blk, size_t r, size_t j) {
    const size_t g = j / 4;
    return (blk[(g / 4) * 64 + 4 * r + j % 4] >> (2 * (g % 4))) & 3u;
  }
  static void Set(uint8_t* blk, size_t r, size_t j, unsigned code) {
    const size_t g = j / 4;
    uint8_t& l = blk[(g / 4) * 64 + 4 * r + j % 4];
    const unsigned ls = 2 * (g % 4);
    l = static_cast<uint8_t>((l & ~(3u << ls)) | (code << ls));
  }
};

// Q3KP: GGUF's Q3_K at its size. Q6K's super-blocks, scales and arithmetic (Q3_K's 6-bit scale
// code c per 16 values, the scale sc = c - 32), each value v in [-4, 3] as the 3-bit code v + 4 in
// two bit planes. Its scale area keeps the 6-bit codes packed, GGUF's 12 bytes per 16 of them;
// per super-block s, kSuperBytes = 224 bytes:
//   d: f16 [16 rows], then per block b of s, kBlockScaleBytes = 24 at ScaleOffset(b):
//     lows u8 [16 rows]: row r's byte = the low 4 bits of its first half's code (low nibble) and
//          of its second half's (high nibble);
//     highs u8 [8]: byte i's low nibble = row i's top 2 bits of both codes (first half's in bits
//          0-1, second half's in bits 2-3), its high nibble row i + 8's
// (Q3KCode; the kernels decode the 16 rows' codes of a half in a few byte operations). Per block
// of 16 rows x 32 values, p = 4r + i as above:
//   L[c], c = 0..1, 64 bytes at 64c: bits 2j, 2j + 1 of byte p = the low 2 bits of group
//          4c + j's code (as Q6KP's H: each half of 16 values is L[h] and H's bits 4h .. 4h + 3);
//   H, 64 bytes at 128: bit g of byte p = the third bit of group g's code (as Q5KP's H).
//   W[r, j] = (d·sc)·v, each product in f32,
// exactly GGUF's dequantisation (d·sc at most 17 significant bits, times v at most 19). A kernel
// decodes a group as Q6KP's into the int8 values Q6K keeps and the codes into the int8 sc, then
// runs Q6K's arithmetic: results equal Q6K's (q6_k_i8's) on the same values and scales bit for
// bit. 3.4375 bits per weight, GGUF's own (format 1.13; files of format 1.8 to 1.12 kept each
// scale as a byte, 3.5625 bits, and are refused).
struct Q3KP : Q6K {
  static constexpr QuantType kType = QuantType::kQ3KP;
  static constexpr bool kPacked = true;
  static constexpr uint64_t kBlockScaleBytes = 16 + 8;  // a block's lows and highs
  static constexpr uint64_t kSuperBytes = 32 + 8 * kBlockScaleBytes;
  static constexpr uint64_t SuperOffset(uint64_t b) { return b / kSuperBlocks * kSuperBytes; }
  static constexpr uint64_t ScaleOffset(uint64_t b) {
    return SuperOffset(b) + 32 + b % kSuperBlocks * kBlockScaleBytes;
  }
  static constexpr uint64_t kBlockPanelBytes = 2 * 64 + 64;
  static constexpr uint64_t kHighOffset = 2 * 64;  // H
  static constexpr int kMinValue = -4, kMaxValue = 3;
  static constexpr int kCodeOffset = 4;  // code = v + 4
  static int Value(const uint8_t* blk, size_t r, size_t j) {
    const int hi = (blk[kHighOffset + 4 * r + j % 4] >> (j / 4)) & 1;
    return static_cast<int>(Plane2::Get(blk, r, j) | hi << 2) - kCodeOffset;
  }
  static void SetValue(uint8_t* blk, size_t r, size_t j, int v) {
    const size_t g = j / 4;
    const unsigned code = static_cast<unsigned>(v + kCodeOffset) & 7u;
    Plane2::Set(blk, r, j, code & 3u);
    uint8_t& h = blk[kHighOffset + 4 * r + j % 4];
    h = static_cast<uint8_t>((h & ~(1u << g)) | ((code >> 2) << g));
  }
};

// Q2KP: GGUF's Q2_K at its size. Q6K's super-blocks, scale area and arithmetic, each value q in
// [0, 3] as a 2-bit code in Q3KP's planes L (no H), and a min per 16 values:
//   W[r, j] = (d·sc)·q - dmin·m, each product in f32,
// exactly GGUF's dequantisation (d·sc at most 15 significant bits, times q at most 17; dmin·m at
// most 15). Each half-block's scale byte in the Q6K scale area is GGUF's own byte: the 4-bit
// scale sc in its low nibble (the kernels read the scale through kScaleMask) and the 4-bit min m
// in its high nibble (half-block h = values 16h .. 16h + 15 of super-block s: K2Min). The dmin
// follow the Q6K scale areas of all super-blocks in the panel's scale area (so every Q6K offset
// stays as it is): per super-block s, dmin f16 [16 rows] at MinOffset(supers, s). A kernel
// decodes a group as Q3KP's low bits into the int8 values Q6K keeps, runs Q6K's arithmetic on
// the masked scales (results equal Q6K's on the same values and scales bit for bit), then
// subtracts each row's Σ dmin·m·(Σx over the half-block) (SubtractQ2KMins,
// kernels/quant_kernels.h). 2.625 bits per weight, GGUF's own (format 1.11; files of format 1.9
// and 1.10 kept the scales and mins in bytes of their own, 2.875 bits, and are refused).
struct Q2KP : Q6K {
  static constexpr QuantType kType = QuantType::kQ2KP;
  static constexpr bool kPacked = true;
  static constexpr uint64_t kBlockPanelBytes = 2 * 64;
  static constexpr int kMinValue = 0, kMaxValue = 3;
  static constexpr int kCodeOffset = 0;  // code = q
  // The scale bytes' low nibbles are the scales, their high ones the mins.
  static constexpr uint8_t kScaleMask = 0x0f;
  static constexpr uint64_t kMinBytes = 2 * kQuantPanelRows;  // dmin f16 [16 rows]
  // A super-block's share of the scale area: Q6K's and its dmin.
  static constexpr uint64_t kSuperBytes = Q6K::kSuperBytes + kMinBytes;
  static constexpr uint64_t MinOffset(uint64_t supers, uint64_t s) {
    return supers * Q6K::kSuperBytes + s * kMinBytes;
  }
  static int Value(const uint8_t* blk, size_t r, size_t j) {
    return static_cast<int>(Plane2::Get(blk, r, j));
  }
  static void SetValue(uint8_t* blk, size_t r, size_t j, int q) {
    Plane2::Set(blk, r, j, static_cast<unsigned>(q) & 3u);
  }
};

// IQ4X: GGUF's IQ4_XS at its size. Q6K's super-blocks, scale area, scales and arithmetic (each
// block's 6-bit scale ls - 32 of GGUF kept as both halves' sc), and each value a 4-bit index into
// the 16 non-uniform levels kIq4Levels (GGUF's IQ4_NL/IQ4_XS table, int8 in [-127, 113]):
//   W[r, j] = (d·sc)·kIq4Levels[i], each product in f32,
// exactly GGUF's dequantisation (d·sc at most 17 significant bits, times a level at most 24). The
// indices sit in Q6KP's nibble planes: L[c], c = 0..3, 64 bytes at 64c, byte p = 4r + i's low
// nibble group 2c's index at p, its high nibble group 2c + 1's. A kernel decodes a group with one
// table lookup (pshufb, tbl) into the int8 levels Q6K would keep, then runs Q6K's arithmetic:
// results equal Q6K's on the same levels bit for bit. 4.5625 bits per weight (GGUF's 4.25: the
// 6-bit scales kept as bytes, per 16 values as Q6K's).
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};
// MXFP4 (OCP's microscaling FP4, gpt-oss's experts): each value an E2M1 number (a sign, a 2-bit
// exponent, a 1-bit mantissa: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), here doubled so
// that they are integers (index i is E2M1's 4-bit code: bit 3 the sign), with the block's E8M0
// scale 2^(e - 127) halved to compensate.
inline constexpr int8_t kMxfp4Levels[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
struct Iq4Levels {
  static constexpr const int8_t* kLevels = kIq4Levels;
  static constexpr int kMinValue = -127, kMaxValue = 113;
};
struct Mxfp4Levels {
  static constexpr const int8_t* kLevels = kMxfp4Levels;
  static constexpr int kMinValue = -12, kMaxValue = 12;
};
// The level indices of IQ4X, IQ4N and MXF4 in Q6KP's nibble planes, into the 16 int8 levels of
// Levels::kLevels (which the kernels' table lookups read).
template <typename Levels>
struct LevelNibbles {
  static constexpr const int8_t* kLevels = Levels::kLevels;
  static int Index(const uint8_t* blk, size_t r, size_t j) {
    const size_t g = j / 4, p = 4 * r + j % 4;
    return (blk[(g / 2) * 64 + p] >> (4 * (g % 2))) & 0xf;
  }
  static void SetIndex(uint8_t* blk, size_t r, size_t j, unsigned index) {
    const size_t g = j / 4, p = 4 * r + j % 4;
    uint8_t& l = blk[(g / 2) * 64 + p];
    const unsigned ls = 4 * (g % 2);
    l = static_cast<uint8_t>((l & ~(0xfu << ls)) | ((index & 0xfu) << ls));
  }
  // The index of the level nearest q (the lower index on a tie).
  static constexpr unsigned NearestIndex(int q) {
    unsigned best = 0;
    for (unsigned i = 1; i < 16; ++i) {
      const int e = kLevels[i] - q, b = kLevels[best] - q;
      if (e * e < b * b) best = i;
    }
    return best;
  }
  static int Value(const uint8_t* blk, size_t r, size_t j) { return kLevels[Index(blk, r, j)]; }
  // Writes the index of the level nearest q: a level exactly when q is one; the only other values
  // written are the zeros of padding blocks, whose scales are zero.
  static void SetValue(uint8_t* blk, size_t r, size_t j, int q) {
    static constexpr struct Table {
      uint8_t index[256] = {};
      constexpr Table() {
        for (int v = -128; v < 128; ++v) index[v + 128] = static_cast<uint8_t>(NearestIndex(v));
      }
    } kNearest;
    SetIndex(blk, r, j, kNearest.index[q < -128 ? 0 : q > 127 ? 255 : q + 128]);
  }
};
using Iq4Nibbles = LevelNibbles<Iq4Levels>;
// A level-index type over the scales and arithmetic of Scheme (Q6K, Q8).
template <typename Scheme, QuantType kId, typename Levels = Iq4Levels>
struct Iq4Type : Scheme, LevelNibbles<Levels> {
  static constexpr QuantType kType = kId;
  static constexpr bool kPacked = true;
  static constexpr bool kLut = true;
  static constexpr uint64_t kBlockPanelBytes = 4 * 64;
  static constexpr int kMinValue = Levels::kMinValue, kMaxValue = Levels::kMaxValue;
  using LevelNibbles<Levels>::SetValue;
  using LevelNibbles<Levels>::Value;
};
struct IQ4X : Iq4Type<Q6K, QuantType::kIQ4X> {};

// IQ4N: GGUF's IQ4_NL at its size. Q8's f16 scale per block of 32 and arithmetic, each value a
// 4-bit index into kIq4Levels in IQ4X's nibble planes: W[r, j] = d·kIq4Levels[i] in f32, exactly
// GGUF's dequantisation. Decoded as IQ4X's into the int8 levels Q8 keeps, then Q8's arithmetic:
// results equal Q8's (i8's) on the same levels bit for bit. 4.5 bits per weight, GGUF's own.
struct IQ4N : Iq4Type<Q8, QuantType::kIQ4N> {};

// MXF4: MXFP4 blocks (GGUF's MXFP4, gpt-oss's published experts) at their own size: per block of
// 32 a row's E8M0 scale byte e as it is (16 rows' bytes per block in the panel's scale area, where
// the Q8 types keep 16 f16), each value its E2M1 code in IQ4X's nibble planes, an index into
// kMxfp4Levels (the E2M1 values doubled): W[r, j] = d·kMxfp4Levels[i] in f32 with d = 2^(e - 128)
// (half the block's scale 2^(e - 127)), exactly MXFP4's value. e is in [2, 254] (d a normal f32:
// the converter keeps a tensor whose scales all are, and any other exactly as f32), or 0 for a
// zero scale (padding rows and blocks); the loader refuses 1 and 255. A kernel makes d's f32 bits
// as (e - 1) << 23 with the subtraction saturating at 0 (E8m0Scale; 0 gives +0.0), decodes the
// codes by the same table lookup as IQ4N into the int8 levels Q8 keeps, then runs Q8's arithmetic:
// results equal i8's on the same levels and scales bit for bit. 4.25 bits per weight, GGUF's own
// (format 1.12; files of format 1.10 and 1.11 kept d as an f16, 4.5 bits, and are refused).
struct MXF4 : Iq4Type<Q8, QuantType::kMXF4, Mxfp4Levels> {};

// Whether Q's scale per block of 32 is an E8M0 byte (MXF4) rather than an f16 (the Q8 scheme's
// other types).
template <typename Q>
constexpr bool HasE8m0Scales() {
  return Q::kType == QuantType::kMXF4;
}
// The bytes of one row's scale per block in the Q8 scheme's scale area: [block][16 rows] of them.
template <typename Q>
constexpr uint64_t Q8ScaleBytes() {
  return HasE8m0Scales<Q>() ? 1 : 2;
}
// Where block b's scales start in a panel (Q8, Q4: its 16 f16; MXF4: its 16 E8M0 bytes; Q4K, Q5K:
// its sc and m bytes; Q6K: its two halves' sc bytes).
template <typename Q>
constexpr uint64_t BlockScaleOffset(uint64_t b) {
  if constexpr (Q::kScheme == QuantType::kQ4K || Q::kScheme == QuantType::kQ5K ||
                Q::kScheme == QuantType::kQ6K) {
    return Q::ScaleOffset(b);
  } else {
    return b * kQuantPanelRows * Q8ScaleBytes<Q>();
  }
}
// Whether MXF4 keeps an E8M0 byte e of a source as it is (the value 2^(e - 128) a normal f32).
constexpr bool E8m0ScaleHeld(uint8_t e) { return e >= 2 && e <= 254; }
// MXF4's scale d = 2^(e - 128) of an E8M0 byte e in [2, 254] as f32 bits, (e - 1) << 23, and +0.0
// for e = 0 (the subtraction saturates: what the kernels compute with a saturating byte
// subtraction, a widening and a shift).
constexpr uint32_t E8m0ScaleBits(uint8_t e) {
  return static_cast<uint32_t>(e > 0 ? e - 1 : 0) << 23;
}
inline float E8m0Scale(uint8_t e) {
  const uint32_t bits = E8m0ScaleBits(e);
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
// Whether Q has a min per block (W = scale·n - min) rather than a symmetric scale alone.
template <typename Q>
constexpr bool HasMin() {
  return Q::kScheme == QuantType::kQ4K || Q::kScheme == QuantType::kQ5K;
}
// Whether Q has a scale per half-block of 16 values (Q6K) rather than one per block.
template <typename Q>
constexpr bool HasHalfScales() {
  return Q::kScheme == QuantType::kQ6K;
}
// Whether Q has a min per half-block of 16 values besides Q6K's scales (Q2KP), which the kernels
// subtract after Q6K's product.
template <typename Q>
constexpr bool HasHalfMins() {
  return Q::kType == QuantType::kQ2KP;
}
// The packed non-table types' offset of their decoded codes (kCodeOffset: the codes are unsigned,
// value + offset), 0 for the others.
template <typename Q>
constexpr int CodeOffsetOf() {
  if constexpr (Q::kPacked && !Q::kLut) {
    return Q::kCodeOffset;
  } else {
    return 0;
  }
}
// Whether Q's scales are per super-block of 8 blocks (the k-quants: k a multiple of 256).
template <typename Q>
constexpr bool HasSuperBlocks() {
  return HasMin<Q>() || HasHalfScales<Q>();
}

// f(Q{}) with the traits of `type`.
template <typename F>
decltype(auto) WithQuantTraits(QuantType type, F&& f) {
  if (type == QuantType::kIQ4X) return f(IQ4X{});
  if (type == QuantType::kIQ4N) return f(IQ4N{});
  if (type == QuantType::kMXF4) return f(MXF4{});
  if (type == QuantType::kQ3KP) return f(Q3KP{});
  if (type == QuantType::kQ2KP) return f(Q2KP{});
  if (type == QuantType::kQ6KP) return f(Q6KP{});
  if (type == QuantType::kQ5KP) return f(Q5KP{});
  if (type == QuantType::kQ6K) return f(Q6K{});
  if (type == QuantType::kQ5K) return f(Q5K{});
  if (type == QuantType::kQ4K) return f(Q4K{});
  if (type == QuantType::kQ4) return f(Q4{});
  return f(Q8{});
}

// By the type's id: its scheme (the arithmetic it shares, kScheme) and whether its scales are per
// super-block (the k-quants: k a multiple of 256, no rotation).
inline QuantType QuantSchemeOf(QuantType type) {
  return WithQuantTraits(type, [](auto q) { return decltype(q)::kScheme; });
}
inline bool QuantHasSuperBlocks(QuantType type) {
  return WithQuantTraits(type, [](auto q) { return HasSuperBlocks<decltype(q)>(); });
}
inline bool QuantHasHalfMins(QuantType type) {
  return WithQuantTraits(type, [](auto q) { return HasHalfMins<decltype(q)>(); });
}
// Whether `type`'s values are decoded from packed fields (bit planes, level indices) by the
// kernels, rather than read as bytes or nibbles.
inline bool QuantIsPacked(QuantType type) {
  return WithQuantTraits(type, [](auto q) { return decltype(q)::kPacked; });
}

// The bytes of one block of a panel (16 rows × 32 values) with its share of the panel's scale
// area: what the kernels read per block (the performance model's marks, kernels/mca_region.h).
template <typename Q>
constexpr uint64_t BlockBytesWithScales() {
  if constexpr (HasSuperBlocks<Q>()) {
    return Q::kBlockPanelBytes + Q::kSuperBytes / Q::kSuperBlocks;
  } else {
    return Q::kBlockPanelBytes + Q8ScaleBytes<Q>() * kQuantPanelRows;
  }
}

// Geometry of a [rows, k] matrix of type Q. rows, k <= 2^20 (the loader's limit) keep every
// product far from overflow.
template <typename Q>
constexpr QuantGeometry GeometryOf(uint64_t rows, uint64_t k) {
  QuantGeometry g;
  g.rows = rows;
  g.k = k;
  g.panels = (rows + kQuantPanelRows - 1) / kQuantPanelRows;
  g.k_blocks = (k + kQuantBlock - 1) / kQuantBlock;
  g.block_panel_bytes = Q::kBlockPanelBytes;
  if constexpr (HasSuperBlocks<Q>()) {
    // Whole super-blocks (a k the loader refuses still gets a geometry that covers it).
    g.k_blocks = (g.k_blocks + Q::kSuperBlocks - 1) / Q::kSuperBlocks * Q::kSuperBlocks;
    g.scale_bytes = (g.k_blocks / Q::kSuperBlocks * Q::kSuperBytes + 63) / 64 * 64;
  } else {
    g.scale_bytes = (g.k_blocks * kQuantPanelRows * Q8ScaleBytes<Q>() + 63) / 64 * 64;
  }
  g.panel_bytes = g.scale_bytes + g.k_blocks * g.block_panel_bytes;
  return g;
}
// The same by the type's id; out of line, for the 32-bit NEON kernels, which are built for NEON
// alone and so must not share an inline function with the rest (the linker could keep their copy
// for every caller).
QuantGeometry QuantMatrixGeometry(QuantType type, uint64_t rows, uint64_t k);

// The f16 bits of row r's scale in block b of a panel (the Q8 scheme's types but MXF4).
inline uint16_t PanelScale(const uint8_t* panel, size_t r, uint64_t b) {
  uint16_t s;
  std::memcpy(&s, panel + (b * kQuantPanelRows + r) * 2, 2);
  return s;
}
// MXF4: row r's E8M0 scale byte of block b in a panel.
inline uint8_t PanelE8m0(const uint8_t* panel, size_t r, uint64_t b) {
  return panel[b * kQuantPanelRows + r];
}

// Q4K, Q5K: row r's sc and m of block b and its super-block's d and dmin (f16 bits) in a panel.
inline uint8_t KCode(const uint8_t* panel, size_t r, uint64_t b, bool min) {
  return panel[Q4K::ScaleOffset(b) + (min ? kQuantPanelRows : 0) + r];
}
inline uint16_t KSuper(const uint8_t* panel, size_t r, uint64_t b, bool min) {
  uint16_t h;
  std::memcpy(&h, panel + Q4K::SuperOffset(b) + (min ? 2 * kQuantPanelRows : 0) + 2 * r, 2);
  return h;
}

// Q6K: row r's signed scale of half h (0, 1) of block b (the byte's bits in mask: the type's
// kScaleMask) and its super-block's d (f16 bits).
inline int8_t K6Scale(const uint8_t* panel, size_t r, uint64_t b, int h, uint8_t mask = 0xff) {
  return static_cast<int8_t>(panel[Q6K::ScaleOffset(b) + h * kQuantPanelRows + r] & mask);
}
inline uint16_t K6Super(const uint8_t* panel, size_t r, uint64_t b) {
  uint16_t d;
  std::memcpy(&d, panel + Q6K::SuperOffset(b) + 2 * r, 2);
  return d;
}

// Q3KP: row r's 6-bit scale code (sc + 32) of half h (0, 1) of the block whose scale bytes start
// at s (panel + Q3KP::ScaleOffset(b)), and its writing.
inline int Q3KCode(const uint8_t* s, size_t r, int h) {
  const int lo = (s[r] >> (4 * h)) & 0xf;
  const int hi = (s[kQuantPanelRows + r % 8] >> (4 * (r / 8) + 2 * h)) & 3;
  return lo | hi << 4;
}
inline void SetQ3KCode(uint8_t* s, size_t r, int h, int code) {
  const unsigned c = static_cast<unsigned>(code) & 63u;
  const unsigned ls = 4 * h, hs = 4 * (r / 8) + 2 * h;
  s[r] = static_cast<uint8_t>((s[r] & ~(0xfu << ls)) | ((c & 0xfu) << ls));
  uint8_t& hb = s[kQuantPanelRows + r % 8];
  hb = static_cast<uint8_t>((hb & ~(3u << hs)) | ((c >> 4) << hs));
}
// Whether Q's half-block scales are packed 6-bit codes (Q3KP) rather than Q6K's int8 bytes.
template <typename Q>
constexpr bool HasPackedScales() {
  return Q::kType == QuantType::kQ3KP;
}
// Any type of Q6K's scheme: row r's signed scale of half h of block b and its super-block's d
// (f16 bits), each at the type's own offsets.
template <typename Q>
int8_t HalfScale(const uint8_t* panel, size_t r, uint64_t b, int h) {
  if constexpr (HasPackedScales<Q>()) {
    return static_cast<int8_t>(Q3KCode(panel + Q::ScaleOffset(b), r, h) - 32);
  } else {
    return K6Scale(panel, r, b, h, Q::kScaleMask);
  }
}
template <typename Q>
uint16_t HalfSuper(const uint8_t* panel, size_t r, uint64_t b) {
  uint16_t d;
  std::memcpy(&d, panel + Q::SuperOffset(b) + 2 * r, 2);
  return d;
}

// Q2KP: row r's dmin (f16 bits) of super-block s, of `supers` super-blocks in the panel, and its
// min code m of half-block h (0 .. 15) of super-block s (the high nibble of its scale byte).
inline uint16_t K2Dmin(const uint8_t* panel, size_t r, uint64_t supers, uint64_t s) {
  uint16_t h;
  std::memcpy(&h, panel + Q2KP::MinOffset(supers, s) + 2 * r, 2);
  return h;
}
inline uint8_t K2Min(const uint8_t* panel, size_t r, uint64_t s, size_t h) {
  return static_cast<uint8_t>(
      panel[Q6K::ScaleOffset(s * Q6K::kSuperBlocks + h / 2) + (h % 2) * kQuantPanelRows + r] >> 4);
}

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_QUANT_TYPES_H_
