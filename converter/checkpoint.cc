// Checkpoint folders (single file or sharded) and the lazy sources that copy tensors out of them.
#include "converter/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/json_util.h"

namespace fflite {
namespace converter {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string Join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

absl::Status CheckBytes(const TensorRef& ref, uint64_t want, uint64_t got) {
  if (want == got) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("%s: the writer asked for %d bytes, the tensor has %d",
                                             ref.Describe(), got, want));
}

}  // namespace

std::string TensorRef::Describe() const {
  return absl::StrFormat("'%s': tensor '%s'", file->path(), tensor->name);
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->dir_ = dir;
  FFLITE_ASSIGN_OR_RETURN(c->config_, HfConfig::Load(Join(dir, "config.json")));
  const std::string index_path = Join(dir, kIndexFileName);
  const std::string single_path = Join(dir, kSingleFileName);
  if (FileExists(index_path)) {
    c->sharded_ = true;
    FFLITE_ASSIGN_OR_RETURN(nlohmann::json index, ReadJsonFile(index_path, kMaxIndexBytes));
    auto bad = [&](const std::string& msg) {
      return absl::DataLossError(absl::StrFormat("'%s': %s", index_path, msg));
    };
    if (!index.is_object()) return bad("not a JSON object");
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) return bad("missing or non-object \"weight_map\"");
    std::map<std::string, const SafetensorsFile*> by_name;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) {
        return bad(absl::StrFormat("weight_map['%s']: %s is not a file name", it.key(),
                                   JsonSnippet(it.value())));
      }
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
          shard.find('\0') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "'%s': weight_map['%s']: shard \"%s\" must be a plain file name in the checkpoint "
            "folder", index_path, it.key(), shard));
      }
      auto found = by_name.find(shard);
      if (found == by_name.end()) {
        FFLITE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(Join(dir, shard)));
        c->files_.push_back(file);
        found = by_name.emplace(shard, file.get()).first;
      }
      c->where_[it.key()] = found->second;
    }
    if (c->files_.empty()) return bad("\"weight_map\" is empty");
  } else if (FileExists(single_path)) {
    FFLITE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single_path));
    c->files_.push_back(file);
    for (const auto& entry : file->tensors()) c->where_[entry.first] = file.get();
  } else {
    return absl::NotFoundError(absl::StrFormat(
        "'%s': no weights: expected %s or %s (sharded) next to config.json", dir, kSingleFileName,
        kIndexFileName));
  }
  FFLITE_RETURN_IF_ERROR(c->UnwrapTextModel());
  return c;
}

absl::Status Checkpoint::UnwrapTextModel() {
  const nlohmann::json& root = config_.json();
  const auto type = root.find("model_type");
  if (type == root.end() || !type->is_string() || type->get<std::string>() != "gemma3") {
    return absl::OkStatus();
  }
  const auto text = root.find("text_config");
  if (text == root.end() || !text->is_object()) {
    return config_.Error("text_config",
                         "is missing or not an object (a gemma3 vision-language config holds its "
                         "text model's config there)");
  }
  for (const char* prefix : {"language_model.model.", "model.language_model."}) {
    if (HasPrefix(prefix)) {
      text_prefix_ = prefix;
      break;
    }
  }
  if (text_prefix_.empty()) {
    return absl::NotFoundError(absl::StrFormat(
        "'%s': a gemma3 (vision-language) checkpoint without its language model's tensors: no "
        "name starts with language_model.model. or model.language_model.", dir_));
  }
  nlohmann::json text_config = *text;
  if (!text_config.contains("model_type")) text_config["model_type"] = "gemma3_text";
  wrapper_ = "gemma3";
  config_ = HfConfig(std::move(text_config), config_.path() + " (text_config)");
  return absl::OkStatus();
}

std::string Checkpoint::Stored(const std::string& name) const {
  if (!text_prefix_.empty() && name.compare(0, 6, "model.") == 0) {
    return text_prefix_ + name.substr(6);
  }
  return name;
}

bool Checkpoint::Has(const std::string& name) const { return where_.count(Stored(name)) != 0; }

bool Checkpoint::HasPrefix(const std::string& name_prefix) const {
  const std::string prefix = Stored(name_prefix);
  auto it = where_.lower_bound(prefix);
  return it != where_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

absl::StatusOr<TensorRef> Checkpoint::Find(const std::string& wanted) const {
  const std::string name = Stored(wanted);
  auto it = where_.find(name);
  if (it == where_.end()) {
    return absl::NotFoundError(absl::StrFormat(
        "'%s': missing tensor '%s' (looked in %s)", dir_, name,
        sharded_ ? absl::StrFormat("the weight_map of %s", kIndexFileName)
                 : std::string(kSingleFileName)));
  }
  for (const auto& file : files_) {
    if (file.get() != it->second) continue;
    const SafetensorsTensor* t = file->Find(name);
    if (t == nullptr) {
      return absl::DataLossError(absl::StrFormat(
          "'%s': missing tensor '%s', which %s places in this file", file->path(), name,
          kIndexFileName));
    }
    return TensorRef{file, t};
  }
  return absl::InternalError("tensor file not owned by the checkpoint");
}

TensorSource SourceAsIs(const TensorRef& ref, DType dtype, std::vector<uint64_t> shape) {
  TensorSource s;
  s.dtype = dtype;
  s.shape = std::move(shape);
  s.fill = [ref](uint8_t* dst, uint64_t bytes) -> absl::Status {
    const SafetensorsTensor& t = *ref.tensor;
    const uint64_t size = t.end - t.begin;
    FFLITE_RETURN_IF_ERROR(CheckBytes(ref, size, bytes));
    std::memcpy(dst, ref.file->Data(t), size);
    ref.file->Release(t, 0, size);
    return absl::OkStatus();
  };
  return s;
}

TensorSource SourceTransposed(const TensorRef& ref, DType dtype) {
  const uint64_t rows = ref.tensor->shape.at(0), cols = ref.tensor->shape.at(1);
  TensorSource s;
  s.dtype = dtype;
  s.shape = {cols, rows};
  s.fill = [ref, rows, cols](uint8_t* dst, uint64_t bytes) -> absl::Status {
    const SafetensorsTensor& t = *ref.tensor;
    const uint64_t size = t.end - t.begin;
    FFLITE_RETURN_IF_ERROR(CheckBytes(ref, size, bytes));
    const size_t e = t.element_size;
    const uint8_t* src = ref.file->Data(t);
    // dst[c][r] = src[r][c], in 64x64 tiles so that both sides stay in cache.
    constexpr uint64_t kTile = 64;
    for (uint64_t r0 = 0; r0 < rows; r0 += kTile) {
      const uint64_t r1 = std::min(rows, r0 + kTile);
      for (uint64_t c0 = 0; c0 < cols; c0 += kTile) {
        const uint64_t c1 = std::min(cols, c0 + kTile);
        for (uint64_t r = r0; r < r1; ++r) {
          for (uint64_t c = c0; c < c1; ++c) {
            std::memcpy(dst + (c * rows + r) * e, src + (r * cols + c) * e, e);
          }
        }
      }
    }
    ref.file->Release(t, 0, size);
    return absl::OkStatus();
  };
  return s;
}

TensorSource SourceRows(const TensorRef& ref, DType dtype, uint64_t row_begin, uint64_t rows) {
  const uint64_t cols = ref.tensor->shape.at(1);
  TensorSource s;
  s.dtype = dtype;
  s.shape = {rows, cols};
  s.fill = [ref, row_begin, rows, cols](uint8_t* dst, uint64_t bytes) -> absl::Status {
    const SafetensorsTensor& t = *ref.tensor;
    const uint64_t row_bytes = cols * t.element_size;
    const uint64_t begin = row_begin * row_bytes, size = rows * row_bytes;
    FFLITE_RETURN_IF_ERROR(CheckBytes(ref, size, bytes));
    if (begin + size > t.end - t.begin) {
      return absl::InternalError(absl::StrFormat("%s: rows out of range", ref.Describe()));
    }
    std::memcpy(dst, ref.file->Data(t) + begin, size);
    ref.file->Release(t, begin, begin + size);
    return absl::OkStatus();
  };
  return s;
}

}  // namespace converter
}  // namespace fflite
