// The expert residency list, backend-neutral: which forms of which experts are resident (packed
// weights, mapped file pages, device copies...), their bytes, and which to drop under a byte
// budget: the least recently used, or (the default) a frequency-aware choice among the least
// recently used ones. A backend says what each entry is and how to drop it.
#ifndef FFLITE_RUNTIME_SRC_MOE_RESIDENCY_H_
#define FFLITE_RUNTIME_SRC_MOE_RESIDENCY_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fflite {

// Which resident entry a budget drops first. kLru: the least recently used. kFrequency: among
// the kFrequencyWindow least recently used, the one used least often lately (each entry's uses
// halve every half-life of touches: as many touches as there are entries), the least recent on
// ties. Real MoE routing is skewed (a few experts take most tokens). Measured with fflite-bench
// --storage --expert_policy lru|frequency on qwen3-30b-a3b-shaped i4 files, 1/5 of the experts
// resident, 40 decode tokens: with routing skewed as a Zipf law of exponent 1 (--routing_skew 1,
// 4 layers) the frequency-aware choice read 8.6 experts per token against LRU's 9.7; with about
// uniform routing (6 layers) 40.9 against 40.4.
enum class ResidencyPolicy { kLru, kFrequency };
inline constexpr size_t kFrequencyWindow = 32;

// Entries are numbered by the backend (e.g. two forms per expert: 2·slot + form). Only the entry
// in use must be resident: experts run one after the other, so one used earlier in the same call
// may be dropped. The list is intrusive over the entries: nothing is allocated after Init. Without
// a budget (0) nothing is ever dropped.
class ExpertResidency {
 public:
  // `entries` entries, none resident; `budget` bytes (0: unlimited).
  void Init(size_t entries, uint64_t budget,
            ResidencyPolicy policy = ResidencyPolicy::kFrequency);
  ResidencyPolicy policy() const { return policy_; }
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
    while ((budget_ != 0 && resident_bytes_ + entries_[e].bytes > budget_) || !fits()) {
      const int64_t victim = Victim([keep](size_t x) { return static_cast<int64_t>(x) != keep; });
      if (victim < 0) return;
      Remove(static_cast<size_t>(victim));
      evict(static_cast<size_t>(victim));
    }
  }
  // The resident entry the policy drops next among those `droppable(entry)` allows, or -1.
  template <typename Droppable>
  int64_t Victim(Droppable droppable) const {
    int64_t best = -1;
    double best_uses = 0.0;
    size_t seen = 0;
    for (int64_t x = tail_; x >= 0; x = entries_[static_cast<size_t>(x)].prev) {
      if (!droppable(static_cast<size_t>(x))) continue;
      if (policy_ == ResidencyPolicy::kLru) return x;
      const double uses = Uses(static_cast<size_t>(x));
      if (best < 0 || uses < best_uses) {
        best = x;
        best_uses = uses;
      }
      if (++seen == kFrequencyWindow) break;
    }
    return best;
  }
  // Entry `e` is now resident and the most recently used.
  void Insert(size_t e);
  // Whether entry `e` fits the budget beside the resident ones (always without a budget).
  bool Fits(size_t e) const {
    return budget_ == 0 || resident_bytes_ + entries_[e].bytes <= budget_;
  }
  // Takes resident entry `e` off the list (the caller drops what it holds).
  void Drop(size_t e) { Remove(e); }
  // Drops least recently used entries other than `e` until the resident ones fit the budget
  // (after a form made from another that had to be kept meanwhile).
  template <typename Evict>
  void Trim(size_t e, Evict evict) {
    while (budget_ != 0 && resident_bytes_ > budget_) {
      const int64_t victim = Victim([e](size_t x) { return x != e; });
      if (victim < 0) return;
      Remove(static_cast<size_t>(victim));
      evict(static_cast<size_t>(victim));
    }
  }

 private:
  struct Entry {
    uint64_t bytes = 0;
    bool resident = false;
    int32_t prev = -1, next = -1;  // LRU neighbours (entry indices), -1 at the ends
    double uses = 0.0;             // uses, halved every half_life_ touches (as of `last`)
    uint64_t last = 0;             // the touch count when it was last used
  };
  // Entry x's uses as of now.
  double Uses(size_t x) const {
    const Entry& s = entries_[x];
    return s.uses * std::exp2(-static_cast<double>(tick_ - s.last) / half_life_);
  }
  void Use(size_t x) {
    ++tick_;
    entries_[x].uses = Uses(x) + 1.0;
    entries_[x].last = tick_;
  }
  void Remove(size_t e);
  void Unlink(size_t e);
  void PushFront(size_t e);

  std::vector<Entry> entries_;
  int32_t head_ = -1, tail_ = -1;  // head: most recently used
  uint64_t budget_ = 0;
  uint64_t resident_bytes_ = 0;
  ResidencyPolicy policy_ = ResidencyPolicy::kFrequency;
  uint64_t tick_ = 0;         // touches so far
  double half_life_ = 64.0;  // in touches: the entries' count, at least 64
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_MOE_RESIDENCY_H_
