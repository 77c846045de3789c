"""A GGUF file's header — its metadata and tensor infos — read from the front of the file only, by
llama.cpp's rules.

What the VRAM estimate (:mod:`rigkit.spec.vram`) needs of a llama.cpp model is in the header of its
GGUF file (format: ggml's ``docs/gguf.md``): the magic and version, the key/value metadata
(``<arch>.block_count``, ``<arch>.attention.head_count_kv``, …) and one info per tensor (name, shape,
ggml type, offset), then padding to ``general.alignment`` (32 unless set) and the tensor data. The
header is a few MiB of a file of many GiB, so ``rigkit models lock`` reads it by HTTP range requests
(:mod:`rigkit.lockfile.document`), through the ``fetch(start, end)`` that :func:`parse` is given.

The rules are those of llama.cpp's own reader, ``gguf_init_from_reader`` in ``ggml/src/gguf.cpp``
(what ``gguf_init_from_file`` runs, as built in the pinned xllamacpp wheel), in its order: the magic;
the version (not 0, not byte-swapped, not 1, at most 3); the tensor and key/value counts (signed, in
``[0, SIZE_MAX / sizeof(gguf_tensor_info)]`` and ``[0, SIZE_MAX / sizeof(gguf_kv)]``); each key (a
string of at most ``GGUF_MAX_STRING_LENGTH`` and no longer than what remains of the file, not empty,
not a duplicate), its type (an array's element type and count: at most ``GGUF_MAX_ARRAY_ELEMENTS``,
whose smallest size fits what remains) and value; ``general.alignment`` a ``u32`` power of two; each
tensor info (a name shorter than ``GGML_MAX_NAME``, not a duplicate; at most ``GGML_MAX_DIMS``
non-negative dimensions whose running products stay within ``INT64_MAX``; a ggml type below ``GGML_TYPE_COUNT``
whose block divides a row, a size in bytes below ``SIZE_MAX``; an offset); then, when there are
tensors, the data section at the header's end padded to the alignment, inside the file; and each
tensor's offset exactly where the one before it ends, padded. A fault is a :class:`HeaderError`
naming its byte offset, the field and llama.cpp's own words for it.

What rigkit adds, each a refusal llama.cpp makes later or never (the differential test lists them):
the counts are checked against the file before any of what they announce is fetched (each key/value
takes at least 14 bytes, each tensor info 24); a header may not run past :data:`MAX_HEADER`; and
each tensor's data must lie inside the file (``llama_model_loader``'s check, "data is not within the
file bounds").

Only the header's bytes are fetched, never more than its counts announce (:class:`_Reader`), and
nothing the estimate does not use is built: an array is kept as its type, count and place, and a
value decoded only when asked (:meth:`Header.value`), so a 262,144-token vocabulary's strings are
walked and counted, not kept.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: First range fetched (bytes); each later one twice the one before, never past what the header's
#: counts announce (:class:`_Reader`).
FIRST_RANGE = 64 << 10
#: The most a header may take (bytes) before rigkit gives up: a header this large is not a model's
#: (llama.cpp has no such limit; a 262k-token vocabulary with merges takes about 10 MiB).
MAX_HEADER = 256 << 20

# ggml/src/gguf.cpp and ggml/include/ggml.h, as built in the pinned xllamacpp wheel (x86-64):
GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGUF_DEFAULT_ALIGNMENT = 32
GGUF_MAX_STRING_LENGTH = 1024 * 1024 * 1024
GGUF_MAX_ARRAY_ELEMENTS = 1024 * 1024 * 1024
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64
SIZE_MAX = (1 << 64) - 1
INT64_MAX = (1 << 63) - 1
#: ``sizeof(struct gguf_tensor_info)`` and ``sizeof(struct gguf_kv)`` of that build: the count limits
#: its own messages print (``must be in [0, 53624256028225440]`` and ``[0, 288230376151711743]``).
SIZEOF_TENSOR_INFO = 344
SIZEOF_KV = 64
#: The least bytes a key/value takes (a u64 length, a one-byte key: an empty one is refused, a u32
#: type, a one-byte value) and a tensor info (a u64 length, an empty name, u32 ``n_dims`` 0, u32
#: type, u64 offset): what a header's counts announce at the least.
MIN_KV_BYTES = 8 + 1 + 4 + 1
MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8

#: ``enum gguf_type`` → (``GGUF_TYPE_NAME``, ``struct`` format of one value; ``GGUF_TYPE_SIZE``).
GGUF_TYPES: dict[int, tuple[str, str]] = {
    0: ("u8", "B"), 1: ("i8", "b"), 2: ("u16", "H"), 3: ("i16", "h"), 4: ("u32", "I"), 5: ("i32", "i"),
    6: ("f32", "f"), 7: ("bool", "b"), 8: ("str", ""), 9: ("arr", ""), 10: ("u64", "Q"), 11: ("i64", "q"),
    12: ("f64", "d"),
}
_STR, _ARR = 8, 9

#: ``enum ggml_type`` → (``ggml_type_name``, ``ggml_blck_size``, ``ggml_type_size``): ggml's
#: ``type_traits`` (``ggml/src/ggml.c``) as the pinned wheel reports them (held by a test against its
#: own ``ggml_type_name``/``ggml_blck_size``/``ggml_type_size``). Removed types keep their numbers,
#: with block size 0: llama.cpp refuses a tensor of one. gguf-py 0.19.0's ``GGML_QUANT_SIZES`` lacks
#: ``q2_0`` and gives ``q8_1`` 40 bytes where ggml's ``block_q8_1`` is 36.
GGML_TYPES: tuple[tuple[str, int, int], ...] = (
    ("f32", 1, 4), ("f16", 1, 2), ("q4_0", 32, 18), ("q4_1", 32, 20), ("DEPRECATED", 0, 0),
    ("DEPRECATED", 0, 0), ("q5_0", 32, 22), ("q5_1", 32, 24), ("q8_0", 32, 34), ("q8_1", 32, 36),
    ("q2_K", 256, 84), ("q3_K", 256, 110), ("q4_K", 256, 144), ("q5_K", 256, 176), ("q6_K", 256, 210),
    ("q8_K", 256, 292), ("iq2_xxs", 256, 66), ("iq2_xs", 256, 74), ("iq3_xxs", 256, 98), ("iq1_s", 256, 50),
    ("iq4_nl", 32, 18), ("iq3_s", 256, 110), ("iq2_s", 256, 82), ("iq4_xs", 256, 136), ("i8", 1, 1),
    ("i16", 1, 2), ("i32", 1, 4), ("i64", 1, 8), ("f64", 1, 8), ("iq1_m", 256, 56), ("bf16", 1, 2),
    ("TYPE_Q4_0_4_4 REMOVED, use Q4_0 with runtime repacking", 0, 0),
    ("TYPE_Q4_0_4_8 REMOVED, use Q4_0 with runtime repacking", 0, 0),
    ("TYPE_Q4_0_8_8 REMOVED, use Q4_0 with runtime repacking", 0, 0),
    ("tq1_0", 256, 54), ("tq2_0", 256, 66),
    ("TYPE_IQ4_NL_4_4 REMOVED, use IQ4_NL with runtime repacking", 0, 0),
    ("TYPE_IQ4_NL_4_8 REMOVED, use IQ4_NL with runtime repacking", 0, 0),
    ("TYPE_IQ4_NL_8_8 REMOVED, use IQ4_NL with runtime repacking", 0, 0),
    ("mxfp4", 32, 17), ("nvfp4", 64, 36), ("q1_0", 128, 18), ("q2_0", 64, 18),
)
GGML_TYPE_COUNT = len(GGML_TYPES)

_U32, _I32, _U64, _I64 = (struct.Struct(f) for f in ("<I", "<i", "<Q", "<q"))


class HeaderError(ValueError):
    """Not a GGUF header llama.cpp reads, or not one rigkit takes (see the module doc). ``offset``:
    the byte where the faulty field starts; ``field``: which (``n_kv``, ``key 3 'general.alignment'``,
    ``tensor 7 'blk.0.attn_q.weight' type``, …); the message ends with llama.cpp's own words."""

    def __init__(self, offset: int, field: str, message: str):
        self.offset, self.field = offset, field
        self.fetched = 0  #: bytes fetched when the fault was found (set by :func:`parse`)
        super().__init__(f"at byte {offset}, {field}: {message}")


class RangeReadError(RuntimeError):
    """The server answered a range with other than the bytes asked for."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor info: ``name`` (as ggml keeps it: up to its first NUL), ``shape`` (``ne``, four
    ints, 1 past ``n_dims``), ggml ``type`` (an index of :data:`GGML_TYPES`), ``offset`` (bytes from
    the data section's start) and ``nbytes`` (``ggml_nbytes``)."""

    name: str
    shape: tuple[int, int, int, int]
    type: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class _Field:
    type: int          # enum gguf_type; 9 for an array
    etype: int | None  # an array's element type
    count: int         # an array's elements; 1 for a scalar
    at: int            # byte offset of the value (an array's first element)


@dataclass
class Header:
    """A parsed header: ``version``, ``alignment`` (bytes), ``data_offset`` (where the tensor data
    start: the header's end, padded when there are tensors), ``tensors`` (:class:`TensorInfo`, in
    file order), ``keys`` (in file order), and what reading it cost: ``fetched`` (bytes) in
    ``requests`` range requests. Values are decoded on demand (:meth:`value`)."""

    version: int
    alignment: int
    data_offset: int
    tensors: list[TensorInfo]
    fetched: int
    requests: int
    _fields: dict[str, _Field] = field(repr=False)
    _raw: bytes | bytearray = field(repr=False)

    @property
    def keys(self) -> list[str]:
        return list(self._fields)

    def type_of(self, key: str) -> tuple[int, int | None] | None:
        """``(gguf type, element type or None)`` of ``key``, None when absent."""
        f = self._fields.get(key)
        return None if f is None else (f.type, f.etype)

    def count(self, key: str) -> int | None:
        """Elements of the array ``key`` (1 for a scalar), None when absent."""
        f = self._fields.get(key)
        return None if f is None else f.count

    def value(self, key: str) -> Any:
        """The value of ``key`` (int, float, bool, str, or a list of them), None when absent.
        Strings are decoded as UTF-8 with ``surrogateescape`` (llama.cpp keeps bytes)."""
        f = self._fields.get(key)
        if f is None:
            return None
        raw = self._raw
        if f.type != _ARR:
            return _decode(raw, f.at, f.type, 1)[0]
        return _decode(raw, f.at, f.etype, f.count)


def _decode(raw: bytes | bytearray, at: int, vtype: int, n: int) -> list[Any]:
    if vtype == _STR:
        out = []
        for _ in range(n):
            (length,) = _U64.unpack_from(raw, at)
            out.append(bytes(raw[at + 8:at + 8 + length]).decode("utf-8", "surrogateescape"))
            at += 8 + length
        return out
    code = GGUF_TYPES[vtype][1]
    values = list(struct.unpack_from(f"<{n}{code}", raw, at))
    return [v != 0 for v in values] if vtype == 7 else values


def _ahead(left: int, done: int, done_bytes: int, least: int) -> int:
    """What ``left`` items still to read announce (bytes), ``done`` of the same kind (a string
    array's elements, the tensor infos) read in ``done_bytes``: ``least`` each until the read ones
    outnumber the left ones by 9 to 8, then the mean so far and an eighth (later items of a kind run a
    little longer: two-digit block numbers in tensor names). A read ahead then passes their end by at
    most ``left`` × 9/8 × the mean ≤ the bytes already read of them, and a 262k-token vocabulary or
    832 tensor infos take a few ranges, not one per halving of their least."""
    if 9 * left > 8 * done or not done:
        return left * least
    mean = -(-done_bytes // done)
    return left * (mean + -(-mean // 8))


def _pad(x: int, n: int) -> int:
    return (x + n - 1) // n * n  # GGML_PAD


def _printable(b: int) -> str:
    return chr(b) if 0x20 <= b < 0x7F else "?"


class _Reader:
    """The front of a file of ``size`` bytes, fetched as parsing reaches it.

    The first fetch asks for ``first`` bytes; each later one for the bytes not yet held, at least up
    to what is needed now, ahead by up to twice the last range, but never past what the header
    announces so far (``pos`` + what the field being read still needs + ``tail``, the least the
    fields after it take; a string array's remaining elements and the remaining tensor infos at
    :func:`_ahead`), past the file, or past :data:`MAX_HEADER`. So past the first range nothing is
    fetched beyond the header's end but that read-ahead (at most the bytes already read of those
    items): a valid header's read fetches at most ``max(first, 2 × its end)``, and a corrupt one
    stops where its counts say."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, first: int):
        self.fetch, self.size, self.chunk = fetch, size, max(1, first)
        self.buf = bytearray()
        self.requests = 0
        self.tail = 0  # least bytes of the fields after the one being read

    def need(self, pos: int, n: int, then: int, where: str, what: str, section: str) -> None:
        """Hold bytes ``[pos, pos + n)``; ``then``: the least bytes this field takes after them.
        Raises :class:`HeaderError` (``where``, ``what``) when the file or :data:`MAX_HEADER` ends first."""
        end = pos + n
        if end <= len(self.buf):
            return
        if end > self.size:
            raise HeaderError(pos, where, f"{what}: {n} bytes at byte {pos}, the file ends at byte {self.size} "
                                          f"({section})")
        if end > MAX_HEADER:
            raise HeaderError(pos, where, f"{what} ends past byte {MAX_HEADER:,}: rigkit takes no header larger "
                                          f"than {MAX_HEADER >> 20} MiB (MAX_HEADER)")
        have = len(self.buf)
        want = self.chunk if not self.requests else min(have + self.chunk, end + then + self.tail)
        self.chunk *= 2
        want = min(max(end, want), self.size, MAX_HEADER)
        chunk = self.fetch(have, want - 1)
        self.requests += 1
        if len(chunk) != want - have:
            raise RangeReadError(f"asked for bytes {have}-{want - 1}, got {len(chunk)} bytes")
        self.buf += chunk


def parse(fetch: Callable[[int, int], bytes], size: int, first: int = FIRST_RANGE) -> Header:
    """Read the GGUF header of a file of ``size`` bytes through ``fetch(start, end)`` (bytes
    ``start``..``end`` inclusive, as an HTTP ``Range: bytes=start-end``), by llama.cpp's rules (the
    module doc). Raises :class:`HeaderError` (the fault, its offset and field), :class:`RangeReadError`,
    or what ``fetch`` raises."""
    r = _Reader(fetch, size, first)
    try:
        return _parse(r)
    except HeaderError as exc:
        exc.fetched = len(r.buf)
        raise


def _parse(r: _Reader) -> Header:
    buf, size = r.buf, r.size
    need = r.need

    # magic, version, counts (gguf_init_from_reader: "file magic", "header")
    if size < 4:
        raise HeaderError(0, "magic", f"the file is {size} bytes (failed to read magic)")
    need(0, 4, 20, "magic", "magic", "failed to read magic")
    if bytes(buf[:4]) != GGUF_MAGIC:
        shown = "".join(_printable(b) for b in buf[:4])
        raise HeaderError(0, "magic", f"not a GGUF file: invalid magic characters: '{shown}', expected 'GGUF'")
    need(4, 4, 16, "version", "version", "failed to read header")
    (version,) = _U32.unpack_from(buf, 4)
    if version == 0:
        raise HeaderError(4, "version", f"bad GGUF version: {version}")
    if version & 0xFFFF == 0:
        raise HeaderError(4, "version", f"failed to load model: this GGUF file version {version} is extremely large, "
                                        "is there a mismatch between the host and model endianness?")
    if version == 1:
        raise HeaderError(4, "version", "GGUFv1 is no longer supported, please use a more up-to-date version")
    if version > GGUF_VERSION:
        raise HeaderError(4, "version", f"this GGUF file is version {version} but this software only supports up to "
                                        f"version {GGUF_VERSION}")
    need(8, 8, 8, "n_tensors", "n_tensors", "failed to read header")
    (n_tensors,) = _I64.unpack_from(buf, 8)
    if not 0 <= n_tensors <= SIZE_MAX // SIZEOF_TENSOR_INFO:
        raise HeaderError(8, "n_tensors", f"number of tensors is {n_tensors} but must be in "
                                          f"[0, {SIZE_MAX // SIZEOF_TENSOR_INFO}]")
    need(16, 8, 0, "n_kv", "n_kv", "failed to read header")
    (n_kv,) = _I64.unpack_from(buf, 16)
    if not 0 <= n_kv <= SIZE_MAX // SIZEOF_KV:
        raise HeaderError(16, "n_kv", f"number of key value pairs is {n_kv} but must be in [0, {SIZE_MAX // SIZEOF_KV}]")
    least = 24 + n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_INFO_BYTES
    if least > size:
        raise HeaderError(8, "n_tensors, n_kv", f"{n_tensors} tensor infos and {n_kv} key/value pairs take at least "
                                                f"{least} bytes, the file is {size} (failed to read key-value pairs)")
    if least > MAX_HEADER:
        raise HeaderError(8, "n_tensors, n_kv", f"{n_tensors} tensor infos and {n_kv} key/value pairs take at least "
                                                f"{least:,} bytes: rigkit takes no header larger than "
                                                f"{MAX_HEADER >> 20} MiB (MAX_HEADER)")
    pos = 24

    def string(pos: int, where: str, then: int, section: str) -> tuple[int, int]:
        """gguf_reader::read(std::string &): (start of the bytes, length)."""
        need(pos, 8, then, where, "string length", section)
        (length,) = _U64.unpack_from(buf, pos)
        if length > GGUF_MAX_STRING_LENGTH:
            raise HeaderError(pos, where, f"string length {length} exceeds maximum {GGUF_MAX_STRING_LENGTH}")
        if length > size - pos - 8:
            raise HeaderError(pos, where, f"string length {length} exceeds remaining file size {size - pos - 8} bytes")
        if pos + 8 + length > MAX_HEADER:
            raise HeaderError(pos, where, f"string length {length} ends past byte {MAX_HEADER:,}: rigkit takes no "
                                          f"header larger than {MAX_HEADER >> 20} MiB (MAX_HEADER)")
        need(pos + 8, length, then, where, "string", section)
        return pos + 8, length

    # key/value pairs
    kv_section = "failed to read key-value pairs"
    fields: dict[str, _Field] = {}
    for i in range(n_kv):
        r.tail = (n_kv - i - 1) * MIN_KV_BYTES + n_tensors * MIN_TENSOR_INFO_BYTES
        at, length = string(pos, f"key {i}", 5, kv_section)
        if length == 0:
            raise HeaderError(pos, f"key {i}", f"key {i} is empty")
        key = bytes(buf[at:at + length]).decode("utf-8", "surrogateescape")
        shown = key.split("\0", 1)[0]  # llama.cpp prints the key's c_str()
        where = f"key {i} '{shown}'"
        if key in fields:
            raise HeaderError(pos, where, f"duplicate key '{shown}' for KV pair {i}")
        pos = at + length
        need(pos, 4, 1, where, "type", kv_section)
        (vtype,) = _I32.unpack_from(buf, pos)
        pos += 4
        etype, count = None, 1
        if vtype == _ARR:
            need(pos, 12, 0, where, "array type and count", kv_section)
            (etype,) = _I32.unpack_from(buf, pos)
            (count,) = _U64.unpack_from(buf, pos + 4)
            pos += 12
        kind = vtype if etype is None else etype
        if kind not in GGUF_TYPES or kind == _ARR:
            raise HeaderError(pos - (12 if etype is not None else 4), where,
                              f"key '{shown}' has invalid GGUF type {kind}")
        fields[key] = _Field(vtype, etype, count, pos)
        if etype is None and vtype == _STR:
            at, length = string(pos, where, 0, kv_section)
            pos = at + length
            continue
        elem = 8 if kind == _STR else struct.calcsize(GGUF_TYPES[kind][1])
        if count > GGUF_MAX_ARRAY_ELEMENTS or count * elem > size - pos:
            raise HeaderError(pos - 8, where, f"an array of {count} {GGUF_TYPES[kind][0]} takes at least "
                                              f"{count * elem} bytes, {size - pos} remain in the file "
                                              f"(at most {GGUF_MAX_ARRAY_ELEMENTS} elements; {kv_section})")
        if kind != _STR:
            need(pos, count * elem, 0, where, "value", kv_section)
            pos += count * elem
            continue
        # an array of strings: walked, not kept (the vocabulary's tokens and merges)
        if pos + count * 8 > MAX_HEADER:
            raise HeaderError(pos - 8, where, f"an array of {count} strings ends past byte {MAX_HEADER:,}: rigkit "
                                              f"takes no header larger than {MAX_HEADER >> 20} MiB (MAX_HEADER)")
        unpack, have, start = _U64.unpack_from, len(buf), pos
        for j in range(count):  # the hot loop of a 262k-token vocabulary: a slow path only past the bytes held
            if pos + 8 > have:
                string(pos, where, _ahead(count - j - 1, j, pos - start, 8), kv_section)
                have = len(buf)
            (length,) = unpack(buf, pos)
            nxt = pos + 8 + length
            if nxt > have:
                string(pos, where, _ahead(count - j - 1, j, pos - start, 8), kv_section)
                have = len(buf)
            pos = nxt
    r.tail = n_tensors * MIN_TENSOR_INFO_BYTES

    align = fields.get("general.alignment")
    if align is not None and (align.type != 4):
        raise HeaderError(align.at, "key 'general.alignment'", "key 'general.alignment' must be of type u32 but is "
                                                               f"{GGUF_TYPES[align.type][0]}")
    alignment = _U32.unpack_from(buf, align.at)[0] if align is not None else GGUF_DEFAULT_ALIGNMENT
    if alignment == 0 or alignment & (alignment - 1):
        raise HeaderError(align.at, "key 'general.alignment'", f"alignment {alignment} is not a power of 2")

    # tensor infos
    ti_section = "failed to read tensor info"
    tensors: list[TensorInfo] = []
    names: set[str] = set()
    infos_start = pos
    for i in range(n_tensors):
        r.tail = _ahead(n_tensors - i - 1, i, pos - infos_start, MIN_TENSOR_INFO_BYTES)
        start = pos
        at, length = string(pos, f"tensor {i} name", 16, ti_section)
        full = bytes(buf[at:at + length])
        if length >= GGML_MAX_NAME:
            raise HeaderError(start, f"tensor {i} name", f"tensor name {i} is too long: {length} >= {GGML_MAX_NAME}")
        name = full.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")  # ggml_set_name: a C string
        if full.decode("utf-8", "surrogateescape") in names:
            raise HeaderError(start, f"tensor {i} name", f"duplicate tensor name '{name}' for tensor {i}")
        where = f"tensor {i} '{name}'"
        pos = at + length
        need(pos, 4, 12, where, "n_dims", ti_section)
        (n_dims,) = _U32.unpack_from(buf, pos)
        if n_dims > GGML_MAX_DIMS:
            raise HeaderError(pos, f"{where} n_dims", f"tensor '{name}' has invalid number of dimensions: "
                                                      f"{n_dims} > {GGML_MAX_DIMS}")
        pos += 4
        ne = [1] * GGML_MAX_DIMS
        for j in range(n_dims):
            need(pos + 8 * j, 8, 8 * (n_dims - j - 1) + 12, f"{where} ne[{j}]", "dimension", ti_section)
            (ne[j],) = _I64.unpack_from(buf, pos + 8 * j)
            if ne[j] < 0:
                raise HeaderError(pos + 8 * j, f"{where} ne[{j}]", f"tensor '{name}' dimension {j} has invalid number "
                                                                   f"of elements: {ne[j]} < 0")
        nelements = ne[0] * ne[1] * ne[2] * ne[3]
        # each running product below INT64_MAX (the wheel's check: (2, 2**62, 1, 1) is refused, (2, 2**62 - 1, 1,
        # 1) and (2**40, 0, 2**40, 2**40) are read, (2**40, 2**40, 0, 1) is refused)
        if ne[0] * ne[1] > INT64_MAX or ne[0] * ne[1] * ne[2] > INT64_MAX or nelements > INT64_MAX:
            raise HeaderError(pos, f"{where} shape", f"incorrect shape for a tensor '{name}' may cause overflow errors: "
                                                     f"({ne[0]}, {ne[1]}, {ne[2]}, {ne[3]}) is >= INT64_MAX ({INT64_MAX})")
        pos += 8 * n_dims
        need(pos, 4, 8, f"{where} type", "ggml type", ti_section)
        (gtype,) = _I32.unpack_from(buf, pos)
        if not 0 <= gtype < GGML_TYPE_COUNT:
            raise HeaderError(pos, f"{where} type", f"tensor '{name}' has invalid ggml type {gtype}. should be in "
                                                    f"[0, {GGML_TYPE_COUNT})")
        tname, blck, tsize = GGML_TYPES[gtype]
        if blck == 0 or ne[0] % blck:
            raise HeaderError(pos, f"{where} type", f"tensor '{name}' of type {gtype} ({tname}) has {ne[0]} elements "
                                                    f"per row, not a multiple of block size ({blck})")
        if nelements // blck > SIZE_MAX // tsize:
            raise HeaderError(pos, f"{where} type", f"tensor '{name}' with shape ({ne[0]}, {ne[1]}, {ne[2]}, {ne[3]}) "
                                                    f"has a size in bytes > {SIZE_MAX}")
        need(pos + 4, 8, 0, f"{where} offset", "offset", ti_section)
        (offset,) = _U64.unpack_from(buf, pos + 4)
        nbytes = nelements // blck * tsize if nelements > 0 else 0
        tensors.append(TensorInfo(name, (ne[0], ne[1], ne[2], ne[3]), gtype, offset, nbytes))
        names.add(name)
        pos += 12

    # the data section and each tensor's place in it
    data_offset = pos
    if n_tensors > 0:
        data_offset = _pad(pos, alignment)
        if data_offset > size:
            raise HeaderError(pos, "padding", f"the header ends at byte {pos}, padded to {alignment} at byte "
                                              f"{data_offset}, past the file's {size} bytes (failed to seek to "
                                              "beginning of data section)")
    total = 0
    for i, t in enumerate(tensors):
        where = f"tensor {i} '{t.name}' offset"
        if t.offset != total:
            raise HeaderError(data_offset, where, f"tensor '{t.name}' has offset {t.offset}, expected {total}")
        if t.nbytes > SIZE_MAX - (alignment - 1):
            raise HeaderError(data_offset, where, f"tensor '{t.name}' size {t.nbytes} overflows after padding "
                                                  f"(alignment {alignment})")
        padded = _pad(t.nbytes, alignment)
        if SIZE_MAX - total < padded:
            raise HeaderError(data_offset, where, f"tensor '{t.name}' size overflow, cannot accumulate size "
                                                  f"{total} + {padded}")
        if data_offset + t.offset + t.nbytes > size:
            raise HeaderError(data_offset, where, f"tensor '{t.name}' data is not within the file bounds, model is "
                                                  "corrupted or incomplete (llama_model_loader)")
        total += padded
    return Header(version, alignment, data_offset, tensors, len(buf), r.requests, fields, buf)


def read_header(fetch: Callable[[int, int], bytes], size: int, first: int = FIRST_RANGE) -> tuple[dict[str, Any], int]:
    """:func:`summarize` of :func:`parse`: ``(summary, bytes fetched)``. Raises :class:`HeaderError`
    (also for a model without the keys the estimate needs) or what :func:`parse` raises."""
    header = parse(fetch, size, first)
    return summarize(header), header.fetched


def _int_or_list(value: Any) -> int | list[int] | None:
    if value is None:
        return None
    if isinstance(value, list):
        ints = [int(v) for v in value]
        return ints[0] if ints and all(v == ints[0] for v in ints) else ints
    return int(value)


def summarize(header: Header) -> dict[str, Any]:
    """What the estimate needs of a parsed header (:func:`parse`), a plain dict:

    - ``architecture`` (``general.architecture``), ``block_count``, ``context_length`` (tokens
      trained), ``embedding_length``, ``feed_forward_length`` (int, or one per layer), ``vocab_size``
      (``<arch>.vocab_size``, else the token list's length);
    - ``head_count``, ``head_count_kv``: an int, or one per layer where the file lists them
      (llama.cpp reads ``<arch>.attention.head_count_kv`` as either; a 0 marks a layer without attention);
    - ``key_length``, ``value_length``: the head dimensions (``<arch>.attention.key_length`` /
      ``value_length``; llama.cpp's default ``embedding_length / head_count`` when absent);
    - ``sliding_window`` (tokens) and ``sliding_window_pattern`` (as the file gives it) when present;
    - ``full_attention_interval`` and ``ssm`` (``conv_kernel``, ``inner_size``, ``state_size``,
      ``group_count``, ``time_step_rank``) for hybrid models with recurrent layers, when present;
    - ``tensor_bytes``: ``{"layers": [bytes of blk.<i>.* for each block], "input": bytes of
      token_embd.*, "output": bytes of the rest (output, output_norm), "tied_output": no
      output.weight (llama.cpp then uses token_embd as the output, a second copy on the card)}``;
      ``tensor_types``: ``{ggml type name, upper case as gguf-py spells it: bytes}``;
      ``header_bytes``: where the tensor data start (``data_offset``).

    Raises :class:`HeaderError` (offset 0) when a key the estimate cannot do without is missing."""
    arch = header.value("general.architecture")
    if not isinstance(arch, str):
        raise HeaderError(0, "key 'general.architecture'", "general.architecture missing (or not a string)")

    def k(name: str) -> Any:
        return header.value(f"{arch}.{name}")

    need = {"block_count": k("block_count"), "embedding_length": k("embedding_length"),
            "attention.head_count": k("attention.head_count")}
    missing = [f"{arch}.{name}" for name, v in need.items() if v is None]
    if missing:
        raise HeaderError(0, f"key '{missing[0]}'", f"{', '.join(missing)} missing: cannot size its KV cache")
    n_layer = int(need["block_count"])
    head_count = _int_or_list(need["attention.head_count"])
    head_count_kv = _int_or_list(k("attention.head_count_kv"))
    n_embd = int(need["embedding_length"])
    first_heads = head_count if isinstance(head_count, int) else max(head_count)
    default_head = n_embd // first_heads if first_heads else 0
    vocab = k("vocab_size")
    if vocab is None:
        vocab = header.count("tokenizer.ggml.tokens") or 0
    layers = [0] * n_layer
    inputs = output = 0
    tied = not any(t.name == "output.weight" for t in header.tensors)
    types: dict[str, int] = {}
    for t in header.tensors:
        n = t.nbytes
        parts = t.name.split(".")
        if parts[0] == "blk" and len(parts) > 1 and parts[1].isdigit() and int(parts[1]) < n_layer:
            layers[int(parts[1])] += n
        elif parts[0] == "token_embd":
            inputs += n
        else:
            output += n
        name = GGML_TYPES[t.type][0].upper()
        types[name] = types.get(name, 0) + n
    out: dict[str, Any] = {
        "architecture": arch,
        "block_count": n_layer,
        "context_length": int(k("context_length") or 0),
        "embedding_length": n_embd,
        "feed_forward_length": _int_or_list(k("feed_forward_length")) or 0,
        "vocab_size": int(vocab),
        "head_count": head_count,
        "head_count_kv": head_count if head_count_kv is None else head_count_kv,
        "key_length": int(k("attention.key_length") or default_head),
        "value_length": int(k("attention.value_length") or default_head),
        "tensor_bytes": {"layers": layers, "input": inputs, "output": output, "tied_output": tied},
        "tensor_types": dict(sorted(types.items())),
        "header_bytes": header.data_offset,
    }
    if (window := k("attention.sliding_window")) is not None:
        out["sliding_window"] = int(window)
    if (pattern := k("attention.sliding_window_pattern")) is not None:
        out["sliding_window_pattern"] = [bool(v) for v in pattern] if isinstance(pattern, list) else int(pattern)
    if (interval := k("full_attention_interval")) is not None:
        out["full_attention_interval"] = int(interval)
    ssm = {name: int(v) for name in ("conv_kernel", "inner_size", "state_size", "group_count", "time_step_rank")
           if (v := k(f"ssm.{name}")) is not None}
    if ssm:
        out["ssm"] = ssm
    return out

