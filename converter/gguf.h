// Reader of GGUF files (llama.cpp's model format, versions 2 and 3, little-endian): the file is
// mapped and every length, count, type, dimension, offset and alignment in its header is checked
// against the file's real size before a byte of tensor data is trusted.
//
// Layout (the GGUF specification, ggml's docs/gguf.md): "GGUF", u32 version, u64 tensor count,
// u64 key-value count; the key-values (u64-length string key, u32 value type, value; arrays are
// u32 element type, u64 count, elements); the tensor infos (string name, u32 dimension count,
// u64 dimensions ne[0] (innermost) .. ne[n-1], u32 ggml type, u64 offset into the data section);
// padding to general.alignment (default 32); the data section. A 2-D weight with
// ne = [in, out] is row-major [out][in], the layout of a Hugging Face nn.Linear weight.
#ifndef FFLITE_CONVERTER_GGUF_H_
#define FFLITE_CONVERTER_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "converter/config.h"
#include "converter/gguf_types.h"

namespace fflite {

class MappedFile;

namespace converter {

// Limits on what a header may declare (far above any real model: llama-3-405B has 1,138
// tensors; the largest vocabularies are about 260k strings).
inline constexpr uint64_t kMaxGgufTensors = uint64_t{1} << 20;
inline constexpr uint64_t kMaxGgufKeyValues = uint64_t{1} << 16;
inline constexpr uint64_t kMaxGgufKeyBytes = 65535;           // the specification's limit
inline constexpr uint64_t kMaxGgufStringBytes = uint64_t{1} << 26;
inline constexpr uint64_t kMaxGgufArrayElements = uint64_t{1} << 26;
inline constexpr uint32_t kMaxGgufArrayDepth = 4;             // arrays of arrays of ...
inline constexpr uint32_t kMaxGgufDims = 4;                   // GGML_MAX_DIMS
inline constexpr uint32_t kDefaultGgufAlignment = 32;
// Arrays longer than this (vocabularies, merges) are checked but not kept in metadata().
inline constexpr uint64_t kMaxKeptGgufArray = 4096;

struct GgufTensor {
  std::string name;
  uint32_t type_id = 0;
  const GgmlTypeInfo* type = nullptr;  // nullptr: an id this reader does not know
  std::vector<uint64_t> ne;            // ne[0] innermost, as stored
  uint64_t numel = 0;
  uint64_t offset = 0;  // in the file (the data section's start plus the stored offset)
  uint64_t bytes = 0;   // 0 when the type is unknown
  // The shape outermost first ([ne[n-1], ..., ne[0]]), as fflite and Hugging Face write it.
  std::vector<uint64_t> Shape() const { return std::vector<uint64_t>(ne.rbegin(), ne.rend()); }
  std::string TypeName() const;
};

// Thread safety: immutable after Open.
class GgufFile {
 public:
  // Maps `path` and validates its header. Errors: NotFound / PermissionDenied / Unavailable for
  // I/O; DataLoss for a malformed file, with a message that names the file, the key or tensor,
  // the value and the limit; Unimplemented for version 1 and for big-endian files.
  static absl::StatusOr<std::shared_ptr<const GgufFile>> Open(const std::string& path);
  // The same over bytes the caller keeps alive while the result lives (tests, the fuzzer);
  // `name` stands for the path in messages.
  static absl::StatusOr<std::shared_ptr<const GgufFile>> FromBuffer(const uint8_t* data,
                                                                    size_t size,
                                                                    const std::string& name);
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // The key-values as a JSON object with typed accessors (numbers, booleans, strings and arrays
  // of up to kMaxKeptGgufArray elements; longer arrays are absent). Errors name the file and key.
  const HfConfig& metadata() const { return metadata_; }
  // The ggml value type each key was stored with (GGUF_TYPE_*), for every key.
  const std::map<std::string, uint32_t>& key_types() const { return key_types_; }
  // The tensor called `name`, or nullptr.
  const GgufTensor* Find(const std::string& name) const;
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // The tensor's bytes (valid while this object lives); its type must be known.
  const uint8_t* Data(const GgufTensor& t) const { return data_ + t.offset; }
  // Hands the mapped pages wholly inside bytes [begin, end) of the tensor back to the kernel once
  // they have been copied (no-op for a buffer).
  void Release(const GgufTensor& t, uint64_t begin, uint64_t end) const;

 private:
  GgufFile() = default;
  absl::Status Parse();
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultGgufAlignment;
  HfConfig metadata_;
  std::map<std::string, uint32_t> key_types_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
};

// True when the file at `path` starts with the GGUF magic (false for folders and short files).
bool LooksLikeGguf(const std::string& path);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_GGUF_H_
