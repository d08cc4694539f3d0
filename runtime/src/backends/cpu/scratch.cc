// The CPU backend's scratch (scratch.h): regions placed in one allocation.
#include "backends/cpu/scratch.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_format.h"
#include "backends/cpu/engines.h"

namespace fflite {

namespace {

// Byte offsets of regions in one allocation, each 64-byte aligned with its tail slack; a region
// of 0 elements is not placed.
class Regions {
 public:
  // The offset of `count` elements of `elem` bytes followed by `tail` bytes; false past the
  // address space.
  bool Place(size_t count, size_t elem, size_t tail, size_t* at) {
    constexpr size_t kMax = std::numeric_limits<size_t>::max() / 4;
    if (count > kMax / elem || tail > kMax || bytes_ > kMax - count * elem - tail - 64) {
      return false;
    }
    *at = (bytes_ + 63) / 64 * 64;
    bytes_ = *at + count * elem + tail;
    return true;
  }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

}  // namespace

absl::Status CpuScratch::Allocate(const ScratchShape& s) {
  const ModelSizes& m = s.model;
  const size_t d = s.d, chunk = s.chunk;
  const size_t rows = m.any_moe ? std::max(chunk, s.moe_chunk) : chunk;
  const size_t direct_rows = m.any_quantized_expert ? chunk : s.direct_max;
  const size_t ff_elems = std::max(chunk * m.max_ff, m.any_moe || m.any_direct_dense
                                                          ? direct_rows * DirectStride(m.max_ff)
                                                          : 0);
  const bool gathers = m.any_moe || m.any_direct_dense;
  const size_t xs = chunk * DirectStride(d), hs = chunk * DirectStride(m.max_expert_ff);
  size_t o_in = 0, o_hidden = 0, o_gate = 0, o_out = 0, o_gathered = 0, o_expert_out = 0;
  size_t o_logits = 0, o_gemm = 0, o_routed = 0, o_tasks = 0, o_units = 0;
  Regions l;
  bool ok = l.Place(rows * d, 4, kXnnTailBytes, &o_in) &&
            l.Place(ff_elems, 4, kXnnTailBytes, &o_hidden) && l.Place(ff_elems, 4, 0, &o_gate) &&
            l.Place(rows * d, 4, 0, &o_out) &&
            l.Place(gathers ? xs : 0, 4, gathers ? kXnnTailBytes : 0, &o_gathered) &&
            l.Place(m.any_moe ? chunk * d : 0, 4, 0, &o_expert_out) &&
            l.Place(m.any_moe ? s.moe_chunk * m.max_router_out : 0, 4, 0, &o_logits) &&
            l.Place(s.gemm_units, 4, 0, &o_gemm);
  const size_t others = s.alone_threads;
  ok = ok && l.Place(others > 0 ? s.moe_chunk * m.max_k * d : 0, 4, 0, &o_routed) &&
       l.Place(others * (xs + 2 * hs), 4, others > 0 ? kXnnTailBytes : 0, &o_tasks) &&
       l.Place(others * s.alone_units, 4, 0, &o_units);
  if (!ok || !arena_.Allocate(l.bytes())) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "allocating scratch for %d tokens (d_model %d, d_ff %d) failed", rows, d, m.max_ff));
  }
  uint8_t* base = arena_.data();
  auto floats = [base](size_t at) { return reinterpret_cast<float*>(base + at); };
  in = floats(o_in);
  hidden = floats(o_hidden);
  gate = floats(o_gate);
  out = floats(o_out);
  gathered = gathers ? floats(o_gathered) : nullptr;
  expert_out = m.any_moe ? floats(o_expert_out) : nullptr;
  logits = m.any_moe ? floats(o_logits) : nullptr;
  gemm_units = s.gemm_units;
  gemm = s.gemm_units > 0 ? reinterpret_cast<uint32_t*>(base + o_gemm) : nullptr;
  routed_out = others > 0 ? floats(o_routed) : nullptr;
  task_floats = others > 0 ? floats(o_tasks) : nullptr;
  task_units = others > 0 && s.alone_units > 0 ? reinterpret_cast<uint32_t*>(base + o_units)
                                               : nullptr;
  return absl::OkStatus();
}

}  // namespace fflite
