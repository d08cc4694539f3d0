// ggml's tensor types and their dequantisation, written from the GGUF/ggml specification (the
// block layouts of ggml-common.h and the reference dequantize_row_* functions of ggml-quants.c).
//
// Bit-exactness: every value is computed with the same float operations, in the same order and
// with the same int -> float conversions as ggml's reference code, so the results match it bit
// for bit. In fact every intermediate is exact in f32 (an f16 scale has 11 significant bits,
// times at most an 8-bit sub-scale and a 6-bit quant), so only the last operation rounds: the
// result does not depend on the order of the products, nor on a compiler contracting d * q - m
// into a fused multiply-add (clang does where the target has FMA, e.g. aarch64).
//
// Bytes are read one at a time and assembled little-endian (the format's byte order), so blocks
// may sit at any alignment and the code does not depend on the host's byte order.
#include "converter/gguf_types.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "base/half.h"
#include "kernels/quant_types.h"

namespace fflite {
namespace converter {
namespace {

constexpr uint32_t kQK = 32;    // elements of a simple block (Q4_0 ... Q8_1, IQ4_NL, MXFP4)
constexpr uint32_t kQKK = 256;  // elements of a K-quant / IQ / TQ super-block

// Ids in ascending order; block bytes from ggml-common.h's block structs.
constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::F32, "F32", 1, 4, true},
    {GgmlType::F16, "F16", 1, 2, true},
    {GgmlType::Q4_0, "Q4_0", kQK, 2 + 16, true},
    {GgmlType::Q4_1, "Q4_1", kQK, 2 + 2 + 16, true},
    {GgmlType::Q5_0, "Q5_0", kQK, 2 + 4 + 16, true},
    {GgmlType::Q5_1, "Q5_1", kQK, 2 + 2 + 4 + 16, true},
    {GgmlType::Q8_0, "Q8_0", kQK, 2 + 32, true},
    // Two f16 (d, d * sum) + 32 int8. gguf-py's GGML_QUANT_SIZES says 4 + 4 + 32 = 40 here, but
    // ggml's block_q8_1 (the layout ggml itself reads and writes) is 36 bytes.
    {GgmlType::Q8_1, "Q8_1", kQK, 2 + 2 + 32, false},
    {GgmlType::Q2_K, "Q2_K", kQKK, 16 + 64 + 2 + 2, true},
    {GgmlType::Q3_K, "Q3_K", kQKK, 32 + 64 + 12 + 2, true},
    {GgmlType::Q4_K, "Q4_K", kQKK, 2 + 2 + 12 + 128, true},
    {GgmlType::Q5_K, "Q5_K", kQKK, 2 + 2 + 12 + 32 + 128, true},
    {GgmlType::Q6_K, "Q6_K", kQKK, 128 + 64 + 16 + 2, true},
    // An f32 scale, 256 int8 and 16 int16 group sums: ggml's dot-product intermediate, which has
    // no to_float in ggml's type traits either.
    {GgmlType::Q8_K, "Q8_K", kQKK, 4 + 256 + 32, false},
    // The IQ1/IQ2/IQ3 types index ggml's large lattice tables (iq2xxs_grid etc.); not here.
    {GgmlType::IQ2_XXS, "IQ2_XXS", kQKK, 2 + 64, false},
    {GgmlType::IQ2_XS, "IQ2_XS", kQKK, 2 + 64 + 8, false},
    {GgmlType::IQ3_XXS, "IQ3_XXS", kQKK, 2 + 96, false},
    {GgmlType::IQ1_S, "IQ1_S", kQKK, 2 + 32 + 16, false},
    {GgmlType::IQ4_NL, "IQ4_NL", kQK, 2 + 16, true},
    {GgmlType::IQ3_S, "IQ3_S", kQKK, 2 + 64 + 8 + 32 + 4, false},
    {GgmlType::IQ2_S, "IQ2_S", kQKK, 2 + 64 + 8 + 8, false},
    {GgmlType::IQ4_XS, "IQ4_XS", kQKK, 2 + 2 + 4 + 128, true},
    {GgmlType::I8, "I8", 1, 1, false},
    {GgmlType::I16, "I16", 1, 2, false},
    {GgmlType::I32, "I32", 1, 4, false},
    {GgmlType::I64, "I64", 1, 8, false},
    {GgmlType::F64, "F64", 1, 8, false},
    {GgmlType::IQ1_M, "IQ1_M", kQKK, 32 + 16 + 8, false},
    {GgmlType::BF16, "BF16", 1, 2, true},
    {GgmlType::TQ1_0, "TQ1_0", kQKK, 48 + 4 + 2, true},
    {GgmlType::TQ2_0, "TQ2_0", kQKK, 64 + 2, true},
    {GgmlType::MXFP4, "MXFP4", kQK, 1 + 16, true},
};

uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

uint32_t LoadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// An f16 at p, widened exactly. ggml widens with float arithmetic (a multiply by 2^-112), which
// turns a signalling NaN into a quiet one; so does this, for F16 tensors to match bit for bit (a
// quantised block's scale is multiplied before it is stored, which quiets it either way).
float Half(const uint8_t* p) {
  const float f = F16ToF32(LoadU16(p));
  const uint32_t u = FloatBits(f);
  return (u & 0x7fffffffu) > 0x7f800000u ? BitsToFloat(u | 0x00400000u) : f;
}

// IQ4_NL / IQ4_XS: the 16 non-uniform levels a nibble selects.
constexpr int8_t kIq4nlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4: the 16 E2M1 values (sign, 2-bit exponent, 1-bit mantissa: 0, 0.5, 1, 1.5, 2, 3, 4, 6),
// stored doubled so they are integers; the block's E8M0 scale is halved to compensate.
constexpr int8_t kE2m1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Half of the E8M0 scale 2^(e - 127), i.e. 2^(e - 128), built from its bits as ggml does: e = 0
// and 1 give the subnormals 2^-128 and 2^-127; e = 255 (NaN in the OCP MX spec) gives 2^127.
float E8m0Half(uint8_t e) {
  return BitsToFloat(e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23));
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. Bytes 0-3
// hold the scales of sub-blocks 0-3 and bytes 4-7 their mins (low 6 bits); sub-blocks 4-7 take
// their low 4 bits from the nibbles of bytes 8-11 and their top 2 bits from the spare top bits
// of bytes 0-7. (Written apart from the runtime's UnpackKCodes on purpose: this file is the
// specification's reading that the runtime's re-laying is tested against.)
void KScaleMin(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void Q4_0Block(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void Q4_1Block(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float m = Half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0 / Q5_1: bit e of the 32-bit qh is the fifth bit of element e.
void Q5_0Block(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint32_t qh = LoadU32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int x0 = static_cast<int>((qs[j] & 0xF) | (((qh >> j) & 1u) << 4)) - 16;
    const int x1 = static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

void Q5_1Block(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float m = Half(b + 2);
  const uint32_t qh = LoadU32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int x0 = static_cast<int>((qs[j] & 0xF) | (((qh >> j) & 1u) << 4));
    const int x1 = static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    y[j] = static_cast<float>(x0) * d + m;
    y[j + 16] = static_cast<float>(x1) * d + m;
  }
}

void Q8_0Block(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void Mxfp4Block(const uint8_t* b, float* y) {
  const float d = E8m0Half(b[0]);
  const uint8_t* qs = b + 1;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(kE2m1Doubled[qs[j] & 0xF]) * d;
    y[j + 16] = static_cast<float>(kE2m1Doubled[qs[j] >> 4]) * d;
  }
}

void Iq4nlBlock(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4nlLevels[qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4nlLevels[qs[j] >> 4]);
  }
}

// Q2_K: 16 sub-blocks of 16, each with a 4-bit scale (low nibble) and 4-bit min (high nibble).
// Each 32-byte run of qs holds four 2-bit planes: plane p of byte l is element 32p + l (first
// 16 bytes) or 32p + 16 + l (last 16), within each half of 128 elements.
void Q2_KBlock(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = Half(b + 80);
  const float dmin = Half(b + 82);
  int is = 0;
  for (int half = 0; half < 2; ++half, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF);
        const float ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Q3_K: 16 sub-blocks of 16 with 6-bit scales (offset by 32) packed into 12 bytes: the low 4 bits
// of scale j are the low (j < 8) or high (j >= 8) nibble of byte j % 8, its top 2 bits are bits
// 2 * (j / 4) of byte 8 + j % 4. Quants: 2 low bits in the planes of qs (as Q2_K); a clear bit in
// hmask subtracts 4 (bit plane 4 * half + plane of hmask byte l / l + 16). Writes the 16 signed
// scales (sub-block j: elements 16j .. 16j + 15) and the 256 values in [-4, 3], in element order.
void Q3KCodes(const uint8_t* b, int scales[16], int8_t v[256]) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* packed = b + 96;
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (packed[j] & 0xF) : (packed[j - 8] >> 4);
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = (low | (high << 4)) - 32;
  }
  uint8_t m = 1;
  for (int half = 0; half < 2; ++half, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
      for (int l = 0; l < 32; ++l) {
        *v++ = static_cast<int8_t>(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
      }
    }
  }
}

// (d * scale) * value per sub-block of 16, in ggml's order.
void Q3_KBlock(const uint8_t* b, float* y) {
  int scales[16];
  int8_t v[256];
  Q3KCodes(b, scales, v);
  const float d = Half(b + 108);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * static_cast<float>(scales[j]);
    for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>(v[16 * j + l]);
  }
}

// Q4_K: 8 sub-blocks of 32, each 64-element chunk from 32 bytes of qs (low nibbles, then high).
void Q4_KBlock(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int is = 0; is < 8; is += 2, q += 32) {
    uint8_t sc, m;
    KScaleMin(is, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc);
    const float m1 = dmin * static_cast<float>(m);
    KScaleMin(is + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc);
    const float m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K: Q4_K plus a fifth bit: bit is of qh[l] for the low nibbles of chunk is / 2, bit is + 1
// for the high ones.
void Q5_KBlock(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + 48;
  for (int is = 0; is < 8; is += 2, q += 32) {
    uint8_t sc, m;
    KScaleMin(is, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc);
    const float m1 = dmin * static_cast<float>(m);
    KScaleMin(is + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc);
    const float m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((q[l] & 0xF) + (((qh[l] >> is) & 1) << 4)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((q[l] >> 4) + (((qh[l] >> (is + 1)) & 1) << 4)) - m2;
    }
  }
}

// Q6_K: 16 sub-blocks of 16 with int8 scales; per 128-element half, 64 bytes of low nibbles and
// 32 bytes of 2-bit high parts. (d * sc) * q, in ggml's order.
void Q6_KBlock(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const uint8_t* sc = b + 192;
  const float d = Half(b + 208);
  for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      const auto scale = [&](int k) { return static_cast<float>(static_cast<int8_t>(sc[k])); };
      y[l] = d * scale(is) * static_cast<float>(q1);
      y[l + 32] = d * scale(is + 2) * static_cast<float>(q2);
      y[l + 64] = d * scale(is + 4) * static_cast<float>(q3);
      y[l + 96] = d * scale(is + 6) * static_cast<float>(q4);
    }
  }
}

// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (offset by 32): low 4 bits from the nibbles of
// scales_l, top 2 bits from the 16-bit scales_h; levels as IQ4_NL.
// Writes the 8 signed scales ls − 32 (scale j: elements 32j .. 32j + 31) and the 256 levels.
void Iq4xsCodes(const uint8_t* b, int ls[8], int8_t v[256]) {
  const uint16_t scales_h = LoadU16(b + 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, v += 32, qs += 16) {
    ls[ib] = (((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4)) -
             32;
    for (int j = 0; j < 16; ++j) {
      v[j] = kIq4nlLevels[qs[j] & 0xF];
      v[j + 16] = kIq4nlLevels[qs[j] >> 4];
    }
  }
}

void Iq4xsBlock(const uint8_t* b, float* y) {
  int ls[8];
  int8_t v[256];
  Iq4xsCodes(b, ls, v);
  const float d = Half(b);
  for (int ib = 0; ib < 8; ++ib) {
    const float dl = d * static_cast<float>(ls[ib]);
    for (int j = 0; j < 32; ++j) *y++ = dl * static_cast<float>(v[32 * ib + j]);
  }
}

// TQ1_0: ternary digits packed 5 per byte (qs) and 4 per byte (qh) as a base-3 fraction of 256:
// digit n of byte x is ((uint8_t)(x * 3^n) * 3) >> 8. Element order: the first 32 bytes of qs
// digit by digit (160), the last 16 likewise (80), then the 4 qh bytes for digits 0-3 (16).
void Tq1_0Block(const uint8_t* b, float* y) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t* qs = b;
  const uint8_t* qh = b + 48;
  const float d = Half(b + 52);
  const auto trit = [](uint8_t x, int n) {
    const uint8_t q = static_cast<uint8_t>(x * kPow3[n]);
    return ((q * 3) >> 8) - 1;
  };
  static constexpr int kRuns[2][2] = {{0, 32}, {32, 16}};  // {first byte, bytes}
  for (const auto& run : kRuns) {
    for (int n = 0; n < 5; ++n) {
      for (int m = 0; m < run[1]; ++m) *y++ = static_cast<float>(trit(qs[run[0] + m], n)) * d;
    }
  }
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < 4; ++j) *y++ = static_cast<float>(trit(qh[j], n)) * d;
  }
}

// TQ2_0: 2-bit codes 0..2 meaning -1..1, four planes per 32-byte run (as Q2_K).
void Tq2_0Block(const uint8_t* b, float* y) {
  const float d = Half(b + 64);
  for (int j = 0; j < 64; j += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(((b[j + m] >> shift) & 3) - 1) * d;
    }
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn BlockDecoder(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return Q4_0Block;
    case GgmlType::Q4_1: return Q4_1Block;
    case GgmlType::Q5_0: return Q5_0Block;
    case GgmlType::Q5_1: return Q5_1Block;
    case GgmlType::Q8_0: return Q8_0Block;
    case GgmlType::Q2_K: return Q2_KBlock;
    case GgmlType::Q3_K: return Q3_KBlock;
    case GgmlType::Q4_K: return Q4_KBlock;
    case GgmlType::Q5_K: return Q5_KBlock;
    case GgmlType::Q6_K: return Q6_KBlock;
    case GgmlType::IQ4_NL: return Iq4nlBlock;
    case GgmlType::IQ4_XS: return Iq4xsBlock;
    case GgmlType::TQ1_0: return Tq1_0Block;
    case GgmlType::TQ2_0: return Tq2_0Block;
    case GgmlType::MXFP4: return Mxfp4Block;
    default: return nullptr;
  }
}

}  // namespace

bool GgufBlockAsInt8(GgmlType type, const uint8_t* b, uint16_t* scale_f16, int8_t q[32]) {
  switch (type) {
    case GgmlType::Q8_0:
      std::memcpy(scale_f16, b, 2);
      std::memcpy(q, b + 2, 32);
      return true;
    case GgmlType::Q5_0: {
      std::memcpy(scale_f16, b, 2);
      const uint32_t qh = LoadU32(b + 2);
      const uint8_t* qs = b + 6;
      for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>(static_cast<int>((qs[j] & 0xF) | (((qh >> j) & 1u) << 4)) - 16);
        q[j + 16] = static_cast<int8_t>(
            static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16);
      }
      return true;
    }
    case GgmlType::IQ4_NL:
      std::memcpy(scale_f16, b, 2);
      for (int j = 0; j < 16; ++j) {
        q[j] = kIq4nlLevels[b[2 + j] & 0xF];
        q[j + 16] = kIq4nlLevels[b[2 + j] >> 4];
      }
      return true;
    case GgmlType::MXFP4: {
      if (!E8m0HalfAsF16(b[0], scale_f16)) return false;
      for (int j = 0; j < 16; ++j) {
        q[j] = kE2m1Doubled[b[1 + j] & 0xF];
        q[j + 16] = kE2m1Doubled[b[1 + j] >> 4];
      }
      return true;
    }
    default:
      return false;
  }
}

bool GgufScalesFitInt8(GgmlType type, const uint8_t* src, uint64_t n) {
  if (type == GgmlType::Q8_0 || type == GgmlType::Q5_0 || type == GgmlType::IQ4_NL) return true;
  if (type != GgmlType::MXFP4) return false;
  for (uint64_t b = 0; b < n / kQK; ++b) {
    if (!E8m0ScaleHeld(src[b * 17])) return false;
  }
  return true;
}

bool E8m0HalfAsF16(uint8_t e, uint16_t* f16) {
  // 2^p with p = e - 128: an f16 normal (exponent field p + 15) for p in [-14, 15], a subnormal
  // (bit p + 24 of the mantissa) for p in [-24, -15].
  const int p = static_cast<int>(e) - 128;
  if (p < -24 || p > 15) return false;
  *f16 = static_cast<uint16_t>(p >= -14 ? (p + 15) << 10 : 1 << (p + 24));
  return true;
}

const GgmlTypeInfo* FindGgmlType(uint32_t id) {
  for (const GgmlTypeInfo& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

absl::Status DequantizeGguf(GgmlType type, const uint8_t* src, uint64_t n, float* dst) {
  const GgmlTypeInfo* info = FindGgmlType(static_cast<uint32_t>(type));
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown ggml type id %u", static_cast<uint32_t>(type)));
  }
  if (!info->dequantizable) {
    return absl::UnimplementedError(
        absl::StrFormat("ggml type %s cannot be dequantised by the converter", info->name));
  }
  if (n % info->block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%u elements of %s is not a whole number of its %u-element blocks", n, info->name,
        info->block_elems));
  }
  switch (type) {
    case GgmlType::F32:
      for (uint64_t i = 0; i < n; ++i) dst[i] = BitsToFloat(LoadU32(src + 4 * i));
      return absl::OkStatus();
    case GgmlType::F16:
      for (uint64_t i = 0; i < n; ++i) dst[i] = Half(src + 2 * i);
      return absl::OkStatus();
    case GgmlType::BF16:
      for (uint64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(LoadU16(src + 2 * i));
      return absl::OkStatus();
    default:
      break;
  }
  const BlockFn decode = BlockDecoder(type);
  const uint64_t blocks = n / info->block_elems;
  for (uint64_t i = 0; i < blocks; ++i) {
    decode(src + i * info->block_bytes, dst + i * info->block_elems);
  }
  return absl::OkStatus();
}

bool GgufBlockAsQ6K(GgmlType type, const uint8_t* block, uint16_t* d, int8_t* scales,
                    int8_t* values) {
  if (type == GgmlType::Q3_K) {
    int sc[16];
    Q3KCodes(block, sc, values);
    for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(sc[j]);
    *d = LoadU16(block + 108);
    return true;
  }
  if (type == GgmlType::IQ4_XS) {
    int ls[8];
    Iq4xsCodes(block, ls, values);
    for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(ls[j / 2]);
    *d = LoadU16(block);
    return true;
  }
  return false;
}

}  // namespace converter
}  // namespace fflite
