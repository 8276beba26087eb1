# C declarations for tuple.py when it is compiled (setup.py): the fields of a Tuple, read by the compiled
# per-tuple path (collectors.py, execution.py) as struct fields.

cimport cython


@cython.freelist(256)  # a tuple is made and freed per row per bolt
cdef class Tuple:
    cdef public tuple values
    cdef public object fields
    cdef public object source_component
    cdef public object source_task
    cdef public object source_stream
    cdef public unsigned long long root  # 0: in no tree, or in several (``trees``)
    cdef public unsigned long long edge
    cdef public object trees
    cdef public object id

cpdef Tuple row_tuple(
    object values,
    object fields,
    object component,
    object task,
    object stream,
    unsigned long long root,
    unsigned long long edge,
)
