// libFuzzer target: the safetensors header parser and the sharded checkpoint index, and the whole
// conversion over whatever they accept. The first byte picks what the rest of the input is:
//   % 5 == 0  a safetensors file, opened alone; every tensor's bytes are compared with the input
//   % 5 == 1  model.safetensors.index.json next to a valid config.json and shards (Llama example)
//   % 5 == 2  the same for a Mixtral example
//   % 5 == 3  model.safetensors next to the Llama example's config.json
//   % 5 == 4  model.safetensors next to the Mixtral example's config.json
// and first_byte / 5 picks conversion options (output dtype, norms, d_ff alignment).
// Invariants: no crash, no sanitizer report, no leak; an opened file's tensors are exactly the
// input's bytes at the offsets the header gives; a conversion either fails with a status from the
// converter's own checks and leaves nothing in the output folder, or writes one model that loads and runs on the reference
// backend; memory bounded by a fixed multiple of the input size (every header length, shape and
// offset is checked against the file before use; the configs are fixed and tiny, the output is
// the input's tensors padded to at most 64x); time bounded (linear in the input up to a sort).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "converter/checkpoint.h"
#include "converter/convert.h"
#include "converter/example_checkpoint.h"
#include "converter/safetensors.h"
#include "fuzz_util.h"

namespace {

using namespace fflite;
using fuzz::Fail;

struct Fixture {
  std::string single;       // folder holding the lone safetensors file (mode 0)
  std::string sharded[2];   // Llama / Mixtral with 2 shards: the input replaces the index
  std::string with_config[2];  // Llama / Mixtral config.json only: the input is the weights
  std::string out;          // conversion outputs (emptied after each input)
};

const Fixture& GetFixture() {
  static const Fixture f = [] {
    const std::string& root = fuzz::ScratchDir();
    Fixture x;
    x.single = root + "/single";
    x.out = root + "/out";
    fuzz::MakeDir(x.single);
    fuzz::MakeDir(x.out);
    const char* archs[2] = {"llama", "mixtral"};
    for (int i = 0; i < 2; ++i) {
      x.sharded[i] = absl::StrCat(root, "/", archs[i], "_sharded");
      x.with_config[i] = absl::StrCat(root, "/", archs[i], "_config");
      absl::Status st = converter::MakeExampleCheckpoint(x.sharded[i], fuzz::TinyExample(archs[i], 2));
      if (st.ok()) st = converter::MakeExampleCheckpoint(x.with_config[i], fuzz::TinyExample(archs[i], 1));
      if (!st.ok()) Fail("example checkpoint: " + st.ToString());
      // The fuzz input becomes the weights of this one; its own are removed.
      std::filesystem::remove(x.with_config[i] + "/" + converter::kSingleFileName);
    }
    return x;
  }();
  return f;
}

// Where the checksum of every tensor's bytes goes, so that the reads are not optimised away.
volatile uint64_t g_checksum = 0;

uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Opens `bytes` as a lone safetensors file and checks every accepted tensor against the input.
void FuzzSafetensors(const Fixture& f, const uint8_t* bytes, size_t size) {
  const std::string path = f.single + "/model.safetensors";
  fuzz::WriteBytes(path, bytes, size);
  auto file = converter::SafetensorsFile::Open(path);
  if (!file.ok()) return;
  // Accepted: the header length fits, and each tensor's bytes are the input's bytes at
  // 8 + header length + data_offsets, with end - begin = product(shape) * element size.
  if (size < 8) Fail("a file under 8 bytes was accepted");
  const uint64_t data_start = 8 + LoadLe64(bytes);
  if (data_start > size) Fail("the header length exceeds the file and was accepted");
  uint64_t sum = 0;
  for (const auto& [name, t] : (*file)->tensors()) {
    if (name != t.name) Fail("tensor map key differs from the tensor's name");
    if (t.begin > t.end || t.end > size - data_start) Fail("tensor '" + name + "': bad range");
    uint64_t want = t.element_size;
    for (uint64_t d : t.shape) {
      if (__builtin_mul_overflow(want, d, &want)) Fail("tensor '" + name + "': size overflows");
    }
    if (want != t.end - t.begin) Fail("tensor '" + name + "': shape and byte range disagree");
    const uint8_t* p = (*file)->Data(t);
    if (t.end > t.begin && std::memcmp(p, bytes + data_start + t.begin, t.end - t.begin) != 0) {
      Fail("tensor '" + name + "': Data() differs from the file's bytes");
    }
    for (uint64_t i = 0; i < t.end - t.begin; ++i) sum += p[i];
    (void)converter::ConvertibleDType(t.dtype, name);
    (*file)->Release(t, 0, t.end - t.begin);
  }
  g_checksum = sum;
}

// Converts `dir` with options from `option_bits`; checks the invariants of the output folder.
void FuzzConvert(const Fixture& f, const std::string& dir, uint32_t option_bits) {
  converter::ConvertOptions options;
  switch (option_bits % 4) {
    case 1: options.dtype = DType::F32; break;
    case 2: options.dtype = DType::F16; break;
    case 3: options.dtype = DType::BF16; break;
    default: break;
  }
  options.include_norm = (option_bits / 4) % 2 == 0;
  options.d_ff_alignment = (option_bits / 8) % 2 == 0 ? 1 : 64;
  const std::string out = f.out + "/model.fflite";
  fuzz::CheckConversion(converter::ConvertCheckpoint(dir, out, options).status(), f.out, out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = GetFixture();
  if (size == 0) return 0;
  const uint32_t mode = data[0] % 5, option_bits = data[0] / 5;
  // A copy of exactly the rest so that ASan catches reads past its end.
  const std::vector<uint8_t> rest(data + 1, data + size);
  switch (mode) {
    case 0:
      FuzzSafetensors(f, rest.data(), rest.size());
      break;
    case 1:
    case 2: {
      const std::string& dir = f.sharded[mode - 1];
      fuzz::WriteBytes(dir + "/" + converter::kIndexFileName, rest.data(), rest.size());
      if (!converter::Checkpoint::Open(dir).ok()) return 0;
      FuzzConvert(f, dir, option_bits);
      break;
    }
    default: {
      const std::string& dir = f.with_config[mode - 3];
      fuzz::WriteBytes(dir + "/" + converter::kSingleFileName, rest.data(), rest.size());
      FuzzConvert(f, dir, option_bits);
      break;
    }
  }
  return 0;
}
