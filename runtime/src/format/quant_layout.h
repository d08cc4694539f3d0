// The quantised weight matrices of a model file as the converter writes them and the loader and
// the reference read them: the layout of kernels/quant_types.h (one traits type per quantised
// type, which every kernel reads too), addressed by the file's dtypes.
#ifndef FFLITE_RUNTIME_SRC_FORMAT_QUANT_LAYOUT_H_
#define FFLITE_RUNTIME_SRC_FORMAT_QUANT_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "format/dtype.h"
#include "kernels/quant_types.h"
#include "kernels/rotate.h"

namespace fflite {

// Geometry of a quantised [rows, k] matrix of `dtype` (I8 or I4); all zeros for another dtype.
QuantGeometry QuantMatrixGeometry(DType dtype, uint64_t rows, uint64_t k);

// Writes the stored layout from quantised values: q [rows, k] (within the type's range: I8
// [-127, 127], I4 [-8, 7]), scales [rows, k_blocks] as f16 bits (MXFP4, whose scales are E8M0
// bytes: each scale's magnitude as the power of two 2^(e - 128) of its f16 exponent, exact for a
// scale that is one; zero stays zero). dst: geometry.bytes() bytes, fully written (padding zero).
void PackQuantMatrix(DType dtype, uint64_t rows, uint64_t k, const int8_t* q,
                     const uint16_t* scales_f16, uint8_t* dst);
// MXFP4 from its levels q [rows, k] (kMxfp4Levels' integers, E2M1 values doubled) and E8M0 scale
// bytes e [rows, k_blocks] (d = 2^(e - 128); each e in [2, 254], or 0 for a zero scale).
void PackMxfp4Matrix(uint64_t rows, uint64_t k, const int8_t* q, const uint8_t* e8m0,
                     uint8_t* dst);
// Re-lays a stored [rows, k] matrix `src` as the stored [stored_rows, stored_k] matrix `dst`
// (stored_rows >= rows, stored_k >= k; dst: that geometry's bytes() bytes): the same scales and
// values, the added rows and blocks with zero scales and zero values, as PackQuantMatrix pads.
void RepadQuantMatrix(DType dtype, uint64_t rows, uint64_t k, const uint8_t* src,
                      uint64_t stored_rows, uint64_t stored_k, uint8_t* dst);
// The quantised value and the scale of element (r, j) of a stored matrix (the inverse of
// PackQuantMatrix; for tests, the loader's checks and the reference backend).
int8_t QuantValueAt(DType dtype, const QuantGeometry& g, const uint8_t* data, uint64_t r,
                    uint64_t j);
uint16_t QuantScaleAt(const QuantGeometry& g, const uint8_t* data, uint64_t r, uint64_t block);
// The same scale as the kernels read it, as f32, for any type of the Q8 scheme (MXFP4's E8M0
// bytes included; QuantScaleAt is for the f16 ones).
float QuantBlockScale(DType dtype, const QuantGeometry& g, const uint8_t* data, uint64_t r,
                      uint64_t block);

// Checks every scale of a stored matrix of `dtype` (padding included): I8/I4 scales finite (a
// scale may be negative: the converter maps a block's largest magnitude to -8 when that is the
// better fit); MXFP4's E8M0 bytes neither 1 nor 255; Q4_K's and Q5_K's d and dmin finite and
// their 6-bit codes at most 63; Q6_K's d finite (Q2_K's d and dmin). Returns false, the (row,
// block) of the first bad one, what it is ("scale") and what is wrong with it ("is not finite"),
// or true.
bool QuantScalesValid(DType dtype, const QuantGeometry& g, const uint8_t* data, uint64_t* bad_row,
                      uint64_t* bad_block, const char** what, const char** problem);

// Q4_K: writes the stored layout of a [rows, k] matrix from GGUF's Q4_K rows (k a multiple of 256;
// each row k / 256 blocks of 144 bytes: f16 d, f16 dmin, 12 bytes of packed 6-bit scales and
// mins, 128 bytes of nibbles), re-laid, not re-quantised. dst: the geometry's bytes, fully
// written (padding rows zero).
void PackQ4KFromGguf(uint64_t rows, uint64_t k, const uint8_t* gguf, uint8_t* dst);
// Q5_K: the same from GGUF's Q5_K rows (each row k / 256 blocks of 176 bytes: f16 d, f16 dmin,
// Q4_K's 12 bytes of scales and mins, 32 bytes of fifth bits, 128 bytes of nibbles), as dtype
// Q5_K_PACKED (GGUF's size) or Q5_K (a byte per value).
void PackQ5KFromGguf(DType dtype, uint64_t rows, uint64_t k, const uint8_t* gguf, uint8_t* dst);
// Q6_K: the same from GGUF's Q6_K rows (each row k / 256 blocks of 210 bytes: 128 bytes of low
// nibbles, 64 of high bit pairs, 16 int8 scales, f16 d), as dtype Q6_K_PACKED or Q6_K (or
// Q3_K_PACKED, for blocks whose values are all in [-4, 3]: fflite's own Q3_K quantiser writes
// them so).
void PackQ6KFromGguf(DType dtype, uint64_t rows, uint64_t k, const uint8_t* gguf, uint8_t* dst);
// Q2_K: the same from GGUF's Q2_K rows (each row k / 256 blocks of 84 bytes: 16 bytes of 4-bit
// scales (low nibbles) and mins (high), 64 bytes of 2-bit values, f16 d, f16 dmin), as dtype
// Q2_K_PACKED.
void PackQ2KFromGguf(uint64_t rows, uint64_t k, const uint8_t* gguf, uint8_t* dst);
// Q6_K from super-blocks of any source: block(row, super, &d, scales, values) gives super-block
// `super` of row `row`: d's f16 bits, 16 int8 scales (one per 16 values) and the 256 values, int8
// in [-127, 127] for dtype Q6_K (its kernels take the whole range), in [-32, 31] for
// Q6_K_PACKED (6 bits; the caller checks), in [-4, 3] for Q3_K_PACKED (3 bits; the caller
// checks), in [0, 3] for Q2_K_PACKED (2 bits; its scales are GGUF's bytes, the scale in the low
// nibble and the min in the high one, and its dmin are written apart, PackQ2KFromGguf),
// levels of kIq4Levels for IQ4_XS (the caller checks; anything else is written as the nearest
// level), each weight (d·scale)·value. A dtype without Q6_K's scales writes nothing.
using Q6KBlockFn = std::function<void(uint64_t row, uint64_t super, uint16_t* d, int8_t* scales,
                                      int8_t* values)>;
void PackQ6KFromBlocks(DType dtype, uint64_t rows, uint64_t k, const Q6KBlockFn& block,
                       uint8_t* dst);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_FORMAT_QUANT_LAYOUT_H_
