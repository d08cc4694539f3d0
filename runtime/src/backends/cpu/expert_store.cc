// The CPU backend's routed experts and their residency (expert_store.h).
#include "backends/cpu/expert_store.h"

#include <algorithm>
#include <limits>
#include <utility>

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

absl::Status ExpertStore::Init(const PackChoice& choice, uint64_t budget) {
  choice_ = choice;
  residency_.Init(2 * slots_.size(), budget);
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
        pool_.Init(static_cast<size_t>(std::min<uint64_t>(fit, slots_.size())), slot_bytes));
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
  residency_.MakeRoom(
      entry, [this](size_t e) { Evict(e); }, [&] { return !slot || pool_.has_free(); }, keep);
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
    FFLITE_RETURN_IF_ERROR(FileForm(i));
    keep = static_cast<int64_t>(2 * i + kFileForm);
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
    ++hits_;
    return absl::OkStatus();
  }
  ++misses_;
  MakeRoom(entry);
  if (!streamed()) {
    PopulateFfnPages(model_, *s.view);
  } else {
    const size_t slot = pool_.Acquire();
    const absl::Status read = pool_.Fill(model_, *s.model_view, s.plan, slot, Name(s), &s.streamed);
    if (!read.ok()) {
      pool_.Release(slot);  // nothing resident: the next call reads it again
      return read;
    }
    s.pool_slot = slot;
    s.view = &s.streamed;
  }
  residency_.Insert(entry);
  return absl::OkStatus();
}

void ExpertStore::Evict(size_t entry) {
  ExpertSlot& s = slots_[entry / 2];
  if (entry % 2 == kPackedForm) {
    s.ffn.reset();  // deletes the operators and their packed weights
  } else if (streamed()) {
    s.view = s.model_view;
    pool_.Release(s.pool_slot);
  } else {
    ReleaseFfnPages(model_, *s.view);
  }
}

}  // namespace fflite
