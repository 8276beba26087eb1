import signal
import sqlite3
import threading
from collections import Counter
from pathlib import Path

from rich.console import Console

from squall.runner import load_module, run_file

EXAMPLE = Path(__file__).parent.parent / "examples" / "word_count.py"


def test_word_count_example_counts_every_word_exactly(spark, tmp_path):
    console = Console(record=True, width=160)
    conf = [f"example.dir={tmp_path}", "example.sentences=250"]
    run = run_file(str(EXAMPLE), conf, None, "wc-test", duration=None, idle_secs=1.5, console=console)
    sentences = load_module(EXAMPLE).SENTENCES
    expected = Counter(w for i in range(250) for w in sentences[i % len(sentences)].split(" "))
    with sqlite3.connect(tmp_path / "word_counts.sqlite") as db:
        stored = dict(db.execute("SELECT word, count FROM word_counts"))
    assert stored == dict(expected)
    spout = run.stats.of("sentences")
    assert (spout.emitted, spout.acked, spout.failed, spout.timed_out) == (250, 250, 0, 0)
    text = console.export_text()
    assert "spout tuples" in text and "complete latency p50" in text
    assert "0 ready, 0 pending, 0 set aside" in text

    # A second run finds the queue already filled and drained: nothing more is counted.
    run_file(str(EXAMPLE), conf, None, "wc-again", duration=None, idle_secs=1.0, console=console)
    with sqlite3.connect(tmp_path / "word_counts.sqlite") as db:
        assert dict(db.execute("SELECT word, count FROM word_counts")) == dict(expected)


def test_malformed_messages_are_set_aside_counted_and_shown(spark, tmp_path):
    from squall.connectors import ReliableQueue

    queue = ReliableQueue(tmp_path / "sentences.sqlite", "sentences")
    queue.put_raw("{not json")
    queue.put_raw('["two", "fields"]')
    queue.close()
    console = Console(record=True, width=200)
    conf = [f"example.dir={tmp_path}", "example.sentences=20"]
    run = run_file(str(EXAMPLE), conf, None, "wc-malformed", duration=None, idle_secs=1.5, console=console)
    spout = run.stats.of("sentences")
    assert (spout.emitted, spout.acked, spout.malformed) == (20, 20, 2)
    text = console.export_text()
    assert "malformed" in text and "0 ready, 0 pending, 2 set aside" in text
    summary = text[text.index("spout tuples") :].splitlines()
    rows = {" ".join(line.split()[:-1]): line.split()[-1] for line in summary[1:6]}
    assert rows == {"emitted": "20", "acked": "20", "failed": "0", "timed out": "0", "malformed": "2"}


def test_run_file_runs_from_a_thread_other_than_main(spark, tmp_path):
    """``run_file`` from a thread that is not the main one (a notebook's, a service's) runs the topology to the
    end and returns its run: Ctrl-C's handler is only installed on the main thread, and nothing else depends on
    being there."""
    console = Console(record=True, width=160)
    conf = [f"example.dir={tmp_path}", "example.sentences=40"]
    handler = signal.getsignal(signal.SIGINT)
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["run"] = run_file(
                str(EXAMPLE), conf, None, "wc-thread", duration=None, idle_secs=1.5, console=console, ui=False
            )
        except BaseException as exc:  # what the thread raised, for the assertion below
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="not-main")
    thread.start()
    thread.join(timeout=300)
    assert not thread.is_alive(), "run_file did not return within 300 s"
    assert "error" not in outcome, repr(outcome.get("error"))
    spout = outcome["run"].stats.of("sentences")
    assert (spout.emitted, spout.acked, spout.failed) == (40, 40, 0)
    sentences = load_module(EXAMPLE).SENTENCES
    expected = Counter(w for i in range(40) for w in sentences[i % len(sentences)].split(" "))
    with sqlite3.connect(tmp_path / "word_counts.sqlite") as db:
        assert dict(db.execute("SELECT word, count FROM word_counts")) == dict(expected)
    assert signal.getsignal(signal.SIGINT) is handler  # the main thread's handler is left alone
