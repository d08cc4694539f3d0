// GGUF's Q4_K, Q5_K and Q6_K kept as fflite's dtypes q4_k, q5_k and q6_k (kernels/quant_types.h):
// the re-laying of GGUF's rows (against the test's own reading of the specification), every
// float-activation and int8-activation kernel this CPU has against a double product of the
// dequantised weights, the writer's and the loader's checks, and whole layers (dense and MoE) on
// the CPU backend against the reference. That the dequantised values equal the converter's
// DequantizeGguf (itself checked against ggml's) is checked in converter_gguf_test.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/half.h"
#include "format/dtype.h"
#include "format/model.h"
#include "format/quant_layout.h"
#include "format/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/quant_kernels.h"
#include "testing/guarded_buffer.h"
#include "testing/model_builder.h"
#include "testing/status_matchers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::GuardedBuffer;
using ::testing::HasSubstr;

constexpr size_t kGgufBlock = 144;  // bytes of a Q4_K super-block of 256 values

// Random GGUF Q4_K rows [rows, k]: d and dmin positive f16 around `scale` / 64 (so that values
// are about ±scale), random 6-bit codes (63 included) and nibbles. `centered`: each block's min
// about 7.5 of its steps, as a quantiser makes of weights centred on zero (dmin = 7.5·d, m = sc
// give exactly that; m is sc ± 1, sc in [32, 63]), instead of independent scales and mins (blocks
// far off zero, whose common offsets make outputs of large cancelling terms).
std::vector<uint8_t> RandomGgufQ4K(uint64_t rows, uint64_t k, std::mt19937& gen, float scale,
                                   bool centered = false) {
  std::vector<uint8_t> b(rows * k / 256 * kGgufBlock);
  std::uniform_int_distribution<int> byte(0, 255), jitter(-1, 1);
  std::uniform_real_distribution<float> unit(0.25f, 1.0f);
  for (uint8_t& v : b) v = static_cast<uint8_t>(byte(gen));
  for (size_t i = 0; i < b.size(); i += kGgufBlock) {
    const float d32 = scale / 64.0f * unit(gen);
    const uint16_t d = F32ToF16(d32);
    const uint16_t dmin =
        F32ToF16(centered ? 7.5f * F16ToF32(d) : scale / 64.0f * 8.0f * unit(gen));
    std::memcpy(&b[i], &d, 2);
    std::memcpy(&b[i + 2], &dmin, 2);
    if (!centered) continue;
    // GGUF's packing of 8 scales and mins (the inverse of Codes below).
    int sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = 32 + byte(gen) % 32;  // llama.cpp's scales fill the 6 bits of the largest
      m[j] = std::clamp(sc[j] + jitter(gen), 0, 63);
    }
    uint8_t* q = &b[i + 4];
    for (int j = 0; j < 4; ++j) {
      q[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
      q[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
      q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
  }
  return b;
}

constexpr size_t kGgufQ6Block = 210;  // bytes of a Q6_K super-block

// Random GGUF Q6_K rows [rows, k]: random 6-bit codes and int8 scales (-128 and 127 included),
// d a positive f16 so that values are about ±scale.
std::vector<uint8_t> RandomGgufQ6K(uint64_t rows, uint64_t k, std::mt19937& gen, float scale) {
  std::vector<uint8_t> b(rows * k / 256 * kGgufQ6Block);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(0.25f, 1.0f);
  for (uint8_t& v : b) v = static_cast<uint8_t>(byte(gen));
  for (size_t i = 0; i < b.size(); i += kGgufQ6Block) {
    const uint16_t d = F32ToF16(scale / 1024.0f * unit(gen));
    std::memcpy(&b[i + 208], &d, 2);
  }
  return b;
}

constexpr size_t kGgufQ5Block = 176;  // bytes of a Q5_K super-block

// Random GGUF Q5_K rows: a random Q4_K block's d, dmin, codes and nibbles (values about ±scale
// once the fifth bit doubles their range: d halved), with 32 random bytes of fifth bits after its
// codes.
std::vector<uint8_t> RandomGgufQ5K(uint64_t rows, uint64_t k, std::mt19937& gen, float scale,
                                   bool centered) {
  const std::vector<uint8_t> q4 = RandomGgufQ4K(rows, k, gen, scale / 2, centered);
  std::vector<uint8_t> b(rows * k / 256 * kGgufQ5Block);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0, j = 0; i < b.size(); i += kGgufQ5Block, j += kGgufBlock) {
    std::memcpy(&b[i], &q4[j], 16);  // d, dmin, codes
    for (size_t l = 0; l < 32; ++l) b[i + 16 + l] = static_cast<uint8_t>(byte(gen));
    std::memcpy(&b[i + 48], &q4[j + 16], 128);  // nibbles
    if (centered) {
      // dmin = 15.5·d: each block's min half of its 32 steps.
      uint16_t d;
      std::memcpy(&d, &b[i], 2);
      const uint16_t dmin = F32ToF16(15.5f * F16ToF32(d));
      std::memcpy(&b[i + 2], &dmin, 2);
    }
  }
  return b;
}

constexpr size_t kGgufIq4Block = 136;  // bytes of an IQ4_XS super-block

// Random GGUF IQ4_XS rows: random scales and indices, d a positive f16 so that values are about
// ±scale (levels up to 127, scales up to 32).
std::vector<uint8_t> RandomGgufIq4xs(uint64_t rows, uint64_t k, std::mt19937& gen, float scale) {
  std::vector<uint8_t> b(rows * k / 256 * kGgufIq4Block);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(0.25f, 1.0f);
  for (uint8_t& v : b) v = static_cast<uint8_t>(byte(gen));
  for (size_t i = 0; i < b.size(); i += kGgufIq4Block) {
    const uint16_t d = F32ToF16(scale / 2048.0f * unit(gen));
    std::memcpy(&b[i], &d, 2);
  }
  return b;
}

// IQ4_NL's and IQ4_XS's levels, from GGUF's specification (ggml's kvalues_iq4nl).
constexpr int kSpecIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

// The test's reading of an IQ4_XS super-block (GGUF's block_iq4_xs: f16 d, u16 scales_h, 4 bytes
// scales_l, 128 bytes qs): sub-block ib's scale is its 6-bit ls - 32, ls's low 4 bits the nibble
// ib % 2 of scales_l[ib / 2], its top 2 bits bits 2ib, 2ib + 1 of scales_h; element 32ib + j
// (j < 16) is the level of qs[16ib + j]'s low nibble, element 32ib + 16 + j of its high one.
void Iq4xsSpec(const uint8_t* in, uint16_t* d, int scale[8], int level[256]) {
  std::memcpy(d, in, 2);
  const uint16_t scales_h = static_cast<uint16_t>(in[2] | in[3] << 8);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((in[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | (((scales_h >> (2 * ib)) & 3) << 4);
    scale[ib] = ls - 32;
    for (int j = 0; j < 16; ++j) {
      const uint8_t q = in[8 + 16 * ib + j];
      level[32 * ib + j] = kSpecIq4Levels[q & 0xf];
      level[32 * ib + 16 + j] = kSpecIq4Levels[q >> 4];
    }
  }
}

// IQ4_XS rows stored as `dtype`: IQ4_XS (level indices) or Q6_K (the levels as int8), both through
// PackQ6KFromBlocks with the test's reading of each super-block.
std::vector<uint8_t> PackIq4xs(DType dtype, uint64_t rows, uint64_t k,
                               const std::vector<uint8_t>& gguf) {
  std::vector<uint8_t> packed(QuantMatrixGeometry(dtype, rows, k).bytes(), 0xee);
  PackQ6KFromBlocks(
      dtype, rows, k,
      [&](uint64_t row, uint64_t s, uint16_t* d, int8_t* scales, int8_t* values) {
        int scale[8], level[256];
        Iq4xsSpec(gguf.data() + (row * (k / 256) + s) * kGgufIq4Block, d, scale, level);
        for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(scale[j / 2]);
        for (int e = 0; e < 256; ++e) values[e] = static_cast<int8_t>(level[e]);
      },
      packed.data());
  return packed;
}

constexpr size_t kGgufQ3Block = 110;  // bytes of a Q3_K super-block

// Random GGUF Q3_K rows: random bytes (every scale code and value), d a positive f16 so that values
// are about ±scale (values up to 4, scales up to 32).
std::vector<uint8_t> RandomGgufQ3K(uint64_t rows, uint64_t k, std::mt19937& gen, float scale) {
  std::vector<uint8_t> b(rows * k / 256 * kGgufQ3Block);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(0.25f, 1.0f);
  for (uint8_t& v : b) v = static_cast<uint8_t>(byte(gen));
  for (size_t i = 0; i < b.size(); i += kGgufQ3Block) {
    const uint16_t d = F32ToF16(scale / 128.0f * unit(gen));
    std::memcpy(&b[i + 108], &d, 2);
  }
  return b;
}

// The test's reading of a Q3_K super-block (GGUF's block_q3_K: hmask[32], qs[64], scales[12], f16
// d): element e = 128n + 32j + l (n < 2, j < 4, l < 32) is ((qs[32n + l] >> 2j) & 3) minus 4 when
// bit 4n + j of hmask[l] is clear; its scale, of sub-block i = e / 16, is the 6-bit code minus 32
// whose low 4 bits are nibble i / 8 of scales[i % 8] and whose top 2 are bits 2(i / 4),
// 2(i / 4) + 1 of scales[8 + i % 4].
void Q3kSpec(const uint8_t* in, uint16_t* d, int scale[16], int value[256]) {
  std::memcpy(d, in + 108, 2);
  const uint8_t* sc = in + 96;
  for (int i = 0; i < 16; ++i) {
    const int low = (sc[i % 8] >> (4 * (i / 8))) & 0xf, high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    scale[i] = (low | high << 4) - 32;
  }
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, j = e % 128 / 32, l = e % 32;
    const int low = (in[32 + 32 * n + l] >> (2 * j)) & 3;
    const bool high = (in[l] >> (4 * n + j)) & 1;
    value[e] = low - (high ? 0 : 4);
  }
}

// Q3_K rows stored as `dtype`: Q3_K_PACKED (3-bit planes) or Q6_K (the values as int8), both
// through PackQ6KFromBlocks with the test's reading of each super-block.
std::vector<uint8_t> PackQ3k(DType dtype, uint64_t rows, uint64_t k,
                             const std::vector<uint8_t>& gguf) {
  std::vector<uint8_t> packed(QuantMatrixGeometry(dtype, rows, k).bytes(), 0xee);
  PackQ6KFromBlocks(
      dtype, rows, k,
      [&](uint64_t row, uint64_t s, uint16_t* d, int8_t* scales, int8_t* values) {
        int scale[16], value[256];
        Q3kSpec(gguf.data() + (row * (k / 256) + s) * kGgufQ3Block, d, scale, value);
        for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(scale[j]);
        for (int e = 0; e < 256; ++e) values[e] = static_cast<int8_t>(value[e]);
      },
      packed.data());
  return packed;
}

constexpr size_t kGgufQ2Block = 84;  // bytes of a Q2_K super-block

// Random GGUF Q2_K rows: random values, d and dmin positive f16 so that values are about ±scale.
// `centered`: each half-block's min about the middle of its four levels (dmin = 1.5·d, m = sc ± 1,
// as a quantiser makes of weights centred on zero), instead of random scales and mins.
std::vector<uint8_t> RandomGgufQ2K(uint64_t rows, uint64_t k, std::mt19937& gen, float scale,
                                   bool centered = false) {
  std::vector<uint8_t> b(rows * k / 256 * kGgufQ2Block);
  std::uniform_int_distribution<int> byte(0, 255), jitter(-1, 1);
  std::uniform_real_distribution<float> unit(0.25f, 1.0f);
  for (uint8_t& v : b) v = static_cast<uint8_t>(byte(gen));
  for (size_t i = 0; i < b.size(); i += kGgufQ2Block) {
    const uint16_t d = F32ToF16(scale / 24.0f * unit(gen));
    const uint16_t dmin = F32ToF16(centered ? 1.5f * F16ToF32(d) : scale / 12.0f * unit(gen));
    std::memcpy(&b[i + 80], &d, 2);
    std::memcpy(&b[i + 82], &dmin, 2);
    if (!centered) continue;
    for (int h = 0; h < 16; ++h) {
      const int sc = 8 + byte(gen) % 8, m = std::clamp(sc + jitter(gen), 0, 15);
      b[i + h] = static_cast<uint8_t>(sc | m << 4);
    }
  }
  return b;
}

// The test's reading of a Q2_K super-block (GGUF's block_q2_K: scales[16], qs[64], f16 d, f16
// dmin): element e = 128n + 32j + l (n < 2, j < 4, l < 32) is bits 2j, 2j + 1 of qs[32n + l];
// sub-block i = e / 16 has the scale in the low nibble of scales[i] and the min in the high one.
void Q2kSpec(const uint8_t* in, uint16_t* d, uint16_t* dmin, int scale[16], int min[16],
             int value[256]) {
  std::memcpy(d, in + 80, 2);
  std::memcpy(dmin, in + 82, 2);
  for (int i = 0; i < 16; ++i) {
    scale[i] = in[i] & 0xf;
    min[i] = in[i] >> 4;
  }
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, j = e % 128 / 32, l = e % 32;
    value[e] = (in[16 + 32 * n + l] >> (2 * j)) & 3;
  }
}

// Q2_K rows as Q6_K (the values as int8 and the scales, without the mins), through
// PackQ6KFromBlocks with the test's reading of each super-block.
std::vector<uint8_t> PackQ2kAsQ6k(uint64_t rows, uint64_t k, const std::vector<uint8_t>& gguf) {
  std::vector<uint8_t> packed(QuantMatrixGeometry(DType::Q6_K, rows, k).bytes(), 0xee);
  PackQ6KFromBlocks(
      DType::Q6_K, rows, k,
      [&](uint64_t row, uint64_t s, uint16_t* d, int8_t* scales, int8_t* values) {
        uint16_t dmin;
        int scale[16], min[16], value[256];
        Q2kSpec(gguf.data() + (row * (k / 256) + s) * kGgufQ2Block, d, &dmin, scale, min, value);
        for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(scale[j]);
        for (int e = 0; e < 256; ++e) values[e] = static_cast<int8_t>(value[e]);
      },
      packed.data());
  return packed;
}

constexpr size_t kGgufIq4nlBlock = 18;  // bytes of an IQ4_NL block of 32

// Random GGUF IQ4_NL rows: an f16 d per 32 (positive, values about ±scale) and random indices.
std::vector<uint8_t> RandomGgufIq4nl(uint64_t rows, uint64_t k, std::mt19937& gen, float scale) {
  std::vector<uint8_t> b(rows * k / 32 * kGgufIq4nlBlock);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(0.25f, 1.0f);
  for (uint8_t& v : b) v = static_cast<uint8_t>(byte(gen));
  for (size_t i = 0; i < b.size(); i += kGgufIq4nlBlock) {
    const uint16_t d = F32ToF16(scale / 128.0f * unit(gen));
    std::memcpy(&b[i], &d, 2);
  }
  return b;
}

// The test's reading of an IQ4_NL block (GGUF's block_iq4_nl: f16 d, 16 bytes qs): element j < 16
// is the level of qs[j]'s low nibble, element j + 16 of its high one.
void Iq4nlSpec(const uint8_t* in, uint16_t* d, int level[32]) {
  std::memcpy(d, in, 2);
  for (int j = 0; j < 16; ++j) {
    level[j] = kSpecIq4Levels[in[2 + j] & 0xf];
    level[j + 16] = kSpecIq4Levels[in[2 + j] >> 4];
  }
}

// IQ4_NL rows stored as `dtype`: IQ4_NL (level indices) or I8 (the levels), through
// PackQuantMatrix with the test's reading of each block.
std::vector<uint8_t> PackIq4nl(DType dtype, uint64_t rows, uint64_t k,
                               const std::vector<uint8_t>& gguf) {
  std::vector<int8_t> q(rows * k);
  std::vector<uint16_t> scales(rows * k / 32);
  for (uint64_t i = 0; i < rows * k / 32; ++i) {
    int level[32];
    Iq4nlSpec(gguf.data() + i * kGgufIq4nlBlock, &scales[i], level);
    for (int j = 0; j < 32; ++j) q[32 * i + j] = static_cast<int8_t>(level[j]);
  }
  std::vector<uint8_t> packed(QuantMatrixGeometry(dtype, rows, k).bytes(), 0xee);
  PackQuantMatrix(dtype, rows, k, q.data(), scales.data(), packed.data());
  return packed;
}

constexpr size_t kGgufMxfp4Block = 17;  // bytes of an MXFP4 block of 32

// Random GGUF MXFP4 rows: an E8M0 byte e per 32 (the largest value 6·2^(e - 127) about 2^-2 to 1
// times `scale`; or e in [top_e - 2, top_e] where top_e is given) and random codes.
std::vector<uint8_t> RandomGgufMxfp4(uint64_t rows, uint64_t k, std::mt19937& gen, float scale,
                                     int top_e = 0) {
  std::vector<uint8_t> b(rows * k / 32 * kGgufMxfp4Block);
  std::uniform_int_distribution<int> byte(0, 255), below(0, 2);
  for (uint8_t& v : b) v = static_cast<uint8_t>(byte(gen));
  const int top =
      top_e != 0 ? top_e : 127 + static_cast<int>(std::floor(std::log2(scale / 6.0f)));
  for (size_t i = 0; i < b.size(); i += kGgufMxfp4Block) {
    b[i] = static_cast<uint8_t>(top - below(gen));
  }
  return b;
}

// The test's reading of an MXFP4 block (OCP MX: an E8M0 scale 2^(e - 127), then 16 bytes, element
// j < 16 the low nibble of byte j, element j + 16 its high one; each an E2M1 number: bit 3 the
// sign, bits 1-2 the exponent E, bit 0 the mantissa M, 0.5·M when E = 0 and 2^(E - 1)·(1 + M/2)
// otherwise): each value as a float (E2M1's -0 as 0, as GGUF's table of doubled values has it).
void Mxfp4Spec(const uint8_t* in, float value[32]) {
  const int e = in[0];
  auto e2m1 = [](int code) {
    const int exp = (code >> 1) & 3, m = code & 1;
    const double v = exp == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, exp - 1);
    return (code & 8) != 0 ? 0.0 - v : v;  // 0 - 0 is +0
  };
  for (int j = 0; j < 16; ++j) {
    value[j] = static_cast<float>(std::ldexp(e2m1(in[1 + j] & 0xf), e - 127));
    value[j + 16] = static_cast<float>(std::ldexp(e2m1(in[1 + j] >> 4), e - 127));
  }
}

// MXFP4 rows stored as `dtype`: MXFP4 (E2M1 codes and each block's E8M0 byte, through
// PackMxfp4Matrix) or I8 (the same integers and an f16 scale d = 2^(e - 128), through
// PackQuantMatrix), each value written as an integer q with d·q the test's reading of the block
// (checked here: q must be an integer in [-12, 12]; for I8, d must be an f16).
std::vector<uint8_t> PackMxfp4(DType dtype, uint64_t rows, uint64_t k,
                               const std::vector<uint8_t>& gguf) {
  std::vector<int8_t> q(rows * k);
  std::vector<uint16_t> scales(rows * k / 32);
  std::vector<uint8_t> e8m0(rows * k / 32);
  for (uint64_t i = 0; i < rows * k / 32; ++i) {
    const uint8_t* in = gguf.data() + i * kGgufMxfp4Block;
    const double d = std::ldexp(1.0, in[0] - 128);
    e8m0[i] = in[0];
    if (dtype == DType::I8) {
      scales[i] = F32ToF16(static_cast<float>(d));
      EXPECT_EQ(F16ToF32(scales[i]), d) << "the test's scales must fit f16";
    }
    float value[32];
    Mxfp4Spec(in, value);
    for (int j = 0; j < 32; ++j) {
      const double v = std::isfinite(value[j]) ? value[j] / d : (value[j] > 0 ? 12 : -12);
      EXPECT_TRUE(v == std::round(v) && std::fabs(v) <= 12) << v;
      q[32 * i + j] = static_cast<int8_t>(v);
    }
  }
  std::vector<uint8_t> packed(QuantMatrixGeometry(dtype, rows, k).bytes(), 0xee);
  if (dtype == DType::MXFP4) {
    PackMxfp4Matrix(rows, k, q.data(), e8m0.data(), packed.data());
  } else {
    PackQuantMatrix(dtype, rows, k, q.data(), scales.data(), packed.data());
  }
  return packed;
}

std::vector<uint8_t> RandomGguf(DType dtype, uint64_t rows, uint64_t k, std::mt19937& gen,
                                float scale, bool centered = false) {
  if (dtype == DType::IQ4_XS) return RandomGgufIq4xs(rows, k, gen, scale);
  if (dtype == DType::IQ4_NL) return RandomGgufIq4nl(rows, k, gen, scale);
  if (dtype == DType::MXFP4) return RandomGgufMxfp4(rows, k, gen, scale);
  if (dtype == DType::Q3_K_PACKED) return RandomGgufQ3K(rows, k, gen, scale);
  if (dtype == DType::Q2_K_PACKED) return RandomGgufQ2K(rows, k, gen, scale, centered);
  if (dtype == DType::Q5_K || dtype == DType::Q5_K_PACKED) {
    return RandomGgufQ5K(rows, k, gen, scale, centered);
  }
  return dtype == DType::Q4_K ? RandomGgufQ4K(rows, k, gen, scale, centered)
                              : RandomGgufQ6K(rows, k, gen, scale);
}

// The stored matrix of GGUF rows.
std::vector<uint8_t> Pack(DType dtype, uint64_t rows, uint64_t k,
                          const std::vector<uint8_t>& gguf) {
  if (dtype == DType::IQ4_XS) return PackIq4xs(dtype, rows, k, gguf);
  if (dtype == DType::IQ4_NL) return PackIq4nl(dtype, rows, k, gguf);
  if (dtype == DType::MXFP4) return PackMxfp4(dtype, rows, k, gguf);
  if (dtype == DType::Q3_K_PACKED) return PackQ3k(dtype, rows, k, gguf);
  std::vector<uint8_t> packed(QuantMatrixGeometry(dtype, rows, k).bytes(), 0xee);
  if (dtype == DType::Q4_K) {
    PackQ4KFromGguf(rows, k, gguf.data(), packed.data());
  } else if (dtype == DType::Q2_K_PACKED) {
    PackQ2KFromGguf(rows, k, gguf.data(), packed.data());
  } else if (dtype == DType::Q5_K || dtype == DType::Q5_K_PACKED) {
    PackQ5KFromGguf(dtype, rows, k, gguf.data(), packed.data());
  } else {
    PackQ6KFromGguf(dtype, rows, k, gguf.data(), packed.data());
  }
  return packed;
}

std::vector<float> Dequantized(DType dtype, uint64_t rows, uint64_t k,
                               const std::vector<uint8_t>& packed) {
  std::vector<float> w(rows * k);
  DequantizeRows(dtype, Layout::PANEL16_K4, rows, k, packed.data(), 0, rows, w.data());
  return w;
}

// GGUF's Q6_K read by hand, the test's own reading of the specification: per half h of a
// super-block and l < 32, four values 128h + l + 32p (p < 4) from ql[64h + l] (low nibble p = 0,
// high p = 2), ql[64h + l + 32] (low p = 1, high p = 3) and bits 2p of qh[32h + l], minus 32, each
// times d·scales[(128h + l + 32p) / 16].
float Q6Value(const uint8_t* block, size_t e) {
  const size_t h = e / 128, p = e % 128 / 32, l = e % 32;
  const uint8_t* ql = block + 64 * h;
  const uint8_t* qh = block + 128 + 32 * h;
  const uint8_t byte = p % 2 == 0 ? ql[l] : ql[l + 32];
  const int low = p < 2 ? byte & 15 : byte >> 4;
  const int q = (low | (((qh[l] >> (2 * p)) & 3) << 4)) - 32;
  uint16_t d;
  std::memcpy(&d, block + 208, 2);
  const float scale = F16ToF32(d) * static_cast<float>(static_cast<int8_t>(block[192 + e / 16]));
  return scale * static_cast<float>(q);
}

// GGUF's packing of sub-block j's 6-bit scale and min, read back by hand: the test's own reading
// of the specification (bytes 0-3 scales, 4-7 mins of sub-blocks 0-3; sub-blocks 4-7 from the
// nibbles of bytes 8-11 and the top two bits of bytes 0-7).
void Codes(const uint8_t* block, int j, int* sc, int* m) {
  const uint8_t* q = block + 4;
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Every value of a stored q4_k / q5_k matrix is d·sc·n - dmin·m of its GGUF super-block, in f32,
// with the nibbles in GGUF's order (each 64 values of a super-block: 32 low nibbles, then 32 high
// ones; Q5_K: after 32 bytes of fifth bits, value l of sub-block j's in bit j of byte l), and the
// padding rows of the last panel are zero.
void CheckKMinValues(DType dtype, uint32_t seed) {
  const bool q5 = dtype == DType::Q5_K || dtype == DType::Q5_K_PACKED;
  const size_t block_bytes = q5 ? kGgufQ5Block : kGgufBlock, qs_at = q5 ? 48 : 16;
  std::mt19937 gen(seed);
  for (const auto& [rows, k] : {std::pair<uint64_t, uint64_t>{1, 256}, {17, 512}, {40, 768}}) {
    const std::vector<uint8_t> gguf = RandomGguf(dtype, rows, k, gen, 1.0f, rows == 17);
    const std::vector<uint8_t> packed = Pack(dtype, rows, k, gguf);
    const std::vector<float> w = Dequantized(dtype, rows, k, packed);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t j = 0; j < k; ++j) {
        const uint8_t* block = gguf.data() + (r * (k / 256) + j / 256) * block_bytes;
        const int sub = static_cast<int>(j % 256 / 32);
        int sc, m;
        Codes(block, sub, &sc, &m);
        const uint8_t byte = block[qs_at + 32 * (sub / 2) + j % 32];
        const int fifth = q5 ? (block[16 + j % 32] >> sub) & 1 : 0;
        const int n = (sub % 2 == 0 ? byte & 15 : byte >> 4) + 16 * fifth;
        uint16_t d, dmin;
        std::memcpy(&d, block, 2);
        std::memcpy(&dmin, block + 2, 2);
        const float want = F16ToF32(d) * static_cast<float>(sc) * static_cast<float>(n) -
                           F16ToF32(dmin) * static_cast<float>(m);
        ASSERT_EQ(w[r * k + j], want) << DTypeName(dtype) << " row " << r << " col " << j;
      }
    }
    const QuantGeometry g = QuantMatrixGeometry(dtype, rows, k);
    std::vector<float> all(g.panels * kQuantPanelRows * k);
    DequantizeRows(dtype, Layout::PANEL16_K4, g.panels * kQuantPanelRows, k, packed.data(), 0,
                   g.panels * kQuantPanelRows, all.data());
    for (uint64_t i = rows * k; i < all.size(); ++i) ASSERT_EQ(all[i], 0.0f) << i;
  }
}

TEST(Q4KTest, PackedValuesAreGgufsValues) { CheckKMinValues(DType::Q4_K, 3); }

TEST(Q5KTest, PackedValuesAreGgufsValues) {
  CheckKMinValues(DType::Q5_K, 6);
  EXPECT_DOUBLE_EQ(DTypeBitsPerWeight(DType::Q5_K), 8.625);
  EXPECT_STREQ(DTypeName(DType::Q5_K), "q5_k_i8");
}

// The packed form (GGUF's size): the same values; 2880 bytes per 16 rows x 256 values (5.625 bits
// per weight: GGUF's 5.5 with its 6-bit codes as bytes).
TEST(Q5KTest, PlanesHoldGgufsValues) {
  CheckKMinValues(DType::Q5_K_PACKED, 6);
  EXPECT_EQ(QuantMatrixGeometry(DType::Q5_K_PACKED, 32, 4096).bytes(), uint64_t{2} * 16 * 2880);
  EXPECT_DOUBLE_EQ(DTypeBitsPerWeight(DType::Q5_K_PACKED), 5.625);
  EXPECT_FALSE(LayoutValidFor(DType::Q5_K_PACKED, Layout::PANEL16_K4_HADAMARD32));
  EXPECT_EQ(TensorBytes(DType::Q5_K_PACKED, {16, 300}, Layout::PANEL16_K4), 0u);
  EXPECT_STREQ(DTypeName(DType::Q5_K_PACKED), "q5_k");
}

// Every value of a stored q6_k matrix (either form) is d·sc·(q - 32) of its GGUF super-block, in
// f32.
void CheckQ6Values(DType dtype) {
  std::mt19937 gen(4);
  for (const auto& [rows, k] : {std::pair<uint64_t, uint64_t>{1, 256}, {17, 512}, {40, 768}}) {
    const std::vector<uint8_t> gguf = RandomGgufQ6K(rows, k, gen, 1.0f);
    const std::vector<uint8_t> packed = Pack(dtype, rows, k, gguf);
    const std::vector<float> w = Dequantized(dtype, rows, k, packed);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t j = 0; j < k; ++j) {
        const uint8_t* block = gguf.data() + (r * (k / 256) + j / 256) * kGgufQ6Block;
        ASSERT_EQ(w[r * k + j], Q6Value(block, j % 256))
            << DTypeName(dtype) << " row " << r << " col " << j;
      }
    }
  }
}

TEST(Q6KTest, PackedValuesAreGgufsValues) {
  CheckQ6Values(DType::Q6_K);
  const QuantGeometry g = QuantMatrixGeometry(DType::Q6_K, 32, 4096);
  EXPECT_EQ(g.bytes(), uint64_t{32} * 4096 * 85625 / 80000);
  EXPECT_DOUBLE_EQ(DTypeBitsPerWeight(DType::Q6_K), 8.5625);
  EXPECT_FALSE(LayoutValidFor(DType::Q6_K, Layout::PANEL16_K4_HADAMARD32));
  EXPECT_EQ(TensorBytes(DType::Q6_K, {16, 300}, Layout::PANEL16_K4), 0u);
  EXPECT_STREQ(DTypeName(DType::Q6_K), "q6_k_i8");
}

// The packed form: GGUF's 6.5625 bits per weight exactly (3360 bytes per 16 rows x 256 values).
TEST(Q6KTest, PlanesHoldGgufsValues) {
  CheckQ6Values(DType::Q6_K_PACKED);
  EXPECT_EQ(QuantMatrixGeometry(DType::Q6_K_PACKED, 32, 4096).bytes(),
            uint64_t{32} * 4096 * 65625 / 80000);
  EXPECT_DOUBLE_EQ(DTypeBitsPerWeight(DType::Q6_K_PACKED), 6.5625);
  EXPECT_FALSE(LayoutValidFor(DType::Q6_K_PACKED, Layout::PANEL16_K4_HADAMARD32));
  EXPECT_EQ(TensorBytes(DType::Q6_K_PACKED, {16, 300}, Layout::PANEL16_K4), 0u);
  EXPECT_STREQ(DTypeName(DType::Q6_K_PACKED), "q6_k");
}

// Every value of `dtype`'s matrices of GGUF super-blocks (random(rows, k), blocks of
// `block_bytes`) equals want(block, e) for element e of its block, bit for bit, padding rows
// dequantise to zeros, and the dtype's size, layouts and name are `bits` per weight, PANEL16_K4
// alone and `name`.
void CheckSuperBlockValues(DType dtype, size_t block_bytes,
                           const std::function<std::vector<uint8_t>(uint64_t, uint64_t)>& random,
                           const std::function<float(const uint8_t*, int)>& want, double bits,
                           const char* name) {
  for (const auto& [rows, k] : {std::pair<uint64_t, uint64_t>{1, 256}, {17, 512}, {40, 768}}) {
    const std::vector<uint8_t> gguf = random(rows, k);
    const std::vector<uint8_t> packed = Pack(dtype, rows, k, gguf);
    const QuantGeometry g = QuantMatrixGeometry(dtype, rows, k);
    std::vector<float> all(g.panels * kQuantPanelRows * k);
    DequantizeRows(dtype, Layout::PANEL16_K4, g.panels * kQuantPanelRows, k, packed.data(), 0,
                   g.panels * kQuantPanelRows, all.data());
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t s = 0; s < k / 256; ++s) {
        const uint8_t* block = gguf.data() + (r * (k / 256) + s) * block_bytes;
        for (int e = 0; e < 256; ++e) {
          ASSERT_EQ(all[r * k + 256 * s + e], want(block, e))
              << name << " row " << r << " col " << 256 * s + e;
        }
      }
    }
    for (uint64_t i = rows * k; i < all.size(); ++i) ASSERT_EQ(all[i], 0.0f) << name << " " << i;
  }
  EXPECT_EQ(QuantMatrixGeometry(dtype, 32, 4096).bytes(),
            static_cast<uint64_t>(32 * 4096 * bits / 8));
  EXPECT_DOUBLE_EQ(DTypeBitsPerWeight(dtype), bits);
  EXPECT_FALSE(LayoutValidFor(dtype, Layout::PANEL16_K4_HADAMARD32));
  EXPECT_EQ(TensorBytes(dtype, {16, 300}, Layout::PANEL16_K4), 0u);
  EXPECT_STREQ(DTypeName(dtype), name);
}

// iq4_xs: every value is d·(ls - 32)·level of its GGUF super-block (the test's reading of the
// specification), in f32, at 4.5625 bits per weight (2336 bytes per 16 rows x 256 values).
TEST(Iq4xsTest, IndicesHoldGgufsValues) {
  std::mt19937 gen(6);
  CheckSuperBlockValues(
      DType::IQ4_XS, kGgufIq4Block,
      [&](uint64_t rows, uint64_t k) { return RandomGgufIq4xs(rows, k, gen, 1.0f); },
      [](const uint8_t* block, int e) {
        uint16_t d;
        int scale[8], level[256];
        Iq4xsSpec(block, &d, scale, level);
        return F16ToF32(d) * static_cast<float>(scale[e / 32]) * static_cast<float>(level[e]);
      },
      4.5625, "iq4_xs");
}

// q3_k: every value is d·(sc - 32)·v of its GGUF super-block (the test's reading of the
// specification), in f32, at 3.4375 bits per weight, GGUF's (1760 bytes per 16 rows x 256
// values).
TEST(Q3kTest, PlanesHoldGgufsValues) {
  std::mt19937 gen(8);
  CheckSuperBlockValues(
      DType::Q3_K_PACKED, kGgufQ3Block,
      [&](uint64_t rows, uint64_t k) { return RandomGgufQ3K(rows, k, gen, 1.0f); },
      [](const uint8_t* block, int e) {
        uint16_t d;
        int scale[16], value[256];
        Q3kSpec(block, &d, scale, value);
        return F16ToF32(d) * static_cast<float>(scale[e / 16]) * static_cast<float>(value[e]);
      },
      3.4375, "q3_k");
}

// iq4_nl: every value is d·level of its GGUF block (the test's reading of the specification), in
// f32, at GGUF's 4.5 bits per weight (16 rows x 32 values: 256 bytes of indices, 32 of scales),
// odd row counts and k not a multiple of 256 included.
TEST(Iq4nlTest, IndicesHoldGgufsValues) {
  std::mt19937 gen(7);
  for (const auto& [rows, k] : {std::pair<uint64_t, uint64_t>{1, 32}, {17, 96}, {40, 512}}) {
    const std::vector<uint8_t> gguf = RandomGgufIq4nl(rows, k, gen, 1.0f);
    const std::vector<uint8_t> packed = Pack(DType::IQ4_NL, rows, k, gguf);
    const std::vector<float> w = Dequantized(DType::IQ4_NL, rows, k, packed);
    for (uint64_t i = 0; i < rows * k / 32; ++i) {
      uint16_t d;
      int level[32];
      Iq4nlSpec(gguf.data() + i * kGgufIq4nlBlock, &d, level);
      for (int j = 0; j < 32; ++j) {
        ASSERT_EQ(w[32 * i + j], F16ToF32(d) * static_cast<float>(level[j]))
            << "element " << 32 * i + j;
      }
    }
  }
  EXPECT_EQ(QuantMatrixGeometry(DType::IQ4_NL, 32, 4096).bytes(), uint64_t{32} * 4096 * 45 / 80);
  EXPECT_DOUBLE_EQ(DTypeBitsPerWeight(DType::IQ4_NL), 4.5);
  EXPECT_STREQ(DTypeName(DType::IQ4_NL), "iq4_nl");
}

// mxfp4: every value is its MXFP4 block's (the test's reading of the specification, from the
// E8M0 and E2M1 bits) in f32, at 4.25 bits per weight (16 rows x 32 values: 256 bytes of codes,
// 16 of scales), odd row counts and k not a multiple of 256 included, scales over the whole range
// the converter keeps: e from 2 (2^-125 as the block's scale, whose half is f32's least normal
// power of two) to 254 (the largest values then overflow to infinity in the specification's f32
// as in fflite's), and about f16's ends (e 104 and 143, the former format's limits).
TEST(Mxfp4Test, CodesHoldTheBlocksValues) {
  std::mt19937 gen(11);
  for (const auto& [rows, k, scale, top_e] :
       {std::tuple<uint64_t, uint64_t, float, int>{1, 32, 1.0f, 0}, {17, 96, 0.01f, 0},
        {40, 512, 3.0f, 0}, {3, 64, 0.0f, 106}, {2, 32, 0.0f, 145}, {5, 96, 0.0f, 4},
        {4, 64, 0.0f, 254}}) {
    const std::vector<uint8_t> gguf = RandomGgufMxfp4(rows, k, gen, scale, top_e);
    const std::vector<uint8_t> packed = Pack(DType::MXFP4, rows, k, gguf);
    const std::vector<float> w = Dequantized(DType::MXFP4, rows, k, packed);
    for (uint64_t i = 0; i < rows * k / 32; ++i) {
      float value[32];
      Mxfp4Spec(gguf.data() + i * kGgufMxfp4Block, value);
      for (int j = 0; j < 32; ++j) {
        ASSERT_EQ(std::memcmp(&w[32 * i + j], &value[j], 4), 0)
            << "element " << 32 * i + j << ": " << w[32 * i + j] << " against " << value[j];
      }
    }
  }
  // 17 bytes per 32 values, GGUF's MXFP4 block.
  EXPECT_EQ(QuantMatrixGeometry(DType::MXFP4, 32, 4096).bytes(), uint64_t{32} * 4096 / 32 * 17);
  EXPECT_DOUBLE_EQ(DTypeBitsPerWeight(DType::MXFP4), 4.25);
  EXPECT_STREQ(DTypeName(DType::MXFP4), "mxfp4");
  // Each E2M1 code is written as its own index (a value stored is the value read back).
  uint8_t blk[4 * 64] = {};
  for (int code = 0; code < 16; ++code) {
    float v[32];
    const uint8_t block[17] = {128, static_cast<uint8_t>(code)};
    Mxfp4Spec(block, v);  // 2^1 · E2M1(code) = the doubled level
    MXF4::SetValue(blk, 3, 5, static_cast<int>(v[0]));
    EXPECT_EQ(MXF4::Value(blk, 3, 5), static_cast<int>(v[0])) << code;
    EXPECT_EQ(MXF4::Index(blk, 3, 5), code == 8 ? 0 : code);  // -0 is written as 0's code
  }
}

// IQ4X's index positions, against the layout written out by hand in quant_types.h: the index of
// row r, value j sits in L[g / 2] (g = j / 4) at byte 4r + j % 4, nibble g % 2; every level is
// written as its index, and a value between levels (padding's 0) as the nearest.
TEST(Iq4xsTest, IndicesAreWhereTheLayoutSays) {
  for (int r = 0; r < 16; r += 5) {
    for (int j = 0; j < 32; ++j) {
      const size_t g = j / 4, p = 4 * r + j % 4;
      for (int i = 0; i < 16; ++i) {
        uint8_t b[IQ4X::kBlockPanelBytes] = {};
        IQ4X::SetValue(b, r, j, kSpecIq4Levels[i]);
        for (size_t at = 0; at < sizeof(b); ++at) {
          const uint8_t want = at == 64 * (g / 2) + p ? i << (4 * (g % 2)) : 0;
          ASSERT_EQ(b[at], want) << "byte " << at << " r " << r << " j " << j << " index " << i;
        }
        ASSERT_EQ(IQ4X::Value(b, r, j), kSpecIq4Levels[i]);
      }
      uint8_t b[IQ4X::kBlockPanelBytes] = {};
      IQ4X::SetValue(b, r, j, 0);
      EXPECT_EQ(IQ4X::Value(b, r, j), 1);
      IQ4X::SetValue(b, r, j, -120);
      EXPECT_EQ(IQ4X::Value(b, r, j), -127);
    }
  }
}

// The planes' bit positions, against the layout written out by hand in quant_types.h: code q of
// row r, value j sits in L[g / 2] (g = j / 4) at byte 4r + j % 4, nibble g % 2, and its high
// bits at H[g / 4] bits 2(g % 4) (Q6KP) or H bit g (Q5KP).
TEST(KQuantTest, PlanesAreWhereTheLayoutSays) {
  for (int r = 0; r < 16; r += 5) {
    for (int j = 0; j < 32; ++j) {
      const size_t g = j / 4, p = 4 * r + j % 4;
      uint8_t b6[Q6KP::kBlockPanelBytes] = {}, b5[Q5KP::kBlockPanelBytes] = {};
      Q6KP::SetValue(b6, r, j, 31 - 40);  // code 23 = 0b010111
      Q5KP::SetValue(b5, r, j, 23);       // n 23 = 0b10111
      for (size_t i = 0; i < sizeof(b6); ++i) {
        const uint8_t want = i == 64 * (g / 2) + p                 ? 0x7 << (4 * (g % 2))
                             : i == 256 + 64 * (g / 4) + p ? 0x1 << (2 * (g % 4))
                                                                   : 0;
        ASSERT_EQ(b6[i], want) << "q6 byte " << i << " r " << r << " j " << j;
      }
      for (size_t i = 0; i < sizeof(b5); ++i) {
        const uint8_t want = i == 64 * (g / 2) + p ? 0x7 << (4 * (g % 2))
                             : i == 256 + p        ? 0x1 << g
                                                   : 0;
        ASSERT_EQ(b5[i], want) << "q5 byte " << i << " r " << r << " j " << j;
      }
      EXPECT_EQ(Q6KP::Value(b6, r, j), -9);
      EXPECT_EQ(Q5KP::Value(b5, r, j), 23);
    }
  }
}

// Q3KP's bit positions, against the layout written out by hand in quant_types.h: the code v + 4
// of row r, value j (g = j / 4) sits in L[g / 4] at byte 4r + j % 4, bits 2(g % 4) and
// 2(g % 4) + 1 (its low 2 bits), and in H (byte 128 + 4r + j % 4) at bit g (its third); every
// value in [-4, 3] reads back.
TEST(Q3kTest, PlanesAreWhereTheLayoutSays) {
  for (int r = 0; r < 16; r += 5) {
    for (int j = 0; j < 32; ++j) {
      const size_t g = j / 4, p = 4 * r + j % 4;
      for (int v = -4; v <= 3; ++v) {
        uint8_t b[Q3KP::kBlockPanelBytes] = {};
        Q3KP::SetValue(b, r, j, v);
        const unsigned code = static_cast<unsigned>(v + 4);
        for (size_t i = 0; i < sizeof(b); ++i) {
          const unsigned want = i == 64 * (g / 4) + p ? (code & 3) << (2 * (g % 4))
                                : i == 128 + p        ? (code >> 2) << g
                                                      : 0;
          ASSERT_EQ(b[i], want) << "byte " << i << " r " << r << " j " << j << " v " << v;
        }
        ASSERT_EQ(Q3KP::Value(b, r, j), v);
      }
    }
  }
}

// Q3KP's scale codes, against the layout written out by hand in quant_types.h: the 6-bit code of
// half h of block b of super-block s, row r, has its low 4 bits in the byte at
// 224·s + 32 + 24·b + r, nibble h, and its top 2 in the byte at 224·s + 32 + 24·b + 16 + r % 8,
// bits 4·(r / 8) + 2h and 4·(r / 8) + 2h + 1; d of row r at 224·s + 2r. Each code written reads
// back as the scale code - 32, and touches nothing else.
TEST(Q3kTest, ScaleCodesAreWhereTheLayoutSays) {
  ASSERT_EQ(Q3KP::kSuperBytes, 224u);
  for (uint64_t s = 0; s < 2; ++s) {
    for (uint64_t b = 0; b < 8; ++b) {
      for (size_t r : {0, 5, 7, 8, 13, 15}) {
        for (int h = 0; h < 2; ++h) {
          std::vector<uint8_t> panel(2 * 224, 0);
          const int code = 0b110101;  // low bits 0101, top bits 11
          const size_t lo_at = 224 * s + 32 + 24 * b + r, hi_at = 224 * s + 32 + 24 * b + 16 + r % 8;
          panel[lo_at] = static_cast<uint8_t>(0x5 << (4 * h));
          panel[hi_at] = static_cast<uint8_t>(0x3 << (4 * (r / 8) + 2 * h));
          panel[224 * s + 2 * r] = 0x00;
          panel[224 * s + 2 * r + 1] = 0x3c;  // d = 1.0
          const uint64_t block = 8 * s + b;
          EXPECT_EQ(HalfScale<Q3KP>(panel.data(), r, block, h), code - 32);
          EXPECT_EQ(HalfScale<Q3KP>(panel.data(), r, block, 1 - h), -32);  // its other half: 0
          EXPECT_EQ(HalfScale<Q3KP>(panel.data(), (r + 1) % 16, block, h), -32);
          EXPECT_EQ(HalfSuper<Q3KP>(panel.data(), r, block), 0x3c00);
          std::vector<uint8_t> written(2 * 224, 0);
          SetQ3KCode(written.data() + Q3KP::ScaleOffset(block), r, h, code);
          written[224 * s + 2 * r + 1] = 0x3c;
          EXPECT_EQ(written, panel) << "s " << s << " b " << b << " r " << r << " h " << h;
        }
      }
    }
  }
  uint8_t s[24] = {};
  for (int code = 0; code < 64; ++code) {
    SetQ3KCode(s, 9, 1, code);
    EXPECT_EQ(Q3KCode(s, 9, 1), code);
  }
}

// q2_k: every value is (d·sc)·q - dmin·m of its GGUF super-block (the test's reading of the
// specification), in f32, at 2.625 bits per weight (GGUF's); padding rows are zeros.
TEST(Q2kTest, PlanesHoldGgufsValues) {
  std::mt19937 gen(9);
  CheckSuperBlockValues(
      DType::Q2_K_PACKED, kGgufQ2Block,
      [&](uint64_t rows, uint64_t k) { return RandomGgufQ2K(rows, k, gen, 1.0f); },
      [](const uint8_t* block, int e) {
        uint16_t d, dmin;
        int scale[16], min[16], value[256];
        Q2kSpec(block, &d, &dmin, scale, min, value);
        const float dl = F16ToF32(d) * static_cast<float>(scale[e / 16]);
        const float ml = F16ToF32(dmin) * static_cast<float>(min[e / 16]);
        return dl * static_cast<float>(value[e]) - ml;
      },
      2.625, "q2_k");
}

// Q2KP's bit positions, against the layout written out by hand in quant_types.h: the value q of
// row r, value j (g = j / 4) sits in L[g / 4] at byte 4r + j % 4, bits 2(g % 4), 2(g % 4) + 1;
// the scale and the min of half-block h of super-block s in the low and high nibbles of the byte
// at 288·s + 32 + 16·h + r (Q6K's scale slot of the half-block); and the dmin of super-block s
// (of `supers`) after the Q6K scale areas of all super-blocks, at 288·supers + 32·s + 2r.
TEST(Q2kTest, PlanesScalesAndMinsAreWhereTheLayoutSays) {
  for (int r = 0; r < 16; r += 5) {
    for (int j = 0; j < 32; ++j) {
      const size_t g = j / 4, p = 4 * r + j % 4;
      for (int q = 0; q <= 3; ++q) {
        uint8_t b[Q2KP::kBlockPanelBytes] = {};
        Q2KP::SetValue(b, r, j, q);
        for (size_t i = 0; i < sizeof(b); ++i) {
          const unsigned want = i == 64 * (g / 4) + p ? unsigned(q) << (2 * (g % 4)) : 0;
          ASSERT_EQ(b[i], want) << "byte " << i << " r " << r << " j " << j << " q " << q;
        }
        ASSERT_EQ(Q2KP::Value(b, r, j), q);
      }
    }
  }
  std::vector<uint8_t> panel(3 * 320, 0);
  for (uint64_t s = 0; s < 3; ++s) {
    for (size_t h = 0; h < 16; ++h) {
      const size_t at = s * 288 + 32 + 16 * h + 7;
      panel[at] = 0xb5;  // min 11, scale 5
      EXPECT_EQ(K2Min(panel.data(), 7, s, h), 11) << s << " " << h;
      EXPECT_EQ(K6Scale(panel.data(), 7, 8 * s + h / 2, h % 2, Q2KP::kScaleMask), 5)
          << s << " " << h;
      panel[at] = 0;
    }
    panel[3 * 288 + s * 32 + 2 * 7 + 1] = 0x3c;  // f16 1.0
    EXPECT_EQ(K2Dmin(panel.data(), 7, 3, s), 0x3c00);
  }
}

// The geometry: 4.625 bits per weight, whole super-blocks, and no layout but PANEL16_K4.
TEST(Q4KTest, GeometryAndLayouts) {
  const QuantGeometry g = QuantMatrixGeometry(DType::Q4_K, 32, 4096);
  EXPECT_EQ(g.k_blocks, 128u);
  EXPECT_EQ(g.bytes(), 32u * 4096u * 4625u / 8000u);
  EXPECT_DOUBLE_EQ(DTypeBitsPerWeight(DType::Q4_K), 4.625);
  EXPECT_TRUE(LayoutValidFor(DType::Q4_K, Layout::PANEL16_K4));
  EXPECT_FALSE(LayoutValidFor(DType::Q4_K, Layout::PANEL16_K4_HADAMARD32));
  EXPECT_FALSE(LayoutValidFor(DType::Q4_K, Layout::ROW_MAJOR));
  EXPECT_EQ(TensorBytes(DType::Q4_K, {16, 300}, Layout::PANEL16_K4), 0u);
  EXPECT_EQ(TensorBytes(DType::Q4_K, {16, 512}, Layout::PANEL16_K4), g.panel_bytes / 8);
  EXPECT_STREQ(DTypeName(DType::Q4_K), "q4_k");
}

// Kernels against Σ_j W[o, j]·x[t, j] in double over the dequantised W. Float activations: each
// kernel sums s·Σ(n - 8)·x + (8s - m)·Σx per block (the scalar twin s·Σn·x - m·Σx); every
// partial sum and product adds at most one rounding per term, so with S = Σ_j (|s·(n_j - 8)| +
// |8s - m| + |W|)·|x_j| the error is at most (32 + k_blocks + 8)·2^-24·S; 1.01 for the second
// order. Int8 activations: the reference takes the same int8 blocks (d_x·q), so only f32
// roundings remain: the same bound.
double Bound(size_t k, double s) {
  return 1.01 * (40.0 + static_cast<double>(k) / 32) * 0x1p-24 * s;
}

struct Case {
  size_t rows, k, c;
};

// full_range (Q6_K only): every value redrawn in [-127, 127] (what IQ4_XS's levels kept as q6_k
// need), instead of Q6_K's own [-32, 31].
void CheckEveryKernel(DType dtype, bool full_range = false) {
  std::mt19937 gen(11);
  constexpr float kSentinel = 12345.0f;
  const QuantType type = QuantTypeOf(dtype);
  for (const Case& cs : {Case{1, 256, 1}, Case{17, 256, 3}, Case{37, 512, 5}, Case{64, 768, 9},
                         Case{16, 256, 2}}) {
    const size_t rows = cs.rows, k = cs.k, c = cs.c;
    const std::vector<uint8_t> gguf = RandomGguf(dtype, rows, k, gen, 0.5f);
    std::vector<uint8_t> packed = Pack(dtype, rows, k, gguf);
    if (full_range && dtype == DType::MXFP4) {
      // Scales far outside f16's range, e in [40, 216] (2^-88 to 2^88), each block's own: every
      // product stays a normal f32 with these activations.
      const QuantGeometry g = QuantMatrixGeometry(dtype, rows, k);
      std::uniform_int_distribution<int> e(40, 216);
      for (size_t o = 0; o < rows; ++o) {
        for (size_t b = 0; b < k / 32; ++b) {
          packed[o / 16 * g.panel_bytes + b * 16 + o % 16] = static_cast<uint8_t>(e(gen));
        }
      }
    } else if (full_range) {
      const QuantGeometry g = QuantMatrixGeometry(dtype, rows, k);
      std::uniform_int_distribution<int> level(-127, 127);
      for (size_t o = 0; o < rows; ++o) {
        for (size_t j = 0; j < k; ++j) {
          uint8_t* blk = packed.data() + o / 16 * g.panel_bytes + g.scale_bytes +
                         j / 32 * g.block_panel_bytes;
          // The extremes often, so that any saturation shows.
          const int v = j % 5 == 0 ? (j % 2 == 0 ? 127 : -127) : level(gen);
          Q6K::SetValue(blk, o % 16, j % 32, v);
        }
      }
    }
    const std::vector<float> w = Dequantized(dtype, rows, k, packed);
    GuardedBuffer w_buf(packed.size());
    std::memcpy(w_buf.As<uint8_t>(), packed.data(), packed.size());
    std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
    std::vector<float> x(c * k), bias(rows);
    for (float& v : x) v = ud(gen);
    for (float& v : bias) v = ud(gen);
    GuardedBuffer x_buf(x.size() * sizeof(float)), b_buf(rows * sizeof(float));
    std::memcpy(x_buf.As<float>(), x.data(), x.size() * sizeof(float));
    std::memcpy(b_buf.As<float>(), bias.data(), rows * sizeof(float));
    // The int8 blocks, from the scalar quantiser (every kernel's is bit-identical to it:
    // quant_gemm_test), and what they stand for.
    const size_t kb = k / 32;
    std::vector<QActBlock> xq(c * kb);
    QuantizeActivationsScalar(c, k, x.data(), k, xq.data());
    std::vector<float> xq_values(c * k);
    for (size_t t = 0; t < c; ++t) {
      for (size_t j = 0; j < k; ++j) {
        const QActBlock& a = xq[t * kb + j / 32];
        xq_values[t * k + j] = a.d * static_cast<float>(a.q[j % 32]);
      }
    }
    GuardedBuffer xq_buf(xq.size() * sizeof(QActBlock));
    std::memcpy(xq_buf.As<QActBlock>(), xq.data(), xq.size() * sizeof(QActBlock));
    // Reference and bound per output, for the float and the int8 activations.
    auto reference = [&](const std::vector<float>& xs, std::vector<double>* ref,
                         std::vector<double>* bound) {
      ref->assign(c * rows, 0.0);
      bound->assign(c * rows, 0.0);
      const QuantGeometry g = QuantMatrixGeometry(dtype, rows, k);
      for (size_t t = 0; t < c; ++t) {
        for (size_t o = 0; o < rows; ++o) {
          const uint8_t* panel = packed.data() + o / 16 * g.panel_bytes;
          double sum = 0, s_abs = 0;
          for (size_t j = 0; j < k; ++j) {
            const double xj = xs[t * k + j];
            sum += static_cast<double>(w[o * k + j]) * xj;
            s_abs += std::fabs(w[o * k + j]) * std::fabs(xj);
            if (dtype == DType::Q2_K_PACKED) {
              // The kernels sum (d·sc)·q·x, then subtract dmin·Σ m·(Σx over 16): each term's
              // parts, with at most 16 + 16 + 2 roundings each and one per super-block on y.
              const size_t r = o % 16, b = j / 32, s = b / 8;
              const double dl = F16ToF32(K6Super(panel, r, b)) *
                                K6Scale(panel, r, b, j % 32 / 16, Q2KP::kScaleMask);
              const double ml =
                  F16ToF32(K2Dmin(panel, r, k / 256, s)) * K2Min(panel, r, s, j % 256 / 16);
              s_abs += (std::fabs(dl * QuantValueAt(dtype, g, packed.data(), o, j)) + ml) *
                       std::fabs(xj) * 2.0;
              continue;
            }
            if (dtype != DType::Q4_K && dtype != DType::Q5_K) continue;
            const double off = dtype == DType::Q4_K ? 8 : 16;  // the kernels' kMinOffset
            const size_t b = j / 32;
            const size_t r = o % 16;
            const double s = F16ToF32(KSuper(panel, r, b, false)) * KCode(panel, r, b, false);
            const double m = F16ToF32(KSuper(panel, r, b, true)) * KCode(panel, r, b, true);
            const double n = QuantValueAt(dtype, g, packed.data(), o, j);
            s_abs += (std::fabs(s * (n - off)) + std::fabs(off * s - m)) * std::fabs(xj);
          }
          (*ref)[t * rows + o] = sum;
          (*bound)[t * rows + o] = Bound(k, s_abs + std::fabs(bias[o]));
        }
      }
    };
    std::vector<double> ref_f, bound_f, ref_q, bound_q;
    reference(x, &ref_f, &bound_f);
    reference(xq_values, &ref_q, &bound_q);
    auto check = [&](const char* isa, const char* kind, const std::vector<double>& ref,
                     const std::vector<double>& bound, auto&& run) {
      for (bool with_bias : {false, true}) {
        const size_t y_stride = rows + 3;
        GuardedBuffer y_buf(((c - 1) * y_stride + rows) * sizeof(float));
        float* y = y_buf.As<float>();
        std::fill(y, y + (c - 1) * y_stride + rows, kSentinel);
        run(with_bias ? b_buf.As<float>() : nullptr, y, y_stride);
        for (size_t t = 0; t < c; ++t) {
          for (size_t o = 0; o < rows; ++o) {
            const double want = ref[t * rows + o] + (with_bias ? bias[o] : 0.0);
            ASSERT_LE(std::fabs(y[t * y_stride + o] - want), bound[t * rows + o])
                << DTypeName(dtype) << " " << isa << " " << kind << " rows " << rows << " k " << k
                << " c " << c
                << " bias " << with_bias << ": y[" << t << ", " << o << "] = "
                << y[t * y_stride + o] << ", want " << want;
          }
          for (size_t o = rows; o < y_stride && t + 1 < c; ++o) {
            ASSERT_EQ(y[t * y_stride + o], kSentinel) << isa << " " << kind << " wrote padding";
          }
        }
      }
    };
    for (const QGemvKernel* kernel : AvailableQGemvKernels()) {
      check(kernel->isa, "qgemv", ref_f, bound_f, [&](const float* b, float* y, size_t ys) {
        kernel->qgemv(c, k, rows, w_buf.As<uint8_t>(), type, b, x_buf.As<float>(), k, y, ys);
      });
    }
    for (const QGemmKernel* kernel : AvailableQGemmKernels()) {
      check(kernel->isa, "qgemm", ref_q, bound_q, [&](const float* b, float* y, size_t ys) {
        kernel->qgemm(c, k, rows, w_buf.As<uint8_t>(), type, b, xq_buf.As<QActBlock>(), y, ys);
      });
    }
  }
}

TEST(Q4KTest, EveryKernelMatchesTheDequantisedProduct) { CheckEveryKernel(DType::Q4_K); }
TEST(Q5KTest, EveryKernelMatchesTheDequantisedProduct) { CheckEveryKernel(DType::Q5_K); }
TEST(Q6KTest, EveryKernelMatchesTheDequantisedProduct) { CheckEveryKernel(DType::Q6_K); }
TEST(Q6KTest, EveryKernelTakesValuesOfTheWholeInt8Range) { CheckEveryKernel(DType::Q6_K, true); }
TEST(Q2kTest, EveryKernelMatchesTheDequantisedProduct) { CheckEveryKernel(DType::Q2_K_PACKED); }
TEST(Mxfp4Test, EveryKernelMatchesTheDequantisedProduct) { CheckEveryKernel(DType::MXFP4); }
TEST(Mxfp4Test, EveryKernelTakesScalesBeyondF16) { CheckEveryKernel(DType::MXFP4, true); }

// The packed forms decode into the wide forms' int8 values and then run the wide forms' arithmetic
// (quant_types.h): every kernel gives the wide form's bits on the same GGUF rows, at every token
// count the tiles split differently (1, 2, 3, 5, 9) and on partial panels. With the wide forms
// checked against the dequantised product above, this checks the packed ones too.
void CheckPackedGivesTheWideBits(DType wide, DType packed_dtype) {
  std::mt19937 gen(13);
  for (const Case& cs : {Case{1, 256, 1}, Case{17, 256, 2}, Case{37, 512, 3}, Case{64, 768, 5},
                         Case{16, 256, 9}}) {
    const size_t rows = cs.rows, k = cs.k, c = cs.c;
    const std::vector<uint8_t> gguf = RandomGguf(packed_dtype, rows, k, gen, 0.5f);
    const std::vector<uint8_t> w_wide =
        packed_dtype == DType::IQ4_XS        ? PackIq4xs(wide, rows, k, gguf)
        : packed_dtype == DType::IQ4_NL      ? PackIq4nl(wide, rows, k, gguf)
        : packed_dtype == DType::MXFP4       ? PackMxfp4(wide, rows, k, gguf)
        : packed_dtype == DType::Q3_K_PACKED ? PackQ3k(wide, rows, k, gguf)
                                             : Pack(wide, rows, k, gguf);
    const std::vector<uint8_t> p = Pack(packed_dtype, rows, k, gguf);
    GuardedBuffer w_packed(p.size());  // a read past the packed matrix faults
    std::memcpy(w_packed.As<uint8_t>(), p.data(), p.size());
    std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
    std::vector<float> x(c * k), bias(rows);
    for (float& v : x) v = ud(gen);
    for (float& v : bias) v = ud(gen);
    std::vector<QActBlock> xq(c * k / 32);
    QuantizeActivationsScalar(c, k, x.data(), k, xq.data());
    std::vector<float> y_wide(c * rows), y_packed(c * rows);
    for (const QGemvKernel* kernel : AvailableQGemvKernels()) {
      kernel->qgemv(c, k, rows, w_wide.data(), QuantTypeOf(wide), bias.data(), x.data(), k,
                    y_wide.data(), rows);
      kernel->qgemv(c, k, rows, w_packed.As<uint8_t>(), QuantTypeOf(packed_dtype), bias.data(),
                    x.data(), k, y_packed.data(), rows);
      ASSERT_EQ(std::memcmp(y_wide.data(), y_packed.data(), y_wide.size() * 4), 0)
          << DTypeName(packed_dtype) << " qgemv " << kernel->isa << " rows " << rows << " c " << c;
    }
    for (const QGemmKernel* kernel : AvailableQGemmKernels()) {
      kernel->qgemm(c, k, rows, w_wide.data(), QuantTypeOf(wide), bias.data(), xq.data(),
                    y_wide.data(), rows);
      kernel->qgemm(c, k, rows, w_packed.As<uint8_t>(), QuantTypeOf(packed_dtype), bias.data(),
                    xq.data(), y_packed.data(), rows);
      ASSERT_EQ(std::memcmp(y_wide.data(), y_packed.data(), y_wide.size() * 4), 0)
          << DTypeName(packed_dtype) << " qgemm " << kernel->isa << " rows " << rows << " c " << c;
    }
  }
}

TEST(Q5KTest, EveryKernelGivesTheWideFormsBitsOnPlanes) {
  CheckPackedGivesTheWideBits(DType::Q5_K, DType::Q5_K_PACKED);
}
TEST(Q6KTest, EveryKernelGivesTheWideFormsBitsOnPlanes) {
  CheckPackedGivesTheWideBits(DType::Q6_K, DType::Q6_K_PACKED);
}
// iq4_xs against the same levels kept as q6_k_i8 (what the converter wrote for IQ4_XS before).
TEST(Iq4xsTest, EveryKernelGivesTheWideFormsBitsOnIndices) {
  CheckPackedGivesTheWideBits(DType::Q6_K, DType::IQ4_XS);
}
// q3_k against the same values kept as q6_k_i8 (q6_k's planes held them before).
TEST(Q3kTest, EveryKernelGivesTheWideFormsBitsOnPlanes) {
  CheckPackedGivesTheWideBits(DType::Q6_K, DType::Q3_K_PACKED);
}
// q2_k: every kernel gives, on the same GGUF rows, the bits of Q6K's product on the values and
// scales (q6_k_i8) less the mins as SubtractQ2KMins takes them off, at every token count and on
// partial panels (the mins' arithmetic itself against the dequantised product above).
TEST(Q2kTest, EveryKernelGivesTheWideFormsBitsLessTheMins) {
  std::mt19937 gen(14);
  for (const Case& cs : {Case{1, 256, 1}, Case{17, 256, 2}, Case{37, 512, 3}, Case{64, 768, 5},
                         Case{16, 256, 9}}) {
    const size_t rows = cs.rows, k = cs.k, c = cs.c;
    const std::vector<uint8_t> gguf = RandomGgufQ2K(rows, k, gen, 0.5f);
    const std::vector<uint8_t> w_wide = PackQ2kAsQ6k(rows, k, gguf);
    const std::vector<uint8_t> p = Pack(DType::Q2_K_PACKED, rows, k, gguf);
    GuardedBuffer w_packed(p.size());
    std::memcpy(w_packed.As<uint8_t>(), p.data(), p.size());
    std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
    std::vector<float> x(c * k), bias(rows);
    for (float& v : x) v = ud(gen);
    for (float& v : bias) v = ud(gen);
    std::vector<QActBlock> xq(c * k / 32);
    QuantizeActivationsScalar(c, k, x.data(), k, xq.data());
    std::vector<float> y_wide(c * rows), y_packed(c * rows);
    for (const QGemvKernel* kernel : AvailableQGemvKernels()) {
      kernel->qgemv(c, k, rows, w_wide.data(), QuantType::kQ6K, bias.data(), x.data(), k,
                    y_wide.data(), rows);
      SubtractQ2KMins(c, k, rows, p.data(), x.data(), k, y_wide.data(), rows);
      kernel->qgemv(c, k, rows, w_packed.As<uint8_t>(), QuantType::kQ2KP, bias.data(), x.data(),
                    k, y_packed.data(), rows);
      ASSERT_EQ(std::memcmp(y_wide.data(), y_packed.data(), y_wide.size() * 4), 0)
          << "qgemv " << kernel->isa << " rows " << rows << " c " << c;
    }
    for (const QGemmKernel* kernel : AvailableQGemmKernels()) {
      kernel->qgemm(c, k, rows, w_wide.data(), QuantType::kQ6K, bias.data(), xq.data(),
                    y_wide.data(), rows);
      SubtractQ2KMinsQ(c, k, rows, p.data(), xq.data(), y_wide.data(), rows);
      kernel->qgemm(c, k, rows, w_packed.As<uint8_t>(), QuantType::kQ2KP, bias.data(),
                    xq.data(), y_packed.data(), rows);
      ASSERT_EQ(std::memcmp(y_wide.data(), y_packed.data(), y_wide.size() * 4), 0)
          << "qgemm " << kernel->isa << " rows " << rows << " c " << c;
    }
  }
}

// A q2_k matrix re-laid with more rows and more super-blocks (d_ff padding) keeps every value and
// pads with zeros: the mins move with the scale areas' end.
TEST(Q2kTest, RepadKeepsTheValues) {
  std::mt19937 gen(15);
  const uint64_t rows = 20, k = 512, to_rows = 40, to_k = 1024;
  const std::vector<uint8_t> gguf = RandomGgufQ2K(rows, k, gen, 1.0f);
  const std::vector<uint8_t> packed = Pack(DType::Q2_K_PACKED, rows, k, gguf);
  std::vector<uint8_t> padded(QuantMatrixGeometry(DType::Q2_K_PACKED, to_rows, to_k).bytes(), 0xee);
  RepadQuantMatrix(DType::Q2_K_PACKED, rows, k, packed.data(), to_rows, to_k, padded.data());
  const std::vector<float> w = Dequantized(DType::Q2_K_PACKED, rows, k, packed);
  const std::vector<float> wp = Dequantized(DType::Q2_K_PACKED, to_rows, to_k, padded);
  for (uint64_t r = 0; r < to_rows; ++r) {
    for (uint64_t j = 0; j < to_k; ++j) {
      ASSERT_EQ(wp[r * to_k + j], r < rows && j < k ? w[r * k + j] : 0.0f) << r << " " << j;
    }
  }
}

// iq4_nl against the same levels kept as i8 (what the converter wrote for IQ4_NL before).
TEST(Iq4nlTest, EveryKernelGivesI8sBitsOnIndices) {
  CheckPackedGivesTheWideBits(DType::I8, DType::IQ4_NL);
}

// mxfp4 against the same integers kept as i8 (what the converter wrote for MXFP4 before).
TEST(Mxfp4Test, EveryKernelGivesI8sBitsOnCodes) {
  CheckPackedGivesTheWideBits(DType::I8, DType::MXFP4);
}

// A product split among threads at panel boundaries gives the whole product's bits.
void CheckRowSplits(DType dtype) {
  std::mt19937 gen(5);
  const size_t rows = 48, k = 512, c = 3;
  const QuantType type = QuantTypeOf(dtype);
  const std::vector<uint8_t> packed = Pack(dtype, rows, k, RandomGguf(dtype, rows, k, gen, 0.5f));
  const QuantGeometry g = QuantMatrixGeometry(dtype, rows, k);
  std::vector<float> x(c * k);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (float& v : x) v = ud(gen);
  std::vector<QActBlock> xq(c * k / 32);
  QuantizeActivationsScalar(c, k, x.data(), k, xq.data());
  for (const QGemvKernel* kernel : AvailableQGemvKernels()) {
    for (size_t tokens : {size_t{1}, c}) {
      std::vector<float> whole(tokens * rows), split(tokens * rows);
      kernel->qgemv(tokens, k, rows, packed.data(), type, nullptr, x.data(), k,
                    whole.data(), rows);
      kernel->qgemv(tokens, k, 16, packed.data(), type, nullptr, x.data(), k,
                    split.data(), rows);
      kernel->qgemv(tokens, k, 32, packed.data() + g.panel_bytes, type, nullptr,
                    x.data(), k, split.data() + 16, rows);
      EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0) << kernel->isa;
    }
  }
  for (const QGemmKernel* kernel : AvailableQGemmKernels()) {
    std::vector<float> whole(c * rows), split(c * rows);
    kernel->qgemm(c, k, rows, packed.data(), type, nullptr, xq.data(), whole.data(),
                  rows);
    kernel->qgemm(c, k, 16, packed.data(), type, nullptr, xq.data(), split.data(),
                  rows);
    kernel->qgemm(c, k, 32, packed.data() + g.panel_bytes, type, nullptr, xq.data(),
                  split.data() + 16, rows);
    EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0) << kernel->isa;
  }
}

TEST(Q4KTest, RowSplitsGiveTheSameBits) { CheckRowSplits(DType::Q4_K); }
TEST(Q5KTest, RowSplitsGiveTheSameBits) { CheckRowSplits(DType::Q5_K); }
TEST(Q6KTest, RowSplitsGiveTheSameBits) { CheckRowSplits(DType::Q6_K); }
TEST(Q5KTest, PlanesRowSplitsGiveTheSameBits) { CheckRowSplits(DType::Q5_K_PACKED); }
TEST(Q6KTest, PlanesRowSplitsGiveTheSameBits) { CheckRowSplits(DType::Q6_K_PACKED); }
TEST(Iq4xsTest, RowSplitsGiveTheSameBits) { CheckRowSplits(DType::IQ4_XS); }
TEST(Iq4nlTest, RowSplitsGiveTheSameBits) { CheckRowSplits(DType::IQ4_NL); }
TEST(Mxfp4Test, RowSplitsGiveTheSameBits) { CheckRowSplits(DType::MXFP4); }
TEST(Q3kTest, RowSplitsGiveTheSameBits) { CheckRowSplits(DType::Q3_K_PACKED); }
TEST(Q2kTest, RowSplitsGiveTheSameBits) { CheckRowSplits(DType::Q2_K_PACKED); }

// ---- files ----

// A q4_k / q6_k source over packed bytes the lambda keeps alive.
TensorSource KSource(DType dtype, uint64_t rows, uint64_t k, std::vector<uint8_t> packed) {
  TensorSource s;
  s.dtype = dtype;
  s.shape = {rows, k};
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(packed));
  s.fill = [bytes](uint8_t* dst, uint64_t n) -> absl::Status {
    if (n != bytes->size()) return absl::InternalError("byte count");
    std::memcpy(dst, bytes->data(), n);
    return absl::OkStatus();
  };
  return s;
}

// A random [rows, k] matrix of `dtype` about ±1/sqrt(k), as a source.
TensorSource RandomKSource(DType dtype, uint64_t rows, uint64_t k, std::mt19937& gen) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(k));
  return KSource(dtype, rows, k,
                 Pack(dtype, rows, k, RandomGguf(dtype, rows, k, gen, scale, true)));
}

// A dense gated layer with up and gate of `dtype` and down of `down_dtype` (d_model and d_ff
// multiples of 256; a Q4_K_M file mixes q4_k and q6_k so); `edit` may change the packed bytes of
// up before they are written.
ModelSpec KModel(DType dtype, DType down_dtype, uint32_t d, uint32_t ff, uint32_t seed,
                 const std::function<void(std::vector<uint8_t>*)>& edit = nullptr) {
  std::mt19937 gen(seed);
  testing::Rng rng(seed);
  testing::FfnParams p;
  p.d_model = d;
  p.d_ff = ff;
  p.bias = true;
  LayerSpec layer;
  layer.name = "kquant";
  layer.ffn = testing::RandomFfn(p, rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<uint8_t> up = Pack(dtype, ff, d, RandomGguf(dtype, ff, d, gen, scale, true));
  if (edit) edit(&up);
  layer.ffn.up = KSource(dtype, ff, d, std::move(up));
  layer.ffn.gate = RandomKSource(dtype, ff, d, gen);
  layer.ffn.down = RandomKSource(down_dtype, d, ff, gen);
  layer.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, d, rng);
  layer.residual = true;
  ModelSpec spec;
  spec.d_model = d;
  spec.layers.push_back(std::move(layer));
  return spec;
}
ModelSpec Q4KModel(uint32_t d, uint32_t ff, uint32_t seed,
                   const std::function<void(std::vector<uint8_t>*)>& edit = nullptr) {
  return KModel(DType::Q4_K, DType::Q4_K, d, ff, seed, edit);
}

// Max |got - want| / (|want| + rms(want)) over the outputs.
double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  double ss = 0;
  for (float v : want) ss += static_cast<double>(v) * v;
  const double rms = std::sqrt(ss / static_cast<double>(want.size()));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - want[i]) / (std::fabs(want[i]) + rms));
  }
  return worst;
}

// The CPU backend on q4_k, q6_k and mixed (Q4_K_M's) layers against the reference on the same
// file: decode (float activations) and prefill (int8 activations from the backend's threshold
// on), 1 and 3 threads.
TEST(KQuantTest, LayerMatchesTheReference) {
  for (const auto& [dtype, down] : {std::pair<DType, DType>{DType::Q4_K, DType::Q4_K},
                                    {DType::Q6_K, DType::Q6_K}, {DType::Q4_K, DType::Q6_K_PACKED},
                                    {DType::Q5_K_PACKED, DType::Q6_K_PACKED},
                                    {DType::IQ4_XS, DType::IQ4_XS},
                                    {DType::IQ4_NL, DType::IQ4_XS},
                                    {DType::MXFP4, DType::MXFP4},
                                    {DType::Q3_K_PACKED, DType::Q4_K},
                                    {DType::Q2_K_PACKED, DType::Q3_K_PACKED}}) {
    ASSERT_OK_AND_ASSIGN(testing::LoadedModel m,
                         testing::BuildModel(KModel(dtype, down, 256, 512, 21)));
    EXPECT_EQ(m.model->layers()[0].ffn.up.dtype, dtype);
    EXPECT_EQ(m.model->layers()[0].ffn.down.dtype, down);
    testing::Rng rng(4);
    for (size_t tokens : {size_t{1}, size_t{2}, size_t{40}}) {
      const std::vector<float> x = rng.Vec(tokens * 256, 1.0f);
      ASSERT_OK_AND_ASSIGN(std::vector<float> want,
                           testing::RunLayer(*m.model, "reference", 0, x, tokens));
      for (int threads : {1, 3}) {
        ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                             testing::RunLayer(*m.model, "xnnpack", 0, x, tokens, threads));
        // Int8 activations from the backend's default threshold on (1 or 2 tokens on x86, 8
        // elsewhere) for either dtype: their tolerance; float activations: the f32 one.
        const size_t gemm_tokens = std::min(
            DefaultQuantGemmMinTokens(QuantTypeOf(dtype), BestQGemvKernel(), BestQGemmKernel()),
            DefaultQuantGemmMinTokens(QuantTypeOf(down), BestQGemvKernel(), BestQGemmKernel()));
        const double tol = tokens >= gemm_tokens ? testing::kInt8ActRelTol : testing::kF32RelTol;
        EXPECT_LE(RelError(got, want), tol) << DTypeName(dtype) << "/" << DTypeName(down) << " "
                                            << tokens << " tokens, " << threads << " threads";
      }
    }
  }
}

// MoE with routed and shared experts of up and gate `dtype`, down `down_dtype` (a GGUF Q4_K_M
// MoE's experts: gate and up q4_k, down q6_k): the CPU backend against the reference, whole and
// under an expert budget that streams two experts' records from the file.
void CheckMoe(DType dtype, DType down_dtype) {
  constexpr uint32_t kD = 256, kFf = 256;
  testing::Rng rng(31);
  std::mt19937 gen(31);
  testing::MoeParams mp;
  mp.num_experts = 6;
  mp.top_k = 2;
  mp.num_shared = 1;
  mp.shared_gate = true;
  mp.shared_d_ff = kFf;
  mp.expert.d_model = kD;
  mp.expert.d_ff = kFf;
  LayerSpec layer;
  layer.name = "moe";
  layer.kind = LayerKind::kMoe;
  layer.moe = testing::RandomMoe(mp, rng);
  auto quantise = [&](FfnSpec& f) {
    f.up = RandomKSource(dtype, kFf, kD, gen);
    f.gate = RandomKSource(dtype, kFf, kD, gen);
    f.down = RandomKSource(down_dtype, kD, kFf, gen);
  };
  for (FfnSpec& f : layer.moe.experts) quantise(f);
  for (FfnSpec& f : layer.moe.shared_experts) quantise(f);
  layer.residual = true;
  ModelSpec spec;
  spec.d_model = kD;
  spec.layers.push_back(std::move(layer));
  WriteOptions options;
  options.expert_alignment = kExpertPageAlignment;
  // A file of its own per dtype pair: ctest runs the tests of this function side by side.
  const std::string name =
      std::string("moe_") + DTypeName(dtype) + "_" + DTypeName(down_dtype) + ".fflite";
  ASSERT_OK_AND_ASSIGN(testing::LoadedModel m, testing::BuildModelFile(spec, name, options));
  ASSERT_EQ(m.model->layers()[0].moe.experts[0].up.dtype, dtype);
  ASSERT_EQ(m.model->layers()[0].moe.experts[0].down.dtype, down_dtype);
  const FfnView& e0 = m.model->layers()[0].moe.experts[0];
  const uint64_t expert_bytes = e0.up.size + e0.gate.size + e0.down.size;
  const size_t gemm_tokens =
      std::min(DefaultQuantGemmMinTokens(QuantTypeOf(dtype), BestQGemvKernel(), BestQGemmKernel()),
               DefaultQuantGemmMinTokens(QuantTypeOf(down_dtype), BestQGemvKernel(),
                                         BestQGemmKernel()));
  for (size_t tokens : {size_t{1}, size_t{5}, size_t{40}}) {
    const std::vector<float> x = rng.Vec(tokens * kD, 1.0f);
    ASSERT_OK_AND_ASSIGN(std::vector<float> want,
                         testing::RunLayer(*m.model, "reference", 0, x, tokens));
    // Experts see fewer tokens than the call: the tolerance of int8 activations wherever any
    // product may take them.
    const double tol = tokens >= gemm_tokens || tokens > 1 ? testing::kInt8ActRelTol
                                                           : testing::kF32RelTol;
    for (int threads : {1, 3}) {
      for (uint64_t budget : {uint64_t{0}, 2 * expert_bytes + 8192}) {
        ASSERT_OK_AND_ASSIGN(std::vector<float> got, testing::RunLayer(*m.model, "xnnpack", 0, x,
                                                                       tokens, threads, budget));
        EXPECT_LE(RelError(got, want), tol) << DTypeName(dtype) << "/" << DTypeName(down_dtype)
                                            << " " << tokens << " tokens, " << threads
                                            << " threads, budget " << budget;
      }
    }
  }
}

TEST(KQuantTest, MoeMatchesTheReference) { CheckMoe(DType::Q4_K, DType::Q6_K_PACKED); }
// gpt-oss's experts as its files hold them (mxfp4), streamed under a budget too.
TEST(Mxfp4Test, MoeMatchesTheReference) { CheckMoe(DType::MXFP4, DType::MXFP4); }

// A padded d_ff that leaves whole super-blocks is stored; one that does not is refused by name,
// as is a q4_k source whose in_features are not whole super-blocks.
TEST(Q4KTest, WriterNeedsWholeSuperBlocks) {
  WriteOptions options;
  options.d_ff_alignment = 96;  // 512 -> 576: not a multiple of 256
  EXPECT_THAT(WriteModelBuffer(Q4KModel(256, 512, 2), options).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("layers[0].ffn.down: a q4_k matrix needs in_features a "
                                          "multiple of 256")));
  options.d_ff_alignment = 256;
  EXPECT_TRUE(WriteModelBuffer(Q4KModel(256, 512, 2), options).ok());
}

// The first run that reads a matrix checks its super-blocks: a q4_k code above 63, a q4_k or q6_k
// d that is not finite fails that call, naming the matrix, row and block.
TEST(KQuantTest, BadScalesFailTheRunByName) {
  const QuantGeometry g = QuantMatrixGeometry(DType::Q4_K, 512, 256);
  struct BadCase {
    std::function<void(std::vector<uint8_t>*)> edit;
    const char* message;
  };
  const BadCase cases[] = {
      {[&](std::vector<uint8_t>* b) { (*b)[g.panel_bytes + Q4K::ScaleOffset(3) + 5] = 64; },
       "layers[0].ffn.up: the 6-bit scale or min of row 21, block 3 (columns [96, 128)) is above "
       "63"},
      {[&](std::vector<uint8_t>* b) {
         const uint16_t nan = 0x7e00;
         std::memcpy(b->data() + 2 * g.panel_bytes + 2 * kQuantPanelRows + 2 * 7, &nan, 2);
       },
       "layers[0].ffn.up: the super-block's d or dmin of row 39, block 0 (columns [0, 32)) is "
       "not finite"}};
  for (const BadCase& bc : cases) {
    ASSERT_OK_AND_ASSIGN(testing::LoadedModel m,
                         testing::BuildModel(Q4KModel(256, 512, 9, bc.edit)));
    const std::vector<float> x(256, 0.5f);
    for (const char* backend : {"reference", "xnnpack"}) {
      EXPECT_THAT(testing::RunLayer(*m.model, backend, 0, x, 1).status(),
                  testing::StatusIs(absl::StatusCode::kDataLoss, HasSubstr(bc.message)))
          << backend;
    }
  }
  // q6_k: a d that is not finite (up [512, 256]: one super-block per row).
  const QuantGeometry g6 = QuantMatrixGeometry(DType::Q6_K, 512, 256);
  auto inf_d = [&](std::vector<uint8_t>* b) {
    const uint16_t inf = 0x7c00;
    std::memcpy(b->data() + 3 * g6.panel_bytes + 2 * 11, &inf, 2);
  };
  ASSERT_OK_AND_ASSIGN(testing::LoadedModel m6, testing::BuildModel(KModel(
                                                    DType::Q6_K, DType::Q6_K, 256, 512, 9, inf_d)));
  for (const char* backend : {"reference", "xnnpack"}) {
    EXPECT_THAT(testing::RunLayer(*m6.model, backend, 0, std::vector<float>(256, 0.5f), 1).status(),
                testing::StatusIs(absl::StatusCode::kDataLoss,
                                  HasSubstr("layers[0].ffn.up: the super-block's d of row 59, "
                                            "block 0 (columns [0, 32)) is not finite")))
        << backend;
  }
  // q2_k: a dmin that is not finite (its mins after the one super-block's Q6K scale area).
  const QuantGeometry g2 = QuantMatrixGeometry(DType::Q2_K_PACKED, 512, 256);
  auto nan_dmin = [&](std::vector<uint8_t>* b) {
    const uint16_t nan = 0xfe00;
    std::memcpy(b->data() + 2 * g2.panel_bytes + Q2KP::MinOffset(1, 0) + 2 * 4, &nan, 2);
  };
  ASSERT_OK_AND_ASSIGN(
      testing::LoadedModel m2,
      testing::BuildModel(KModel(DType::Q2_K_PACKED, DType::Q6_K, 256, 512, 9, nan_dmin)));
  for (const char* backend : {"reference", "xnnpack"}) {
    EXPECT_THAT(testing::RunLayer(*m2.model, backend, 0, std::vector<float>(256, 0.5f), 1).status(),
                testing::StatusIs(absl::StatusCode::kDataLoss,
                                  HasSubstr("layers[0].ffn.up: the super-block's d or dmin of row "
                                            "36, block 0 (columns [0, 32)) is not finite")))
        << backend;
  }
  // mxfp4: an E8M0 byte it does not hold: 255 (E8M0's NaN) or 1 (2^-127 as the scale).
  const QuantGeometry gm = QuantMatrixGeometry(DType::MXFP4, 512, 256);
  for (const uint8_t bad : {uint8_t{255}, uint8_t{1}}) {
    auto bad_scale = [&](std::vector<uint8_t>* b) {
      (*b)[gm.panel_bytes + 2 * kQuantPanelRows + 9] = bad;
    };
    ASSERT_OK_AND_ASSIGN(
        testing::LoadedModel mx,
        testing::BuildModel(KModel(DType::MXFP4, DType::MXFP4, 256, 512, 9, bad_scale)));
    for (const char* backend : {"reference", "xnnpack"}) {
      EXPECT_THAT(
          testing::RunLayer(*mx.model, backend, 0, std::vector<float>(256, 0.5f), 1).status(),
          testing::StatusIs(absl::StatusCode::kDataLoss,
                            HasSubstr("layers[0].ffn.up: the scale of row 25, block 2 (columns "
                                      "[64, 96)) is not an E8M0 scale mxfp4 holds (1 or 255)")))
          << backend << " " << static_cast<int>(bad);
    }
  }
}

// A file of `dtype` (up and gate; down `down`) written now loads; the same bytes marked as each of
// the former versions `minors` are refused by name, the tensor's path and the version in the
// message ("dtype <name> of format 1.<minor> (<bits> bits per weight)"); marked as `later`
// (the version that introduced the current layout) they load again. And a file of `unchanged`
// (a type whose layout did not change) marked as minors' last still loads.
void CheckFormerLayoutRefused(DType dtype, DType down, std::initializer_list<uint32_t> minors,
                              uint32_t later, const char* bits, DType unchanged) {
  absl::StatusOr<std::vector<uint8_t>> bytes =
      WriteModelBuffer(KModel(dtype, down, 256, 512, 9), WriteOptions());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  schema::Model* root = schema::GetMutableSizePrefixedModel(bytes->data());
  ASSERT_EQ(root->version_minor(), 13u);
  EXPECT_OK(Model::LoadBuffer(bytes->data(), bytes->size()).status());
  for (uint32_t minor : minors) {
    ASSERT_TRUE(root->mutate_version_minor(minor));
    EXPECT_THAT(Model::LoadBuffer(bytes->data(), bytes->size()).status(),
                testing::StatusIs(absl::StatusCode::kDataLoss,
                                  HasSubstr(absl::StrCat(
                                      "layers[0].ffn.up: dtype ", DTypeName(dtype),
                                      " of format 1.", minor, " (", bits,
                                      " bits per weight) is no longer read"))))
        << minor;
  }
  ASSERT_TRUE(root->mutate_version_minor(later));
  EXPECT_OK(Model::LoadBuffer(bytes->data(), bytes->size()).status());
  bytes = WriteModelBuffer(KModel(unchanged, unchanged, 256, 512, 9), WriteOptions());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(schema::GetMutableSizePrefixedModel(bytes->data())
                  ->mutate_version_minor(*(minors.end() - 1)));
  EXPECT_OK(Model::LoadBuffer(bytes->data(), bytes->size()).status());
}

// q2_k of format 1.9 or 1.10 (its mins in bytes of their own, 2.875 bits per weight); 1.11 loads,
// and a q6_k_i8 file of 1.10.
TEST(Q2kTest, FilesOfTheFormerLayoutAreRefusedByName) {
  CheckFormerLayoutRefused(DType::Q2_K_PACKED, DType::Q6_K, {9, 10}, 11, "2.875", DType::Q6_K);
}

// mxfp4 of format 1.10 or 1.11 (an f16 scale per 32, 4.5 bits per weight); 1.12 loads, and an
// iq4_nl file (i8's f16 scales) of 1.11.
TEST(Mxfp4Test, FilesOfTheFormerLayoutAreRefusedByName) {
  CheckFormerLayoutRefused(DType::MXFP4, DType::MXFP4, {10, 11}, 12, "4.5", DType::IQ4_NL);
}

// q3_k of format 1.8 to 1.12 (a byte per 6-bit scale code, 3.5625 bits per weight); 1.13 loads,
// and an iq4_xs file (q6_k's byte scales) of 1.12.
TEST(Q3kTest, FilesOfTheFormerLayoutAreRefusedByName) {
  CheckFormerLayoutRefused(DType::Q3_K_PACKED, DType::Q3_K_PACKED, {8, 10, 12}, 13, "3.5625",
                           DType::IQ4_XS);
}

}  // namespace
}  // namespace fflite
