# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""``AckBatch.reduce``'s common case in C: ack rows XOR-folded per root, the roots in order of first appearance.

An open-addressing table maps each root to its place in the output; it starts small and doubles when half full,
so its size follows the distinct roots, not the rows (a wave has one distinct root for every few dozen rows): it
stays in the CPU's cache, and nothing the size of the rows is allocated and zeroed.
"""

from libc.stdlib cimport calloc, free

import numpy as np

cdef unsigned long long GOLDEN = 0x9E3779B97F4A7C15ULL  # Fibonacci hashing: root ids need not be random
cdef int FIRST_BITS = 10  # 1,024 slots at first


cdef struct Slot:
    unsigned long long key  # 0: empty
    Py_ssize_t index  # the root's place in the output


cdef inline Py_ssize_t _find(Slot* table, int bits, unsigned long long key) noexcept nogil:
    cdef unsigned long long mask = (<unsigned long long>1 << bits) - 1
    cdef Py_ssize_t slot = <Py_ssize_t>((key * GOLDEN) >> (64 - bits))
    while table[slot].key != 0 and table[slot].key != key:
        slot = (slot + 1) & mask
    return slot


cdef Slot* _grown(Slot* table, int bits) noexcept nogil:
    """A table of twice the slots holding ``table``'s entries (which is freed), or NULL when out of memory."""
    cdef Py_ssize_t size = <Py_ssize_t>1 << bits, i
    cdef Slot* grown = <Slot*>calloc(2 * size, sizeof(Slot))
    if grown != NULL:
        for i in range(size):
            if table[i].key != 0:
                grown[_find(grown, bits + 1, table[i].key)] = table[i]
    free(table)
    return grown


def xor_fold(const unsigned long long[::1] roots, const unsigned long long[::1] xors):
    """``(unique roots, their XOR-folded values)`` of non-zero ``roots`` (0 marks an empty slot)."""
    cdef Py_ssize_t n = roots.shape[0], i, slot, unique = 0
    cdef int bits = FIRST_BITS
    cdef unsigned long long key
    keys_array = np.empty(n, np.uint64)
    values_array = np.empty(n, np.uint64)
    cdef unsigned long long[::1] keys = keys_array
    cdef unsigned long long[::1] values = values_array
    cdef Slot* table = <Slot*>calloc(<size_t>1 << bits, sizeof(Slot))
    if table == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            key = roots[i]
            slot = _find(table, bits, key)
            if table[slot].key == key:
                values[table[slot].index] ^= xors[i]
                continue
            table[slot].key, table[slot].index = key, unique
            keys[unique], values[unique] = key, xors[i]
            unique += 1
            if 2 * unique > (<Py_ssize_t>1 << bits):
                table = _grown(table, bits)
                if table == NULL:
                    raise MemoryError()
                bits += 1
    finally:
        free(table)
    return keys_array[:unique].copy(), values_array[:unique].copy()
