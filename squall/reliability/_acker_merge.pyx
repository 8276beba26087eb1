# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""``Acker._merge`` in C: rows reduced to one per root, looked up in the acker's two sorted runs, updated in
place, and the roots new to the acker merged with the live entries of the delta run into a fresh one.

One call whatever the rows. A lightly loaded worker merges many small batches (an open wave's new trees, the
acks of one idle moment), and each merge with numpy paid some sixty calls' fixed cost however few its rows.
The results, their order and the runs left behind are those of ``Acker``'s numpy path, which runs where this
is not built (``tests/test_pure_fallbacks.py`` compares the two).
"""

from libc.stdlib cimport free, malloc, qsort

import numpy as np

cdef unsigned short UNKNOWN = 0xFFFF
cdef long long MAX_SPOUT_TASK = 0xFFFE
cdef unsigned char STAMP = 0x3F
cdef unsigned char FAILED = 0x40
cdef unsigned char DEAD = 0x80
cdef unsigned char ACKED_HOW = 0
cdef unsigned char FAILED_HOW = 1
cdef char IN_MAIN = 0
cdef char IN_DELTA = 1
cdef char MISSING = 2
cdef char OPEN = 0  # what a row left: its tree still pending (or nothing, for a row not kept)
cdef char DONE = 1
cdef char BAD = 2
cdef Py_ssize_t SMALL = 64  # rows sorted by qsort; more by numpy


cdef struct Row:
    unsigned long long key
    Py_ssize_t index


cdef int _by_key(const void* a, const void* b) noexcept nogil:
    cdef unsigned long long x = (<const Row*>a).key, y = (<const Row*>b).key
    return (x > y) - (x < y)


cdef inline Py_ssize_t _lower_bound(const unsigned long long[::1] keys, unsigned long long key, Py_ssize_t lo) noexcept nogil:
    """The first position at or after ``lo`` whose key is not below ``key``. The rows come sorted, so each search
    starts where the last ended and gallops: a batch of roots close together costs a step or two each."""
    cdef Py_ssize_t n = keys.shape[0], step = 1, hi, mid
    while lo + step < n and keys[lo + step] < key:
        step <<= 1
    hi = lo + step if lo + step < n else n
    lo = lo + (step >> 1) if step > 1 else lo
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline char _outcome(unsigned long long value, unsigned short task, unsigned char state) noexcept nogil:
    """Storm's order: a tree whose value is 0 is complete, else a fail seen fails it; unknown until its init."""
    if task == UNKNOWN:
        return OPEN
    if value == 0:
        return DONE
    if state & FAILED:
        return BAD
    return OPEN


def merge(
    main,
    delta,
    const unsigned long long[::1] roots,
    const unsigned long long[::1] xors,
    const long long[::1] init_tasks,
    const unsigned char[::1] failed,
    const unsigned char[::1] reset,
    unsigned char epoch,
    bint known_only,
):
    """Merge ``roots``' rows into the runs ``main`` and ``delta`` (each ``(keys, vals, tasks, state)``, updated
    in place). ``init_tasks``, ``failed`` and ``reset`` may be None (no inits, no fails, no resets).

    Returns ``(roots, tasks, how)`` of the trees settled (None when none), the new delta run's columns (None
    when no root was added), and the change in live entries."""
    cdef Py_ssize_t n = roots.shape[0], i, j, p, k, settled = 0, kept = 0, delta_live = 0, live_change = 0
    cdef bint has_tasks = init_tasks is not None, has_failed = failed is not None, has_reset = reset is not None
    cdef long long task
    if has_tasks:
        for i in range(init_tasks.shape[0]):
            task = init_tasks[i]
            if task > MAX_SPOUT_TASK or task < -1:
                raise ValueError(f"spout task id {task} is outside [0, {MAX_SPOUT_TASK}] (-1 means no init)")
    if (
        xors.shape[0] != n
        or (has_tasks and init_tasks.shape[0] != n)
        or (has_failed and failed.shape[0] != n)
        or (has_reset and reset.shape[0] != n)
    ):
        raise ValueError("acker: roots, values, spout tasks and flags differ in length")

    cdef unsigned long long[::1] main_keys = main[0], main_vals = main[1]
    cdef unsigned short[::1] main_tasks = main[2]
    cdef unsigned char[::1] main_state = main[3]
    cdef unsigned long long[::1] delta_keys = delta[0], delta_vals = delta[1]
    cdef unsigned short[::1] delta_tasks = delta[2]
    cdef unsigned char[::1] delta_state = delta[3]
    cdef unsigned long long[::1] run_vals
    cdef unsigned short[::1] run_tasks
    cdef unsigned char[::1] run_state

    cdef Row* rows = <Row*>malloc(max(n, 1) * sizeof(Row))
    cdef Py_ssize_t* where = <Py_ssize_t*>malloc(max(n, 1) * sizeof(Py_ssize_t))
    cdef char* run = <char*>malloc(max(n, 1))
    cdef char* outcome = <char*>malloc(max(n, 1))
    cdef unsigned long long value
    cdef unsigned short row_task, new_task
    cdef unsigned char row_state, old, restamped, new_state
    cdef char kind, how
    cdef bint ordered
    cdef const Py_ssize_t[::1] by_root
    cdef unsigned long long[::1] out_roots, new_keys, new_vals
    cdef long long[::1] out_tasks
    cdef unsigned char[::1] out_how, new_states
    cdef unsigned short[::1] new_tasks
    cdef Py_ssize_t d = 0, out = 0, m = delta_keys.shape[0], main_at = 0, delta_at = 0
    settled_roots = settled_tasks = settled_how = new_delta = None
    try:
        if rows == NULL or where == NULL or run == NULL or outcome == NULL:
            raise MemoryError()
        ordered = True
        for i in range(n):
            rows[i].key, rows[i].index = roots[i], i
            if i and roots[i] < roots[i - 1]:
                ordered = False
        if not ordered and n <= SMALL:
            qsort(rows, n, sizeof(Row), _by_key)  # one row per root (checked here): any sort gives one order
        elif not ordered:  # numpy's sort, far quicker than qsort's calls through a pointer
            order = np.argsort(np.asarray(roots))
            by_root = order
            for j in range(n):
                i = by_root[j]
                rows[j].key, rows[j].index = roots[i], i
        for j in range(1, n):
            if rows[j].key == rows[j - 1].key:
                raise ValueError("acker: roots must be XOR-reduced to one row per root")

        for j in range(n):
            i = rows[j].index
            row_task = UNKNOWN
            if has_tasks and init_tasks[i] >= 0:
                row_task = <unsigned short>init_tasks[i]
            row_state = epoch | (FAILED if has_failed and failed[i] else 0)
            main_at = _lower_bound(main_keys, rows[j].key, main_at)
            delta_at = _lower_bound(delta_keys, rows[j].key, delta_at)
            p = -1
            if main_at < main_keys.shape[0] and main_keys[main_at] == rows[j].key and not main_state[main_at] & DEAD:
                p, run[j] = main_at, IN_MAIN
                run_vals, run_tasks, run_state = main_vals, main_tasks, main_state
            elif delta_at < m and delta_keys[delta_at] == rows[j].key and not delta_state[delta_at] & DEAD:
                p, run[j] = delta_at, IN_DELTA
                run_vals, run_tasks, run_state = delta_vals, delta_tasks, delta_state
            where[j] = p
            if p < 0:
                run[j] = MISSING
                outcome[j] = OPEN
                if known_only:
                    continue
                value = xors[i]
                outcome[j] = _outcome(value, row_task, row_state)
                if outcome[j] != OPEN:
                    settled += 1
                elif row_task != UNKNOWN or (row_state & FAILED) or value != 0:
                    where[j] = -2  # kept: a new entry (a zero ack or a reset of an unknown root leaves nothing)
                    kept += 1
                continue
            value = run_vals[p] ^ xors[i]
            run_vals[p] = value
            if row_task != UNKNOWN:
                run_tasks[p] = row_task
            old = run_state[p]
            restamped = row_state if has_reset and reset[i] else old  # a reset: the newest bucket
            new_state = (restamped & STAMP) | (old & FAILED) | (row_state & FAILED)
            outcome[j] = _outcome(value, run_tasks[p], new_state)
            if outcome[j] != OPEN:
                new_state |= DEAD
                settled += 1
                live_change -= 1
            run_state[p] = new_state

        # The settled trees, in the numpy path's order: main's, delta's, then the new roots'; acked before failed.
        if settled:
            settled_roots = np.empty(settled, np.uint64)
            settled_tasks = np.empty(settled, np.int64)
            settled_how = np.empty(settled, np.uint8)
            out_roots, out_tasks, out_how = settled_roots, settled_tasks, settled_how
            k = 0
            for kind in range(IN_MAIN, MISSING + 1):
                for how in range(DONE, BAD + 1):
                    for j in range(n):
                        if run[j] != kind or outcome[j] != how:
                            continue
                        i = rows[j].index
                        out_roots[k] = rows[j].key
                        if kind == IN_MAIN:
                            out_tasks[k] = main_tasks[where[j]]
                        elif kind == IN_DELTA:
                            out_tasks[k] = delta_tasks[where[j]]
                        else:
                            out_tasks[k] = init_tasks[i]
                        out_how[k] = ACKED_HOW if how == DONE else FAILED_HOW
                        k += 1

        # The new roots, merged with the delta's live entries into a fresh sorted run.
        if kept:
            for p in range(m):
                if (delta_state[p] & DEAD) == 0:
                    delta_live += 1
            new_delta = (
                np.empty(delta_live + kept, np.uint64),
                np.empty(delta_live + kept, np.uint64),
                np.empty(delta_live + kept, np.uint16),
                np.empty(delta_live + kept, np.uint8),
            )
            new_keys, new_vals, new_tasks, new_states = new_delta
            for j in range(n + 1):
                if j < n and where[j] != -2:
                    continue
                while d < m and (j == n or delta_keys[d] < rows[j].key):  # the delta's live entries before it
                    if (delta_state[d] & DEAD) == 0:
                        new_keys[out], new_vals[out] = delta_keys[d], delta_vals[d]
                        new_tasks[out], new_states[out] = delta_tasks[d], delta_state[d]
                        out += 1
                    d += 1
                if j == n:
                    break
                i = rows[j].index
                new_keys[out], new_vals[out] = rows[j].key, xors[i]
                new_tasks[out] = UNKNOWN
                if has_tasks and init_tasks[i] >= 0:
                    new_tasks[out] = <unsigned short>init_tasks[i]
                new_states[out] = epoch | (FAILED if has_failed and failed[i] else 0)
                out += 1
            live_change += kept
    finally:
        free(rows)
        free(where)
        free(run)
        free(outcome)
    settlement = None if settled_roots is None else (settled_roots, settled_tasks, settled_how)
    return settlement, new_delta, live_change
