// The CPU backend's routed experts and their residency (expert_store.h).
#include "backends/cpu/expert_store.h"

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
    slots_.push_back(std::move(slot));
  }
  return first;
}

void ExpertStore::Init(const PackChoice& choice, uint64_t budget) {
  choice_ = choice;
  residency_.Init(2 * slots_.size(), budget);
  for (size_t i = 0; i < slots_.size(); ++i) {
    residency_.SetBytes(2 * i + kPackedForm, PackedFfnBytes(*slots_[i].view, choice_));
    residency_.SetBytes(2 * i + kMappedForm, FileBytes(*slots_[i].view));
  }
}

absl::StatusOr<PackedFfn*> ExpertStore::Packed(size_t i, const EngineContext& ctx) {
  ExpertSlot& s = slots_[i];
  const size_t entry = 2 * i + kPackedForm;
  if (residency_.resident(entry)) {
    residency_.Touch(entry);
    return s.ffn.get();
  }
  residency_.MakeRoom(entry, [this](size_t e) { Evict(e); });
  auto packed = std::make_unique<PackedFfn>();
  FFLITE_RETURN_IF_ERROR(PackFfn(
      *s.view, kernels_, choice_, ctx,
      absl::StrFormat("layers[%d].moe.experts[%d]", s.layer, s.expert), packed.get()));
  // Packing read the file pages: hand them back, unless the mapped form holds them.
  if (!residency_.resident(2 * i + kMappedForm)) ReleaseFfnPages(model_, *s.view);
  s.ffn = std::move(packed);
  residency_.Insert(entry);
  return s.ffn.get();
}

void ExpertStore::Mapped(size_t i) {
  const size_t entry = 2 * i + kMappedForm;
  if (residency_.resident(entry)) {
    residency_.Touch(entry);
    return;
  }
  residency_.MakeRoom(entry, [this](size_t e) { Evict(e); });
  PopulateFfnPages(model_, *slots_[i].view);
  residency_.Insert(entry);
}

void ExpertStore::Evict(size_t entry) {
  ExpertSlot& s = slots_[entry / 2];
  if (entry % 2 == kPackedForm) {
    s.ffn.reset();  // deletes the operators and their packed weights
  } else {
    ReleaseFfnPages(model_, *s.view);
  }
}

}  // namespace fflite
