// fflite's own k-quant quantiser: one row of weights to GGUF's Q2_K to Q6_K blocks (the
// specification's bytes, which quant_layout.h re-lays for the kernels), with an optional
// importance per column (the mean square of the inputs that column meets: each weight's error
// then counts as much as the output error it causes).
#ifndef FFLITE_RUNTIME_SRC_FORMAT_QUANTIZE_KQUANT_H_
#define FFLITE_RUNTIME_SRC_FORMAT_QUANTIZE_KQUANT_H_

#include <cstdint>

namespace fflite {

// Bytes of one GGUF block of 256 weights.
inline constexpr uint64_t kQ4KBlockBytes = 144;
inline constexpr uint64_t kQ5KBlockBytes = 176;
inline constexpr uint64_t kQ6KBlockBytes = 210;
inline constexpr uint64_t kQ2KBlockBytes = 84;

// Quantises x[k] (k a multiple of 256, finite values) to k / 256 blocks at `out`.
// importance: k non-negative weights of the squared error per column, or nullptr (all equal).
// Per sub-block the scale (and for Q4_K / Q5_K the min) is searched for the least weighted
// squared error, each candidate's values refitted in closed form; then the super-block's f16
// d (and dmin) are set and each sub-block's 6-bit (Q6_K: 8-bit) codes chosen among the nearest
// ones by the error of the values they give, the values re-rounded for the stored scales.
void QuantizeQ4KRow(const float* x, const float* importance, uint64_t k, uint8_t* out);
void QuantizeQ5KRow(const float* x, const float* importance, uint64_t k, uint8_t* out);
void QuantizeQ6KRow(const float* x, const float* importance, uint64_t k, uint8_t* out);
// Q2_K: Q4_K's search on sub-blocks of 16 with values in [0, 3] and 4-bit scales and mins,
// written as GGUF's 84-byte blocks (PackQ2KFromGguf re-lays them as dtype Q2_K_PACKED).
void QuantizeQ2KRow(const float* x, const float* importance, uint64_t k, uint8_t* out);
// Q3_K's values (in [-4, 3]) and scales (in [-32, 31], its 6-bit codes minus 32) with Q6_K's
// search, written as Q6_K's blocks (PackQ6KFromGguf re-lays them as dtype Q3_K_PACKED): the same
// weights GGUF's Q3_K block of those values, scales and d gives.
void QuantizeQ3KRowAsQ6K(const float* x, const float* importance, uint64_t k, uint8_t* out);

// Writes GGUF's 210-byte Q6_K block from its parts: the values v[256] in [-32, 31] in element
// order, the 16 int8 scales (scale j: elements 16j .. 16j + 15) and d's f16 bits.
void PackQ6KBlock(const int8_t v[256], const int8_t scales[16], uint16_t d, uint8_t* out);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_FORMAT_QUANTIZE_KQUANT_H_
