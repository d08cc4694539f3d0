// The ggml tensor types a GGUF file can hold (ids, names, block geometry) and their exact
// dequantisation to f32, as the GGUF/ggml specification defines it.
#ifndef FFLITE_CONVERTER_GGUF_TYPES_H_
#define FFLITE_CONVERTER_GGUF_TYPES_H_

#include <cstdint>

#include "absl/status/status.h"

namespace fflite {
namespace converter {

// ggml_type ids as stored in a GGUF tensor info. The gaps are ids ggml has removed (4, 5: Q4_2,
// Q4_3; 31-33, 36-38: the repacked Q4_0_x_y / IQ4_NL_x_y layouts); a file that uses one is
// rejected like any unknown id.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;      // as llama.cpp / gguf-py print it: "Q4_K", "F16", "IQ4_XS", ...
  uint32_t block_elems;  // elements per block (1 for the plain types)
  uint32_t block_bytes;  // bytes per block
  bool dequantizable;    // by DequantizeGguf
};

// The type with ggml id `id`, or nullptr for an id that is not a known type (including the
// removed ids 4, 5, 31-33, 36-38, and ids newer than MXFP4).
const GgmlTypeInfo* FindGgmlType(uint32_t id);

// Dequantises `n` elements (a multiple of the type's block_elems) of `type` from `src`
// (n / block_elems * block_bytes bytes, any alignment, little-endian) into dst, with the same
// float operations in the same order as ggml's reference dequantize_row_* functions, so the
// results are bit-identical to theirs (f16 and bf16 are widened exactly). Dequantizable: F32, F16,
// BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0,
// MXFP4. Errors: InvalidArgument for n not a multiple of the block (or an id outside the enum);
// Unimplemented, naming the type, for one not dequantizable here (the integer types, F64, Q8_1,
// Q8_K and the grid-based IQ1/IQ2/IQ3 types).
absl::Status DequantizeGguf(GgmlType type, const uint8_t* src, uint64_t n, float* dst);

// The types whose values are an integer in [-128, 127] times one f16 scale per block of 32, so
// that fflite's I8 holds them exactly: Q8_0 (q·d), Q5_0 ((q - 16)·d), IQ4_NL (level·d) and MXFP4
// (its doubled e2m1 value times 2^(e - 128), when that power of two is an f16: e in [104, 143]).
// Writes the scale's f16 bits and the 32 integers, such that the specification's value of element
// j is exactly q[j] · scale (the same f32 product). False for another type, and for an MXFP4 block
// whose scale is not an f16.
bool GgufBlockAsInt8(GgmlType type, const uint8_t* block, uint16_t* scale_f16, int8_t q[32]);
// Whether every block of an MXFP4 tensor's `n` elements at `src` has a scale dtype mxfp4 keeps as
// it is, e in [2, 254] (E8m0ScaleHeld) (true for Q8_0, Q5_0 and IQ4_NL, whose scales are f16
// already and which i8 holds; false for other types).
bool GgufScalesFitInt8(GgmlType type, const uint8_t* src, uint64_t n);
// Half of an E8M0 scale, 2^(e - 128), as f16 bits where f16 holds it exactly (e in [104, 143]);
// false otherwise: MXFP4's scale as an i8 block (GgufBlockAsInt8) takes it (its integers are e2m1
// values doubled). Dtype mxfp4 keeps the byte itself.
bool E8m0HalfAsF16(uint8_t e, uint16_t* f16);

// The types other than Q6_K whose values fflite's q6_k holds exactly, (d · scale) · value with an
// f16 d per 256, an int8 scale per 16 and int8 values: Q3_K ((d · (sc − 32)) · v, v in [−4, 3])
// and IQ4_XS ((d · (ls − 32)) · level, a scale per 32 given to both its halves, levels in
// [−127, 113]). Writes d's f16 bits, the 16 scales and the 256 values of the block, such that
// the specification's value e is exactly (d · scales[e / 16]) · values[e] (the same f32 products
// in the same order), and returns true; false for another type.
bool GgufBlockAsQ6K(GgmlType type, const uint8_t* block, uint16_t* d, int8_t* scales,
                    int8_t* values);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_GGUF_TYPES_H_
