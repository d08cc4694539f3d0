// GGUF validation: a cursor that refuses to read past the end, limits on every count before
// anything is allocated for it, and the tensor table checked against the data section.
#include "converter/gguf.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace fflite {
namespace converter {
namespace {

// GGUF value types (gguf_type).
enum : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8,
  kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

const char* ValueTypeName(uint32_t t) {
  static const char* const kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  return t <= kF64 ? kNames[t] : "unknown";
}

// Bytes of a scalar value type; 0 for string and array.
uint64_t ScalarBytes(uint32_t t) {
  switch (t) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

// Reads little-endian values from [pos, end); every read is checked.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  bool Has(uint64_t n) const { return n <= left(); }
  template <typename T>
  bool Read(T* v) {
    if (!Has(sizeof(T))) return false;
    std::memcpy(v, data_ + pos_, sizeof(T));  // little-endian host (checked by the loader)
    pos_ += sizeof(T);
    return true;
  }
  const uint8_t* Take(uint64_t n) {
    if (!Has(n)) return nullptr;
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// A string that may hold any byte: printable ASCII as is, the rest escaped, at most 64 shown.
std::string Printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 32 && c < 127 && c != '"' && c != '\\') ? std::string(1, static_cast<char>(c))
                                                          : absl::StrFormat("\\x%02x", c);
  }
  if (s.size() > 64) out += "...";
  return out;
}

class Parser {
 public:
  Parser(const std::string& path, const uint8_t* data, uint64_t size)
      : path_(path), c_(data, size), size_(size) {}

  absl::Status Bad(const std::string& msg) const {
    return absl::DataLossError(absl::StrFormat("'%s': %s", path_, msg));
  }
  absl::Status Truncated(const std::string& what) const {
    return Bad(absl::StrFormat("truncated at byte %d of %d while reading %s", c_.pos(), size_,
                               what));
  }

  absl::StatusOr<std::string> String(const std::string& what, uint64_t limit) {
    uint64_t n = 0;
    if (!c_.Read(&n)) return Truncated(what + "'s length");
    if (n > limit) {
      return Bad(absl::StrFormat("%s: length %d exceeds the limit of %d bytes", what, n, limit));
    }
    const uint8_t* p = c_.Take(n);
    if (p == nullptr) {
      return Bad(absl::StrFormat("%s: length %d runs past the end of the file (%d bytes left)",
                                 what, n, c_.left()));
    }
    return std::string(reinterpret_cast<const char*>(p), n);
  }

  // One value of `type`; `keep` false: checked and skipped (long arrays).
  absl::StatusOr<nlohmann::json> Value(const std::string& key, uint32_t type, uint32_t depth,
                                       bool keep) {
    auto read = [&](auto v) -> absl::StatusOr<nlohmann::json> {
      if (!c_.Read(&v)) return Truncated(absl::StrFormat("the value of key \"%s\"", key));
      if (!keep) return nlohmann::json();
      return nlohmann::json(v);
    };
    switch (type) {
      case kU8: return read(uint8_t{});
      case kI8: return read(int8_t{});
      case kU16: return read(uint16_t{});
      case kI16: return read(int16_t{});
      case kU32: return read(uint32_t{});
      case kI32: return read(int32_t{});
      case kU64: return read(uint64_t{});
      case kI64: return read(int64_t{});
      case kF32: return read(float{});
      case kF64: return read(double{});
      case kBool: {
        uint8_t b = 0;
        if (!c_.Read(&b)) return Truncated(absl::StrFormat("the value of key \"%s\"", key));
        if (b > 1) {
          return Bad(absl::StrFormat("key \"%s\": bool value %d is neither 0 nor 1", key, b));
        }
        return keep ? nlohmann::json(b == 1) : nlohmann::json();
      }
      case kString: {
        FFLITE_ASSIGN_OR_RETURN(
            std::string s,
            String(absl::StrFormat("the string value of key \"%s\"", key), kMaxGgufStringBytes));
        return keep ? nlohmann::json(std::move(s)) : nlohmann::json();
      }
      case kArray: {
        if (depth >= kMaxGgufArrayDepth) {
          return Bad(absl::StrFormat("key \"%s\": arrays nested deeper than %d", key,
                                     kMaxGgufArrayDepth));
        }
        uint32_t elem = 0;
        uint64_t n = 0;
        if (!c_.Read(&elem) || !c_.Read(&n)) {
          return Truncated(absl::StrFormat("the array header of key \"%s\"", key));
        }
        if (elem > kF64) {
          return Bad(absl::StrFormat("key \"%s\": array element type %d is not a GGUF value type "
                                     "(0..12)", key, elem));
        }
        // Every element takes at least a byte (a string its 8-byte length): a count the rest of
        // the file cannot hold is refused before the loop.
        const uint64_t min_bytes = elem == kString || elem == kArray ? 8 : ScalarBytes(elem);
        if (n > kMaxGgufArrayElements || n > c_.left() / min_bytes) {
          return Bad(absl::StrFormat("key \"%s\": array of %d %s elements does not fit in the "
                                     "%d bytes left (limit %d elements)", key, n,
                                     ValueTypeName(elem), c_.left(), kMaxGgufArrayElements));
        }
        const bool keep_elems = keep && n <= kMaxKeptGgufArray;
        nlohmann::json out = nlohmann::json::array();
        if (ScalarBytes(elem) != 0 && !keep_elems && elem != kBool) {
          c_.Take(n * ScalarBytes(elem));  // fits: checked above
          return nlohmann::json();
        }
        for (uint64_t i = 0; i < n; ++i) {
          FFLITE_ASSIGN_OR_RETURN(nlohmann::json v, Value(key, elem, depth + 1, keep_elems));
          if (keep_elems) out.push_back(std::move(v));
        }
        return keep_elems ? out : nlohmann::json();
      }
      default:
        return Bad(absl::StrFormat("key \"%s\": value type %d is not a GGUF value type (0..12)",
                                   key, type));
    }
  }

  absl::Status Run(uint32_t* version, uint32_t* alignment, nlohmann::json* meta,
                   std::map<std::string, uint32_t>* key_types, std::vector<GgufTensor>* tensors) {
    uint8_t magic[4];
    if (!c_.Read(&magic)) return Truncated("the magic");
    if (std::memcmp(magic, "GGUF", 4) != 0) {
      return Bad(absl::StrFormat("not a GGUF file: it starts with %02x %02x %02x %02x, not "
                                 "\"GGUF\"", magic[0], magic[1], magic[2], magic[3]));
    }
    if (!c_.Read(version)) return Truncated("the version");
    if (*version == 0x02000000u || *version == 0x03000000u) {
      return absl::UnimplementedError(absl::StrFormat(
          "'%s': a big-endian GGUF file; fflite reads little-endian GGUF only", path_));
    }
    if (*version == 1) {
      return absl::UnimplementedError(absl::StrFormat(
          "'%s': GGUF version 1 (32-bit counts, 2023) is not supported; convert it to version 3 "
          "with llama.cpp's tools", path_));
    }
    if (*version != 2 && *version != 3) {
      return Bad(absl::StrFormat("GGUF version %d is not 2 or 3", *version));
    }
    uint64_t n_tensors = 0, n_kv = 0;
    if (!c_.Read(&n_tensors) || !c_.Read(&n_kv)) return Truncated("the counts");
    if (n_tensors > kMaxGgufTensors) {
      return Bad(absl::StrFormat("tensor count %d exceeds the limit of %d", n_tensors,
                                 kMaxGgufTensors));
    }
    if (n_kv > kMaxGgufKeyValues) {
      return Bad(absl::StrFormat("key-value count %d exceeds the limit of %d", n_kv,
                                 kMaxGgufKeyValues));
    }
    *meta = nlohmann::json::object();
    for (uint64_t i = 0; i < n_kv; ++i) {
      FFLITE_ASSIGN_OR_RETURN(std::string key,
                              String(absl::StrFormat("key %d", i), kMaxGgufKeyBytes));
      if (key.empty()) return Bad(absl::StrFormat("key %d is empty", i));
      uint32_t type = 0;
      if (!c_.Read(&type)) {
        return Truncated(absl::StrFormat("the value type of key \"%s\"", Printable(key)));
      }
      if (key_types->count(key) != 0) {
        return Bad(absl::StrFormat("key \"%s\" appears twice", Printable(key)));
      }
      FFLITE_ASSIGN_OR_RETURN(nlohmann::json v, Value(Printable(key), type, 0, true));
      (*key_types)[key] = type;
      if (!v.is_null()) (*meta)[key] = std::move(v);
    }
    if (key_types->count("general.alignment") != 0) {
      const auto it = meta->find("general.alignment");
      const uint32_t type = key_types->at("general.alignment");
      const uint64_t a = type == kU32 && it != meta->end() ? it->get<uint64_t>() : 0;
      if (type != kU32 || a == 0 || (a & (a - 1)) != 0 || a > (uint64_t{1} << 30)) {
        return Bad(absl::StrFormat("general.alignment must be a u32 power of two up to 2^30, "
                                   "got a %s%s", ValueTypeName(type),
                                   type == kU32 ? absl::StrCat(" of ", a) : ""));
      }
      *alignment = static_cast<uint32_t>(a);
    }
    tensors->reserve(static_cast<size_t>(std::min<uint64_t>(n_tensors, c_.left() / 24 + 1)));
    std::map<std::string, size_t> names;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensor t;
      FFLITE_ASSIGN_OR_RETURN(t.name, String(absl::StrFormat("tensor %d's name", i),
                                             kMaxGgufKeyBytes));
      const std::string what = absl::StrFormat("tensor \"%s\"", Printable(t.name));
      if (!names.emplace(t.name, i).second) return Bad(what + " appears twice");
      uint32_t n_dims = 0;
      if (!c_.Read(&n_dims)) return Truncated(what + "'s dimension count");
      if (n_dims == 0 || n_dims > kMaxGgufDims) {
        return Bad(absl::StrFormat("%s: %d dimensions, not 1 to %d", what, n_dims, kMaxGgufDims));
      }
      t.numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t ne = 0;
        if (!c_.Read(&ne)) return Truncated(what + "'s dimensions");
        if (ne == 0 || ne > (uint64_t{1} << 40) || t.numel > (uint64_t{1} << 50) / ne) {
          return Bad(absl::StrFormat("%s: dimension %d is %d (each must be at least 1 and the "
                                     "element count at most 2^50)", what, d, ne));
        }
        t.ne.push_back(ne);
        t.numel *= ne;
      }
      uint64_t offset = 0;
      if (!c_.Read(&t.type_id) || !c_.Read(&offset)) return Truncated(what + "'s type and offset");
      t.type = FindGgmlType(t.type_id);
      if (t.type != nullptr) {
        if (t.ne[0] % t.type->block_elems != 0) {
          return Bad(absl::StrFormat("%s: row length ne[0] = %d is not a multiple of %s's block "
                                     "of %d", what, t.ne[0], t.type->name, t.type->block_elems));
        }
        t.bytes = t.numel / t.type->block_elems * t.type->block_bytes;
      }
      if (offset % *alignment != 0) {
        return Bad(absl::StrFormat("%s: offset %d is not a multiple of the alignment %d", what,
                                   offset, *alignment));
      }
      t.offset = offset;  // relative until the data section's start is known
      tensors->push_back(std::move(t));
    }
    const uint64_t data_start = (c_.pos() + *alignment - 1) / *alignment * *alignment;
    if (data_start > size_ && !tensors->empty()) {
      return Bad(absl::StrFormat("the data section would start at byte %d, past the end of the "
                                 "file (%d bytes)", data_start, size_));
    }
    const uint64_t data_size = data_start <= size_ ? size_ - data_start : 0;
    std::vector<std::pair<uint64_t, size_t>> order;
    for (size_t i = 0; i < tensors->size(); ++i) {
      GgufTensor& t = (*tensors)[i];
      if (t.offset > data_size || t.bytes > data_size - t.offset) {
        return Bad(absl::StrFormat(
            "tensor \"%s\" (%s, %d bytes at offset %d of the data section) runs past the end of "
            "the file: the data section holds %d bytes", Printable(t.name), t.TypeName(), t.bytes,
            t.offset, data_size));
      }
      t.offset += data_start;
      if (t.bytes > 0) order.push_back({t.offset, i});
    }
    std::sort(order.begin(), order.end());
    for (size_t k = 1; k < order.size(); ++k) {
      const GgufTensor& a = (*tensors)[order[k - 1].second];
      const GgufTensor& b = (*tensors)[order[k].second];
      if (a.offset + a.bytes > b.offset) {
        return Bad(absl::StrFormat("tensors \"%s\" and \"%s\" overlap in the data section",
                                   Printable(a.name), Printable(b.name)));
      }
    }
    return absl::OkStatus();
  }

 private:
  const std::string& path_;
  Cursor c_;
  uint64_t size_;
};

}  // namespace

std::string GgufTensor::TypeName() const {
  return type != nullptr ? std::string(type->name) : absl::StrCat("ggml type ", type_id);
}

GgufFile::~GgufFile() = default;

absl::Status GgufFile::Parse() {
  Parser p(path_, data_, size_);
  nlohmann::json meta;
  FFLITE_RETURN_IF_ERROR(p.Run(&version_, &alignment_, &meta, &key_types_, &tensors_));
  metadata_ = HfConfig(std::move(meta), path_ + " (GGUF metadata)");
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const GgufFile>> GgufFile::Open(const std::string& path) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  FFLITE_ASSIGN_OR_RETURN(f->file_, MappedFile::Open(path));
  f->data_ = f->file_->data();
  f->size_ = f->file_->size();
  FFLITE_RETURN_IF_ERROR(f->Parse());
  return std::shared_ptr<const GgufFile>(std::move(f));
}

absl::StatusOr<std::shared_ptr<const GgufFile>> GgufFile::FromBuffer(const uint8_t* data,
                                                                     size_t size,
                                                                     const std::string& name) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->data_ = data;
  f->size_ = size;
  FFLITE_RETURN_IF_ERROR(f->Parse());
  return std::shared_ptr<const GgufFile>(std::move(f));
}

const GgufTensor* GgufFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::Release(const GgufTensor& t, uint64_t begin, uint64_t end) const {
  if (file_ == nullptr || begin >= end || end > t.bytes) return;
  file_->Release(static_cast<size_t>(t.offset + begin), static_cast<size_t>(end - begin));
}

bool LooksLikeGguf(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[4] = {0, 0, 0, 0};
  const ssize_t n = ::read(fd, magic, 4);
  ::close(fd);
  return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace converter
}  // namespace fflite
