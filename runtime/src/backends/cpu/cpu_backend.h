// The CPU backend, registered as "xnnpack" (FFLITE_BACKEND_XNNPACK): the matrix products of dense
// and MoE layers by the engines of engines.h on a pthreadpool (fflite's gemm engine or XNNPACK's
// fully-connected operators for packed float weights, fflite's direct and quantised kernels on
// the file's weights), fflite's own vectorised kernels for activations, GLU and norms. Its rooms:
// options and engine choice (cpu_options.h), plans (plans.h), one scratch arena (scratch.h), one
// matrix-op type over the engines (matrix_op.h), one FFN over matrix ops (ffn.h), the routed
// experts' store (expert_store.h), experts alone (experts_alone.h), the engines (engines.h,
// quant_engine.h); cpu_backend.cc composes them into the layer and MoE runners' executors.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_CPU_BACKEND_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "backends/cpu/cpu_options.h"

namespace fflite {

// Whether XNNPACK initialises on this CPU; `why` says why not.
bool CpuBackendAvailable(std::string* why);

// A session's CPU backend with config.cpu_options (nullptr: the defaults). Norms are copied and
// routers and shared experts packed now (their file pages released); nothing else: dense layers
// are prepared on first use (f32 ones packed by their first call, on the session's threads, their
// pages released; f16/bf16 ones run calls of at most the direct limit on the file's rows and are
// packed by their first larger call), quantised matrices are read from the mapping, and routed
// experts are prepared on first use in the form a call needs (expert_store.h), within
// config.expert_budget_bytes: a file-backed model's experts are then read into the session's
// slots (moe/expert_pool.h) by the session's reader thread and the calling one, a caller's buffer
// is read in place. Releasing packed layers' file pages (MADV_DONTNEED) affects every session of
// the same model, which then reads them again from the page cache. The model must outlive the
// backend. Errors: ResourceExhausted (memory, threads), Internal (XNNPACK refused an operator),
// DataLoss (a shared expert's scale); Run may give these too, when packing a dense layer or an
// expert on first use fails, Unavailable (an expert's read failed) and DataLoss (a matrix's
// scales, checked on first use).
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const Model& model,
                                                          const BackendConfig& config);

// Bytes of packed weights one expert of this shape takes with the default options (what the
// budget counts): every matrix in its packed layout, quantised ones at their file size.
uint64_t CpuPackedFfnBytes(const FfnView& ffn);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_CPU_BACKEND_H_
