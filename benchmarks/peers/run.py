"""The word count of ``benchmarks/word_count.py`` on squall's peers, Apache Storm and Bytewax, on the same data.

Not part of the test suite or of ``make setup``: run ``bash benchmarks/peers/setup.sh`` once first (Maven and a
JDK 17 for Storm; it fetches Storm 2.8.3's jars from Maven Central, compiles ``storm/PeerWordCount.java`` and
makes a venv with Bytewax 0.21.1, all under ``benchmarks/peers/.cache`` and ``benchmarks/peers/.venv-bytewax``,
which git ignores). Then, from the repository's root, with the project's venv (the sentences come from
``benchmarks/word_count.py``'s ``make_sentences``, which imports squall's module):

    .venv/bin/python benchmarks/peers/run.py [--only storm|bytewax] [--words 2000000] [--sweep 250,1000,5000]

or ``make peers``. Prints one ``name=value`` per line.

The data: ``make_sentences(2_000_000)`` (250,000 sentences of 8 words from a 10,000-word vocabulary, seed 7),
written to a file that both peers' sources read when they start, one sentence a line. The shapes are squall's
(see ``benchmarks/word_count.py``):

- Storm (``storm/PeerWordCount.java``): a spout emitting one sentence a ``nextTuple`` with a message id, split (2,
  ``BaseBasicBolt``, shuffle), count (2, fields grouping on word, emits ``(word, count)`` anchored and acks), sink
  (2, ``BaseBasicBolt``, shuffle), one ``LocalCluster``, one worker, ``topology.max.spout.pending`` 1000. One
  acked run to warm the JVM, then three pairs of runs, acking on then off (``topology.acker.executors`` 0), each
  at its best: ``storm_acked_words_per_second`` (submit to the last sentence acked, counted by the spout) and
  ``storm_unacked_words_per_second`` (submit to the last word at the sink); the ``_from_first_emit_`` lines leave
  out the topology's start. ``--sweep`` adds one acked run at each ``max.spout.pending`` given and reports the
  best of them separately (squall's benchmark tries its own wave sizes the same way). Then the spout paced at half
  the best acked sentence rate for ``--latency-secs`` (30) over sentences drawn with seed 11, as squall's are:
  ``storm_half_capacity_complete_latency_p50_ms`` and ``_p99_ms``, from each sentence's emit to the spout's
  ``ack``; and ``storm_idle_round_trip_p50_ms``: 21 sentences, one every 0.3 s, through the idle topology.
- Bytewax (``bytewax_word_count.py``): ``FileSource`` -> ``flat_map`` split -> ``key_on`` word ->
  ``stateful_map`` running count, emitting ``(word, count)`` -> a sink that counts them; two processes
  (``python -m bytewax.run ... -i0/-i1 -a host:port;host:port``), one worker each. One run to warm up, then
  three rounds of three runs: as written (``bytewax_words_per_second``), with ``redistribute`` before split and
  before the sink as squall's shuffles (``bytewax_redistributed_words_per_second``), and with recovery on
  (``bytewax_recovery_words_per_second``: a fresh SQLite recovery directory of 2 partitions, snapshots every
  ``--bytewax-snapshot-secs``, 10, Bytewax's default epoch). Each is timed from starting the two processes to
  both exiting, at its best of three; ``_from_first_read_`` lines time from the source's partition being built to
  the last sink partition closing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from word_count import VOCABULARY, WORDS_PER_SENTENCE, make_sentences  # noqa: E402

STORM_VERSION = "2.8.3"
STORM_LIB = HERE / ".cache" / f"storm-{STORM_VERSION}" / "lib"
STORM_CLASSES = HERE / ".cache" / "classes"
BYTEWAX_PYTHON = HERE / ".venv-bytewax" / "bin" / "python"
LOGS = HERE / ".cache" / "logs"


RECORD: list = []  # the results file being written, with --record


def say(line: str) -> None:
    print(line, flush=True)
    for record in RECORD:
        record.write(line + "\n")
        record.flush()


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat: all but idle and iowait)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this process and of the children it has waited for (every JVM and Bytewax process)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class LoadSampler:
    """The 1-minute load average every 10 s over the run, for the record: the machine is shared. The load counts
    the benchmark's own threads too (Storm's executors are threads); ``others_cpu_cores`` is the machine's busy
    CPU less the benchmark's own (its processes', read when each has ended), over the run's wall time."""

    def __init__(self) -> None:
        self.started, self.busy, self.own = time.monotonic(), busy_cpu_seconds(), own_cpu_seconds()
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            self.samples.append(float(load_average().split()[0]))
            if self._stop.wait(10):
                return

    def stop(self) -> tuple[str, str]:
        self._stop.set()
        self._thread.join()
        ordered = sorted(self.samples)
        wall = time.monotonic() - self.started
        own = own_cpu_seconds() - self.own
        others = busy_cpu_seconds() - self.busy - own
        return (
            f"min {ordered[0]:.2f}, median {ordered[len(ordered) // 2]:.2f}, max {ordered[-1]:.2f}",
            f"{others / wall:.2f} (own {own / wall:.2f}, over {wall:.0f} s)",
        )


def open_record(args: argparse.Namespace) -> Path:
    """benchmarks/results/<date>-<commit>-peers.txt, its first lines the date, the command, the machine, the load
    and the versions; the run's lines follow as printed."""
    root = HERE.parent.parent
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    if subprocess.run(["git", "status", "--porcelain", "benchmarks/peers"], cwd=root, capture_output=True).stdout:
        commit += "-modified"
    path = root / "benchmarks" / "results" / f"{time.strftime('%Y-%m-%d')}-{commit}-peers.txt"
    path.parent.mkdir(exist_ok=True)
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    record = path.open("w")
    record.write(
        f"# date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n"
        f"# commit: {commit}\n"
        f"# command: .venv/bin/python benchmarks/peers/run.py {' '.join(sys.argv[1:])}\n"
        f"# nproc: {os.cpu_count()}\n"
        f"# load average at start (1, 5, 15 min): {load_average()}\n"
        f"# versions: Apache Storm {STORM_VERSION} on {java[0] if java else 'java ?'}; Bytewax (below) on Python"
        f" {sys.version.split()[0]}\n"
    )
    RECORD.append(record)
    return path


def write_sentences(path: Path, sentences: list[str]) -> Path:
    path.write_text("\n".join(sentences) + "\n")
    return path


def setup_missing() -> list[str]:
    missing = []
    if (
        not (STORM_LIB / f"storm-client-{STORM_VERSION}.jar").exists()
        or not (STORM_CLASSES / "PeerWordCount.class").exists()
    ):
        missing.append("storm")
    if not BYTEWAX_PYTHON.exists():
        missing.append("bytewax")
    return missing


# -- Storm ---------------------------------------------------------------------------------------------------------


def run_storm(args: argparse.Namespace, work: Path, sentences_path: Path) -> None:
    idle = [" ".join(VOCABULARY[i : i + WORDS_PER_SENTENCE]) for i in range(args.idle_tuples)]
    idle_path = write_sentences(work / "idle.txt", idle)
    command = [
        "java",
        f"-Dlog4j.configurationFile={HERE / 'storm' / 'log4j2.xml'}",
        "-cp",
        f"{STORM_CLASSES}:{STORM_LIB}/*",
        "PeerWordCount",
        "--sentences",
        str(sentences_path),
        "--idle-sentences",
        str(idle_path),
        "--idle-spacing-secs",
        str(args.idle_spacing_secs),
        "--max-pending",
        str(args.max_pending),
        "--pairs",
        str(args.storm_pairs),
        "--latency-secs",
        str(args.latency_secs),
        "--sweep",
        args.sweep,
        "--workers",
        str(args.storm_workers),
    ]
    log = LOGS / f"storm-{time.strftime('%Y%m%d-%H%M%S')}.log"
    say(f"storm_log={log.relative_to(HERE.parent.parent)}")
    with log.open("w") as stderr:
        java = subprocess.Popen(
            command, cwd=work, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
        assert java.stdin is not None and java.stdout is not None
        for line in java.stdout:
            line = line.rstrip("\n")
            if line.startswith("paced_sentences_needed="):
                # squall's latency run draws its paced sentences with seed 11, as many as the rate needs
                needed = int(line.split("=", 1)[1])
                paced = make_sentences(needed * WORDS_PER_SENTENCE, seed=11)
                java.stdin.write(f"{write_sentences(work / 'paced.txt', paced)}\n")
                java.stdin.flush()
                continue
            say(line)
        if java.wait() != 0:
            raise SystemExit(f"the Storm run failed ({java.returncode}): see {log}")


# -- Bytewax -------------------------------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def bytewax_run(
    sentences_path: Path, words: int, work: Path, redistribute: bool = False, snapshot_secs: int | None = None
) -> tuple[float, float]:
    """One run of the dataflow in two processes: seconds from starting them to both exiting, and seconds from the
    source's partition being built to the last sink partition closing. Checks every word reached the sink."""
    report = Path(tempfile.mkdtemp(prefix="report-", dir=work))
    env = dict(os.environ, PEER_SENTENCES=str(sentences_path), PEER_REPORT_DIR=str(report))
    env["PEER_REDISTRIBUTE"] = "1" if redistribute else "0"
    addresses = ";".join(f"127.0.0.1:{port}" for port in free_ports(2))
    recovery: list[str] = []
    if snapshot_secs is not None:
        db = report / "recovery"
        db.mkdir()
        subprocess.run([str(BYTEWAX_PYTHON), "-m", "bytewax.recovery", str(db), "2"], check=True, env=env)
        recovery = ["-r", str(db), "-s", str(snapshot_secs), "-b", str(snapshot_secs)]
    with (LOGS / "bytewax.log").open("a") as log:
        started = time.perf_counter()
        command = [str(BYTEWAX_PYTHON), "-m", "bytewax.run", "bytewax_word_count:flow", "-a", addresses, *recovery]
        processes = [
            subprocess.Popen(
                [*command, "-i", str(i)],
                cwd=HERE,
                env=env,
                stdout=log,
                stderr=log,
            )
            for i in range(2)
        ]
        codes = [p.wait() for p in processes]
        seconds = time.perf_counter() - started
    if any(codes):
        raise SystemExit(f"a Bytewax process failed ({codes}): see {LOGS / 'bytewax.log'}")
    first_read = min(float(p.read_text()) for p in report.glob("read-*"))
    sinks = [p.read_text().split() for p in report.glob("sink-*")]
    sunk = sum(int(n) for n, _ in sinks)
    if sunk != words:
        raise SystemExit(f"the Bytewax sink got {sunk} words of {words}")
    shutil.rmtree(report, ignore_errors=True)
    return seconds, max(float(t) for _, t in sinks) - first_read


def run_bytewax(args: argparse.Namespace, work: Path, sentences_path: Path, words: int) -> None:
    version = subprocess.run(
        [str(BYTEWAX_PYTHON), "-c", "import importlib.metadata as m; print(m.version('bytewax'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    say(f"bytewax_version={version}")
    say("bytewax_processes=2")
    bytewax_run(sentences_path, words, work)  # warm up: the page cache, the .pyc files; not counted
    kinds = {
        "bytewax": {},
        "bytewax_redistributed": {"redistribute": True},
        "bytewax_recovery": {"snapshot_secs": args.bytewax_snapshot_secs},
    }
    runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    for round_ in range(args.bytewax_runs):
        for kind, options in kinds.items():
            seconds, from_read = bytewax_run(sentences_path, words, work, **options)
            runs[kind].append((seconds, from_read))
            say(f"{kind}_run_{round_ + 1}_seconds={seconds:.3f} (from first read {from_read:.3f})")
    say(f"bytewax_recovery_snapshot_secs={args.bytewax_snapshot_secs}")
    for kind, results in runs.items():
        say(f"{kind}_words_per_second={words / min(s for s, _ in results):.0f}")
        say(f"{kind}_from_first_read_words_per_second={words / min(r for _, r in results):.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--only", choices=["storm", "bytewax"])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--max-pending", type=int, default=1000, help="Storm's topology.max.spout.pending")
    parser.add_argument("--sweep", default="", help="Storm: more acked runs, one at each max.spout.pending given")
    parser.add_argument("--storm-pairs", type=int, default=3, help="Storm: pairs of runs, acking on then off")
    parser.add_argument(
        "--storm-workers",
        type=int,
        default=1,
        help="Storm: topology.workers (LocalCluster's 1; 2 failed here, see the README)",
    )
    parser.add_argument("--latency-secs", type=float, default=30.0)
    parser.add_argument("--idle-tuples", type=int, default=21)
    parser.add_argument("--idle-spacing-secs", type=float, default=0.3)
    parser.add_argument("--bytewax-runs", type=int, default=3, help="Bytewax: rounds of the three kinds of run")
    parser.add_argument(
        "--record", action="store_true", help="also write the output to benchmarks/results/<date>-<commit>-peers.txt"
    )
    parser.add_argument("--bytewax-snapshot-secs", type=int, default=10, help="whole seconds, as Bytewax takes them")
    args = parser.parse_args()

    peers = [args.only] if args.only else ["storm", "bytewax"]
    missing = [peer for peer in setup_missing() if peer in peers]
    if missing:
        raise SystemExit(f"not set up: {', '.join(missing)}; run: bash benchmarks/peers/setup.sh")
    LOGS.mkdir(parents=True, exist_ok=True)
    record = open_record(args) if args.record else None
    sampler = LoadSampler()
    work = Path(tempfile.mkdtemp(prefix="squall-peers-"))
    try:
        sentences = make_sentences(args.words)
        words = len(sentences) * WORDS_PER_SENTENCE
        sentences_path = write_sentences(work / "sentences.txt", sentences)
        say(f"words={words}")
        say(f"sentences={len(sentences)}")
        say(f"sentences_sha256={hashlib.sha256(sentences_path.read_bytes()).hexdigest()[:16]}")
        if "storm" in peers:
            run_storm(args, work, sentences_path)
        if "bytewax" in peers:
            run_bytewax(args, work, sentences_path, words)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        load, others = sampler.stop()
        say(f"load_average_1min_during_run={load}")
        say(f"others_cpu_cores_during_run={others}")
        say(f"load_average_at_end={load_average()}")
        if record is not None:
            RECORD.pop().close()
            print(f"recorded in {record.relative_to(HERE.parent.parent)}")


if __name__ == "__main__":
    main()
