// The k-quant quantiser: a weighted least-squares search per sub-block, then the super-block's
// scales and each sub-block's codes chosen by the error they give, written as GGUF's blocks.
#include "format/quantize_kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/half.h"
#include "format/round_nearest.h"

namespace fflite {

namespace {

constexpr int kSuper = 256;
constexpr float kF16Max = 65504.0f;

inline float Clamp(float v, float lo, float hi) { return std::min(std::max(v, lo), hi); }

// The f16 bits of a non-negative scale (clamped to the f16 range) and their value.
inline uint16_t ScaleBits(float s) { return F32ToF16(std::min(s, kF16Max)); }

// The error weights of one super-block: the importance (with a floor of a millionth of the
// block's mean, so that a column no calibration token reached still counts a little), or all 1.
void BlockWeights(const float* importance, float* w) {
  if (importance == nullptr) {
    std::fill(w, w + kSuper, 1.0f);
    return;
  }
  double sum = 0;
  for (int i = 0; i < kSuper; ++i) sum += importance[i];
  if (!(sum > 0)) {
    std::fill(w, w + kSuper, 1.0f);
    return;
  }
  const float floor = static_cast<float>(sum / kSuper * 1e-6);
  for (int i = 0; i < kSuper; ++i) w[i] = importance[i] + floor;
}

// ---- Q4_K / Q5_K: value = scale · q − min, q in [0, nmax], scale >= 0, min >= 0.

struct Affine {
  float scale = 0, min = 0;
  float err = std::numeric_limits<float>::infinity();
};

// The weighted least-squares scale and offset b = −min (b <= 0) for fixed values q, and its
// error Σ w (scale·q − min − x)².
template <int N>
Affine FitAffine(const float* x, const float* w, const uint8_t* q) {
  float sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
  for (int i = 0; i < N; ++i) {
    const float qi = q[i];
    sw += w[i];
    sq += w[i] * qi;
    sqq += w[i] * qi * qi;
    sx += w[i] * x[i];
    sqx += w[i] * qi * x[i];
  }
  float s = 0, b = 0;
  const float det = sw * sqq - sq * sq;
  if (det > 0) {
    s = (sw * sqx - sq * sx) / det;
    b = (sqq * sx - sq * sqx) / det;
  }
  if (b > 0 || !(det > 0)) {  // the offset can only subtract: refit the scale alone
    b = 0;
    s = sqq > 0 ? sqx / sqq : 0;
  }
  if (s < 0) {
    s = 0;
    b = std::min(sx / sw, 0.0f);
  }
  Affine a;
  a.scale = s;
  a.min = -b;
  // Σ w (s·q + b − x)² expanded over the sums (Σ w x² is the same for every candidate, so it is
  // left out: errors are compared, not reported).
  a.err = s * s * sqq + b * b * sw + 2 * s * b * sq - 2 * s * sqx - 2 * b * sx;
  return a;
}

// Rounds x to the levels of (scale, min): q = clamp(round((x + min) / scale), 0, nmax).
template <int N>
void RoundAffine(const float* x, float scale, float min, int nmax, uint8_t* q) {
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  for (int i = 0; i < N; ++i) {
    q[i] = static_cast<uint8_t>(Clamp(RoundNearest((x[i] + min) * inv), 0.0f,
                                      static_cast<float>(nmax)));
  }
}

template <int N>
float AffineError(const float* x, const float* w, const uint8_t* q, float scale, float min) {
  float err = 0;
  for (int i = 0; i < N; ++i) {
    const float d = scale * q[i] - min - x[i];
    err += w[i] * d * d;
  }
  return err;
}

// One sub-block of 32: candidates map [min(x, 0), max(x)] onto nmax − 1.5 .. nmax + 0.9 levels
// (past nmax the ends clip), each refitted; the best is then alternated (round, refit) twice.
template <int N>
Affine SearchAffine(const float* x, const float* w, int nmax) {
  float lo = 0, hi = x[0];
  for (int i = 0; i < N; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  Affine best;
  if (!(hi > lo)) {  // every value equal and <= 0: all of it in the min
    best.scale = 0;
    best.min = -lo;
    return best;
  }
  uint8_t q[N];
  for (int t = 0; t < 25; ++t) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(t - 15)) / (hi - lo);
    for (int i = 0; i < N; ++i) {
      q[i] = static_cast<uint8_t>(Clamp(RoundNearest((x[i] - lo) * iscale), 0.0f,
                                        static_cast<float>(nmax)));
    }
    const Affine a = FitAffine<N>(x, w, q);
    if (a.err < best.err) best = a;
  }
  for (int it = 0; it < 2 && best.scale > 0; ++it) {
    RoundAffine<N>(x, best.scale, best.min, nmax, q);
    const Affine a = FitAffine<N>(x, w, q);
    if (!(a.err < best.err)) break;
    best = a;
  }
  return best;
}

// One super-block of Q4_K (nmax 15) or Q5_K (nmax 31): d, dmin, the 6-bit codes and the values;
// of Q2_K (nmax 3): 16 sub-blocks of 16 with 4-bit codes.
struct KMinBlock {
  uint16_t d = 0, dmin = 0;
  uint8_t sc[16] = {}, m[16] = {};
  uint8_t q[kSuper] = {};
};

// kLen: a sub-block's values (32, or Q2_K's 16); max_code: the codes' largest (63, Q2_K's 15).
template <int kLen>
void QuantizeKMinBlock(const float* x, const float* importance, int nmax, int max_code,
                       KMinBlock* out) {
  constexpr int kSubs = kSuper / kLen;
  const float code_max = static_cast<float>(max_code);
  float w[kSuper];
  BlockWeights(importance, w);
  Affine sub[kSubs];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kSubs; ++j) {
    sub[j] = SearchAffine<kLen>(x + kLen * j, w + kLen * j, nmax);
    max_scale = std::max(max_scale, sub[j].scale);
    max_min = std::max(max_min, sub[j].min);
  }
  out->d = ScaleBits(max_scale / code_max);
  out->dmin = ScaleBits(max_min / code_max);
  const float d = F16ToF32(out->d), dmin = F16ToF32(out->dmin);
  for (int j = 0; j < kSubs; ++j) {
    const float* xj = x + kLen * j;
    const float* wj = w + kLen * j;
    const int sc0 = d > 0 ? static_cast<int>(Clamp(RoundNearest(sub[j].scale / d), 0, code_max))
                          : 0;
    const int m0 = dmin > 0 ? static_cast<int>(Clamp(RoundNearest(sub[j].min / dmin), 0, code_max))
                            : 0;
    // The nearest codes and their neighbours, each with its values re-rounded.
    float best = std::numeric_limits<float>::infinity();
    uint8_t q[kLen];
    for (int sc = std::max(sc0 - 1, 0); sc <= std::min(sc0 + 1, max_code); ++sc) {
      for (int m = std::max(m0 - 1, 0); m <= std::min(m0 + 1, max_code); ++m) {
        const float scale = d * static_cast<float>(sc), min = dmin * static_cast<float>(m);
        RoundAffine<kLen>(xj, scale, min, nmax, q);
        const float err = AffineError<kLen>(xj, wj, q, scale, min);
        if (err < best) {
          best = err;
          out->sc[j] = static_cast<uint8_t>(sc);
          out->m[j] = static_cast<uint8_t>(m);
          std::memcpy(out->q + kLen * j, q, kLen);
        }
      }
    }
  }
}

// GGUF's 12 bytes of 6-bit scales and mins (sub-blocks 0-3 in the low six bits of bytes 0-7,
// sub-blocks 4-7 in the nibbles of bytes 8-11 with their top two bits above those of 0-7).
void PackKCodes(const KMinBlock& b, uint8_t* codes) {
  for (int j = 0; j < 4; ++j) {
    codes[j] = static_cast<uint8_t>(b.sc[j] | ((b.sc[j + 4] >> 4) << 6));
    codes[j + 4] = static_cast<uint8_t>(b.m[j] | ((b.m[j + 4] >> 4) << 6));
    codes[j + 8] = static_cast<uint8_t>((b.sc[j + 4] & 0xF) | ((b.m[j + 4] & 0xF) << 4));
  }
}

void PutHalf(uint16_t h, uint8_t* out) {
  out[0] = static_cast<uint8_t>(h & 0xFF);
  out[1] = static_cast<uint8_t>(h >> 8);
}

// ---- Q6_K: value = d · sc · q, q in [−32, 31], sc an int8 per sub-block of 16; Q3_K the same
// with q in [−4, 3] and sc in [−32, 31] (its 6-bit scale minus 32). qmax: 31 or 3.

struct Symmetric {
  float scale = 0;
  float err = std::numeric_limits<float>::infinity();
};

// Candidates map the largest-magnitude element m near −(qmax + 1) or near +qmax (in steps of
// (qmax + 1) / 320), each scale refitted (s = Σwqx / Σwq²); the best is then alternated twice.
Symmetric SearchSymmetric16(const float* x, const float* w, int qmax) {
  const float lo = -static_cast<float>(qmax + 1), hi = static_cast<float>(qmax);
  const float step = static_cast<float>(qmax + 1) / 320.0f;
  float amax = 0, m = 0;
  for (int i = 0; i < 16; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  }
  Symmetric best;
  if (!(amax > 1e-30f)) {
    best.scale = 0;
    best.err = 0;
    return best;
  }
  float sxx = 0;
  for (int i = 0; i < 16; ++i) sxx += w[i] * x[i] * x[i];
  auto score = [&](float iscale, float* s) {
    float sqx = 0, sqq = 0;
    for (int i = 0; i < 16; ++i) {
      const float q = Clamp(RoundNearest(x[i] * iscale), lo, hi);
      sqx += w[i] * q * x[i];
      sqq += w[i] * q * q;
    }
    if (!(sqq > 0)) return std::numeric_limits<float>::infinity();
    *s = sqx / sqq;
    return sxx - sqx * sqx / sqq;
  };
  for (int t = -10; t <= 10; ++t) {
    for (const float target : {lo, hi}) {
      float s = 0;
      const float err = score((target + step * static_cast<float>(t)) / m, &s);
      if (err < best.err) best = {s, err};
    }
  }
  for (int it = 0; it < 2 && best.scale != 0; ++it) {
    float s = 0;
    const float err = score(1.0f / best.scale, &s);
    if (!(err < best.err)) break;
    best = {s, err};
  }
  return best;
}

}  // namespace

namespace {

// Q4_K / Q5_K rows: per super-block d, dmin and the packed codes (their common 16 bytes), then
// put(block, out) writes the values after them.
template <typename Put>
void QuantizeKMinRow(const float* x, const float* importance, uint64_t k, int nmax,
                     uint64_t block_bytes, uint8_t* out, Put&& put) {
  KMinBlock b;
  for (uint64_t s = 0; s < k / kSuper; ++s, out += block_bytes) {
    QuantizeKMinBlock<32>(x + s * kSuper, importance ? importance + s * kSuper : nullptr, nmax,
                          63, &b);
    PutHalf(b.d, out);
    PutHalf(b.dmin, out + 2);
    PackKCodes(b, out + 4);
    put(b, out);
  }
}

}  // namespace

void QuantizeQ4KRow(const float* x, const float* importance, uint64_t k, uint8_t* out) {
  QuantizeKMinRow(x, importance, k, 15, kQ4KBlockBytes, out, [](const KMinBlock& b, uint8_t* o) {
    uint8_t* qs = o + 16;  // sub-blocks 2c and 2c + 1 in the low and high nibbles of 32 bytes
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        qs[32 * c + l] = static_cast<uint8_t>(b.q[64 * c + l] | (b.q[64 * c + 32 + l] << 4));
      }
    }
  });
}

void QuantizeQ5KRow(const float* x, const float* importance, uint64_t k, uint8_t* out) {
  QuantizeKMinRow(x, importance, k, 31, kQ5KBlockBytes, out, [](const KMinBlock& b, uint8_t* o) {
    uint8_t* qh = o + 16;  // the fifth bits: bit 2c (2c + 1) for sub-block 2c (2c + 1)
    uint8_t* qs = o + 48;
    std::memset(qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = b.q[64 * c + l], hi = b.q[64 * c + 32 + l];
        qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        qh[l] = static_cast<uint8_t>(qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  });
}

namespace {

// Q6_K's blocks (values in [-(qmax + 1), qmax], scales in [-(scmax + 1), scmax]): Q6_K itself
// (31, 127) and Q3_K's values and scales (3, 31) in Q6_K's bytes, which the packers re-lay.
void QuantizeSymmetricRow(const float* x, const float* importance, uint64_t k, int qmax, int scmax,
                          uint8_t* out) {
  const float qlo = -static_cast<float>(qmax + 1), qhi = static_cast<float>(qmax);
  float w[kSuper];
  for (uint64_t s = 0; s < k / kSuper; ++s, out += kQ6KBlockBytes) {
    const float* xs = x + s * kSuper;
    BlockWeights(importance ? importance + s * kSuper : nullptr, w);
    Symmetric sub[16];
    float max_abs = 0;
    for (int j = 0; j < 16; ++j) {
      sub[j] = SearchSymmetric16(xs + 16 * j, w + 16 * j, qmax);
      max_abs = std::max(max_abs, std::fabs(sub[j].scale));
    }
    const uint16_t d16 = ScaleBits(max_abs / static_cast<float>(scmax));
    const float d = F16ToF32(d16);
    int8_t sc[16];
    int8_t q[kSuper];
    for (int j = 0; j < 16; ++j) {
      const float* xj = xs + 16 * j;
      const float* wj = w + 16 * j;
      const int c0 = d > 0 ? static_cast<int>(Clamp(RoundNearest(sub[j].scale / d),
                                                    static_cast<float>(-scmax - 1),
                                                    static_cast<float>(scmax)))
                           : 0;
      float best = std::numeric_limits<float>::infinity();
      for (int c = std::max(c0 - 1, -scmax - 1); c <= std::min(c0 + 1, scmax); ++c) {
        const float scale = d * static_cast<float>(c);
        const float inv = scale != 0 ? 1.0f / scale : 0.0f;
        int8_t qj[16];
        float err = 0;
        for (int i = 0; i < 16; ++i) {
          qj[i] = static_cast<int8_t>(Clamp(RoundNearest(xj[i] * inv), qlo, qhi));
          const float e = scale * qj[i] - xj[i];
          err += wj[i] * e * e;
        }
        if (err < best) {
          best = err;
          sc[j] = static_cast<int8_t>(c);
          std::memcpy(q + 16 * j, qj, 16);
        }
      }
    }
    PackQ6KBlock(q, sc, d16, out);
  }
}

}  // namespace

void QuantizeQ2KRow(const float* x, const float* importance, uint64_t k, uint8_t* out) {
  KMinBlock b;
  for (uint64_t s = 0; s < k / kSuper; ++s, out += kQ2KBlockBytes) {
    QuantizeKMinBlock<16>(x + s * kSuper, importance ? importance + s * kSuper : nullptr, 3, 15,
                          &b);
    // scales[16] (the low nibble the scale, the high one the min), qs[64] (element
    // e = 128n + 32j + l in bits 2j, 2j + 1 of qs[32n + l]), d, dmin.
    for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>(b.sc[j] | (b.m[j] << 4));
    uint8_t* qs = out + 16;
    std::memset(qs, 0, 64);
    for (int e = 0; e < kSuper; ++e) {
      const int n = e / 128, j = e % 128 / 32, l = e % 32;
      qs[32 * n + l] = static_cast<uint8_t>(qs[32 * n + l] | (b.q[e] << (2 * j)));
    }
    PutHalf(b.d, out + 80);
    PutHalf(b.dmin, out + 82);
  }
}

void QuantizeQ6KRow(const float* x, const float* importance, uint64_t k, uint8_t* out) {
  QuantizeSymmetricRow(x, importance, k, 31, 127, out);
}

void QuantizeQ3KRowAsQ6K(const float* x, const float* importance, uint64_t k, uint8_t* out) {
  QuantizeSymmetricRow(x, importance, k, 3, 31, out);
}

void PackQ6KBlock(const int8_t v[256], const int8_t scales[16], uint16_t d, uint8_t* out) {
  // ql[128], qh[64], scales[16], d: per half of 128, element l of its four groups of 32.
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  for (int n = 0; n < 2; ++n) {
    const int8_t* vn = v + 128 * n;
    for (int l = 0; l < 32; ++l) {
      const int u0 = vn[l] + 32, u1 = vn[l + 32] + 32, u2 = vn[l + 64] + 32, u3 = vn[l + 96] + 32;
      ql[64 * n + l] = static_cast<uint8_t>((u0 & 0xF) | ((u2 & 0xF) << 4));
      ql[64 * n + l + 32] = static_cast<uint8_t>((u1 & 0xF) | ((u3 & 0xF) << 4));
      qh[32 * n + l] =
          static_cast<uint8_t>((u0 >> 4) | ((u1 >> 4) << 2) | ((u2 >> 4) << 4) | ((u3 >> 4) << 6));
    }
  }
  std::memcpy(out + 192, scales, 16);
  PutHalf(d, out + 208);
}

}  // namespace fflite
