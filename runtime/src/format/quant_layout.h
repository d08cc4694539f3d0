// The stored layout of quantised weight matrices (I8, I4), shared by the converter, the loader,
// the reference backend and every kernel. The file holds the weights exactly as the kernels read
// them on every ISA, so they are used straight from the mapping: no repacking, no second copy.
//
// A matrix W[rows, k] (rows = out_features, k = in_features) is quantised in blocks of
// kQuantBlock = 32 consecutive elements of a row, each with an f16 scale s: W[r, j] ≈ s · q.
// k is padded with zeros to k_blocks · 32 and rows to panels · 16 (zero quants, zero scales),
// which changes no product. Rows are grouped in panels of kQuantPanelRows = 16; panel p holds
// rows [16p, 16p + 16) and is `panel_bytes` long:
//
//   scales: f16 [k_blocks][16]          (scale of row 16p + r, block b at index b·16 + r),
//           padded with zeros to a multiple of 64 bytes (scale_bytes)
//   then per block b < k_blocks, `block_panel_bytes` each:
//     I8: 8 groups g of 64 bytes; byte g·64 + 4r + i = q[16p + r][32b + 4g + i]   (int8)
//     I4: 4 chunks c of 64 bytes; byte c·64 + 4r + i holds
//           low nibble  = q[16p + r][32b + 4c + i] + 8,
//           high nibble = q[16p + r][32b + 4(c + 4) + i] + 8                       (q in [-8, 7])
//
// So one 64-byte load is 16 rows × 4 consecutive k: a 16-lane int32 dot-product step (AVX-512
// VNNI), two 8-lane ones (AVX2) or four 4-lane ones (NEON sdot); an I4 load unpacks into the
// same shape for groups c and c + 4 with one mask and one shift. Every panel and block starts
// 64-byte aligned. Threads split a matrix at panel boundaries.
//
// Rotated layout (PANEL16_K4_HADAMARD32): the stored matrix is W' = W·Rᵀ per block, where
// R = H·D / sqrt(32), H the 32×32 Sylvester-Hadamard matrix and D = diag(signs of
// kHadamardSigns). R is orthogonal, so W·x = W'·(R·x): the runtime applies R to each block of 32
// activations (Rotate32) and multiplies by the stored weights; one huge weight is spread over its
// block instead of setting the block's scale.
#ifndef FFLITE_RUNTIME_SRC_FORMAT_QUANT_LAYOUT_H_
#define FFLITE_RUNTIME_SRC_FORMAT_QUANT_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "format/dtype.h"

namespace fflite {

inline constexpr size_t kQuantBlock = 32;      // elements of a row per scale
inline constexpr size_t kQuantPanelRows = 16;  // rows per panel
// Bit j set: element j of a block is negated before the Hadamard transform (D in R = H·D/√32).
inline constexpr uint32_t kHadamardSigns = 0x9e3779b9u;

struct QuantGeometry {
  uint64_t rows = 0, k = 0;
  uint64_t panels = 0;             // ceil(rows / 16)
  uint64_t k_blocks = 0;           // ceil(k / 32)
  uint64_t block_panel_bytes = 0;  // I8: 512, I4: 256 (16 rows × one block)
  uint64_t scale_bytes = 0;        // k_blocks · 32 rounded up to 64
  uint64_t panel_bytes = 0;        // scale_bytes + k_blocks · block_panel_bytes
  uint64_t bytes() const { return panels * panel_bytes; }
};

// Geometry of a quantised [rows, k] matrix of `dtype` (I8 or I4); all zeros for another dtype.
// rows, k <= 2^20 (the loader's limit) keep every product far from overflow.
QuantGeometry QuantMatrixGeometry(DType dtype, uint64_t rows, uint64_t k);

// Writes the stored layout from quantised values: q [rows, k] (I8: [-127, 127], I4: [-8, 7]),
// scales [rows, k_blocks] as f16 bits. dst: geometry.bytes() bytes, fully written (padding zero).
void PackQuantMatrix(DType dtype, uint64_t rows, uint64_t k, const int8_t* q,
                     const uint16_t* scales_f16, uint8_t* dst);
// The quantised value and the scale of element (r, j) of a stored matrix (the inverse of
// PackQuantMatrix; for tests, the loader's checks and the reference backend).
int8_t QuantValueAt(DType dtype, const QuantGeometry& g, const uint8_t* data, uint64_t r,
                    uint64_t j);
uint16_t QuantScaleAt(const QuantGeometry& g, const uint8_t* data, uint64_t r, uint64_t block);

// v[0..32) <- R·v = H·(D·v) / sqrt(32), in place (the activations' side of the rotated layout,
// and the converter's rotation of each weight block). Unrotate32 applies Rᵀ = D·H / sqrt(32).
void Rotate32(float* v);
void Unrotate32(double* v);
void Rotate32(double* v);

// Checks every scale of a stored matrix (padding included) is finite; a scale may be negative
// (the converter maps a block's largest magnitude to -8 when that is the better fit). Returns
// false and the (row, block) of the first bad scale, or true.
bool QuantScalesValid(const QuantGeometry& g, const uint8_t* data, uint64_t* bad_row,
                      uint64_t* bad_block);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_FORMAT_QUANT_LAYOUT_H_
