// The CPU backend's routed experts and their residency (expert_store.h).
#include "backends/cpu/expert_store.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace fflite {

absl::StatusOr<size_t> ExpertStore::AddLayer(size_t layer, const MoeView& moe) {
  const size_t first = slots_.size(), e = moe.num_experts;
  if (first + e > static_cast<size_t>(std::numeric_limits<int32_t>::max()) / 2) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("layers[%d].moe: too many experts", layer));
  }
  for (size_t i = 0; i < e; ++i) {
    const FfnView& f = moe.experts[i];
    ExpertSlot slot;
    slot.layer = layer;
    slot.expert = i;
    slot.all_quantized = f.AllQuantized();
    slot.Init(f);
    slot.model_view = &f;
    slot.file_bytes = FileBytes(f);
    slots_.push_back(std::move(slot));
  }
  return first;
}

absl::Status ExpertStore::Init(const PackChoice& choice, uint64_t budget,
                               ResidencyPolicy policy,
                               bool reader_thread) {
  choice_ = choice;
  residency_.Init(2 * slots_.size(), budget, policy);
  // With a budget, a file-backed model's experts are read into slots of the largest expert's
  // size: the budget holds budget / slot bytes of them (at least one: a budget below one expert
  // keeps only the expert in use).
  uint64_t slot_bytes = 0;
  const bool stream = budget != 0 && model_.file_backed() && !slots_.empty();
  if (stream) {
    for (ExpertSlot& s : slots_) {
      s.plan = ExpertPool::PlanExpert(model_, *s.model_view);
      slot_bytes = std::max(slot_bytes, s.plan.bytes);
    }
    const uint64_t fit = std::max<uint64_t>(1, budget / std::max<uint64_t>(1, slot_bytes));
    FFLITE_RETURN_IF_ERROR(
        pool_.Init(static_cast<size_t>(std::min<uint64_t>(fit, slots_.size())), slot_bytes,
                   reader_thread));
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    residency_.SetBytes(2 * i + kPackedForm, PackedFfnBytes(*slots_[i].model_view, choice_));
    residency_.SetBytes(2 * i + kFileForm, stream ? slot_bytes : slots_[i].file_bytes);
  }
  return absl::OkStatus();
}

std::string ExpertStore::Name(const ExpertSlot& s) const {
  return absl::StrFormat("layers[%d].moe.experts[%d]", s.layer, s.expert);
}

void ExpertStore::MakeRoom(size_t entry, int64_t keep) {
  const bool slot = streamed() && entry % 2 == kFileForm;
  while (!residency_.Fits(entry) || (slot && !pool_.has_free())) {
    // Experts the epoch still needs (read ahead for this call, or guessed) go last.
    int64_t victim = residency_.Victim([&](size_t x) {
      return static_cast<int64_t>(x) != keep && slots_[x / 2].epoch != epoch_;
    });
    if (victim < 0) {
      victim = residency_.Victim([keep](size_t x) { return static_cast<int64_t>(x) != keep; });
    }
    if (victim < 0) return;  // only `keep` is left: over the budget with it
    residency_.Drop(static_cast<size_t>(victim));
    Evict(static_cast<size_t>(victim));
  }
}

absl::StatusOr<PackedFfn*> ExpertStore::Packed(size_t i, const EngineContext& ctx) {
  ExpertSlot& s = slots_[i];
  const size_t entry = 2 * i + kPackedForm;
  if (residency_.resident(entry)) {
    residency_.Touch(entry);
    ++hits_;
    return s.ffn.get();
  }
  ++misses_;
  // A streamed expert is packed from its slot (read first if it is not resident, and kept while
  // room is made for the packed form): the packing faults none of its pages in.
  int64_t keep = -1;
  if (streamed()) {
    FFLITE_RETURN_IF_ERROR(FileForm(i));  // checks the scales of its quantised matrices
    keep = static_cast<int64_t>(2 * i + kFileForm);
  } else {
    FFLITE_RETURN_IF_ERROR(CheckScales(s));
  }
  MakeRoom(entry, keep);
  auto packed = std::make_unique<PackedFfn>();
  FFLITE_RETURN_IF_ERROR(PackFfn(*s.view, kernels_, choice_, ctx, Name(s), packed.get()));
  // The packed form outlives the slot: quantised matrices of a mixed expert (read in place by
  // the packed form) are read from the mapping.
  packed->view = s.model_view;
  // Packing read the file pages: hand them back, unless the mapped form holds them.
  if (!streamed() && !residency_.resident(2 * i + kFileForm)) ReleaseFfnPages(model_, *s.view);
  s.ffn = std::move(packed);
  residency_.Insert(entry);
  if (keep >= 0) residency_.Trim(entry, [this](size_t e) { Evict(e); });
  return s.ffn.get();
}

absl::Status ExpertStore::FileForm(size_t i) {
  ExpertSlot& s = slots_[i];
  const size_t entry = 2 * i + kFileForm;
  if (residency_.resident(entry)) {
    residency_.Touch(entry);
    if (s.ahead != ExpertSlot::Ahead::kCall) ++hits_;
    if (s.ahead == ExpertSlot::Ahead::kGuess) ++prefetches_used_;
    s.ahead = ExpertSlot::Ahead::kNone;
    if (streamed() && pool_.started(s.pool_slot)) {
      const absl::Status read = pool_.Wait(s.pool_slot);
      if (!read.ok()) {
        residency_.Drop(entry);
        Evict(entry);  // nothing resident: the next call reads it again
        return absl::Status(read.code(), absl::StrCat(Name(s), ": ", read.message()));
      }
    }
  } else {
    ++misses_;
    MakeRoom(entry);
    if (!streamed()) {
      PopulateFfnPages(model_, *s.view);
    } else {
      const size_t slot = pool_.Acquire();
      const absl::Status read = pool_.Fill(model_, s.plan, slot);
      if (!read.ok()) {
        pool_.Release(slot);  // nothing resident: the next call reads it again
        return absl::Status(read.code(), absl::StrCat(Name(s), ": ", read.message()));
      }
      Point(s, slot);
    }
    residency_.Insert(entry);
  }
  // The bytes the kernels are about to read: their scales, checked once per matrix (a failure
  // leaves nothing resident and fails every call that needs the expert).
  const absl::Status scales = CheckScales(s);
  if (!scales.ok()) {
    residency_.Drop(entry);
    Evict(entry);
  }
  return scales;
}

absl::Status ExpertStore::CheckScales(const ExpertSlot& s) const {
  const FfnView& m = *s.model_view;
  FFLITE_RETURN_IF_ERROR(model_.CheckScales(m.up, s.view->up.data));
  if (m.gated) FFLITE_RETURN_IF_ERROR(model_.CheckScales(m.gate, s.view->gate.data));
  return model_.CheckScales(m.down, s.view->down.data);
}

void ExpertStore::Point(ExpertSlot& s, size_t slot) {
  s.pool_slot = slot;
  ExpertPool::PointInto(model_, *s.model_view, s.plan, pool_.slot_data(slot), &s.streamed);
  s.view = &s.streamed;
}

void ExpertStore::Protect(size_t i) {
  slots_[i].epoch = epoch_;
  for (size_t form : {kPackedForm, kFileForm}) {
    if (residency_.resident(2 * i + form)) residency_.Touch(2 * i + form);
  }
}

bool ExpertStore::Prefetch(size_t i, bool guess) {
  ExpertSlot& s = slots_[i];
  const size_t entry = 2 * i + kFileForm;
  s.epoch = epoch_;
  if (!streamed() || residency_.resident(entry)) return true;
  // Room without dropping what this call (or this guess) needs: else the guess stops here.
  while (!residency_.Fits(entry) || !pool_.has_free()) {
    const int64_t victim =
        residency_.Victim([this](size_t x) { return slots_[x / 2].epoch != epoch_; });
    if (victim < 0) return false;
    residency_.Drop(static_cast<size_t>(victim));
    Evict(static_cast<size_t>(victim));
  }
  const size_t slot = pool_.Acquire();
  if (!pool_.Start(model_, s.plan, slot).ok()) {
    pool_.Release(slot);
    return false;  // no reader thread (not expected): the experts are read when they run
  }
  Point(s, slot);
  s.ahead = guess ? ExpertSlot::Ahead::kGuess : ExpertSlot::Ahead::kCall;
  if (!guess) ++misses_;
  residency_.Insert(entry);
  return true;
}

void ExpertStore::Evict(size_t entry) {
  ExpertSlot& s = slots_[entry / 2];
  if (entry % 2 == kPackedForm) {
    s.ffn.reset();  // deletes the operators and their packed weights
  } else if (streamed()) {
    // A read still in flight finishes before its slot is reused (its status no longer matters).
    if (pool_.started(s.pool_slot)) pool_.Wait(s.pool_slot).IgnoreError();
    if (s.ahead == ExpertSlot::Ahead::kGuess) ++prefetches_wasted_;
    s.ahead = ExpertSlot::Ahead::kNone;
    s.view = s.model_view;
    pool_.Release(s.pool_slot);
  } else {
    ReleaseFfnPages(model_, *s.view);
  }
}

}  // namespace fflite
