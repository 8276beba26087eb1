"""Connection settings and payload decoding, without servers."""

import pytest

from squall.connectors.keyed_state import open_keyed_state
from squall.connectors.queue import MalformedMessage, decode_values
from squall.model import Fields
from squall.model.config import check_config
from squall.model.errors import InvalidConfigError
from squall.model.urls import redact


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("amqp://guest:s3cret@127.0.0.1:5672/%2F", "amqp://guest:***@127.0.0.1:5672/%2F"),
        ("postgresql://u:p#/x@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("amqp://guest@h/", "amqp://guest@h/"),
        ("amqp:/guest:s3cret@h", "***@h"),
    ],
)
def test_passwords_are_masked(url, shown):
    assert redact(url) == shown


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("squall.amqp.url", "http://h", "'squall.amqp.url' must be None or a URL starting with amqp:// or amqps://"),
        ("squall.redis.url", "127.0.0.1:6379", "'squall.redis.url' must be None or a URL starting with redis://"),
        ("squall.postgresql.url", "mysql://h", "must be None or a URL starting with postgresql://"),
        ("squall.transactional.store", "mysql://h/x", "a SQLite path, sqlite:///path or zookeeper://host:port/root"),
        ("squall.transactional.store", "", "a SQLite path"),
    ],
)
def test_bad_urls_are_refused_naming_the_key(key, value, message):
    with pytest.raises(InvalidConfigError) as err:
        check_config({key: value})
    assert message in str(err.value)


def test_a_refused_url_does_not_show_its_password():
    with pytest.raises(InvalidConfigError) as err:
        check_config({"squall.amqp.url": "amqp:/guest:s3cret@h"})
    assert "s3cret" not in str(err.value) and "***@h" in str(err.value)


def test_good_urls_pass():
    check_config(
        {
            "squall.amqp.url": "amqp://guest:guest@127.0.0.1:5672/%2F",
            "squall.redis.url": "redis://127.0.0.1:6379/0",
            "squall.postgresql.url": "postgresql://postgres@127.0.0.1:5432/postgres",
            "squall.transactional.store": "zookeeper://127.0.0.1:2181/squall",
        }
    )
    check_config({"squall.transactional.store": "sqlite:///tmp/x.sqlite"})
    check_config({"squall.transactional.store": ".squall-state/t.sqlite"})


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{not json", "invalid JSON"),
        ("[" * 100_000, "undecodable JSON: RecursionError"),
        ('["a", "b", "c"]', "3 value(s) for 2 field(s)"),
        ('{"a": 1}', "object lacks field(s) ['b']"),
        ("7", "a lone value for 2 fields"),
    ],
)
def test_malformed_payloads_are_named(body, reason):
    with pytest.raises(MalformedMessage) as err:
        decode_values(body, Fields("a", "b"))
    assert reason in str(err.value)


def test_payload_shapes():
    assert decode_values('["x", 2]', Fields("a", "b")) == ("x", 2)
    assert decode_values('{"b": 2, "a": "x"}', Fields("a", "b")) == ("x", 2)
    assert decode_values('"solo"', Fields("a")) == ("solo",)


def test_keyed_state_urls(tmp_path):
    state = open_keyed_state(str(tmp_path / "s.sqlite"), "t")
    state.update(1, {"k": 2})
    assert open_keyed_state(f"sqlite://{tmp_path / 's.sqlite'}", "t").values() == {"k": 2}
    with pytest.raises(ValueError, match="no keyed state store for mysql:// URLs"):
        open_keyed_state("mysql://h/db", "t")
