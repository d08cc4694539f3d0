// GuardedBuffer: test memory whose end touches an inaccessible page (where mmap exists), so that a
// kernel reading or writing one byte past it crashes the test instead of passing by chance.
#ifndef FFLITE_TESTS_TESTING_GUARDED_BUFFER_H_
#define FFLITE_TESTS_TESTING_GUARDED_BUFFER_H_

#if __has_include(<sys/mman.h>)
#include <sys/mman.h>
#include <unistd.h>
#define FFLITE_TEST_HAS_MMAN 1
#endif

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace fflite {
namespace testing {

// `bytes` bytes ending exactly at a PROT_NONE page; the start is only element-aligned (64-byte
// alignment is not assumed). Without mmap, a plain buffer (only sentinels check writes there).
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t bytes) {
#if defined(FFLITE_TEST_HAS_MMAN)
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t pages = (bytes + page - 1) / page;
    size_ = (pages + 1) * page;
    void* base = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      ADD_FAILURE() << "mmap of " << size_ << " bytes failed";
      size_ = 0;
    } else {
      base_ = static_cast<uint8_t*>(base);
      if (mprotect(base_ + pages * page, page, PROT_NONE) != 0) ADD_FAILURE() << "mprotect failed";
      data_ = base_ + pages * page - bytes;
      return;
    }
#endif
    fallback_.resize(bytes + 64);
    data_ = fallback_.data();
  }
  ~GuardedBuffer() {
#if defined(FFLITE_TEST_HAS_MMAN)
    if (base_ != nullptr) munmap(base_, size_);
#endif
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  template <typename T>
  T* As() {
    return reinterpret_cast<T*>(data_);
  }

 private:
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint8_t* data_ = nullptr;
  std::vector<uint8_t> fallback_;
};

}  // namespace testing
}  // namespace fflite

#endif  // FFLITE_TESTS_TESTING_GUARDED_BUFFER_H_
