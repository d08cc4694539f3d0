// A Hugging Face checkpoint folder: config.json plus model.safetensors, or the shards listed in
// model.safetensors.index.json. Tensors are found by name and read lazily, straight from the maps.
#ifndef FFLITE_CONVERTER_CHECKPOINT_H_
#define FFLITE_CONVERTER_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "converter/config.h"
#include "converter/safetensors.h"
#include "format/writer.h"

namespace fflite {
namespace converter {

inline constexpr char kIndexFileName[] = "model.safetensors.index.json";
inline constexpr char kSingleFileName[] = "model.safetensors";
inline constexpr size_t kMaxIndexBytes = 64u << 20;

// A tensor found in a checkpoint: the file that holds it (kept alive) and its validated entry.
struct TensorRef {
  std::shared_ptr<const SafetensorsFile> file;
  const SafetensorsTensor* tensor = nullptr;
  // "'dir/model.safetensors': tensor 'name'" for messages.
  std::string Describe() const;
};

// Thread safety: immutable after Open.
class Checkpoint {
 public:
  // Opens `dir`: reads config.json, then the index (if present) or model.safetensors, validating
  // every shard's header. Errors: NotFound for a missing config.json or weights file (the message
  // lists what was looked for), DataLoss for malformed files, InvalidArgument for an index that
  // names files outside `dir`.
  //
  // A vision-language checkpoint around a text model (model_type "gemma3": Gemma 3's 4B-27B
  // checkpoints) opens as its text model: config() is the config's "text_config" (its
  // model_type "gemma3_text" when it names none), and the text model's tensors, stored under
  // "language_model.model." (transformers before 4.52) or "model.language_model." (since), are
  // found under "model." as a text-only checkpoint names them; the vision tower is not read.
  // Errors: InvalidArgument for a gemma3 config without a "text_config" object, NotFound when
  // no tensor has either prefix.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const HfConfig& config() const { return config_; }
  // The wrapper's model_type where the checkpoint was opened as its text model, else "".
  const std::string& wrapper() const { return wrapper_; }
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }
  bool sharded() const { return sharded_; }

  bool Has(const std::string& name) const;
  // True when any tensor name starts with `prefix`.
  bool HasPrefix(const std::string& prefix) const;
  // Finds `name`. Errors: NotFound naming the tensor and where it was looked for; DataLoss when
  // the index names a shard that lacks it.
  absl::StatusOr<TensorRef> Find(const std::string& name) const;

 private:
  Checkpoint() = default;
  absl::Status UnwrapTextModel();
  // The stored name of `name` ("model." becomes the text model's prefix in a wrapper).
  std::string Stored(const std::string& name) const;
  std::string dir_;
  HfConfig config_;
  std::string wrapper_, text_prefix_;
  bool sharded_ = false;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;  // tensor name -> file
};

// Lazy tensor sources over a checkpoint tensor (convertible dtypes only). Each `fill` checks the
// byte count, copies from the mapping and then releases the mapped pages it read.
// The tensor as it is, with `shape` (its element count must match).
TensorSource SourceAsIs(const TensorRef& ref, DType dtype, std::vector<uint64_t> shape);
// A 2-D tensor [rows, cols] stored transposed as [cols, rows] (GPT-2's Conv1D weights).
TensorSource SourceTransposed(const TensorRef& ref, DType dtype);
// Rows [row_begin, row_begin + rows) of a 2-D tensor [*, cols] (halves of a fused gate_up_proj).
TensorSource SourceRows(const TensorRef& ref, DType dtype, uint64_t row_begin, uint64_t rows);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_CHECKPOINT_H_
