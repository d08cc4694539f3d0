// The CPU backend's routed experts, resident or not. Each expert has two forms, prepared on first
// use and each counted by the expert budget on its own: its packed operators (batches of more
// than the direct limit) and its file form (read in place by the direct kernel and the quantised
// engine). Without a budget nothing is dropped and the file form is the mapped file; with one, the
// least recently used forms are dropped (packed weights freed, slots reused) until the form needed
// fits (moe/residency.h), and the file form of a file-backed model is a slot of the expert pool,
// filled with explicit reads (moe/expert_pool.h; a model in a caller's buffer keeps reading it in
// place). Which form a batch runs on depends only on its token count, never on what is resident,
// and a slot holds the file's bytes, so results do not depend on the budget.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_EXPERT_STORE_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_EXPERT_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cpu/cpu_options.h"
#include "backends/cpu/engines.h"
#include "backends/cpu/ffn_forms.h"
#include "format/model.h"
#include "kernels/kernels.h"
#include "moe/expert_pool.h"
#include "moe/residency.h"

namespace fflite {

// One routed expert: its file form (FileFfn, always there: biases converted once) and its
// packed form while resident.
struct ExpertSlot : FileFfn {
  size_t layer = 0, expert = 0;
  std::unique_ptr<PackedFfn> ffn;  // while the packed form is resident
  bool all_quantized = false;      // always runs on the file's weights (never packed)
  // Streamed experts: the model's view of the expert, and `view` points at `streamed` (the
  // expert in pool slot `pool_slot`) while its file form is resident, at the model's otherwise.
  const FfnView* model_view = nullptr;
  FfnView streamed;
  ExpertPool::Plan plan;
  size_t pool_slot = 0;
  uint64_t file_bytes = 0;  // the expert's bytes in the file
  // Read ahead and not used since: for the call that needs it (a miss already counted), or on a
  // guess (a prefetch: a hit when used, wasted when dropped unused).
  enum class Ahead : uint8_t { kNone, kCall, kGuess } ahead = Ahead::kNone;
  uint64_t epoch = 0;       // the call (or guess) that last needed it: ExpertStore::NewEpoch
};

// One form of one expert on the residency list: entry 2·slot + form.
enum ExpertForm : size_t { kPackedForm = 0, kFileForm = 1 };

class ExpertStore {
 public:
  ExpertStore(const Model& model, const Kernels& kernels) : model_(model), kernels_(kernels) {}

  // Adds MoE layer `layer`'s routed experts; returns the slot of its expert 0 (its experts are
  // consecutive slots). Errors: ResourceExhausted past 2^30 experts.
  absl::StatusOr<size_t> AddLayer(size_t layer, const MoeView& moe);
  // After the layers: the forms' sizes with `choice` (the routed experts' packing) and the
  // budget in bytes (0: none) with its policy, and with a budget on a file-backed model the pool
  // of slots (as many as the budget holds, at least one), with its reader thread unless
  // `reader_thread` is false (experts are then read when they run). Errors: the pool's.
  absl::Status Init(const PackChoice& choice, uint64_t budget, ResidencyPolicy policy,
                    bool reader_thread = true);

  ExpertSlot& slot(size_t i) { return slots_[i]; }
  size_t size() const { return slots_.size(); }

  // Slot i's packed operators, packed on ctx's threads first if they are not resident (from its
  // streamed file form, or from the mapping, whose pages are then handed back unless its file
  // form is resident). Errors: the packing's, the read's.
  absl::StatusOr<PackedFfn*> Packed(size_t i, const EngineContext& ctx);
  // Makes slot i's file form resident for the direct kernel and the quantised engine: read into
  // a pool slot when streamed, else its file pages mapped in at once. Errors: Unavailable for a
  // failed read, naming the expert and the file offset; DataLoss for a quantised matrix whose
  // scales are not finite, naming it (nothing is then resident for it).
  absl::Status FileForm(size_t i);
  bool streamed() const { return pool_.slots() != 0; }

  // Read-ahead of streamed experts, overlapped with the computation. A new epoch starts what one
  // call (or one guess at the next layer's experts) needs: Protect marks an expert needed (its
  // resident forms the most recently used), Prefetch starts reading its file form on the pool's
  // reader thread where that drops no expert of the epoch (`guess`: for a guess, else for the
  // call), and returns false where it could not (then later ones would not fit either).
  // FileForm waits for a read started here. A no-op without streaming.
  void NewEpoch() { ++epoch_; }
  void Protect(size_t i);
  // The epoch is done with expert i: read-ahead may drop it.
  void Release(size_t i) { slots_[i].epoch = 0; }
  bool Prefetch(size_t i, bool guess);

  // The bytes of slot i's form as the budget counts them.
  uint64_t FormBytes(size_t i, ExpertForm form) const { return residency_.bytes(2 * i + form); }
  // A batch ran on slot i's form: its bytes count as read (BackendStats::routed_expert_bytes;
  // the file form's are the file's bytes, not its slot's).
  void CountRead(size_t i, ExpertForm form) {
    read_bytes_ += form == kFileForm ? slots_[i].file_bytes : FormBytes(i, form);
  }
  uint64_t read_bytes() const { return read_bytes_; }
  uint64_t resident_bytes() const { return residency_.resident_bytes(); }
  uint64_t budget() const { return residency_.budget(); }
  // Forms found resident when a batch needed them, and not (made for it: packed, mapped or read,
  // or read ahead for its call).
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  // Experts read ahead on a guess and then used; read ahead on a guess and dropped unused.
  uint64_t prefetches_used() const { return prefetches_used_; }
  uint64_t prefetches_wasted() const { return prefetches_wasted_; }
  const ExpertPool& pool() const { return pool_; }

 private:
  // Drops a form the residency list let go of.
  void Evict(size_t entry);
  // Makes room for `entry` (also a free pool slot for a streamed file form), keeping `keep`.
  void MakeRoom(size_t entry, int64_t keep = -1);
  std::string Name(const ExpertSlot& s) const;
  // Model::CheckScales of s's quantised matrices on the bytes its view reads.
  absl::Status CheckScales(const ExpertSlot& s) const;
  // Points s's view at pool slot `slot`.
  void Point(ExpertSlot& s, size_t slot);

  const Model& model_;
  const Kernels& kernels_;
  PackChoice choice_;
  std::vector<ExpertSlot> slots_;  // every MoE layer's routed experts
  ExpertResidency residency_;      // [2 · slots] forms: packed, file; LRU over the resident
  ExpertPool pool_;                // streamed file forms (no slots: none streamed)
  uint64_t read_bytes_ = 0;
  uint64_t hits_ = 0, misses_ = 0;
  uint64_t prefetches_used_ = 0, prefetches_wasted_ = 0;
  uint64_t epoch_ = 1;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_EXPERT_STORE_H_
