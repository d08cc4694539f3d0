// Test-only: the emulated kernels' entry points (tests/emulated/avx512_simde.h) under their own
// names, so that they link beside the library's. Included before kernels/kernels.h and
// kernels/quant_kernels.h, whose declarations then name the emulated functions.
#ifndef FFLITE_TESTS_EMULATED_AVX512_RENAMES_H_
#define FFLITE_TESTS_EMULATED_AVX512_RENAMES_H_

#define QGemvAvx512 QGemvAvx512Emulated
#define QGemmAvx512Vnni QGemmAvx512VnniEmulated
#define QuantizeActivationsAvx512 QuantizeActivationsAvx512Emulated
#define RotateBlocksAvx512 RotateBlocksAvx512Emulated
#define QGemmAvxVnni QGemmAvxVnniEmulated
#define F32GemvAvx512 F32GemvAvx512Emulated
#define F32GemvAvx512Streams F32GemvAvx512StreamsEmulated
#define F32ValueRowsAvx2 F32ValueRowsAvx2Emulated
#define F32ValueRowsAvx512 F32ValueRowsAvx512Emulated
#define F32ReluAvx512 F32ReluAvx512Emulated
#define F32GeluErfAvx512 F32GeluErfAvx512Emulated
#define F32GeluTanhAvx512 F32GeluTanhAvx512Emulated
#define F32SiluAvx512 F32SiluAvx512Emulated
#define F32SigmoidAvx512 F32SigmoidAvx512Emulated
#define F32SwigluOaiAvx512 F32SwigluOaiAvx512Emulated

#endif  // FFLITE_TESTS_EMULATED_AVX512_RENAMES_H_
