"""python/qmla — a ctypes binding of libqmla.so (issue 11) for NumPy users:

    import numpy as np, qmla
    xh = qmla.qdq(x, bits=4, group=64, meta="f16")     # the library quantizer
    m = qmla.Model("models/tiny-mla")                  # the C engine
    r = m.ppl(open("t.txt", "rb").read(), config="C4R4", policy="sink4/local128")
    r["bits_per_byte"]
    tf = qmla.Transforms("qm.h5")                      # qmla learn's file
    y = tf.apply(3, c_kv, path="content")              # C T_C of layer 3
    e = tf.effective(3, c_kv, "content", bits=4)       # QDQ(C T_C) T_C^-1
    cap = qmla.Capture("data/tiny-mla-default.h5")     # the library's reader
    cap.cell(0, "prose-s0")["c_kv"]                    # [N, T, d_c] float32
    qmla.qdq_cuda(ptr, T, width, bits=4)               # device memory, in place
    qmla.qdq_torch(t, bits=4)                          # a torch tensor, CPU or GPU
    qmla.learn("data/tiny-mla-default.h5", "qm.h5", train_cells="prose-s0")
    qmla.evaluate("data/tiny-mla-default.h5", "ev.h5", transforms=["qm.h5"], config="C4R4")
    qmla.sweep(cap, "sw.h5"); qmla.jvp / predict / intervene / capture / ppl_run

docs/python.md documents every call. The shared library is found through $QMLA_LIB, else build/python/libqmla.so
relative to the repository (meson setup build && ninja -C build). No build
step of its own: Debian's python3 and numpy suffice.
"""
import ctypes as C
import math
import numbers
import os

import numpy as np

__all__ = ["qdq", "qdq_cuda", "qdq_cuda_ws_init", "qdq_torch", "cuda_available", "Model", "Transforms",
           "Capture", "QmlaError", "version", "lib_path", "run_driver", "sweep", "jvp", "predict",
           "intervene", "learn", "evaluate", "capture", "ppl_run"]


class QmlaError(RuntimeError):
    """A refusal of libqmla: str(e) is the library's message (naming the file,
    dataset, expected and found); e.status the status name ("EFORMAT")."""

    def __init__(self, msg, status=""):
        super().__init__(msg)
        self.status = status


class _Err(C.Structure):
    _fields_ = [("status", C.c_int), ("msg", C.c_char * 1024)]


class _QParams(C.Structure):
    _fields_ = [("bits", C.c_int), ("group", C.c_int), ("meta", C.c_int)]


class _Spec(C.Structure):
    _fields_ = [("c_bits", C.c_int), ("r_bits", C.c_int), ("group", C.c_int),
                ("meta", C.c_int), ("sink", C.c_int), ("window", C.c_int),
                ("hook", C.c_void_p), ("name", C.c_char * 32), ("policy", C.c_char * 32),
                ("layer_bits", (C.c_ubyte * 2) * 128), ("n_layer_bits", C.c_int)]


class _Exec(C.Structure):
    _fields_ = [("threads", C.c_int)]


class _Res(C.Structure):
    _fields_ = [("nll_sum", C.c_double), ("tokens", C.c_size_t), ("windows", C.c_size_t),
                ("nll_nats_per_token", C.c_double), ("bits_per_byte", C.c_double),
                ("has_kl", C.c_int), ("kl_mean", C.c_double), ("kl_ci_lo", C.c_double),
                ("kl_ci_hi", C.c_double), ("kl_p99", C.c_double),
                ("top1_agreement", C.c_double)]


_META = {"f16": 0, "f32": 1, "q8": 2}


def lib_path():
    p = os.environ.get("QMLA_LIB")
    if p:
        return p
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "build", "python", "libqmla.so")


_lib = None


def _abi_classes():
    """The ctypes mirror of each C struct the binding passes to the library."""
    return {"qmla_error": _Err, "qmla_quant_params": _QParams, "qmla_cache_spec": _Spec,
            "qmla_exec": _Exec, "qmla_ppl_result": _Res, "qmla_transform": _Transform,
            "qmla_transform_meta": _TMeta, "qmla_transform_file": _TFile,
            "qmla_capture_config": _CapConfig, "qmla_layer": _Layer, "qmla_cell": _Cell}


def _abi_layouts(lib):
    """The library's own layout table (python/abi.c, compiled from the
    headers): {struct: (size, [(field, offset, size), ...])}."""
    lib.qmla_abi_count.restype = C.c_size_t
    lib.qmla_abi_entry.argtypes = [C.c_size_t, C.POINTER(C.c_char_p), C.POINTER(C.c_char_p),
                                   C.POINTER(C.c_size_t), C.POINTER(C.c_size_t)]
    out = {}
    t, f, off, size = C.c_char_p(), C.c_char_p(), C.c_size_t(), C.c_size_t()
    for i in range(lib.qmla_abi_count()):
        lib.qmla_abi_entry(i, C.byref(t), C.byref(f), C.byref(off), C.byref(size))
        size_fields = out.setdefault(t.value.decode(), [None, []])
        if f.value is None:
            size_fields[0] = size.value
        else:
            size_fields[1].append((f.value.decode(), off.value, size.value))
    return {k: (v[0], v[1]) for k, v in out.items()}


def _abi_problems(lib, classes):
    """Each difference between the ctypes classes and the library's layouts,
    as a sentence; [] when they agree field for field (name, offset, size,
    order) and in size."""
    c = _abi_layouts(lib)
    problems = []
    for name, cls in classes.items():
        if name not in c:
            problems.append("%s: the library has no layout for it" % name)
            continue
        size, fields = c[name]
        mine = [(f[0], getattr(cls, f[0]).offset, getattr(cls, f[0]).size) for f in cls._fields_]
        if mine != fields:
            problems.append("%s: binding fields %s, library %s" % (name, mine, fields))
        if C.sizeof(cls) != size:
            problems.append("%s: binding size %d, library %d" % (name, C.sizeof(cls), size))
    return problems


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
        lib.qmla_model_vocab_size.argtypes = [C.c_void_p]
        lib.qmla_model_vocab_size.restype = C.c_size_t
        lib.qmla_cache_spec_parse.argtypes = [C.c_char_p, C.c_char_p, C.POINTER(_Spec),
                                              C.POINTER(_Err)]
        lib.qmla_model_ppl.argtypes = [C.c_void_p, C.POINTER(_Exec), C.POINTER(_Spec),
                                       C.c_char_p, C.c_size_t, C.c_size_t, C.c_size_t,
                                       C.POINTER(_Res), C.POINTER(_Err)]
        lib.qmla_model_ppl_kl.argtypes = [C.c_void_p, C.POINTER(_Exec), C.POINTER(_Spec),
                                          C.c_size_t, C.POINTER(_Spec), C.c_char_p, C.c_size_t,
                                          C.c_size_t, C.c_size_t, C.POINTER(_Res),
                                          C.POINTER(_Err)]
        lib.qmla_model_ws_alloc.argtypes = [C.c_void_p, C.c_size_t, C.POINTER(C.c_void_p),
                                            C.POINTER(_Err)]
        lib.qmla_model_ws_free.argtypes = [C.c_void_p]
        lib.qmla_model_forward.argtypes = [C.c_void_p, C.POINTER(_Spec), C.c_void_p,
                                           C.POINTER(C.c_int32), C.c_size_t,
                                           C.POINTER(C.c_float), C.POINTER(_Err)]
        lib.qmla_blas_set_threads.argtypes = [C.c_int]
        lib.qmla_version.restype = C.c_char_p
        lib.qmla_status_name.argtypes = [C.c_int]
        lib.qmla_status_name.restype = C.c_char_p
        _declare_transforms(lib)
        _declare_capture(lib)
        _declare_cuda(lib)
        _declare_jobs(lib)
        problems = _abi_problems(lib, _abi_classes())
        if problems:
            raise QmlaError("python/qmla does not match the library it loaded (%s): %s"
                            % (lib_path(), "; ".join(problems)), "EINTERNAL")
        lib.qmla_blas_set_threads(1)
        _lib = lib
    return _lib


def _check(st, e):
    if st:
        L = _L()
        raise QmlaError(e.msg.decode(errors="replace"), L.qmla_status_name(st).decode())


# ---------------------------------------------------------------------------
# arguments: refused, never converted (ctypes wraps 2**32 + 4 to 4, int()
# truncates 4.9 to 4 and 1.7 to 1, a negative size_t becomes huge)
# ---------------------------------------------------------------------------
THREADS_MAX = 1024  # the qmla command's --threads bound (cli/cli_util.c)
_INT_MAX = 2 ** 31 - 1
_SIZE_MAX = 2 ** 63 - 1


def _int(name, v, lo, hi):
    """v as a Python int when it is an integer (not a bool, not a float) in
    lo..hi; else ValueError naming the argument, the range and the value."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise ValueError(f"{name}: expected an integer in {lo}..{hi}, found {v!r} "
                         f"({type(v).__name__})")
    v = int(v)
    if not lo <= v <= hi:
        raise ValueError(f"{name}: expected an integer in {lo}..{hi}, found {v}")
    return v


def _num(name, v, lo=-math.inf, hi=math.inf):
    """v as a finite float in lo..hi (ints accepted, bools, NaN and inf not)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise ValueError(f"{name}: expected a finite number in {lo:g}..{hi:g}, found {v!r} "
                         f"({type(v).__name__})")
    f = float(v)
    if not (math.isfinite(f) and lo <= f <= hi):
        raise ValueError(f"{name}: expected a finite number in {lo:g}..{hi:g}, found {v!r}")
    return f


def _threads(v):
    return _int("threads", v, 1, THREADS_MAX)


def version():
    return _L().qmla_version().decode()


def qdq(x, bits=4, group=64, meta="f16"):
    """Quantize-dequantize x [T, width] (float32) per token in groups of
    `group` channels, exactly as docs/math.md §2 and lib/quant/quant.c define it."""
    p, e = _qparams(bits, group, meta), _Err()
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError("qdq: expected a 2-D array [tokens, width]")
    out = np.empty_like(x)
    fp = C.POINTER(C.c_float)
    _check(_L().qmla_quant_qdq(C.byref(p), x.ctypes.data_as(fp), x.shape[0], x.shape[1],
                               None, None, None, out.ctypes.data_as(fp), C.byref(e)), e)
    return out


class Model:
    """An MLA checkpoint loaded by the C engine (include/qmla/model.h)."""

    def __init__(self, model_dir):
        self.path = os.fsdecode(model_dir)
        self._h = C.c_void_p()
        e = _Err()
        _check(_L().qmla_model_load(os.fsencode(model_dir), C.byref(self._h), C.byref(e)), e)

    def _handle(self):
        """The library's handle; QmlaError once close() has freed it (the
        library was called with NULL and crashed)."""
        if not self._h:
            raise QmlaError(f"{self.path}: the Model is closed", "EINVAL")
        return self._h

    @property
    def n_params(self):
        return _L().qmla_model_n_params(self._handle())

    def ppl(self, text, config="bf16", policy="none", context=512, windows=0, threads=1,
            kl_ref="auto"):
        """Bits per byte of `text` (bytes) under the training run's protocol
        (qmla_model_ppl): the first `windows` windows of `context` bytes.
        kl_ref ("fp32", "bf16", None; "auto": fp32 for a quantized config,
        else None): with a reference, the dict also holds the KL from it
        (qmla_model_ppl_kl): kl_ref, kl_mean_nats, kl_ci95_lo, kl_ci95_hi
        (NaN for one window), kl_p99_nats, top1_agreement."""
        h = self._handle()
        ex = _Exec(_threads(threads))
        context = _int("context", context, 1, _SIZE_MAX)
        windows = _int("windows", windows, 0, _SIZE_MAX)
        if not isinstance(config, str) or not isinstance(policy, str):
            raise ValueError(f"config, policy: expected strings, found {config!r}, {policy!r}")
        if not isinstance(text, (bytes, bytearray, memoryview)):
            raise ValueError(f"text: expected bytes, found {type(text).__name__}")
        s, e, r = _Spec(), _Err(), _Res()
        _check(_L().qmla_cache_spec_parse(config.encode(), policy.encode(), C.byref(s),
                                          C.byref(e)), e)
        if kl_ref == "auto":
            kl_ref = None if s.c_bits in (32, 16) else "fp32"  # QMLA_CACHE_FP32 / _BF16
        if kl_ref not in (None, "fp32", "bf16"):
            raise ValueError(f"kl_ref: expected 'fp32', 'bf16', None or 'auto', found {kl_ref!r}")
        if kl_ref is None:
            _check(_L().qmla_model_ppl(h, C.byref(ex), C.byref(s), bytes(text), len(text),
                                       context, windows, C.byref(r), C.byref(e)), e)
        else:
            rs = _Spec()
            _check(_L().qmla_cache_spec_parse(kl_ref.encode(), b"none", C.byref(rs),
                                              C.byref(e)), e)
            _check(_L().qmla_model_ppl_kl(h, C.byref(ex), C.byref(s), 1, C.byref(rs),
                                          bytes(text), len(text), context, windows, C.byref(r),
                                          C.byref(e)), e)
        out = {"bits_per_byte": r.bits_per_byte, "nll_nats_per_token": r.nll_nats_per_token,
               "tokens": r.tokens, "windows": r.windows, "config": config, "policy": policy}
        if r.has_kl:
            out.update(kl_ref=kl_ref, kl_mean_nats=r.kl_mean, kl_ci95_lo=r.kl_ci_lo,
                       kl_ci95_hi=r.kl_ci_hi, kl_p99_nats=r.kl_p99,
                       top1_agreement=r.top1_agreement)
        return out

    def logits(self, tokens, config="fp32", policy="none"):
        """Logits [T, V] (float32) of one sequence of token ids under a cache
        configuration (qmla_model_forward, single threaded): the rows that
        `ppl` scores for a window are those of [BOS] + window[:-1]."""
        h = self._handle()
        if not isinstance(config, str) or not isinstance(policy, str):
            raise ValueError(f"config, policy: expected strings, found {config!r}, {policy!r}")
        t = np.ascontiguousarray(tokens, dtype=np.int32)
        if t.ndim != 1 or t.size == 0:
            raise ValueError("tokens: expected a non-empty 1-D sequence of ids")
        s, e, ws = _Spec(), _Err(), C.c_void_p()
        _check(_L().qmla_cache_spec_parse(config.encode(), policy.encode(), C.byref(s),
                                          C.byref(e)), e)
        _check(_L().qmla_model_ws_alloc(h, t.size, C.byref(ws), C.byref(e)), e)
        try:
            out = np.empty((t.size, _L().qmla_model_vocab_size(h)), dtype=np.float32)
            _check(_L().qmla_model_forward(h, C.byref(s), ws, t.ctypes.data_as(
                C.POINTER(C.c_int32)), t.size, out.ctypes.data_as(C.POINTER(C.c_float)),
                C.byref(e)), e)
        finally:
            _L().qmla_model_ws_free(ws)
        return out

    def close(self):
        if self._h:
            _L().qmla_model_free(self._h)
            self._h = C.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------
# the quantizer's parameters (shared by qdq, Transforms.effective, qdq_cuda)
# ---------------------------------------------------------------------------
def _qparams(bits, group, meta):
    if not isinstance(meta, str) or meta not in _META:
        raise ValueError(f"meta {meta!r}: expected one of {', '.join(_META)}")
    # integers in range here; which of them the quantizer supports (2, 3, 4, 8)
    # it says itself (QmlaError)
    bits = _int("bits", bits, 1, 64)
    return _QParams(bits, _int("group", group, 1, _INT_MAX), _META[meta])


def _rows(x, width, what):
    """x [..., width] as a C-contiguous float32 2-D array [n, width] and the
    original shape."""
    a = np.ascontiguousarray(x, dtype=np.float32)
    if a.ndim < 1 or a.shape[-1] != width:
        raise ValueError(f"{what}: expected an array [..., {width}], got shape {a.shape}")
    return a.reshape(-1, width), a.shape


_FP = C.POINTER(C.c_float)
_DP = C.POINTER(C.c_double)


def _fp(a):
    return a.ctypes.data_as(_FP)


def _copy(ptr, shape, dtype=np.float32):
    """A NumPy copy of `shape` elements at the C pointer `ptr` (None: NULL)."""
    if not ptr:
        return None
    return np.ctypeslib.as_array(ptr, shape=tuple(int(s) for s in shape)).astype(dtype, copy=True)


# ---------------------------------------------------------------------------
# transforms files (include/qmla/transform.h, docs/transforms-format.md)
# ---------------------------------------------------------------------------
class _Transform(C.Structure):
    _fields_ = [("layer", C.c_int), ("d_c", C.c_size_t), ("d_r", C.c_size_t),
                ("pairing", C.c_int), ("rot", _DP), ("cscale", _DP), ("angle", _DP),
                ("rscale", _DP)]


class _TMeta(C.Structure):
    _fields_ = [("method", C.c_int), ("config", C.c_char * 16), ("alpha", C.c_double),
                ("train_cells", C.c_char * 256), ("capture", C.c_char * 512),
                ("command", C.c_char * 1024), ("settings", C.c_char * 512),
                ("complete", C.c_int), ("capture_sha256", C.c_char * 65)]


class _TFile(C.Structure):
    _fields_ = [("meta", _TMeta), ("n", C.c_size_t), ("t", C.POINTER(_Transform)),
                ("gamma", C.POINTER(_FP)), ("obj", _DP)]


_TMAP = {"fwd": 0, "inv": 1, "invT": 2}
_PATHS = ("content", "rope")
_PAIRING = {0: "interleaved", 1: "half"}
_OBJ = ("objective_content_init", "objective_content_best", "objective_rope_init",
        "objective_rope_best")


def _declare_transforms(lib):
    T, E = C.POINTER(_Transform), C.POINTER(_Err)
    lib.qmla_transform_file_read.argtypes = [C.c_char_p, C.POINTER(_TFile), E]
    lib.qmla_transform_file_free.argtypes = [C.POINTER(_TFile)]
    lib.qmla_transform_content_apply.argtypes = [C.POINTER(_Exec), T, _FP, C.c_int, _FP,
                                                 C.c_size_t, _FP]
    lib.qmla_transform_content_apply.restype = None
    lib.qmla_transform_rope_apply.argtypes = [T, C.c_int, _FP, C.c_size_t, _FP]
    lib.qmla_transform_rope_apply.restype = None
    lib.qmla_transform_content_mats.argtypes = [T, _FP, _DP, _DP]
    lib.qmla_transform_content_mats.restype = None
    lib.qmla_transform_effective_content.argtypes = [
        C.POINTER(_Exec), T, _FP, C.POINTER(_QParams), _FP, C.c_size_t, C.c_size_t,
        C.c_size_t, _FP, _FP, E]
    lib.qmla_transform_effective_rope.argtypes = [
        T, C.POINTER(_QParams), _FP, C.c_size_t, C.c_size_t, C.c_size_t, _FP, _FP, E]
    lib.qmla_tmethod_name.argtypes = [C.c_int]
    lib.qmla_tmethod_name.restype = C.c_char_p


class _Closable:
    """with-statement and garbage-collection support for a close() method."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Transforms(_Closable):
    """A transforms file of `qmla learn` (docs/transforms-format.md), read and
    validated by qmla_transform_file_read: per layer the content transform
    T_C = diag(γ)^-1 R diag(s) and the RoPE transform T_P = blockdiag(s_i R(θ_i)),
    applied to row vectors from the right (X -> X T) by the library's own
    qmla_transform_content_apply / qmla_transform_rope_apply.

    tf.layers             layer indices present, ascending file order
    tf.meta               method, config, alpha (SmoothQuant α or NaN), settings,
                          complete
    tf.layer(l)           dict: d_c, d_r, pairing, rotation [d_c, d_c], content_scale
                          [d_c], gamma [d_c] (float32), angle, rope_scale [d_r/2],
                          and the four objective values
    tf.apply(l, x, path="content"|"rope", map="fwd"|"inv"|"invT")
                          x [..., width] float32 -> X T, X T^-1 or X T^-T
    tf.effective(l, x, path, bits=4, group=64, meta="f16", sink=0, local=0)
                          the effective quantized cache QDQ(X T) T^-1 (tokens
                          t < sink and t >= n - local keep their values)
    tf.content_matrices(l) dense (T_C, T_C^-T) [d_c, d_c] float64
    """

    def __init__(self, path, threads=1):
        self.path = os.fspath(path)
        self._f = _TFile()
        self._open = False
        self._ex = _Exec(_threads(threads))
        e = _Err()
        _check(_L().qmla_transform_file_read(os.fsencode(self.path), C.byref(self._f),
                                             C.byref(e)), e)
        self._open = True
        self._index = {self._f.t[i].layer: i for i in range(self._f.n)}

    def _check_open(self):
        if not self._open:
            raise QmlaError(f"{self.path}: the Transforms file is closed", "EINVAL")

    @property
    def layers(self):
        self._check_open()
        return [self._f.t[i].layer for i in range(self._f.n)]

    @property
    def meta(self):
        self._check_open()
        m = self._f.meta
        s = lambda b: b.decode(errors="replace")  # noqa: E731
        # what qmla_transform_file_read reads (train_cells, capture and command
        # are provenance it leaves unread: h5py shows them)
        return {"method": _L().qmla_tmethod_name(m.method).decode(), "config": s(m.config),
                "alpha": m.alpha, "settings": s(m.settings), "complete": bool(m.complete)}

    def _t(self, layer):
        self._check_open()
        i = self._index.get(_int("layer", layer, -_INT_MAX - 1, _INT_MAX))
        if i is None:
            raise QmlaError(f"{self.path}: no transform for layer {layer} (layers "
                            f"{', '.join(map(str, self.layers)) or 'none'})", "EINVAL")
        return i, self._f.t[i], self._f.gamma[i]

    def layer(self, layer):
        i, t, g = self._t(layer)
        h = t.d_r // 2
        d = {"layer": t.layer, "d_c": t.d_c, "d_r": t.d_r, "pairing": _PAIRING[t.pairing],
             "rotation": _copy(t.rot, (t.d_c, t.d_c), np.float64),
             "content_scale": _copy(t.cscale, (t.d_c,), np.float64),
             "gamma": _copy(g, (t.d_c,)),
             "angle": _copy(t.angle, (h,), np.float64) if h else np.zeros(0),
             "rope_scale": _copy(t.rscale, (h,), np.float64) if h else np.zeros(0)}
        for k, name in enumerate(_OBJ):
            d[name] = self._f.obj[i * len(_OBJ) + k] if self._f.obj else float("nan")
        return d

    def _width(self, t, path):
        if path not in _PATHS:
            raise ValueError(f"path {path!r}: expected 'content' or 'rope'")
        return t.d_c if path == "content" else t.d_r

    def apply(self, layer, x, path="content", map="fwd"):
        """X T (map "fwd"), X T^-1 ("inv") or X T^-T ("invT") for the rows of x
        [..., width] (width d_c for "content", d_r for "rope"), float32 in and
        out, accumulated in double by the library."""
        _, t, g = self._t(layer)
        if map not in _TMAP:
            raise ValueError(f"map {map!r}: expected fwd, inv or invT")
        a, shape = _rows(x, self._width(t, path), f"layer {layer} {path} transform")
        out = np.empty_like(a)
        if path == "content":
            _L().qmla_transform_content_apply(C.byref(self._ex), C.byref(t), g, _TMAP[map],
                                              _fp(a), a.shape[0], _fp(out))
        else:
            _L().qmla_transform_rope_apply(C.byref(t), _TMAP[map], _fp(a), a.shape[0], _fp(out))
        return out.reshape(shape)

    def effective(self, layer, x, path="content", bits=4, group=64, meta="f16", sink=0,
                  local=0, quantize=True):
        """The effective cache QDQ(X T) T^-1 of the tokens x [T, width]
        (qmla_transform_effective_content / _rope); quantize=False gives
        X T T^-1 (the fusion round trip)."""
        _, t, g = self._t(layer)
        sink = _int("sink", sink, 0, _SIZE_MAX)
        local = _int("local", local, 0, _SIZE_MAX)
        if not isinstance(quantize, (bool, np.bool_)):
            raise ValueError(f"quantize: expected True or False, found {quantize!r}")
        p, e = _qparams(bits, group, meta), _Err()
        a, shape = _rows(x, self._width(t, path), f"layer {layer} {path} cache")
        work, out = np.empty_like(a), np.empty_like(a)
        pp = C.byref(p) if quantize else None
        if path == "content":
            st = _L().qmla_transform_effective_content(C.byref(self._ex), C.byref(t), g, pp,
                                                       _fp(a), a.shape[0], sink,
                                                       local, _fp(work), _fp(out),
                                                       C.byref(e))
        else:
            st = _L().qmla_transform_effective_rope(C.byref(t), pp, _fp(a), a.shape[0],
                                                    sink, local, _fp(work),
                                                    _fp(out), C.byref(e))
        if st:
            e.msg = (f"{self.path}: layer {layer}: ".encode() + e.msg)[:1023]
        _check(st, e)
        return out.reshape(shape)

    def content_matrices(self, layer):
        """Dense (T_C, T_C^-T), [d_c, d_c] float64 (qmla_transform_content_mats)."""
        _, t, g = self._t(layer)
        a, b = np.empty((t.d_c, t.d_c)), np.empty((t.d_c, t.d_c))
        _L().qmla_transform_content_mats(C.byref(t), g, a.ctypes.data_as(_DP),
                                         b.ctypes.data_as(_DP))
        return a, b

    def close(self):
        if self._open:
            _L().qmla_transform_file_free(C.byref(self._f))
            self._open = False


# ---------------------------------------------------------------------------
# capture files (include/qmla/capture.h, docs/capture-format.md)
# ---------------------------------------------------------------------------
class _CapConfig(C.Structure):
    _fields_ = [("n_layers", C.c_int), ("H", C.c_int), ("D", C.c_int), ("d_c", C.c_int),
                ("d_n", C.c_int), ("d_r", C.c_int), ("d_v", C.c_int),
                ("softmax_scale", C.c_double), ("rope_pairing", C.c_int),
                ("rms_norm_eps", C.c_double), ("model", C.c_char * 256),
                ("source", C.c_char * 512), ("has_check_tolerance", C.c_int),
                ("check_tolerance", C.c_double), ("synthetic", C.c_int)]


class _Layer(C.Structure):
    _fields_ = [("layer", C.c_int), ("w_uk", _FP), ("w_uv", _FP), ("w_o", _FP),
                ("kv_norm", _FP)]


class _Cell(C.Structure):
    _fields_ = [("name", C.c_char * 128), ("dataset", C.c_char * 128), ("seed", C.c_long),
                ("N", C.c_size_t), ("T", C.c_size_t), ("c_kv", _FP), ("k_rope", _FP),
                ("q_nope", _FP), ("q_rope", _FP), ("attn_out", _FP),
                ("positions", C.POINTER(C.c_int64)), ("k_rope_pre", _FP),
                ("q_rope_pre", _FP), ("rope_cos", _FP), ("rope_sin", _FP)]


_PARTS = {"output": 1, "positions": 2, "pre": 4}


def _declare_capture(lib):
    E, P = C.POINTER(_Err), C.c_void_p
    lib.qmla_capture_open.argtypes = [C.c_char_p, C.POINTER(C.c_void_p), E]
    lib.qmla_capture_close.argtypes = [P]
    lib.qmla_capture_get_config.argtypes = [P]
    lib.qmla_capture_get_config.restype = C.POINTER(_CapConfig)
    lib.qmla_capture_n_layers.argtypes = [P]
    lib.qmla_capture_n_layers.restype = C.c_size_t
    lib.qmla_capture_layer_index.argtypes = [P, C.c_size_t]
    lib.qmla_capture_n_cells.argtypes = [P, C.c_size_t]
    lib.qmla_capture_n_cells.restype = C.c_size_t
    lib.qmla_capture_cell_name.argtypes = [P, C.c_size_t, C.c_size_t]
    lib.qmla_capture_cell_name.restype = C.c_char_p
    lib.qmla_capture_cell_n.argtypes = [P, C.c_size_t, C.c_size_t]
    lib.qmla_capture_cell_n.restype = C.c_size_t
    lib.qmla_capture_cell_t.argtypes = [P, C.c_size_t, C.c_size_t]
    lib.qmla_capture_cell_t.restype = C.c_size_t
    lib.qmla_capture_load_layer.argtypes = [P, C.c_size_t, C.POINTER(_Layer), E]
    lib.qmla_layer_free.argtypes = [C.POINTER(_Layer)]
    lib.qmla_capture_load_cell_parts.argtypes = [P, C.c_size_t, C.c_size_t, C.c_uint,
                                                 C.POINTER(_Cell), E]
    lib.qmla_cell_free.argtypes = [C.POINTER(_Cell)]


class Capture(_Closable):
    """A qmla-capture v1 file opened by the library's reader (qmla_capture_open:
    the whole structure validated on open; each tensor converted to float32
    and checked finite when read), so Python sees what `qmla sweep` sees.

    cap.config              dict of /config and the root attributes
    cap.layers              layer indices present
    cap.cells(l)            cell names of layer l, sorted
    cap.shape(l, cell)      (N, T)
    cap.weights(l)          dict w_uk [H, d_n, d_c], w_uv [H, d_v, d_c],
                            w_o [D, H*d_v], kv_norm [d_c]
    cap.cell(l, cell, parts=("output", "positions", "pre"))
                            dict c_kv [N, T, d_c], k_rope [N, T, d_r],
                            q_nope [N, H, T, d_n], q_rope [N, H, T, d_r] and the
                            parts asked for (attn_out, positions; k_rope_pre,
                            q_rope_pre, rope_cos, rope_sin when present)
    cap.latent(l, cell), cap.rope_key(l, cell), cap.queries(l, cell)
                            c_kv; k_rope; (q_nope, q_rope)
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._h = C.c_void_p()
        e = _Err()
        _check(_L().qmla_capture_open(os.fsencode(self.path), C.byref(self._h), C.byref(e)), e)

    def _handle(self):
        if not self._h:
            raise QmlaError(f"{self.path}: the Capture is closed", "EINVAL")
        return self._h

    @property
    def config(self):
        c = _L().qmla_capture_get_config(self._handle()).contents
        s = lambda b: b.decode(errors="replace")  # noqa: E731
        return {"n_layers": c.n_layers, "H": c.H, "D": c.D, "d_c": c.d_c, "d_n": c.d_n,
                "d_r": c.d_r, "d_v": c.d_v, "softmax_scale": c.softmax_scale,
                "rope_pairing": _PAIRING[c.rope_pairing], "rms_norm_eps": c.rms_norm_eps,
                "model": s(c.model), "source": s(c.source),
                "check_tolerance": c.check_tolerance if c.has_check_tolerance else None,
                "synthetic": bool(c.synthetic)}

    @property
    def layers(self):
        h = self._handle()
        return [_L().qmla_capture_layer_index(h, i) for i in range(_L().qmla_capture_n_layers(h))]

    def _li(self, layer):
        layer = _int("layer", layer, -_INT_MAX - 1, _INT_MAX)
        try:
            return self.layers.index(layer)
        except ValueError:
            raise QmlaError(f"{self.path}: no layer {layer} (layers "
                            f"{', '.join(map(str, self.layers))})", "EINVAL") from None

    def cells(self, layer):
        h, li = self._handle(), self._li(layer)
        return [_L().qmla_capture_cell_name(h, li, i).decode()
                for i in range(_L().qmla_capture_n_cells(h, li))]

    def _ci(self, layer, cell):
        li = self._li(layer)
        names = self.cells(layer)
        if cell not in names:
            raise QmlaError(f"{self.path}: layer {layer} has no cell {cell!r} (cells "
                            f"{', '.join(names)})", "EINVAL")
        return li, names.index(cell)

    def shape(self, layer, cell):
        li, ci = self._ci(layer, cell)
        h = self._handle()
        return _L().qmla_capture_cell_n(h, li, ci), _L().qmla_capture_cell_t(h, li, ci)

    def weights(self, layer):
        li = self._li(layer)
        c = self.config
        H, D, dc, dn, dv = c["H"], c["D"], c["d_c"], c["d_n"], c["d_v"]
        w, e = _Layer(), _Err()
        try:
            _check(_L().qmla_capture_load_layer(self._handle(), li, C.byref(w), C.byref(e)), e)
            return {"w_uk": _copy(w.w_uk, (H, dn, dc)), "w_uv": _copy(w.w_uv, (H, dv, dc)),
                    "w_o": _copy(w.w_o, (D, H * dv)), "kv_norm": _copy(w.kv_norm, (dc,))}
        finally:
            _L().qmla_layer_free(C.byref(w))

    def cell(self, layer, cell, parts=("output", "positions", "pre")):
        li, ci = self._ci(layer, cell)
        bad = [p for p in parts if p not in _PARTS]
        if bad:
            raise ValueError(f"parts {bad}: expected a subset of {tuple(_PARTS)}")
        mask = sum(_PARTS[p] for p in set(parts))
        c = self.config
        H, D, dc, dn, dr = c["H"], c["D"], c["d_c"], c["d_n"], c["d_r"]
        x, e = _Cell(), _Err()
        try:
            _check(_L().qmla_capture_load_cell_parts(self._handle(), li, ci, mask, C.byref(x),
                                                     C.byref(e)), e)
            N, T = x.N, x.T
            out = {"name": x.name.decode(), "dataset": x.dataset.decode(), "seed": x.seed,
                   "N": N, "T": T,
                   "c_kv": _copy(x.c_kv, (N, T, dc)), "k_rope": _copy(x.k_rope, (N, T, dr)),
                   "q_nope": _copy(x.q_nope, (N, H, T, dn)),
                   "q_rope": _copy(x.q_rope, (N, H, T, dr))}
            opt = {"attn_out": (x.attn_out, (N, T, D), np.float32),
                   "positions": (x.positions, (N, T), np.int64),
                   "k_rope_pre": (x.k_rope_pre, (N, T, dr), np.float32),
                   "q_rope_pre": (x.q_rope_pre, (N, H, T, dr), np.float32),
                   "rope_cos": (x.rope_cos, (N, T, dr // 2), np.float32),
                   "rope_sin": (x.rope_sin, (N, T, dr // 2), np.float32)}
            for k, (ptr, shp, dt) in opt.items():
                if ptr:
                    out[k] = _copy(ptr, shp, dt)
            return out
        finally:
            _L().qmla_cell_free(C.byref(x))

    def latent(self, layer, cell):
        return self.cell(layer, cell, parts=())["c_kv"]

    def rope_key(self, layer, cell):
        return self.cell(layer, cell, parts=())["k_rope"]

    def queries(self, layer, cell):
        d = self.cell(layer, cell, parts=())
        return d["q_nope"], d["q_rope"]

    def close(self):
        if self._h:
            _L().qmla_capture_close(self._h)
            self._h = C.c_void_p()


# ---------------------------------------------------------------------------
# the quantizer on the GPU (kernels/qdq_cuda.h), linked into libqmla.so by -Dcuda
# ---------------------------------------------------------------------------
QDQ_CUDA_WS_BYTES = 16  # QMLA_QDQ_CUDA_WS_BYTES


def _declare_cuda(lib):
    try:
        lib.qmla_qdq_cuda
    except AttributeError:
        lib._qmla_has_cuda = False
        return
    lib._qmla_has_cuda = True
    E = C.POINTER(_Err)
    lib.qmla_cuda_available.argtypes = [E]
    lib.qmla_qdq_cuda.argtypes = [C.POINTER(_QParams), C.c_void_p, C.c_size_t, C.c_size_t,
                                  C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p,
                                  C.c_void_p, E]
    lib.qmla_qdq_cuda_ws_init.argtypes = [C.c_void_p, C.c_void_p, E]
    lib.cudaMalloc.argtypes = [C.POINTER(C.c_void_p), C.c_size_t]
    lib.cudaGetDevice.argtypes = [C.POINTER(C.c_int)]


_NO_CUDA = ("libqmla.so was built without the CUDA kernels (configure with "
            "meson setup -Dcuda=enabled and rebuild)")


def cuda_available():
    """(True, "") when libqmla.so has the CUDA launcher and a device is usable,
    else (False, why)."""
    lib = _L()
    if not lib._qmla_has_cuda:
        return False, _NO_CUDA
    e = _Err()
    if lib.qmla_cuda_available(C.byref(e)):
        return True, ""
    return False, e.msg.decode(errors="replace")


_ws = {}


def _workspace():
    """QDQ_CUDA_WS_BYTES of device memory on the current device, allocated
    once per device with the runtime libqmla.so links (cudaMalloc)."""
    lib, dev = _L(), C.c_int(0)
    if lib.cudaGetDevice(C.byref(dev)):
        raise QmlaError("CUDA: cudaGetDevice failed", "EIO")
    if dev.value not in _ws:
        p = C.c_void_p()
        if lib.cudaMalloc(C.byref(p), QDQ_CUDA_WS_BYTES):
            raise QmlaError("CUDA: cudaMalloc of the qdq workspace failed", "ENOMEM")
        qdq_cuda_ws_init(p.value)
        _ws[dev.value] = p.value
    return _ws[dev.value]


def qdq_cuda_ws_init(ws, stream=0):
    """Set up QDQ_CUDA_WS_BYTES of caller-owned device memory at `ws` as a
    qdq workspace (qmla_qdq_cuda_ws_init; once, before its first use)."""
    _int("ws", ws, 1, 2 ** 64 - 1)
    _int("stream", stream, 0, 2 ** 64 - 1)
    ok, why = cuda_available()
    if not ok:
        raise QmlaError(f"qdq_cuda_ws_init: {why}", "EINVAL")
    e = _Err()
    _check(_L().qmla_qdq_cuda_ws_init(ws, stream or None, C.byref(e)), e)


def qdq_cuda(x_ptr, T, width, bits=4, group=64, meta="f16", out_ptr=None, stream=0,
             ws=None, codes_ptr=None, scale_ptr=None, lo_ptr=None):
    """Quantize-dequantize T tokens of `width` float32 channels in device memory
    at x_ptr (e.g. tensor.data_ptr()) with the CUDA launcher qmla_qdq_cuda on
    `stream` (a cudaStream_t as an int, e.g. torch.cuda.current_stream().cuda_stream;
    0: the default stream), bit for bit the CPU qdq. The result goes to out_ptr
    (default: x_ptr, in place); codes/scale/lo pointers are optional outputs
    (kernels/qdq_cuda.h). Synchronises the stream. ws: QDQ_CUDA_WS_BYTES of device
    workspace set up once by qdq_cuda_ws_init (default: one per device,
    allocated and set up once). QmlaError when libqmla.so
    has no CUDA launcher or no device is usable, and for the quantizer's refusals."""
    T, width = _int("T", T, 0, _SIZE_MAX), _int("width", width, 0, _SIZE_MAX)
    p = _qparams(bits, group, meta)
    for name, v in (("x_ptr", x_ptr), ("out_ptr", out_ptr), ("stream", stream), ("ws", ws),
                    ("codes_ptr", codes_ptr), ("scale_ptr", scale_ptr), ("lo_ptr", lo_ptr)):
        if v is not None:
            _int(name, v, 0, 2 ** 64 - 1)
    ok, why = cuda_available()
    if not ok:
        raise QmlaError(f"qdq_cuda: {why}", "EINVAL")
    if not x_ptr:
        raise QmlaError("qdq_cuda: NULL input pointer", "EINVAL")
    e = _Err()
    w = ws if ws is not None else _workspace()
    _check(_L().qmla_qdq_cuda(C.byref(p), x_ptr, T, width, codes_ptr, scale_ptr,
                              lo_ptr, out_ptr if out_ptr is not None else x_ptr, w,
                              stream or None, C.byref(e)), e)


def qdq_torch(t, bits=4, group=64, meta="f16", out=None):
    """QDQ of a torch tensor [..., width] per token: float32 CUDA tensors go
    through the CUDA launcher (qdq_cuda, on the current stream), others through
    the CPU quantizer (a NumPy round trip). Returns `out` (default a new tensor)."""
    import torch
    _qparams(bits, group, meta)
    if t.dtype != torch.float32:
        raise QmlaError(f"qdq_torch: expected float32, got {t.dtype}", "EINVAL")
    width = t.shape[-1]
    if t.is_cuda:
        src = t.contiguous()
        dst = torch.empty_like(src) if out is None else out
        if dst.shape != src.shape or not dst.is_contiguous() or dst.device != src.device:
            raise QmlaError("qdq_torch: out must be a contiguous tensor shaped and placed "
                            "like the input", "EINVAL")
        with torch.cuda.device(src.device):
            qdq_cuda(src.data_ptr(), src.numel() // width if width else 0, width, bits, group,
                     meta, out_ptr=dst.data_ptr(), stream=torch.cuda.current_stream().cuda_stream)
        return dst
    r = torch.from_numpy(qdq(t.detach().reshape(-1, width).numpy(), bits, group, meta))
    r = r.reshape(t.shape)
    if out is None:
        return r
    out.copy_(r)
    return out


# ---------------------------------------------------------------------------
# the analysis drivers (include/qmla/job.h): options as strings, no structs
# ---------------------------------------------------------------------------
_PROGRESS = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_size_t, C.c_size_t, C.c_size_t)
_REPEATED = {"transforms", "corpus", "text"}
_FLAGS = {"verify", "force", "balance", "no-pre", "transforms-only"}  # p_flag in lib/driver/job.c


def _declare_jobs(lib):
    E = C.POINTER(_Err)
    lib.qmla_job_new.argtypes = [C.c_char_p, C.POINTER(C.c_void_p), E]
    lib.qmla_job_free.argtypes = [C.c_void_p]
    lib.qmla_job_free.restype = None
    lib.qmla_job_set.argtypes = [C.c_void_p, C.c_char_p, C.c_char_p, E]
    lib.qmla_job_run.argtypes = [C.c_void_p, _PROGRESS, C.c_void_p, E]
    lib.qmla_job_stopped.argtypes = [C.c_void_p]
    lib.qmla_job_n_values.argtypes = [C.c_void_p]
    lib.qmla_job_n_values.restype = C.c_size_t
    lib.qmla_job_value.argtypes = [C.c_void_p, C.c_char_p]
    lib.qmla_job_value.restype = C.c_double
    lib.qmla_job_value_name.argtypes = [C.c_void_p, C.c_size_t]
    lib.qmla_job_value_name.restype = C.c_char_p


def _opt_str(v, key="option"):
    """An option's value as the library's string: True/False only for the
    flags (a bool elsewhere became "1": threads=True ran with 1 thread);
    floats finite (NaN and inf refused here, naming the option)."""
    if isinstance(v, (bool, np.bool_)):
        if key not in _FLAGS:
            raise ValueError(f"{key}: expected a value, found {v!r} (True/False only for the "
                             f"flags {', '.join(sorted(_FLAGS))})")
        return "1" if v else "0"
    if isinstance(v, (float, np.floating)):
        return repr(_num(key, v))
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, (list, tuple)):
        return ",".join(_opt_str(x, key) for x in v)
    return os.fsdecode(v) if isinstance(v, (bytes, os.PathLike)) else str(v)


def run_driver(driver, input, output, progress=None, **opts):
    """Run a library driver (qmla_job_*: sweep, jvp, predict, intervene, learn,
    eval, capture, ppl) on `input` (a capture; the model directory for capture
    and ppl), writing `output`, with the options of the `qmla` command of the
    same name as keywords (train_cells="a,b" or ["a", "b"] for --train-cells;
    True/False for flags; a list for a repeatable option such as transforms).
    progress(done, total) may return True to stop the run (QmlaError, status
    EINVAL, e.stopped True). Returns the run's summary numbers as a dict."""
    L, e, h = _L(), _Err(), C.c_void_p()
    _check(L.qmla_job_new(driver.encode(), C.byref(h), C.byref(e)), e)
    try:
        items = [("input", input), ("output", output)] + list(opts.items())
        for k, v in items:
            if v is None:
                continue
            key = k.replace("_", "-")
            vals = v if key in _REPEATED and isinstance(v, (list, tuple)) else [v]
            for x in vals:
                _check(L.qmla_job_set(h, key.encode(), os.fsencode(_opt_str(x, key)), C.byref(e)), e)
        cb = _PROGRESS(0)
        if progress is not None:
            def _cb(ctx, done, total, resumed):
                try:
                    return 1 if progress(done, total) else 0
                except Exception:
                    return 1
            cb = _PROGRESS(_cb)
        st = L.qmla_job_run(h, cb, None, C.byref(e))
        if st:
            err = QmlaError(e.msg.decode(errors="replace"), L.qmla_status_name(st).decode())
            err.stopped = bool(L.qmla_job_stopped(h))
            raise err
        return {L.qmla_job_value_name(h, k).decode(): L.qmla_job_value(h, L.qmla_job_value_name(h, k))
                for k in range(L.qmla_job_n_values(h))}
    finally:
        L.qmla_job_free(h)


def sweep(capture, output, **opts):
    """qmla sweep (qmla_sweep_run): bits, group, nmse, meta, layers, cells,
    threads, engine ("cpu"), verify, force, shard ("I/N"), balance."""
    return run_driver("sweep", capture, output, **opts)


def jvp(capture, output, **opts):
    """qmla jvp (qmla_op_run_points, group /jvp): nmse, bits, group, layers,
    cells, threads, engine, force."""
    return run_driver("jvp", capture, output, **opts)


def predict(capture, output, **opts):
    """qmla predict (qmla_op_run_points with sensitivities, group /predict):
    nmse, group, layers, cells, threads, engine, force."""
    return run_driver("predict", capture, output, **opts)


def intervene(capture, output, **opts):
    """qmla intervene (qmla_intervene_run, group /interventions): bits, group,
    nmse, reps, seed, bootstrap, layers, cells, threads, engine, force."""
    return run_driver("intervene", capture, output, **opts)


def learn(capture, output, **opts):
    """qmla learn (qmla_learn_run): method, path, config, steps, lr, seed,
    objective, alpha, layers, train_cells, heldout_cells, threads, engine, force,
    also_content, attn_precision ("f32" or "f64": the content objective's
    attention in double, docs/cuda-engine.md "Learning in double"). Resumes an
    incomplete file of the same settings."""
    return run_driver("learn", capture, output, **opts)


def evaluate(capture, output, transforms, config, **opts):
    """qmla eval (qmla_tf_eval_run, group /eval): transforms (a list of
    files), config (C4R4, C2R4 or an allocation file of allocate()), policy,
    layers, cells, threads, engine."""
    if isinstance(transforms, (str, bytes, os.PathLike)):
        transforms = [transforms]
    return run_driver("eval", capture, output, transforms=list(transforms), config=config, **opts)


def allocate(capture, output, budget, **opts):
    """qmla allocate (qmla_alloc_run, group /allocate; docs/allocate.md):
    budget (bytes per token, a config such as "C4R4", or "3.5bits"),
    candidates (comma list), policy, context, transforms, cells, threads,
    engine. Returns n_layers, budget_bytes_per_token, bytes_per_token,
    pred_total, measure_cpu_s."""
    return run_driver("allocate", capture, output, budget=budget, **opts)


def capture(model_dir, output, corpus, **opts):
    """qmla capture (qmla_capture_native): corpus {name: file} (or a list of
    "NAME=FILE"), seeds, cells, seqs, tokens, layers, store, gzip, no_pre,
    model_name, check_tol, threads, force."""
    if isinstance(corpus, dict):
        corpus = [f"{k}={os.fsdecode(v)}" for k, v in corpus.items()]
    return run_driver("capture", model_dir, output, corpus=list(corpus), **opts)


def ppl_run(model_dir, output, text, **opts):
    """qmla ppl (qmla_ppl_run, groups /ppl and /ppl_table): text (a file or a
    list), config, policy (comma lists), transforms (a list), transforms_only,
    tokens, context, threads, force (discard a journal of other options).
    Resumes from output + ".journal" as `qmla ppl` does. Returns n_rows and
    bits_per_byte_<row>,
    resumed (windows restored from the journal)."""
    if isinstance(text, (str, bytes, os.PathLike)):
        text = [text]
    return run_driver("ppl", model_dir, output, text=[os.fsdecode(t) for t in text], **opts)
