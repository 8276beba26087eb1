"""``squall list/deactivate/activate/kill`` against a running ``squall run`` of the word-count example, reading
the embedded queue: kill --wait leaves every sentence either acked or back on the queue, and the driver exits 0."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner
from servers import wait_for

from squall.cli import main
from squall.connectors import ReliableQueue
from squall.ui.client import UIClient

ROOT = Path(__file__).parent.parent
SENTENCES = 20_000
FEWEST_WORDS = 6  # the example's shortest sentence
# A kill returns within its wait, plus the time to stop the workers and, for the driver's exit, Spark itself; a
# bound that a kill stuck on its run's thread (30 s, then closed anyway) or on a Spark job would overrun.
STOP_SECS = 15


def queue_counts(path: Path) -> dict[str, int]:
    queue = ReliableQueue(path, "sentences")
    try:
        return queue.counts()
    finally:
        queue.close()


def until(condition, driver, what: str) -> None:
    wait_for(condition, what, timeout=300, process=driver)


def cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_kill_wait_leaves_every_sentence_acked_or_queued_and_the_driver_exits_0(tmp_path):
    data, log = tmp_path / "data", tmp_path / "driver.log"
    args = [sys.executable, "-m", "squall.cli", "run", str(ROOT / "examples" / "word_count.py"), "--master", "local[2]"]
    args += ["--ui-port", "0", "--conf", f"example.dir={data}"]  # the default --idle-secs: 3
    args += ["--conf", f"example.sentences={SENTENCES}", "--conf", "topology.max.spout.pending=300"]
    with open(log, "w") as out:
        driver = subprocess.Popen(args, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        found: list[str] = []
        until(lambda: found.extend(re.findall(r"web UI at (http://\S+)", log.read_text())) or found, driver, "UI")
        url = found[0]
        queue = data / "sentences.sqlite"
        until(lambda: queue.exists() and 0 < queue_counts(queue)["ready"] < SENTENCES - 1000, driver, "progress")

        listed = cli("list", "--url", url)
        assert re.search(r"word-count\s+ACTIVE", listed), listed

        client = UIClient(url)
        cli("deactivate", "word-count", "--url", url)
        assert client.topology("word-count")["status"] == "INACTIVE"
        # The spout runs on a worker: the waves already under way (squall.wave.max.inflight, 2) may still emit.
        waves = client.topology("word-count")["waves"]
        until(lambda: client.topology("word-count")["waves"] >= waves + 2, driver, "the waves under way")
        emitted = client.topology("word-count")["spouts"][0]["emitted"]
        waves = client.topology("word-count")["waves"]
        # Waves go on while deactivated: 5 more outlast --idle-secs, and a paused topology is not idle.
        until(lambda: client.topology("word-count")["waves"] >= waves + 5, driver, "waves while deactivated")
        assert client.topology("word-count")["spouts"][0]["emitted"] == emitted
        cli("activate", "word-count", "--url", url)
        until(lambda: client.topology("word-count")["spouts"][0]["emitted"] > emitted, driver, "emits again")

        started = time.monotonic()
        assert "killed word-count" in cli("kill", "word-count", "--wait", "10", "--url", url)
        kill_returned = time.monotonic() - started
        assert driver.wait(timeout=120) == 0, log.read_text()[-3000:]
        driver_exited = time.monotonic() - started
    finally:
        if driver.poll() is None:
            driver.kill()
    left = queue_counts(data / "sentences.sqlite")
    assert left["pending"] == 0 and left["dead"] == 0  # nothing held by a dead consumer: acked or back
    assert 0 < left["ready"] < SENTENCES  # killed mid-run
    acked = SENTENCES - left["ready"]
    with sqlite3.connect(data / "word_counts.sqlite") as db:
        (counted,) = db.execute("SELECT sum(count) FROM word_counts").fetchone()
    assert counted >= acked * FEWEST_WORDS  # every acked sentence's words were stored before its ack
    print(f"\nsquall kill --wait 10 returned in {kill_returned:.1f}s, the driver exited in {driver_exited:.1f}s")
    assert kill_returned <= 10 + STOP_SECS and driver_exited <= 10 + STOP_SECS


def test_ctrl_c_stops_squall_run_as_kill_wait_does(tmp_path):
    data, log = tmp_path / "data", tmp_path / "driver.log"
    args = [sys.executable, "-m", "squall.cli", "run", str(ROOT / "examples" / "word_count.py"), "--master", "local[2]"]
    args += ["--no-ui", "--idle-secs", "0", "--kill-wait", "10", "--conf", f"example.dir={data}"]
    args += ["--conf", f"example.sentences={SENTENCES}", "--conf", "topology.max.spout.pending=300"]
    with open(log, "w") as out:
        driver = subprocess.Popen(args, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        queue = data / "sentences.sqlite"
        until(lambda: queue.exists() and 0 < queue_counts(queue)["ready"] < SENTENCES - 1000, driver, "progress")
        started = time.monotonic()
        driver.send_signal(signal.SIGINT)
        assert driver.wait(timeout=120) == 0, log.read_text()[-3000:]
        exited = time.monotonic() - started
    finally:
        if driver.poll() is None:
            driver.kill()
    output = log.read_text()
    assert "interrupted: stopping, pending trees get up to 10s" in output and "web UI at" not in output
    left = queue_counts(data / "sentences.sqlite")
    assert left["pending"] == 0 and left["dead"] == 0 and 0 < left["ready"] < SENTENCES
    print(f"\nCtrl-C with --kill-wait 10: the driver exited in {exited:.1f}s")
    assert exited <= 10 + STOP_SECS
