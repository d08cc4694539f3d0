"""fflite for Python: the C API (fflite/fflite.h) through cffi, numpy arrays in and out.

The declarations are read from the installed header itself at import (no mirrored structs), and
the library is opened with dlopen:
  FFLITE_LIBRARY  path of libfflite.so (default: the system's library search, "libfflite.so")
  FFLITE_HEADER   path of fflite/fflite.h (default: next to the library, ../include/fflite/, or
                  /usr/local/include, /usr/include)
Arrays are passed without copies: inputs and outputs must be float32 (int32 for routing), C-
contiguous numpy arrays, else ValueError. Every failed call raises FfliteError with the status
name and fflite's message.
"""
import ctypes.util
import os
import re

import cffi
import numpy as np

__all__ = ["FfliteError", "Model", "Session", "platform_info", "version"]


def _header_text(path):
    """The header as cffi's cdef takes it: no comments, no preprocessor lines, no C++ guards."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    out, skip = [], 0
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            if s.startswith("#ifdef __cplusplus"):
                skip += 1
            elif skip and s.startswith("#endif"):
                skip -= 1
            continue
        if not skip:
            out.append(line)
    return "\n".join(out).replace("FFLITE_API", "")


def _find_library():
    path = os.environ.get("FFLITE_LIBRARY")
    if path:
        return path
    return ctypes.util.find_library("fflite") or "libfflite.so"


def _find_header(library):
    path = os.environ.get("FFLITE_HEADER")
    if path:
        return path
    candidates = []
    if os.path.isabs(library):
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(library)))
        candidates.append(os.path.join(prefix, "include", "fflite", "fflite.h"))
    candidates += ["/usr/local/include/fflite/fflite.h", "/usr/include/fflite/fflite.h"]
    for c in candidates:
        if os.path.exists(c):
            return c
    raise ImportError("fflite: fflite/fflite.h not found (set FFLITE_HEADER); looked in "
                      + ", ".join(candidates))


_library_path = _find_library()
ffi = cffi.FFI()
ffi.cdef(_header_text(_find_header(_library_path)))
lib = ffi.dlopen(_library_path)


class FfliteError(RuntimeError):
    """A failed fflite call: .status is the status name ("INVALID_MODEL", ...)."""

    def __init__(self, status, message):
        self.status = ffi.string(lib.fflite_status_name(status)).decode()
        self.message = message
        super().__init__("%s: %s" % (self.status, message))


def _check(status):
    if status != lib.FFLITE_STATUS_OK:
        raise FfliteError(status, ffi.string(lib.fflite_last_error_message()).decode())


def _array(a, dtype, what, writable=False):
    """a's buffer, shared (never copied): a must be a C-contiguous numpy array of dtype."""
    if not isinstance(a, np.ndarray) or a.dtype != dtype or not a.flags.c_contiguous:
        raise ValueError("%s must be a C-contiguous numpy array of %s (fflite does not copy it)"
                         % (what, np.dtype(dtype).name))
    if writable and not a.flags.writeable:
        raise ValueError("%s must be writable" % what)
    return ffi.from_buffer(ffi.typeof("float*" if dtype == np.float32 else "int32_t*"), a,
                           require_writable=writable)


def version():
    return ffi.string(lib.fflite_version()).decode()


def _struct_dict(s, skip=("struct_size",)):
    out = {}
    for name, _ in ffi.typeof(s[0]).fields:
        if name in skip:
            continue
        v = getattr(s, name)
        out[name] = ffi.string(v).decode() if isinstance(v, ffi.CData) else v
    return out


def platform_info():
    info = ffi.new("fflite_platform_info*")
    info.struct_size = ffi.sizeof("fflite_platform_info")
    _check(lib.fflite_platform_info_get(info))
    return _struct_dict(info)


_NAMES = {
    "kind": {1: "dense", 2: "moe"},
    "norm": {0: None, 1: "rms", 2: "layer"},
    "norm_placement": {0: None, 1: "pre", 2: "post", 3: "sandwich"},
}


class Model:
    """A .fflite file, mapped and validated (its metadata only). Immutable; shared by sessions."""

    def __init__(self, path):
        out = ffi.new("fflite_model**")
        _check(lib.fflite_model_load_file(os.fsencode(path), out))
        self._ptr = ffi.gc(out[0], lib.fflite_model_free)
        n = ffi.new("int32_t*")
        _check(lib.fflite_model_num_layers(self._ptr, n))
        self.num_layers = n[0]
        _check(lib.fflite_model_d_model(self._ptr, n))
        self.d_model = n[0]

    def layer_info(self, layer):
        """fflite_layer_info as a dict (kind, norm and norm_placement as names)."""
        info = ffi.new("fflite_layer_info*")
        info.struct_size = ffi.sizeof("fflite_layer_info")
        _check(lib.fflite_model_layer_info(self._ptr, layer, info))
        d = _struct_dict(info)
        for key, names in _NAMES.items():
            d[key] = names.get(d[key], d[key])
        return d


_BACKENDS = {"auto": 0, "reference": 1, "xnnpack": 2, "cuda": 3}
_ACTIVATIONS = {"auto": 0, "float": 1}


class Session:
    """A session over a Model (which it keeps alive): one thread at a time. threads=0: as many
    as the CPU's fast cores (fflite_session_options.num_threads)."""

    def __init__(self, model, threads=0, backend="auto", max_tokens=512, expert_budget_bytes=0,
                 activations="auto"):
        if backend not in _BACKENDS:
            raise ValueError("backend must be one of %s" % ", ".join(_BACKENDS))
        if activations not in _ACTIVATIONS:
            raise ValueError("activations must be 'auto' or 'float'")
        opts = ffi.new("fflite_session_options*")
        lib.fflite_session_options_init(opts)
        opts.num_threads = threads
        opts.backend = _BACKENDS[backend]
        opts.max_tokens = max_tokens
        opts.expert_budget_bytes = expert_budget_bytes
        opts.activations = _ACTIVATIONS[activations]
        out = ffi.new("fflite_session**")
        _check(lib.fflite_session_create(model._ptr, opts, out))
        self._ptr = ffi.gc(out[0], lib.fflite_session_free)
        self.model = model
        self.max_tokens = max_tokens
        self._captures = {}  # layer -> the arrays fflite writes into (kept alive here)

    @property
    def backend(self):
        return ffi.string(lib.fflite_session_backend_name(self._ptr)).decode()

    def run(self, layer, x, out=None):
        """out[n, d_model] = layer(x[n, d_model]); out may be x itself (in place). Returns out."""
        if not isinstance(x, np.ndarray) or x.ndim != 2 or x.shape[1] != self.model.d_model:
            raise ValueError("x must be a 2-D array [n_tokens, %d]" % self.model.d_model)
        if out is None:
            out = np.empty_like(x)
        elif not isinstance(out, np.ndarray) or out.shape != x.shape:
            raise ValueError("out must be an array of x's shape %s" % (x.shape,))
        px = _array(x, np.float32, "x")
        py = px if out is x else _array(out, np.float32, "out", writable=True)
        _check(lib.fflite_session_run(self._ptr, layer, px, x.shape[0], py))
        return out

    def prepare(self):
        _check(lib.fflite_session_prepare(self._ptr))

    def memory(self):
        info = ffi.new("fflite_memory_info*")
        info.struct_size = ffi.sizeof("fflite_memory_info")
        _check(lib.fflite_session_memory(self._ptr, info))
        return _struct_dict(info)

    def set_neuron_scales(self, layer, scales, expert=-1):
        """h_i <- scales[i] * h_i before the down projection of that FFN (0 silences neuron i)."""
        p = _array(scales, np.float32, "scales")
        _check(lib.fflite_session_set_neuron_scales(self._ptr, layer, expert, p, scales.size))

    def clear_neuron_scales(self, layer, expert=-1):
        _check(lib.fflite_session_clear_neuron_scales(self._ptr, layer, expert))

    def set_capture(self, layer, routing=False):
        """Captures the hidden activations h of `layer` on every later run, into arrays this
        returns (fflite writes them in place; rows 0 .. n-1 after a run of n tokens): h
        [max_tokens, d_ff] for a dense layer, [max_tokens, top_k, d_ff] for MoE; with routing
        (MoE) also experts [max_tokens, top_k] (int32) and weights [max_tokens, top_k]."""
        info = self.model.layer_info(layer)
        d_ff, k = info["d_ff"], info["top_k"]
        shape = (self.max_tokens, d_ff) if info["kind"] == "dense" else (self.max_tokens, k, d_ff)
        h = np.zeros(shape, np.float32)
        experts = weights = None
        pe = pw = ffi.NULL
        if routing:
            experts = np.zeros((self.max_tokens, k), np.int32)
            weights = np.zeros((self.max_tokens, k), np.float32)
            pe = _array(experts, np.int32, "experts", writable=True)
            pw = _array(weights, np.float32, "weights", writable=True)
        _check(lib.fflite_session_set_capture(self._ptr, layer,
                                              _array(h, np.float32, "h", writable=True), h.size,
                                              pe, pw, 0 if experts is None else experts.size))
        self._captures[layer] = (h, experts, weights)
        return (h, experts, weights) if routing else h

    def clear_capture(self, layer):
        _check(lib.fflite_session_clear_capture(self._ptr, layer))
        self._captures.pop(layer, None)
