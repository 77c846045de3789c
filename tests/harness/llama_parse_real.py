#!/usr/bin/env python3
"""llama-server's own command-line parser, run from the xllamacpp wheel (the oracle for the
sandbox's ``/app/llama-server``; used by gen_llama_server_args.py and tests/unit/test_llama_server_args.py).

xllamacpp's Python API has no argument parser, but its extension module exports llama.cpp's
``common_params_parse(int, char **, common_params &, llama_example, void (*)(int, char **))``
(common/arg.cpp). This calls it through ctypes on the ``common_params`` held inline by an
``xllamacpp.CommonParams`` (the Cython object's first field, right after its 16-byte PyObject
header; checked below by writing two fields through Python and reading them back), with
``LLAMA_EXAMPLE_SERVER``, and exits as ``tools/server/server.cpp``'s ``main`` does after it:
``if (!common_params_parse(argc, argv, params, LLAMA_EXAMPLE_SERVER)) return 1;``. The parser
prints its own messages (stderr) and exits by itself for ``--help``/``--version`` and the like.

usage: llama_parse_real.py [llama-server arguments...]   exit 0: parsed; 1: refused (as llama-server)
A parsed command line prints one JSON line of a few parsed fields on stdout (RIGKIT_PARSE_JSON=1).

usage: llama_parse_real.py --batch   one JSON argv list per stdin line; each is parsed in a child forked
from this process (the library loaded once; the parser may exit() by itself), and one JSON line
``{"rc": exit status, "stderr": its text}`` answers it on stdout, in order.
"""
from __future__ import annotations

import ctypes
import glob
import json
import os
import sys

SYMBOL = "_Z19common_params_parseiPPcR13common_params13llama_examplePFviS0_E"
LLAMA_EXAMPLE_SERVER = 12  # enum llama_example in common/common.h (BATCHED=0 ... BENCH=11, SERVER=12)


def library():
    import xllamacpp
    found = glob.glob(os.path.join(os.path.dirname(xllamacpp.__file__), "xllamacpp*.so"))
    if not found:
        raise RuntimeError("no xllamacpp extension module")
    return ctypes.CDLL(found[0])


def fresh_params():
    """An ``xllamacpp.CommonParams`` as ``common_params params;`` in server.cpp's main, and its address."""
    import xllamacpp
    p = xllamacpp.CommonParams()
    addr = id(p) + 16
    p.n_predict, p.n_ctx = 12345, 678  # the first two int32 fields of struct common_params
    if (ctypes.c_int32.from_address(addr).value, ctypes.c_int32.from_address(addr + 4).value) != (12345, 678):
        raise RuntimeError("xllamacpp.CommonParams does not hold common_params where expected")
    p.n_predict, p.n_ctx = -1, 0
    p.port = 8080  # CommonParams.__cinit__ sets 0; common_params' own default is 8080
    return p, addr


def parse(argv: list[str]):
    """(ok, params) for ``llama-server argv...``; the parser writes its messages to fd 2 itself."""
    fn = getattr(library(), SYMBOL)
    fn.restype = ctypes.c_bool
    fn.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    p, addr = fresh_params()
    args = [b"llama-server"] + [a.encode() for a in argv]
    c_argv = (ctypes.c_char_p * (len(args) + 1))(*args, None)
    ok = fn(len(args), c_argv, addr, LLAMA_EXAMPLE_SERVER, None)
    sys.stdout.flush()
    return bool(ok), p


def batch() -> int:
    """``--batch``: answer each stdin line (a JSON argv list) with ``{"rc", "stderr"}`` (see the module's doc)."""
    import tempfile

    lib = library()
    log_main = getattr(lib, "_Z15common_log_mainv")
    log_main.restype = ctypes.c_void_p
    log_pause = getattr(lib, "_Z16common_log_pauseP10common_log")
    log_pause.argtypes = [ctypes.c_void_p]
    for line in sys.stdin:
        argv = json.loads(line)
        with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as out, \
                tempfile.TemporaryDirectory(prefix="llama-parse-") as cwd:
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                os.chdir(cwd)  # a fresh one each: --log-file x writes ./x, --grammar-file x reads it
                os.dup2(err.fileno(), 2)
                os.dup2(out.fileno(), 1)
                try:
                    ok, _ = parse(argv)
                    code = 0 if ok else 1
                except BaseException:  # noqa: BLE001 - the child ends here whatever happens
                    code = 99
                # LOG_WRN lines (the "DEPRECATED: argument … specified multiple times" one) go through
                # common_log's worker thread, started in this child: pause() drains it, as its destructor
                # does when llama-server exits
                log_pause(log_main())
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            err.seek(0)
            text = err.read().decode(errors="replace")
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "stderr": text}), flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--batch"]:
        return batch()
    ok, p = parse(argv)
    if not ok:
        return 1
    if os.environ.get("RIGKIT_PARSE_JSON"):
        print(json.dumps({"model": p.model.path, "port": p.port, "n_ctx": p.n_ctx, "n_parallel": p.n_parallel,
                          "n_threads": p.cpuparams.n_threads, "n_predict": p.n_predict, "n_batch": p.n_batch,
                          "use_jinja": p.use_jinja}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
