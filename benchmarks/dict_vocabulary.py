"""What the word count's count bolt costs by itself, without squall: its two dictionary lines in a plain loop.

``benchmarks/word_count.py`` measures a 1,000,000-word vocabulary against a 1,000-word one
(``squall_vocabulary_1m_vs_1k_throughput``). This script times the count bolt's own lines,
``counts[word] = counts.get(word, 0) + 1``, over the same words in plain Python, with no squall and no Spark,
so the dictionary's part of that figure can be seen on its own:

* ``alone``: one process, as in a 1-worker run;
* ``two_at_once``: two processes at the same time, as the benchmark's two count tasks on two workers share the
  host's last-level cache;
* ``two_at_once_huge_pages``: the same with every allocation on transparent huge pages (``PYTHONMALLOC=malloc``
  and glibc's ``glibc.malloc.hugetlb=1``), to tell TLB misses from cache misses.

Each process counts 1,000,000 words drawn from half the vocabulary (a count task's share of the 2M words and,
by the fields grouping, of the vocabulary: about 432,000 keys with the large one), arriving as fresh string
objects in batches, as a worker decodes them; the first pass fills the dictionary and the second is timed. It prints
nanoseconds a word for each vocabulary and the extra seconds a count task spends with the large one.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time

WORDS = 1_000_000  # a count task's share of the benchmark's 2M words
BATCH = 4096  # words decoded together, as a worker's batch


def count_ns_per_word(vocabulary: int, seed: int = 7) -> float:
    rnd = random.Random(seed)
    words = rnd.choices([f"v{i:07d}" for i in range(vocabulary)], k=WORDS)
    counts: dict[str, int] = {}
    seconds = 0.0
    for timed in (False, True):
        for start in range(0, WORDS, BATCH):
            batch = [(w + " ")[:-1] for w in words[start : start + BATCH]]  # fresh objects, as decoded
            started = time.perf_counter()
            for word in batch:
                counts[word] = counts.get(word, 0) + 1
            if timed:
                seconds += time.perf_counter() - started
    return seconds / WORDS * 1e9


def in_processes(vocabulary: int, processes: int, huge_pages: bool) -> float:
    """Mean nanoseconds a word over ``processes`` children run at once."""
    env = dict(os.environ)
    if huge_pages:
        env.update(PYTHONMALLOC="malloc", GLIBC_TUNABLES="glibc.malloc.hugetlb=1")
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", str(vocabulary)], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(processes)
    ]
    results = [float(child.communicate()[0]) for child in children]
    if any(child.returncode for child in children):
        raise RuntimeError("a counting process failed")
    return sum(results) / len(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each case; each prints its best")
    args = parser.parse_args()
    if args.child:
        print(count_ns_per_word(args.child))
        return
    cases = [("alone", 1, False), ("two_at_once", 2, False), ("two_at_once_huge_pages", 2, True)]
    for name, processes, huge in cases:
        small = min(in_processes(1_000 // 2, processes, huge) for _ in range(args.repeat))
        large = min(in_processes(1_000_000 // 2, processes, huge) for _ in range(args.repeat))
        print(f"plain_count_{name}_ns_per_word_1k={small:.0f}")
        print(f"plain_count_{name}_ns_per_word_1m={large:.0f}")
        print(f"plain_count_{name}_extra_seconds_per_task_1m={(large - small) * WORDS * 1e-9:.2f}")


if __name__ == "__main__":
    main()
