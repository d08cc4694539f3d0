// The expert slots (expert_pool.h).
#include "moe/expert_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"

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
  if (reader_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_.notify_all();
    reader_.join();
  }
  if (base_ != nullptr) ::munmap(base_, static_cast<size_t>(slots_ * slot_bytes_));
}

absl::Status ExpertPool::Init(size_t slots, uint64_t slot_bytes, bool reader_thread) {
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
  state_.assign(slots, SlotState());
  queue_.assign(slots, 0);
  if (!reader_thread) return absl::OkStatus();
  try {
    reader_ = std::thread([this] { ReaderLoop(); });
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("starting the expert reader thread failed: ", e.what()));
  }
  return absl::OkStatus();
}

size_t ExpertPool::Acquire() {
  const size_t s = free_.back();
  free_.pop_back();
  return s;
}

void ExpertPool::Release(size_t slot) { free_.push_back(slot); }

void ExpertPool::PointInto(const Model& model, const FfnView& f, const Plan& plan, uint8_t* slot,
                           FfnView* view) {
  *view = f;
  for (TensorView* t : Tensors(*view)) {
    if (!t->present() || t->size == 0) continue;
    const uint64_t at = model.FileOffset(*t);
    for (size_t i = 0; i < plan.num_runs; ++i) {
      const Plan::Run& r = plan.runs[i];
      if (at >= r.file_offset && at + t->size <= r.file_offset + r.bytes) {
        t->data = slot + r.slot_offset + (at - r.file_offset);
        break;
      }
    }
  }
}

absl::Status ExpertPool::Read(const Model& model, const Plan& plan, size_t slot,
                              uint64_t* buffered, uint64_t* direct) const {
  uint8_t* dst = slot_data(slot);
  for (size_t i = 0; i < plan.num_runs; ++i) {
    const Plan::Run& r = plan.runs[i];
    FFLITE_RETURN_IF_ERROR(model.ReadFileRange(r.file_offset, static_cast<size_t>(r.bytes),
                                               dst + r.slot_offset, buffered, direct));
  }
  return absl::OkStatus();
}

absl::Status ExpertPool::Fill(const Model& model, const Plan& plan, size_t slot) {
  const auto start = std::chrono::steady_clock::now();
  uint64_t buffered = 0, direct = 0;
  const absl::Status status = Read(model, plan, slot, &buffered, &direct);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.buffered_bytes += buffered;
  counters_.direct_bytes += direct;
  counters_.wait_seconds += seconds;
  if (status.ok()) ++counters_.fills;
  return status;
}

absl::Status ExpertPool::Start(const Model& model, const Plan& plan, size_t slot) {
  if (!reader_.joinable()) {
    return absl::FailedPreconditionError("the expert pool has no reader thread");
  }
  SlotState& s = state_[slot];
  s.started = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s.phase = Phase::kQueued;
    s.model = &model;
    s.plan = &plan;
    queue_[(queue_head_ + queue_size_) % queue_.size()] = slot;
    ++queue_size_;
  }
  work_.notify_one();
  return absl::OkStatus();
}

absl::Status ExpertPool::Wait(size_t slot) {
  SlotState& s = state_[slot];
  s.started = false;
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  if (s.phase == Phase::kQueued) {
    // Still queued: take it out of the queue (a few entries) and read it here.
    const size_t n = queue_.size();
    size_t k = 0;
    while (k < queue_size_ && queue_[(queue_head_ + k) % n] != slot) ++k;
    for (; k + 1 < queue_size_; ++k) {
      queue_[(queue_head_ + k) % n] = queue_[(queue_head_ + k + 1) % n];
    }
    --queue_size_;
    s.phase = Phase::kReading;
    lock.unlock();
    uint64_t buffered = 0, direct = 0;
    absl::Status status = Read(*s.model, *s.plan, slot, &buffered, &direct);
    lock.lock();
    Finish(slot, std::move(status), buffered, direct);
  } else {
    finished_.wait(lock, [&] { return s.phase == Phase::kDone; });
  }
  counters_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s.status;
}

void ExpertPool::Finish(size_t slot, absl::Status status, uint64_t buffered, uint64_t direct) {
  counters_.buffered_bytes += buffered;
  counters_.direct_bytes += direct;
  if (status.ok()) ++counters_.fills;
  state_[slot].status = std::move(status);
  state_[slot].phase = Phase::kDone;
}

void ExpertPool::ReaderLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || queue_size_ != 0; });
    if (stop_) return;
    const size_t slot = queue_[queue_head_];
    queue_head_ = (queue_head_ + 1) % queue_.size();
    --queue_size_;
    SlotState& s = state_[slot];
    s.phase = Phase::kReading;
    const Model& model = *s.model;
    const Plan& plan = *s.plan;
    lock.unlock();
    uint64_t buffered = 0, direct = 0;
    absl::Status status = Read(model, plan, slot, &buffered, &direct);
    lock.lock();
    Finish(slot, std::move(status), buffered, direct);
    finished_.notify_all();
  }
}

ExpertPool::Counters ExpertPool::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

}  // namespace fflite
