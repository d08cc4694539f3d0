// GGUF tensors as the writer's tensor sources (gguf_relay.h): the kept types' blocks re-laid into
// fflite's panels, the float types as they are, every other type dequantised exactly.
#include "converter/gguf_relay.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "format/quant_layout.h"
#include "kernels/quant_types.h"

namespace fflite {
namespace converter {
namespace {

// GGUF rows -> fflite's I8 / I4 panels (kernels/quant_types.h). Q4_0 is an f16 scale d and 32
// nibbles q + 8, byte j holding element j (low) and j + 16 (high); fflite's I4 byte c·64 + 4r + i
// of a block holds row r's elements 4c + i and 4c + i + 16 (low and high nibble): the GGUF
// block's byte 4c + i, so each row's block is four-byte pieces moved as they are. The I8 types
// (GgufBlockAsInt8: Q8_0, Q5_0) give an f16 scale and 32 integers; fflite's I8 byte
// g·64 + 4r + i holds row r's element 4g + i. IQ4_NL (f16 d, then 16 bytes of level indices)
// keeps its indices in IQ4N's nibbles, MXFP4 (an E8M0 scale byte, then 16 bytes of E2M1 codes)
// its codes in MXF4's and its scale byte as it is. Scales must be finite (the loader's check;
// MXFP4's in [2, 254], E8m0ScaleHeld); Q8_0's -128 is outside I8's [-127, 127].
absl::Status RelayQ(const GgufView& v, DType dtype, uint8_t* dst) {
  const bool q8 = dtype == DType::I8, mx = dtype == DType::MXFP4;
  const bool nl = dtype == DType::IQ4_NL || mx;  // level indices in nibbles
  const GgmlType type = v.t->type->type;
  const size_t block_bytes = v.t->type->block_bytes;
  const QuantGeometry g = QuantMatrixGeometry(dtype, v.rows, v.cols);
  // Padding rows keep zero scales and zero values (I4: nibbles 8), as PackQuantMatrix pads.
  std::memset(dst, 0, g.bytes());
  const uint8_t* src = v.Begin();
  for (uint64_t r = 0; r < g.panels * kQuantPanelRows; ++r) {
    uint8_t* panel = dst + r / kQuantPanelRows * g.panel_bytes;
    const size_t pr = r % kQuantPanelRows;
    for (uint64_t b = 0; b < g.k_blocks; ++b) {
      uint8_t* blk = panel + g.scale_bytes + b * g.block_panel_bytes;
      if (r >= v.rows) {
        if (!q8 && !nl) {
          for (size_t c = 0; c < 4; ++c) std::memset(blk + c * 64 + 4 * pr, 0x88, 4);
        }
        continue;
      }
      const uint8_t* in = src + r * v.RowBytes() + b * block_bytes;
      uint16_t d = 0;
      int8_t q8v[32];
      if (mx) {
        if (!E8m0ScaleHeld(in[0])) {  // checked when the source was chosen
          return absl::InternalError(v.Describe() + ": a scale dtype mxfp4 cannot hold");
        }
        panel[b * kQuantPanelRows + pr] = in[0];
      } else {
        if (q8) {
          if (!GgufBlockAsInt8(type, in, &d, q8v)) {  // checked when the source was chosen
            return absl::InternalError(v.Describe() + ": a block fflite's I8 cannot hold");
          }
        } else {
          std::memcpy(&d, in, 2);
        }
        if ((d & 0x7c00u) == 0x7c00u) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: row %d, block %d has a scale that is not finite (f16 bits 0x%04x)",
              v.Describe(), v.first_row + r, b, d));
        }
        std::memcpy(panel + (b * kQuantPanelRows + pr) * 2, &d, 2);
      }
      if (q8) {
        for (size_t j = 0; j < 32; ++j) {
          if (q8v[j] == -128) {
            return absl::UnimplementedError(absl::StrFormat(
                "%s: row %d, block %d holds the Q8_0 value -128, outside fflite's I8 range "
                "[-127, 127] (llama.cpp's quantiser never writes it); convert with --dtype f32 "
                "to keep its values exactly", v.Describe(), v.first_row + r, b));
          }
        }
        for (size_t k = 0; k < 8; ++k) std::memcpy(blk + k * 64 + 4 * pr, q8v + 4 * k, 4);
      } else if (nl) {
        // Element j < 16 is the low nibble of qs[j], element j + 16 its high one (qs after
        // IQ4_NL's 2-byte d, MXFP4's 1-byte e).
        const uint8_t* qs = in + (mx ? 1 : 2);
        for (size_t j = 0; j < 32; ++j) {
          IQ4N::SetIndex(blk, pr, j, j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4);
        }
      } else {
        for (size_t c = 0; c < 4; ++c) std::memcpy(blk + c * 64 + 4 * pr, in + 2 + 4 * c, 4);
      }
    }
  }
  return absl::OkStatus();
}

// Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS rows kept as they are (Q2_K's, Q3_K's and IQ4_XS's
// in Q6_K's scales): every super-block's d (and Q2_K's, Q4_K's and Q5_K's dmin) must be finite
// (the loader's check).
absl::Status CheckKSupers(const GgufView& v) {
  const GgmlType type = v.t->type->type;
  const bool q4k = type == GgmlType::Q4_K || type == GgmlType::Q5_K;  // d and dmin first
  const bool q2k = type == GgmlType::Q2_K;                            // d and dmin last
  const uint64_t d_at = q4k || type == GgmlType::IQ4_XS ? 0
                        : q2k                           ? 80
                        : type == GgmlType::Q3_K        ? 108
                                                        : 208;
  const bool mins = q4k || q2k;
  const uint64_t supers = v.cols / 256, block = v.t->type->block_bytes;
  for (uint64_t r = 0; r < v.rows; ++r) {
    for (uint64_t s = 0; s < supers; ++s) {
      const uint8_t* in = v.Begin() + r * v.RowBytes() + s * block;
      uint16_t d, dmin = 0;
      std::memcpy(&d, in + d_at, 2);
      if (mins) std::memcpy(&dmin, in + d_at + 2, 2);
      if ((d & 0x7c00u) == 0x7c00u || (dmin & 0x7c00u) == 0x7c00u) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: row %d, super-block %d has a %s that is not finite (f16 bits 0x%04x%s)",
            v.Describe(), v.first_row + r, s, mins ? "d or dmin" : "d", d,
            mins ? absl::StrFormat(", 0x%04x", dmin) : ""));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

// F32, F16 and BF16's dtypes (INVALID for any other type).
DType FloatDType(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return DType::F32;
    case GgmlType::F16: return DType::F16;
    case GgmlType::BF16: return DType::BF16;
    default: return DType::INVALID;
  }
}
// Q2_K, Q3_K and IQ4_XS in Q6_K's scales; Q5_K and Q6_K at GGUF's sizes.
DType KeptDType(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return DType::I4;
    case GgmlType::Q4_K: return DType::Q4_K;
    case GgmlType::Q5_K: return DType::Q5_K_PACKED;
    case GgmlType::Q6_K: return DType::Q6_K_PACKED;
    case GgmlType::Q3_K: return DType::Q3_K_PACKED;
    case GgmlType::Q2_K: return DType::Q2_K_PACKED;
    case GgmlType::IQ4_XS: return DType::IQ4_XS;
    case GgmlType::IQ4_NL: return DType::IQ4_NL;
    default: return DType::INVALID;
  }
}

TensorSource GgufSource(const GgufView& v, std::vector<uint64_t> shape, bool matrix, bool native,
                        bool int8_ok) {
  TensorSource s;
  s.shape = std::move(shape);
  const GgmlType type = v.t->type->type;
  // IQ4_NL's scales fit i8 too; its level indices keep it at its own size, and MXFP4's codes and
  // scale bytes (where mxfp4 holds every scale of the tensor) at its own.
  DType quant = native && matrix ? KeptDType(type) : DType::INVALID;
  if (native && matrix && int8_ok && quant == DType::INVALID) {
    quant = type == GgmlType::MXFP4 ? DType::MXFP4 : DType::I8;
  }
  const DType as_is = FloatDType(type);
  const uint64_t begin = v.first_row * v.RowBytes(), end = begin + v.rows * v.RowBytes();
  if (quant != DType::INVALID) {
    s.dtype = quant;
    s.fill = [v, quant, begin, end](uint8_t* dst, uint64_t bytes) -> absl::Status {
      if (bytes != QuantMatrixGeometry(quant, v.rows, v.cols).bytes()) {
        return absl::InternalError(v.Describe() + ": byte count mismatch");
      }
      // Every super-block's scale (and min scale) finite before any of them is re-laid.
      if (QuantHasSuperBlocks(QuantTypeOf(quant))) FFLITE_RETURN_IF_ERROR(CheckKSupers(v));
      if (quant == DType::Q4_K) {
        PackQ4KFromGguf(v.rows, v.cols, v.Begin(), dst);
      } else if (quant == DType::Q2_K_PACKED) {
        PackQ2KFromGguf(v.rows, v.cols, v.Begin(), dst);
      } else if (v.t->type->type == GgmlType::Q3_K || v.t->type->type == GgmlType::IQ4_XS) {
        // Q3_K, IQ4_XS: each block's d, scales and values (IQ4_XS: levels, kept as their
        // indices), re-laid as Q6_K's are.
        const GgmlType src_type = v.t->type->type;
        const uint64_t block_bytes = v.t->type->block_bytes;
        PackQ6KFromBlocks(
            quant, v.rows, v.cols,
            [&v, src_type, block_bytes](uint64_t r, uint64_t b, uint16_t* d, int8_t* scales,
                                        int8_t* values) {
              GgufBlockAsQ6K(src_type, v.Begin() + r * v.RowBytes() + b * block_bytes, d, scales,
                             values);
            },
            dst);
      } else if (quant == DType::Q6_K_PACKED) {
        PackQ6KFromGguf(quant, v.rows, v.cols, v.Begin(), dst);
      } else if (quant == DType::Q5_K_PACKED) {
        PackQ5KFromGguf(quant, v.rows, v.cols, v.Begin(), dst);
      } else {
        FFLITE_RETURN_IF_ERROR(RelayQ(v, quant, dst));
      }
      v.file->Release(*v.t, begin, end);
      return absl::OkStatus();
    };
  } else if (as_is != DType::INVALID) {
    s.dtype = as_is;
    s.fill = [v, begin, end](uint8_t* dst, uint64_t bytes) -> absl::Status {
      if (bytes != end - begin) return absl::InternalError(v.Describe() + ": byte count mismatch");
      std::memcpy(dst, v.Begin(), bytes);
      v.file->Release(*v.t, begin, end);
      return absl::OkStatus();
    };
  } else {
    s.dtype = DType::F32;
    s.fill = [v, begin, end](uint8_t* dst, uint64_t bytes) -> absl::Status {
      const uint64_t n = v.rows * v.cols;
      if (bytes != n * sizeof(float)) {
        return absl::InternalError(v.Describe() + ": byte count mismatch");
      }
      // Dequantised into an aligned f32 buffer (dst need not be 4-byte aligned).
      std::vector<float> row(static_cast<size_t>(v.cols));
      for (uint64_t r = 0; r < v.rows; ++r) {
        absl::Status st = DequantizeGguf(v.t->type->type, v.Begin() + r * v.RowBytes(), v.cols,
                                         row.data());
        if (!st.ok()) return absl::Status(st.code(), v.Describe() + ": " + std::string(st.message()));
        std::memcpy(dst + r * v.cols * sizeof(float), row.data(), v.cols * sizeof(float));
      }
      v.file->Release(*v.t, begin, end);
      return absl::OkStatus();
    };
  }
  return s;
}

}  // namespace converter
}  // namespace fflite
