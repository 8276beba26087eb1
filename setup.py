"""Compiles squall's per-tuple modules with Cython; everything else, and these too where they are not compiled,
runs as plain Python. ``make setup`` builds them in place, and ``make`` rebuilds them when their sources change.

Without a C compiler (or Cython) the build goes on as pure Python, with a one-line warning: every compiled module
has a plain Python form, slower. ``SQUALL_PURE_PYTHON=1`` asks for the pure-Python build outright."""

import os
import shlex
import shutil
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError

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
PURE_ENV = "SQUALL_PURE_PYTHON"
CORES = os.cpu_count() or 1  # Cython's translation and the compiler's jobs run on every core
BUILD_ERRORS = (CCompilerError, CompileError, ExecError, LinkError, PlatformError, OSError)


def warn(reason: str) -> None:
    print(f"squall: WARNING: {reason}; building pure Python (slower)", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """All the extensions or none: a module compiled alone may ``cimport`` one that failed (tuple.pxd). They
    compile on every core unless ``-j`` says otherwise."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = CORES

    def run(self) -> None:
        try:
            super().run()
        except BUILD_ERRORS as exc:
            warn(f"the C extensions did not build ({type(exc).__name__}: {str(exc).strip()[:200]})")
            self._remove_built()

    def _remove_built(self) -> None:
        for path in self.get_outputs():  # a half-built set is removed; their .py files are packaged anyway
            if os.path.isfile(path):
                os.remove(path)
        self.extensions = []
        shutil.rmtree(self.build_temp, ignore_errors=True)


def missing_compiler() -> str | None:
    """The C compiler's name when it is not on PATH (POSIX; elsewhere a failed build says so)."""
    words = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "")
    if os.name == "posix" and words and shutil.which(words[0]) is None:
        return words[0]
    return None


def extensions() -> list[Extension]:
    if os.environ.get(PURE_ENV, "").strip() not in ("", "0"):
        print(f"squall: {PURE_ENV} is set: building pure Python (slower)", file=sys.stderr)
        return []
    compiler = missing_compiler()
    if compiler is not None:  # known before Cython translates anything
        warn(f"no C compiler ({compiler} not found)")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        warn("Cython is not installed")
        return []
    return cythonize(
        [
            *COMPILED,
            # a fields grouping's key hash over a string's own UTF-8 bytes, with zlib's crc32
            Extension("squall.model._keyhash", ["squall/model/_keyhash.pyx"], libraries=["z"]),
            # whether a plain bolt's large container holds atomic values only, before its snapshot pickles it
            Extension("squall.spark._atomic", ["squall/spark/_atomic.pyx"]),
            # a task's acks XOR-folded per root at the end of each wave
            Extension("squall.reliability._xor_fold", ["squall/reliability/_xor_fold.pyx"]),
            # an acker task's merge of each batch of inits or acks into its pending roots
            Extension("squall.reliability._acker_merge", ["squall/reliability/_acker_merge.pyx"]),
        ],
        language_level=3,
        quiet=True,
        nthreads=CORES,
        # Annotations stay hints for readers: a task id may be a numpy integer, a flag any truthy value.
        compiler_directives={"annotation_typing": False, "binding": True, "embedsignature": True},
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
