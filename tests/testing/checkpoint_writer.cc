// Checkpoint files for converter tests, written with plain stdio and nlohmann-json: nothing here
// shares code with the converter's safetensors reader.
#include "testing/checkpoint_writer.h"

#include <dirent.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"
#include "base/half.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fflite {
namespace testing {
namespace {

size_t ElementSize(const std::string& dtype) { return dtype == "F32" ? 4 : 2; }

void AppendValue(const std::string& dtype, float v, std::string* out) {
  if (dtype == "F32") {
    char b[4];
    std::memcpy(b, &v, 4);
    out->append(b, 4);
    return;
  }
  const uint16_t h = dtype == "F16" ? F32ToF16(v) : F32ToBf16(v);
  out->push_back(static_cast<char>(h & 0xff));
  out->push_back(static_cast<char>(h >> 8));
}

uint64_t Numel(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

}  // namespace

float RoundToDType(const std::string& dtype, float v) {
  if (dtype == "F16") return F16ToF32(F32ToF16(v));
  if (dtype == "BF16") return Bf16ToF32(F32ToBf16(v));
  return v;
}

const std::vector<float>& CheckpointWriter::Add(const std::string& name,
                                                std::vector<uint64_t> shape,
                                                std::vector<float> values,
                                                const std::string& dtype) {
  Entry e;
  e.name = name;
  e.dtype = dtype.empty() ? default_dtype_ : dtype;
  e.element_size = ElementSize(e.dtype);
  e.shape = std::move(shape);
  EXPECT_EQ(values.size(), Numel(e.shape)) << name;
  for (float& v : values) v = RoundToDType(e.dtype, v);
  e.values = std::move(values);
  index_[name] = entries_.size();
  entries_.push_back(std::move(e));
  return entries_.back().values;
}

const std::vector<float>& CheckpointWriter::AddRandom(const std::string& name,
                                                      std::vector<uint64_t> shape, Rng& rng,
                                                      float scale, const std::string& dtype,
                                                      float center) {
  std::vector<float> v = rng.Vec(Numel(shape), scale);
  for (float& x : v) x += center;
  return Add(name, std::move(shape), std::move(v), dtype);
}

void CheckpointWriter::AddRaw(const std::string& name, const std::string& dtype,
                              size_t element_size, std::vector<uint64_t> shape,
                              std::vector<uint8_t> bytes) {
  Entry e;
  e.raw = std::move(bytes);
  e.name = name;
  e.dtype = dtype;
  e.element_size = element_size;
  e.shape = std::move(shape);
  index_[name] = entries_.size();
  entries_.push_back(std::move(e));
}

const std::vector<float>& CheckpointWriter::Get(const std::string& name) const {
  return entries_.at(index_.at(name)).values;
}

absl::Status CheckpointWriter::Write(const std::string& dir, const std::string& config_json,
                                     int shards) const {
  if (absl::Status st = WriteTextFile(dir + "/config.json", config_json); !st.ok()) return st;
  nlohmann::json weight_map = nlohmann::json::object();
  for (int s = 0; s < shards; ++s) {
    const std::string file = shards == 1 ? std::string("model.safetensors")
                                         : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1,
                                                           shards);
    nlohmann::json header = nlohmann::json::object();
    header["__metadata__"] = {{"format", "pt"}};
    std::string data;
    for (size_t i = static_cast<size_t>(s); i < entries_.size(); i += static_cast<size_t>(shards)) {
      const Entry& e = entries_[i];
      const uint64_t begin = data.size();
      if (!e.raw.empty()) {
        data.append(e.raw.begin(), e.raw.end());
      } else if (e.values.empty()) {
        data.append(Numel(e.shape) * e.element_size, '\0');
      } else {
        for (float v : e.values) AppendValue(e.dtype, v, &data);
      }
      header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape},
                        {"data_offsets", {begin, static_cast<uint64_t>(data.size())}}};
      weight_map[e.name] = file;
    }
    if (absl::Status st = WriteSafetensorsRaw(dir + "/" + file, header.dump(), data); !st.ok()) {
      return st;
    }
  }
  if (shards > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    return WriteTextFile(dir + "/model.safetensors.index.json", index.dump(1));
  }
  return absl::OkStatus();
}

absl::Status WriteSafetensorsRaw(const std::string& path, const std::string& header,
                                 const std::string& data, std::optional<uint64_t> declared_length) {
  const uint64_t n = declared_length.value_or(header.size());
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  bytes += header;
  bytes += data;
  return WriteTextFile(path, bytes);
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!f) return absl::UnavailableError("cannot create " + path);
  if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size()) {
    return absl::UnavailableError("cannot write " + path);
  }
  return absl::OkStatus();
}

absl::Status ReadFileBytes(const std::string& path, std::string* out) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) return absl::NotFoundError("cannot open " + path);
  out->clear();
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) out->append(buf, n);
  return absl::OkStatus();
}

std::string MakeTempDir() {
  std::string tmpl = ::testing::TempDir();
  if (tmpl.empty() || tmpl.back() != '/') tmpl += '/';
  tmpl += "fflite_conv_XXXXXX";
  char* p = ::mkdtemp(tmpl.data());
  EXPECT_NE(p, nullptr) << "mkdtemp " << tmpl;
  return tmpl;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace testing
}  // namespace fflite
