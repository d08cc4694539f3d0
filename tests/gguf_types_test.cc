// The ggml type table and GGUF dequantisation: block geometry of every type, errors, values worked
// out by hand, and every dequantizable type bit for bit against a second statement of the
// specification written here element by element (which block field, which bits, then the
// formula), on random blocks and on edge blocks (zero, subnormal, infinite and NaN scales,
// negative mins, all-ones quants).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "converter/gguf_types.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace fflite {
namespace testing {
namespace {

using converter::DequantizeGguf;
using converter::FindGgmlType;
using converter::GgmlType;
using converter::GgmlTypeInfo;
using ::testing::HasSubstr;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// ---- The reference: one element at a time, straight from the specification. ----

// IEEE binary16 by its definition; NaNs come out quiet with their payload (ggml widens with a
// float multiply, which quiets them).
float RefF16(uint16_t h) {
  const int sign = h >> 15;
  const int exp = (h >> 10) & 31;
  const int man = h & 1023;
  if (exp == 31) {
    const uint32_t s = static_cast<uint32_t>(sign) << 31;
    const uint32_t payload = static_cast<uint32_t>(man) << 13;
    return FromBits(man == 0 ? s | 0x7f800000u : s | 0x7fc00000u | payload);
  }
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
                             : std::ldexp(static_cast<float>(1024 + man), exp - 25);
  return sign ? -mag : mag;
}

float RefBf16(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }

uint16_t U16At(const uint8_t* p, int off) {
  return static_cast<uint16_t>(p[off] + 256 * p[off + 1]);
}
float F16At(const uint8_t* p, int off) { return RefF16(U16At(p, off)); }

// A 4-bit field of a "split nibble" array: element e of a 32-element group lives in byte e % 16,
// low nibble for the first 16 elements, high nibble for the last 16.
int SplitNibble(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

// Element e (0..31) of an E2M1 code: sign, 2-bit exponent (bias 1), 1-bit mantissa, as a float.
float E2m1(int code) {
  const int exp = (code >> 1) & 3;
  const int man = code & 1;
  const float mag = exp == 0 ? 0.5f * static_cast<float>(man)
                             : std::ldexp(1.0f + 0.5f * static_cast<float>(man), exp - 1);
  return (code & 8) ? -mag : mag;
}

constexpr int kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};

// The 6-bit scale / min pair j (0..7) of a Q4_K / Q5_K block's 12 scale bytes.
void K4ScaleMin(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] % 64;
    *mn = s[4 + j] % 64;
  } else {
    const int lo_nibbles = s[8 + (j - 4)];
    *sc = (lo_nibbles & 15) + 16 * (s[j - 4] / 64);
    *mn = (lo_nibbles >> 4) + 16 * (s[j] / 64);
  }
}

// Digit n (0 = most significant) of a byte holding base-3 digits as a fraction of 256.
int Trit(uint8_t x, int n) {
  uint32_t v = x;
  for (int i = 0; i < n; ++i) v = (v * 3) % 256;
  return static_cast<int>((v * 3) / 256);
}

// Element e of the block at b.
float RefElement(GgmlType type, const uint8_t* b, int e) {
  switch (type) {
    case GgmlType::F16:
      return RefF16(U16At(b, 0));
    case GgmlType::BF16:
      return RefBf16(U16At(b, 0));
    case GgmlType::F32:
      return FromBits(U16At(b, 0) + 65536u * U16At(b, 2));
    case GgmlType::Q4_0:  // d, 16 bytes of nibbles
      return static_cast<float>(SplitNibble(b + 2, e) - 8) * F16At(b, 0);
    case GgmlType::Q4_1:  // d, m, nibbles
      return static_cast<float>(SplitNibble(b + 4, e)) * F16At(b, 0) + F16At(b, 2);
    case GgmlType::Q5_0: {  // d, 32 high bits, nibbles
      const int high = (b[2 + e / 8] >> (e % 8)) & 1;
      return static_cast<float>(SplitNibble(b + 6, e) + 16 * high - 16) * F16At(b, 0);
    }
    case GgmlType::Q5_1: {  // d, m, 32 high bits, nibbles
      const int high = (b[4 + e / 8] >> (e % 8)) & 1;
      return static_cast<float>(SplitNibble(b + 8, e) + 16 * high) * F16At(b, 0) + F16At(b, 2);
    }
    case GgmlType::Q8_0:
      return static_cast<float>(static_cast<int8_t>(b[2 + e])) * F16At(b, 0);
    case GgmlType::MXFP4: {
      // ggml: (2 * e2m1, as an integer) * 2^(e - 128). The integer has no -0: code 8 (-0 in
      // E2M1) dequantises to +0.
      const int doubled = static_cast<int>(2.0f * E2m1(SplitNibble(b + 1, e)));
      return static_cast<float>(doubled) * std::ldexp(1.0f, b[0] - 128);
    }
    case GgmlType::IQ4_NL:
      return F16At(b, 0) * static_cast<float>(kIq4nl[SplitNibble(b + 2, e)]);
    case GgmlType::Q2_K: {  // scales[16], qs[64], d, dmin
      const int group = e / 128, plane = (e % 128) / 32, pos = e % 32;
      const int q = (b[16 + 32 * group + pos] >> (2 * plane)) & 3;
      const int s = b[e / 16];
      const float dl = F16At(b, 80) * static_cast<float>(s % 16);
      const float ml = F16At(b, 82) * static_cast<float>(s / 16);
      return dl * static_cast<float>(q) - ml;
    }
    case GgmlType::Q3_K: {  // hmask[32], qs[64], scales[12], d
      const int group = e / 128, plane = (e % 128) / 32, pos = e % 32;
      const int low2 = (b[32 + 32 * group + pos] >> (2 * plane)) & 3;
      const bool high = (b[pos] >> (4 * group + plane)) & 1;
      const int j = e / 16;
      const uint8_t* s = b + 96;
      const int low4 = (j < 8 ? s[j] : s[j - 8] >> 4) & 15;
      const uint32_t top_bits =
          s[8] | (s[9] << 8) | (s[10] << 16) | (static_cast<uint32_t>(s[11]) << 24);
      const int top2 = (top_bits >> (8 * (j % 4) + 2 * (j / 4))) & 3;
      const float dl = F16At(b, 108) * static_cast<float>(low4 + 16 * top2 - 32);
      return dl * static_cast<float>(low2 - (high ? 0 : 4));
    }
    case GgmlType::Q4_K: {  // d, dmin, scales[12], qs[128]
      const int sub = e / 32;
      int sc, mn;
      K4ScaleMin(b + 4, sub, &sc, &mn);
      const uint8_t byte = b[16 + 32 * (sub / 2) + e % 32];
      const int q = sub % 2 == 0 ? byte & 15 : byte >> 4;
      return (F16At(b, 0) * static_cast<float>(sc)) * static_cast<float>(q) -
             F16At(b, 2) * static_cast<float>(mn);
    }
    case GgmlType::Q5_K: {  // d, dmin, scales[12], qh[32], qs[128]
      const int sub = e / 32;
      int sc, mn;
      K4ScaleMin(b + 4, sub, &sc, &mn);
      const uint8_t byte = b[48 + 32 * (sub / 2) + e % 32];
      const int high = (b[16 + e % 32] >> sub) & 1;
      const int q = (sub % 2 == 0 ? byte & 15 : byte >> 4) + 16 * high;
      return (F16At(b, 0) * static_cast<float>(sc)) * static_cast<float>(q) -
             F16At(b, 2) * static_cast<float>(mn);
    }
    case GgmlType::Q6_K: {  // ql[128], qh[64], scales[16] (int8), d
      const int group = e / 128, quarter = (e % 128) / 32, pos = e % 32;
      const uint8_t lo_byte = b[64 * group + 32 * (quarter % 2) + pos];
      const int low4 = quarter < 2 ? lo_byte & 15 : lo_byte >> 4;
      const int high2 = (b[128 + 32 * group + pos] >> (2 * quarter)) & 3;
      const float sc = static_cast<float>(static_cast<int8_t>(b[192 + e / 16]));
      return F16At(b, 208) * sc * static_cast<float>(low4 + 16 * high2 - 32);
    }
    case GgmlType::IQ4_XS: {  // d, scales_h (u16), scales_l[4], qs[128]
      const int sub = e / 32;
      const int low4 = (b[4 + sub / 2] >> (sub % 2 == 0 ? 0 : 4)) & 15;
      const int top2 = (U16At(b, 2) >> (2 * sub)) & 3;
      const float dl = F16At(b, 0) * static_cast<float>(low4 + 16 * top2 - 32);
      return dl * static_cast<float>(kIq4nl[SplitNibble(b + 8 + 16 * sub, e % 32)]);
    }
    case GgmlType::TQ1_0: {  // qs[48] (5 trits a byte), qh[4] (4 trits a byte), d
      int t;
      if (e < 160) {
        t = Trit(b[e % 32], e / 32);
      } else if (e < 240) {
        t = Trit(b[32 + (e - 160) % 16], (e - 160) / 16);
      } else {
        t = Trit(b[48 + (e - 240) % 4], (e - 240) / 4);
      }
      return static_cast<float>(t - 1) * F16At(b, 52);
    }
    case GgmlType::TQ2_0: {  // qs[64] (4 codes a byte), d
      const int q = (b[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      return static_cast<float>(q - 1) * F16At(b, 64);
    }
    default:
      ADD_FAILURE() << "no reference for type " << static_cast<uint32_t>(type);
      return 0.0f;
  }
}

// Every type DequantizeGguf handles, with the byte offsets of its f16 scale fields.
struct Case {
  GgmlType type;
  std::vector<int> f16_fields;
};
const std::vector<Case>& Cases() {
  static const std::vector<Case> kCases = {
      {GgmlType::F32, {}},        {GgmlType::F16, {0}},         {GgmlType::BF16, {}},
      {GgmlType::Q4_0, {0}},      {GgmlType::Q4_1, {0, 2}},     {GgmlType::Q5_0, {0}},
      {GgmlType::Q5_1, {0, 2}},   {GgmlType::Q8_0, {0}},        {GgmlType::Q2_K, {80, 82}},
      {GgmlType::Q3_K, {108}},    {GgmlType::Q4_K, {0, 2}},     {GgmlType::Q5_K, {0, 2}},
      {GgmlType::Q6_K, {208}},    {GgmlType::IQ4_NL, {0}},      {GgmlType::IQ4_XS, {0}},
      {GgmlType::TQ1_0, {52}},    {GgmlType::TQ2_0, {64}},      {GgmlType::MXFP4, {}},
  };
  return kCases;
}

// Dequantises `blocks` (whole blocks of `type`, starting one byte into a buffer so that nothing
// is aligned) and compares every element's bits with the reference.
void ExpectMatchesReference(GgmlType type, const std::vector<uint8_t>& blocks,
                            const std::string& what) {
  const GgmlTypeInfo* info = FindGgmlType(static_cast<uint32_t>(type));
  ASSERT_NE(info, nullptr);
  ASSERT_EQ(blocks.size() % info->block_bytes, 0u);
  const size_t nblocks = blocks.size() / info->block_bytes;
  std::vector<uint8_t> shifted(blocks.size() + 1);
  std::memcpy(shifted.data() + 1, blocks.data(), blocks.size());
  std::vector<float> out(nblocks * info->block_elems + 1, 0.0f);
  ASSERT_OK(DequantizeGguf(type, shifted.data() + 1, nblocks * info->block_elems, out.data() + 1));
  int mismatches = 0;
  for (size_t i = 0; i < nblocks; ++i) {
    const uint8_t* b = blocks.data() + i * info->block_bytes;
    for (uint32_t e = 0; e < info->block_elems; ++e) {
      const float want = RefElement(type, b, static_cast<int>(e));
      const float got = out[1 + i * info->block_elems + e];
      // A NaN that arithmetic makes (inf·0, inf - inf) has the platform's default bits (x86:
      // 0xffc00000, ARM: 0x7fc00000), whichever operation makes it: any NaN matches any NaN
      // there. The plain types' conversions keep their bits, which are compared.
      const bool plain = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
      if (!plain && std::isnan(got) && std::isnan(want)) continue;
      if (Bits(got) != Bits(want) && ++mismatches <= 5) {
        ADD_FAILURE() << info->name << " " << what << ": block " << i << " element " << e
                      << ": got " << got << " (0x" << std::hex << Bits(got) << "), want " << want
                      << " (0x" << Bits(want) << ")" << std::dec;
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << info->name << " " << what;
}

void PutF16(std::vector<uint8_t>& v, size_t at, uint16_t h) {
  v[at] = static_cast<uint8_t>(h & 0xff);
  v[at + 1] = static_cast<uint8_t>(h >> 8);
}

TEST(GgmlTypeTableTest, BlockGeometryOfEveryType) {
  struct Want {
    uint32_t id;
    const char* name;
    uint32_t elems, bytes;
    bool deq;
  };
  // From ggml-common.h's block structs (sizeof) and ggml.c's type traits.
  const Want kWant[] = {
      {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},
      {2, "Q4_0", 32, 18, true},       {3, "Q4_1", 32, 20, true},
      {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
      {8, "Q8_0", 32, 34, true},       {9, "Q8_1", 32, 36, false},
      {10, "Q2_K", 256, 84, true},     {11, "Q3_K", 256, 110, true},
      {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
      {14, "Q6_K", 256, 210, true},    {15, "Q8_K", 256, 292, false},
      {16, "IQ2_XXS", 256, 66, false}, {17, "IQ2_XS", 256, 74, false},
      {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
      {20, "IQ4_NL", 32, 18, true},    {21, "IQ3_S", 256, 110, false},
      {22, "IQ2_S", 256, 82, false},   {23, "IQ4_XS", 256, 136, true},
      {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
      {26, "I32", 1, 4, false},        {27, "I64", 1, 8, false},
      {28, "F64", 1, 8, false},        {29, "IQ1_M", 256, 56, false},
      {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, true},
      {35, "TQ2_0", 256, 66, true},    {39, "MXFP4", 32, 17, true},
  };
  size_t known = 0;
  for (uint32_t id = 0; id < 300; ++id) known += FindGgmlType(id) != nullptr;
  EXPECT_EQ(known, std::size(kWant));
  for (const Want& w : kWant) {
    const GgmlTypeInfo* info = FindGgmlType(w.id);
    ASSERT_NE(info, nullptr) << w.id;
    EXPECT_EQ(static_cast<uint32_t>(info->type), w.id);
    EXPECT_STREQ(info->name, w.name);
    EXPECT_EQ(info->block_elems, w.elems) << w.name;
    EXPECT_EQ(info->block_bytes, w.bytes) << w.name;
    EXPECT_EQ(info->dequantizable, w.deq) << w.name;
  }
  // Removed ids (Q4_2, Q4_3, the repacked Q4_0_x_y / IQ4_NL_x_y) and ids past the table.
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 41u, 42u, 1000u, 0xffffffffu}) {
    EXPECT_EQ(FindGgmlType(id), nullptr) << id;
  }
}

TEST(DequantizeGgufTest, Errors) {
  std::vector<uint8_t> src(1024, 0);
  std::vector<float> dst(1024);
  EXPECT_THAT(DequantizeGguf(GgmlType::Q4_0, src.data(), 48, dst.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Q4_0")));
  EXPECT_THAT(DequantizeGguf(GgmlType::Q4_K, src.data(), 32, dst.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("256")));
  EXPECT_THAT(DequantizeGguf(GgmlType::IQ2_XXS, src.data(), 256, dst.data()),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("IQ2_XXS")));
  EXPECT_THAT(DequantizeGguf(GgmlType::I32, src.data(), 4, dst.data()),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("I32")));
  EXPECT_THAT(DequantizeGguf(static_cast<GgmlType>(4), src.data(), 32, dst.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("4")));
  // Zero elements is a whole number of blocks.
  EXPECT_OK(DequantizeGguf(GgmlType::Q6_K, nullptr, 0, nullptr));
}

// Values worked out by hand from the block layouts, so the test does not rest only on two
// implementations agreeing.
TEST(DequantizeGgufTest, HandComputedQ4_0) {
  // d = 0x3800 = 0.5. Byte 0 = 0x1f: element 0 is the low nibble 15 -> (15 - 8) * 0.5 = 3.5,
  // element 16 the high nibble 1 -> (1 - 8) * 0.5 = -3.5. Byte 1 = 0x80: element 1 = (0 - 8) *
  // 0.5 = -4, element 17 = (8 - 8) * 0.5 = 0.
  std::vector<uint8_t> b(18, 0x88);  // the other nibbles are 8: value 0
  PutF16(b, 0, 0x3800);
  b[2] = 0x1f;
  b[3] = 0x80;
  float y[32];
  ASSERT_OK(DequantizeGguf(GgmlType::Q4_0, b.data(), 32, y));
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[16], -3.5f);
  EXPECT_EQ(y[1], -4.0f);
  EXPECT_EQ(y[17], 0.0f);
  EXPECT_EQ(y[31], 0.0f);
}

TEST(DequantizeGgufTest, HandComputedQ8_0) {
  // d = 0xc000 = -2. qs = 127, -128, 3 -> -254, 256, -6.
  std::vector<uint8_t> b(34, 0);
  PutF16(b, 0, 0xc000);
  b[2] = 0x7f;
  b[3] = 0x80;
  b[4] = 0x03;
  float y[32];
  ASSERT_OK(DequantizeGguf(GgmlType::Q8_0, b.data(), 32, y));
  EXPECT_EQ(y[0], -254.0f);
  EXPECT_EQ(y[1], 256.0f);
  EXPECT_EQ(y[2], -6.0f);
  EXPECT_EQ(Bits(y[3]), 0x80000000u);  // 0 * -2 = -0
}

TEST(DequantizeGgufTest, HandComputedQ4_K) {
  // d = 1 (0x3c00), dmin = 0.5 (0x3800). Scale bytes (offset 4): s[0] = 0x42 (scale 0 = 2, top
  // bits 01), s[4] = 0x83 (min 0 = 3, top bits 10), s[1] = 1 (scale 1), s[5] = 0 (min 1),
  // s[8] = 0x75: scale 4 = 5 | 01 << 4 = 21, min 4 = 7 | 10 << 4 = 39.
  //   element 0   = sub-block 0, low nibble of qs[0] = 0xa4 -> 4:  1 * 2 * 4 - 0.5 * 3 = 6.5
  //   element 32  = sub-block 1, high nibble of qs[0]     -> 10: 1 * 1 * 10 - 0.5 * 0 = 10
  //   element 128 = sub-block 4, low nibble of qs[64] = 0x0f -> 15: 21 * 15 - 0.5 * 39 = 295.5
  std::vector<uint8_t> b(144, 0);
  PutF16(b, 0, 0x3c00);
  PutF16(b, 2, 0x3800);
  b[4 + 0] = 0x42;
  b[4 + 4] = 0x83;
  b[4 + 1] = 0x01;
  b[4 + 5] = 0x00;
  b[4 + 8] = 0x75;
  b[16 + 0] = 0xa4;
  b[16 + 64] = 0x0f;
  float y[256];
  ASSERT_OK(DequantizeGguf(GgmlType::Q4_K, b.data(), 256, y));
  EXPECT_EQ(y[0], 6.5f);
  EXPECT_EQ(y[32], 10.0f);
  EXPECT_EQ(y[128], 295.5f);
  EXPECT_EQ(y[1], -1.5f);  // quant 0: only the min, -0.5 * 3
}

TEST(DequantizeGgufTest, HandComputedMxfp4) {
  // Block 0: e = 128 -> scale 2^(128 - 127) = 2. qs[0] = 0x7f: element 0 is code 0xf = -(1.5 *
  // 2^2) = -6 -> -12; element 16 is code 7 = 6 -> 12. qs[1] = 0x91: element 1 is code 1 = 0.5
  // -> 1; element 17 is code 9 = -0.5 -> -1. Block 1: e = 0 -> scale 2^-127; code 1 (0.5)
  // gives 2^-128, an f32 subnormal (bits 0x00200000), and code 7 (6) gives 1.5 * 2^-125.
  // Code 8 (E2M1's -0) is +0: ggml's value table holds integers, which have no -0.
  std::vector<uint8_t> b(34, 0);
  b[0] = 128;
  b[1] = 0x7f;
  b[2] = 0x91;
  b[4] = 0x08;
  b[17] = 0;
  b[18] = 0x71;
  float y[64];
  ASSERT_OK(DequantizeGguf(GgmlType::MXFP4, b.data(), 64, y));
  EXPECT_EQ(y[0], -12.0f);
  EXPECT_EQ(y[16], 12.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[17], -1.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(Bits(y[3]), 0u);
  EXPECT_EQ(Bits(y[32]), 0x00200000u);
  EXPECT_EQ(y[48], std::ldexp(1.5f, -125));
}

TEST(DequantizeGgufTest, RandomBlocksMatchTheReference) {
  std::mt19937 rng(20240611);
  for (const Case& c : Cases()) {
    const GgmlTypeInfo* info = FindGgmlType(static_cast<uint32_t>(c.type));
    ASSERT_NE(info, nullptr);
    // Plain types: 4096 elements; block types: 24 blocks.
    const size_t nblocks = info->block_elems == 1 ? 4096 : 24;
    std::vector<uint8_t> blocks(nblocks * info->block_bytes);
    for (auto& byte : blocks) byte = static_cast<uint8_t>(rng());
    // Random f16 scales are finite here (edge scales have their own test); plain F16 is kept
    // fully random, NaNs included.
    if (c.type != GgmlType::F16) {
      for (size_t i = 0; i < nblocks; ++i) {
        for (int off : c.f16_fields) {
          uint8_t& hi = blocks[i * info->block_bytes + off + 1];
          if ((hi & 0x7c) == 0x7c) hi &= 0xbf;
        }
      }
    }
    ExpectMatchesReference(c.type, blocks, "random");
  }
}

TEST(DequantizeGgufTest, EdgeBlocksMatchTheReference) {
  // Scales: zero, -0, smallest subnormal, largest subnormal, largest finite, -1, inf, -inf, a
  // quiet and a signalling NaN.
  const uint16_t kScales[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x7bff,
                              0xbc00, 0x7c00, 0xfc00, 0x7e01, 0x7d55};
  for (const Case& c : Cases()) {
    const GgmlTypeInfo* info = FindGgmlType(static_cast<uint32_t>(c.type));
    ASSERT_NE(info, nullptr);
    std::vector<uint8_t> blocks;
    const auto add = [&](uint8_t fill, uint16_t scale, uint16_t second) {
      const size_t at = blocks.size();
      blocks.resize(at + info->block_bytes, fill);
      for (size_t k = 0; k < c.f16_fields.size(); ++k) {
        PutF16(blocks, at + c.f16_fields[k], k == 0 ? scale : second);
      }
    };
    for (uint8_t fill : {0x00, 0xff, 0x55, 0xaa, 0x0f, 0xf0, 0x80, 0x7f}) {
      for (uint16_t scale : kScales) add(fill, scale, 0xbc00);  // negative min / second scale
      add(fill, 0x3c00, 0x0000);
      add(fill, 0x3c00, 0x8001);
      add(fill, 0x3555, 0x7c00);
    }
    if (c.type == GgmlType::MXFP4) {
      for (int e = 0; e < 256; ++e) {  // every E8M0 exponent, with every code
        std::vector<uint8_t> b(17);
        b[0] = static_cast<uint8_t>(e);
        for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
        blocks.insert(blocks.end(), b.begin(), b.end());
      }
    }
    if (c.type == GgmlType::F16 || c.type == GgmlType::BF16) {
      blocks.clear();  // every 16-bit pattern
      for (uint32_t h = 0; h < 65536; ++h) {
        blocks.push_back(static_cast<uint8_t>(h & 0xff));
        blocks.push_back(static_cast<uint8_t>(h >> 8));
      }
    }
    ExpectMatchesReference(c.type, blocks, "edge");
  }
}

}  // namespace
}  // namespace testing
}  // namespace fflite
