"""The sandbox's network names and addresses, chosen by one variable: ``RIGKIT_HARNESS_NET``.

``RIGKIT_HARNESS_NET=N`` (an integer 1..254; default 231) gives a harness session its own
``10.N.0.0/16`` block and its own names, so two sessions on one machine (each with its own
``RIGKIT_HARNESS_STATE`` and ``RIGKIT_HARNESS_PREFIX``) never meet:

============================  =====================  ==========================
                              default (231)          ``RIGKIT_HARNESS_NET=232``
============================  =====================  ==========================
fixtures namespace            ``rkfx``               ``rkfx232``
fixtures address              ``10.231.255.1``       ``10.232.255.1``
host ``n``'s namespace        ``rkh<n>``             ``rk232h<n>``
host ``n``'s veths            ``rkh<n>-c/-h/-f/-x``  ``rk232h<n>-c/-h/-f/-x``
============================  =====================  ==========================

Interface names stay within Linux's 15 characters (``rk232h250-c`` is 11). This module has no
dependencies: ``hostctl.py`` and ``inventory/sandbox.py`` (run by pyinfra) both import it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _net() -> int:
    raw = os.environ.get("RIGKIT_HARNESS_NET", "231").strip() or "231"
    if not raw.isdigit() or not 1 <= int(raw) <= 254:
        raise SystemExit(f"RIGKIT_HARNESS_NET={raw!r}: an integer 1..254 (the second octet of 10.N.0.0/16)")
    return int(raw)


NET = _net()
BLOCK = f"10.{NET}"                      # the /16 every address of this session lies in
_TAG = "" if NET == 231 else str(NET)    # the default keeps the names of before
FIX_NS = f"rkfx{_TAG}"                   # the fixtures namespace (also the prefix of its control veth)
HOST_NS = f"rk{_TAG}h" if _TAG else "rkh"  # + host index: a host's namespace and veth stem
FIX_ADDR = f"{BLOCK}.255.1"
FIX_URL = f"http://{FIX_ADDR}"
_MANIFEST_HOST = "http://10.231.255.1"   # what mirror.json is written with


def manifest() -> dict:
    """``mirror.json`` with its URLs pointing at this session's fixtures address."""
    m = json.loads((HERE / "mirror.json").read_text())
    for key in ("url", "archive_url"):
        if isinstance(m.get(key), str) and m[key].startswith(_MANIFEST_HOST):
            m[key] = FIX_URL + m[key][len(_MANIFEST_HOST):]
    return m
