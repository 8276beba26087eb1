"""This tree's ``benchmarks/word_count.py``, run against squall at another commit and at this tree, alternating,
on one machine: both sides' lines, each prefixed with its round and side (``round1_before_``, ``round1_after_``).

    python benchmarks/against.py 0ffa4f7 --only acking --rounds 2
    python benchmarks/against.py 0ffa4f7 --only latency

The other commit is checked out in a temporary worktree and its compiled modules built there; each run imports
squall from one tree (``PYTHONPATH``), the Spark workers too. The script and its topology are the same on both
sides, so only squall differs. Rounds alternate the sides, starting with the other commit.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SCRIPT = HERE / "benchmarks" / "word_count.py"


def build(tree: Path) -> None:
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True)


def run(tree: Path, args: list[str]) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=env, cwd=tree, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"word_count.py against {tree} exited {done.returncode}")
    return [line for line in done.stdout.splitlines() if "=" in line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("commit", help="the commit to measure against (before)")
    parser.add_argument("--only", default="acking", help="word_count.py's --only part")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="squall-against-") as scratch:
        before = Path(scratch) / "tree"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(before), args.commit], cwd=HERE, check=True)
        try:
            build(before)
            for round_ in range(1, args.rounds + 1):
                sides = [("before", before), ("after", HERE)]
                for side, tree in sides if round_ % 2 else sides[::-1]:
                    for line in run(tree, ["--only", args.only]):
                        print(f"round{round_}_{side}_{line}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=HERE, check=False)


if __name__ == "__main__":
    main()
