"""``squall list/kill/activate/deactivate`` with no ``--url`` find this user's web UI on whatever port it took,
through the discovery file it writes; a file whose process is gone is dropped."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from servers import wait_for
from test_ui import FailEveryThird, Numbers, topology

from squall import LocalCluster
from squall.cli import main
from squall.ui.discovery import discovery_dir, running_uis


@pytest.fixture
def runtime_dir(tmp_path, monkeypatch):
    """This session's runtime directory: only this test's UIs announce themselves there."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path / "squall" / "ui"


def gone_pid() -> int:
    """The pid of a process that has exited."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_the_commands_find_the_ui_on_the_port_it_took_and_drop_stale_files(spark, runtime_dir):
    stale = runtime_dir / "127.0.0.1_1.json"
    spout = Numbers()
    with LocalCluster({"squall.ui.port": 0}) as cluster:
        url, port = cluster.ui.url, cluster.ui.port
        announced = runtime_dir / f"127.0.0.1_{port}.json"
        assert discovery_dir() == runtime_dir
        assert json.loads(announced.read_text()) == {"url": url, "pid": os.getpid()}
        assert announced.stat().st_mode & 0o777 == 0o600 and runtime_dir.stat().st_mode & 0o777 == 0o700
        stale.write_text(json.dumps({"url": "http://127.0.0.1:1", "pid": gone_pid()}))

        run = cluster.submit_topology("numbers", {}, topology(spout, FailEveryThird()))
        listed = cli("list")
        assert not stale.exists()  # its process is gone: dropped, and not listed
        (row,) = [line for line in listed.splitlines() if line.startswith("numbers")]
        assert row.split()[1] == "ACTIVE" and row.endswith(url)

        assert cli("deactivate", "numbers") == "deactivated numbers\n"
        assert not run.wanted_active
        assert cli("activate", "numbers") == "activated numbers\n"
        assert run.wanted_active
        spout.feed([1, 2])
        wait_for(lambda: spout.acked == {1, 2}, "the fed numbers, acked")

        missing = CliRunner().invoke(main, ["kill", "nothing"])
        assert missing.exit_code == 1
        assert f"no squall run of this user on this machine serves a topology named 'nothing': {url} do not" in (
            missing.output
        )
        assert cli("kill", "numbers", "--wait", "0") == "killed numbers\n"
        assert "numbers" not in cluster.runs
        assert cli("list") == "no topologies running\n"
    assert not announced.exists() and running_uis() == []  # the UI stopped: its file went with it


def test_a_ui_not_answering_is_reported_and_the_others_listed(spark, runtime_dir):
    with LocalCluster({"squall.ui.port": 0}) as cluster:
        cluster.submit_topology("numbers", {}, topology(Numbers(), FailEveryThird()))
        # a UI of a live process (this one) that does not answer: stopping, say
        (runtime_dir / "127.0.0.1_1.json").write_text(json.dumps({"url": "http://127.0.0.1:1", "pid": os.getpid()}))
        result = CliRunner().invoke(main, ["list"])
        assert result.exit_code == 0, result.output
        assert "squall: cannot reach squall at http://127.0.0.1:1" in result.stderr
        (row,) = [line for line in result.stdout.splitlines() if line.startswith("numbers")]
        assert row.endswith(cluster.ui.url)
