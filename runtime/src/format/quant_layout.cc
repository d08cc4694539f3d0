// The quantised layout addressed by the file's dtypes (quant_layout.h), on the types' traits.
#include "format/quant_layout.h"

#include <cstring>

namespace fflite {

namespace {

template <typename Q>
void Pack(uint64_t rows, uint64_t k, const int8_t* q, const uint16_t* scales_f16, uint8_t* dst) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  std::memset(dst, 0, g.bytes());
  for (uint64_t p = 0; p < g.panels; ++p) {
    uint8_t* panel = dst + p * g.panel_bytes;
    for (uint64_t r = 0; r < kQuantPanelRows; ++r) {
      const uint64_t row = p * kQuantPanelRows + r;
      for (uint64_t b = 0; b < g.k_blocks; ++b) {
        // Padding rows and blocks keep zero scales and zero values (I4: nibble 8).
        const uint16_t s = row < rows ? scales_f16[row * g.k_blocks + b] : 0;
        std::memcpy(panel + (b * kQuantPanelRows + r) * 2, &s, 2);
        uint8_t* blk = panel + g.scale_bytes + b * g.block_panel_bytes;
        for (uint64_t j = 0; j < kQuantBlock; ++j) {
          const uint64_t col = b * kQuantBlock + j;
          Q::SetValue(blk, r, j, row < rows && col < k ? q[row * k + col] : 0);
        }
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
    Pack<decltype(traits)>(rows, k, q, scales_f16, dst);
  });
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
        // Scales are [block][16 rows]: the first k_blocks · 32 bytes are the source's.
        const uint8_t* in = src + p * from.panel_bytes;
        std::memcpy(panel, in, from.k_blocks * kQuantPanelRows * 2);
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

bool QuantScalesValid(const QuantGeometry& g, const uint8_t* data, uint64_t* bad_row,
                      uint64_t* bad_block) {
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
