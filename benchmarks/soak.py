"""A chaos soak: squall's word count on a standalone Spark cluster, fed at a steady rate, under random faults.

    python benchmarks/soak.py --minutes 60 --seed N --plot docs/images/soak-60min.png      # the published run
    python benchmarks/soak.py --minutes 1.5 --fault-interval 12:16 --capacity-secs 10   # CI (tests/test_soak.py)

What runs, all started by this script and stopped at its end (on failure too):

* a Redis server (append-only, synced at every write) on a free port: a Redis Stream the topology reads, and the
  stateful count's checkpoints (``topology.state.provider: redis``);
* a Spark standalone master and three 1-core workers. Where the machine allows network namespaces (root and
  iproute2), the master and each worker run on hosts of their own (``squall/spark/network_hosts.py``), joined by
  a bridge that this script, Redis and the driver sit on; elsewhere all of them run on loopback;
* ``squall run benchmarks/soak_topology.py``: sentences from the embedded queue (even ids) and from the Redis
  Stream (odd ids) are split, counted once per word in a ``StatefulBolt`` and written, every (sentence id,
  position, word), to a SQLite sink.

First the capacity is measured (the sources kept full for ``--capacity-secs``, 20, after 10 s to settle), then
sentences are appended at half of it (``--rate`` sets it instead), so that recovery shows. Every 30 to 90 s
(``--fault-interval``), and never before the fault before it has recovered (or 120 s have passed), a fault comes: a
Spark worker and its executor SIGKILLed and a new worker started on its host; a Python worker SIGKILLed; the
``squall run`` driver SIGKILLed and started again; Redis SIGKILLed and started again; a worker paused (SIGSTOP) for
5 s longer than the message timeout, then resumed; a worker's host taken off the bridge for 5 s. The kinds come in
a random order, each once before any comes again. Everything random comes from ``--seed`` (printed), so a run can
be repeated; a fault kind this machine cannot do is said in the output and left out.

It prints, one line a minute, ``name=value`` figures: sentences emitted, acked and failed since the start (the
spouts' counters, summed over the driver's restarts: a SIGKILLed driver's last second is not in them), the backlog
in the sources, throughput (sentences acked per second over the minute, from the sources), complete latency p50
and p99 over the minute (from the Prometheus histogram), the RSS of the driver's Python process and of the Python
workers (together), their open file descriptors, and the bytes the driver's hub and the workers' links hold (at the
minute, and the most over it). Then each fault with its recovery time:
from the fault to the end of the first 5-second window, wholly after the fault, in which sentences were acked at
90% of the rate or more (so 5 s is the least it can show).

At the end the input stops, the backlog drains, the driver is stopped, and the script checks, printing each:

* ``all_acked``: the queue is empty, and the stream's group has nothing pending and nothing undelivered;
* ``sink_complete``: every word of every sentence appended is in the sink, at its position;
* ``counts_exact``: the stateful counts, read from the last checkpoint in Redis, equal the exact counts;
* ``rss_growth``: after the warm-up (the first 5 minutes; the first third of a run shorter than 15 minutes),
  driver and worker RSS grow by at most 10% to the end. Only the samples taken while no fault was under way
  (from a fault's recovery to the next fault) count, and a process a fault restarted starts small, so the least
  figure of the last window's worth of them (1 minute, or a sixth of a short run) is compared with the largest of
  the first window's worth after the warm-up (if faults left no such sample, every sample counts, as it says);
* ``fd_growth``: open file descriptors, compared the same way, grow by none (where they do, the kinds of
  descriptors that grew are printed);
* ``recovery``: the p99 of the recovery times is at most 30 s (``--recovery-target``).

It exits 1 naming every check that failed. ``--plot out.png`` draws throughput, latency and RSS over time,
``--samples out.jsonl`` keeps every second's figures, ``--kinds`` chooses the faults (``driver_kill,worker_pause``
repeats one kind of recovery), and ``--keep`` keeps the run's directory (the driver's logs, Spark's, the sink).
The driver's and executors' JVMs run with C1 alone (``JVM_OPTIONS``): they only start the run and carry Spark's
control messages, and they start sooner, which a driver's restart waits for.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from prometheus_client.parser import text_string_to_metric_families
from soak_topology import CONF, LATE, MAX_WORDS, NAME, SINK_SCHEMA  # beside this script

from squall.connectors import ReliableQueue
from squall.connectors.local_redis import LocalRedisServer
from squall.security import BlobSealer, checkpoint_key
from squall.spark.network_hosts import NetworkHosts
from squall.spark.standalone import SparkStandaloneCluster, free_port
from squall.state.providers import RedisStateProvider

SEALER = BlobSealer(checkpoint_key({}))  # the key every run here signs its checkpoints with (the default key file)

TOPOLOGY = Path(__file__).with_name("soak_topology.py")
VOCABULARY = [f"w{i:03d}" for i in range(1000)]
BLOCK = 4096  # sentences generated together from one seed
STREAM, QUEUE, GROUP = "sentences", "sentences", "squall"
SOURCES = ("queue", "stream")  # source i appends ids i, i + 2, i + 4, ...
WORKERS = 3
KINDS = ("worker_kill", "python_worker_kill", "driver_kill", "redis_restart", "worker_pause", "network_cut")
WINDOW_S = 5.0  # throughput window for recovery
RECOVERED = 0.9  # of the rate
FILL = 10_000  # sentences kept in each source while the capacity is measured
CUT_S = 5.0  # how long a host is off the bridge
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
GIVE_UP_S = 120.0  # the next fault comes after this long even if the last has not recovered


def say(*words: Any, **figures: Any) -> None:
    """One line: the words, then ``name=value`` for each figure."""
    parts = [str(w) for w in words]
    for name, value in figures.items():
        text = f"{value:.1f}" if isinstance(value, float) else str(value)
        parts.append(f"{name}={json.dumps(text) if ' ' in text else text}")
    print(" ".join(parts), flush=True)


# -- the sentences ---------------------------------------------------------------------------------------
class Sentences:
    """Sentence ``i``'s text: 1 to ``MAX_WORDS`` words of ``VOCABULARY``, the same for the same seed."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._block, self._texts = -1, []

    def text(self, i: int) -> str:
        block = i // BLOCK
        if block != self._block:
            rnd = random.Random(self.seed * 1_000_003 + block)
            self._texts = [" ".join(rnd.choices(VOCABULARY, k=rnd.randint(1, MAX_WORDS))) for _ in range(BLOCK)]
            self._block = block
        return self._texts[i % BLOCK]


def sentence_ids(appended: list[int]) -> Iterator[int]:
    """Every id appended, in order, when source ``s`` appended ``appended[s]`` sentences (ids ``2n + s``)."""
    both = 2 * min(appended)
    return itertools.chain(range(both), range(both + appended.index(max(appended)), 2 * max(appended), 2))


# -- processes, from /proc ----------------------------------------------------------------------------------
def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def fd_kinds(pid: int) -> Counter:
    """What ``pid``'s open file descriptors are: ``socket``, ``pipe``, ``anon_inode:[...]`` or a file's path."""
    kinds: Counter = Counter()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(("socket:", "pipe:")):
                    target = target.split(":[")[0]
                kinds[re.sub(r"driver-\d+\.log$", "driver-N.log", target)] += 1
    return kinds


def open_fds(pid: int) -> int | None:
    """``pid``'s open file descriptors; None for a process that is gone, or is going (it has no RSS then)."""
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    return fds if rss_mb(pid) is not None else None


def python_workers(cluster: SparkStandaloneCluster) -> list[int]:
    """Every running worker's Python worker processes."""
    return [pid for index in cluster.running() for pid in cluster.python_workers(index)]


# -- the sources ---------------------------------------------------------------------------------------------
def redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)


class Sources:
    """The queue and the stream: appending, their backlog, and what has been acked from them."""

    def __init__(self, queue_path: Path, redis_url: str, sentences: Sentences) -> None:
        self.queue_path, self.sentences = queue_path, sentences
        self.redis = redis_client(redis_url)
        self.producer = ReliableQueue(queue_path, QUEUE)
        self.reader = sqlite3.connect(queue_path, timeout=30, check_same_thread=False)
        self.appended = [0, 0]  # per source
        self.lock = threading.Lock()  # appends and backlog readings, so that both are of one moment

    def append(self, source: int, count: int) -> None:
        """Append the source's next ``count`` sentences; an error leaves them to append again."""
        first = self.appended[source]
        ids = [2 * (first + k) + source for k in range(count)]
        payloads = [{"id": i, "sentence": self.sentences.text(i)} for i in ids]
        with self.lock:
            if source == 0:
                self.producer.put_many(payloads)
            else:
                pipe = self.redis.pipeline(transaction=False)
                for payload in payloads:
                    pipe.xadd(STREAM, {"data": json.dumps(payload)})
                pipe.execute()
            self.appended[source] += count

    def backlog(self) -> tuple[int, int, int] | None:
        """``(queue backlog, stream backlog, sentences acked)``, or None while the stream cannot be read."""
        with self.lock:
            (queue_left,) = self.reader.execute("SELECT count(*) FROM messages WHERE queue = ?", (QUEUE,)).fetchone()
            try:
                added, pending, undelivered = self.stream_state()
            except redis.RedisError:
                return None
            acked = self.appended[0] - queue_left + added - pending - undelivered
            return queue_left, pending + undelivered, acked

    def stream_state(self) -> tuple[int, int, int]:
        """``(entries added, pending, not yet delivered)`` of the stream."""
        if not self.redis.exists(STREAM):
            return 0, 0, 0
        added = self.redis.xinfo_stream(STREAM)["entries-added"]
        group = next((g for g in self.redis.xinfo_groups(STREAM) if g["name"] in (GROUP, GROUP.encode())), None)
        if group is None:
            return added, 0, added
        # Counted, not the group's lag: after a restart Redis 7.0 does not know the lag, and may later get it wrong.
        after = b"(" + group["last-delivered-id"]
        undelivered = len(self.redis.xrange(STREAM, min=after, max="+", count=1_000_000))
        return added, group["pending"], undelivered

    def trim(self) -> None:
        """Drop the stream's entries that are acked: those before the oldest pending one and the last delivered."""
        groups = [g for g in self.redis.xinfo_groups(STREAM) if g["name"] in (GROUP, GROUP.encode())]
        if not groups:
            return
        floor = groups[0]["last-delivered-id"]
        pending = self.redis.xpending(STREAM, GROUP)
        if pending["pending"]:
            floor = min(pending["min"], floor, key=entry_order)
        self.redis.xtrim(STREAM, minid=floor, approximate=True)


def entry_order(entry_id: bytes | str) -> tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


class Producer(threading.Thread):
    """Appends sentences every 0.1 s: in ``fill`` mode, so that each source holds ``FILL``; then at ``rate``."""

    def __init__(self, sources: Sources) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.sources = sources
        self.rate: float | None = None  # sentences a second, both sources together; None: fill
        self.stopped = threading.Event()
        self.errors = 0

    def run(self) -> None:
        due, last, trimmed = [0.0, 0.0], time.monotonic(), time.monotonic()
        while not self.stopped.wait(0.1):
            now = time.monotonic()
            try:
                if self.rate is None:
                    backlog = self.sources.backlog()
                    if backlog is not None:
                        for source in (0, 1):
                            if backlog[source] < FILL:
                                self.sources.append(source, FILL - backlog[source])
                else:
                    for source in (0, 1):
                        due[source] += self.rate / 2 * (now - last)
                        if due[source] >= 1:
                            self.sources.append(source, int(due[source]))
                            due[source] -= int(due[source])
                if now - trimmed > 10:
                    trimmed = now
                    self.sources.trim()
            except redis.RedisError:
                self.errors += 1  # Redis is away: what is due is appended once it is back
            last = now


# -- the driver -------------------------------------------------------------------------------------------
class Driver:
    """``squall run`` of the soak's topology, in a process group of its own, its output in a log file."""

    def __init__(self, master: str, conf: dict[str, Any], directory: Path, host: str) -> None:
        self.master, self.conf, self.directory, self.host = master, conf, directory, host
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.ui_port = 0

    def start(self) -> None:
        self.starts += 1
        self.ui_port = free_port()
        args = [sys.executable, "-m", "squall.cli", "-v", "run", str(TOPOLOGY), "--master", self.master]
        args += ["--idle-secs", "0", "--ui-port", str(self.ui_port)]
        for key, value in {
            "spark.task.maxFailures": 1000,  # a worker job outlives many lost workers
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            # The JVMs only start the run and carry Spark's control messages: they start sooner with C1 alone.
            "spark.driver.extraJavaOptions": JVM_OPTIONS,
            "spark.executor.extraJavaOptions": JVM_OPTIONS,
        }.items():
            args += ["--spark-conf", f"{key}={value}"]
        for key, value in self.conf.items():
            args += ["--conf", f"{key}={value}"]
        log = open(self.directory / f"driver-{self.starts}.log", "w")  # noqa: SIM115 - the driver writes it
        self.process = subprocess.Popen(
            args, cwd=self.directory, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    def kill(self) -> None:
        """SIGKILL the driver with its Spark JVM."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout: float = 90) -> int:
        """Stop it as Ctrl-C does (pending trees get 5 s); its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def log_tail(self, chars: int = 3000) -> str:
        return (self.directory / f"driver-{self.starts}.log").read_text(errors="replace")[-chars:]

    def metrics(self) -> dict[str, Any] | None:
        """The spouts' counters and latency buckets, and the buffered bytes, from ``/metrics``, with the start of
        the driver that gave them (``start``); None if it is down."""
        start, port = self.starts, self.ui_port  # of one start: a restart changes both
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                text = response.read().decode()
        except (OSError, ValueError):
            return None
        figures: dict[str, Any] = {"emitted": 0, "acked": 0, "failed": 0, "buckets": {}, "hub": 0, "links": 0}
        figures["start"] = start
        names = {
            "squall_tuples_emitted_total": "emitted",
            "squall_tuples_acked_total": "acked",
            "squall_tuples_failed_total": "failed",
        }
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                component = sample.labels.get("component")
                if sample.name in names and component in SOURCES:
                    figures[names[sample.name]] += sample.value
                    figures["running"] = True
                elif sample.name == "squall_complete_latency_seconds_bucket" and component in SOURCES:
                    bound = float(sample.labels["le"])
                    figures["buckets"][bound] = figures["buckets"].get(bound, 0) + sample.value
                elif sample.name == "squall_hub_buffered_bytes":
                    figures["hub"] = int(sample.value)
                elif sample.name == "squall_link_buffered_bytes":
                    figures["links"] = int(sample.value)
        return figures if figures.get("running") else None  # a topology killed (Ctrl-C) shows no counters


# -- sampling ----------------------------------------------------------------------------------------------
@dataclass
class Sample:
    t: float  # seconds since the steady input began (negative before); taken with the sources' reading
    acked: int | None  # sentences acked, from the sources
    backlog: int | None
    counters: dict[str, float]  # emitted, acked, failed: summed over the driver's restarts
    buckets: dict[float, float]  # complete-latency histogram (cumulative per bound), summed likewise
    driver_rss: float | None
    workers_rss: float | None
    driver_fds: int | None
    workers_fds: int | None
    hub: int | None
    links: int | None


def quantile(buckets: dict[float, float], q: float) -> float | None:
    """The ``q`` quantile of a cumulative histogram, interpolated within its bucket, as Prometheus does."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank, lower, below = q * buckets[bounds[-1]], 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / max(buckets[bound] - below, 1e-9)
        lower, below = bound, buckets[bound]
    return lower


class Sampler(threading.Thread):
    """Takes a ``Sample`` every second, and prints the minute's figures at each whole minute of the steady run."""

    def __init__(self, soak: Soak) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.soak = soak
        self.samples: list[Sample] = []
        self.stopped = threading.Event()
        self.origin = time.monotonic()  # of t = 0: the sampler's start, then the steady input's (``begin``)
        self.begun = False
        self.lock = threading.Lock()
        self._counters = {"emitted": 0.0, "acked": 0.0, "failed": 0.0}
        self._buckets: dict[float, float] = {}
        self._last: tuple[int, dict[str, Any]] | None = None  # (driver start, its last metrics)
        self._minutes_said = 0
        self.fd_listings: list[tuple[float, dict[str, Counter]]] = []  # every 10 s: what the fds are

    def now(self) -> float:
        return time.monotonic() - self.origin

    def begin(self) -> None:
        """The steady input begins: t = 0 from now on; the samples before it get negative times."""
        with self.lock:
            shift = self.now()
            self.origin += shift
            for sample in self.samples:
                sample.t -= shift
            self.begun = True

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            try:
                sample = self.take()
                with self.lock:
                    sample.t -= self.origin  # taken as time.monotonic(): t = 0 may have moved meanwhile
                    self.samples.append(sample)
                self.say_minute()
            except Exception as exc:  # a figure that could not be read: the next second tries again
                say("sampler_error", error=repr(exc)[:200])

    def take(self) -> Sample:
        soak = self.soak
        backlog = soak.sources.backlog()
        taken = time.monotonic()
        driver = soak.driver.pid  # its figures right after the sources': a fault may come at any moment
        driver_rss, driver_fds = (rss_mb(driver), open_fds(driver)) if driver else (None, None)
        workers = python_workers(soak.cluster)
        worker_rss = [r for r in map(rss_mb, workers) if r is not None]
        worker_fds = [f for f in map(open_fds, workers) if f is not None]
        metrics = soak.driver.metrics()
        if metrics is not None:
            start = metrics["start"]
            before = self._last[1] if self._last is not None and self._last[0] == start else None
            for name in self._counters:
                self._counters[name] += metrics[name] - (before[name] if before else 0)
            for bound, count in metrics["buckets"].items():
                self._buckets[bound] = (
                    self._buckets.get(bound, 0) + count - (before["buckets"].get(bound, 0) if before else 0)
                )
            self._last = (start, metrics)
        if len(self.samples) % 10 == 0:
            listing = {"driver": fd_kinds(driver) if driver else Counter(), "workers": Counter()}
            for pid in workers:
                listing["workers"].update(fd_kinds(pid))
            self.fd_listings.append((self.now(), listing))
        return Sample(
            taken,
            backlog[2] if backlog else None,
            backlog[0] + backlog[1] if backlog else None,
            dict(self._counters),
            dict(self._buckets),
            driver_rss,
            sum(worker_rss) if len(worker_rss) >= WORKERS else None,
            driver_fds,
            sum(worker_fds) if len(worker_fds) >= WORKERS else None,
            metrics["hub"] if metrics else None,
            metrics["links"] if metrics else None,
        )

    def say_minute(self) -> None:
        if not self.begun or self.now() < 60 * (self._minutes_said + 1):
            return
        if self._minutes_said >= self.soak.args.minutes:
            return
        self._minutes_said += 1
        t1 = 60.0 * self._minutes_said
        say("minute", **minute_figures(self.samples, t1 - 60, t1))


def at(samples: list[Sample], t: float) -> Sample:
    """The last sample taken at or before ``t`` (the first one, if none)."""
    found = samples[0]
    for sample in samples:
        if sample.t > t:
            break
        found = sample
    return found


def acked_between(samples: list[Sample], t0: float, t1: float) -> float | None:
    """Sentences acked a second, from the last reading at or before ``t0`` to the last at or before ``t1``."""
    readings = [s for s in samples if s.acked is not None]
    if not readings:
        return None
    first, last = at(readings, t0), at(readings, t1)
    return (last.acked - first.acked) / max(last.t - first.t, 1e-9)


def minute_figures(samples: list[Sample], t0: float, t1: float) -> dict[str, Any]:
    """A span's figures: counters at its end, throughput and latency over it, the rest as of its end."""
    end, start = at(samples, t1), at(samples, t0)
    delta = {b: end.buckets.get(b, 0) - start.buckets.get(b, 0) for b in end.buckets}
    p50, p99 = quantile(delta, 0.5), quantile(delta, 0.99)
    span = [s for s in samples if t0 < s.t <= t1]
    throughput = acked_between(samples, t0, t1)

    def biggest(name: str) -> int | str:
        values = [getattr(s, name) for s in span if getattr(s, name) is not None]
        return max(values) if values else "-"

    def last(name: str, digits: int = 0) -> float | int | str:
        values = [getattr(s, name) for s in span if getattr(s, name) is not None]
        return (round(values[-1], digits) if digits else values[-1]) if values else "-"

    return {
        "t_s": round(t1),
        "emitted": int(end.counters["emitted"]),
        "acked": int(end.counters["acked"]),
        "failed": int(end.counters["failed"]),
        "backlog": last("backlog"),
        "throughput": round(throughput) if throughput is not None else "-",
        "latency_p50_ms": round(p50 * 1000) if p50 is not None else "-",
        "latency_p99_ms": round(p99 * 1000) if p99 is not None else "-",
        "driver_rss_mb": last("driver_rss", 1),
        "workers_rss_mb": last("workers_rss", 1),
        "driver_fds": last("driver_fds"),
        "workers_fds": last("workers_fds"),
        "hub_buffered_bytes": last("hub"),
        "hub_buffered_bytes_max": biggest("hub"),
        "link_buffered_bytes": last("links"),
        "link_buffered_bytes_max": biggest("links"),
    }


# -- faults --------------------------------------------------------------------------------------------------
@dataclass
class Fault:
    t: float
    kind: str
    target: str
    recovery: float | None = None  # seconds; None: not recovered


def recovery_of(samples: list[Sample], t: float, rate: float, until: float) -> float | None:
    """Seconds from a fault at ``t`` to the end of the first ``WINDOW_S`` window wholly after it in which the
    sentences acked reached ``RECOVERED`` of the rate; None if none before ``until``."""
    readings = [s for s in samples if s.acked is not None and s.t >= t]
    for i, first in enumerate(readings):
        for last in readings[i + 1 :]:
            if last.t > until:
                return None
            if last.t - first.t >= WINDOW_S:
                if (last.acked - first.acked) / (last.t - first.t) >= RECOVERED * rate:
                    return last.t - t
                break
    return None


@dataclass
class Soak:
    """Everything the soak starts, and what it found."""

    args: argparse.Namespace
    seed: int
    directory: Path
    rnd: random.Random = field(init=False)
    hosts: NetworkHosts | None = None
    redis: LocalRedisServer | None = None
    cluster: SparkStandaloneCluster | None = None
    driver: Driver | None = None
    sources: Sources | None = None
    producer: Producer | None = None
    sampler: Sampler | None = None
    faults: list[Fault] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    rate: float = 0.0

    def __post_init__(self) -> None:
        self.rnd = random.Random(self.seed)

    # -- setting up and tearing down -----------------------------------------------------------------------
    def start(self) -> None:
        why = NetworkHosts.unavailable()
        if why is None:
            try:
                self.hosts = NetworkHosts(["master", *(f"worker{i}" for i in range(WORKERS))])
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                why = f"network namespaces could not be made: {exc}"
        self.kinds = [k for k in self.args.kinds if k != "network_cut" or self.hosts is not None]
        if self.hosts is None and "network_cut" in self.args.kinds:
            say("fault_kind_skipped", kind="network_cut", reason=why)
        host = self.hosts.gateway if self.hosts else "127.0.0.1"
        say("setup", network_hosts="yes" if self.hosts else "no", host=host, workers=WORKERS)
        (self.directory / "redis").mkdir()
        (self.directory / "spark").mkdir()
        self.redis = LocalRedisServer(self.directory / "redis", persistent=True, host=host)
        self.cluster = SparkStandaloneCluster(self.directory / "spark", workers=WORKERS, hosts=self.hosts)
        sink = self.directory / "sink.sqlite"
        with contextlib.closing(sqlite3.connect(sink)) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(SINK_SCHEMA)
        self.sources = Sources(self.directory / "queue.sqlite", self.redis.url, Sentences(self.seed))
        conf = {
            "soak.queue": self.directory / "queue.sqlite",
            "soak.stream": STREAM,
            "soak.sink": sink,
            "soak.dedup.window": 2_000_000,
            "soak.claim.idle.ms": 15_000,
            "squall.redis.url": self.redis.url,
            "squall.workers": WORKERS,
            "squall.checkpoint.dir": self.directory / "checkpoints",
            "topology.message.timeout.secs": self.args.message_timeout,
        }
        self.driver = Driver(self.cluster.url, conf, self.directory, host)
        self.producer = Producer(self.sources)
        self.producer.start()
        self.sampler = Sampler(self)
        self.sampler.start()
        self.driver.start()

    def stop(self) -> None:
        for part in (self.producer, self.sampler):
            if part is not None:
                part.stopped.set()
        if self.driver is not None and self.driver.pid is not None:
            self.driver.kill()
        if self.cluster is not None:
            self.cluster.stop()
        if self.redis is not None:
            self.redis.stop()
        if self.hosts is not None:
            self.hosts.close()

    # -- the run --------------------------------------------------------------------------------------------
    def wait_acked(self, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reading = self.sources.backlog()
            if reading is not None and reading[2] > 0:
                return
            if self.driver.process.poll() is not None:
                raise RuntimeError(f"the driver exited before {what}:\n{self.driver.log_tail()}")
            time.sleep(1)
        raise RuntimeError(f"no {what} within {timeout:.0f}s:\n{self.driver.log_tail()}")

    def measure_capacity(self) -> float:
        """Sentences acked a second while both sources stay full, over ``--capacity-secs`` after half as long to
        settle."""
        time.sleep(self.args.capacity_secs / 2)
        first = self.sources.backlog()
        started = time.monotonic()
        time.sleep(self.args.capacity_secs)
        last = self.sources.backlog()
        if first is None or last is None:
            raise RuntimeError("the sources could not be read while measuring the capacity")
        return (last[2] - first[2]) / (time.monotonic() - started)

    def run(self) -> None:
        self.start()
        self.wait_acked("sentence acked", 300)
        capacity = self.measure_capacity() if self.args.rate is None else None
        self.rate = self.args.rate or capacity / 2
        say(
            "input",
            capacity_sentences_per_s=round(capacity) if capacity else "-",
            rate_sentences_per_s=round(self.rate),
        )
        self.producer.rate = self.rate
        self.sampler.begin()
        end = 60.0 * self.args.minutes
        quiet = min(30.0, 0.1 * end)  # no fault starts this close to the end
        lo, hi = self.args.fault_interval
        order: list[str] = []
        next_fault = self.rnd.uniform(lo, hi)
        while self.sampler.now() < end:
            time.sleep(0.5)
            if self.sampler.now() >= next_fault and self.sampler.now() < end - quiet:
                if not order:
                    order = self.rnd.sample(self.kinds, len(self.kinds))
                fault = self.inject(order.pop())
                next_fault = fault.t + self.rnd.uniform(lo, hi)
                self.wait_recovered(fault, max(next_fault, fault.t + GIVE_UP_S), end)
        self.producer.stopped.set()
        say("input_stopped", t_s=round(self.sampler.now()))

    def wait_recovered(self, fault: Fault, give_up: float, end: float) -> None:
        """Until the fault has recovered, or ``give_up`` (seconds since t = 0), or the end."""
        while self.sampler.now() < min(give_up, end):
            if recovery_of(self.sampler.samples, fault.t, self.rate, self.sampler.now()) is not None:
                return
            time.sleep(0.5)

    def inject(self, kind: str) -> Fault:
        """Make a fault of ``kind`` happen; it is said as it starts."""
        cluster, t = self.cluster, self.sampler.now()
        running = cluster.running()
        worker = self.rnd.choice(running)
        host = cluster.worker_hosts[worker]
        target = f"spark-worker-{worker}@{host}"
        if kind == "python_worker_kill":
            pids = cluster.python_workers(worker)
            victim = self.rnd.choice(pids) if pids else None
            target = f"python-worker-{victim}@{host}"
        elif kind == "driver_kill":
            target = f"driver-{self.driver.pid}"
        elif kind == "redis_restart":
            target = f"redis-{self.redis.process.pid}"
        say("fault_begins", t_s=round(t, 1), kind=kind, target=target)
        if kind == "worker_kill":
            cluster.kill_worker(worker)
            cluster.add_worker(host)
        elif kind == "python_worker_kill":
            if victim is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
        elif kind == "driver_kill":
            self.driver.kill()
            self.driver.start()
        elif kind == "redis_restart":
            self.redis.stop(kill=True)
            self.redis.start()
        elif kind == "worker_pause":
            cluster.signal_worker(worker, signal.SIGSTOP)
            time.sleep(self.args.message_timeout + 5)
            cluster.signal_worker(worker, signal.SIGCONT)
        elif kind == "network_cut":
            self.hosts.set_link(host, False)
            time.sleep(CUT_S)
            self.hosts.set_link(host, True)
        fault = Fault(t, kind, target)
        self.faults.append(fault)
        return fault

    def drain(self, timeout: float) -> float:
        """Until the sources' backlog is 0; the seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            reading = self.sources.backlog()
            if reading is not None and reading[0] + reading[1] == 0:
                break
            time.sleep(1)
        return time.monotonic() - started


# -- the end checks ------------------------------------------------------------------------------------------
def check(name: str, ok: bool, failed: list[str], **figures: Any) -> None:
    say(check=name, result="pass" if ok else "fail", **figures)
    if not ok:
        failed.append(name)


def check_acked(soak: Soak, failed: list[str]) -> None:
    queue = ReliableQueue(soak.sources.queue_path, QUEUE)
    left = sum(queue.counts().values())
    queue.close()
    added, pending, undelivered = soak.sources.stream_state()
    check(
        "all_acked",
        left == 0 and pending == 0 and undelivered == 0,
        failed,
        queue_left=left,
        stream_pending=pending,
        stream_undelivered=undelivered,
        stream_entries=added,
    )


def check_sink(soak: Soak, appended: list[int], failed: list[str]) -> None:
    """Every (sentence, position) appended is in the sink with its word; nothing else is."""
    sentences = Sentences(soak.seed)
    missing = wrong = rows = repeated = 0
    examples: list[str] = []
    with contextlib.closing(sqlite3.connect(soak.directory / "sink.sqlite")) as db:
        cursor = db.execute("SELECT sentence, position, word, deliveries FROM words ORDER BY sentence, position")
        row = cursor.fetchone()
        for i in sentence_ids(appended):
            for position, word in enumerate(sentences.text(i).split(" ")):
                while row is not None and (row[0], row[1]) < (i, position):
                    wrong += 1  # a row for no word appended
                    row = cursor.fetchone()
                if row is not None and (row[0], row[1]) == (i, position):
                    rows += 1
                    repeated += row[3] > 1
                    if row[2] != word:
                        wrong += 1
                        examples.append(f"{i}:{position} {row[2]}!={word}")
                    row = cursor.fetchone()
                else:
                    missing += 1
                    if len(examples) < 5:
                        examples.append(f"{i}:{position} missing")
        while row is not None:
            wrong += 1
            row = cursor.fetchone()
    check(
        "sink_complete",
        missing == 0 and wrong == 0,
        failed,
        sentences=sum(appended),
        words=rows,
        words_delivered_more_than_once=repeated,
        missing=missing,
        wrong=wrong,
        examples=",".join(examples[:5]) or "-",
    )


def check_counts(soak: Soak, appended: list[int], failed: list[str]) -> None:
    sentences = Sentences(soak.seed)
    exact = Counter(word for i in sentence_ids(appended) for word in sentences.text(i).split(" "))
    restored = RedisStateProvider(soak.redis.url, NAME, SEALER).load()
    counted: Counter = Counter()
    late = 0
    for state in restored.states.values():
        for key, value in state.items():
            if isinstance(key, str):
                counted[key] += value
            elif key == LATE:
                late += value
    above = sum(1 for w in exact | counted if counted[w] > exact[w])
    below = sum(1 for w in exact | counted if counted[w] < exact[w])
    check(
        "counts_exact",
        above == below == 0,
        failed,
        words=len(exact),
        counted=sum(counted.values()),
        exact=sum(exact.values()),
        words_above=above,
        words_below=below,
        counted_after_their_chunk_went=late,
        checkpoint=restored.checkpoint,
    )


def windows(minutes: float) -> tuple[float, float, float]:
    """(the warm-up, the window after it, the last window), in seconds: 5 minutes and 1 minute, scaled for a
    run shorter than 15 minutes to a third and a sixth of it."""
    total = 60.0 * minutes
    return (300.0, 60.0, total) if total >= 900 else (total / 3, total / 6, total)


def steady(samples: list[Sample], faults: list[Fault]) -> list[Sample]:
    """The samples taken while no fault was under way: from each fault's recovery to the next fault."""
    spans = [(f.t, f.t + (f.recovery if f.recovery is not None else math.inf)) for f in faults]
    return [s for s in samples if s.t >= 0 and not any(start <= s.t <= end for start, end in spans)]


def growth(samples: list[Sample], name: str, minutes: float) -> tuple[float, float] | None:
    """(the largest figure of the first window's worth of samples after the warm-up, the least of the last
    window's worth before the end)."""
    warm, window, total = windows(minutes)
    values = [v for s in samples if warm <= s.t <= total and (v := getattr(s, name)) is not None]
    gaps = [b.t - a.t for a, b in itertools.pairwise(samples)]
    interval = statistics.median(gaps) if gaps else 1.0  # a sample a second, or less often on a busy machine
    count = max(1, min(round(window / interval), len(values) // 2))  # the two windows never overlap
    return (max(values[:count]), min(values[-count:])) if values else None


def check_resources(soak: Soak, failed: list[str]) -> None:
    minutes = soak.args.minutes
    warm, window, total = windows(minutes)
    samples, which = steady(soak.sampler.samples, soak.faults), "steady"
    if not any(warm <= s.t <= total for s in samples):  # faults all along: every sample after the warm-up
        samples, which = soak.sampler.samples, "all"
    figures, ok = {"samples": which}, True
    for name in ("driver_rss", "workers_rss"):
        found = growth(samples, name, minutes)
        grew = found[1] / found[0] - 1 if found else math.inf
        ok &= grew <= 0.10
        figures[f"{name}_mb"] = f"{found[0]:.1f}->{found[1]:.1f}" if found else "-"
        figures[f"{name}_growth_pct"] = round(100 * grew, 1) if found else "-"
    check("rss_growth", ok, failed, **figures, limit_pct=10, after_s=round(warm), window_s=round(window))
    figures, ok = {"samples": which}, True
    for name in ("driver_fds", "workers_fds"):
        found = growth(samples, name, minutes)
        ok &= found is not None and found[1] <= found[0]
        figures[name] = f"{found[0]}->{found[1]}" if found else "-"
    check("fd_growth", ok, failed, **figures, limit=0, after_s=round(warm), window_s=round(window))
    listings = soak.sampler.fd_listings
    if not ok and listings:  # what the new descriptors are, to tell a leak from a passing one
        first = min(listings, key=lambda listing: abs(listing[0] - warm - window))[1]
        last = min(listings, key=lambda listing: abs(listing[0] - 60.0 * minutes))[1]
        for process in ("driver", "workers"):
            grown = {kind: n - first[process][kind] for kind, n in last[process].items() if n > first[process][kind]}
            say("fd_growth_detail", process=process, grown=json.dumps(grown))


def measure_recoveries(soak: Soak) -> None:
    end = soak.sampler.samples[-1].t
    for fault in soak.faults:
        fault.recovery = recovery_of(soak.sampler.samples, fault.t, soak.rate, end)


def check_recovery(soak: Soak, failed: list[str]) -> None:
    for fault in soak.faults:
        say(
            "fault",
            t_s=round(fault.t, 1),
            kind=fault.kind,
            target=fault.target,
            recovery_s=round(fault.recovery, 1) if fault.recovery is not None else "none",
        )
    times = sorted(f.recovery if f.recovery is not None else math.inf for f in soak.faults)
    p99 = times[min(len(times) - 1, math.ceil(0.99 * len(times)) - 1)] if times else 0.0
    p50 = times[(len(times) - 1) // 2] if times else 0.0
    check(
        "recovery",
        p99 <= soak.args.recovery_target,
        failed,
        faults=len(times),
        recovery_p50_s=round(p50, 1),
        recovery_p99_s=round(p99, 1),
        target_s=soak.args.recovery_target,
    )


# -- the plot -----------------------------------------------------------------------------------------------
def plot(soak: Soak, path: Path) -> None:
    """Throughput (5-s windows) against the rate, complete latency p50/p99 (15-s windows) and RSS, over time,
    with the faults marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = [s for s in soak.sampler.samples if s.t >= 0]
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(12, 9), sharex=True)
    ticks = [s.t for s in samples]
    readings = [s for s in samples if s.acked is not None]
    throughput = []
    for t in ticks:  # none where the sources could not be read at either end of the window
        first, last = (at(readings, t - WINDOW_S), at(readings, t)) if readings else (None, None)
        fresh = first is not None and first.t > t - WINDOW_S - 2 and last.t > t - 2 and last.t > first.t
        throughput.append((last.acked - first.acked) / (last.t - first.t) if fresh else math.nan)
    minutes = [t / 60 for t in ticks]
    top.plot(minutes, throughput, lw=0.8, label="sentences acked/s (5 s)")
    top.axhline(soak.rate, color="grey", ls="--", lw=0.8, label="rate")
    top.set_ylabel("sentences/s")
    spans = [t for t in range(15, int(ticks[-1]) + 1, 15)] if ticks else []
    p50, p99 = [], []
    for t in spans:
        end, start = at(samples, t), at(samples, t - 15)
        delta = {b: end.buckets.get(b, 0) - start.buckets.get(b, 0) for b in end.buckets}
        p50.append((quantile(delta, 0.5) or math.nan) * 1000)
        p99.append((quantile(delta, 0.99) or math.nan) * 1000)
    middle.plot([t / 60 for t in spans], p50, lw=0.8, marker=".", label="complete latency p50 (15 s)")
    middle.plot([t / 60 for t in spans], p99, lw=0.8, marker=".", label="p99")
    middle.set_yscale("log")
    middle.set_ylabel("ms")
    for name, label in (("driver_rss", "driver (Python)"), ("workers_rss", "Python workers, together")):
        values = [getattr(s, name) for s in samples]
        bottom.plot(minutes, [math.nan if v is None else v for v in values], lw=0.8, label=label)
    bottom.set_ylabel("RSS, MB")
    bottom.set_xlabel("minutes")
    for axis in (top, middle, bottom):
        for fault in soak.faults:
            axis.axvline(fault.t / 60, color="red", lw=0.5, alpha=0.5)
        axis.legend(loc="upper right", fontsize=8)
    for fault in soak.faults:
        top.annotate(fault.kind, (fault.t / 60, 0), rotation=90, fontsize=6, color="red", va="bottom")
    fig.suptitle(f"squall soak: seed {soak.seed}, {soak.args.minutes:g} min, rate {soak.rate:.0f} sentences/s")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- main ------------------------------------------------------------------------------------------------------
def interval(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(":")
    return float(lo), float(hi or lo)


def kinds(text: str) -> list[str]:
    chosen = [kind.strip() for kind in text.split(",") if kind.strip()]
    unknown = sorted(set(chosen) - set(KINDS))
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown fault kinds {unknown}; known: {', '.join(KINDS)}")
    return chosen


def stop_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("SIGTERM")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60, help="steady input under faults, after the capacity")
    parser.add_argument("--seed", type=int, help="of every random choice (default: a new one, printed)")
    parser.add_argument(
        "--fault-interval",
        type=interval,
        default=(30.0, 90.0),
        metavar="LO:HI",
        help="seconds between faults, drawn uniformly (default 30:90)",
    )
    parser.add_argument(
        "--kinds", type=kinds, default=KINDS, help=f"the faults, comma-separated (default {','.join(KINDS)})"
    )
    parser.add_argument("--rate", type=float, help="sentences a second (default: half the measured capacity)")
    parser.add_argument("--capacity-secs", type=float, default=20.0, help="how long the capacity is measured")
    parser.add_argument("--message-timeout", type=int, default=CONF["topology.message.timeout.secs"])
    parser.add_argument("--recovery-target", type=float, default=30.0, help="p99 recovery, seconds")
    parser.add_argument("--plot", type=Path, help="write a PNG of throughput, latency and RSS over time")
    parser.add_argument("--samples", type=Path, help="write every second's figures there, as JSON lines")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (logs, sink, queue)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, stop_on_sigterm)  # what the soak started is stopped on SIGTERM too
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    directory = Path(tempfile.mkdtemp(prefix="squall-soak-"))
    say(
        "soak",
        seed=seed,
        minutes=args.minutes,
        fault_interval_s=f"{args.fault_interval[0]:g}:{args.fault_interval[1]:g}",
        message_timeout_s=args.message_timeout,
        directory=directory,
    )
    soak = Soak(args, seed, directory)
    failed: list[str] = []
    try:
        soak.run()
        drained = soak.drain(timeout=600)
        code = soak.driver.stop()
        say(
            "end",
            drain_s=round(drained, 1),
            driver_exit=code,
            faults=len(soak.faults),
            producer_retries=soak.producer.errors,
            **minute_figures(soak.sampler.samples, 0, soak.sampler.now()),
        )
        check("driver_exit", code == 0, failed, code=code)
        appended = soak.sources.appended
        check_acked(soak, failed)
        check_sink(soak, appended, failed)
        check_counts(soak, appended, failed)
        measure_recoveries(soak)
        check_resources(soak, failed)
        check_recovery(soak, failed)
        if args.samples:
            with open(args.samples, "w") as out:
                out.writelines(json.dumps(dataclasses.asdict(s)) + "\n" for s in soak.sampler.samples)
        if args.plot:
            plot(soak, args.plot)
            say("plot", path=args.plot)
    except BaseException as exc:
        failed.append(f"error ({type(exc).__name__})")
        raise
    finally:
        soak.stop()
        if failed and soak.driver is not None:
            print(f"--- the last driver's log ---\n{soak.driver.log_tail()}", flush=True)
        if not args.keep and not failed:
            shutil.rmtree(directory, ignore_errors=True)
        say("result", outcome="fail" if failed else "pass", failed=",".join(failed) or "-", seed=seed)
    if failed:
        print(f"soak failed: {', '.join(failed)} (seed {seed}, files in {directory})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
