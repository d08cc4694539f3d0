// How the cuda backend keeps an I8 or I4 matrix on the device when its weights stay quantised
// (FFLITE_CUDA_QUANT=packed, README's cuda section): re-laid once at upload from the file's panels
// (kernels/quant_types.h) into rows the GPU reads with 16-byte loads, the values and scales
// unchanged, never re-quantised. Plain C++ (no CUDA header) for the host side and the tests; the
// element functions are also compiled for the device (FFLITE_CUDA_HD), so the kernels and the tests
// read the layout through the same code.
//
// The layout of a [rows, cols] matrix of b = ceil(cols / 32) blocks per row:
//   codes: row r at r · RowBytes(kind, b), 16-byte aligned when the base is;
//     kQ8: byte j of the row = value j (int8, two's complement);
//     kQ4: 16 bytes per block of 32 values: byte i of block c = (value 32c + i) + 8 in its low
//          nibble and (value 32c + 16 + i) + 8 in its high one;
//   scales: [rows, b] f16 bits, the block's scale; weight (r, j) = value · f32(scale).
// Values past cols (in a row's last block) are 0, the file's padding: they add nothing.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_QUANT_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_QUANT_H_

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define FFLITE_CUDA_HD __host__ __device__ __forceinline__
#else
#define FFLITE_CUDA_HD inline
#endif

#include "base/half.h"

namespace fflite {

struct TensorView;

namespace cuda {

enum class QKind : uint8_t { kQ8, kQ4 };

constexpr uint32_t kQBlock = 32;

// Values in 16 bytes of codes: a lane's load.
FFLITE_CUDA_HD constexpr uint32_t ValuesPer16Bytes(QKind kind) {
  return kind == QKind::kQ8 ? 16 : 32;
}

// Bytes of a row of `blocks` blocks.
FFLITE_CUDA_HD constexpr uint64_t RowBytes(QKind kind, uint64_t blocks) {
  return blocks * (kind == QKind::kQ8 ? 32 : 16);
}

// A block's scale (f16 bits) as f32, exactly.
FFLITE_CUDA_HD float ScaleToF32(uint16_t s) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(s));
#else
  return F16ToF32(s);
#endif
}

FFLITE_CUDA_HD float BitsAsF32(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return BitsToFloat(bits);
#endif
}

// Value i of 16 bytes of codes held as four little-endian words (kQ8: i < 16; kQ4: i < 32, the
// block's value i), as f32 without an int-to-float conversion (a quarter-rate instruction on the
// GPU): the code u (kQ8: the byte with its sign bit flipped, value + 128; kQ4: the nibble, value
// + 8) in the low mantissa bits of 2^23 gives 2^23 + u exactly, less 2^23 + the offset: the
// value, exactly.
template <QKind K>
FFLITE_CUDA_HD float ValueF32Of16(const uint32_t (&w)[4], int i) {
  if constexpr (K == QKind::kQ8) {
    const uint32_t u = ((w[i / 4] >> (8 * (i % 4))) & 0xffu) ^ 0x80u;
    return BitsAsF32(0x4b000000u | u) - 8388736.0f;  // 2^23 + 128
  } else {
    const int b = i % 16;
    const uint32_t u = (w[b / 4] >> (8 * (b % 4) + (i < 16 ? 0 : 4))) & 0xfu;
    return BitsAsF32(0x4b000000u | u) - 8388616.0f;  // 2^23 + 8
  }
}

// Σ_i value_i · x[i] over the values of 16 bytes of codes, in the order of i (each product exact:
// a value has at most 8 bits). The decode kernels' step: times the block's scale after.
template <QKind K>
FFLITE_CUDA_HD float DotOf16(const uint32_t (&w)[4], const float* x) {
  float s = 0.0f;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < static_cast<int>(ValuesPer16Bytes(K)); ++i) {
    s += ValueF32Of16<K>(w, i) * x[i];
  }
  return s;
}

// Value j of a row of codes.
template <QKind K>
FFLITE_CUDA_HD int ValueAt(const uint8_t* row, uint32_t j) {
  if constexpr (K == QKind::kQ8) {
    return static_cast<int8_t>(row[j]);
  } else {
    const uint32_t i = j % kQBlock;
    const uint8_t byte = row[16 * (j / kQBlock) + i % 16];
    return static_cast<int>(i < 16 ? byte & 0xfu : byte >> 4) - 8;
  }
}

// Weight (r, j) of a matrix of `blocks` blocks per row: value · scale, exact in f32 (an 8-bit
// value times an f16), as the file's dequantisation gives it.
template <QKind K>
FFLITE_CUDA_HD float WeightAt(const uint8_t* codes, const uint16_t* scales, uint32_t blocks,
                              uint32_t r, uint32_t j) {
  const uint8_t* row = codes + static_cast<uint64_t>(r) * RowBytes(K, blocks);
  return static_cast<float>(ValueAt<K>(row, j)) *
         ScaleToF32(scales[static_cast<uint64_t>(r) * blocks + j / kQBlock]);
}

// Host side (cuda_quant.cc). Whether `t` can stay quantised on the device: an I8 or I4 matrix in
// the plain panel layout (a block-rotated one multiplies rotated activations: kept as f32), and
// its kind.
bool KeepsQuantisedOnDevice(const TensorView& t, QKind* kind);
// Bytes of the codes and of the scales of t's device layout.
uint64_t DeviceCodeBytes(QKind kind, uint64_t rows, uint64_t cols);
uint64_t DeviceScaleBytes(uint64_t rows, uint64_t cols);
// Writes t's device layout (t: KeepsQuantisedOnDevice) into codes and scales, fully.
void RelayForDevice(const TensorView& t, QKind kind, uint8_t* codes, uint16_t* scales);

}  // namespace cuda
}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_QUANT_H_
