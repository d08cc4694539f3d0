// libFuzzer target: the GGUF reader and the whole GGUF conversion over whatever it accepts. The
// input is a GGUF file; an odd-sized input is converted with --dtype f16 (every quantised type
// read as its values), an even-sized one natively (Q8_0 / Q4_0 kept as I8 / I4).
// Invariants: no crash, no sanitizer report, no leak; an accepted file's tensors lie inside it,
// after the header, aligned, without overlap, each of the bytes its type and shape give;
// a conversion either fails with a status from the converter's own checks and leaves nothing in
// the output folder, or writes one model that loads and runs on the reference backend; memory
// bounded by a fixed multiple of the input size (every count and length is checked against the
// file before anything is allocated for it).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "converter/convert.h"
#include "converter/gguf.h"
#include "fuzz_util.h"

namespace {

using namespace fflite;
using fuzz::Fail;

volatile uint64_t g_checksum = 0;

void CheckTensors(const converter::GgufFile& f, const uint8_t* bytes, size_t size) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t sum = 0;
  for (const converter::GgufTensor& t : f.tensors()) {
    if (f.Find(t.name) != &t) Fail("tensor '" + t.name + "' is not found by its name");
    if (t.ne.empty() || t.ne.size() > 4) Fail("tensor '" + t.name + "': bad rank");
    uint64_t n = 1;
    for (uint64_t d : t.ne) {
      if (d == 0 || __builtin_mul_overflow(n, d, &n)) Fail("tensor '" + t.name + "': bad dims");
    }
    if (n != t.numel) Fail("tensor '" + t.name + "': numel differs from its dims");
    if (t.offset % f.alignment() != 0) Fail("tensor '" + t.name + "': unaligned");
    if (t.type == nullptr) continue;
    if (t.bytes != n / t.type->block_elems * t.type->block_bytes) {
      Fail("tensor '" + t.name + "': bytes differ from its type and shape");
    }
    if (t.offset > size || t.bytes > size - t.offset) Fail("tensor '" + t.name + "': past the end");
    if (f.Data(t) != bytes + t.offset) Fail("tensor '" + t.name + "': Data() is not its bytes");
    for (uint64_t i = 0; i < t.bytes; i += 97) sum += f.Data(t)[i];
    if (t.bytes > 0) ranges.push_back({t.offset, t.offset + t.bytes});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) Fail("accepted tensors overlap");
  }
  g_checksum = sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = fuzz::ScratchDir();
  static const std::string out_dir = [] {
    fuzz::MakeDir(root + "/out");
    return root + "/out";
  }();
  // A copy of exactly the input so that ASan catches reads past its end.
  const std::vector<uint8_t> bytes(data, data + size);
  auto file = converter::GgufFile::FromBuffer(bytes.data(), bytes.size(), "input.gguf");
  if (!file.ok()) return 0;
  CheckTensors(**file, bytes.data(), bytes.size());

  const std::string path = root + "/model.gguf";
  fuzz::WriteBytes(path, bytes.data(), bytes.size());
  converter::ConvertOptions options;
  if (size % 2 == 1) options.dtype = DType::F16;
  const std::string out = out_dir + "/model.fflite";
  fuzz::CheckConversion(converter::ConvertCheckpoint(path, out, options).status(), out_dir, out);
  return 0;
}
