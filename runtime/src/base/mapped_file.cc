// Read-only whole-file mmap with error messages that name the file.
#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace fflite {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string msg = absl::StrFormat("%s: %s", what, std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case ENOMEM:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrFormat("cannot open '%s'", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrFormat("cannot stat '%s'", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrFormat("'%s' is not a regular file", path));
  }
  if (st.st_size == 0) {
    ::close(fd);
    return absl::DataLossError(absl::StrFormat("'%s' is empty", path));
  }
  if (static_cast<uint64_t>(st.st_size) > std::numeric_limits<size_t>::max()) {
    // A 32-bit process (armhf, armeabi-v7a) cannot map a file larger than its address space.
    ::close(fd);
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot map '%s': %d bytes exceed the %d-bit address space", path,
                        static_cast<int64_t>(st.st_size), sizeof(size_t) * 8));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED) return ErrnoStatus(err, absl::StrFormat("cannot map '%s'", path));
  return std::unique_ptr<MappedFile>(new MappedFile(static_cast<const uint8_t*>(p), size));
}

MappedFile::~MappedFile() { ::munmap(const_cast<uint8_t*>(data_), size_); }

namespace {

// The pages of the mapping at `data` (of `mapped` bytes) that [offset, offset + size) covers: only
// the whole ones (`whole`), or every one it touches. Empty when outside the mapping.
struct PageRange {
  void* first = nullptr;
  size_t bytes = 0;
};
PageRange Pages(const uint8_t* data, size_t mapped, size_t offset, size_t size, bool whole) {
  if (offset >= mapped) return {};
  if (size > mapped - offset) size = mapped - offset;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) + offset;
  const uintptr_t end = begin + size;
  const uintptr_t first = (whole ? begin + page - 1 : begin) / page * page;
  const uintptr_t last = (whole ? end : end + page - 1) / page * page;
  if (last <= first) return {};
  return {reinterpret_cast<void*>(first), last - first};
}

}  // namespace

void MappedFile::Release(size_t offset, size_t size) const {
  const PageRange r = Pages(data_, size_, offset, size, /*whole=*/true);
  if (r.bytes != 0) ::madvise(r.first, r.bytes, MADV_DONTNEED);
}

void MappedFile::Populate(size_t offset, size_t size) const {
  const PageRange r = Pages(data_, size_, offset, size, /*whole=*/false);
#if !defined(MADV_POPULATE_READ)
  constexpr int MADV_POPULATE_READ = 22;  // <linux/mman.h>, Linux 5.14; glibc 2.36 has it too
#endif
  if (r.bytes != 0 && ::madvise(r.first, r.bytes, MADV_POPULATE_READ) != 0) {
    ::madvise(r.first, r.bytes, MADV_WILLNEED);
  }
}

}  // namespace fflite
