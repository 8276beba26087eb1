"""A hash of tuple values that is the same in every process.

Python's ``hash()`` of a str is salted per process, so two Spark workers would
disagree about which task a word belongs to. ``stable_hash`` encodes values
canonically (values that compare equal, such as ``1``, ``1.0`` and ``True``,
encode alike) and takes the CRC-32 of the bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Any


def _encode(value: Any, out: bytearray) -> None:
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        out += b"s%d:" % len(data)
        out += data
    elif value is None:
        out += b"n"
    elif isinstance(value, (bool, int)):
        out += b"i%d;" % value
    elif isinstance(value, float):
        if value.is_integer():
            out += b"i%d;" % int(value)
        else:
            out += b"f" + struct.pack("<d", value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        out += b"b%d:" % len(data)
        out += data
    elif isinstance(value, (tuple, list)):
        out += b"l%d:" % len(value)
        for item in value:
            _encode(item, out)
    elif isinstance(value, (frozenset, set)):
        encoded = sorted(stable_bytes((item,)) for item in value)
        out += b"e%d:" % len(encoded)
        for item in encoded:
            out += item
    else:
        raise TypeError(f"cannot hash a value of type {type(value).__name__} for a fields grouping")


def stable_bytes(values: Sequence[Any]) -> bytes:
    out = bytearray()
    for value in values:
        _encode(value, out)
    return bytes(out)


_PREFIXES = [zlib.crc32(b"s%d:" % n) for n in range(256)]  # the CRC of a string's length prefix, by length
_crc32 = zlib.crc32

try:  # the same CRC, over the string's own UTF-8 bytes (setup.py builds it where a compiler is)
    from squall.model._keyhash import str_crc as _str_crc
except ImportError:
    _str_crc = None


def stable_str_hash(value: str) -> int:
    """``stable_hash([value])`` for a string: the CRC of its prefix is looked up, not formatted."""
    if _str_crc is not None:
        crc = _str_crc(value, _PREFIXES)
        if crc is not None:
            return crc
    try:
        data = value.encode()  # strict UTF-8: the quickest call there is
    except UnicodeEncodeError:  # a lone surrogate
        data = value.encode("utf-8", "surrogatepass")
    size = len(data)
    if size < 256:
        return _crc32(data, _PREFIXES[size])
    return _crc32(b"s%d:%b" % (size, data))


def stable_hash(values: Sequence[Any]) -> int:
    """A non-negative 32-bit hash of ``values``, identical in every process."""
    if len(values) == 1 and type(values[0]) is str:  # a lone string key, the common case: the same bytes, quicker
        return stable_str_hash(values[0])
    return zlib.crc32(stable_bytes(values))
