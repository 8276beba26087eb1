"""A persistent sliding sum through faults: a Spark worker and the driver SIGKILLed mid-run.

Every window that reaches the sink has the exact sum of its span of event time, and no window is lost; a window
may reach it more than once (after a replay), which a sink deduplicates by the window's end. The test prints its
figures (``pytest -s`` shows them; docs/windowing.md quotes them).
"""

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from drivers import wait, whole_lines
from servers import SparkStandaloneCluster

from squall.connectors import ReliableQueue

ROOT = Path(__file__).parent.parent
MESSAGES = 30_000
STEP_MS = 10  # event time between two messages
EPOCH_MS = 1_700_000_000_000
LENGTH_MS, SLIDE_MS = 2000, 1000


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = SparkStandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    yield cluster
    cluster.stop()


def windows(out: Path) -> list[tuple[int, int, int]]:
    return [
        (int(end), int(total), int(count))
        for path in out.glob("windows-*.log")
        for line in whole_lines(path)
        for end, total, count in [line.split(" ")]
    ]


def test_a_persistent_sliding_sum_survives_a_worker_kill_and_a_driver_kill(standalone, tmp_path):
    while standalone.alive() < 2:
        standalone.add_worker()
    seed = random.randrange(10_000)
    rnd = random.Random(seed)
    messages = [[i, rnd.randrange(1000), EPOCH_MS + STEP_MS * i] for i in range(MESSAGES)]
    queue_path = tmp_path / "numbers.sqlite"
    queue = ReliableQueue(queue_path, "numbers")
    queue.put_many(messages)
    queue.close()
    out = tmp_path / "out"
    out.mkdir()
    args = [sys.executable, "-m", "squall.cli", "run", str(ROOT / "tests" / "persistent_window_sum.py")]
    args += ["--master", standalone.url, "--idle-secs", "5", "--spark-conf", "spark.task.maxFailures=8"]
    args += ["--conf", "squall.worker.replace.timeout.secs=2"]  # no spare core: go on on the survivor at once
    conf = {"test.queue": queue_path, "test.out": out, "squall.checkpoint.dir": tmp_path / "checkpoints"}
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    total_windows = MESSAGES * STEP_MS // SLIDE_MS
    worker_kill_at, driver_kill_at = rnd.randint(70, 85) / 100, rnd.randint(35, 50) / 100  # of the queue left
    started = time.monotonic()

    def run_driver(index: int):
        log = open(tmp_path / f"driver-{index}.log", "w")  # noqa: SIM115 - the driver writes it
        return subprocess.Popen(args, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    driver = run_driver(1)
    try:
        wait(lambda: queue_depth(queue_path) <= worker_kill_at * MESSAGES, driver, "progress before the worker kill")
        victim = next(i for i, p in enumerate(standalone.workers) if p.poll() is None)
        standalone.kill_worker(victim)
        wait(lambda: queue_depth(queue_path) <= driver_kill_at * MESSAGES, driver, "progress after the worker kill")
        left_at_driver_kill = queue_depth(queue_path)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        standalone.add_worker()
        driver = run_driver(2)
        driver.wait(timeout=900)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == 0, (tmp_path / "driver-2.log").read_text()[-5000:]

    exact: dict[int, list[int]] = defaultdict(list)
    for _, value, ts in messages:
        end = -(-ts // SLIDE_MS) * SLIDE_MS  # the first window end at or after ts
        for k in range(LENGTH_MS // SLIDE_MS):
            exact[end + k * SLIDE_MS].append(value)
    fired = windows(out)
    ends = sorted({end for end, _, _ in fired})
    for end, total, count in fired:
        assert (total, count) == (sum(exact[end]), len(exact[end])), f"window ending {end}"
    assert ends == list(range(ends[0], ends[-1] + SLIDE_MS, SLIDE_MS)), "a window is missing"
    last_ts = messages[-1][2]
    assert ends[0] == -(-messages[0][2] // SLIDE_MS) * SLIDE_MS
    assert ends[-1] == last_ts // SLIDE_MS * SLIDE_MS  # every window up to the last watermark fired
    assert queue_depth(queue_path) == 0
    assert left_at_driver_kill > 0  # the second driver had messages to read, and windows to go on with
    # Partitions of 25 tuples were sealed into the store (1,200 of them); those no state names any more went,
    # the orphans of the killed instances included.
    (blobs,) = (tmp_path / "checkpoints").glob("*/state/blobs/*")
    left = len(os.listdir(blobs))
    assert 0 < left < 100
    print(
        f"\npersistent windows: seed={seed} messages={MESSAGES} windows={len(ends)} of {total_windows}"
        f" worker_killed_with_left={worker_kill_at} driver_killed_with_left={driver_kill_at}"
        f" messages_left_at_driver_kill={left_at_driver_kill}"
        f" windows_written_more_than_once={len(fired) - len(ends)} sealed_partitions_left={left}"
        f" total={time.monotonic() - started:.0f}s"
    )


def queue_depth(path: Path) -> int:
    queue = ReliableQueue(path, "numbers")
    try:
        return sum(queue.counts().values())
    finally:
        queue.close()
