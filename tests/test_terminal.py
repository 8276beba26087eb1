"""``squall run``'s live table and summary in an 80-column terminal: every component name whole, nothing cut."""

import io

from rich.console import Console

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
