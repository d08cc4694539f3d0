// Routed experts streamed from the model file into a pool of slots: the memory of an expert
// budget, reserved once when the session is created and committed as slots fill. A miss reads the
// expert's bytes with explicit reads (what the page cache holds is copied from it, the rest is
// read past it with O_DIRECT where the file system allows), never through the mapping, so no page
// of a streamed expert is faulted in, and a file truncated after loading fails the call with an
// I/O error instead of raising SIGBUS. The slot keeps the file's bytes as they are (every tensor
// at its file offset's place modulo 4 KiB, so with the file's alignment): kernels run on it
// exactly as on the mapped file, with the same bits. Backend-neutral: a backend decides which
// experts are resident (moe/residency.h) and what runs on them.
#ifndef FFLITE_RUNTIME_SRC_MOE_EXPERT_POOL_H_
#define FFLITE_RUNTIME_SRC_MOE_EXPERT_POOL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "format/model.h"

namespace fflite {

class ExpertPool {
 public:
  // Where one expert's bytes go in a slot: its tensors' file ranges, widened to 4 KiB pages and
  // merged where they are close, each run read at once (one run when the converter laid the
  // expert out contiguously).
  struct Plan {
    struct Run {
      uint64_t file_offset = 0, bytes = 0, slot_offset = 0;
    };
    std::array<Run, 6> runs;
    size_t num_runs = 0;
    uint64_t bytes = 0;  // the slot bytes it needs (a multiple of 4 KiB)
  };
  // The plan of FFN f of a file-backed model.
  static Plan PlanExpert(const Model& model, const FfnView& f);

  struct Counters {
    uint64_t fills = 0;           // experts read into a slot
    uint64_t buffered_bytes = 0;  // read through the page cache (what it held, or everything
                                  // where direct reads are not possible)
    uint64_t direct_bytes = 0;    // read past it (O_DIRECT)
    double wait_seconds = 0.0;    // the caller waited for reads: its own, and Wait()'s
  };

  ExpertPool() = default;
  ~ExpertPool();  // waits for the read in progress, if any
  ExpertPool(const ExpertPool&) = delete;
  ExpertPool& operator=(const ExpertPool&) = delete;

  // Reserves `slots` slots of `slot_bytes` (a multiple of 4 KiB) each, their pages committed as
  // they are first written, and starts the reader thread unless `reader_thread` is false (a
  // session on the caller's threads: then Start refuses, and experts are read with Fill when they
  // run). Errors: ResourceExhausted naming the bytes, or the thread.
  absl::Status Init(size_t slots, uint64_t slot_bytes, bool reader_thread = true);
  size_t slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  bool has_free() const { return !free_.empty(); }
  // A free slot (has_free() must hold); Release gives it back (after Wait, if it was Started).
  size_t Acquire();
  void Release(size_t slot);

  // Makes `view` f with its tensors in `slot` (where Fill or Start puts them).
  static void PointInto(const Model& model, const FfnView& f, const Plan& plan, uint8_t* slot,
                        FfnView* view);
  uint8_t* slot_data(size_t slot) const { return base_ + slot * slot_bytes_; }

  // Reads f's bytes per `plan` into `slot` now, on the calling thread. Errors: Unavailable
  // naming the file offset and the cause (the slot's contents are then undefined).
  absl::Status Fill(const Model& model, const Plan& plan, size_t slot);
  // The same on the pool's reader thread: returns at once; Wait(slot)
  // returns the read's status once it is done, reading it on the calling thread itself if the
  // reader has not taken it yet (so the caller never idles while its read waits in the queue).
  // `plan` and the model must stay until then.
  // Errors: FailedPrecondition without a reader thread (Init did not succeed; nothing queued).
  absl::Status Start(const Model& model, const Plan& plan, size_t slot);
  absl::Status Wait(size_t slot);
  // Whether slot's Start has not been waited for.
  bool started(size_t slot) const { return state_[slot].started; }

  // The counters so far (the reader thread adds to them).
  Counters counters() const;

 private:
  enum class Phase { kQueued, kReading, kDone };
  struct SlotState {
    bool started = false;  // Start()ed, not yet Wait()ed (the caller's side)
    Phase phase = Phase::kDone;  // under mutex_
    absl::Status status;
    const Model* model = nullptr;
    const Plan* plan = nullptr;
  };
  absl::Status Read(const Model& model, const Plan& plan, size_t slot, uint64_t* buffered,
                    uint64_t* direct) const;
  void ReaderLoop();
  // A read of `slot` is over (under mutex_).
  void Finish(size_t slot, absl::Status status, uint64_t buffered, uint64_t direct);

  uint8_t* base_ = nullptr;  // slots() · slot_bytes_ bytes, 4 KiB-aligned
  size_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
  std::vector<size_t> free_;  // free slots (capacity: every slot, so nothing is allocated later)
  std::vector<SlotState> state_;

  // The reader thread and its queue of started slots (a ring of slots() entries: a slot is
  // queued at most once).
  mutable std::mutex mutex_;
  std::condition_variable work_, finished_;
  std::vector<size_t> queue_;
  size_t queue_head_ = 0, queue_size_ = 0;
  bool stop_ = false;
  std::thread reader_;
  Counters counters_;  // under mutex_
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_MOE_EXPERT_POOL_H_
