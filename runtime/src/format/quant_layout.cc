// The quantised layout addressed by the file's dtypes (quant_layout.h), on the types' traits.
#include "format/quant_layout.h"

#include <cstring>

#include "base/half.h"

namespace fflite {

namespace {

// The E8M0 byte e of a power of two 2^(e - 128) given as f16 bits (the exponent of the scale's
// magnitude; any sign and mantissa dropped), 0 for a zero.
uint8_t E8m0OfF16(uint16_t h) {
  const unsigned exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp != 0) return static_cast<uint8_t>(exp + 113);  // 2^(exp - 15) = 2^(e - 128)
  if (mant == 0) return 0;
  unsigned top = 9;  // subnormal: mant·2^-24, its highest bit's power
  while ((mant >> top) == 0) --top;
  return static_cast<uint8_t>(top + 104);  // 2^(top - 24)
}

// The Q8 scheme's scale area: row `row`'s (< rows, else padding: zero) scale of block b, from
// f16 scales [rows, k_blocks] (MXF4: from E8M0 bytes where e8m0 is given, else each f16 as
// E8m0OfF16).
template <typename Q>
void Pack(uint64_t rows, uint64_t k, const int8_t* q, const uint16_t* scales_f16,
          const uint8_t* e8m0, uint8_t* dst) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  std::memset(dst, 0, g.bytes());
  for (uint64_t p = 0; p < g.panels; ++p) {
    uint8_t* panel = dst + p * g.panel_bytes;
    for (uint64_t r = 0; r < kQuantPanelRows; ++r) {
      const uint64_t row = p * kQuantPanelRows + r;
      for (uint64_t b = 0; b < g.k_blocks; ++b) {
        // Padding rows and blocks keep zero scales and zero values (I4: nibble 8).
        if constexpr (HasE8m0Scales<Q>()) {
          panel[b * kQuantPanelRows + r] =
              row >= rows          ? 0
              : e8m0 != nullptr ? e8m0[row * g.k_blocks + b]
                                : E8m0OfF16(scales_f16[row * g.k_blocks + b]);
        } else {
          const uint16_t s = row < rows ? scales_f16[row * g.k_blocks + b] : 0;
          std::memcpy(panel + (b * kQuantPanelRows + r) * 2, &s, 2);
        }
        uint8_t* blk = panel + g.scale_bytes + b * g.block_panel_bytes;
        for (uint64_t j = 0; j < kQuantBlock; ++j) {
          const uint64_t col = b * kQuantBlock + j;
          Q::SetValue(blk, r, j, row < rows && col < k ? q[row * k + col] : 0);
        }
      }
    }
  }
}

// GGUF's Q4_K / Q5_K packing of sub-block j's 6-bit scale and min in 12 bytes: bytes 0-3 scales
// and 4-7 mins of sub-blocks 0-3 (low 6 bits); sub-blocks 4-7 take their low 4 bits from bytes
// 8-11 and their top 2 from the spare top bits of bytes 0-7.
void UnpackKCodes(const uint8_t* codes, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = codes[j] & 63;
    *m = codes[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((codes[j + 4] & 0xF) | ((codes[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((codes[j + 4] >> 4) | ((codes[j] >> 6) << 4));
  }
}

// Q4K, Q5K from GGUF's Q4_K / Q5_K rows (k a multiple of 256; each row k / 256 blocks of
// `block_bytes`), which lead each block alike: f16 d, f16 dmin, 12 bytes of 6-bit scales and
// mins. put(in, j, blk, r) writes sub-block j's 32 values of the block at `in` into row r of the
// panel block `blk`. Padding rows: zero d, dmin and codes, and values 0 (the memset: Q4K's
// nibbles 0, Q5K's int8 0), which the zero scales make zero weights.
template <typename Q, typename Put>
void PackKMinFromGguf(uint64_t rows, uint64_t k, const uint8_t* gguf, uint64_t block_bytes,
                      uint8_t* dst, Put&& put) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  std::memset(dst, 0, g.bytes());
  const uint64_t supers = k / 256;
  for (uint64_t row = 0; row < rows; ++row) {
    uint8_t* panel = dst + row / kQuantPanelRows * g.panel_bytes;
    const size_t r = row % kQuantPanelRows;
    for (uint64_t s = 0; s < supers; ++s) {
      const uint8_t* in = gguf + (row * supers + s) * block_bytes;
      uint8_t* super = panel + s * Q::kSuperBytes;
      std::memcpy(super + 2 * r, in, 2);                            // d
      std::memcpy(super + 2 * kQuantPanelRows + 2 * r, in + 2, 2);  // dmin
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        UnpackKCodes(in + 4, j, &sc, &m);
        const uint64_t b = s * Q::kSuperBlocks + j;
        panel[Q::ScaleOffset(b) + r] = sc;
        panel[Q::ScaleOffset(b) + kQuantPanelRows + r] = m;
        put(in, j, panel + g.scale_bytes + b * g.block_panel_bytes, r);
      }
    }
  }
}

}  // namespace

QuantGeometry QuantMatrixGeometry(DType dtype, uint64_t rows, uint64_t k) {
  const DTypeInfo* info = FindDType(dtype);
  if (info == nullptr || !info->quantized) return QuantGeometry();
  return QuantMatrixGeometry(info->quant_type, rows, k);
}

void PackQuantMatrix(DType dtype, uint64_t rows, uint64_t k, const int8_t* q,
                     const uint16_t* scales_f16, uint8_t* dst) {
  WithQuantTraits(FindDType(dtype)->quant_type, [&](auto traits) {
    Pack<decltype(traits)>(rows, k, q, scales_f16, nullptr, dst);
  });
}

void PackMxfp4Matrix(uint64_t rows, uint64_t k, const int8_t* q, const uint8_t* e8m0,
                     uint8_t* dst) {
  Pack<MXF4>(rows, k, q, nullptr, e8m0, dst);
}

void RepadQuantMatrix(DType dtype, uint64_t rows, uint64_t k, const uint8_t* src,
                      uint64_t stored_rows, uint64_t stored_k, uint8_t* dst) {
  WithQuantTraits(FindDType(dtype)->quant_type, [&](auto traits) {
    using Q = decltype(traits);
    const QuantGeometry from = GeometryOf<Q>(rows, k), to = GeometryOf<Q>(stored_rows, stored_k);
    // One block of zero values (I4: nibbles 8) for the padding.
    uint8_t zero_block[Q::kBlockPanelBytes];
    for (size_t r = 0; r < kQuantPanelRows; ++r) {
      for (size_t j = 0; j < kQuantBlock; ++j) Q::SetValue(zero_block, r, j, 0);
    }
    for (uint64_t p = 0; p < to.panels; ++p) {
      uint8_t* panel = dst + p * to.panel_bytes;
      std::memset(panel, 0, to.scale_bytes);
      uint64_t b0 = 0;
      if (p < from.panels) {
        // Scales are [block][16 rows] (Q4K, Q6K: [super-block][the type's kSuperBytes]): the
        // first k_blocks · 32 bytes (Q4K, Q6K: the whole scale area) are the source's.
        const uint8_t* in = src + p * from.panel_bytes;
        if constexpr (HasHalfMins<Q>()) {
          // Q2KP: the Q6K scale areas, then the dmin after the last super-block's.
          const uint64_t supers = from.k_blocks / Q::kSuperBlocks;
          const uint64_t to_supers = to.k_blocks / Q::kSuperBlocks;
          std::memcpy(panel, in, supers * Q6K::kSuperBytes);
          std::memcpy(panel + Q::MinOffset(to_supers, 0), in + Q::MinOffset(supers, 0),
                      supers * Q::kMinBytes);
        } else {
          std::memcpy(panel, in,
                      HasSuperBlocks<Q>() ? from.scale_bytes
                                          : from.k_blocks * kQuantPanelRows * Q8ScaleBytes<Q>());
        }
        std::memcpy(panel + to.scale_bytes, in + from.scale_bytes,
                    from.k_blocks * from.block_panel_bytes);
        b0 = from.k_blocks;
      }
      for (uint64_t b = b0; b < to.k_blocks; ++b) {
        std::memcpy(panel + to.scale_bytes + b * to.block_panel_bytes, zero_block,
                    sizeof(zero_block));
      }
    }
  });
}

void PackQ4KFromGguf(uint64_t rows, uint64_t k, const uint8_t* gguf, uint8_t* dst) {
  // Sub-block j's 32 values: the low (j even) or high (j odd) nibbles of qs[32·(j/2) ..]; the
  // panel's byte c·64 + 4r + i holds values 4c + i (low nibble) and 16 + 4c + i (high).
  PackKMinFromGguf<Q4K>(rows, k, gguf, 144, dst,
                        [](const uint8_t* in, int j, uint8_t* blk, size_t r) {
                          const uint8_t* q = in + 16 + 32 * (j / 2);
                          const int shift = j % 2 == 0 ? 0 : 4;
                          for (size_t c = 0; c < 4; ++c) {
                            for (size_t i = 0; i < 4; ++i) {
                              const unsigned lo = (q[4 * c + i] >> shift) & 0xFu;
                              const unsigned hi = (q[16 + 4 * c + i] >> shift) & 0xFu;
                              blk[c * 64 + 4 * r + i] = static_cast<uint8_t>(lo | (hi << 4));
                            }
                          }
                        });
}

void PackQ5KFromGguf(DType dtype, uint64_t rows, uint64_t k, const uint8_t* gguf, uint8_t* dst) {
  // Sub-block j's 32 values: Q4_K's nibbles (qs at byte 48), plus 16 where bit j of qh[l] (32
  // bytes at byte 16) is set.
  auto pack = [&](auto traits) {
    using Q = decltype(traits);
    PackKMinFromGguf<Q>(rows, k, gguf, 176, dst,
                        [](const uint8_t* in, int j, uint8_t* blk, size_t r) {
                          const uint8_t* qh = in + 16;
                          const uint8_t* q = in + 48 + 32 * (j / 2);
                          for (size_t l = 0; l < 32; ++l) {
                            const int n = ((j % 2 == 0 ? q[l] : q[l] >> 4) & 0xF) |
                                          (((qh[l] >> j) & 1) << 4);
                            Q::SetValue(blk, r, l, n);
                          }
                        });
  };
  if (dtype == DType::Q5_K_PACKED) {
    pack(Q5KP{});
  } else {
    pack(Q5K{});
  }
}

namespace {

template <typename Q>
void PackQ6KBlocks(uint64_t rows, uint64_t k, const Q6KBlockFn& block, uint8_t* dst) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  std::memset(dst, 0, g.bytes());
  const uint64_t supers = k / 256;
  int8_t scales[16], values[256];
  for (uint64_t row = 0; row < rows; ++row) {
    uint8_t* panel = dst + row / kQuantPanelRows * g.panel_bytes;
    const size_t r = row % kQuantPanelRows;
    for (uint64_t s = 0; s < supers; ++s) {
      uint16_t d = 0;
      block(row, s, &d, scales, values);
      uint8_t* super = panel + Q::SuperOffset(s * Q::kSuperBlocks);
      super[2 * r] = static_cast<uint8_t>(d & 0xFF);
      super[2 * r + 1] = static_cast<uint8_t>(d >> 8);
      for (int j = 0; j < 8; ++j) {
        const uint64_t b = s * Q::kSuperBlocks + j;
        if constexpr (HasPackedScales<Q>()) {  // Q3KP: 6-bit codes sc + 32 (sc in [-32, 31])
          SetQ3KCode(panel + Q::ScaleOffset(b), r, 0, scales[2 * j] + 32);
          SetQ3KCode(panel + Q::ScaleOffset(b), r, 1, scales[2 * j + 1] + 32);
        } else {
          panel[Q::ScaleOffset(b) + r] = static_cast<uint8_t>(scales[2 * j]);
          panel[Q::ScaleOffset(b) + kQuantPanelRows + r] =
              static_cast<uint8_t>(scales[2 * j + 1]);
        }
        uint8_t* blk = panel + g.scale_bytes + b * g.block_panel_bytes;
        for (size_t l = 0; l < 32; ++l) Q::SetValue(blk, r, l, values[32 * j + l]);
      }
    }
  }
}

}  // namespace

void PackQ6KFromBlocks(DType dtype, uint64_t rows, uint64_t k, const Q6KBlockFn& block,
                       uint8_t* dst) {
  // Any type of Q6K's scales (q6_k_i8, q6_k, q3_k, iq4_xs), by its traits.
  WithQuantTraits(FindDType(dtype)->quant_type, [&](auto traits) {
    using Q = decltype(traits);
    if constexpr (HasHalfScales<Q>()) PackQ6KBlocks<Q>(rows, k, block, dst);
  });
}

void PackQ6KFromGguf(DType dtype, uint64_t rows, uint64_t k, const uint8_t* gguf, uint8_t* dst) {
  constexpr uint64_t kGgufBlockBytes = 210;
  const uint64_t supers = k / 256;
  PackQ6KFromBlocks(
      dtype, rows, k,
      [&](uint64_t row, uint64_t s, uint16_t* d, int8_t* scales, int8_t* values) {
        const uint8_t* in = gguf + (row * supers + s) * kGgufBlockBytes;
        const uint8_t* ql = in;        // low 4 bits of the 6-bit codes
        const uint8_t* qh = in + 128;  // their top 2 bits
        *d = static_cast<uint16_t>(in[208] | (in[209] << 8));
        for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(in[192 + j]);
        // GGUF's order: value e = 128h + 32p + l (h < 2, p < 4, l < 32) takes the low (p < 2) or
        // high (p >= 2) nibble of ql[64h + l] (p even) or ql[64h + l + 32] (p odd), and bits 2p
        // and 2p + 1 of qh[32h + l] as its top two.
        for (uint64_t e = 0; e < 256; ++e) {
          const uint64_t h = e / 128, p = e % 128 / 32, l = e % 32;
          const uint8_t lo_byte = ql[64 * h + l + (p % 2 == 1 ? 32 : 0)];
          const int lo = p < 2 ? lo_byte & 0xF : lo_byte >> 4;
          const int hi = (qh[32 * h + l] >> (2 * p)) & 3;
          values[e] = static_cast<int8_t>((lo | (hi << 4)) - 32);
        }
      },
      dst);
}

void PackQ2KFromGguf(uint64_t rows, uint64_t k, const uint8_t* gguf, uint8_t* dst) {
  constexpr uint64_t kGgufBlockBytes = 84;
  const uint64_t supers = k / 256;
  // Q6_K's part: d, GGUF's scale bytes as they are (the 4-bit scale in the low nibble, the min in
  // the high one: Q2KP) and the 2-bit values. GGUF's order: value e = 128n + 32j + 16i + l
  // (n < 2, j < 4, i < 2, l < 16) is bits 2j, 2j + 1 of qs[32n + 16i + l] (qs at byte 16), in
  // half-block e / 16, whose scale and min are scales[e / 16]'s.
  PackQ6KFromBlocks(
      DType::Q2_K_PACKED, rows, k,
      [&](uint64_t row, uint64_t s, uint16_t* d, int8_t* scales, int8_t* values) {
        const uint8_t* in = gguf + (row * supers + s) * kGgufBlockBytes;
        *d = static_cast<uint16_t>(in[80] | (in[81] << 8));
        for (int h = 0; h < 16; ++h) scales[h] = static_cast<int8_t>(in[h]);
        for (uint64_t e = 0; e < 256; ++e) {
          const uint64_t n = e / 128, j = e % 128 / 32, il = e % 32;
          values[e] = static_cast<int8_t>((in[16 + 32 * n + il] >> (2 * j)) & 3);
        }
      },
      dst);
  // The dmin (padding rows keep PackQ6KFromBlocks's zeros).
  const QuantGeometry g = GeometryOf<Q2KP>(rows, k);
  for (uint64_t row = 0; row < rows; ++row) {
    uint8_t* panel = dst + row / kQuantPanelRows * g.panel_bytes;
    const size_t r = row % kQuantPanelRows;
    for (uint64_t s = 0; s < supers; ++s) {
      const uint8_t* in = gguf + (row * supers + s) * kGgufBlockBytes;
      std::memcpy(panel + Q2KP::MinOffset(supers, s) + 2 * r, in + 82, 2);
    }
  }
}

int8_t QuantValueAt(DType dtype, const QuantGeometry& g, const uint8_t* data, uint64_t r,
                    uint64_t j) {
  const uint64_t p = r / kQuantPanelRows, b = j / kQuantBlock;
  const uint8_t* blk = data + p * g.panel_bytes + g.scale_bytes + b * g.block_panel_bytes;
  return static_cast<int8_t>(WithQuantTraits(FindDType(dtype)->quant_type, [&](auto traits) {
    return decltype(traits)::Value(blk, r % kQuantPanelRows, j % kQuantBlock);
  }));
}

uint16_t QuantScaleAt(const QuantGeometry& g, const uint8_t* data, uint64_t r, uint64_t block) {
  return PanelScale(data + r / kQuantPanelRows * g.panel_bytes, r % kQuantPanelRows, block);
}

float QuantBlockScale(DType dtype, const QuantGeometry& g, const uint8_t* data, uint64_t r,
                      uint64_t block) {
  const uint8_t* panel = data + r / kQuantPanelRows * g.panel_bytes;
  if (dtype == DType::MXFP4) return E8m0Scale(PanelE8m0(panel, r % kQuantPanelRows, block));
  return F16ToF32(PanelScale(panel, r % kQuantPanelRows, block));
}

bool QuantScalesValid(DType dtype, const QuantGeometry& g, const uint8_t* data, uint64_t* bad_row,
                      uint64_t* bad_block, const char** what, const char** problem) {
  const DTypeInfo* info = FindDType(dtype);
  const QuantType scheme =
      info != nullptr && info->quantized ? QuantSchemeOf(info->quant_type) : QuantType::kQ8;
  if (scheme == QuantType::kQ4K || scheme == QuantType::kQ5K) {
    for (uint64_t p = 0; p < g.panels; ++p) {
      const uint8_t* panel = data + p * g.panel_bytes;
      for (uint64_t b = 0; b < g.k_blocks; ++b) {
        for (size_t r = 0; r < kQuantPanelRows; ++r) {
          const bool super_bad = b % Q4K::kSuperBlocks == 0 &&
                                 ((KSuper(panel, r, b, false) & 0x7c00u) == 0x7c00u ||
                                  (KSuper(panel, r, b, true) & 0x7c00u) == 0x7c00u);
          const bool code_bad =
              KCode(panel, r, b, false) > Q4K::kMaxCode || KCode(panel, r, b, true) > Q4K::kMaxCode;
          if (super_bad || code_bad) {
            *bad_row = p * kQuantPanelRows + r;
            *bad_block = b;
            *what = super_bad ? "super-block's d or dmin" : "6-bit scale or min";
            *problem = super_bad ? "is not finite" : "is above 63";
            return false;
          }
        }
      }
    }
    return true;
  }
  if (scheme == QuantType::kQ6K) {
    const bool mins = QuantHasHalfMins(info->quant_type);
    const bool packed_scales = info->quant_type == QuantType::kQ3KP;  // its own scale area
    const uint64_t supers = g.k_blocks / Q6K::kSuperBlocks;
    *what = mins ? "super-block's d or dmin" : "super-block's d";
    *problem = "is not finite";
    for (uint64_t p = 0; p < g.panels; ++p) {
      const uint8_t* panel = data + p * g.panel_bytes;
      for (uint64_t b = 0; b < g.k_blocks; b += Q6K::kSuperBlocks) {
        for (size_t r = 0; r < kQuantPanelRows; ++r) {
          const uint16_t d =
              packed_scales ? HalfSuper<Q3KP>(panel, r, b) : HalfSuper<Q6K>(panel, r, b);
          if ((d & 0x7c00u) == 0x7c00u ||
              (mins && (K2Dmin(panel, r, supers, b / Q6K::kSuperBlocks) & 0x7c00u) == 0x7c00u)) {
            *bad_row = p * kQuantPanelRows + r;
            *bad_block = b;
            return false;
          }
        }
      }
    }
    return true;
  }
  *what = "scale";
  if (info != nullptr && info->quant_type == QuantType::kMXF4) {
    // E8M0 bytes: 0 (a zero scale, padding) or 2^(e - 127) for e in [2, 254]; 255 is E8M0's NaN,
    // and 1 (2^-126, whose half is below f32's normal range) is not written by the converter.
    *problem = "is not an E8M0 scale mxfp4 holds (1 or 255)";
    for (uint64_t p = 0; p < g.panels; ++p) {
      const uint8_t* panel = data + p * g.panel_bytes;
      for (uint64_t i = 0; i < g.k_blocks * kQuantPanelRows; ++i) {
        const uint8_t e = PanelE8m0(panel, i % kQuantPanelRows, i / kQuantPanelRows);
        if (e == 1 || e == 255) {
          *bad_row = p * kQuantPanelRows + i % kQuantPanelRows;
          *bad_block = i / kQuantPanelRows;
          return false;
        }
      }
    }
    return true;
  }
  *problem = "is not finite";
  for (uint64_t p = 0; p < g.panels; ++p) {
    const uint8_t* panel = data + p * g.panel_bytes;
    for (uint64_t i = 0; i < g.k_blocks * kQuantPanelRows; ++i) {
      const uint16_t h = PanelScale(panel, i % kQuantPanelRows, i / kQuantPanelRows);
      if ((h & 0x7c00u) == 0x7c00u) {  // f16 exponent all ones: Inf or NaN
        *bad_row = p * kQuantPanelRows + i % kQuantPanelRows;
        *bad_block = i / kQuantPanelRows;
        return false;
      }
    }
  }
  return true;
}

}  // namespace fflite
