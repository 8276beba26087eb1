"""The README's first topology, taken from the README itself and run as a reader would: saved to a file in an
empty directory and run with ``python``. The README and this test cannot drift apart."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from servers import require

README = Path(__file__).parent.parent / "README.md"


def first_topology() -> str:
    """The first Python block of the README's "A first topology" section."""
    section = README.read_text().split("\n## A first topology\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert blocks, "the README's 'A first topology' section has no python block"
    return blocks[0]


@pytest.mark.timeout(300)
def test_the_readmes_first_topology_runs_as_written_and_acks_every_sentence(tmp_path):
    require("java", "openjdk-17-jre-headless")
    (tmp_path / "word_count.py").write_text(first_topology())
    done = subprocess.run([sys.executable, "word_count.py"], cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-4000:]
    assert re.fullmatch(r"acked 10000, failed 0, complete latency p50 \d+ ms\n", done.stdout), done.stdout
