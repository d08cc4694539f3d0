// The expert slots (expert_pool.h).
#include "moe/expert_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/mapped_file.h"

namespace fflite {
namespace {

constexpr uint64_t kPage = MappedFile::kDirectAlignment;
// Tensors closer than this in the file are read in one run (the gap read with them): fewer
// reads for experts whose matrices are near but not adjacent.
constexpr uint64_t kMergeGap = 64 * 1024;

std::array<const TensorView*, 6> Tensors(const FfnView& f) {
  return {&f.up, &f.gate, &f.down, &f.up_bias, &f.gate_bias, &f.down_bias};
}
std::array<TensorView*, 6> Tensors(FfnView& f) {
  return {&f.up, &f.gate, &f.down, &f.up_bias, &f.gate_bias, &f.down_bias};
}

}  // namespace

ExpertPool::Plan ExpertPool::PlanExpert(const Model& model, const FfnView& f) {
  struct Range {
    uint64_t begin, end;
  };
  std::array<Range, 6> ranges;
  size_t n = 0;
  for (const TensorView* t : Tensors(f)) {
    if (t->present() && t->size != 0) {
      const uint64_t at = model.FileOffset(*t);
      ranges[n++] = {at / kPage * kPage, std::min((at + t->size + kPage - 1) / kPage * kPage,
                                                  model.file_size())};
    }
  }
  for (size_t i = 1; i < n; ++i) {  // by file offset (at most 6: insertion)
    for (size_t j = i; j > 0 && ranges[j].begin < ranges[j - 1].begin; --j) {
      std::swap(ranges[j], ranges[j - 1]);
    }
  }
  Plan plan;
  for (size_t i = 0; i < n; ++i) {
    if (plan.num_runs > 0) {
      Plan::Run& last = plan.runs[plan.num_runs - 1];
      const uint64_t end = last.file_offset + last.bytes;
      if (ranges[i].begin <= end + kMergeGap) {
        last.bytes = std::max(end, ranges[i].end) - last.file_offset;
        continue;
      }
    }
    plan.runs[plan.num_runs++] = {ranges[i].begin, ranges[i].end - ranges[i].begin, 0};
  }
  for (size_t i = 0; i < plan.num_runs; ++i) {
    plan.runs[i].slot_offset = plan.bytes;
    plan.bytes += (plan.runs[i].bytes + kPage - 1) / kPage * kPage;
  }
  return plan;
}

ExpertPool::~ExpertPool() {
  if (base_ != nullptr) ::munmap(base_, static_cast<size_t>(slots_ * slot_bytes_));
}

absl::Status ExpertPool::Init(size_t slots, uint64_t slot_bytes) {
  if (slots == 0 || slot_bytes == 0) return absl::OkStatus();
  if (slot_bytes > std::numeric_limits<size_t>::max() / slots) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the expert budget's %d slots of %d bytes exceed the address space", slots, slot_bytes));
  }
  const size_t bytes = static_cast<size_t>(slots * slot_bytes);
  // Anonymous memory: reserved now, committed page by page as slots fill, so a budget larger
  // than what the experts ever use costs nothing.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "reserving the expert budget's %d slots of %d bytes failed", slots, slot_bytes));
  }
  base_ = static_cast<uint8_t*>(p);
  slots_ = slots;
  slot_bytes_ = slot_bytes;
  free_.reserve(slots);
  for (size_t i = slots; i-- > 0;) free_.push_back(i);  // slot 0 first
  return absl::OkStatus();
}

size_t ExpertPool::Acquire() {
  const size_t s = free_.back();
  free_.pop_back();
  return s;
}

void ExpertPool::Release(size_t slot) { free_.push_back(slot); }

absl::Status ExpertPool::Fill(const Model& model, const FfnView& f, const Plan& plan,
                              size_t slot, const std::string& name, FfnView* view) {
  uint8_t* dst = base_ + slot * slot_bytes_;
  const auto start = std::chrono::steady_clock::now();
  absl::Status status;
  for (size_t i = 0; i < plan.num_runs && status.ok(); ++i) {
    const Plan::Run& r = plan.runs[i];
    status = model.ReadFileRange(r.file_offset, static_cast<size_t>(r.bytes),
                                 dst + r.slot_offset, &counters_.buffered_bytes,
                                 &counters_.direct_bytes);
  }
  counters_.read_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrFormat("%s: %s", name, status.message()));
  }
  ++counters_.fills;
  *view = f;
  for (TensorView* t : Tensors(*view)) {
    if (!t->present() || t->size == 0) continue;
    const uint64_t at = model.FileOffset(*t);
    for (size_t i = 0; i < plan.num_runs; ++i) {
      const Plan::Run& r = plan.runs[i];
      if (at >= r.file_offset && at + t->size <= r.file_offset + r.bytes) {
        t->data = dst + r.slot_offset + (at - r.file_offset);
        break;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace fflite
