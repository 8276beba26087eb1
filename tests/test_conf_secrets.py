"""Secrets reach a topology's config from the environment (``${NAME}``) or a config file (``squall run
--conf-file``), never from the command line that ``ps`` shows, and squall shows them masked."""

from __future__ import annotations

from pathlib import Path

import pytest

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
