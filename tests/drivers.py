"""Start ``squall run`` drivers as processes of their own, and SIGKILL them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def start_driver(topology: str, conf: dict, idle_secs: float = 2) -> subprocess.Popen:
    """``squall run tests/<topology>`` with ``conf``, in a new session (its own process group).

    The topology files import helper modules that sit next to them, as scripts do.
    """
    args = [
        sys.executable,
        "-m",
        "squall.cli",
        "run",
        str(HERE / topology),
        "--idle-secs",
        str(idle_secs),
    ]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return subprocess.Popen(
        args,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def kill_driver(process: subprocess.Popen) -> None:
    """SIGKILL the driver and everything it started (Spark's JVM and Python workers)."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def finish_driver(process: subprocess.Popen, timeout: float = 600) -> str:
    """Wait for a driver to stop by itself; its output, which must show a clean exit."""
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output
    return output


def wait(condition, driver: subprocess.Popen, what: str, timeout: float = 400) -> None:
    """Until ``condition()`` holds; an error naming ``what`` if the driver ends first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert driver.poll() is None, f"the driver ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.5)


def whole_lines(path: Path) -> list[str]:
    """The lines a running process has finished writing to ``path``: its last line may be half written."""
    return path.read_text().split("\n")[:-1]
