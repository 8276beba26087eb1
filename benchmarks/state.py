"""Stateful bolts: what a task's state costs as it grows, what durable checkpoints cost, and how fast a topology
with a large state comes back. One run on ``local[2]``; prints one ``name=value`` per line.

The topology is ``words (spout) --fields(word)--> count (2 tasks, a StatefulBolt counting in its
KeyValueState)``. Large states are written as a checkpoint before the run starts, as a restarted topology would
find them, rather than counted up word by word.

    python benchmarks/state.py [--master local[2]] [--words 600000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from typing import NamedTuple

from squall import LocalCluster, Spout, StatefulBolt, TopologyBuilder
from squall.model.hashing import stable_hash
from squall.security import BlobSealer, checkpoint_key
from squall.spark.context import spark_context
from squall.state.providers import FileStateProvider

SEALER = BlobSealer(checkpoint_key({}))  # the key every run here signs its checkpoints with (the default key file)


class Words(Spout):
    """Emits its words once each, msg id = index, and counts the acks."""

    outputs = ("word",)

    def __init__(self, words: list[str]) -> None:
        self.words, self.acked, self.next = words, 0, 0
        self.first_ack_at: float | None = None
        self.done = threading.Event()

    def __deepcopy__(self, memo):  # the benchmark holds the object the topology runs
        return self

    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        if self.next < len(self.words):
            self.collector.emit([self.words[self.next]], msg_id=self.next)
            self.next += 1

    def ack(self, msg_id):
        if self.first_ack_at is None:
            self.first_ack_at = time.perf_counter()
        self.acked += 1
        if self.acked == len(self.words):
            self.done.set()


class CountInState(StatefulBolt):
    outputs = ()

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        word = tup[0]
        self.counts.put(word, self.counts.get(word, 0) + 1)
        self.collector.ack(tup)


def topology(spout: Words):
    b = TopologyBuilder()
    b.set_spout("words", spout)
    b.set_bolt("count", CountInState(), 2).fields_grouping("words", ["word"])
    return b.build()


def vocabulary(size: int) -> list[str]:
    return [f"k{i:07d}" for i in range(size)]


def seed_state(directory: str, name: str, keys: list[str]) -> None:
    """A checkpoint holding ``keys`` (count 1 each) on the tasks the fields grouping sends them to."""
    tasks = list(topology(Words([])).task_ids("count"))
    states = {task: {} for task in tasks}
    for key in keys:
        states[tasks[stable_hash([key]) % len(tasks)]][key] = 1
    FileStateProvider(f"{directory}/{name}/state", SEALER).compact(1, {"count": tasks}, states)


class Timing(NamedTuple):
    seconds: float  # from the first completed wave until every word is acked (or counted)
    counted: float  # from the first completed wave until every word is counted
    first_ack: float  # from submit to the first acked word
    waves: int  # in ``seconds``
    state_ms_per_wave: float  # saving, applying and checkpointing state changes, per wave of the whole run


def run_words(words: list[str], held: int, conf: dict, until_acked: bool = True) -> Timing:
    """With ``held`` keys in state at the start, until every word is acked (or, with ``until_acked`` false,
    counted). A restarted topology's loading of its state happens before its first wave."""
    directory = tempfile.mkdtemp(prefix="squall-bench-state-")
    seed_state(directory, "state", vocabulary(held))
    spout = Words(words)
    with LocalCluster({"squall.checkpoint.dir": directory}) as cluster:
        submitted = time.perf_counter()
        run = cluster.submit_topology("state", conf, topology(spout))
        count = run.stats.of("count")
        deadline = submitted + 600
        while run.stats.waves == 0 and time.perf_counter() < deadline:
            time.sleep(0.001)
        started, first_waves, counted = time.perf_counter(), run.stats.waves, None
        while not (spout.done.is_set() if until_acked else count.executed == len(words)):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{spout.acked} acked, {count.executed} counted of {len(words)}")
            if counted is None and count.executed == len(words):
                counted = time.perf_counter() - started
            time.sleep(0.001)
        seconds, waves = time.perf_counter() - started, run.stats.waves - first_waves
        first_ack = spout.first_ack_at - submitted if spout.first_ack_at is not None else float("nan")
        state_ms = (count.state_seconds + run.stats.state_seconds) / max(1, run.stats.waves) * 1000
        return Timing(seconds, seconds if counted is None else counted, first_ack, waves, state_ms)


def held_throughput(streams: dict[int, list[str]], label: str) -> dict[int, float]:
    """Words counted per second with each number of keys held, on its stream; best of three."""
    rates = {}
    for held, words in streams.items():
        timings = [run_words(words, held, {}) for _ in range(3)]
        rates[held] = len(words) / min(t.counted for t in timings)
        print(f"state_{held}_{label}_words_per_second={rates[held]:.0f}")
        print(f"state_{held}_{label}_seconds_to_last_ack={min(t.seconds for t in timings):.2f}")
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--words", type=int, default=600_000)
    args = parser.parse_args()
    spark_context(args.master)
    rnd = random.Random(5)
    run_words(vocabulary(1000)[:200], 1000, {})  # warm up Spark and the Python workers

    # Throughput with 1M distinct words held against 1k, on the same stream: words drawn from 1k words that
    # both states hold, so that only what the state holds differs. Best of three. Throughput is words counted
    # per second: the last acks then wait for the next checkpoint (up to topology.state.checkpoint.interval.ms,
    # 1 s), a wait as long whatever the state holds, printed apart.
    hot = rnd.choices(vocabulary(1_000), k=args.words)
    rates = held_throughput({1_000: hot, 1_000_000: hot}, "keys_held")
    print(f"state_1m_vs_1k_keys_held_time_ratio={rates[1_000] / rates[1_000_000]:.2f}")

    # The worst case, printed for comparison: every word drawn from all the keys held, so that with 1M held
    # nearly every word is a key no wave touched before (docs/performance.md says where that time goes).
    spread = {held: rnd.choices(vocabulary(held), k=args.words) for held in (1_000, 1_000_000)}
    rates = held_throughput(spread, "keys_held_words_from_all_keys")
    print(f"state_1m_vs_1k_keys_held_words_from_all_keys_time_ratio={rates[1_000] / rates[1_000_000]:.2f}")

    # Per-wave state cost with 1k keys changed per wave, as the keys held grow: the tasks' time saving their
    # changes and the driver's applying them and writing checkpoints, per wave; and each wave's whole time.
    # Each size runs twice, the sizes in turn, and keeps its lower cost: a millisecond a wave is within what the
    # machine's noise moves.
    state_ms, wave_ms = {}, {}
    fixed = {"squall.wave.spout.batch": 1000, "squall.wave.target.ms": 1e9}
    for _ in range(2):
        for held in (10_000, 100_000, 1_000_000):
            keys = vocabulary(held)
            words = [keys[i % held] for i in range(60_000)]  # 1k distinct keys a wave, 60 waves
            timing = run_words(words, held, fixed)
            if timing.state_ms_per_wave < state_ms.get(held, float("inf")):
                state_ms[held], wave_ms[held] = timing.state_ms_per_wave, timing.seconds / timing.waves * 1000
    for held in state_ms:
        print(f"state_ms_per_wave_{held}_keys_held_1k_changed={state_ms[held]:.2f} (wave_ms={wave_ms[held]:.1f})")
    print(f"state_cost_per_wave_max_vs_min={max(state_ms.values()) / min(state_ms.values()):.2f}")

    # Durable checkpoints every second against none (acking off in both, so that no ack waits for one), timed
    # until every word is counted: three pairs, back to back; the cost is the median of the pairs' ratios, so
    # that one run the machine slowed or sped does not decide it.
    words = rnd.choices(vocabulary(100_000), k=args.words)
    pairs = []
    for _ in range(3):
        pair = {}
        for label, interval in (("every_1s", 1000), ("none", 1e9)):
            conf = {"topology.state.checkpoint.interval.ms": interval, "topology.acker.executors": 0}
            pair[label] = run_words(words, 100_000, conf, until_acked=False).seconds
        pairs.append(pair)
    for label in ("every_1s", "none"):
        print(f"state_checkpoint_{label}_words_per_second={args.words / min(p[label] for p in pairs):.0f}")
    costs = sorted(p["every_1s"] / p["none"] - 1 for p in pairs)
    print(f"state_checkpoint_every_1s_pair_costs={','.join(f'{c:.1%}' for c in costs)}")
    print(f"state_checkpoint_every_1s_cost={costs[1]:.1%}")

    # A restart with 1M keys of state: from submit to the first acked tuple.
    first_ack = run_words(["k0000001"], 1_000_000, {}).first_ack
    print(f"state_restart_1m_keys_to_first_ack_seconds={first_ack:.2f}")


if __name__ == "__main__":
    main()
