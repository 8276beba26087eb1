# C declarations for collectors.py when it is compiled (setup.py).
from squall.model.tuple cimport Tuple


cdef class OutputCollector:
    cdef object _topology
    cdef object _component
    cdef object _task
    cdef bint _acking
    cdef bint _capture
    cdef object _routes
    cdef dict _pickers
    cdef object _check
    cdef dict _arity
    cdef public object ids
    cdef public object next_id
    cdef public object generation
    cdef public object wave
    cdef public dict outbox
    cdef public object ship
    cdef object _acked_root_array
    cdef object _acked_edge_array
    cdef unsigned long long[::1] _acked_root_view
    cdef unsigned long long[::1] _acked_edge_view
    cdef Py_ssize_t _acked_count
    cdef list _acked_rows
    cdef list _entered
    cdef list _message_roots
    cdef list _message_edges
    cdef public list failed_roots
    cdef public list reset_roots
    cdef object _status
    cdef Py_ssize_t _emitted
    cdef Py_ssize_t _acked
    cdef public list captured
    cdef object _last_stream
    cdef Py_ssize_t _last_arity
    cdef object _last_pick

    cdef _emit(self, values, anchors, stream)


cdef class BasicOutputCollector:
    cdef OutputCollector _collector
    cdef public object input  # set by execute_batch per row, as a C struct field
