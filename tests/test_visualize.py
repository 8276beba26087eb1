"""``squall visualize``: a topology file's graph as Mermaid or Graphviz DOT, exactly."""

import textwrap

from click.testing import CliRunner

from squall.cli import main

TOPOLOGY_FILE = """
from squall import BasicBolt, Spout, TopologyBuilder


class Lines(Spout):
    outputs = ("line",)

    def next_tuple(self):
        pass


class Split(BasicBolt):
    outputs = {"default": ("word",), "odd \\"words\\"": ("word",)}

    def execute(self, tup, collector):
        pass


class Count(BasicBolt):
    outputs = ()

    def execute(self, tup, collector):
        pass


def build_topology(conf):
    b = TopologyBuilder()
    b.set_spout("lines", Lines())
    b.set_bolt("split", Split(), conf.get("split.tasks", 2)).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 3).fields_grouping("split", ["word"]).global_grouping("split", 'odd "words"')
    return b.build()
"""


def test_visualize_writes_the_graph_as_mermaid_and_dot(tmp_path):
    path = tmp_path / "topology.py"
    path.write_text(TOPOLOGY_FILE)
    result = CliRunner().invoke(main, ["visualize", str(path), "--conf", "split.tasks=4"])
    assert result.exit_code == 0, result.output
    assert result.output == textwrap.dedent(
        """\
        flowchart LR
            c0(["lines (1 task)"])
            c1["split (4 tasks)"]
            c2["count (3 tasks)"]
            c0 -->|"shuffle_grouping"| c1
            c1 -->|"fields_grouping(['word'])"| c2
            c1 -->|"odd #quot;words#quot;: global_grouping"| c2
        """
    )
    out = tmp_path / "topology.dot"
    result = CliRunner().invoke(main, ["visualize", str(path), "--format", "dot", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == textwrap.dedent(
        """\
        digraph topology {
            rankdir=LR;
            "lines" [label="lines (1 task)", shape=ellipse];
            "split" [label="split (2 tasks)", shape=box];
            "count" [label="count (3 tasks)", shape=box];
            "lines" -> "split" [label="shuffle_grouping"];
            "split" -> "count" [label="fields_grouping(['word'])"];
            "split" -> "count" [label="odd \\"words\\": global_grouping"];
        }
        """
    )


def test_visualize_names_a_file_without_a_topology(tmp_path):
    path = tmp_path / "empty.py"
    path.write_text("X = 1\n")
    result = CliRunner().invoke(main, ["visualize", str(path)])
    assert result.exit_code == 1
    assert "defines neither build_topology(conf) nor topology" in result.output
