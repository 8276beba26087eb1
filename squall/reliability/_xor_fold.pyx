# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""``AckBatch.reduce``'s common case in C: ack rows XOR-folded per root, the roots in order of first appearance;
and ``AckBatch.by_partition``, its rows split by acker task. Each is one call whatever the rows: a task's small
batches of acks, as a lightly loaded worker sends them, cost no more than their rows.

An open-addressing table maps each root to its place in the output. It has twice as many slots as rows, at most
``CAP_BITS`` at first, and doubles when half full. The last table used is kept for the next call, with only the
slots its call used cleared: a call of a size like the last allocates and zeroes no table.
"""

from libc.stdlib cimport calloc, free, malloc

import numpy as np

cdef unsigned long long GOLDEN = 0x9E3779B97F4A7C15ULL  # Fibonacci hashing: root ids need not be random
cdef int FIRST_BITS = 10  # 1,024 slots at least
cdef int CAP_BITS = 16  # 65,536 slots (1 MiB) at most at first; a table grows past it only for the roots


cdef struct Slot:
    unsigned long long key  # 0: empty
    Py_ssize_t index  # the root's place in the output


cdef Slot* _kept = NULL  # the last call's table, cleared, for the next
cdef int _kept_bits = 0


cdef inline Py_ssize_t _find(Slot* table, int bits, unsigned long long key) noexcept nogil:
    cdef unsigned long long mask = (<unsigned long long>1 << bits) - 1
    cdef Py_ssize_t slot = <Py_ssize_t>((key * GOLDEN) >> (64 - bits))
    while table[slot].key != 0 and table[slot].key != key:
        slot = (slot + 1) & mask
    return slot


cdef Slot* _grown(Slot* table, int bits, Py_ssize_t* slots) noexcept nogil:
    """A table of twice the slots holding ``table``'s entries (which is freed), ``slots`` updated; NULL when out
    of memory."""
    cdef Py_ssize_t size = <Py_ssize_t>1 << bits, i, slot
    cdef Slot* grown = <Slot*>calloc(2 * size, sizeof(Slot))
    if grown != NULL:
        for i in range(size):
            if table[i].key != 0:
                slot = _find(grown, bits + 1, table[i].key)
                grown[slot] = table[i]
                slots[table[i].index] = slot
    free(table)
    return grown


def xor_fold(const unsigned long long[::1] roots, const unsigned long long[::1] xors):
    """``(unique roots, their XOR-folded values)``, or None when a root is 0 (0 marks an empty slot). A run of one
    root (a tuple's children, emitted and acked one after the other) is folded without a lookup."""
    global _kept, _kept_bits
    cdef Py_ssize_t n = roots.shape[0], i, slot, unique = 0, last = -1
    cdef int bits = FIRST_BITS
    cdef unsigned long long key, last_key = 0
    if xors.shape[0] != n:
        raise ValueError(f"xor_fold: {n} roots and {xors.shape[0]} values")
    for i in range(n):
        if roots[i] == 0:
            return None
    while bits < CAP_BITS and (<Py_ssize_t>1 << bits) < 2 * n:
        bits += 1
    keys_array = np.empty(n, np.uint64)
    values_array = np.empty(n, np.uint64)
    cdef unsigned long long[::1] keys = keys_array
    cdef unsigned long long[::1] values = values_array
    cdef Py_ssize_t* slots = <Py_ssize_t*>malloc(max(n, 1) * sizeof(Py_ssize_t))  # each root's slot
    if slots == NULL:
        raise MemoryError()
    cdef Slot* table
    if _kept != NULL and bits <= _kept_bits <= bits + 1:  # taken, so that no other call uses it meanwhile
        table, bits, _kept = _kept, _kept_bits, NULL
    else:
        table = <Slot*>calloc(<size_t>1 << bits, sizeof(Slot))
    try:
        if table == NULL:
            raise MemoryError()
        for i in range(n):
            key = roots[i]
            if key == last_key:
                values[last] ^= xors[i]
                continue
            slot = _find(table, bits, key)
            last_key = key
            if table[slot].key == key:
                last = table[slot].index
                values[last] ^= xors[i]
                continue
            last = unique
            table[slot].key, table[slot].index = key, unique
            slots[unique] = slot
            keys[unique], values[unique] = key, xors[i]
            unique += 1
            if 2 * unique > (<Py_ssize_t>1 << bits):
                table = _grown(table, bits, slots)
                if table == NULL:
                    raise MemoryError()
                bits += 1
        for i in range(unique):
            table[slots[i]].key = 0
        free(_kept)  # the last table used is kept for the next call, cleared
        _kept, _kept_bits, table = table, bits, NULL
    finally:
        free(table)
        free(slots)
    return keys_array[:unique].copy(), values_array[:unique].copy()


def split_by_partition(
    const unsigned long long[::1] roots,
    const unsigned long long[::1] xors,
    const unsigned char[::1] failed,
    const unsigned char[::1] reset,
    Py_ssize_t partitions,
):
    """The rows of each partition ``root mod partitions``, in order: a list of ``partitions`` tuples ``(roots,
    xors, failed, reset)``; or, when every row is in one partition, its number."""
    cdef Py_ssize_t n = roots.shape[0], i, p
    if partitions < 1:
        raise ValueError(f"split_by_partition: {partitions} partitions")
    if xors.shape[0] != n or failed.shape[0] != n or reset.shape[0] != n:
        raise ValueError("split_by_partition: the columns differ in length")
    cdef unsigned long long parts = <unsigned long long>partitions
    which_array = np.empty(n, np.intp)
    counts_array = np.zeros(partitions, np.intp)
    cdef Py_ssize_t[::1] which = which_array
    cdef Py_ssize_t[::1] counts = counts_array
    for i in range(n):
        p = <Py_ssize_t>(roots[i] % parts)
        which[i] = p
        counts[p] += 1
    for p in range(partitions):
        if counts[p] == n:
            return p
    columns = [
        (np.empty(counts[p], np.uint64), np.empty(counts[p], np.uint64), np.empty(counts[p], bool),
         np.empty(counts[p], bool))
        for p in range(partitions)
    ]
    cdef unsigned long long** out_roots = <unsigned long long**>malloc(partitions * sizeof(void*))
    cdef unsigned long long** out_xors = <unsigned long long**>malloc(partitions * sizeof(void*))
    cdef unsigned char** out_failed = <unsigned char**>malloc(partitions * sizeof(void*))
    cdef unsigned char** out_reset = <unsigned char**>malloc(partitions * sizeof(void*))
    cdef unsigned long long[::1] view64
    cdef unsigned char[::1] view8
    try:
        if out_roots == NULL or out_xors == NULL or out_failed == NULL or out_reset == NULL:
            raise MemoryError()
        for p in range(partitions):
            counts[p] = 0
            if len(columns[p][0]):  # an empty column's pointer is never written through
                view64 = columns[p][0]
                out_roots[p] = &view64[0]
                view64 = columns[p][1]
                out_xors[p] = &view64[0]
                view8 = columns[p][2].view(np.uint8)
                out_failed[p] = &view8[0]
                view8 = columns[p][3].view(np.uint8)
                out_reset[p] = &view8[0]
        for i in range(n):  # one pass, each row to its partition's next place
            p = which[i]
            out_roots[p][counts[p]] = roots[i]
            out_xors[p][counts[p]] = xors[i]
            out_failed[p][counts[p]] = failed[i]
            out_reset[p][counts[p]] = reset[i]
            counts[p] += 1
    finally:
        free(out_roots)
        free(out_xors)
        free(out_failed)
        free(out_reset)
    return columns
