// The dtype table and what is derived from it.
#include "format/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "base/half.h"
#include "format/quant_layout.h"

namespace fflite {

namespace {

void F32ToF32(const uint8_t* data, uint64_t first, uint64_t n, float* out) {
  std::memcpy(out, data + 4 * first, n * 4);
}
void F16Rows(const uint8_t* data, uint64_t first, uint64_t n, float* out) {
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, data + 2 * (first + i), 2);
    out[i] = F16ToF32(h);
  }
}
void Bf16Rows(const uint8_t* data, uint64_t first, uint64_t n, float* out) {
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, data + 2 * (first + i), 2);
    out[i] = Bf16ToF32(h);
  }
}

// One row per dtype; the index is the enum value.
// A quantised row: a block of kQuantBlock values of the traits' bits and its f16 scale.
template <typename Q>
constexpr DTypeInfo QuantRow(DType dtype, const char* name) {
  return {dtype,
          name,
          kQuantBlock,
          kQuantBlock * Q::kBits / 8 + 2,
          true,
          Layout::PANEL16_K4,
          nullptr,
          FloatType::kF32,
          Q::kType};
}

const DTypeInfo kTable[] = {
    {DType::INVALID, "invalid", 0, 0, false, Layout::INVALID, nullptr, FloatType::kF32,
     QuantType::kQ8},
    {DType::F32, "f32", 1, 4, false, Layout::ROW_MAJOR, F32ToF32, FloatType::kF32,
     QuantType::kQ8},
    {DType::F16, "f16", 1, 2, false, Layout::ROW_MAJOR, F16Rows, FloatType::kF16,
     QuantType::kQ8},
    {DType::BF16, "bf16", 1, 2, false, Layout::ROW_MAJOR, Bf16Rows, FloatType::kBF16,
     QuantType::kQ8},
    QuantRow<Q8>(DType::I8, "i8"),
    QuantRow<Q4>(DType::I4, "i4"),
    // Q4_K: per 256 values of a row, 128 bytes of nibbles, f16 d and dmin, 8 scales and 8 mins
    // of a byte each (quant_types.h).
    {DType::Q4_K, "q4_k", 256, 128 + 4 + 16, true, Layout::PANEL16_K4, nullptr, FloatType::kF32,
     QuantType::kQ4K},
    // Q6_K: per 256 values of a row, 256 bytes of int8 values, an f16 d, 16 int8 scales.
    // (named q6_k_i8: the name q6_k is the packed form's, which the converter writes).
    {DType::Q6_K, "q6_k_i8", 256, 256 + 2 + 16, true, Layout::PANEL16_K4, nullptr,
     FloatType::kF32, QuantType::kQ6K},
    // Q5_K: per 256 values of a row, 256 bytes of int8 values, Q4_K's d, dmin, scales and mins.
    {DType::Q5_K, "q5_k_i8", 256, 256 + 4 + 16, true, Layout::PANEL16_K4, nullptr,
     FloatType::kF32, QuantType::kQ5K},
    // Q6_K_PACKED: per 256 values, 192 bytes of values in planes, an f16 d, 16 int8 scales.
    {DType::Q6_K_PACKED, "q6_k", 256, 192 + 2 + 16, true, Layout::PANEL16_K4, nullptr,
     FloatType::kF32, QuantType::kQ6KP},
    // Q5_K_PACKED: per 256 values, 160 bytes of values in planes, Q4_K's d, dmin, scales, mins.
    {DType::Q5_K_PACKED, "q5_k", 256, 160 + 4 + 16, true, Layout::PANEL16_K4, nullptr,
     FloatType::kF32, QuantType::kQ5KP},
    // IQ4_XS: per 256 values, 128 bytes of level indices, an f16 d, 16 int8 scales (Q6_K's).
    {DType::IQ4_XS, "iq4_xs", 256, 128 + 2 + 16, true, Layout::PANEL16_K4, nullptr,
     FloatType::kF32, QuantType::kIQ4X},
    // IQ4_NL: per 32 values, 16 bytes of level indices and an f16 scale (I8's).
    {DType::IQ4_NL, "iq4_nl", kQuantBlock, 16 + 2, true, Layout::PANEL16_K4, nullptr,
     FloatType::kF32, QuantType::kIQ4N},
    // Q3_K_PACKED: per 256 values, 96 bytes of values in planes, an f16 d, 16 6-bit scale codes
    // in 12 bytes (GGUF's size).
    {DType::Q3_K_PACKED, "q3_k", 256, 96 + 2 + 12, true, Layout::PANEL16_K4, nullptr,
     FloatType::kF32, QuantType::kQ3KP},
    // Q2_K_PACKED: per 256 values, 64 bytes of values in planes, an f16 d, 16 bytes of a 4-bit
    // scale and a 4-bit min each (GGUF's) in Q6_K's scale slots, an f16 dmin.
    {DType::Q2_K_PACKED, "q2_k", 256, 64 + 2 + 16 + 2, true, Layout::PANEL16_K4, nullptr,
     FloatType::kF32, QuantType::kQ2KP},
    // MXFP4: per 32 values, 16 bytes of E2M1 codes and the E8M0 scale byte (GGUF's).
    {DType::MXFP4, "mxfp4", kQuantBlock, 16 + 1, true, Layout::PANEL16_K4, nullptr,
     FloatType::kF32, QuantType::kMXF4},
};
constexpr size_t kTableSize = sizeof(kTable) / sizeof(kTable[0]);
static_assert(kTableSize == static_cast<size_t>(DType::MAX) + 1,
              "every DType of the schema has a row in the dtype table");

// Q4K: row r's scale d·sc and min dmin·m of block b of a panel, exact in f32.
float KScale(const uint8_t* panel, size_t r, uint64_t b) {
  return F16ToF32(KSuper(panel, r, b, false)) * static_cast<float>(KCode(panel, r, b, false));
}
float KMin(const uint8_t* panel, size_t r, uint64_t b) {
  return F16ToF32(KSuper(panel, r, b, true)) * static_cast<float>(KCode(panel, r, b, true));
}

// Rows of a quantised matrix of type Q as f32: q · scale, rotated back in double where `rotated`.
template <typename Q>
void DequantizeQuantRows(bool rotated, uint64_t rows, uint64_t k, const uint8_t* data,
                         uint64_t first_row, uint64_t n, float* out) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  double block[kQuantBlock];
  for (uint64_t r = first_row; r < first_row + n; ++r) {
    float* row = out + (r - first_row) * k;
    const uint8_t* panel = data + r / kQuantPanelRows * g.panel_bytes;
    const size_t pr = r % kQuantPanelRows;
    for (uint64_t b = 0; b < g.k_blocks; ++b) {
      const uint8_t* blk = panel + g.scale_bytes + b * g.block_panel_bytes;
      if constexpr (HasMin<Q>()) {
        // GGUF's Q4_K and Q5_K: (d·sc)·n - dmin·m in f32 (every product exact; never rotated).
        const float scale = KScale(panel, pr, b), min = KMin(panel, pr, b);
        for (uint64_t j = 0; j < kQuantBlock && b * kQuantBlock + j < k; ++j) {
          row[b * kQuantBlock + j] = scale * static_cast<float>(Q::Value(blk, pr, j)) - min;
        }
        continue;
      } else if constexpr (HasHalfScales<Q>()) {
        // GGUF's Q6_K: (d·sc)·(q - 32) in f32 (every product exact; never rotated). Q2_K:
        // (d·sc)·q - dmin·m (both products exact: one rounding, GGUF's).
        const float d = F16ToF32(HalfSuper<Q>(panel, pr, b));
        for (uint64_t j = 0; j < kQuantBlock && b * kQuantBlock + j < k; ++j) {
          const int8_t sc = HalfScale<Q>(panel, pr, b, j < 16 ? 0 : 1);
          const float scale = d * static_cast<float>(sc);
          row[b * kQuantBlock + j] = scale * static_cast<float>(Q::Value(blk, pr, j));
          if constexpr (HasHalfMins<Q>()) {
            const uint64_t supers = g.k_blocks / Q::kSuperBlocks, s = b / Q::kSuperBlocks;
            const size_t h = b % Q::kSuperBlocks * 2 + (j < 16 ? 0 : 1);
            row[b * kQuantBlock + j] -= F16ToF32(K2Dmin(panel, pr, supers, s)) *
                                        static_cast<float>(K2Min(panel, pr, s, h));
          }
        }
        continue;
      }
      const double s = HasE8m0Scales<Q>() ? E8m0Scale(PanelE8m0(panel, pr, b))
                                          : F16ToF32(PanelScale(panel, pr, b));
      for (uint64_t j = 0; j < kQuantBlock; ++j) block[j] = s * Q::Value(blk, pr, j);
      if (rotated) Unrotate32(block);
      for (uint64_t j = 0; j < kQuantBlock && b * kQuantBlock + j < k; ++j) {
        row[b * kQuantBlock + j] = static_cast<float>(block[j]);
      }
    }
  }
}

}  // namespace

const DTypeInfo* FindDType(DType dtype) {
  const size_t i = static_cast<size_t>(dtype);
  if (i == 0 || i >= kTableSize) return nullptr;
  return &kTable[i];
}

const char* DTypeName(DType dtype) {
  const DTypeInfo* info = FindDType(dtype);
  return info != nullptr ? info->name : "invalid";
}

const DTypeInfo* FindDTypeNamed(const std::string& name) {
  for (const DTypeInfo& info : kTable) {
    if (info.dtype != DType::INVALID && name == info.name) return &info;
  }
  return nullptr;
}

const char* KnownDTypesString() {
  // From the table, once (a static initialised on first use: thread-safe).
  static const std::string kNames = [] {
    std::string s;
    for (size_t i = 1; i < kTableSize; ++i) {
      if (i > 1) s += ", ";
      s += kTable[i].name;
      s += "=" + std::to_string(static_cast<int>(kTable[i].dtype));
    }
    return s;
  }();
  return kNames.c_str();
}

double DTypeBitsPerWeight(DType dtype) {
  const DTypeInfo* info = FindDType(dtype);
  if (info == nullptr) return 0.0;
  return 8.0 * info->block_bytes / info->block_elems;
}

bool LayoutValidFor(DType dtype, Layout layout) {
  const DTypeInfo* info = FindDType(dtype);
  if (info == nullptr) return false;
  if (!info->quantized) return layout == Layout::ROW_MAJOR || layout == Layout::VALUE_ROWS;
  if (info->block_elems > kQuantBlock) return layout == Layout::PANEL16_K4;  // k-quants: as GGUF's
  return layout == Layout::PANEL16_K4 || layout == Layout::PANEL16_K4_HADAMARD32;
}

const char* LayoutName(Layout layout) {
  switch (layout) {
    case Layout::ROW_MAJOR: return "row_major";
    case Layout::PANEL16_K4: return "panel16_k4";
    case Layout::PANEL16_K4_HADAMARD32: return "panel16_k4_hadamard32";
    case Layout::VALUE_ROWS: return "value_rows";
    default: return "invalid";
  }
}

uint64_t TensorBytes(DType dtype, const std::vector<uint64_t>& shape, Layout layout) {
  const DTypeInfo* info = FindDType(dtype);
  if (info == nullptr || !LayoutValidFor(dtype, layout)) return 0;
  if (info->quantized) {
    if (shape.size() != 2) return 0;
    if (info->block_elems > kQuantBlock && shape[1] % info->block_elems != 0) return 0;
    return QuantMatrixGeometry(dtype, shape[0], shape[1]).bytes();
  }
  uint64_t numel = 1;
  for (uint64_t d : shape) numel *= d;  // callers bound each dimension (the loader: 2^20, rank 2)
  return numel * info->block_bytes;
}

void TransposeElements(const uint8_t* src, uint64_t rows, uint64_t cols, size_t elem,
                       uint8_t* dst) {
  // In tiles, so that both sides stay in cache.
  constexpr uint64_t kTile = 32;
  for (uint64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (uint64_t c0 = 0; c0 < cols; c0 += kTile) {
      for (uint64_t r = r0; r < std::min(rows, r0 + kTile); ++r) {
        for (uint64_t c = c0; c < std::min(cols, c0 + kTile); ++c) {
          std::memcpy(dst + (c * rows + r) * elem, src + (r * cols + c) * elem, elem);
        }
      }
    }
  }
}

void DequantizeRows(DType dtype, Layout layout, uint64_t rows, uint64_t k, const uint8_t* data,
                    uint64_t first_row, uint64_t n, float* out) {
  const DTypeInfo* info = FindDType(dtype);
  if (info == nullptr) return;
  if (!info->quantized && layout == Layout::VALUE_ROWS) {
    // Stored transposed: logical element (r, c) at c · rows + r.
    for (uint64_t c = 0; c < k; ++c) {
      for (uint64_t r = 0; r < n; ++r) info->to_f32(data, c * rows + first_row + r, 1, out + r * k + c);
    }
    return;
  }
  if (!info->quantized) {
    info->to_f32(data, first_row * k, n * k, out);
    return;
  }
  WithQuantTraits(info->quant_type, [&](auto traits) {
    DequantizeQuantRows<decltype(traits)>(layout == Layout::PANEL16_K4_HADAMARD32, rows, k, data,
                                          first_row, n, out);
  });
}

}  // namespace fflite
