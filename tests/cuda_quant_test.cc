// The cuda backend's device layout of quantised matrices (backends/cuda/cuda_quant.h), on the CPU:
// the same element functions the kernels read it with, against the file's own reading of each
// value (QuantValueAt, the panel layout) and its dequantisation (DequantizeRows), bit for bit.
// Built and run everywhere, with or without the cuda backend: the layout is host code.
#include "backends/cuda/cuda_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "base/half.h"
#include "format/dtype.h"
#include "format/model.h"
#include "format/quant_layout.h"
#include "gtest/gtest.h"

namespace fflite {
namespace {

using cuda::QKind;

struct Stored {
  DType dtype;
  uint64_t rows, cols;
  std::vector<uint8_t> bytes;
  TensorView view;
};

// The view of m's bytes.
void SetView(Stored* m) {
  m->view.dtype = m->dtype;
  m->view.shape = {m->rows, m->cols};
  m->view.layout = Layout::PANEL16_K4;
  m->view.size = m->bytes.size();
  m->view.data = m->bytes.data();
}

// The values a type holds: the range of I8 and I4, the levels of IQ4_NL and MXFP4 (IQ4_XS: its
// levels too, Q6_K, Q6_K_PACKED and Q3_K_PACKED their ranges).
std::vector<int> ValuesOf(DType dtype) {
  std::vector<int> v;
  const auto range = [&v](int lo, int hi) {
    for (int q = lo; q <= hi; ++q) v.push_back(q);
  };
  switch (dtype) {
    case DType::I8:
    case DType::Q6_K: range(-127, 127); break;
    case DType::I4: range(-8, 7); break;
    case DType::Q6_K_PACKED: range(-32, 31); break;
    case DType::Q3_K_PACKED: range(-4, 3); break;
    case DType::IQ4_NL:
    case DType::IQ4_XS: v.assign(std::begin(kIq4Levels), std::end(kIq4Levels)); break;
    case DType::MXFP4: v.assign(std::begin(kMxfp4Levels), std::end(kMxfp4Levels)); break;
    default: break;
  }
  return v;
}

// A stored [rows, cols] matrix of a type with a scale per block of 32 (I8, I4, IQ4_NL: f16; MXFP4:
// E8M0 bytes): random values over all the type holds (row 0 at its extremes) and random f16 scales
// of both signs, one of them 0 (MXFP4: each the power of two of its magnitude, PackQuantMatrix).
Stored RandomStored(DType dtype, uint64_t rows, uint64_t cols, std::mt19937& gen) {
  Stored m{dtype, rows, cols, {}, {}};
  const std::vector<int> values = ValuesOf(dtype);
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
  std::vector<int8_t> q(rows * cols);
  for (int8_t& v : q) v = static_cast<int8_t>(values[pick(gen)]);
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  for (uint64_t j = 0; j < cols; ++j) q[j] = static_cast<int8_t>(gen() & 1 ? *hi : *lo);
  const uint64_t blocks = (cols + 31) / 32;
  std::vector<uint16_t> scales(rows * blocks);
  std::uniform_real_distribution<float> sdist(-0.02f, 0.02f);
  for (uint16_t& s : scales) s = F32ToF16(sdist(gen));
  scales[scales.size() / 2] = 0;
  const QuantGeometry g = QuantMatrixGeometry(dtype, rows, cols);
  m.bytes.resize(g.bytes());
  PackQuantMatrix(dtype, rows, cols, q.data(), scales.data(), m.bytes.data());
  SetView(&m);
  return m;
}

// A stored [rows, cols] matrix of a type with Q6_K's scales (Q6_K, Q6_K_PACKED, Q3_K_PACKED,
// IQ4_XS; cols a multiple of 256): random f16 d of both signs, int8 scales over their range
// (Q6_K's whole byte, 6 bits for Q3_K and IQ4_XS) and values over all the type holds.
Stored RandomQ6KScheme(DType dtype, uint64_t rows, uint64_t cols, std::mt19937& gen) {
  Stored m{dtype, rows, cols, {}, {}};
  const std::vector<int> values = ValuesOf(dtype);
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
  const bool wide = dtype == DType::Q6_K || dtype == DType::Q6_K_PACKED;
  std::uniform_int_distribution<int> sc(wide ? -128 : -32, wide ? 127 : 31);
  std::uniform_real_distribution<float> ddist(-0.05f, 0.05f);
  const QuantGeometry g = QuantMatrixGeometry(dtype, rows, cols);
  m.bytes.resize(g.bytes());
  PackQ6KFromBlocks(
      dtype, rows, cols,
      [&](uint64_t, uint64_t, uint16_t* d, int8_t* scales, int8_t* v) {
        *d = F32ToF16(ddist(gen));
        for (int i = 0; i < 16; ++i) scales[i] = static_cast<int8_t>(sc(gen));
        for (int i = 0; i < 256; ++i) v[i] = static_cast<int8_t>(values[pick(gen)]);
      },
      m.bytes.data());
  SetView(&m);
  return m;
}

// A stored [rows, cols] matrix (cols a multiple of 256) of Q4_K, Q5_K (or Q5_K_PACKED) or Q2_K
// (Q2_K_PACKED) from GGUF rows of random bytes: every value, scale and min code, and random
// finite f16 d and dmin of both signs.
Stored RandomFromGguf(DType dtype, uint64_t rows, uint64_t cols, std::mt19937& gen) {
  Stored m{dtype, rows, cols, {}, {}};
  const bool q2k = dtype == DType::Q2_K_PACKED;
  const uint64_t block = dtype == DType::Q4_K ? 144 : q2k ? 84 : 176;
  const uint64_t d_at = q2k ? 80 : 0;  // d then dmin (Q2_K: after its scales and values)
  std::vector<uint8_t> gguf(rows * cols / 256 * block);
  std::uniform_real_distribution<float> ddist(-0.05f, 0.05f);
  for (uint8_t& b : gguf) b = static_cast<uint8_t>(gen());
  for (size_t i = 0; i < gguf.size(); i += block) {
    const uint16_t d = F32ToF16(ddist(gen)), dmin = F32ToF16(ddist(gen));
    std::memcpy(&gguf[i + d_at], &d, 2);
    std::memcpy(&gguf[i + d_at + 2], &dmin, 2);
  }
  const QuantGeometry g = QuantMatrixGeometry(dtype, rows, cols);
  m.bytes.resize(g.bytes());
  if (dtype == DType::Q4_K) {
    PackQ4KFromGguf(rows, cols, gguf.data(), m.bytes.data());
  } else if (q2k) {
    PackQ2KFromGguf(rows, cols, gguf.data(), m.bytes.data());
  } else {
    PackQ5KFromGguf(dtype, rows, cols, gguf.data(), m.bytes.data());
  }
  SetView(&m);
  return m;
}

template <QKind K>
void CheckLayout(const Stored& m) {
  const uint64_t rows = m.rows, cols = m.cols, blocks = (cols + 31) / 32;
  QKind kind = QKind::kQ8;
  ASSERT_TRUE(cuda::KeepsQuantisedOnDevice(m.view, &kind));
  ASSERT_EQ(kind, K);
  std::vector<uint8_t> codes(cuda::DeviceCodeBytes(K, rows, cols), 0xa5);
  std::vector<uint16_t> scales(cuda::DeviceScaleBytes(K, rows, cols) / 2, 0xa5a5);
  ASSERT_EQ(codes.size(), rows * cuda::RowBytes(K, blocks));
  ASSERT_EQ(scales.size(), rows * cuda::ScaleWords(K, blocks));
  cuda::RelayForDevice(m.view, K, codes.data(), scales.data());

  const QuantGeometry g = QuantMatrixGeometry(m.dtype, rows, cols);
  std::vector<float> deq(rows * cols);
  DequantizeRows(m.dtype, Layout::PANEL16_K4, rows, cols, m.bytes.data(), 0, rows, deq.data());
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> xdist(-1.0f, 1.0f);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint8_t* row = codes.data() + r * cuda::RowBytes(K, blocks);
    // The k-quants' d, dmin, scales and mins are checked through the weights (WeightAt against
    // the file's dequantisation, below: every scale and min meets a nonzero value).
    for (uint64_t b = 0; b < blocks && (K == QKind::kQ8 || K == QKind::kQ4); ++b) {
      // MXFP4: its E8M0 byte's power of two, which f16 holds (KeepsQuantisedOnDevice).
      const uint16_t want = m.dtype == DType::MXFP4
                                ? F32ToF16(QuantBlockScale(m.dtype, g, m.bytes.data(), r, b))
                                : QuantScaleAt(g, m.bytes.data(), r, b);
      ASSERT_EQ(scales[r * blocks + b], want) << "row " << r << " block " << b;
    }
    for (uint32_t j = 0; j < blocks * 32; ++j) {
      // Past cols: the padding values are 0.
      const int want = j < cols ? QuantValueAt(m.dtype, g, m.bytes.data(), r, j) : 0;
      ASSERT_EQ(cuda::ValueAt<K>(row, j), want) << "row " << r << " value " << j;
      if (j < cols) {
        const float w = cuda::WeightAt<K>(codes.data(), scales.data(),
                                          static_cast<uint32_t>(blocks),
                                          static_cast<uint32_t>(r), j);
        ASSERT_EQ(std::memcmp(&w, &deq[r * cols + j], 4), 0)
            << "row " << r << " value " << j << ": " << w << " vs " << deq[r * cols + j];
      }
    }
    // A lane's 16 bytes: its values in order, times x, summed as the kernels do.
    const uint32_t per = cuda::ValuesPer16Bytes(K);
    for (uint64_t c = 0; c < cuda::RowBytes(K, blocks) / 16; ++c) {
      uint32_t w[4];
      std::memcpy(w, row + 16 * c, 16);
      std::vector<float> x(per);
      for (float& v : x) v = xdist(gen);
      float want = 0.0f;
      for (uint32_t i = 0; i < per; ++i) {
        const uint64_t j = c * per + i;
        const int q = j < cols ? QuantValueAt(m.dtype, g, m.bytes.data(), r, j) : 0;
        want += static_cast<float>(q) * x[i];
      }
      for (uint32_t i = 0; i < per; ++i) {
        const float v = cuda::ValueF32Of16<K>(w, static_cast<int>(i));
        const int value = cuda::ValueAt<K>(row, static_cast<uint32_t>(c * per + i));
        ASSERT_EQ(v, static_cast<float>(value))
            << "row " << r << " chunk " << c << " value " << i;
      }
      const float got = cuda::DotOf16<K>(w, x.data());
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "row " << r << " chunk " << c;
    }
  }
}

TEST(CudaQuantLayoutTest, EveryValueScaleAndWeightAsTheFileHasThem) {
  std::mt19937 gen(3);
  for (uint64_t rows : {1, 16, 37}) {
    for (uint64_t cols : {32, 45, 96, 200}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
      CheckLayout<QKind::kQ8>(RandomStored(DType::I8, rows, cols, gen));
      CheckLayout<QKind::kQ4>(RandomStored(DType::I4, rows, cols, gen));
      CheckLayout<QKind::kQ8>(RandomStored(DType::IQ4_NL, rows, cols, gen));
      CheckLayout<QKind::kQ8>(RandomStored(DType::MXFP4, rows, cols, gen));
    }
    for (uint64_t cols : {256, 768}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
      CheckLayout<QKind::kQ4K>(RandomFromGguf(DType::Q4_K, rows, cols, gen));
      for (DType dtype : {DType::Q6_K, DType::Q6_K_PACKED, DType::Q3_K_PACKED, DType::IQ4_XS}) {
        SCOPED_TRACE(DTypeName(dtype));
        CheckLayout<QKind::kQ6K>(RandomQ6KScheme(dtype, rows, cols, gen));
      }
      for (DType dtype : {DType::Q5_K, DType::Q5_K_PACKED}) {
        SCOPED_TRACE(DTypeName(dtype));
        CheckLayout<QKind::kQ5K>(RandomFromGguf(dtype, rows, cols, gen));
      }
      CheckLayout<QKind::kQ2K>(RandomFromGguf(DType::Q2_K_PACKED, rows, cols, gen));
    }
  }
}

// The kernels' step for a lane's 16 bytes of codes (QuantWarpRows): Σ weight · x over its values
// = scale · DotOf16 - min · Σx (no min: scale · DotOf16), the scale and min those of its first
// value, within f32 rounding of the sum of the file's dequantised weights times x (in double).
// This checks that a lane's values share one scale and min in every kind (kQ6K and kQ2K: a
// half-block; the others a block or, for byte codes, half of one).
template <QKind K>
void CheckLaneSums(const Stored& m) {
  const uint64_t rows = m.rows, cols = m.cols, blocks = (cols + 31) / 32;
  std::vector<uint8_t> codes(cuda::DeviceCodeBytes(K, rows, cols));
  std::vector<uint16_t> scales(cuda::DeviceScaleBytes(K, rows, cols) / 2);
  cuda::RelayForDevice(m.view, K, codes.data(), scales.data());
  std::vector<float> deq(rows * cols);
  DequantizeRows(m.dtype, Layout::PANEL16_K4, rows, cols, m.bytes.data(), 0, rows, deq.data());
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> xdist(-1.0f, 1.0f);
  const uint32_t per = cuda::ValuesPer16Bytes(K);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t c = 0; c < cols / per; ++c) {
      std::vector<float> x(per);
      float sum_x = 0.0f;
      double want = 0.0, mag = 0.0;
      for (uint32_t i = 0; i < per; ++i) {
        x[i] = xdist(gen);
        sum_x += x[i];
        const double p = static_cast<double>(deq[r * cols + c * per + i]) * x[i];
        want += p;
        mag += std::fabs(p);
      }
      uint32_t w[4];
      std::memcpy(w, codes.data() + r * cuda::RowBytes(K, blocks) + 16 * c, 16);
      float scale, min;
      cuda::ScaleMinAt<K>(scales.data() + r * cuda::ScaleWords(K, blocks),
                          static_cast<uint32_t>(blocks), c * per, &scale, &min);
      const float got = cuda::DotOf16<K>(w, x.data()) * scale - min * sum_x;
      // 2·per + 2 f32 roundings of terms up to |scale|·127·|x| and |min|·|x| each.
      const double bound = 1e-5 * (mag + (std::fabs(static_cast<double>(min)) +
                                          std::fabs(static_cast<double>(scale)) * 127) * per);
      ASSERT_NEAR(got, want, bound) << DTypeName(m.dtype) << " row " << r << " chunk " << c;
    }
  }
}

TEST(CudaQuantLayoutTest, LaneSumsMatchTheDequantisedWeights) {
  std::mt19937 gen(6);
  CheckLaneSums<QKind::kQ8>(RandomStored(DType::I8, 16, 96, gen));
  CheckLaneSums<QKind::kQ8>(RandomStored(DType::MXFP4, 16, 96, gen));
  CheckLaneSums<QKind::kQ4>(RandomStored(DType::I4, 16, 96, gen));
  CheckLaneSums<QKind::kQ4K>(RandomFromGguf(DType::Q4_K, 16, 512, gen));
  CheckLaneSums<QKind::kQ5K>(RandomFromGguf(DType::Q5_K_PACKED, 16, 512, gen));
  CheckLaneSums<QKind::kQ2K>(RandomFromGguf(DType::Q2_K_PACKED, 16, 512, gen));
  for (DType dtype : {DType::Q6_K_PACKED, DType::Q3_K_PACKED, DType::IQ4_XS}) {
    CheckLaneSums<QKind::kQ6K>(RandomQ6KScheme(dtype, 16, 512, gen));
  }
}

TEST(CudaQuantLayoutTest, WhichMatricesStayQuantised) {
  std::mt19937 gen(4);
  Stored m = RandomStored(DType::I4, 16, 64, gen);
  QKind kind = QKind::kQ8;
  EXPECT_TRUE(cuda::KeepsQuantisedOnDevice(m.view, &kind));
  EXPECT_EQ(kind, QKind::kQ4);
  Stored m8 = RandomStored(DType::I8, 16, 64, gen);
  EXPECT_TRUE(cuda::KeepsQuantisedOnDevice(m8.view, &kind));
  EXPECT_EQ(kind, QKind::kQ8);
  TensorView rotated = m.view;  // its kernels multiply rotated activations
  rotated.layout = Layout::PANEL16_K4_HADAMARD32;
  EXPECT_FALSE(cuda::KeepsQuantisedOnDevice(rotated, &kind));
  Stored q4k = RandomFromGguf(DType::Q4_K, 16, 256, gen);
  EXPECT_TRUE(cuda::KeepsQuantisedOnDevice(q4k.view, &kind));
  EXPECT_EQ(kind, QKind::kQ4K);
  TensorView partial = q4k.view;  // not whole super-blocks (the loader refuses it anyway)
  partial.shape = {16, 64};
  EXPECT_FALSE(cuda::KeepsQuantisedOnDevice(partial, &kind));
  Stored q3k = RandomQ6KScheme(DType::Q3_K_PACKED, 16, 256, gen);
  EXPECT_TRUE(cuda::KeepsQuantisedOnDevice(q3k.view, &kind));
  EXPECT_EQ(kind, QKind::kQ6K);
  Stored mx = RandomStored(DType::MXFP4, 16, 64, gen);
  EXPECT_TRUE(cuda::KeepsQuantisedOnDevice(mx.view, &kind));
  EXPECT_EQ(kind, QKind::kQ8);
  // An MXFP4 scale byte beyond f16 (2^(103 - 128) or 2^(144 - 128)): dequantised on upload.
  for (const uint8_t e : {uint8_t{103}, uint8_t{144}}) {
    Stored wide = RandomStored(DType::MXFP4, 16, 64, gen);
    wide.bytes[16 + 5] = e;  // row 5's scale of block 1
    SetView(&wide);
    EXPECT_FALSE(cuda::KeepsQuantisedOnDevice(wide.view, &kind)) << static_cast<int>(e);
    wide.bytes[16 + 5] = 143;
    SetView(&wide);
    EXPECT_TRUE(cuda::KeepsQuantisedOnDevice(wide.view, &kind));
  }
  Stored q2k = RandomFromGguf(DType::Q2_K_PACKED, 16, 256, gen);
  EXPECT_TRUE(cuda::KeepsQuantisedOnDevice(q2k.view, &kind));
  EXPECT_EQ(kind, QKind::kQ2K);
  TensorView f16 = q4k.view;  // not quantised
  f16.dtype = DType::F16;
  EXPECT_FALSE(cuda::KeepsQuantisedOnDevice(f16, &kind));
  TensorView absent;
  EXPECT_FALSE(cuda::KeepsQuantisedOnDevice(absent, &kind));
}

}  // namespace
}  // namespace fflite
