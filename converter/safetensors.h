// Reader of Hugging Face safetensors files: the file is mapped, and its JSON header is checked
// against the file's real size (lengths, dtypes, shapes, byte ranges, overlaps) before any use.
#ifndef FFLITE_CONVERTER_SAFETENSORS_H_
#define FFLITE_CONVERTER_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "format/model.h"

namespace fflite {

class MappedFile;

namespace converter {

// The largest header accepted (the Rust safetensors crate uses the same 100 MB cap).
inline constexpr uint64_t kMaxSafetensorsHeader = 100u * 1000u * 1000u;

// One tensor entry of a validated header. Offsets are relative to the data buffer that follows
// the header; end - begin == product(shape) * element_size.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // the file's name for it: "F32", "BF16", "I8", ...
  size_t element_size = 0;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Thread safety: immutable after Open.
class SafetensorsFile {
 public:
  // Maps `path` and validates its header. Errors: NotFound / PermissionDenied / Unavailable for
  // I/O; DataLoss for a malformed file, with a message that names the file, the tensor, the value
  // and the limit (truncated file, header length, bad JSON, unknown dtype, shape vs byte range,
  // out-of-range or overlapping data, a __metadata__ that is not a string-to-string map).
  static absl::StatusOr<std::shared_ptr<const SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // The tensor called `name`, or nullptr.
  const SafetensorsTensor* Find(const std::string& name) const;
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's bytes (valid while this object lives).
  const uint8_t* Data(const SafetensorsTensor& t) const;
  // Hands the mapped pages wholly inside bytes [begin, end) of the tensor's data back to the
  // kernel once they have been copied (they are read again from the file if touched later).
  void Release(const SafetensorsTensor& t, uint64_t begin, uint64_t end) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::map<std::string, SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The fflite dtype of a safetensors dtype name: F32, F16 and BF16 only. Errors: Unimplemented for
// every other dtype, naming it (`what` names the file and tensor).
absl::StatusOr<DType> ConvertibleDType(const std::string& safetensors_dtype, const std::string& what);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_SAFETENSORS_H_
