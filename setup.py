"""Compiles squall's per-tuple modules with Cython; everything else, and these too where they are not compiled,
runs as plain Python. ``make setup`` builds them in place, and ``make`` rebuilds them when their sources change."""

from Cython.Build import cythonize
from setuptools import Extension, setup

COMPILED = [
    "squall/model/tuple.py",  # a Tuple per row per bolt
    "squall/model/groupings.py",  # a fields or shuffle grouping's pick, once per tuple
    "squall/model/hashing.py",  # a fields grouping's hash of a key
    "squall/model/attempt.py",  # a transactional batch's attempt, carried in its rows: no GC tracking
    "squall/spark/collectors.py",  # emit and ack, once per tuple
    "squall/spark/execution.py",  # the loop that runs a batch's rows through a bolt
    "squall/spark/spouts.py",  # a spout's emit, and the ack or fail of each tree it started
    "squall/spark/load.py",  # a load-aware shuffle's pick, once per tuple
    "squall/connectors/kafka/spout.py",  # a Kafka record's translation, emit and ack
    "squall/connectors/kafka/offsets.py",  # a Kafka record's offset, emitted and acked
]

setup(
    ext_modules=cythonize(
        [
            *COMPILED,
            # a fields grouping's key hash over a string's own UTF-8 bytes, with zlib's crc32
            Extension("squall.model._keyhash", ["squall/model/_keyhash.pyx"], libraries=["z"]),
            # whether a plain bolt's large container holds atomic values only, before its snapshot pickles it
            Extension("squall.spark._atomic", ["squall/spark/_atomic.pyx"]),
            # a task's acks XOR-folded per root at the end of each wave
            Extension("squall.reliability._xor_fold", ["squall/reliability/_xor_fold.pyx"]),
        ],
        language_level=3,
        quiet=True,
        # Annotations stay hints for readers: a task id may be a numpy integer, a flag any truthy value.
        compiler_directives={"annotation_typing": False, "binding": True, "embedsignature": True},
    )
)
