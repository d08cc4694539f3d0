// The device layout of quantised matrices (cuda_quant.h), host side: plain C++, built and tested
// whether or not the cuda backend is.
#include "backends/cuda/cuda_quant.h"

#include <cstring>

#include "format/dtype.h"
#include "format/model.h"
#include "format/quant_layout.h"
#include "kernels/quant_types.h"

namespace fflite {
namespace cuda {

namespace {

uint64_t Blocks(uint64_t cols) { return (cols + kQBlock - 1) / kQBlock; }

// Row r's codes: I8 and I4 (and Q4_K, Q4's nibbles) keep a row's 4 values of each group g of a
// block at blk + 64g + 4r (kernels/quant_types.h: Q8's byte per value; Q4's byte holding value
// 4g + i in its low nibble and 16 + 4g + i in its high one, g < 4), which are the device row's
// bytes 4g .. 4g + 3 of that block in both layouts: copied 4 bytes at a time. The other types'
// values (levels, bit planes) are read one by one through their traits, as the file's
// dequantisation reads them.
template <typename Q>
void RelayCodes(const TensorView& t, const QuantGeometry& g, QKind kind, uint64_t r,
                uint8_t* row) {
  const uint8_t* panel = t.data + r / kQuantPanelRows * g.panel_bytes;
  const uint64_t pr = r % kQuantPanelRows, blocks = Blocks(t.shape[1]);
  const uint64_t block_bytes = RowBytes(kind, 1);
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = panel + g.scale_bytes + b * g.block_panel_bytes;
    uint8_t* out = row + b * block_bytes;
    if constexpr (Q::kType == QuantType::kQ8 || Q::kType == QuantType::kQ4 ||
                  Q::kType == QuantType::kQ4K) {
      for (uint64_t q = 0; q < block_bytes / 4; ++q) {
        std::memcpy(out + 4 * q, blk + 64 * q + 4 * pr, 4);
      }
    } else {
      // Past cols 0 (IQ4_NL's padding is its level nearest 0, 1; the kernels never read it).
      for (size_t j = 0; j < kQBlock; ++j) {
        const int v = b * kQBlock + j < t.shape[1] ? Q::Value(blk, pr, j) : 0;
        out[j] = static_cast<uint8_t>(static_cast<int8_t>(v));
      }
    }
  }
}

// MXFP4's scale d = 2^(e - 128) of an E8M0 byte as f16 bits where f16 holds it (e in [104, 143],
// or 0 for a zero scale); false otherwise.
bool E8m0AsF16(uint8_t e, uint16_t* h) {
  if (e == 0) {
    *h = 0;
  } else if (e >= 114 && e <= 143) {
    *h = static_cast<uint16_t>((e - 113) << 10);  // normal: 2^(exp - 15)
  } else if (e >= 104 && e < 114) {
    *h = static_cast<uint16_t>(1u << (e - 104));  // subnormal: 2^(bit - 24)
  } else {
    return false;
  }
  return true;
}

// Whether every scale of an MXFP4 matrix is one the device's f16 scales hold.
bool Mxfp4ScalesFitF16(const TensorView& t) {
  const QuantGeometry g = QuantMatrixGeometry(t.dtype, t.shape[0], t.shape[1]);
  for (uint64_t p = 0; p < g.panels; ++p) {
    const uint8_t* panel = t.data + p * g.panel_bytes;
    for (uint64_t i = 0; i < g.k_blocks * kQuantPanelRows; ++i) {
      uint16_t h;
      if (!E8m0AsF16(panel[i], &h)) return false;
    }
  }
  return true;
}

}  // namespace

bool KeepsQuantisedOnDevice(const TensorView& t, QKind* kind) {
  if (!t.present() || t.shape.size() != 2 || t.layout != Layout::PANEL16_K4) return false;
  switch (t.dtype) {
    case DType::I8:
    case DType::IQ4_NL: *kind = QKind::kQ8; return true;
    case DType::MXFP4:
      // Its E8M0 scales as the device's f16 where they all fit; dequantised on upload otherwise.
      *kind = QKind::kQ8;
      return Mxfp4ScalesFitF16(t);
    case DType::I4: *kind = QKind::kQ4; return true;
    case DType::Q4_K: *kind = QKind::kQ4K; break;
    case DType::Q6_K:
    case DType::Q6_K_PACKED:
    case DType::Q3_K_PACKED:
    case DType::IQ4_XS: *kind = QKind::kQ6K; break;
    case DType::Q5_K:
    case DType::Q5_K_PACKED: *kind = QKind::kQ5K; break;
    case DType::Q2_K_PACKED: *kind = QKind::kQ2K; break;
    default: return false;
  }
  return t.shape[1] % (8 * kQBlock) == 0;  // whole super-blocks: the loader's rule for these
}

uint64_t DeviceCodeBytes(QKind kind, uint64_t rows, uint64_t cols) {
  return rows * RowBytes(kind, Blocks(cols));
}

uint64_t DeviceScaleBytes(QKind kind, uint64_t rows, uint64_t cols) {
  return rows * ScaleWords(kind, Blocks(cols)) * 2;
}

void RelayForDevice(const TensorView& t, QKind kind, uint8_t* codes, uint16_t* scales) {
  const uint64_t rows = t.shape[0], cols = t.shape[1], blocks = Blocks(cols);
  const QuantGeometry g = QuantMatrixGeometry(t.dtype, rows, cols);
  const uint64_t words = ScaleWords(kind, blocks);
  WithQuantTraits(FindDType(t.dtype)->quant_type, [&](auto q) {
    using Q = decltype(q);
    for (uint64_t r = 0; r < rows; ++r) {
      RelayCodes<Q>(t, g, kind, r, codes + r * RowBytes(kind, blocks));
    }
  });
  const uint64_t supers = blocks / 8;  // the k-quants' kinds
  for (uint64_t r = 0; r < rows; ++r) {
    const uint8_t* panel = t.data + r / kQuantPanelRows * g.panel_bytes;
    const uint64_t pr = r % kQuantPanelRows;
    uint16_t* rec = scales + r * words;
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint64_t s = b / 8;
      if (kind == QKind::kQ4K || kind == QKind::kQ5K) {
        if (b % 8 == 0) {
          rec[2 * s] = KSuper(panel, pr, b, /*min=*/false);
          rec[2 * s + 1] = KSuper(panel, pr, b, /*min=*/true);
        }
        rec[2 * supers + b] = static_cast<uint16_t>(KCode(panel, pr, b, /*min=*/false) |
                                                    KCode(panel, pr, b, /*min=*/true) << 8);
      } else if (kind == QKind::kQ6K || kind == QKind::kQ2K) {
        const bool q2k = kind == QKind::kQ2K;
        const bool q3k = t.dtype == DType::Q3_K_PACKED;  // its packed 6-bit codes
        const uint8_t mask = q2k ? Q2KP::kScaleMask : Q6K::kScaleMask;
        const int8_t sc0 = q3k ? HalfScale<Q3KP>(panel, pr, b, 0) : K6Scale(panel, pr, b, 0, mask);
        const int8_t sc1 = q3k ? HalfScale<Q3KP>(panel, pr, b, 1) : K6Scale(panel, pr, b, 1, mask);
        if (b % 8 == 0) rec[s] = q3k ? HalfSuper<Q3KP>(panel, pr, b) : K6Super(panel, pr, b);
        rec[(q2k ? 2 : 1) * supers + b] = static_cast<uint16_t>(
            static_cast<uint8_t>(sc0) | static_cast<uint8_t>(sc1) << 8);
        if (q2k) {
          if (b % 8 == 0) rec[supers + s] = K2Dmin(panel, pr, supers, s);
          const size_t h = 2 * (b % 8);  // the block's first half-block in its super-block
          rec[2 * supers + blocks + b] =
              static_cast<uint16_t>(K2Min(panel, pr, s, h) | K2Min(panel, pr, s, h + 1) << 8);
        }
      } else if (t.dtype == DType::MXFP4) {
        E8m0AsF16(PanelE8m0(panel, pr, b), &rec[b]);  // fits: KeepsQuantisedOnDevice
      } else {
        rec[b] = PanelScale(panel, pr, b);
      }
    }
  }
}

}  // namespace cuda
}  // namespace fflite
