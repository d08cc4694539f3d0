// The one table of instruction-set levels and every kernel family's sets (registry.h), and the
// policies that choose between kernels: by the CPU's features and the kernels themselves.
#include "kernels/registry.h"

#include <utility>

#include "kernels/quant_types.h"

namespace fflite {

namespace {

using F = CpuFeature;

constexpr uint64_t Bits(std::initializer_list<CpuFeature> fs) {
  uint64_t bits = 0;
  for (CpuFeature f : fs) bits |= uint64_t{1} << static_cast<unsigned>(f);
  return bits;
}

// --- Element-wise, norms, the few-token float product and value rows (kernels.h). ---

constexpr Kernels kScalarKernels = {"scalar",           F32ReluScalar,    F32GeluErfScalar,
                                    F32GeluTanhScalar,  F32SiluScalar,    F32SigmoidScalar, F32SwigluOaiScalar,
                                    F32LayerNormScalar, F32RmsNormScalar, F32GemvScalar,
                                    F32ValueRowsScalar};
#if defined(FFLITE_KERNELS_AVX2)
constexpr Kernels kAvx2Kernels = {"avx2",           F32ReluAvx2,      F32GeluErfAvx2,
                                  F32GeluTanhAvx2,  F32SiluAvx2,      F32SigmoidAvx2, F32SwigluOaiAvx2,
                                  F32LayerNormAvx2, F32RmsNormAvx2,   F32GemvAvx2,
                                  F32ValueRowsAvx2};
// The AVX2 set with the AVX-512 gemv and activations (the norms gain nothing from 16 lanes at
// d_model sizes).
constexpr Kernels kAvx512Kernels = {"avx512",         F32ReluAvx512,    F32GeluErfAvx512,
                                    F32GeluTanhAvx512, F32SiluAvx512,    F32SigmoidAvx512, F32SwigluOaiAvx512,
                                    F32LayerNormAvx2, F32RmsNormAvx2,   F32GemvAvx512,
                                    F32ValueRowsAvx512};
// The same with one token's gemv in 8-row streams (F32GemvAvx512Streams): chosen on AMD CPUs,
// where it was measured faster; listed everywhere, so that the tests run both.
constexpr Kernels WithStreamsGemv(Kernels k) {
  k.isa = "avx512-streams";
  k.gemv = F32GemvAvx512Streams;
  return k;
}
constexpr Kernels kAvx512StreamsKernels = WithStreamsGemv(kAvx512Kernels);
bool OnAmd(const CpuFeatures& cpu) { return cpu.vendor == CpuVendor::kAmd; }
bool NotOnAmd(const CpuFeatures& cpu) { return cpu.vendor != CpuVendor::kAmd; }
#endif
#if defined(FFLITE_KERNELS_NEON) && defined(__aarch64__)
// The smmla tile (a pair of tokens) is listed and tested everywhere the CPU has i8mm, but chosen
// only where it has no sdot: in the performance model (README "ARM speed"; the Neoverse N2, the
// one modelled core with i8mm) it gains no cycle over sdot at two tokens (67 against 62 per block
// of i8, 117 against 112 of q4_k) and is slower at one, which it runs against itself (55 against
// 34), now that decode takes int8 activations on aarch64. A wider tile is what would pay.
bool WithoutDotProd(const CpuFeatures& cpu) { return !cpu.Has(CpuFeature::kDotProd); }
#endif
#if defined(FFLITE_KERNELS_NEON)
constexpr Kernels kNeonKernels = {"neon",           F32ReluNeon,      F32GeluErfNeon,
                                  F32GeluTanhNeon,  F32SiluNeon,      F32SigmoidNeon, F32SwigluOaiNeon,
                                  F32LayerNormNeon, F32RmsNormNeon,   F32GemvNeon,
                                  F32ValueRowsNeon};
#endif

// --- Quantised weights (quant_kernels.h). ---

constexpr QGemvKernel kScalarQGemv = {"scalar", QGemvScalar};
constexpr QGemmKernel kScalarQGemm = {"scalar", QuantizeActivationsScalar, QGemmScalar,
                                      RotateBlocksScalar};
#if defined(FFLITE_QGEMV_X86)
constexpr QGemvKernel kAvx2QGemv = {"avx2", QGemvAvx2};
constexpr QGemvKernel kAvx512QGemv = {"avx512", QGemvAvx512};
#endif
#if defined(FFLITE_QGEMM_X86)
constexpr QGemmKernel kAvx2QGemm = {"avx2", QuantizeActivationsAvx2, QGemmAvx2, RotateBlocksAvx2};
constexpr QGemmKernel kAvxVnniQGemm = {"avxvnni", QuantizeActivationsAvx2, QGemmAvxVnni,
                                       RotateBlocksAvx2};
constexpr QGemmKernel kAvx512VnniQGemm = {"avx512vnni", QuantizeActivationsAvx512,
                                          QGemmAvx512Vnni, RotateBlocksAvx512};
#endif
#if defined(FFLITE_QGEMV_NEON)
constexpr QGemvKernel kNeonQGemv = {"neon", QGemvNeon};
#endif
#if defined(FFLITE_QGEMM_NEON)
constexpr QGemmKernel kNeonQGemm = {"neon", QuantizeActivationsNeon, QGemmNeon,
                                    RotateBlocksScalar};
#if defined(__aarch64__)
constexpr QGemmKernel kNeonDotQGemm = {"neondot", QuantizeActivationsNeon, QGemmNeonDot,
                                       RotateBlocksScalar};
constexpr QGemmKernel kNeonI8mmQGemm = {"neoni8mm", QuantizeActivationsNeon, QGemmNeonI8mm,
                                        RotateBlocksScalar};
#endif
#endif

// --- Packed float weights (gemm.h). ---

constexpr GemmKernel kScalar = {"scalar", FloatType::kF32, kGemmScalarMr, kGemmScalarNr,
                                GemmMicrokernelScalar};
constexpr GemmKernel kScalarBf16 = {"scalar-bf16", FloatType::kBF16, kGemmScalarMr, kGemmScalarNr,
                                    GemmMicrokernelScalarBf16};
#if defined(FFLITE_GEMM_X86)
// `base` with its streaming microkernel (GemmKernel::stream), its vector packing of weights and
// its ahead form, if any.
constexpr GemmKernel WithStream(GemmKernel base, GemmMicrokernelFn stream,
                                GemmPackPanelsFn pack_panels,
                                GemmAheadMicrokernelFn ahead = nullptr) {
  base.stream = stream;
  base.pack_panels = pack_panels;
  base.ahead = ahead;
  return base;
}

constexpr GemmKernel kAvx2 =
    WithStream({"avx2", FloatType::kF32, 6, 16, GemmMicrokernelAvx2, GemmPackTileAvx2},
               GemmMicrokernelAvx2Stream, GemmPackPanelsAvx2);
constexpr GemmKernel GroupsOuterBelowOutputs(GemmKernel base) {
  base.groups_outer_below_outputs = true;
  return base;
}
constexpr GemmKernel kAvx512 = GroupsOuterBelowOutputs(
    WithStream({"avx512", FloatType::kF32, 12, 32, GemmMicrokernelAvx512, GemmPackTileAvx512},
               GemmMicrokernelAvx512Stream, GemmPackPanelsAvx512, GemmMicrokernelAvx512Ahead));
constexpr GemmKernel kAvx512Bf16 = WithStream(
    {"avx512bf16", FloatType::kBF16, 12, 32, GemmMicrokernelAvx512Bf16, GemmPackTileAvx512Bf16},
    GemmMicrokernelAvx512Bf16Stream, GemmPackPanelsAvx512Bf16, GemmMicrokernelAvx512Bf16Ahead);
#endif

// `base` reading 16-bit panels of `panel` values through `microkernel` (and `stream`, `ahead`),
// packed by `pack_panels` (or the portable loop).
constexpr GemmKernel HalfPanels(GemmKernel base, const char* isa, GemmMicrokernelFn microkernel,
                                GemmMicrokernelFn stream, FloatType panel, bool paired_halves,
                                GemmPackPanelsFn pack_panels,
                                GemmAheadMicrokernelFn ahead = nullptr) {
  base.isa = isa;
  base.microkernel = microkernel;
  base.stream = stream;
  base.ahead = ahead;
  base.panel = panel;
  base.paired_halves = paired_halves;
  base.pack_panels = pack_panels;
  return base;
}

constexpr GemmKernel kScalarF16w = HalfPanels(kScalar, "scalar-f16w", GemmMicrokernelScalarF16w,
                                              nullptr, FloatType::kF16, false, nullptr);
constexpr GemmKernel kScalarBf16w = HalfPanels(kScalar, "scalar-bf16w", GemmMicrokernelScalarBf16w,
                                               nullptr, FloatType::kBF16, false, nullptr);
#if defined(FFLITE_GEMM_X86)
constexpr GemmKernel kAvx2F16w =
    HalfPanels(kAvx2, "avx2-f16w", GemmMicrokernelAvx2F16w, GemmMicrokernelAvx2F16wStream,
               FloatType::kF16, false, GemmPackPanelsAvx2F16w);
constexpr GemmKernel kAvx2Bf16w =
    HalfPanels(kAvx2, "avx2-bf16w", GemmMicrokernelAvx2Bf16w, GemmMicrokernelAvx2Bf16wStream,
               FloatType::kBF16, true, GemmPackPanelsAvx2Bf16w);
constexpr GemmKernel kAvx512F16w =
    HalfPanels(kAvx512, "avx512-f16w", GemmMicrokernelAvx512F16w, GemmMicrokernelAvx512F16wStream,
               FloatType::kF16, false, GemmPackPanelsAvx512F16w, GemmMicrokernelAvx512F16wAhead);
constexpr GemmKernel kAvx512Bf16w =
    HalfPanels(kAvx512, "avx512-bf16w", GemmMicrokernelAvx512Bf16w,
               GemmMicrokernelAvx512Bf16wStream, FloatType::kBF16, true, GemmPackPanelsAvx512Bf16w,
               GemmMicrokernelAvx512Bf16wAhead);
#endif
#if defined(FFLITE_GEMM_NEON)
// `base` with its packing of weights.
constexpr GemmKernel WithPackPanels(GemmKernel base, GemmPackPanelsFn pack_panels) {
  base.pack_panels = pack_panels;
  return base;
}
constexpr GemmKernel kNeon =
    WithPackPanels({"neon", FloatType::kF32, 6, 16, GemmMicrokernelNeon}, GemmPackPanelsNeon);
constexpr GemmKernel kNeonBf16 = WithPackPanels(
    {"neon-bf16", FloatType::kBF16, 6, 16, GemmMicrokernelNeonBf16}, GemmPackPanelsNeonBf16);
#endif

#if defined(FFLITE_GEMM_X86)

// Every kernel with an ahead form, and its copy without.
constexpr GemmKernel kAvx512Plain = GemmWithoutAheadForm(kAvx512);
constexpr GemmKernel kAvx512Bf16Plain = GemmWithoutAheadForm(kAvx512Bf16);
constexpr GemmKernel kAvx512F16wPlain = GemmWithoutAheadForm(kAvx512F16w);
constexpr GemmKernel kAvx512Bf16wPlain = GemmWithoutAheadForm(kAvx512Bf16w);
constexpr std::pair<const GemmKernel*, const GemmKernel*> kAheadForms[] = {
    {&kAvx512, &kAvx512Plain},
    {&kAvx512Bf16, &kAvx512Bf16Plain},
    {&kAvx512F16w, &kAvx512F16wPlain},
    {&kAvx512Bf16w, &kAvx512Bf16wPlain}};
#endif


// --- The levels, in order: within a family, a later kernel is a better one. ---

std::vector<IsaLevel> MakeLevels() {
  std::vector<IsaLevel> levels;
  levels.push_back({"scalar", 0, nullptr, nullptr, &kScalarKernels, &kScalarQGemv, &kScalarQGemm,
                    &kScalar, &kScalarBf16});
#if defined(__x86_64__) || defined(__i386__)
  // F16C for the f16 conversions every AVX2 kernel set makes (every AVX2 CPU has it).
  const uint64_t avx2 = Bits({F::kAvx2, F::kFma3, F::kF16c});
  const uint64_t avx512f = avx2 | Bits({F::kAvx512f});
  const uint64_t avx512 = avx512f | Bits({F::kAvx512bw, F::kAvx512vl});
  levels.push_back({"avx2", avx2, nullptr, nullptr, &kAvx2Kernels, &kAvx2QGemv, &kAvx2QGemm,
                    &kAvx2, nullptr});
  levels.push_back({"avxvnni", avx2 | Bits({F::kAvxVnni}), nullptr, nullptr, nullptr, nullptr,
                    &kAvxVnniQGemm, nullptr, nullptr});
  levels.push_back({"avx512f", avx512f, nullptr, nullptr, nullptr, nullptr, nullptr, &kAvx512,
                    nullptr});
  levels.push_back({"avx512", avx512, nullptr, nullptr, nullptr, &kAvx512QGemv, nullptr, nullptr,
                    nullptr});
  // Two sets of the same instructions, one token's gemv in 4-row blocks that prefetch the next
  // or in 8-row streams: each preferred on its vendors.
  levels.push_back({"avx512-blocks", avx512, nullptr, NotOnAmd, &kAvx512Kernels, nullptr,
                    nullptr, nullptr, nullptr});
  levels.push_back({"avx512-streams", avx512, nullptr, OnAmd, &kAvx512StreamsKernels, nullptr,
                    nullptr, nullptr, nullptr});
  levels.push_back({"avx512bf16", avx512f | Bits({F::kAvx512bf16}), nullptr, nullptr, nullptr,
                    nullptr, nullptr, nullptr, &kAvx512Bf16});
  levels.push_back({"avx512vnni", avx512 | Bits({F::kAvx512vnni}), nullptr, nullptr, nullptr,
                    nullptr, &kAvx512VnniQGemm, nullptr, nullptr});
#endif
#if defined(FFLITE_GEMM_AMX)
  levels.push_back({"amx-bf16", Bits({F::kAmxBf16}), GemmAmxUsable, nullptr, nullptr, nullptr,
                    nullptr, nullptr, &GemmAmxKernel()});
#endif
#if defined(FFLITE_KERNELS_NEON)
#if defined(__aarch64__)
  // NEON is part of the ARMv8-A baseline: the set needs no probe.
  levels.push_back({"neon", 0, nullptr, nullptr, &kNeonKernels, &kNeonQGemv,
                    &kNeonQGemm, &kNeon, nullptr});
  levels.push_back({"neondot", Bits({F::kNeon, F::kDotProd}), nullptr, nullptr, nullptr, nullptr,
                    &kNeonDotQGemm, nullptr, nullptr});
  levels.push_back({"neoni8mm", Bits({F::kNeon, F::kI8mm}), nullptr, WithoutDotProd, nullptr,
                    nullptr, &kNeonI8mmQGemm, nullptr, nullptr});
  levels.push_back({"neon-bf16", Bits({F::kNeon, F::kArmBf16}), nullptr, nullptr, nullptr,
                    nullptr, nullptr, nullptr, &kNeonBf16});
#else
  // 32-bit ARM: the NEON kernels are built for NEON and used where the CPU reports it.
  levels.push_back({"neon", Bits({F::kNeon}), nullptr, nullptr, &kNeonKernels, &kNeonQGemv,
                    &kNeonQGemm, nullptr, nullptr});
#endif
#endif
  return levels;
}

// Appends `kernel` (if any) to `list`, and makes it the best where `level` prefers itself.
template <typename K>
void Add(const IsaLevel& level, const CpuFeatures& cpu, const K* kernel,
         std::vector<const K*>* list, const K** best) {
  if (kernel == nullptr) return;
  list->push_back(kernel);
  if (level.preferred == nullptr || level.preferred(cpu)) *best = kernel;
}

}  // namespace

const std::vector<IsaLevel>& IsaLevels() {
  static const std::vector<IsaLevel>* const levels = new std::vector<IsaLevel>(MakeLevels());
  return *levels;
}

KernelLists ListKernels(const CpuFeatures& cpu, bool run_checks) {
  KernelLists l;
  for (const IsaLevel& level : IsaLevels()) {
    if ((cpu.bits & level.requires) != level.requires) continue;
    if (run_checks && level.usable != nullptr && !level.usable()) continue;
    Add(level, cpu, level.kernels, &l.kernels, &l.best_kernels);
    Add(level, cpu, level.qgemv, &l.qgemv, &l.best_qgemv);
    Add(level, cpu, level.qgemm, &l.qgemm, &l.best_qgemm);
    Add(level, cpu, level.gemm_f32, &l.gemm_f32, &l.best_gemm_f32);
    Add(level, cpu, level.gemm_bf16, &l.gemm_bf16, &l.best_gemm_bf16);
  }
  return l;
}

const KernelLists& ThisCpuKernels() {
  static const KernelLists* const lists = new KernelLists(ListKernels(GetCpuFeatures(), true));
  return *lists;
}

const Kernels& ScalarKernels() { return kScalarKernels; }
std::vector<const Kernels*> AvailableKernels() { return ThisCpuKernels().kernels; }
const Kernels& BestKernels() { return *ThisCpuKernels().best_kernels; }
std::vector<const QGemvKernel*> AvailableQGemvKernels() { return ThisCpuKernels().qgemv; }
const QGemvKernel& BestQGemvKernel() { return *ThisCpuKernels().best_qgemv; }
std::vector<const QGemmKernel*> AvailableQGemmKernels() { return ThisCpuKernels().qgemm; }
const QGemmKernel& BestQGemmKernel() { return *ThisCpuKernels().best_qgemm; }
std::vector<const GemmKernel*> AvailableGemmKernels(FloatType dtype) {
  return dtype == FloatType::kBF16 ? ThisCpuKernels().gemm_bf16 : ThisCpuKernels().gemm_f32;
}
const GemmKernel& BestGemmKernel(FloatType dtype) {
  return dtype == FloatType::kBF16 ? *ThisCpuKernels().best_gemm_bf16
                                   : *ThisCpuKernels().best_gemm_f32;
}

F32ActivationFn Kernels::Activation(ActKind activation) const {
  switch (activation) {
    case ActKind::kGeluErf: return gelu_erf;
    case ActKind::kGeluTanh: return gelu_tanh;
    case ActKind::kSilu: return silu;
    case ActKind::kSigmoid: return sigmoid;
    case ActKind::kSwigluOai: return swiglu_oai;
    default: return relu;
  }
}

const GemmKernel* GemmKernelWithoutAhead(const GemmKernel* kernel) {
#if defined(FFLITE_GEMM_AMX)
  if (const GemmKernel* amx = GemmAmxWithoutAhead(kernel)) return amx;
#endif
#if defined(FFLITE_GEMM_X86)
  for (const auto& [with, without] : kAheadForms) {
    if (kernel == with) return without;
  }
#endif
  return kernel;
}

bool GemmAheadByDefault(const CpuFeatures& cpu) {
  return cpu.l2_bytes == 0 || cpu.l2_bytes >= (uint32_t{1} << 20);
}

bool GemmAheadByDefault() { return GemmAheadByDefault(GetCpuFeatures()); }

bool GemmBeatsXnnpack(const GemmKernel& kernel) {
#if defined(FFLITE_GEMM_X86)
  return kernel.microkernel == &GemmMicrokernelAvx2 || kernel.microkernel == &GemmMicrokernelAvx512;
#else
  (void)kernel;
  return false;
#endif
}

bool GemmBf16ArithmeticFaster(const GemmKernel& kernel) {
  if (kernel.microkernel == &GemmMicrokernelScalarBf16) return false;
#if defined(FFLITE_GEMM_X86)
  if (kernel.microkernel == &GemmMicrokernelAvx512Bf16) {
    return GetCpuFeatures().vendor != CpuVendor::kIntel;
  }
#endif
  return true;
}

const GemmKernel* HalfPanelKernel(const GemmKernel& f32, FloatType half) {
  if (half != FloatType::kF16 && half != FloatType::kBF16) return nullptr;
  const bool f16 = half == FloatType::kF16;
  if (f32.microkernel == &GemmMicrokernelScalar) return f16 ? &kScalarF16w : &kScalarBf16w;
#if defined(FFLITE_GEMM_X86)
  // Listed only where the CPU has AVX2, FMA3 and F16C.
  if (f32.microkernel == &GemmMicrokernelAvx2) return f16 ? &kAvx2F16w : &kAvx2Bf16w;
  // Listed only where the CPU has AVX-512 F (and so F16C's 512-bit form).
  if (f32.microkernel == &GemmMicrokernelAvx512) return f16 ? &kAvx512F16w : &kAvx512Bf16w;
#endif
  return nullptr;
}

size_t DefaultQuantGemmMinTokens(QuantType type, const QGemvKernel& gemv,
                                 const QGemmKernel& gemm) {
  // Measured on Zen 5 (one thread, a cold 11008 x 4096 matrix; GB/s of the weights' bytes, the
  // quantisation of the activations included; the read loop 26-28 GB/s in the same run):
  //   tokens                    1     2     4
  //   i4  qgemv avx512        29.2  18.2  11.2
  //   i4  qgemm avx512vnni    26.0  25.8  25.9
  //   i8  qgemv avx512        29.9  22.4  16.6
  //   i8  qgemm avx512vnni    26.8  27.9  25.3
  //   i4  qgemv avx2          10.5   8.4   5.0   (issue-bound: the nibbles' conversion to f32)
  //   i4  qgemm avx2          17.3  16.0   8.9
  //   i8  qgemv avx2          22.9  16.8   8.9
  //   i8  qgemm avx2          20.6  18.8  11.4
  //   i4  qgemm avxvnni       18.4  18.5  12.6   (another run: avx2 17.4 15.6 9.6)
  //   i8  qgemm avxvnni       21.9  21.4  15.1   (avx2 22.6 20.3 12.5)
  // AVX-512 without VNNI (Skylake-SP) pairs qgemv avx512 with qgemm avx2, slower at every count
  // up to 4. Q4 and Q4K: the same nibble kernels; Q6K: int8 values, as Q8.
  // The packed k-quants (Q6KP, Q5KP: bit planes decoded to Q6K's / Q5K's int8 values in the
  // kernel) make the float path decode-bound: on an AVX-512 VNNI Xeon (one thread, 2 Llama-3-8B
  // FFN layers, cold, fflite-bench --model X --tokens 1 --cold, two runs each, alternated) q6_k
  // decodes a token in 37.8-42.7 ms with float activations against 26.3-45.1 with int8 ones,
  // q5_k in 32.8-45.3 against 25.3-27.4 (85-91% of the read bandwidth); with the AVX2 pair
  // (--quant_isa avx2) q6_k 59.4-127 against 32.7-36.1. So they take int8 activations from one
  // token on those pairs (the AVX-512 float kernel with the AVX2 int8 one, Skylake-SP's pair,
  // measured alike at one token: 30.9-35.5 against 31.7-32.4, keeps 8).
  // The aarch64 NEON pairs: no ARM machine is reachable from this project, so from the model of
  // the kernels' loops instead (scripts/arm_model.py, README "ARM speed"; llvm-mca 16, cycles per
  // block of 16 rows x 32 values, one token, on the Cortex-A76 as LLVM models it):
  //   float activations, qgemv neon      i8 323  i4 335  q4_k 376  q6_k 364  q5_k 360
  //   int8 activations, qgemm neondot    i8  44  i4  54  q4_k  87  q6_k  75  q5_k  77
  //   int8 activations, qgemm neon       i8  85  i4  97  q4_k 134  q6_k 126  q5_k 127
  // and 450-689 against 74-134 (neondot) for two tokens: the float path widens every weight to
  // f32 four lanes at a time and is bound by the vector pipes at 2-4 GB/s of weights per core
  // (a Raspberry Pi 5 has about 2.5 per core), the int8 paths at 5-30. So every aarch64 pair
  // takes int8 activations from one token (as llama.cpp's ARM path always does); 32-bit ARM is
  // not modelled and keeps 8.
  const bool q4 = type == QuantType::kQ4 || type == QuantType::kQ4K;
  const bool packed = QuantIsPacked(type);
#if defined(FFLITE_QGEMM_X86)
  if (gemm.qgemm == QGemmAvx512Vnni) return packed ? 1 : 2;
  if ((gemm.qgemm == QGemmAvx2 || gemm.qgemm == QGemmAvxVnni) && gemv.qgemv == QGemvAvx2) {
    return q4 || packed ? 1 : 2;
  }
#elif defined(FFLITE_QGEMM_NEON) && defined(FFLITE_QGEMV_NEON) && defined(__aarch64__)
  (void)q4;
  (void)packed;
  if (gemv.qgemv == QGemvNeon && (gemm.qgemm == QGemmNeon || gemm.qgemm == QGemmNeonDot ||
                                  gemm.qgemm == QGemmNeonI8mm)) {
    return 1;
  }
#else
  (void)q4;
  (void)packed;
  (void)gemv;
  (void)gemm;
#endif
  return 8;
}

}  // namespace fflite
