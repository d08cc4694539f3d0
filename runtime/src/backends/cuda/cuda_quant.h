// How the cuda backend keeps a quantised matrix on the device when its weights stay quantised
// (FFLITE_CUDA_QUANT=packed, README's cuda section): re-laid once at upload from the file's panels
// (kernels/quant_types.h) into rows the GPU reads with 16-byte loads, the values and scales
// unchanged, never re-quantised. Plain C++ (no CUDA header) for the host side and the tests; the
// element functions are also compiled for the device (FFLITE_CUDA_HD), so the kernels and the tests
// read the layout through the same code.
//
// Six kinds; the layout of a [rows, cols] matrix of b = ceil(cols / 32) blocks per row (the
// k-quants' kinds: b a multiple of 8, their rows whole super-blocks of 8 blocks; S = b / 8):
//   codes: row r at r · RowBytes(kind, b), 16-byte aligned when the base is;
//     kQ8, kQ6K, kQ5K, kQ2K (byte codes): byte j of the row = value j (int8, two's complement);
//     kQ4: 16 bytes per block of 32 values: byte i of block c = (value 32c + i) + 8 in its low
//          nibble and (value 32c + 16 + i) + 8 in its high one;
//     kQ4K: kQ4's bytes holding Q4_K's nibbles n in [0, 15] themselves (no offset);
//   scales: row r's record of ScaleWords(kind, b) 16-bit words at r · ScaleWords(kind, b);
//     kQ8, kQ4: word c = block c's scale (f16 bits); weight (r, j) = value · f32(scale);
//     kQ4K, kQ5K: words 2s and 2s + 1 = super-block s's d and dmin (f16 bits), then word 2S + c
//          = block c's 6-bit scale sc | its 6-bit min m << 8; weight (r, j) = (d·sc)·n - dmin·m;
//     kQ6K, kQ2K: word s = super-block s's d (f16 bits), kQ2K then word S + s = its dmin; then
//          word (kQ2K ? 2S : S) + c = block c's two int8 scales, sc of its first 16 values | sc
//          of its last 16 << 8, and for kQ2K word 2S + b + c its two halves' 4-bit mins m
//          likewise; weight (r, j) = (d·sc)·value (kQ2K: - dmin·m);
//   each product in f32 as the file's dequantisation computes it (kernels/quant_types.h).
// The file's types by kind (KeepsQuantisedOnDevice): I8, IQ4_NL and MXFP4 (their int8 levels; an
// MXFP4 matrix only where its E8M0 scales all fit f16, e in [104, 143], and dequantised on upload
// otherwise) as kQ8, 8.5 bits per weight; I4 as kQ4 and Q4_K as kQ4K, 4.5 and 4.625, the file's own; Q6_K, Q3_K
// and IQ4_XS (Q6_K's scales and arithmetic) as kQ6K, 8.5625; Q5_K as kQ5K, 8.625; Q2_K as kQ2K,
// 9.125.
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

enum class QKind : uint8_t { kQ8, kQ4, kQ4K, kQ6K, kQ5K, kQ2K };

constexpr uint32_t kQBlock = 32;

// Whether K keeps a byte per value (else a nibble).
FFLITE_CUDA_HD constexpr bool ByteCodes(QKind kind) {
  return kind != QKind::kQ4 && kind != QKind::kQ4K;
}

// Values in 16 bytes of codes: a lane's load.
FFLITE_CUDA_HD constexpr uint32_t ValuesPer16Bytes(QKind kind) { return ByteCodes(kind) ? 16 : 32; }

// Bytes of a row of `blocks` blocks.
FFLITE_CUDA_HD constexpr uint64_t RowBytes(QKind kind, uint64_t blocks) {
  return blocks * (ByteCodes(kind) ? 32 : 16);
}

// 16-bit words of a row's scale record (the k-quants' kinds: `blocks` a multiple of 8).
FFLITE_CUDA_HD constexpr uint64_t ScaleWords(QKind kind, uint64_t blocks) {
  return kind == QKind::kQ4K || kind == QKind::kQ5K ? blocks + blocks / 4
         : kind == QKind::kQ6K                      ? blocks + blocks / 8
         : kind == QKind::kQ2K                      ? 2 * blocks + blocks / 4
                                                    : blocks;
}

// Whether weights are value · scale less a min (per block; kQ2K per half-block).
FFLITE_CUDA_HD constexpr bool HasMin(QKind kind) {
  return kind == QKind::kQ4K || kind == QKind::kQ5K || kind == QKind::kQ2K;
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

// Value i of 16 bytes of codes held as four little-endian words (byte codes: i < 16; kQ4, kQ4K:
// i < 32, the block's value i), as f32 without an int-to-float conversion (a quarter-rate
// instruction on the GPU): the code u (byte codes: the byte with its sign bit flipped, value +
// 128; kQ4: the nibble, value + 8; kQ4K: the nibble, the value) in the low mantissa bits of 2^23
// gives 2^23 + u exactly, less 2^23 + the offset: the value, exactly.
template <QKind K>
FFLITE_CUDA_HD float ValueF32Of16(const uint32_t (&w)[4], int i) {
  if constexpr (ByteCodes(K)) {
    const uint32_t u = ((w[i / 4] >> (8 * (i % 4))) & 0xffu) ^ 0x80u;
    return BitsAsF32(0x4b000000u | u) - 8388736.0f;  // 2^23 + 128
  } else {
    const int b = i % 16;
    const uint32_t u = (w[b / 4] >> (8 * (b % 4) + (i < 16 ? 0 : 4))) & 0xfu;
    return BitsAsF32(0x4b000000u | u) - (K == QKind::kQ4 ? 8388616.0f : 8388608.0f);  // + 8, + 0
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
  if constexpr (ByteCodes(K)) {
    return static_cast<int8_t>(row[j]);
  } else {
    const uint32_t i = j % kQBlock;
    const uint8_t byte = row[16 * (j / kQBlock) + i % 16];
    return static_cast<int>(i < 16 ? byte & 0xfu : byte >> 4) - (K == QKind::kQ4 ? 8 : 0);
  }
}

// The scale and min of value j (and of the values sharing them: its block; kQ6K and kQ2K its
// half-block) from a row's scale record `rec` of a row of `blocks` blocks: kQ8 and kQ4 the f16
// scale and 0; kQ4K and kQ5K d·sc and dmin·m (each an f16 times 6 bits: exact in f32); kQ6K d·sc
// (an f16 times 8 bits) and 0; kQ2K d·sc and dmin·m (4 bits each).
template <QKind K>
FFLITE_CUDA_HD void ScaleMinAt(const uint16_t* rec, uint32_t blocks, uint32_t j, float* scale,
                               float* min) {
  const uint32_t c = j / kQBlock, s = c / 8, supers = blocks / 8;
  const uint32_t half = j % kQBlock < 16 ? 0 : 8;  // the shift of j's half in a word of two
  if constexpr (K == QKind::kQ4K || K == QKind::kQ5K) {
    const uint32_t sm = rec[2 * supers + c];
    *scale = ScaleToF32(rec[2 * s]) * static_cast<float>(sm & 0xffu);
    *min = ScaleToF32(rec[2 * s + 1]) * static_cast<float>(sm >> 8);
  } else if constexpr (K == QKind::kQ6K || K == QKind::kQ2K) {
    constexpr uint32_t kSc = K == QKind::kQ2K ? 2 : 1;  // the scales' first word, in supers
    const int8_t sc = static_cast<int8_t>((rec[kSc * supers + c] >> half) & 0xffu);
    *scale = ScaleToF32(rec[s]) * static_cast<float>(sc);
    *min = 0.0f;
    if constexpr (K == QKind::kQ2K) {
      const uint32_t m = (rec[2 * supers + blocks + c] >> half) & 0xffu;
      *min = ScaleToF32(rec[supers + s]) * static_cast<float>(m);
    }
  } else {
    *scale = ScaleToF32(rec[c]);
    *min = 0.0f;
  }
}

// Weight (r, j) of a matrix of `blocks` blocks per row, as the file's dequantisation gives it:
// value · scale (both exact in f32 or not, the same product), less the min where there is one
// (one rounding after exact products).
template <QKind K>
FFLITE_CUDA_HD float WeightAt(const uint8_t* codes, const uint16_t* scales, uint32_t blocks,
                              uint32_t r, uint32_t j) {
  const uint8_t* row = codes + static_cast<uint64_t>(r) * RowBytes(K, blocks);
  float scale, min;
  ScaleMinAt<K>(scales + static_cast<uint64_t>(r) * ScaleWords(K, blocks), blocks, j, &scale,
                &min);
  const float w = scale * static_cast<float>(ValueAt<K>(row, j));
  return HasMin(K) ? w - min : w;
}

// Host side (cuda_quant.cc). Whether `t` can stay quantised on the device: a matrix of one of
// the types above in the plain panel layout (a block-rotated one multiplies rotated activations:
// kept as f32; the k-quants' rows whole super-blocks, as the loader checks), and its kind.
bool KeepsQuantisedOnDevice(const TensorView& t, QKind* kind);
// Bytes of the codes and of the scales of t's device layout.
uint64_t DeviceCodeBytes(QKind kind, uint64_t rows, uint64_t cols);
uint64_t DeviceScaleBytes(QKind kind, uint64_t rows, uint64_t cols);
// Writes t's device layout (t: KeepsQuantisedOnDevice) into codes and scales, fully.
void RelayForDevice(const TensorView& t, QKind kind, uint8_t* codes, uint16_t* scales);

}  // namespace cuda
}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_QUANT_H_
