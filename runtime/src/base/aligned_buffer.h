// A heap buffer of floats with 64-byte alignment and optional tail slack (for SIMD kernels that
// read past the end), allocated once and never resized in a hot path; large zeroed ones are
// anonymous mappings, resident only where touched.
#ifndef FFLITE_RUNTIME_SRC_BASE_ALIGNED_BUFFER_H_
#define FFLITE_RUNTIME_SRC_BASE_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace fflite {

template <typename T>
class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kLazyBytes = size_t{256} << 10;

  AlignedBuffer() = default;
  // Storage for `count` elements plus `tail_bytes` of readable slack, zero-initialised unless
  // `zero` is false (for a buffer the caller writes whole). Returns false on allocation failure
  // or a size past the address space (leaves the buffer empty).
  // `huge`: a buffer of at least 2 MiB is aligned to 2 MiB and offered to the kernel's transparent
  // huge pages (Linux MADV_HUGEPAGE; where THP is "madvise", the default on Debian): a 180 MB
  // packed matrix then faults in 90 pages instead of 46000 (0.47 -> 0.02-0.3 s measured on a Zen 5
  // VM, where each fault is a trip to the hypervisor), and a walk over it misses the TLB less.
  // A zeroed buffer of kLazyBytes or more (not huge) is mapped anonymously on Linux: its pages are
  // zero when first touched and resident only from then on, so a session's scratch sized for
  // max_tokens costs memory only as far as its calls use it (a decode of one token touches a
  // few rows of each region; a memset would have made all of it resident at creation).
  bool Allocate(size_t count, size_t tail_bytes = 0, bool zero = true, bool huge = false) {
    Free();
    if (count > (~size_t{0} - tail_bytes - kHugePage) / sizeof(T)) return false;
    size_t align = kAlignment;
    if (huge && count * sizeof(T) + tail_bytes >= kHugePage) align = kHugePage;
    const size_t bytes = (count * sizeof(T) + tail_bytes + align - 1) / align * align;
#if defined(__linux__)
    if (zero && align == kAlignment && bytes >= kLazyBytes) {
      void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) return false;
      data_ = static_cast<T*>(m);
      size_ = count;
      mapped_bytes_ = bytes;
      return true;
    }
#endif
    void* p = std::aligned_alloc(align, bytes == 0 ? kAlignment : bytes);
    if (p == nullptr) return false;
#if defined(MADV_HUGEPAGE)
    if (align == kHugePage) madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
    if (zero) std::memset(p, 0, bytes == 0 ? kAlignment : bytes);
    data_ = static_cast<T*>(p);
    size_ = count;
    return true;
  }
  ~AlignedBuffer() { Free(); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(o.data_), size_(o.size_), mapped_bytes_(o.mapped_bytes_) {
    o.data_ = nullptr;
    o.size_ = 0;
    o.mapped_bytes_ = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      Free();
      data_ = o.data_;
      size_ = o.size_;
      mapped_bytes_ = o.mapped_bytes_;
      o.data_ = nullptr;
      o.size_ = 0;
      o.mapped_bytes_ = 0;
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Free() {
#if defined(__linux__)
    if (mapped_bytes_ != 0) {
      munmap(data_, mapped_bytes_);
    } else {
      std::free(data_);
    }
#else
    std::free(data_);
#endif
    data_ = nullptr;
    size_ = 0;
    mapped_bytes_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_bytes_ = 0;  // nonzero: data_ is an anonymous mapping of this many bytes
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BASE_ALIGNED_BUFFER_H_
