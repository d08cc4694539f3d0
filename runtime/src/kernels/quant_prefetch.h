// Software prefetch for the quantised kernels' passes that read panels from memory
// (kernels/quant_types.h): QuantPassPrefetcher for P panels read side by side, block by block
// (qgemv's one-token pass; qgemm's single tile of a few tokens, and each panel's first tile on
// AVX2); QuantOrderPrefetcher for panels read one after the other (qgemv's token groups, x86).
#ifndef FFLITE_RUNTIME_SRC_KERNELS_QUANT_PREFETCH_H_
#define FFLITE_RUNTIME_SRC_KERNELS_QUANT_PREFETCH_H_

#include <cstddef>
#include <cstdint>

#include "kernels/quant_types.h"

namespace fflite {

// A panel is read as two streams: its scales (32 bytes a block, at the panel's start) and its
// blocks (block_panel_bytes a block, after the scales). Each stream is prefetched a fixed number
// of blocks ahead of the block being read, so both run ahead by the same time. (A single linear
// stream over the panel's bytes, as these kernels had, started its data prefetch inside the
// scales: with k = 11008 the scales are 11 KB, and the prefetch only overtook the reading after
// 60% of the pass; the down projection read at 17-21 GB/s where the gate read at 29.)
// Blocks past a panel's last are the next pass's panel at the same position, so the next pass
// starts with its first blocks in flight. Nothing at or past `end` (the caller's panels; the
// lines after them belong to another thread's rows) is prefetched.
class QuantPassPrefetcher {
 public:
  // w: the caller's first panel, `bytes` long; the pass covers up to `pass_panels` panels;
  // ahead_bytes: how far ahead each data stream runs.
  QuantPassPrefetcher(const uint8_t* w, uint64_t bytes, const QuantGeometry& g,
                      size_t pass_panels, uint64_t ahead_bytes)
      : end_(reinterpret_cast<uintptr_t>(w) + bytes),
        panel_bytes_(g.panel_bytes),
        block_bytes_(g.block_panel_bytes),
        scale_bytes_(g.scale_bytes),
        k_blocks_(g.k_blocks),
        pass_panels_(pass_panels) {
    ahead_ = block_bytes_ != 0 ? ahead_bytes / block_bytes_ : 1;
    if (ahead_ < 1) ahead_ = 1;
    if (ahead_ > k_blocks_) ahead_ = k_blocks_;
  }

  // Starts a pass of `panels` panels at `first`; `initial`: also prefetch their first blocks (no
  // earlier pass did).
  void StartPass(const uint8_t* first, size_t panels, bool initial) {
    first_ = reinterpret_cast<uintptr_t>(first);
    panels_ = panels;
    block_ = 0;
    if (initial) {
      for (uint64_t b = 0; b < ahead_; ++b) {
        for (size_t j = 0; j < panels_; ++j) Block(first_ + j * panel_bytes_, b);
      }
    }
  }

  // Before block `block_` of the pass is read: prefetches the block `ahead` blocks on.
  void Step() {
    uint64_t b = block_++ + ahead_;
    uintptr_t base = first_;
    if (b >= k_blocks_) {
      b -= k_blocks_;
      base += pass_panels_ * panel_bytes_;
    }
    for (size_t j = 0; j < panels_; ++j) Block(base + j * panel_bytes_, b);
  }

 private:
  void Block(uintptr_t panel, uint64_t b) {
    const uintptr_t data = panel + scale_bytes_ + b * block_bytes_;
    if (data >= end_) return;
    for (uint64_t o = 0; o < block_bytes_; o += 64) Line(data + o);
    if (b % 2 == 0) Line(panel + b * 2 * kQuantPanelRows);  // scales of blocks b and b + 1
  }
  static void Line(uintptr_t a) { __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 3); }

  uintptr_t end_;
  uint64_t panel_bytes_, block_bytes_, scale_bytes_, k_blocks_;
  size_t pass_panels_;
  uint64_t ahead_ = 1;
  uintptr_t first_ = 0;
  size_t panels_ = 0;
  uint64_t block_ = 0;
};

// Prefetches a caller's panels in address order, kAheadBytes ahead of the reading, spread evenly
// over every step (one block of one token group) of a panel: each panel's steps prefetch the
// panel_bytes that lie kAheadBytes past its start. A panel read in order is two runs, its blocks
// and (a line every second block) its scales, and each panel's blocks start a page past the last
// panel's: the hardware prefetchers follow that poorly (on Zen 5, AVX-512, without this prefetch
// one token read at 40-48% of a read loop's bandwidth, with it 60-68%, before the one-token
// passes; prefetching only the next panel's scales and first blocks, or bursting each panel's
// scales at its start, left it at 45-57%). Addresses are integers: nothing at or past the
// caller's panels is prefetched (those lines belong to another thread's rows).
class QuantOrderPrefetcher {
 public:
  // 8, 16 and 32 KiB measured alike; 4 KiB lost 10-15%.
  static constexpr uintptr_t kAheadBytes = 16384;

  QuantOrderPrefetcher(const uint8_t* w, uint64_t bytes)
      : next_(reinterpret_cast<uintptr_t>(w)), end_(next_ + bytes) {
    Prefetch(next_ + kAheadBytes);  // the first kAheadBytes: no panel's steps cover them
  }
  // A panel of panel_bytes starting at `panel`, read in `steps` steps.
  void StartPanel(const uint8_t* panel, uint64_t panel_bytes, uint64_t steps) {
    base_ = reinterpret_cast<uintptr_t>(panel) + kAheadBytes;
    step_q16_ = steps > 0 ? (panel_bytes << 16) / steps : 0;
    done_ = 0;
  }
  void Step() {
    ++done_;
    Prefetch(base_ + ((done_ * step_q16_) >> 16));
  }

 private:
  void Prefetch(uintptr_t target) {
    if (target > end_) target = end_;
    for (; next_ < target; next_ += 64) {
      __builtin_prefetch(reinterpret_cast<const void*>(next_), 0, 3);
    }
  }

  uintptr_t next_, end_;
  uintptr_t base_ = 0;
  uint64_t step_q16_ = 0, done_ = 0;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_QUANT_PREFETCH_H_
