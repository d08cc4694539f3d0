// Where a CPU backend's parallel loops run: fflite's own pthreadpool, or the parallel-for of the
// caller's thread pool (fflite_session_options.parallel_for), behind one interface, so that no
// engine knows which.
#ifndef FFLITE_RUNTIME_SRC_BASE_WORKERS_H_
#define FFLITE_RUNTIME_SRC_BASE_WORKERS_H_

#include <pthreadpool.h>

#include <cstddef>
#include <cstdint>

#include "base/tsan.h"

namespace fflite {

class Workers {
 public:
  using Task = void (*)(void* context, size_t i);
  using TileTask = void (*)(void* context, size_t start, size_t count);

  virtual ~Workers() = default;
  // How many threads the loops are split for (>= 2: a single thread has no Workers).
  virtual size_t threads() const = 0;
  // task(context, i) for every i in [0, range), each once, on the workers (the calling thread
  // among them); returns when all have returned. `flags`: PTHREADPOOL_FLAG_YIELD_WORKERS lets
  // fflite's own workers sleep afterwards instead of spinning for the next loop.
  virtual void For(Task task, void* context, size_t range, uint32_t flags) = 0;
  // task(context, start, count) over [0, range) in tiles of `tile` (the last one shorter).
  void ForTiles(TileTask task, void* context, size_t range, size_t tile, uint32_t flags) {
    Tiles t{task, context, range, tile};
    FFLITE_TSAN_RELEASE(&t);  // pthreadpool's hand-off is invisible to ThreadSanitizer
    For(&Tiles::Run, &t, (range + tile - 1) / tile, flags);
  }
  // Puts fflite's own workers to sleep (after a Run whose last loop left them spinning).
  virtual void Yield() {}

 private:
  struct Tiles {
    TileTask task;
    void* context;
    size_t range, tile;
    static void Run(void* p, size_t i) {
      FFLITE_TSAN_ACQUIRE(p);
      const Tiles& t = *static_cast<const Tiles*>(p);
      const size_t start = i * t.tile;
      t.task(t.context, start, t.range - start < t.tile ? t.range - start : t.tile);
    }
  };
};

// fflite's own pool of `threads` (the calling thread and threads - 1 workers). With
// `sleep_between`, the workers sleep after every loop (the wait policy FFLITE_WAIT_SLEEP: for
// machines whose cores other work shares); else they spin between the loops of a Run and sleep
// after its last (FFLITE_WAIT_SPIN, the default).
class PoolWorkers final : public Workers {
 public:
  PoolWorkers(pthreadpool_t pool, bool sleep_between) : pool_(pool), sleep_(sleep_between) {}
  ~PoolWorkers() override { pthreadpool_destroy(pool_); }
  size_t threads() const override { return pthreadpool_get_threads_count(pool_); }
  void For(Task task, void* context, size_t range, uint32_t flags) override {
    pthreadpool_parallelize_1d(pool_, task, context, range,
                               sleep_ ? flags | PTHREADPOOL_FLAG_YIELD_WORKERS : flags);
  }
  void Yield() override {
    pthreadpool_parallelize_1d(pool_, [](void*, size_t) {}, nullptr, threads(),
                               PTHREADPOOL_FLAG_YIELD_WORKERS);
  }

 private:
  pthreadpool_t pool_;
  bool sleep_;
};

// The caller's parallel-for (the C API's fflite_parallel_for_fn and its context), planned for
// `threads` of its threads.
class CallerWorkers final : public Workers {
 public:
  using ParallelFor = void (*)(void* pool_context, Task task, void* task_context, size_t n);
  CallerWorkers(ParallelFor parallel_for, void* pool_context, size_t threads)
      : parallel_for_(parallel_for), context_(pool_context), threads_(threads) {}
  size_t threads() const override { return threads_; }
  void For(Task task, void* context, size_t range, uint32_t /*flags*/) override {
    if (range == 1) {
      task(context, 0);  // no hand-off for a single item
      return;
    }
    parallel_for_(context_, task, context, range);
  }

 private:
  ParallelFor parallel_for_;
  void* context_;
  size_t threads_;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BASE_WORKERS_H_
