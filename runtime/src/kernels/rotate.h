// The rotated layout's transform (kernels/quant_types.h): R = H·D / sqrt(32) on blocks of 32, H
// the Sylvester-Hadamard matrix and D the signs of kHadamardSigns. The runtime rotates the
// activations (Rotate32 on f32, RotateBlocksFn's kernels give its bits), the converter rotates
// each weight block (in double) and the reference rotates the weights back (Unrotate32).
#ifndef FFLITE_RUNTIME_SRC_KERNELS_ROTATE_H_
#define FFLITE_RUNTIME_SRC_KERNELS_ROTATE_H_

namespace fflite {

// v[0..32) <- R·v = H·(D·v) / sqrt(32), in place. Unrotate32 applies Rᵀ = D·H / sqrt(32).
void Rotate32(float* v);
void Rotate32(double* v);
void Unrotate32(double* v);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_ROTATE_H_
