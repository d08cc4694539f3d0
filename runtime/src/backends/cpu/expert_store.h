// The CPU backend's routed experts, resident or not. Each expert has two forms, prepared on first
// use and each counted by the expert budget on its own: its packed operators (batches of more
// than the direct limit) and its file pages (read in place by the direct kernel and the
// quantised engine). Without a budget nothing is dropped; with one, the least recently used forms
// are dropped (packed weights freed, file pages released) until the form needed fits
// (moe/residency.h). Which form a batch runs on depends only on its token count, never on what
// is resident, so results do not depend on the budget.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_EXPERT_STORE_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_EXPERT_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cpu/cpu_options.h"
#include "backends/cpu/engines.h"
#include "backends/cpu/ffn_forms.h"
#include "format/model.h"
#include "kernels/kernels.h"
#include "moe/residency.h"

namespace fflite {

// One routed expert: its file form (FileFfn, always there: biases converted once) and its
// packed form while resident.
struct ExpertSlot : FileFfn {
  size_t layer = 0, expert = 0;
  std::unique_ptr<PackedFfn> ffn;  // while the packed form is resident
  bool all_quantized = false;      // always runs on the file's weights (never packed)
};

// One form of one expert on the residency list: entry 2·slot + form.
enum ExpertForm : size_t { kPackedForm = 0, kMappedForm = 1 };

class ExpertStore {
 public:
  ExpertStore(const Model& model, const Kernels& kernels) : model_(model), kernels_(kernels) {}

  // Adds MoE layer `layer`'s routed experts; returns the slot of its expert 0 (its experts are
  // consecutive slots). Errors: ResourceExhausted past 2^30 experts.
  absl::StatusOr<size_t> AddLayer(size_t layer, const MoeView& moe);
  // After the layers: the forms' sizes with `choice` (the routed experts' packing) and the
  // budget in bytes (0: none).
  void Init(const PackChoice& choice, uint64_t budget);

  ExpertSlot& slot(size_t i) { return slots_[i]; }
  size_t size() const { return slots_.size(); }

  // Slot i's packed operators, packed on ctx's threads first if they are not resident (its file
  // pages handed back unless its file form is resident). Errors: the packing's.
  absl::StatusOr<PackedFfn*> Packed(size_t i, const EngineContext& ctx);
  // Makes slot i's file pages resident (mapped in at once) for the direct kernel.
  void Mapped(size_t i);

  // The bytes of slot i's form as the budget counts them.
  uint64_t FormBytes(size_t i, ExpertForm form) const { return residency_.bytes(2 * i + form); }
  // A batch ran on slot i's form: its bytes count as read (BackendStats::routed_expert_bytes).
  void CountRead(size_t i, ExpertForm form) { read_bytes_ += FormBytes(i, form); }
  uint64_t read_bytes() const { return read_bytes_; }
  uint64_t resident_bytes() const { return residency_.resident_bytes(); }
  uint64_t budget() const { return residency_.budget(); }

 private:
  // Drops a form the residency list let go of.
  void Evict(size_t entry);

  const Model& model_;
  const Kernels& kernels_;
  PackChoice choice_;
  std::vector<ExpertSlot> slots_;  // every MoE layer's routed experts
  ExpertResidency residency_;      // [2 · slots] forms: packed, mapped; LRU over the resident
  uint64_t read_bytes_ = 0;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_EXPERT_STORE_H_
