"""Secrets reach a topology's config from the environment (``${NAME}``) or a config file (``squall run
--conf-file``), never from the command line that ``ps`` shows, and squall shows them masked."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from servers import wait_for

from squall.cli import main
from squall.model.config import expand_env, resolve_config
from squall.model.errors import InvalidConfigError

ROOT = Path(__file__).parent.parent


def test_references_are_expanded_from_the_environment_at_every_depth():
    env = {"KAFKA_PASSWORD": "k-pw", "PG_PASSWORD": "p$w{d}", "HOST": "db.example"}
    conf = {
        "squall.kafka.client.config": {"sasl.username": "squall", "sasl.password": "${KAFKA_PASSWORD}"},
        "squall.postgresql.url": "postgresql://app:${PG_PASSWORD}@${HOST}:5432/app",
        "app.hosts": ["${HOST}", "other"],
        "app.literal": "$${HOST} costs $5",
        "topology.message.timeout.secs": 30,
    }
    assert expand_env(conf, env) == {
        "squall.kafka.client.config": {"sasl.username": "squall", "sasl.password": "k-pw"},
        "squall.postgresql.url": "postgresql://app:p$w{d}@db.example:5432/app",
        "app.hosts": ["db.example", "other"],
        "app.literal": "${HOST} costs $5",
        "topology.message.timeout.secs": 30,
    }


def test_an_unset_variable_is_an_error_naming_the_key_and_the_variable():
    with pytest.raises(InvalidConfigError) as refused:
        expand_env({"squall.kafka.client.config": {"sasl.password": "${NO_SUCH_SQUALL_VAR}"}}, {})
    message = str(refused.value)
    assert "'squall.kafka.client.config.sasl.password'" in message and "NO_SUCH_SQUALL_VAR" in message


def test_a_run_config_is_expanded_once_so_a_value_holding_a_reference_is_kept_as_it_is(monkeypatch):
    monkeypatch.setenv("SQUALL_TEST_SECRET", "pa${HOME}ss")
    once = resolve_config({"app.secret": "${SQUALL_TEST_SECRET}"})
    assert once["app.secret"] == "pa${HOME}ss"
    assert resolve_config(once)["app.secret"] == "pa${HOME}ss"  # a restart resolves the run's config again


SECRET = "pg-Secret-from-the-env-4711"


def test_squall_run_takes_secrets_from_a_conf_file_and_the_environment_never_from_its_command_line(tmp_path):
    out, log = tmp_path / "seen.json", tmp_path / "driver.log"
    conf_file = tmp_path / "secrets.json"
    conf_file.write_text(
        json.dumps(
            {
                "test.password": "${SQUALL_TEST_DB_PASSWORD}",
                "squall.postgresql.url": "postgresql://app:${SQUALL_TEST_DB_PASSWORD}@db.invalid:5432/app",
                "test.level": "file",
                "test.out": str(out),
            }
        )
    )
    args = [sys.executable, "-m", "squall.cli", "run", str(ROOT / "tests" / "secret_conf_topology.py")]
    args += ["--conf-file", str(conf_file), "--conf", "test.level=command line"]
    args += ["--master", "local[1]", "--ui-port", "0", "--idle-secs", "0"]
    env = {**os.environ, "SQUALL_TEST_DB_PASSWORD": SECRET}
    with open(log, "w") as output:
        driver = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        found: list[str] = []
        wait_for(lambda: found.extend(re.findall(r"web UI at (http://\S+)", log.read_text())) or found, "the UI",
                 timeout=300, process=driver)  # fmt: skip
        url = found[0]
        # what ps shows: the file's path, not the secret; the file holds a reference, not the secret
        command_line = Path(f"/proc/{driver.pid}/cmdline").read_bytes().decode()
        assert str(conf_file) in command_line and SECRET not in command_line
        assert SECRET not in conf_file.read_text()

        wait_for(out.exists, "the bolt's prepare", timeout=120, process=driver)
        wait_for(lambda: out.read_text(), "the bolt's write", timeout=10, process=driver)
        assert json.loads(out.read_text()) == {  # what the topology was given: the secret itself
            "test.password": SECRET,
            "squall.postgresql.url": f"postgresql://app:{SECRET}@db.invalid:5432/app",
            "test.level": "command line",  # --conf over --conf-file over the file's CONF
        }

        with urllib.request.urlopen(f"{url}/api/v1/topology/secrets", timeout=30) as response:
            shown = response.read().decode()
        configuration = json.loads(shown)["configuration"]
        assert configuration["test.password"] == "***"
        assert configuration["squall.postgresql.url"] == "postgresql://app:***@db.invalid:5432/app"
        assert (configuration["test.level"], configuration["topology.message.timeout.secs"]) == ("command line", 30)
        assert SECRET not in shown

        result = CliRunner().invoke(main, ["kill", "secrets", "--wait", "0", "--url", url])
        assert result.exit_code == 0, result.output
        assert driver.wait(timeout=120) == 0
    finally:
        if driver.poll() is None:
            driver.send_signal(signal.SIGINT)
            driver.wait(timeout=60)
    assert SECRET not in log.read_text()


def test_an_unset_variable_stops_squall_run_before_it_starts_naming_the_key_and_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("SQUALL_TEST_UNSET", raising=False)
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(json.dumps({"squall.kafka.client.config": {"sasl.password": "${SQUALL_TEST_UNSET}"}}))
    topology = str(ROOT / "tests" / "secret_conf_topology.py")
    result = CliRunner().invoke(main, ["run", topology, "--conf-file", str(conf_file), "--no-ui"])
    assert result.exit_code == 1
    assert result.output.startswith(
        "squall: config 'squall.kafka.client.config.sasl.password' refers to ${SQUALL_TEST_UNSET}, and the "
        "environment variable SQUALL_TEST_UNSET is not set"
    )

    result = CliRunner().invoke(main, ["run", topology, "--conf", "test.password=${SQUALL_TEST_UNSET}", "--no-ui"])
    assert result.exit_code == 1 and "'test.password' refers to ${SQUALL_TEST_UNSET}" in result.output

    conf_file.write_text('["not", "an", "object"]')
    result = CliRunner().invoke(main, ["run", topology, "--conf-file", str(conf_file), "--no-ui"])
    assert result.exit_code == 1
    assert f"--conf-file {conf_file} must hold a JSON object of config keys, got list" in result.output
