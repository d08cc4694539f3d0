// A read-only memory mapping of a whole file, released on destruction. Pages of a range can be
// handed back to the kernel (MADV_DONTNEED) once their contents have been copied elsewhere, and
// ranges can be read with explicit reads instead (the expert slots of moe/expert_pool.h): a read
// returns an error where a truncated file would make the mapping raise SIGBUS.
#ifndef FFLITE_RUNTIME_SRC_BASE_MAPPED_FILE_H_
#define FFLITE_RUNTIME_SRC_BASE_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fflite {

class MappedFile {
 public:
  // Maps `path` read-only. Errors: NotFound / PermissionDenied / Unavailable (I/O), DataLoss for
  // an empty file.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Opens the file a second time for direct reads (O_DIRECT, past the page cache), for ReadAt.
  // Where the file system refuses (tmpfs) or the platform has none, reads stay buffered.
  void EnableDirectReads(const std::string& path);
  bool direct_reads() const { return direct_fd_ >= 0; }

  // How ReadAt got the bytes: through the page cache (buffered), or past it (direct).
  struct ReadCounts {
    uint64_t buffered = 0, direct = 0;
  };
  // Reads [offset, offset + size) of the file into `dst`, as the file is now (a file replaced
  // after loading is still the one loaded; a truncated one fails). What the page cache holds is
  // copied from it; the rest is read directly when `dst`, `offset` and `size` are multiples of
  // kDirectAlignment and direct reads are enabled, else buffered. Thread-safe. Errors:
  // Unavailable naming the offset (an I/O error, or a short read: the file was truncated).
  absl::Status ReadAt(uint64_t offset, size_t size, void* dst, ReadCounts* counts) const;
  static constexpr size_t kDirectAlignment = 4096;

  // Tells the kernel the pages wholly inside [offset, offset + size) are not needed now; they are
  // read again from the file if touched later. Best effort: failures are ignored.
  void Release(size_t offset, size_t size) const;
  // Maps the pages of [offset, offset + size) in now, in one call (MADV_POPULATE_READ, Linux
  // 5.14+; older kernels get MADV_WILLNEED read-ahead), instead of one page fault per 16 pages
  // when they are first read. Best effort: failures are ignored.
  void Populate(size_t offset, size_t size) const;

 private:
  MappedFile(const uint8_t* data, size_t size, int fd) : data_(data), size_(size), fd_(fd) {}
  const uint8_t* data_;
  size_t size_;
  int fd_;              // the file as opened (kept for ReadAt)
  int direct_fd_ = -1;  // opened with O_DIRECT, or -1
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BASE_MAPPED_FILE_H_
