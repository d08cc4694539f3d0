// The expert residency list: an intrusive doubly linked LRU list over a fixed set of entries.
#include "moe/residency.h"

namespace fflite {

void ExpertResidency::Init(size_t entries, uint64_t budget, ResidencyPolicy policy) {
  entries_.assign(entries, Entry());
  head_ = tail_ = -1;
  budget_ = budget;
  resident_bytes_ = 0;
  policy_ = policy;
  tick_ = 0;
  half_life_ = static_cast<double>(entries < 64 ? 64 : entries);
}

void ExpertResidency::Touch(size_t e) {
  if (budget_ == 0) return;  // nothing is dropped: the order does not matter
  Use(e);
  Unlink(e);
  PushFront(e);
}

void ExpertResidency::Insert(size_t e) {
  entries_[e].resident = true;
  resident_bytes_ += entries_[e].bytes;
  if (budget_ != 0) Use(e);
  PushFront(e);
}

void ExpertResidency::Remove(size_t e) {
  Unlink(e);
  entries_[e].resident = false;
  resident_bytes_ -= entries_[e].bytes;
}

void ExpertResidency::Unlink(size_t i) {
  Entry& s = entries_[i];
  if (s.prev >= 0) entries_[static_cast<size_t>(s.prev)].next = s.next; else head_ = s.next;
  if (s.next >= 0) entries_[static_cast<size_t>(s.next)].prev = s.prev; else tail_ = s.prev;
  s.prev = s.next = -1;
}

void ExpertResidency::PushFront(size_t i) {
  Entry& s = entries_[i];
  s.prev = -1;
  s.next = head_;
  if (head_ >= 0) entries_[static_cast<size_t>(head_)].prev = static_cast<int32_t>(i);
  head_ = static_cast<int32_t>(i);
  if (tail_ < 0) tail_ = head_;
}

}  // namespace fflite
