// The expert residency list, backend-neutral: which forms of which experts are resident (packed
// weights, mapped file pages, device copies...), their bytes, and the least-recently-used order
// under a byte budget. A backend says what each entry is and how to drop it.
#ifndef FFLITE_RUNTIME_SRC_MOE_RESIDENCY_H_
#define FFLITE_RUNTIME_SRC_MOE_RESIDENCY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fflite {

// Entries are numbered by the backend (e.g. two forms per expert: 2·slot + form). Only the entry
// in use must be resident: experts run one after the other, so one used earlier in the same call
// may be dropped. The list is intrusive over the entries: nothing is allocated after Init. Without
// a budget (0) nothing is ever dropped.
class ExpertResidency {
 public:
  // `entries` entries, none resident; `budget` bytes (0: unlimited).
  void Init(size_t entries, uint64_t budget);
  // The bytes entry `e` takes when resident (set before it is first made resident).
  void SetBytes(size_t e, uint64_t bytes) { entries_[e].bytes = bytes; }
  uint64_t bytes(size_t e) const { return entries_[e].bytes; }
  bool resident(size_t e) const { return entries_[e].resident; }
  uint64_t resident_bytes() const { return resident_bytes_; }
  uint64_t budget() const { return budget_; }

  // Marks resident entry `e` as the most recently used.
  void Touch(size_t e);
  // Before entry `e` is made resident: drops least recently used entries, calling evict(entry)
  // for each (after it left the list), until `e` fits the budget. A budget below one entry
  // leaves only the entry in use.
  template <typename Evict>
  void MakeRoom(size_t e, Evict evict) {
    MakeRoom(e, evict, [] { return true; });
  }
  // The same, and until `fits()` holds too (a limit besides the bytes: free expert slots), never
  // dropping entry `keep` (one the new entry is made from; -1: none), which stays resident over
  // the budget when only it is left.
  template <typename Evict, typename Fits>
  void MakeRoom(size_t e, Evict evict, Fits fits, int64_t keep = -1) {
    while (tail_ >= 0 && tail_ != keep &&
           ((budget_ != 0 && resident_bytes_ + entries_[e].bytes > budget_) || !fits())) {
      const size_t victim = static_cast<size_t>(tail_);
      Remove(victim);
      evict(victim);
    }
  }
  // Entry `e` is now resident and the most recently used.
  void Insert(size_t e);
  // Drops least recently used entries other than `e` until the resident ones fit the budget
  // (after a form made from another that had to be kept meanwhile).
  template <typename Evict>
  void Trim(size_t e, Evict evict) {
    while (budget_ != 0 && resident_bytes_ > budget_ && tail_ >= 0 &&
           tail_ != static_cast<int64_t>(e)) {
      const size_t victim = static_cast<size_t>(tail_);
      Remove(victim);
      evict(victim);
    }
  }

 private:
  struct Entry {
    uint64_t bytes = 0;
    bool resident = false;
    int32_t prev = -1, next = -1;  // LRU neighbours (entry indices), -1 at the ends
  };
  void Remove(size_t e);
  void Unlink(size_t e);
  void PushFront(size_t e);

  std::vector<Entry> entries_;
  int32_t head_ = -1, tail_ = -1;  // head: most recently used
  uint64_t budget_ = 0;
  uint64_t resident_bytes_ = 0;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_MOE_RESIDENCY_H_
