"""A Redis server for development, benchmarks and tests: Debian's ``redis-server`` on a free port, its files in a
directory of the caller's. ``persistent`` keeps an append-only file, synced at every write, so that a server
stopped (even SIGKILLed) and started again keeps every write it confirmed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from squall.spark.standalone import free_port, wait_for_port


class LocalRedisServer:
    """``url`` is its address; ``stop`` and ``start`` again keep the port (and, when ``persistent``, the data)."""

    def __init__(self, directory: Path, persistent: bool = False, host: str = "127.0.0.1") -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not installed (Debian package redis-server)")
        self.binary, self.host = binary, host
        self.directory, self.persistent = Path(directory), persistent
        self.port = free_port(host)
        self.url = f"redis://{host}:{self.port}/0"
        self.start()

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", self.host, "--save", ""]
        args += ["--appendonly", "yes" if self.persistent else "no", "--appendfsync", "always"]
        args += ["--dir", str(self.directory), "--logfile", str(self.directory / "redis.log")]
        if self.host not in ("127.0.0.1", "localhost", "::1"):  # an address of this machine's own test hosts
            args += ["--protected-mode", "no"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process, "redis-server", host=self.host)

    def stop(self, kill: bool = False) -> None:
        """Stop the server: SIGTERM, or SIGKILL with ``kill``."""
        if self.process.poll() is None:
            self.process.kill() if kill else self.process.terminate()
            self.process.wait(timeout=30)
