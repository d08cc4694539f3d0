// Safetensors validation: every length and offset in the header is checked against the mapped
// file before a byte of tensor data is trusted.
#include "converter/safetensors.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/mapped_file.h"
#include "base/status_macros.h"
#include "converter/json_util.h"

namespace fflite {
namespace converter {
namespace {

// Element sizes of every dtype the safetensors format defines; a name outside this list makes the
// file malformed. Only F32/F16/BF16 are convertible, the others are validated and skipped.
size_t SafetensorsElementSize(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"F64", 8},  {"I64", 8}, {"U64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<DType> ConvertibleDType(const std::string& dtype, const std::string& what) {
  if (dtype == "F32") return DType::F32;
  if (dtype == "F16") return DType::F16;
  if (dtype == "BF16") return DType::BF16;
  return absl::UnimplementedError(absl::StrFormat(
      "%s: dtype %s is not supported (the converter reads F32, F16 and BF16)", what, dtype));
}

SafetensorsFile::~SafetensorsFile() = default;

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const uint8_t* SafetensorsFile::Data(const SafetensorsTensor& t) const {
  return file_->data() + data_start_ + t.begin;
}

void SafetensorsFile::Release(const SafetensorsTensor& t, uint64_t begin, uint64_t end) const {
  if (begin >= end || end > t.end - t.begin) return;
  file_->Release(static_cast<size_t>(data_start_ + t.begin + begin),
                 static_cast<size_t>(end - begin));
}

absl::StatusOr<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  FFLITE_ASSIGN_OR_RETURN(f->file_, MappedFile::Open(path));
  const uint64_t file_size = f->file_->size();
  auto bad = [&](const std::string& msg) {
    return absl::DataLossError(absl::StrFormat("'%s': %s", path, msg));
  };
  if (file_size < 8) {
    return bad(absl::StrFormat("truncated: %d bytes, but a safetensors file starts with an 8-byte "
                               "header length", file_size));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | f->file_->data()[i];  // LE
  if (header_len > kMaxSafetensorsHeader) {
    return bad(absl::StrFormat("header length %d exceeds the limit of %d bytes", header_len,
                               kMaxSafetensorsHeader));
  }
  if (header_len > file_size - 8) {
    return bad(absl::StrFormat("truncated: header length %d exceeds the %d bytes after the 8-byte "
                               "length", header_len, file_size - 8));
  }
  if (header_len < 2) {
    return bad(absl::StrFormat("header length %d is too short for a JSON object", header_len));
  }
  f->data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - f->data_start_;
  const std::string_view text(reinterpret_cast<const char*>(f->file_->data() + 8),
                              static_cast<size_t>(header_len));
  FFLITE_ASSIGN_OR_RETURN(nlohmann::json header, ParseJson(text, absl::StrFormat("'%s' header",
                                                                                 path)));
  if (!header.is_object()) return bad("header: not a JSON object");

  std::vector<const SafetensorsTensor*> by_offset;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad("__metadata__: not a JSON object (string to string map)");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return bad(absl::StrFormat("__metadata__['%s']: value %s is not a string", m.key(),
                                     JsonSnippet(m.value())));
        }
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrFormat("tensor '%s'", name);
    if (!v.is_object()) return bad(absl::StrFormat("%s: entry is not a JSON object", where));
    auto dtype_it = v.find("dtype");
    auto shape_it = v.find("shape");
    auto offsets_it = v.find("data_offsets");
    if (dtype_it == v.end() || !dtype_it->is_string()) {
      return bad(absl::StrFormat("%s: missing or non-string \"dtype\"", where));
    }
    if (shape_it == v.end() || !shape_it->is_array()) {
      return bad(absl::StrFormat("%s: missing or non-array \"shape\"", where));
    }
    if (offsets_it == v.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
      return bad(absl::StrFormat("%s: \"data_offsets\" must be two non-negative integers, got %s",
                                 where, offsets_it == v.end() ? "nothing"
                                                              : JsonSnippet(*offsets_it)));
    }
    SafetensorsTensor t;
    t.name = name;
    t.dtype = dtype_it->get<std::string>();
    t.element_size = SafetensorsElementSize(t.dtype);
    if (t.element_size == 0) {
      return bad(absl::StrFormat("%s: unknown dtype \"%s\"", where, t.dtype));
    }
    uint64_t bytes = t.element_size;
    bool overflow = false;
    for (const nlohmann::json& d : *shape_it) {
      if (!d.is_number_unsigned()) {
        return bad(absl::StrFormat("%s: shape %s has an entry that is not a non-negative integer",
                                   where, JsonSnippet(*shape_it)));
      }
      const uint64_t dim = d.get<uint64_t>();
      t.shape.push_back(dim);
      overflow = overflow || __builtin_mul_overflow(bytes, dim, &bytes);
    }
    if (t.shape.size() > 8) {
      return bad(absl::StrFormat("%s: rank %d exceeds 8", where, t.shape.size()));
    }
    t.begin = (*offsets_it)[0].get<uint64_t>();
    t.end = (*offsets_it)[1].get<uint64_t>();
    if (t.begin > t.end) {
      return bad(absl::StrFormat("%s: data_offsets [%d, %d) end before they begin", where, t.begin,
                                 t.end));
    }
    if (t.end > data_size) {
      return bad(absl::StrFormat("%s: data_offsets [%d, %d) exceed the data buffer of %d bytes "
                                 "(truncated file?)", where, t.begin, t.end, data_size));
    }
    if (overflow || bytes != t.end - t.begin) {
      return bad(absl::StrFormat("%s: shape %s of %s needs %s bytes, data_offsets [%d, %d) hold %d",
                                 where, ShapeString(t.shape), t.dtype,
                                 overflow ? "more than 2^64" : absl::StrCat(bytes), t.begin, t.end,
                                 t.end - t.begin));
    }
    auto [pos, inserted] = f->tensors_.emplace(name, std::move(t));
    if (!inserted) return bad(absl::StrFormat("%s: listed twice", where));
    if (pos->second.end > pos->second.begin) by_offset.push_back(&pos->second);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
              return a->begin < b->begin;
            });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsTensor& a = *by_offset[i - 1];
    const SafetensorsTensor& b = *by_offset[i];
    if (b.begin < a.end) {
      return bad(absl::StrFormat("tensor '%s': bytes [%d, %d) overlap tensor '%s' [%d, %d)", b.name,
                                 b.begin, b.end, a.name, a.begin, a.end));
    }
  }
  return std::shared_ptr<const SafetensorsFile>(std::move(f));
}

}  // namespace converter
}  // namespace fflite
