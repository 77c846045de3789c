#!/usr/bin/env python3
"""llama.cpp's own GGUF reader, run from the xllamacpp wheel: the oracle for
:mod:`rigkit.spec.gguf_header` (tests/unit/test_gguf_header.py, benchmarks/gguf_header_bytes.py).

The wheel's extension module exports ggml's C API, ``gguf_init_from_file(const char *, struct
gguf_init_params)`` among it (``ggml/src/gguf.cpp``, built from the llama.cpp the wheel pins). This
calls it through ctypes with ``{no_alloc = true, ctx = NULL}`` — the header only, as
``llama_model_loader`` reads it before any tensor data — and catches ggml's log (``ggml_log_set``) to
keep the reader's own error lines. A header llama.cpp reads is described with ``gguf_get_*``: the
version, alignment, data offset, every key/value (arrays of strings by their strings) and every
tensor's name, shape, type, offset and size.

A worker: one file path a line on stdin, one JSON line a path on stdout::

    {"ok": true, "version": 3, "alignment": 32, "data_offset": N, "kv": [[key, type, value], ...],
     "tensors": [[name, [ne0, ne1, ne2, ne3], type, offset, size], ...], "log": [...]}
    {"ok": false, "log": ["gguf_init_from_reader: duplicate key ...", ...]}

Some corrupt headers abort llama.cpp itself (a ``GGML_ASSERT``): the worker then dies, and its
caller (:class:`Oracle`) says so and starts another.

usage: gguf_real.py < paths
"""
from __future__ import annotations

import ctypes
import glob
import json
import os
import subprocess
import sys

#: enum gguf_type (ggml/include/gguf.h): 0 u8 … 12 f64; 8 string, 9 array.
_CTYPES = {0: ctypes.c_uint8, 1: ctypes.c_int8, 2: ctypes.c_uint16, 3: ctypes.c_int16, 4: ctypes.c_uint32,
           5: ctypes.c_int32, 6: ctypes.c_float, 7: ctypes.c_bool, 10: ctypes.c_uint64, 11: ctypes.c_int64,
           12: ctypes.c_double}


class _Params(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]  # struct gguf_init_params


def library():
    """The xllamacpp extension module, with the gguf functions typed."""
    import xllamacpp

    found = glob.glob(os.path.join(os.path.dirname(xllamacpp.__file__), "xllamacpp*.so"))
    if not found:
        raise RuntimeError("no xllamacpp extension module")
    lib = ctypes.CDLL(found[0])
    sig = {
        "gguf_init_from_file": (ctypes.c_void_p, [ctypes.c_char_p, _Params]),
        "gguf_free": (None, [ctypes.c_void_p]),
        "gguf_get_version": (ctypes.c_uint32, [ctypes.c_void_p]),
        "gguf_get_alignment": (ctypes.c_size_t, [ctypes.c_void_p]),
        "gguf_get_data_offset": (ctypes.c_size_t, [ctypes.c_void_p]),
        "gguf_get_n_kv": (ctypes.c_int64, [ctypes.c_void_p]),
        "gguf_get_key": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_kv_type": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_arr_type": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_arr_n": (ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_arr_data": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_arr_str": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t]),
        "gguf_get_val_data": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_val_str": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_n_tensors": (ctypes.c_int64, [ctypes.c_void_p]),
        "gguf_get_tensor_name": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_tensor_type": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_tensor_offset": (ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_tensor_size": (ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_tensor_ne": (ctypes.POINTER(ctypes.c_int64), [ctypes.c_void_p, ctypes.c_int64]),
        "ggml_type_name": (ctypes.c_char_p, [ctypes.c_int]),
        "ggml_type_size": (ctypes.c_size_t, [ctypes.c_int]),
        "ggml_blck_size": (ctypes.c_int64, [ctypes.c_int]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_LOG = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def _value(lib, ctx, i: int, vtype: int):
    if vtype == 9:
        etype, n = lib.gguf_get_arr_type(ctx, i), lib.gguf_get_arr_n(ctx, i)
        if etype == 8:
            return [lib.gguf_get_arr_str(ctx, i, j).decode("utf-8", "surrogateescape") for j in range(n)]
        data = lib.gguf_get_arr_data(ctx, i)
        return [_num(etype, v) for v in (_CTYPES[etype] * n).from_address(data)] if n else []
    if vtype == 8:
        return lib.gguf_get_val_str(ctx, i).decode("utf-8", "surrogateescape")
    return _num(vtype, _CTYPES[vtype].from_address(lib.gguf_get_val_data(ctx, i)).value)


def _num(vtype: int, v):
    return bool(v) if vtype == 7 else (float(v) if vtype in (6, 12) else int(v))


def read(lib, path: str, log: list[str]) -> dict:
    """What llama.cpp reads of the GGUF at ``path`` (see the module doc)."""
    ctx = lib.gguf_init_from_file(path.encode(), _Params(True, None))
    if not ctx:
        return {"ok": False, "log": log}
    try:
        kv = []
        for i in range(lib.gguf_get_n_kv(ctx)):
            t = lib.gguf_get_kv_type(ctx, i)
            key = lib.gguf_get_key(ctx, i).decode("utf-8", "surrogateescape")
            kv.append([key, [9, lib.gguf_get_arr_type(ctx, i)] if t == 9 else t, _value(lib, ctx, i, t)])
        tensors = []
        for i in range(lib.gguf_get_n_tensors(ctx)):
            ne = lib.gguf_get_tensor_ne(ctx, i)
            tensors.append([lib.gguf_get_tensor_name(ctx, i).decode("utf-8", "surrogateescape"),
                            [ne[j] for j in range(4)], lib.gguf_get_tensor_type(ctx, i),
                            lib.gguf_get_tensor_offset(ctx, i), lib.gguf_get_tensor_size(ctx, i)])
        return {"ok": True, "version": lib.gguf_get_version(ctx), "alignment": lib.gguf_get_alignment(ctx),
                "data_offset": lib.gguf_get_data_offset(ctx), "kv": kv, "tensors": tensors, "log": log}
    finally:
        lib.gguf_free(ctx)


def main() -> int:
    lib = library()
    log: list[str] = []

    @_LOG
    def keep(level, text, user):  # ggml_log_callback(enum ggml_log_level, const char *, void *)
        log.append(text.decode("utf-8", "replace"))

    lib.ggml_log_set(keep, None)
    for line in sys.stdin:
        log.clear()
        out = read(lib, line.rstrip("\n"), log)
        out["log"] = "".join(log).splitlines()
        print(json.dumps(out), flush=True)
    return 0


class Oracle:
    """A :func:`main` worker in a child process: ``read(path)`` → its JSON answer, or ``{"ok": False,
    "crash": returncode}`` when llama.cpp aborted on that file (the next call starts a new worker)."""

    def __init__(self):
        self.proc = None

    def read(self, path: str) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
        self.proc.stdin.write(path + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait()
            self.proc = None
            return {"ok": False, "crash": rc, "log": []}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None


if __name__ == "__main__":
    sys.exit(main())
