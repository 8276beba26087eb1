# cython: language_level=3
"""``bolt_task._plain``'s scan in C: whether a container holds immutable atomic values only. A snapshot of a
plain bolt's large dict scans it before pickling it; in Python the scan took longer than the pickle."""

from cpython.dict cimport PyDict_Next
from cpython.object cimport PyObject


cdef inline bint _atomic(object value):
    cdef type kind = type(value)
    return kind is str or kind is int or kind is float or kind is bytes or kind is bool or value is None


def dict_atomic(value):
    """Whether every key and every value of a dict (or Counter) is atomic."""
    cdef Py_ssize_t position = 0
    cdef PyObject *key
    cdef PyObject *item
    if not isinstance(value, dict):
        raise TypeError(f"expected a dict, got {type(value).__name__}")
    while PyDict_Next(value, &position, &key, &item):
        if not (_atomic(<object>key) and _atomic(<object>item)):
            return False
    return True


def items_atomic(value):
    """Whether every item of a list or set is atomic."""
    for item in value:
        if not _atomic(item):
            return False
    return True
