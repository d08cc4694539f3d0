// A read-only memory mapping of a whole file, released on destruction. Pages of a range can be
// handed back to the kernel (MADV_DONTNEED) once their contents have been copied elsewhere.
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

  // Tells the kernel the pages wholly inside [offset, offset + size) are not needed now; they are
  // read again from the file if touched later. Best effort: failures are ignored.
  void Release(size_t offset, size_t size) const;
  // Maps the pages of [offset, offset + size) in now, in one call (MADV_POPULATE_READ, Linux
  // 5.14+; older kernels get MADV_WILLNEED read-ahead), instead of one page fault per 16 pages
  // when they are first read. Best effort: failures are ignored.
  void Populate(size_t offset, size_t size) const;

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data_;
  size_t size_;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BASE_MAPPED_FILE_H_
