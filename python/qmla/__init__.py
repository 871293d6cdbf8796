"""python/qmla — a ctypes binding of libqmla.so (issue 11) for NumPy users:

    import numpy as np, qmla
    xh = qmla.qdq(x, bits=4, group=64, meta="f16")     # the library quantizer
    m = qmla.Model("models/tiny-mla")                  # the C engine
    r = m.ppl(open("t.txt", "rb").read(), config="C4R4", policy="sink4/local128")
    r["bits_per_byte"]

The shared library is found through $QMLA_LIB, else build/python/libqmla.so
relative to the repository (meson setup build && ninja -C build). No build
step of its own: Debian's python3 and numpy suffice.
"""
import ctypes as C
import os

import numpy as np

__all__ = ["qdq", "Model", "QmlaError", "version", "lib_path"]


class QmlaError(RuntimeError):
    pass


class _Err(C.Structure):
    _fields_ = [("status", C.c_int), ("msg", C.c_char * 1024)]


class _QParams(C.Structure):
    _fields_ = [("bits", C.c_int), ("group", C.c_int), ("meta", C.c_int)]


class _Spec(C.Structure):
    _fields_ = [("c_bits", C.c_int), ("r_bits", C.c_int), ("group", C.c_int),
                ("meta", C.c_int), ("sink", C.c_int), ("window", C.c_int),
                ("hook", C.c_void_p), ("name", C.c_char * 32), ("policy", C.c_char * 32)]


class _Exec(C.Structure):
    _fields_ = [("threads", C.c_int)]


class _Res(C.Structure):
    _fields_ = [("nll_sum", C.c_double), ("tokens", C.c_size_t), ("windows", C.c_size_t),
                ("nll_nats_per_token", C.c_double), ("bits_per_byte", C.c_double)]


_META = {"f16": 0, "f32": 1, "q8": 2}


def lib_path():
    p = os.environ.get("QMLA_LIB")
    if p:
        return p
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "build", "python", "libqmla.so")


_lib = None


def _L():
    global _lib
    if _lib is None:
        lib = C.CDLL(lib_path())
        f = C.POINTER(C.c_float)
        lib.qmla_quant_qdq.argtypes = [C.POINTER(_QParams), f, C.c_size_t, C.c_size_t,
                                       C.c_void_p, C.c_void_p, C.c_void_p, f, C.POINTER(_Err)]
        lib.qmla_model_load.argtypes = [C.c_char_p, C.POINTER(C.c_void_p), C.POINTER(_Err)]
        lib.qmla_model_free.argtypes = [C.c_void_p]
        lib.qmla_model_n_params.argtypes = [C.c_void_p]
        lib.qmla_model_n_params.restype = C.c_size_t
        lib.qmla_cache_spec_parse.argtypes = [C.c_char_p, C.c_char_p, C.POINTER(_Spec),
                                              C.POINTER(_Err)]
        lib.qmla_model_ppl.argtypes = [C.c_void_p, C.POINTER(_Exec), C.POINTER(_Spec),
                                       C.c_char_p, C.c_size_t, C.c_size_t, C.c_size_t,
                                       C.POINTER(_Res), C.POINTER(_Err)]
        lib.qmla_blas_set_threads.argtypes = [C.c_int]
        lib.qmla_version.restype = C.c_char_p
        lib.qmla_blas_set_threads(1)
        _lib = lib
    return _lib


def _check(st, e):
    if st:
        raise QmlaError(e.msg.decode(errors="replace"))


def version():
    return _L().qmla_version().decode()


def qdq(x, bits=4, group=64, meta="f16"):
    """Quantize-dequantize x [T, width] (float32) per token in groups of
    `group` channels, exactly as docs/math.md §2 and lib/quant.c define it."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError("qdq: expected a 2-D array [tokens, width]")
    out = np.empty_like(x)
    p, e = _QParams(bits, group, _META[meta]), _Err()
    fp = C.POINTER(C.c_float)
    _check(_L().qmla_quant_qdq(C.byref(p), x.ctypes.data_as(fp), x.shape[0], x.shape[1],
                               None, None, None, out.ctypes.data_as(fp), C.byref(e)), e)
    return out


class Model:
    """An MLA checkpoint loaded by the C engine (qmla/model.h)."""

    def __init__(self, model_dir):
        self._h = C.c_void_p()
        e = _Err()
        _check(_L().qmla_model_load(os.fsencode(model_dir), C.byref(self._h), C.byref(e)), e)

    @property
    def n_params(self):
        return _L().qmla_model_n_params(self._h)

    def ppl(self, text, config="bf16", policy="none", context=512, windows=0, threads=1):
        """Bits per byte of `text` (bytes) under the training run's protocol
        (qmla_model_ppl): the first `windows` windows of `context` bytes."""
        s, e, r = _Spec(), _Err(), _Res()
        _check(_L().qmla_cache_spec_parse(config.encode(), policy.encode(), C.byref(s),
                                          C.byref(e)), e)
        ex = _Exec(threads)
        _check(_L().qmla_model_ppl(self._h, C.byref(ex), C.byref(s), bytes(text), len(text),
                                   context, windows, C.byref(r), C.byref(e)), e)
        return {"bits_per_byte": r.bits_per_byte, "nll_nats_per_token": r.nll_nats_per_token,
                "tokens": r.tokens, "windows": r.windows, "config": config, "policy": policy}

    def close(self):
        if self._h:
            _L().qmla_model_free(self._h)
            self._h = C.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
