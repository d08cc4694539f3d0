// Marks for the performance model (scripts/arm_model.sh): FFLITE_MCA_BEGIN and FFLITE_MCA_END
// enclose the body of a kernel's steady-state loop, so that the model finds the loop in the
// compiler's assembly and follows the code as it changes. They expand to nothing unless
// FFLITE_MCA_REGIONS is defined, which only the model's own compilation does: the library's
// code is not touched by them.
//
// FFLITE_MCA_BEGIN(name, tokens, type, weights, bytes) writes an assembly comment
//   FFLITE-MCA-BEGIN name tokens type weights bytes
// with the four integer constants of the instantiation: the tokens one pass of the body serves,
// the weight type (QuantType for quantised kernels, FloatType for float ones), and the weights
// and the bytes of weights (scales included) the body reads. FFLITE_MCA_END(name) closes it.
// In the model's build the marks are volatile asm statements: the compiler keeps them in order
// and in the loop, which may schedule the body a little differently from the library's build
// (nothing moves across them); the model's table says so.
#ifndef FFLITE_RUNTIME_SRC_KERNELS_MCA_REGION_H_
#define FFLITE_RUNTIME_SRC_KERNELS_MCA_REGION_H_

#if defined(FFLITE_MCA_REGIONS)
#if defined(__aarch64__)
#define FFLITE_MCA_COMMENT "//"
#elif defined(__arm__)
#define FFLITE_MCA_COMMENT "@"
#else
#define FFLITE_MCA_COMMENT "#"
#endif
#define FFLITE_MCA_BEGIN(name, tokens, type, weights, bytes)                                  \
  __asm__ volatile(FFLITE_MCA_COMMENT " FFLITE-MCA-BEGIN " name " %c0 %c1 %c2 %c3" ::"i"(   \
                       static_cast<int>(tokens)),                                             \
                   "i"(static_cast<int>(type)), "i"(static_cast<long>(weights)),              \
                   "i"(static_cast<long>(bytes)))
#define FFLITE_MCA_END(name) __asm__ volatile(FFLITE_MCA_COMMENT " FFLITE-MCA-END " name)
#else
// The type is named (and so used: clang warns of a weight format's unused kType otherwise).
#define FFLITE_MCA_BEGIN(name, tokens, type, weights, bytes) ((void)(type))
#define FFLITE_MCA_END(name) ((void)0)
#endif

#endif  // FFLITE_RUNTIME_SRC_KERNELS_MCA_REGION_H_
