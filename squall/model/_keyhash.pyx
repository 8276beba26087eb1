# cython: language_level=3
"""``hashing.stable_str_hash`` in C: zlib's CRC-32 over the string's own UTF-8 bytes, no ``bytes`` object made."""

from cpython.unicode cimport PyUnicode_AsUTF8AndSize

cdef extern from "zlib.h":
    unsigned long crc32(unsigned long crc, const unsigned char *buf, unsigned int length) nogil


def str_crc(str value, list prefixes):
    """The CRC-32 of a string's UTF-8 bytes, continuing ``prefixes[its length]``; None when it has no UTF-8
    form (a lone surrogate) or is 256 bytes or longer: the caller takes the general path."""
    cdef Py_ssize_t size
    cdef const char *data
    try:
        data = PyUnicode_AsUTF8AndSize(value, &size)
    except UnicodeEncodeError:
        return None
    if size >= 256:
        return None
    return crc32(<unsigned long>prefixes[size], <const unsigned char *>data, <unsigned int>size)


def str_pick(str value, list prefixes, list targets):
    """``targets[str_crc(value, prefixes) % len(targets)]``: a fields grouping's target for a lone string key, in
    one call; None where ``str_crc`` is None."""
    cdef Py_ssize_t size
    cdef const char *data
    cdef unsigned long crc
    try:
        data = PyUnicode_AsUTF8AndSize(value, &size)
    except UnicodeEncodeError:
        return None
    if size >= 256:
        return None
    crc = crc32(<unsigned long>prefixes[size], <const unsigned char *>data, <unsigned int>size)
    return targets[crc % <unsigned long>len(targets)]
