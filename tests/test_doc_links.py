"""Every relative link in README.md and docs/ names a file that exists and, after a ``#``, a heading in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_every_relative_link_in_the_readme_and_the_docs_resolves():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check-doc-links.py")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
