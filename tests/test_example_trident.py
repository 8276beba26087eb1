"""The DRPC examples as their docstrings run them: squall drpc, squall run, then queries from a DRPCClient."""

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from squall.drpc import DRPCClient, DRPCExecutionException

EXAMPLE = Path(__file__).parent.parent / "examples" / "trident_word_count.py"


def test_the_trident_word_count_answers_drpc_queries_while_it_runs(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    server = subprocess.Popen(
        [sys.executable, "-m", "squall.cli", "drpc", "--port", "0"], stderr=subprocess.PIPE, text=True, env=env
    )
    run = None
    try:
        port = int(re.search(r":(\d+);", server.stderr.readline()).group(1))
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "squall.cli",
                "run",
                str(EXAMPLE),
                "--idle-secs",
                "0",
                "--no-ui",
                "--master",
                "local[2]",
                "--conf",
                f"drpc.port={port}",
                "--conf",
                f"example.dir={tmp_path / 'data'}",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        sys.path.insert(0, str(EXAMPLE.parent))
        from trident_word_count import SENTENCES

        expected = Counter(w for s in SENTENCES * 20 for w in s.split())
        token = (tmp_path / ".squall" / "drpc" / f"127.0.0.1_{port}.token").read_text()
        with DRPCClient("127.0.0.1", port, timeout=30, token=token) as client:
            deadline, answer = time.monotonic() + 180, None
            while time.monotonic() < deadline:
                assert run.poll() is None, "squall run stopped"
                try:
                    answer = json.loads(client.execute("words", "the cow apples nothing"))
                except DRPCExecutionException:  # not serving yet
                    time.sleep(0.5)
                    continue
                counts = dict(answer)
                assert all(counts[w] <= expected[w] for w in counts)  # only committed counts, never more
                if counts == {w: expected[w] for w in ("the", "cow", "apples")}:
                    break
                time.sleep(0.2)
            assert dict(answer) == {"the": expected["the"], "cow": expected["cow"], "apples": expected["apples"]}
    finally:
        for process in (run, server):
            if process is not None:
                process.terminate()
                process.wait(30)


def test_the_basic_drpc_example_answers_through_squall_drpc(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    server = subprocess.Popen(
        [sys.executable, "-m", "squall.cli", "drpc", "--port", "0"], stderr=subprocess.PIPE, text=True, env=env
    )
    run = None
    try:
        port = int(re.search(r":(\d+);", server.stderr.readline()).group(1))
        example = EXAMPLE.parent / "basic_drpc.py"
        args = [sys.executable, "-m", "squall.cli", "run", str(example), "--idle-secs", "0", "--no-ui"]
        args += ["--master", "local[2]", "--conf", f"drpc.port={port}"]
        run = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        token = (tmp_path / ".squall" / "drpc" / f"127.0.0.1_{port}.token").read_text()
        with DRPCClient("127.0.0.1", port, timeout=30, token=token) as client:
            deadline = time.monotonic() + 180
            while True:
                assert run.poll() is None, "squall run stopped"
                try:
                    assert client.execute("exclamation", "hello") == "hello!"
                    break
                except DRPCExecutionException:  # not serving yet
                    assert time.monotonic() < deadline, "the example never answered"
                    time.sleep(0.5)
            assert [client.execute("exclamation", w) for w in ("a", "storm")] == ["a!", "storm!"]
    finally:
        for process in (run, server):
            if process is not None:
                process.terminate()
                process.wait(30)
