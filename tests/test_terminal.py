"""``squall run``'s live table and summary in an 80-column terminal: every component name whole, nothing cut; and
without a terminal (nohup, CI), a plain progress line at intervals and the summary."""

import io
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from rich.console import Console

import squall
from squall import BasicBolt, Spout, TopologyBuilder
from squall.runner import LiveTable, compact
from squall.spark.stats import RunStats


class Source(Spout):
    outputs = ("sentence",)

    def next_tuple(self):
        pass


class Splitter(BasicBolt):
    outputs = ("word",)

    def execute(self, tup, collector):
        pass


def rendered(renderable) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(renderable)
    return out.getvalue().splitlines()


def test_the_live_table_fits_80_columns_with_whole_names_and_rates():
    b = TopologyBuilder()
    b.set_spout("sentence-source-spout", Source())
    b.set_bolt("split-sentences-into-words", Splitter(), 4).shuffle_grouping("sentence-source-spout")
    topology = b.build()
    stats = RunStats()
    now = [100.0]
    table = LiveTable(stats, topology, clock=lambda: now[0])
    table.render()
    stats.of("sentence-source-spout").emitted = 12_345_678
    stats.of("sentence-source-spout").acked = 12_000_000
    stats.of("split-sentences-into-words").executed = 250_000
    stats.of("split-sentences-into-words").failed = 3
    stats.waves, stats.pending = 917, 1000
    now[0] = 102.0
    lines = rendered(table.render())
    assert all(len(line) <= 80 for line in lines), lines
    text = "\n".join(lines)
    assert "…" not in text
    spout_row = next(line for line in lines if line.strip().startswith("sentence-source-spout"))
    assert spout_row.split() == ["sentence-source-spout", "12.35M", "-", "12.00M", "0", "6172.8k"]
    bolt_row = next(line for line in lines if line.strip().startswith("split-sentences-into-words"))
    assert bolt_row.split() == ["split-sentences-into-words", "0", "250.0k", "0", "3", "125.0k"]
    assert "waves 917" in text and "pending trees 1000" in text


def test_compact_counts():
    assert [compact(n) for n in (0, 99_999, 100_000, 9_999_949, 10_000_000, 123_456_789)] == [
        "0",
        "99999",
        "100.0k",
        "9999.9k",
        "10.00M",
        "123.46M",
    ]


NUMBERS = """
    import time

    from squall import BasicBolt, Spout, TopologyBuilder

    class Numbers(Spout):
        outputs = ("n",)

        def open(self, conf, context, collector):
            self.collector, self.n = collector, 0

        def next_tuple(self):
            if self.n < 200:
                self.n += 1
                self.collector.emit([self.n], msg_id=self.n)
                time.sleep(0.01)

    class Double(BasicBolt):
        outputs = ("n",)

        def execute(self, tup, collector):
            collector.emit([tup[0] * 2])

    def build_topology(conf):
        b = TopologyBuilder()
        b.set_spout("numbers", Numbers())
        b.set_bolt("double", Double(), 2).shuffle_grouping("numbers")
        return b.build()
"""
PROGRESS_LINE = re.compile(
    r"progress \d+:\d\d:\d\d: emitted (\d+) \(\d+/s\), acked (\d+), failed (\d+), pending trees \d+, "
    r"complete latency (p50 \d+ ms p99 \d+ ms|-)"
)


def test_without_a_terminal_progress_is_a_plain_line_at_intervals_then_the_summary(tmp_path):
    """Output to a pipe, as under nohup or CI: lines, not a live table redrawn; -v after the file logs too."""
    path = tmp_path / "numbers.py"
    path.write_text(textwrap.dedent(NUMBERS))
    command = [sys.executable, "-m", "squall.cli", "run", str(path), "--no-ui", "--idle-secs", "1"]
    command += ["--progress-secs", "0.5", "-v"]  # -v after the file: it must still log
    result = subprocess.run(
        command,
        cwd=Path(squall.__file__).parent.parent,  # the squall under test
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "\x1b" not in out  # no cursor movement or colour
    progress = [line for line in out.splitlines() if line.startswith("progress ")]
    assert progress, out
    for line in progress:
        assert PROGRESS_LINE.fullmatch(line), line
    counts = [tuple(int(n) for n in PROGRESS_LINE.fullmatch(line).groups()[:3]) for line in progress]
    for column in zip(*counts, strict=True):  # emitted, acked, failed: running totals
        assert list(column) == sorted(column), progress
    assert all(failed == 0 for _, _, failed in counts), progress
    lines = [line.split() for line in out[out.index("summary") :].splitlines()]
    assert ["emitted", "200"] in lines and ["acked", "200"] in lines and ["failed", "0"] in lines, out
    assert "INFO squall: started Spark" in result.stderr  # -v after the subcommand's arguments
