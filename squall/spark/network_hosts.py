"""Hosts made of network namespaces on this machine (``ip netns``), for tests and benchmarks that need machines:
each host has its own interface, address and loopback, all joined by one bridge, as machines on one switch.

The bridge has an address too (``gateway``), so processes of this machine outside the hosts reach every host,
and every host reaches them there. What crosses a host's interface is counted by its end of the veth pair, and
``set_link`` takes a host off the switch and puts it back. Needs root and iproute2's ``ip``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path


class NetworkHosts:
    @staticmethod
    def unavailable() -> str | None:
        """Why hosts cannot be made here, or None if they can."""
        if os.geteuid() != 0 or shutil.which("ip") is None:
            return "network namespaces need root and iproute2's ip"
        return None

    def __init__(self, names: list[str]) -> None:
        reason = self.unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        self._remove_stale()
        tag = os.getpid() % 100_000
        self.subnet = f"198.18.{tag % 250}"  # RFC 2544's benchmarking range: no real network uses it
        self.gateway = f"{self.subnet}.1"  # the bridge's own address, on this machine outside the hosts
        self.bridge = f"sqb{tag}"
        self._hosts = {
            name: (f"squall-{tag}-{name}", f"sq{tag}h{i}", f"{self.subnet}.{i + 2}") for i, name in enumerate(names)
        }
        try:
            self._ip("link", "add", self.bridge, "type", "bridge")
            self._ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            self._ip("link", "set", self.bridge, "up")
            for namespace, veth, address in self._hosts.values():
                self._ip("netns", "add", namespace)
                self._ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
                self._ip("link", "set", veth, "master", self.bridge, "up")
                self._ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
                self._ip("-n", namespace, "link", "set", "eth0", "up")
                self._ip("-n", namespace, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    @staticmethod
    def _remove_stale() -> None:
        """Hosts a killed run left behind (no process in them), and their bridges, which could hold the
        subnet this run picks."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
        for namespace in (line.split()[0] for line in listed if line.startswith("squall-")):
            pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
            if not pids.split():
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        bridges = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True)
        for bridge in (line.split(": ")[1].split("@")[0] for line in bridges.stdout.splitlines() if ": sqb" in line):
            ports = subprocess.run(["ip", "-o", "link", "show", "master", bridge], capture_output=True, text=True)
            if not ports.stdout.strip():
                subprocess.run(["ip", "link", "del", bridge], capture_output=True)

    def ip(self, name: str) -> str:
        return self._hosts[name][2]

    def command(self, name: str, args: list[str]) -> list[str]:
        """``args`` run on host ``name``."""
        return ["ip", "netns", "exec", self._hosts[name][0], *args]

    def bytes(self, name: str) -> int:
        """Bytes that crossed host ``name``'s interface, both ways."""
        statistics = Path("/sys/class/net") / self._hosts[name][1] / "statistics"
        return sum(int((statistics / f"{way}_bytes").read_text()) for way in ("rx", "tx"))

    def set_link(self, name: str, up: bool) -> None:
        """Take host ``name`` off the switch (its end of the cable unplugged), or put it back; its connections
        stay open, and what they send waits, as over a cable pulled out for a while."""
        self._ip("link", "set", self._hosts[name][1], "up" if up else "down")

    def pids(self, name: str) -> list[int]:
        listed = subprocess.run(["ip", "netns", "pids", self._hosts[name][0]], capture_output=True, text=True)
        return [int(pid) for pid in listed.stdout.split()]

    def kill_all(self, name: str) -> int:
        """SIGKILL every process on host ``name``, as a machine that loses power; how many there were."""
        pids = self.pids(name)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def close(self) -> None:
        for name, (namespace, _, _) in self._hosts.items():
            self.kill_all(name)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
