// The offline quantiser of weight matrices (f32 -> I8 / I4 / Q4_K / Q5_K / Q6_K in the stored panel
// layout of quant_layout.h), used by the converter; per block it searches the scale.
#ifndef FFLITE_RUNTIME_SRC_FORMAT_QUANTIZE_H_
#define FFLITE_RUNTIME_SRC_FORMAT_QUANTIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "format/dtype.h"

namespace fflite {

struct QuantizeOptions {
  // true: search each block's scale for the least squared error (the stored, f16-rounded scale
  // is what is evaluated; never worse than `search = false` on any block).
  // false: plain absmax round-to-nearest (llama.cpp Q8_0 / Q4_0 style: I8 maps the block's
  // largest magnitude to ±127, I4 maps the largest-magnitude element to -8), for comparison.
  bool search = true;
  // Rotate each block of 32 of every row by Rotate32 first (layout PANEL16_K4_HADAMARD32): an
  // outlier weight is spread over its block instead of setting the block's scale.
  bool rotate = false;
  // Q4_K, Q5_K, Q6_K only: k non-negative weights of each column's squared error (the mean square
  // of the inputs that column meets, from a calibration run: an importance matrix), or nullptr
  // (all equal). Not owned; read during the call only.
  const float* importance = nullptr;
};

// Of the dequantised matrix (rotated back if rotated) against the source, over the rows·k
// elements of the matrix (padding excluded).
struct QuantStats {
  double nmse = 0;           // Σ(w − ŵ)² / Σ w²  (0 when Σ w² = 0)
  double max_abs_error = 0;  // max |w − ŵ|
  double kurtosis = 0;       // of the source weights: E[(w−μ)^4] / σ^4 (3 for a Gaussian); 0 if σ = 0
};

// Whether QuantizeMatrix writes `dtype`: every quantised dtype but those whose values index a
// fixed table of levels (iq4_xs, iq4_nl: kept from GGUF files only; mxfp4: from MXFP4 blocks).
bool QuantiserWrites(DType dtype);

// Quantises w [rows, k] (f32, row-major, not owned, only read) to `dtype` (I8, I4, or the k-quants
// Q4_K, Q5_K, Q6_K: k a multiple of 256, never rotated; see quantize_kquant.h) in the stored
// layout, writing exactly TensorBytes(dtype, {rows, k}, layout) bytes to dst (caller-owned;
// layout = options.rotate ? PANEL16_K4_HADAMARD32 : PANEL16_K4; padding rows, blocks and bytes
// are written too: zero values and zero scales, except that a rotated block's padding columns
// hold the rotation of the zero-padded block). Fills *stats when stats != nullptr.
// A scale beyond the f16 range is clamped to ±65504 (the block is then clipped, never Inf).
// Single-threaded; an 11008 × 4096 matrix (45M weights) takes about 1 s (i8) / 2.6 s (i4) with
// the search, 0.4 s without, on one x86-64 core.
// Errors (InvalidArgument, nothing written to dst): the first NaN or Inf in w, naming `what`,
// the row and the column ("layers.0.mlp.down_proj.weight: element [3, 17] is NaN; cannot
// quantise"); a dtype that is not quantised; rows or k above 2^20 (the loader's limit); a k-quant
// with k not a multiple of 256, or rotated; a negative or non-finite importance.
absl::Status QuantizeMatrix(DType dtype, uint64_t rows, uint64_t k, const float* w,
                            const QuantizeOptions& options, const std::string& what, uint8_t* dst,
                            QuantStats* stats /* may be nullptr */);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_FORMAT_QUANTIZE_H_
