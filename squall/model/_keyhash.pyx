# cython: language_level=3
"""``hashing.stable_str_hash`` in C: zlib's CRC-32 over the string's own UTF-8 bytes, no ``bytes`` object made."""

from cpython.unicode cimport PyUnicode_AsUTF8AndSize

cdef extern from "zlib.h":
    unsigned long crc32(unsigned long crc, const unsigned char *buf, unsigned int length) nogil


cdef long long _crc(str value, list prefixes) except -2:
    """The CRC-32 of a string's UTF-8 bytes, continuing ``prefixes[its length]``; -1 when it has no UTF-8 form (a
    lone surrogate) or is 256 bytes or longer."""
    cdef Py_ssize_t size
    cdef const char *data
    try:
        data = PyUnicode_AsUTF8AndSize(value, &size)
    except UnicodeEncodeError:
        return -1
    if size >= 256:
        return -1
    return crc32(<unsigned long>prefixes[size], <const unsigned char *>data, <unsigned int>size)


def str_crc(str value, list prefixes):
    """``_crc``, or None where it is -1: the caller takes the general path."""
    cdef long long crc = _crc(value, prefixes)
    return None if crc < 0 else crc


def str_pick(str value, list prefixes, list targets):
    """``targets[str_crc(value, prefixes) % len(targets)]``: a fields grouping's target for a lone string key, in
    one call; None where ``str_crc`` is None."""
    cdef long long crc = _crc(value, prefixes)
    return None if crc < 0 else targets[crc % len(targets)]
