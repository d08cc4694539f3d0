// The offline quantiser: per block of 32, a least-squares search of the f16 scale over a grid
// of candidates around absmax (each refined in closed form), then packing panel by panel.
#include "format/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "base/half.h"
#include "format/quant_layout.h"
#include "format/quantize_kquant.h"
#include "format/round_nearest.h"

namespace fflite {

namespace {

constexpr int kBlock = static_cast<int>(kQuantBlock);
constexpr uint64_t kMaxDim = uint64_t{1} << 20;  // the loader's limit on rows and k
constexpr float kF16Max = 65504.0f;

struct Levels {
  float lo, hi;
};

// For q = clamp(round(y·iscale), lo, hi): Σ y·q and Σ q². Eight independent lanes so that the
// compiler vectorises without reassociating a single float sum. |y| <= 1 (normalised block).
inline void Screen(const float* y, float iscale, Levels lv, float* sum_yq, float* sum_qq) {
  float a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int j = 0; j < kBlock; j += 8) {
    for (int i = 0; i < 8; ++i) {
      const float l = std::min(std::max(RoundNearest(y[j + i] * iscale), lv.lo), lv.hi);
      a[i] += y[j + i] * l;
      b[i] += l * l;
    }
  }
  *sum_yq = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  *sum_qq = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
}

// The stored result for scale bits `s16`: q = clamp(round(x / s), lo, hi) (the squared-error
// optimal values for that scale), returning Σ (x − s·q)² in double.
double EvalScale(const float* x, uint16_t s16, Levels lv, int8_t* q) {
  const float s = F16ToF32(s16);
  double err = 0;
  for (int j = 0; j < kBlock; ++j) {
    float l = 0;
    if (s != 0) l = std::min(std::max(RoundNearest(x[j] / s), lv.lo), lv.hi);
    q[j] = static_cast<int8_t>(l);
    const double d = static_cast<double>(x[j]) - static_cast<double>(s) * l;
    err += d * d;
  }
  return err;
}

uint16_t ToF16Scale(float s) { return F32ToF16(std::min(std::max(s, -kF16Max), kF16Max)); }

// The scale bits of f16 value `h` moved one step in magnitude towards `target` (the other
// bracket of target's rounding), or h itself when there is none.
uint16_t OtherBracket(uint16_t h, float target) {
  const float v = F16ToF32(h);
  const uint16_t mag = h & 0x7fffu, sign = h & 0x8000u;
  if (std::fabs(v) < std::fabs(target) && mag < 0x7bffu) return static_cast<uint16_t>(sign | (mag + 1));
  if (std::fabs(v) > std::fabs(target) && mag > 0) return static_cast<uint16_t>(sign | (mag - 1));
  return h;
}

// Quantises one block x[32] (as stored: rotated if the layout is) to type Q (its levels, plain
// scale and search grid are the traits'). Writes q[32] and returns the f16 scale bits.
template <typename Q>
uint16_t QuantizeBlock(const float* x, bool search, int8_t* q) {
  const Levels lv{static_cast<float>(Q::kMinValue), static_cast<float>(Q::kMaxValue)};
  float amax = 0, m = 0;  // largest magnitude and the signed element that has it (the first)
  for (int j = 0; j < kBlock; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      m = x[j];
    }
  }
  // A block below ~1e-30 is zero at f16 scale precision (the smallest f16 is 6e-8 · 127); it is
  // stored as zero rather than risking 1/amax overflowing.
  if (!(amax > 1e-30f)) {
    std::memset(q, 0, kBlock);
    return 0;
  }
  // Plain absmax (Q::PlainScale). Always evaluated: the search keeps it unless it finds a
  // strictly smaller error, so search <= plain on every block.
  const uint16_t plain16 = ToF16Scale(Q::PlainScale(amax, m));
  double best_err = EvalScale(x, plain16, lv, q);
  if (!search || best_err == 0) return plain16;

  // Search in the normalised block y = x / amax (|y| <= 1, m -> ±1): candidates map m to the
  // levels Q::SearchScales gives (δ > 0 past the range clips m). Each candidate's values q are
  // scored with their own least-squares scale
  // s* = Σyq / Σq², whose error is Σy² − (Σyq)²/Σq²: so the best maximises (Σyq)²/Σq².
  float y[kBlock];
  const float inv_amax = 1.0f / amax;
  for (int j = 0; j < kBlock; ++j) y[j] = x[j] * inv_amax;
  const float sign_m = m > 0 ? 1.0f : -1.0f;
  float best_score = -1, best_s = 0;
  auto consider = [&](float iscale) {
    float syq, sqq;
    Screen(y, iscale, lv, &syq, &sqq);
    if (sqq > 0 && syq * syq > best_score * sqq) {
      best_score = syq * syq / sqq;
      best_s = syq / sqq;
    }
  };
  Q::SearchScales(sign_m, consider);
  if (best_s == 0) return plain16;
  // Alternate q <- round(y / s), s <- Σyq / Σq² (each step never raises the error).
  for (int it = 0; it < 2; ++it) {
    float syq, sqq;
    Screen(y, 1.0f / best_s, lv, &syq, &sqq);
    if (!(sqq > 0) || !(syq * syq > best_score * sqq)) break;
    best_score = syq * syq / sqq;
    best_s = syq / sqq;
  }
  // The stored scale is f16: evaluate its rounding and the other f16 neighbour of s, each with
  // q re-rounded for it, in double against x.
  const float s = best_s * amax;
  int8_t cand[kBlock];
  uint16_t best16 = plain16;
  const uint16_t near16 = ToF16Scale(s);
  const uint16_t tries[2] = {near16, OtherBracket(near16, s)};
  for (int t = 0; t < 2; ++t) {
    if (tries[t] == plain16 || (t == 1 && tries[1] == tries[0])) continue;
    const double err = EvalScale(x, tries[t], lv, cand);
    if (err < best_err) {
      best_err = err;
      best16 = tries[t];
      std::memcpy(q, cand, kBlock);
    }
  }
  return best16;
}

// E[(w−μ)^4] / σ^4 of w[count] whose sum is `sum`; 0 for an empty or constant matrix.
double Kurtosis(const float* w, uint64_t count, double sum) {
  if (count == 0) return 0.0;
  const double n = static_cast<double>(count);
  const double mean = sum / n;
  double m2 = 0, m4 = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const double d = w[i] - mean, d2 = d * d;
    m2 += d2;
    m4 += d2 * d2;
  }
  m2 /= n;
  m4 /= n;
  // σ = 0 up to the rounding of the mean (a constant matrix): kurtosis 0, not noise.
  return m2 > 1e-24 * mean * mean && m2 > 0 ? m4 / (m2 * m2) : 0.0;
}

// Q4_K, Q5_K, Q6_K, Q3_K, Q2_K: each panel of 16 rows quantised to GGUF's blocks (Q3_K's in
// Q6_K's bytes), then re-laid by the same code that keeps a GGUF file's tensors; the error from
// the stored panel, dequantised. The search costs ~100x a plain rounding, so the panels run on every
// core.
void QuantizeKQuantMatrix(DType dtype, uint64_t rows, uint64_t k, const float* w,
                          const float* importance, uint8_t* dst, QuantStats* stats) {
  const QuantType scheme = QuantSchemeOf(QuantTypeOf(dtype));
  const bool q2k = dtype == DType::Q2_K_PACKED;
  const uint64_t block_bytes = q2k                         ? kQ2KBlockBytes
                               : scheme == QuantType::kQ4K ? kQ4KBlockBytes
                               : scheme == QuantType::kQ5K ? kQ5KBlockBytes
                                                           : kQ6KBlockBytes;
  void (*const quantize_row)(const float*, const float*, uint64_t, uint8_t*) =
      q2k                           ? &QuantizeQ2KRow
      : scheme == QuantType::kQ4K   ? &QuantizeQ4KRow
      : scheme == QuantType::kQ5K   ? &QuantizeQ5KRow
      : dtype == DType::Q3_K_PACKED ? &QuantizeQ3KRowAsQ6K
                                    : &QuantizeQ6KRow;
  auto pack = [dtype, scheme, q2k](uint64_t n, uint64_t cols, const uint8_t* gguf, uint8_t* out) {
    if (q2k) {
      PackQ2KFromGguf(n, cols, gguf, out);
    } else if (scheme == QuantType::kQ4K) {
      PackQ4KFromGguf(n, cols, gguf, out);
    } else if (scheme == QuantType::kQ5K) {
      PackQ5KFromGguf(dtype, n, cols, gguf, out);
    } else {
      PackQ6KFromGguf(dtype, n, cols, gguf, out);
    }
  };
  const QuantGeometry g = QuantMatrixGeometry(dtype, rows, k);
  // Panels are independent: they are dealt to threads (the result does not depend on how
  // many), each panel's error sums kept apart and added in panel order.
  std::vector<double> panel_err(g.panels, 0.0), panel_ref(g.panels, 0.0), panel_max(g.panels, 0.0);
  auto work = [&](uint64_t first, uint64_t step) {
    std::vector<uint8_t> blocks(kQuantPanelRows * (k / 256) * block_bytes);
    std::vector<float> back(stats != nullptr ? kQuantPanelRows * k : 0);
    for (uint64_t p = first; p < g.panels; p += step) {
      const uint64_t r0 = p * kQuantPanelRows;
      const uint64_t n = std::min<uint64_t>(kQuantPanelRows, rows - r0);
      for (uint64_t r = 0; r < n; ++r) {
        quantize_row(w + (r0 + r) * k, importance, k, blocks.data() + r * (k / 256) * block_bytes);
      }
      uint8_t* panel = dst + p * g.panel_bytes;
      pack(n, k, blocks.data(), panel);
      if (stats == nullptr) continue;
      DequantizeRows(dtype, Layout::PANEL16_K4, n, k, panel, 0, n, back.data());
      for (uint64_t i = 0; i < n * k; ++i) {
        const double x = w[r0 * k + i], d = x - back[i];
        panel_err[p] += d * d;
        panel_ref[p] += x * x;
        panel_max[p] = std::max(panel_max[p], std::fabs(d));
      }
    }
  };
  const uint64_t threads =
      std::min<uint64_t>({std::max(1u, std::thread::hardware_concurrency()), 16, g.panels});
  std::vector<std::thread> pool;
  for (uint64_t t = 1; t < threads; ++t) pool.emplace_back(work, t, threads);
  work(0, std::max<uint64_t>(threads, 1));
  for (std::thread& t : pool) t.join();
  double err_sum = 0, ref_sum = 0, max_err = 0;
  for (uint64_t p = 0; p < g.panels; ++p) {
    err_sum += panel_err[p];
    ref_sum += panel_ref[p];
    max_err = std::max(max_err, panel_max[p]);
  }
  if (stats != nullptr) {
    *stats = QuantStats();
    stats->nmse = ref_sum > 0 ? err_sum / ref_sum : 0.0;
    stats->max_abs_error = max_err;
  }
}

}  // namespace

bool QuantiserWrites(DType dtype) {
  const DTypeInfo* info = FindDType(dtype);
  // Not the level-index types (kept from GGUF files alone).
  return info != nullptr && info->quantized &&
         !WithQuantTraits(info->quant_type, [](auto q) { return decltype(q)::kLut; });
}

absl::Status QuantizeMatrix(DType dtype, uint64_t rows, uint64_t k, const float* w,
                            const QuantizeOptions& options, const std::string& what, uint8_t* dst,
                            QuantStats* stats) {
  if (FindDType(dtype) == nullptr || !FindDType(dtype)->quantized) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: dtype %s is not a quantised dtype (i8, i4); cannot quantise", what,
                        DTypeName(dtype)));
  }
  if (rows > kMaxDim || k > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: shape [%d, %d] exceeds the limit of %d rows and columns", what, rows, k, kMaxDim));
  }
  if (!QuantiserWrites(dtype)) {
    const std::string from =
        dtype == DType::MXFP4 ? "MXFP4 blocks (GGUF's MXFP4, gpt-oss's checkpoints)"
                              : "GGUF's " + absl::AsciiStrToUpper(DTypeName(dtype));
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: dtype %s is kept from %s; fflite's quantiser does not write it (use q4_k, q5_k or "
        "i4)", what, DTypeName(dtype), from));
  }
  const QuantType type = QuantTypeOf(dtype);
  const bool k_quant = QuantHasSuperBlocks(type);
  if (k_quant && (k % 256 != 0 || options.rotate)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: dtype %s needs in_features a multiple of 256 and no rotation; got %d columns%s", what,
        DTypeName(dtype), k, options.rotate ? ", rotated" : ""));
  }
  if (options.importance != nullptr) {
    for (uint64_t j = 0; j < k; ++j) {
      if (!(options.importance[j] >= 0) || !std::isfinite(options.importance[j])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: importance of column %d is %g: must be finite and >= 0", what, j,
            options.importance[j]));
      }
    }
  }
  // Validate everything before writing anything; the mean is for the kurtosis.
  double sum = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    const float* row = w + r * k;
    for (uint64_t j = 0; j < k; ++j) {
      if (!std::isfinite(row[j])) {
        const char* kind = std::isnan(row[j]) ? "NaN" : (row[j] > 0 ? "+Inf" : "-Inf");
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: element [%d, %d] is %s; cannot quantise", what, r, j, kind));
      }
      sum += row[j];
    }
  }

  if (k_quant) {
    QuantizeKQuantMatrix(dtype, rows, k, w, options.importance, dst, stats);
    if (stats != nullptr) stats->kurtosis = Kurtosis(w, rows * k, sum);
    return absl::OkStatus();
  }

  // The block quantiser of the type's traits.
  uint16_t (*const quantize_block)(const float*, bool, int8_t*) =
      QuantTypeOf(dtype) == QuantType::kQ4 ? &QuantizeBlock<Q4> : &QuantizeBlock<Q8>;
  const bool rotate = options.rotate;
  const QuantGeometry g = QuantMatrixGeometry(dtype, rows, k);
  const uint64_t k_pad = g.k_blocks * kQuantBlock;  // same geometry as k: the padding is stored
  // One panel at a time: q [16, k_pad], scales [16, k_blocks] (f16 bits).
  std::vector<int8_t> q(kQuantPanelRows * k_pad);
  std::vector<uint16_t> scales(kQuantPanelRows * g.k_blocks);
  double err_sum = 0, ref_sum = 0, max_err = 0;
  float x[kBlock];
  double xd[kBlock];
  for (uint64_t p = 0; p < g.panels; ++p) {
    const uint64_t r0 = p * kQuantPanelRows;
    const uint64_t n = std::min<uint64_t>(kQuantPanelRows, rows - r0);
    for (uint64_t rr = 0; rr < n; ++rr) {
      const float* row = w + (r0 + rr) * k;
      for (uint64_t b = 0; b < g.k_blocks; ++b) {
        const uint64_t c0 = b * kQuantBlock;
        const uint64_t len = std::min<uint64_t>(kQuantBlock, k - c0);
        for (uint64_t j = 0; j < kQuantBlock; ++j) x[j] = j < len ? row[c0 + j] : 0.0f;
        if (rotate) {
          for (int j = 0; j < kBlock; ++j) xd[j] = x[j];
          Rotate32(xd);
          for (int j = 0; j < kBlock; ++j) x[j] = static_cast<float>(xd[j]);
        }
        int8_t* qb = q.data() + rr * k_pad + c0;
        const uint16_t s16 = quantize_block(x, options.search, qb);
        scales[rr * g.k_blocks + b] = s16;
        if (stats != nullptr) {
          const double s = F16ToF32(s16);
          for (int j = 0; j < kBlock; ++j) xd[j] = s * qb[j];
          if (rotate) Unrotate32(xd);
          for (uint64_t j = 0; j < len; ++j) {
            const double d = static_cast<double>(row[c0 + j]) - xd[j];
            err_sum += d * d;
            ref_sum += static_cast<double>(row[c0 + j]) * row[c0 + j];
            max_err = std::max(max_err, std::fabs(d));
          }
        }
      }
    }
    PackQuantMatrix(dtype, n, k_pad, q.data(), scales.data(), dst + p * g.panel_bytes);
  }

  if (stats != nullptr) {
    *stats = QuantStats();
    stats->nmse = ref_sum > 0 ? err_sum / ref_sum : 0.0;
    stats->max_abs_error = max_err;
    stats->kurtosis = Kurtosis(w, rows * k, sum);
  }
  return absl::OkStatus();
}

}  // namespace fflite
