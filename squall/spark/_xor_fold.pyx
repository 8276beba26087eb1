# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""``AckBatch.reduce``'s common case in C: ack rows XOR-folded per root in one open-addressing table, the roots in
order of first appearance. Arrow's dictionary encoding did the same at about 34 ns a distinct root; this takes a
few."""

import numpy as np

cdef unsigned long long GOLDEN = 0x9E3779B97F4A7C15ULL  # Fibonacci hashing: root ids need not be random


def xor_fold(const unsigned long long[::1] roots, const unsigned long long[::1] xors):
    """``(unique roots, their XOR-folded values)`` of non-zero ``roots`` (0 marks an empty slot)."""
    cdef Py_ssize_t n = roots.shape[0], i, unique = 0
    cdef int bits = 1
    while (<Py_ssize_t>1 << bits) < 2 * n:
        bits += 1
    cdef Py_ssize_t size = <Py_ssize_t>1 << bits
    cdef unsigned long long mask = size - 1, key, slot
    keys_array = np.zeros(size, np.uint64)
    values_array = np.zeros(size, np.uint64)
    order_array = np.empty(n, np.int64)
    cdef unsigned long long[::1] keys = keys_array
    cdef unsigned long long[::1] values = values_array
    cdef long long[::1] order = order_array
    for i in range(n):
        key = roots[i]
        slot = (key * GOLDEN) >> (64 - bits)
        while keys[slot] != 0 and keys[slot] != key:
            slot = (slot + 1) & mask
        if keys[slot] == 0:
            keys[slot] = key
            order[unique] = slot
            unique += 1
        values[slot] ^= xors[i]
    taken = order_array[:unique]
    return keys_array[taken], values_array[taken]
