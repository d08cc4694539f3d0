// Read-only whole-file mmap with error messages that name the file.
#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

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
  if (p == MAP_FAILED) {
    ::close(fd);
    return ErrnoStatus(err, absl::StrFormat("cannot map '%s'", path));
  }
  return std::unique_ptr<MappedFile>(new MappedFile(static_cast<const uint8_t*>(p), size, fd));
}

MappedFile::~MappedFile() {
  ::munmap(const_cast<uint8_t*>(data_), size_);
  ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
}

void MappedFile::EnableDirectReads(const std::string& path) {
#if defined(O_DIRECT)
  if (direct_fd_ >= 0) return;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) return;
  // The same file as the mapping's (not one that replaced it since).
  struct stat a, b;
  if (::fstat(fd, &a) != 0 || ::fstat(fd_, &b) != 0 || a.st_dev != b.st_dev ||
      a.st_ino != b.st_ino) {
    ::close(fd);
    return;
  }
  direct_fd_ = fd;
#else
  (void)path;
#endif
}

namespace {

// pread until `size` bytes or the end of the file; -1 (errno set) on an error.
ssize_t ReadFully(int fd, uint64_t offset, size_t size, uint8_t* dst) {
  size_t done = 0;
  while (done < size) {
    const ssize_t r = ::pread(fd, dst + done, size - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

absl::Status MappedFile::ReadAt(uint64_t offset, size_t size, void* dst,
                                ReadCounts* counts) const {
  uint8_t* out = static_cast<uint8_t*>(dst);
  if (offset > size_ || size > size_ - offset) {
    return absl::OutOfRangeError(absl::StrFormat(
        "reading %d bytes at file offset %d: past the %d bytes mapped", size, offset, size_));
  }
  ReadCounts ignored;
  if (counts == nullptr) counts = &ignored;
  const bool aligned = offset % kDirectAlignment == 0 && size % kDirectAlignment == 0 &&
                       reinterpret_cast<uintptr_t>(dst) % kDirectAlignment == 0;
  // Reads [at, at + n) of the file into out + (at - offset), directly or buffered.
  auto read = [&](uint64_t at, size_t n, bool direct) -> absl::Status {
    uint8_t* to = out + (at - offset);
    ssize_t r = -1;
    if (direct) {
      r = ReadFully(direct_fd_, at, n, to);
      if (r >= 0) counts->direct += static_cast<uint64_t>(r);
      // EINVAL: the file system takes no direct reads after all: buffered.
      if (r < 0 && errno == EINVAL) direct = false;
    }
    if (!direct) {
      r = ReadFully(fd_, at, n, to);
      if (r >= 0) counts->buffered += static_cast<uint64_t>(r);
    }
    if (r < 0) {
      return absl::UnavailableError(absl::StrFormat("reading %d bytes at file offset %d: %s", n,
                                                    at, std::strerror(errno)));
    }
    if (static_cast<size_t>(r) < n) {
      return absl::UnavailableError(absl::StrFormat(
          "reading %d bytes at file offset %d: the file ends %d bytes in (truncated after "
          "loading?)",
          n, at, r));
    }
    return absl::OkStatus();
  };
  if (direct_fd_ < 0 || !aligned) return read(offset, size, /*direct=*/false);
  // What the page cache holds is copied from it (a buffered read); the rest is read past it, so
  // that streaming experts neither waits for the kernel's read-ahead nor fills the cache with
  // them. mincore over the mapping says which pages the cache holds (a process that may not
  // write the file is told only about the pages it maps, none here: then everything is read
  // directly), in pieces of up to kPiece pages, each run of pages in one state read at once.
  constexpr size_t kPiece = 256;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(data_);
  size_t pos = 0;
  while (pos < size) {
    const uintptr_t start = base + offset + pos, first = start / page * page;
    const size_t piece = std::min<size_t>(size - pos, kPiece * page - (start - first));
    unsigned char vec[kPiece + 1];
    const size_t pages = (start - first + piece + page - 1) / page;
    const bool known = ::mincore(reinterpret_cast<void*>(first), pages * page, vec) == 0;
    size_t b = pos;
    while (b < pos + piece) {
      const size_t index = (base + offset + b - first) / page;
      const bool cached = known && (vec[index] & 1) != 0;
      size_t e = b;
      for (size_t i = index; i < pages && (known && (vec[i] & 1) != 0) == cached; ++i) {
        e = first + (i + 1) * page - base - offset;
      }
      e = std::min(std::max(e, b + 1), pos + piece);
      FFLITE_RETURN_IF_ERROR(read(offset + b, e - b, /*direct=*/!cached));
      b = e;
    }
    pos += piece;
  }
  return absl::OkStatus();
}

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
