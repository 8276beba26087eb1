"""Bolt state written to the checkpoint directory (``squall.checkpoint.dir``, any Hadoop URL).

The driver holds every bolt task's snapshot as of the last completed wave; that
is what restarts a lost worker. Every ``squall.state.checkpoint.interval``
completed waves those snapshots are also written, by a small Spark job on a
thread of its own, under ``<checkpoint dir>/<run id>/wave-<n>`` as a pickle
file of ``(task, version, blob)`` rows. The newest two are kept. A write
still running when the next falls due makes that one wait for the next interval.
"""

from __future__ import annotations

import logging
import threading

from pyspark import SparkContext

from squall.spark.protocol import Snapshot

log = logging.getLogger("squall")

KEEP = 2


class Checkpointer:
    def __init__(self, sc: SparkContext, run_id: str, interval: int) -> None:
        self.sc, self.run_id, self.interval = sc, run_id, interval
        self.root = sc.getCheckpointDir()
        self._since = 0
        self._written: list[str] = []
        self._thread: threading.Thread | None = None

    def completed(self, wave: int, snapshots: dict[int, Snapshot | None]) -> None:
        self._since += 1
        if self.root is None or self._since < self.interval or (self._thread and self._thread.is_alive()):
            return
        self._since = 0
        rows = [(task, s.version, s.blob) for task, s in snapshots.items() if s is not None]
        path = f"{self.root.rstrip('/')}/{self.run_id}/wave-{wave}"
        self._thread = threading.Thread(target=self._write, args=(path, rows), name="squall-checkpoint", daemon=True)
        self._thread.start()

    def _write(self, path: str, rows: list) -> None:
        try:
            self.sc.parallelize(rows, 1).saveAsPickleFile(path)
        except Exception:
            log.exception("writing the bolt state checkpoint %s failed; the next interval writes again", path)
            return
        self._written.append(path)
        while len(self._written) > KEEP:
            self._delete(self._written.pop(0))

    def _delete(self, path: str) -> None:
        jvm = self.sc._jvm
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        hadoop_path.getFileSystem(self.sc._jsc.hadoopConfiguration()).delete(hadoop_path, True)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
