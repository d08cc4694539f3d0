// The importance matrix of a model from a calibration run, for the converter's k-quants
// (fflite-convert --imatrix): per matrix, the mean square of the inputs each column meets.
#ifndef FFLITE_RUNTIME_TOOLS_IMATRIX_H_
#define FFLITE_RUNTIME_TOOLS_IMATRIX_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fflite {
namespace imatrix {

struct ImportanceRun {
  size_t layers = 0;  // layers that had calibration tokens
  size_t tokens = 0;  // over all of them
};

// Runs each layer of the model at `model_path` that has calibration tokens in `dir`
// (layer<i>.f32: raw f32 [n, d_model], the layer's input) on a session of `threads` threads
// with a capture attached, and returns the vectors by name (fflite_imatrix.cc lists them).
// Errors name the file: a size that is not whole tokens, a NaN or Inf token value, no file for
// any layer; the model's and the session's errors.
absl::StatusOr<std::map<std::string, std::vector<float>>> ComputeImportance(
    const std::string& model_path, const std::string& dir, int threads, ImportanceRun* run);

// Writes the vectors as one safetensors file (F32, 1-D, in name order): into a temporary file
// beside `path`, renamed over it once complete, so no partial file is left.
absl::Status WriteImportance(const std::string& path,
                             const std::map<std::string, std::vector<float>>& tensors);

}  // namespace imatrix
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_IMATRIX_H_
