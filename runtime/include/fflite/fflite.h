/* fflite: run the FFN and Mixture-of-Experts sublayers of Transformers from a .fflite file.
 * The public C API (C99). Everything else in fflite is an implementation detail.
 *
 * Ownership and lifetime are written on every pointer. Threads: a model is immutable and may be
 * shared by any number of sessions on any threads; a session is used by one thread at a time.
 * Errors: every function that can fail returns an fflite_status; the calling thread's last error
 * message (fflite_last_error_message) says what went wrong, naming the thing, the value and the
 * limit; errors.md (installed in share/doc/fflite; docs/errors.md in the source) lists every status
 * and what produces it. No function aborts, exits or throws on bad input.
 *
 * Linking: -lfflite (pkg-config --cflags --libs fflite, or CMake's find_package(fflite) and
 * fflite::fflite); libfflite.a for a static link (pkg-config --static, fflite::fflite_static). At
 * run time libfflite.so is found like any shared library: nothing to do under /usr or /usr/local
 * (after ldconfig), else an rpath in the program (-Wl,-rpath,PREFIX/lib) or LD_LIBRARY_PATH. */
#ifndef FFLITE_FFLITE_H_
#define FFLITE_FFLITE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FFLITE_BUILDING_LIBRARY) && defined(__GNUC__)
#define FFLITE_API __attribute__((visibility("default")))
#else
#define FFLITE_API
#endif

/* FFLITE_VERSION_MAJOR, _MINOR, _PATCH and FFLITE_VERSION_STRING, from the build's version. */
#include "fflite/fflite_version.h"

typedef enum fflite_status {
  FFLITE_STATUS_OK = 0,
  FFLITE_STATUS_INVALID_ARGUMENT = 1,  /* a null pointer, a bad option, wrong sizes */
  FFLITE_STATUS_OUT_OF_RANGE = 2,      /* layer index or token count outside its limits */
  FFLITE_STATUS_INVALID_MODEL = 3,     /* the model file is malformed, truncated or inconsistent */
  FFLITE_STATUS_UNSUPPORTED = 4,       /* a newer format version, a big-endian host, ... */
  FFLITE_STATUS_NOT_FOUND = 5,         /* the file does not exist */
  FFLITE_STATUS_IO_ERROR = 6,          /* the file cannot be opened, read or mapped */
  FFLITE_STATUS_OUT_OF_MEMORY = 7,     /* an allocation failed */
  FFLITE_STATUS_UNAVAILABLE = 8,       /* the requested backend cannot run on this machine */
  FFLITE_STATUS_INTERNAL = 9           /* a bug in fflite: please report it */
} fflite_status;

typedef enum fflite_backend {
  FFLITE_BACKEND_AUTO = 0,      /* the fastest backend that runs here */
  FFLITE_BACKEND_REFERENCE = 1, /* plain scalar code, the oracle; slow */
  FFLITE_BACKEND_XNNPACK = 2,   /* CPU SIMD (x86, ARM) */
  FFLITE_BACKEND_CUDA = 3       /* NVIDIA GPU (sm_80+), when built with CUDA and a GPU is present;
                                   AUTO takes it first there, unless it refuses the options */
} fflite_backend;

typedef enum fflite_layer_kind {
  FFLITE_LAYER_DENSE = 1, /* one feed-forward network */
  FFLITE_LAYER_MOE = 2    /* router + experts (+ shared experts) */
} fflite_layer_kind;

typedef enum fflite_dtype {
  FFLITE_DTYPE_F32 = 1,
  FFLITE_DTYPE_F16 = 2,
  FFLITE_DTYPE_BF16 = 3,
  FFLITE_DTYPE_I8 = 4, /* int8, blocks of 32 with an f16 scale each: 8.5 bits per weight */
  FFLITE_DTYPE_I4 = 5, /* int4, blocks of 32 with an f16 scale each: 4.5 bits per weight */
  /* GGUF's Q4_K with its bits (converted GGUF files): 4-bit values, a 6-bit scale and min per 32,
   * an f16 scale and min per 256: 4.625 bits per weight as stored (format 1.4) */
  FFLITE_DTYPE_Q4_K = 6,
  /* GGUF's Q6_K with its bits: 6-bit values kept as int8, an int8 scale per 16, an f16 scale per
   * 256: 8.5625 bits per weight as stored (format 1.4; "q6_k_i8"; since 1.6 only for values
   * beyond 6 bits, GGUF's IQ4_XS) */
  FFLITE_DTYPE_Q6_K = 7,
  /* GGUF's Q5_K with its bits: 5-bit values kept as int8, Q4_K's scales and mins: 8.625 bits per
   * weight as stored (format 1.4; "q5_k_i8"; files of 1.6 use FFLITE_DTYPE_Q5_K_PACKED) */
  FFLITE_DTYPE_Q5_K = 8,
  /* GGUF's Q6_K and Q5_K at GGUF's sizes, values in bit planes (format 1.6, "q6_k" and "q5_k"):
   * 6.5625 and 5.625 bits per weight as stored */
  FFLITE_DTYPE_Q6_K_PACKED = 9,
  FFLITE_DTYPE_Q5_K_PACKED = 10,
  /* GGUF's IQ4_XS at 4.5625 bits per weight (format 1.7, "iq4_xs"): 4-bit indices into its 16
   * levels, Q6_K's scales */
  FFLITE_DTYPE_IQ4_XS = 11,
  /* GGUF's IQ4_NL at 4.5 bits per weight (format 1.7, "iq4_nl"): 4-bit indices into the same
   * levels, i8's f16 scale per 32 */
  FFLITE_DTYPE_IQ4_NL = 12,
  /* GGUF's Q3_K at 3.4375 bits per weight, GGUF's own (format 1.13, "q3_k"; 1.8 to 1.12 kept it
   * at 3.5625): 3-bit values in bit planes, a 6-bit scale per 16 values, an f16 per 256 */
  FFLITE_DTYPE_Q3_K_PACKED = 13,
  /* GGUF's Q2_K at 2.625 bits per weight, GGUF's own (format 1.11, "q2_k"; 1.9 and 1.10 kept it
   * at 2.875): 2-bit values, a 4-bit scale and a 4-bit min per 16 values */
  FFLITE_DTYPE_Q2_K_PACKED = 14,
  /* MXFP4 (GGUF's, gpt-oss's experts) at 4.25 bits per weight, GGUF's own (format 1.12,
   * "mxfp4"; 1.10 and 1.11 kept it at 4.5): 4-bit E2M1 codes, the block's E8M0 scale byte per 32 */
  FFLITE_DTYPE_MXFP4 = 15
} fflite_dtype;

typedef enum fflite_activation {
  FFLITE_ACTIVATION_RELU = 1,
  FFLITE_ACTIVATION_GELU = 2,      /* exact, with erf */
  FFLITE_ACTIVATION_GELU_TANH = 3, /* tanh approximation (gelu_new, gelu_pytorch_tanh) */
  FFLITE_ACTIVATION_SILU = 4,
  FFLITE_ACTIVATION_SIGMOID = 5,
  /* gpt-oss's SwiGLU: c·sigmoid(1.702·c)·(clamp(up, -7, 7) + 1) with c = min(gate, 7) */
  FFLITE_ACTIVATION_SWIGLU_OAI = 6
} fflite_activation;

/* A layer's norm (fflite_layer_info.norm): none, RMSNorm or LayerNorm. */
typedef enum fflite_norm_kind {
  FFLITE_NORM_NONE = 0,
  FFLITE_NORM_RMS = 1,  /* x / sqrt(mean(x^2) + eps) * w */
  FFLITE_NORM_LAYER = 2 /* (x - mean) / sqrt(var + eps) * w + b */
} fflite_norm_kind;

/* Where a layer applies its norm around its body B (the FFN, or the MoE sublayer), with r = x
 * when the residual is included (fflite_layer_info.residual_included) and r = 0 otherwise:
 *   NONE:     y = r + B(x)
 *   PRE:      y = r + B(Norm(x))          (Llama, Mistral, Qwen, ...)
 *   POST:     y = Norm(r + B(x))          (BERT)
 *   SANDWICH: y = r + OutNorm(B(Norm(x))) (Gemma 2 and 3) */
typedef enum fflite_norm_placement {
  FFLITE_NORM_PLACEMENT_NONE = 0,
  FFLITE_NORM_PLACEMENT_PRE = 1,
  FFLITE_NORM_PLACEMENT_POST = 2,
  FFLITE_NORM_PLACEMENT_SANDWICH = 3
} fflite_norm_placement;

typedef struct fflite_model fflite_model;     /* opaque, immutable, thread-safe */
typedef struct fflite_session fflite_session; /* opaque, one thread at a time */

/* "MAJOR.MINOR.PATCH" of the library (FFLITE_VERSION_STRING of the header it was built with, which
 * a caller may compare); a static string. */
FFLITE_API const char* fflite_version(void);

/* The message of the last failed call on this thread ("" if none). The string is owned by
 * fflite and valid until the next fflite call on the same thread. */
FFLITE_API const char* fflite_last_error_message(void);

/* A short static name for a status, such as "INVALID_MODEL". */
FFLITE_API const char* fflite_status_name(fflite_status status);

/* ---- Models ------------------------------------------------------------------------------ */

/* Maps and validates a .fflite file, reading only its metadata (every offset, size, shape and
 * layout is checked; the weights are read when first used, and a quantised matrix's NaN or Inf
 * scale fails the session call that first reads it with INVALID_MODEL). On success *out_model
 * owns the mapping; free it with fflite_model_free after every session made from it is freed.
 * Errors: INVALID_ARGUMENT (null pointers), NOT_FOUND, IO_ERROR, INVALID_MODEL, UNSUPPORTED. */
FFLITE_API fflite_status fflite_model_load_file(const char* path, fflite_model** out_model);

/* Validates a model held in the caller's memory, without copying it. The caller keeps ownership
 * of `data`, which must stay valid and unchanged until fflite_model_free. `data` must be 8-byte
 * aligned (64-byte alignment is best; malloc's is enough); otherwise INVALID_ARGUMENT. */
FFLITE_API fflite_status fflite_model_load_buffer(const void* data, size_t size,
                                                  fflite_model** out_model);

/* NULL is fine. The model must outlive every session created from it. */
FFLITE_API void fflite_model_free(fflite_model* model);

/* The number of layers (sublayers fflite runs: one per FFN or MoE block), >= 1; layers are
 * numbered 0 .. count - 1 in every call. Errors: INVALID_ARGUMENT (null pointers). */
FFLITE_API fflite_status fflite_model_num_layers(const fflite_model* model, int32_t* out_count);

/* The width of every layer's input and output rows (hidden size), >= 1. Errors:
 * INVALID_ARGUMENT (null pointers). */
FFLITE_API fflite_status fflite_model_d_model(const fflite_model* model, int32_t* out_d_model);

/* What one layer holds. Set struct_size = sizeof(fflite_layer_info) before the call; fields are
 * only ever appended, and only the first struct_size bytes are written. */
typedef struct fflite_layer_info {
  size_t struct_size;
  fflite_layer_kind kind;
  int32_t d_model;
  int32_t d_ff;                /* logical d_ff of the dense FFN, or of each routed expert */
  int32_t d_ff_padded;         /* as stored, padded for the kernels */
  int32_t num_experts;         /* 0 for a dense layer */
  int32_t top_k;               /* 0 for a dense layer */
  int32_t num_shared_experts;  /* 0 for a dense layer */
  fflite_dtype dtype;          /* of the main weight matrices */
  fflite_activation activation;
  int32_t gated;               /* 1 for the GLU family (SwiGLU, GeGLU, ReGLU, GLU) */
  /* Appended in 0.2 (format 1.1): each matrix's dtype (they differ when the converter kept some
   * at higher precision), and the bits per weight of the three as stored (scales and padding
   * included; 32 for f32). gate_dtype is 0 when the FFN is not gated. */
  fflite_dtype up_dtype, gate_dtype, down_dtype;
  float bits_per_weight;
  /* Appended in 0.3: what the layer computes around its body (fflite_norm_placement says the
   * formula). With residual_included 1, fflite_session_run's output already holds x + ...: an
   * engine that adds its own residual must not add it again (the converter includes the norm and
   * the residual unless told otherwise: fflite-convert --no_norm leaves out both). */
  fflite_norm_kind norm;
  fflite_norm_placement norm_placement;
  int32_t residual_included;
  int32_t norm_unit_offset;    /* 1: the norm scales by (1 + w) (Gemma), 0: by w */
  float norm_eps;              /* 0 without a norm */
  /* Bytes of the file's weights: up_bytes, gate_bytes (0 when not gated) and down_bytes of the
   * dense FFN or of each routed expert, as stored (scales and padding included); layer_bytes of
   * every tensor of the layer (all experts, router, shared experts, norms, biases). */
  uint64_t up_bytes, gate_bytes, down_bytes;
  uint64_t layer_bytes;
} fflite_layer_info;

/* Errors: INVALID_ARGUMENT (null pointers, struct_size too small), OUT_OF_RANGE (layer). */
FFLITE_API fflite_status fflite_model_layer_info(const fflite_model* model, int32_t layer,
                                                 fflite_layer_info* out_info);

/* ---- Sessions ---------------------------------------------------------------------------- */

/* A parallel-for of the caller's thread pool (fflite_session_options.parallel_for): it must call
 * task(task_context, i) once for every i in [0, n), on any of its threads (the calling one
 * included), at once or in turn, and return when every call has returned (its return is the
 * synchronisation: what the tasks wrote must be visible to the thread that called it). fflite
 * calls it from the thread that runs the session, never from inside a task. */
typedef void (*fflite_task_fn)(void* task_context, size_t i);
typedef void (*fflite_parallel_for_fn)(void* pool_context, fflite_task_fn task,
                                       void* task_context, size_t n);

typedef struct fflite_session_options {
  size_t struct_size;     /* set by fflite_session_options_init: sizeof(fflite_session_options) */
  /* Threads the session's work is split for; 0 (the default since 0.3): as many as the CPU's
   * fast cores (fflite_platform_info.num_fast_cores: on big.LITTLE the big ones, from Linux's
   * cpu_capacity or the cores' top frequencies; every core elsewhere); else 1 .. 1024. */
  int32_t num_threads;
  fflite_backend backend; /* default FFLITE_BACKEND_AUTO */
  int32_t max_tokens;     /* most tokens per fflite_session_run; default 512; >= 1 */
  /* Most bytes of routed-expert weights the session keeps in memory; default 0: no limit. The
   * xnnpack backend runs an expert that gets few tokens in a call (every expert at decode)
   * straight from the model file's bytes, and one that gets many through packed weights; both
   * forms count. With a limit, a form is made resident on first use and others are dropped
   * beyond it (the least used lately among the least recently used), so that a model whose
   * experts do not all fit in memory still runs; a budget below one expert keeps just the one in
   * use. A model loaded from a file then reads each expert's bytes into slots of memory the
   * session reserves at creation (as many slots as the budget holds, each the size of the
   * largest expert rounded up to 4 KiB pages, committed as they fill) with explicit reads: what
   * the page cache holds is copied from it, the rest read past it (O_DIRECT) where the file
   * system allows; none of their pages is mapped in, and a file truncated after loading fails
   * the call that reads past its end with IO_ERROR naming the expert and the offset (the session
   * stays usable). Such a session also reads experts ahead on one reader thread of its own,
   * started with the session (fflite_expert_stats). A model loaded from a buffer keeps
   * reading the buffer. Results are identical whatever the budget. Router, shared experts
   * and dense layers are always resident and not counted. >= 0. The cuda backend keeps every
   * expert in device memory and refuses a nonzero budget (INVALID_ARGUMENT). */
  int64_t expert_budget_bytes;
  /* Appended in 0.3. How quantised weights (i8, i4, the k-quants) multiply activations on the
   * xnnpack backend. FFLITE_ACTIVATIONS_AUTO (the default): in float for calls of a few tokens
   * (decode), quantised to int8 per block of 32 for calls of many (prefill: int8 dot products,
   * several times faster; the README gives the measured cost in accuracy), so that a token's
   * output depends on how many tokens share its call. FFLITE_ACTIVATIONS_FLOAT: in float at every
   * token count, so that each token's output has the same bits whatever else is in the call
   * (batch-invariant) and decode and prefill agree; prefill is slower. Other backends always
   * multiply in float and accept both. */
  int32_t activations;
  /* Appended in 0.3: the caller's threads. With parallel_for set, the xnnpack backend runs its
   * parallel work through it (split for num_threads threads, which the caller's pool should
   * have) and starts no thread of its own: no pool, and no expert reader thread (with an expert
   * budget, experts are then read when they run, not ahead). NULL (the default): fflite's own
   * pool of num_threads - 1 threads. parallel_for_context is passed to it as is. Other backends
   * ignore both. */
  fflite_parallel_for_fn parallel_for;
  void* parallel_for_context;
  /* What fflite's own pool's threads do between parallel loops: FFLITE_WAIT_SPIN (the default:
   * they spin between the loops of one fflite_session_run and sleep after its last, the fastest
   * when the cores are free) or FFLITE_WAIT_SLEEP (they sleep after every loop: slower on free
   * cores, but they never take a core from other work while waiting, for machines where other
   * jobs or other sessions share the cores). */
  int32_t wait_policy;
} fflite_session_options;

/* fflite_session_options.wait_policy. */
enum {
  FFLITE_WAIT_SPIN = 0,
  FFLITE_WAIT_SLEEP = 1
};

/* fflite_session_options.activations. */
enum {
  FFLITE_ACTIVATIONS_AUTO = 0,
  FFLITE_ACTIVATIONS_FLOAT = 1
};

/* Fills `options` with the defaults and sets struct_size. NULL is ignored. */
FFLITE_API void fflite_session_options_init(fflite_session_options* options);

/* Creates a session over `model` (which must outlive it). Memory: the xnnpack backend's packed
 * dense layers (f32 ones, and f16/bf16 ones at more than a few tokens) belong to the model: the
 * first session that needs a layer packs it, and every session of the model uses that one copy
 * (thread-safe; released with the model), on CPUs where fflite's own GEMM runs them (x86 with
 * AVX2 or AVX-512; on ARM XNNPACK's operators, which keep per-call state, are packed per
 * session). Routers, shared experts and routed experts' packed forms are per session (expert
 * budgets are per session). Quantised weights and f16/bf16 decode read the model's mapping,
 * shared by every session. fflite_session_memory says what is where. `options` may be NULL for
 * defaults;
 * an options struct from an older fflite (smaller struct_size) gets defaults for the fields it
 * lacks. Errors: INVALID_ARGUMENT, UNAVAILABLE (backend not built or no device),
 * OUT_OF_MEMORY, INVALID_MODEL (a NaN or Inf scale in a quantised matrix the backend reads at
 * creation: the xnnpack backend's shared experts, every matrix on cuda). */
FFLITE_API fflite_status fflite_session_create(const fflite_model* model,
                                               const fflite_session_options* options,
                                               fflite_session** out_session);

/* NULL is fine. */
FFLITE_API void fflite_session_free(fflite_session* session);

/* Prepares now what the session's calls would otherwise prepare on first use: every dense
 * layer's packed weights where calls of up to max_tokens tokens run on them (the model's shared
 * copy where there is one: made now unless another session made it) (f32 layers; f16/bf16
 * ones when max_tokens exceeds what runs on the file's rows), and the scale check of every
 * quantised matrix of dense layers and shared experts, so that the first fflite_session_run of
 * each layer costs what the later ones do and an OUT_OF_MEMORY or INVALID_MODEL shows here.
 * Routed experts stay prepared on use: the form an expert needs depends on how many tokens a call
 * gives it, and an expert budget decides which stay (fflite_session_options). Calling it again
 * does nothing more. Errors: INVALID_ARGUMENT (null), OUT_OF_MEMORY, INVALID_MODEL (naming the
 * layer and matrix); after an error the session stays usable. */
FFLITE_API fflite_status fflite_session_prepare(fflite_session* session);

/* The memory a session and its model hold (fflite_session_memory). Set struct_size =
 * sizeof(fflite_memory_info) before the call; fields are only ever appended, and only the first
 * struct_size bytes are written. */
typedef struct fflite_memory_info {
  size_t struct_size;
  uint64_t model_bytes;     /* the model file or buffer, mapped (pages are read on use) */
  uint64_t prepared_bytes;  /* prepared weights this session holds alone: routers, shared
                               experts, and the packed layers it cannot share */
  uint64_t expert_bytes;    /* routed experts' forms resident now, as the expert budget counts
                               them (packed forms, and the file bytes an expert runs on) */
  uint64_t expert_slot_bytes; /* the slots a budget on a file-backed model reserves (their
                               contents are among expert_bytes when in use) */
  uint64_t scratch_bytes;   /* buffers sized at creation for max_tokens (activations, routing) */
  uint64_t device_bytes;    /* device memory the session holds (cuda), 0 elsewhere */
  uint64_t model_prepared_bytes; /* prepared weights the model holds for all its sessions
                               (made by whichever session needed them first) */
} fflite_memory_info;

/* Fills *out_info for `session`. Errors: INVALID_ARGUMENT (null pointers, struct_size too
 * small). */
FFLITE_API fflite_status fflite_session_memory(const fflite_session* session,
                                               fflite_memory_info* out_info);

/* The backend the session runs on ("reference", "xnnpack", ...); a static string, "" for NULL. */
FFLITE_API const char* fflite_session_backend_name(const fflite_session* session);

/* Runs one layer: output[n_tokens, d_model] = layer(input[n_tokens, d_model]), f32, row-major.
 * input and output are the caller's: the same buffer (in place: output == input) or two that do
 * not overlap (a partial overlap is refused). What the layer includes (norm, residual):
 * fflite_model_layer_info. 1 <= n_tokens <= max_tokens.
 * Errors: INVALID_ARGUMENT (null pointers, partly overlapping buffers), OUT_OF_RANGE (layer,
 * n_tokens),
 * OUT_OF_MEMORY (the xnnpack backend prepares a dense layer's or a routed expert's weights the
 * first time a call needs them; only MoE routers and shared experts are packed at session
 * creation), INVALID_MODEL (a NaN or Inf scale in a quantised matrix the call reads, named with
 * its row and block; checked when a matrix is first read, not at load: every call that reads it
 * fails alike, and the session stays usable for the other layers).
 * NaN or Inf in the input propagate to the output; they never crash. */
FFLITE_API fflite_status fflite_session_run(fflite_session* session, int32_t layer,
                                            const float* input, size_t n_tokens, float* output);

/* fflite_session_run with input and output in the GPU's memory (cudaMalloc'd or managed), for
 * engines that keep activations on the device between sublayers. `stream` is a cudaStream_t
 * passed as void* (so this header needs no CUDA headers): the run is queued on it and the call
 * returns without waiting, except that an MoE layer waits once for its routing (to group tokens
 * by expert) when it does not run fused on the device: more than 8 tokens, a capture attached,
 * an input not 16-byte aligned, or experts the fused kernels do not take (mixed weight types,
 * rows not a multiple of 16 bytes, top_k above 32). With stream NULL the session's own stream
 * runs it and the call returns when the output is written. Same checks as fflite_session_run,
 * plus INVALID_ARGUMENT when a pointer is not device memory. Errors: UNSUPPORTED on backends
 * that run on host memory (reference, xnnpack); INTERNAL when the CUDA runtime reports an error
 * (the message names it). */
FFLITE_API fflite_status fflite_session_run_device(fflite_session* session, int32_t layer,
                                                   const float* input, size_t n_tokens,
                                                   float* output, void* stream);

/* What the session computes on: "cpu" for the CPU backends; for cuda the GPU's name, compute
 * capability and memory, e.g. "NVIDIA H200 (sm_90, 139.8 GiB, device 0)". A string owned by the
 * session; "" for NULL. */
FFLITE_API const char* fflite_session_device_name(const fflite_session* session);

/* Neuron edits. An FFN computes y = down(h) with h the hidden activations (after the activation,
 * and after the gate product for the GLU family), one per neuron i < d_ff. This sets a scale per
 * neuron, h_i <- scales[i] · h_i before the down projection (0 switches neuron i off), for the
 * session's later runs, without touching the model: the result equals a model whose down
 * column i is multiplied by scales[i], on every backend. `expert` is -1 for a dense layer's FFN,
 * or a routed expert's index (0 .. num_experts - 1) of an MoE layer (shared experts cannot be
 * edited). count must equal the FFN's d_ff (fflite_layer_info.d_ff); scales are copied and must
 * be finite. Errors: INVALID_ARGUMENT (null pointers, count, NaN or Inf, expert -1 on an MoE
 * layer or >= 0 on a dense one), OUT_OF_RANGE (layer, expert). */
FFLITE_API fflite_status fflite_session_set_neuron_scales(fflite_session* session, int32_t layer,
                                                          int32_t expert, const float* scales,
                                                          size_t count);

/* Removes the scales of that FFN (nothing to remove is fine). Errors as above. */
FFLITE_API fflite_status fflite_session_clear_neuron_scales(fflite_session* session,
                                                            int32_t layer, int32_t expert);

/* Capture: on every later run of `layer`, until cleared, copy what its FFNs computed into the
 * caller's buffers (host memory, also for fflite_session_run_device, which then waits for the
 * copies). For a run of n tokens, rows 0 .. n-1 are written:
 *   dense layer:  h[n][d_ff]: each token's hidden activations as fed to the down projection
 *                 (after the activation, the gate product of the GLU family and the neuron
 *                 edits; logical d_ff, padding left out). experts and weights must be NULL.
 *   MoE layer:    experts[n][top_k] (int32) and weights[n][top_k]: the routed experts each token
 *                 chose, in the router's rank order, and the weights their outputs were summed
 *                 with; h[n][top_k][d_ff]: the hidden activations of those experts for that
 *                 token, in the same order (shared experts are not captured). h may be NULL to
 *                 capture the routing only, or experts and weights NULL (both) for h only.
 * Capacities are in elements and must hold max_tokens rows: h_capacity >= max_tokens · d_ff
 * (· top_k for MoE), route_capacity >= max_tokens · top_k. The buffers stay the caller's and
 * must stay valid until cleared or the session is freed; setting again replaces them. A layer
 * without capture costs nothing. Errors: INVALID_ARGUMENT (null session, no buffer at all,
 * experts without weights or the reverse, routing buffers on a dense layer, a capacity too
 * small: the message names the size needed), OUT_OF_RANGE (layer). */
FFLITE_API fflite_status fflite_session_set_capture(fflite_session* session, int32_t layer,
                                                    float* h, size_t h_capacity,
                                                    int32_t* experts, float* weights,
                                                    size_t route_capacity);

/* Stops capturing `layer` (not capturing is fine). Errors: INVALID_ARGUMENT (null session),
 * OUT_OF_RANGE (layer). */
FFLITE_API fflite_status fflite_session_clear_capture(fflite_session* session, int32_t layer);

/* Routing statistics: how many tokens each expert of MoE `layer` received since the session was
 * created or its counts were last reset (a token routed to k experts counts once for each of
 * them). Writes the expert count to *out_num_experts (0 for a dense layer) and, when capacity is
 * at least that, the counts to out_counts[0 .. num_experts). out_counts may be NULL when capacity
 * is 0 (a size query). Errors: INVALID_ARGUMENT (null session or out_num_experts, capacity below
 * the expert count), OUT_OF_RANGE (layer), UNSUPPORTED (the backend keeps no statistics). */
FFLITE_API fflite_status fflite_session_expert_counts(const fflite_session* session,
                                                      int32_t layer, uint64_t* out_counts,
                                                      size_t capacity, size_t* out_num_experts);

/* Sets every routing count of the session to zero. Errors: INVALID_ARGUMENT (null session),
 * UNSUPPORTED (the backend keeps no statistics). */
FFLITE_API fflite_status fflite_session_reset_expert_counts(fflite_session* session);

/* How a session's routed experts were served since its creation (fflite_session_expert_stats).
 * With an expert budget on a model loaded from a file, the xnnpack backend reads each call's
 * missing experts ahead on a reader thread of the session while the first ones compute, and at
 * decode (at most 8 tokens) guesses the next MoE layer's experts (its router applied to this
 * layer's output) and starts reading them, so that the reads overlap what the caller runs in
 * between; the real routing decides what runs. Set struct_size = sizeof(fflite_expert_stats)
 * before the call; fields are only ever appended, and only the first struct_size bytes are
 * written. */
typedef struct fflite_expert_stats {
  size_t struct_size;
  uint64_t resident_bytes;        /* routed experts' forms resident now, as the budget counts */
  uint64_t hits;                  /* forms an expert's batch found resident */
  uint64_t misses;                /* forms made or read for a call (first uses included) */
  uint64_t slots;                 /* expert slots (a budget on a model loaded from a file) */
  uint64_t slot_bytes;            /* bytes of one slot */
  uint64_t reads;                 /* experts read from the file into a slot */
  uint64_t bytes_read_buffered;   /* of their bytes: read through the page cache */
  uint64_t bytes_read_direct;     /* read past it, from the storage (O_DIRECT) */
  double read_wait_seconds;       /* time the computation waited for those reads */
  uint64_t prefetches_used;       /* experts read ahead on a guess, then used (a hit) */
  uint64_t prefetches_wasted;     /* read ahead on a guess and dropped unused */
} fflite_expert_stats;

/* The session's routed-expert statistics. Errors: INVALID_ARGUMENT (null pointers, struct_size
 * too small). Backends that keep no such counters report zeros. */
FFLITE_API fflite_status fflite_session_expert_stats(const fflite_session* session,
                                                     fflite_expert_stats* out_stats);

/* ---- Platform ---------------------------------------------------------------------------- */

/* What the library detected about the CPU it runs on, so that a user on a device can tell which
 * code paths run. Set struct_size = sizeof(fflite_platform_info) before the call; fields are only
 * ever appended, and only the first struct_size bytes are written. Strings are NUL-terminated
 * (cut short if a name is longer than its field). */
typedef struct fflite_platform_info {
  size_t struct_size;
  char isa[16];           /* what this library was built for: "x86_64", "aarch64", "armv7", ... */
  char features[256];     /* SIMD features found at run time that kernels select on, separated by
                             spaces: "sse2 sse4.1 avx fma3 f16c avx2 avx512f ..." on x86,
                             "neon fp16arith dotprod bf16 sve sve2" on aarch64, "vfpv3 neon
                             neon-fp16 neon-fma neon-v8 fp16arith dotprod" on armv7; "" if the
                             CPU could not be probed */
  char cpu_name[64];      /* the processor's name as the OS reports it, or "" */
  char uarch[64];         /* distinct core types, e.g. "cortex-a76 cortex-a55", or "" */
  int32_t num_cores;      /* physical cores, >= 1 (on Linux as the kernel's topology says) */
  int32_t num_logical_cpus; /* hardware threads, >= num_cores */
  /* Appended in 0.2: the kernel sets the CPU backend chose on this CPU, e.g. "avx512" for the
   * f32/f16/bf16 matrix products, activations and norms ("avx512-streams" on AMD CPUs: the same
   * with one token's products read as 8 streams of rows); "avx512" for quantised weights with
   * float activations (decode); "avx512vnni" for quantised weights with int8 activations
   * (prefill). */
  char kernels[16];
  char quant_gemv_kernels[16];
  char quant_gemm_kernels[16];
  /* Appended in 0.2 too: what multiplies packed float weights at prefill (many tokens): "avx512",
   * "avx2" (fflite's own GEMM) or "xnnpack" for f32 weights; for bf16 weights "amx-bf16"
   * (AMX tiles) or "avx512bf16" when they are multiplied in bf16 (activations rounded to bf16;
   * not on Intel CPUs without AMX, where it is slower than f32 arithmetic), else "avx512-bf16w"
   * or "avx2-bf16w" where bf16 weights stay 16-bit in the packed panels and are widened to f32
   * as they are loaded (the f32 results, bit for bit, from half the bytes), else the same as for
   * f32. */
  char gemm_kernels[16];
  char bf16_gemm_kernels[16];
  /* Appended after those: the same for f16 weights: "avx512-f16w" or "avx2-f16w" (16-bit
   * panels, widened to f32 as they are loaded), else the same as for f32. */
  char f16_gemm_kernels[16];
  /* Appended in 0.3: the cores of the highest performance class and those within half of it
   * (big.LITTLE: the prime and big cores, not the little ones), from Linux's cpu_capacity or
   * the cores' top frequencies; num_cores where they do not differ or cannot be read. The
   * default thread count of a session. */
  int32_t num_fast_cores;
} fflite_platform_info;

/* Fills *out_info; the facts are detected on the first call and then cached. Thread-safe.
 * Errors: INVALID_ARGUMENT (null pointer, struct_size too small). */
FFLITE_API fflite_status fflite_platform_info_get(fflite_platform_info* out_info);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* FFLITE_FFLITE_H_ */
