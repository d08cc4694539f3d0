// The FFN as key-value memory: the L2 norm of each neuron's value vector (its column of down),
// read from the weights as stored in any dtype and layout. Used by fflite-neurons.
#ifndef FFLITE_RUNTIME_SRC_FORMAT_VALUE_NORMS_H_
#define FFLITE_RUNTIME_SRC_FORMAT_VALUE_NORMS_H_

#include <vector>

#include "absl/status/status.h"
#include "format/model.h"

namespace fflite {

// An FFN computes y = down(h) = Σᵢ hᵢ·vᵢ, with vᵢ = down[:, i] the value vector of neuron i; so
// neuron i contributes |hᵢ|·‖vᵢ‖ to ‖y‖ at most. Fills norms[0 .. d_ff) (logical d_ff, padding
// left out; resized by this call, owned by the caller) with ‖vᵢ‖₂ of the stored weights: float
// dtypes converted exactly, quantised ones dequantised exactly (q · scale, rotated layouts
// rotated back), the squares summed in double. Reads all of down once; single-threaded. A
// quantised down's scales must have been checked first (Model::CheckScales).
// Errors: InvalidArgument for a null `norms`, an absent down, or a dtype / layout this build
// cannot read (only a model that did not come from the loader has one).
absl::Status ValueNorms(const FfnView& f, std::vector<double>* norms);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_FORMAT_VALUE_NORMS_H_
