"""Bolt state written to the checkpoint directory (``squall.checkpoint.dir``, any Hadoop URL).

The driver holds every bolt task's snapshot as of the last completed wave; that
is what restarts a lost worker. Every ``squall.state.checkpoint.interval``
completed waves those snapshots are also written, through Hadoop's FileSystem
API from the driver (no Spark job: the run's workers may hold every core), on a
thread of its own, as ``<checkpoint dir>/<run id>/wave-<n>/part-00000``: a pickle
of ``[(task, version, blob), ...]``, sealed under the checkpoint key
(``squall/security/sealing.py``). The newest two are kept. A write still
running when the next falls due makes that one wait for the next interval.
"""

from __future__ import annotations

import logging
import pickle
import threading
from collections.abc import Callable

from pyspark import SparkContext

from squall.security.sealing import BlobSealer
from squall.spark.protocol import Snapshot

log = logging.getLogger("squall")

KEEP = 2


class Checkpointer:
    def __init__(self, sc: SparkContext, run_id: str, interval: int, sealer: BlobSealer) -> None:
        self.sc, self.run_id, self.interval = sc, run_id, interval
        self.sealer = sealer
        self.root = sc.getCheckpointDir()
        self._since = 0
        self._written: list[str] = []
        self._thread: threading.Thread | None = None

    def completed(self, wave: int, snapshots: Callable[[], dict[int, Snapshot | None]]) -> None:
        """A wave completed; ``snapshots()`` gives every task's, when a checkpoint is due."""
        self._since += 1
        if self.root is None or self._since < self.interval or (self._thread and self._thread.is_alive()):
            return
        self._since = 0
        rows = [(task, s.version, s.blob) for task, s in snapshots().items() if s is not None]
        path = f"{self.root.rstrip('/')}/{self.run_id}/wave-{wave}"
        self._thread = threading.Thread(target=self._write, args=(path, rows), name="squall-checkpoint", daemon=True)
        self._thread.start()

    def _file_system(self, path: str):
        hadoop_path = self.sc._jvm.org.apache.hadoop.fs.Path(path)
        return hadoop_path, hadoop_path.getFileSystem(self.sc._jsc.hadoopConfiguration())

    def _write(self, path: str, rows: list) -> None:
        try:
            hadoop_path, fs = self._file_system(f"{path}/part-00000")
            out = fs.create(hadoop_path, True)
            try:
                out.write(bytearray(self.sealer.seal(pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL))))
            finally:
                out.close()
        except Exception:
            log.exception("writing the bolt state checkpoint %s failed; the next interval writes again", path)
            return
        self._written.append(path)
        while len(self._written) > KEEP:
            self._delete(self._written.pop(0))

    def _delete(self, path: str) -> None:
        hadoop_path, fs = self._file_system(path)
        fs.delete(hadoop_path, True)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
