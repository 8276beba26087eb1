"""Real servers for tests: started on a free loopback port in a temporary directory, stopped after.

Where a server's binary is missing, the test is skipped with the reason, except
under CI (``CI`` set), where a missing server is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        message = f"{binary} is not installed (Debian package {package})"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must run every server test")
        pytest.skip(message)
    return path


def wait_for_port(port: int, process: subprocess.Popen, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout}s")


class RedisServer:
    """``persistent`` keeps an append-only file, so that a restart keeps the data."""

    def __init__(self, directory: Path, persistent: bool = False) -> None:
        self.binary = require("redis-server", "redis-server")
        self.directory, self.persistent = directory, persistent
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.start()

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "yes" if self.persistent else "no", "--appendfsync", "always"]
        args += ["--dir", str(self.directory), "--logfile", str(self.directory / "redis.log")]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process, "redis-server")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
