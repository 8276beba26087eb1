"""Secrets are masked in every form squall is given them: URL userinfo, URL query parameters, libpq keyword
strings, and config keys that name a secret."""

import pytest

from squall.model.config import check_config
from squall.model.errors import InvalidConfigError
from squall.model.urls import is_secret_name, redact, redact_config


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        # URL userinfo
        ("amqp://guest:guest@127.0.0.1:5672/%2F", "amqp://guest:***@127.0.0.1:5672/%2F"),
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("postgresql://u:p/w#x@y@db.example:5432/app", "postgresql://u:***@db.example:5432/app"),
        ("amqp://u:pa?ss@host/", "amqp://u:***@host/"),
        ("zookeeper://squall:pw@zk1:2181,zk2:2181/squall", "zookeeper://squall:***@zk1:2181,zk2:2181/squall"),
        # URL query parameters that name a secret, in any case
        ("postgresql://h/db?user=u&password=pw", "postgresql://h/db?user=u&password=***"),
        (
            "postgresql://h/db?user=u&PassWord=pw&sslmode=require",
            "postgresql://h/db?user=u&PassWord=***&sslmode=require",
        ),
        ("postgresql://h/db?passwd=a&pwd=b&user=u", "postgresql://h/db?passwd=***&pwd=***&user=u"),
        ("http://h/x?secret=a;token=b;page=2", "http://h/x?secret=***;token=***;page=2"),
        ("kafka://h:9092?sasl.password=a&sasl.username=u", "kafka://h:9092?sasl.password=***&sasl.username=u"),
        ("kafka://h:9092?sasl%2Epassword=a", "kafka://h:9092?sasl%2Epassword=***"),
        ("postgresql://h/db?password=a:b@c&user=u", "postgresql://h/db?password=***&user=u"),
        ("postgresql://u:pw@h/db?sslpassword=k", "postgresql://u:***@h/db?sslpassword=***"),
        # libpq keyword/value strings
        ("host=h port=5432 password=pw dbname=app", "host=h port=5432 password=*** dbname=app"),
        ("host=h password='a b\\' c' user=u", "host=h password=*** user=u"),
        ('host=h password = "x y" user=u', "host=h password = *** user=u"),
        ("password=pw", "password=***"),
        ("host=h user=u@corp PASSWORD=pw", "host=h user=u@corp PASSWORD=***"),
        ("dbname=app user=u", "dbname=app user=u"),
        # user:password@host without a scheme
        ("u:pw@host:5432", "***@host:5432"),
        # nothing secret
        ("/var/lib/squall/state.sqlite", "/var/lib/squall/state.sqlite"),
        ("sqlite:///x.db", "sqlite:///x.db"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_redact_masks_every_form_of_secret(given, shown):
    assert redact(given) == shown


@pytest.mark.parametrize(
    "name",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "SASL.PASSWORD",
        "db.passwd",
        "pwd",
        "squall.ui.token",
        "access_token",
        "sasl.oauthbearer.client.secret",
        "sasl.jaas.config",
        "ssl.key.pem",
        "api_key",
        "squall.zookeeper.auth",
        "storm.zookeeper.auth.payload",
        "squall.zookeeper.ssl.keyfile.password",
        "squall.checkpoint.key",
    ],
)
def test_names_of_secrets(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "sasl.username",
        "security.protocol",
        "squall.kafka.client.config",
        "author",
        "bypass",
        "topology.name",
        "ssl.key.location",
        "squall.checkpoint.key.file",
    ],
)
def test_names_that_are_not_secrets(name):
    assert not is_secret_name(name)


def test_shown_config_masks_secret_keys_and_the_secrets_in_values_at_every_depth():
    conf = {
        "topology.message.timeout.secs": 30,
        "squall.postgresql.url": "postgresql://app:pg-secret@db:5432/app",
        "squall.kafka.client.config": {
            "security.protocol": "SASL_SSL",
            "sasl.username": "squall",
            "sasl.password": "kafka-secret",
            "ssl.key.password": "key-secret",
        },
        "squall.zookeeper.auth": "squall:zk-secret",
        "app.token": "t-secret",
        "app.urls": ["amqp://u:amqp-secret@mq/", "host=h password=libpq-secret"],
        "app.password": None,
    }
    assert redact_config(conf) == {
        "topology.message.timeout.secs": 30,
        "squall.postgresql.url": "postgresql://app:***@db:5432/app",
        "squall.kafka.client.config": {
            "security.protocol": "SASL_SSL",
            "sasl.username": "squall",
            "sasl.password": "***",
            "ssl.key.password": "***",
        },
        "squall.zookeeper.auth": "***",
        "app.token": "***",
        "app.urls": ["amqp://u:***@mq/", "host=h password=***"],
        "app.password": None,  # nothing to hide
    }
    assert conf["squall.kafka.client.config"]["sasl.password"] == "kafka-secret"  # the config itself is untouched


def test_a_bad_value_under_a_secret_key_is_not_echoed_in_the_error():
    with pytest.raises(InvalidConfigError) as refused:
        check_config({"squall.zookeeper.auth": "no-colon-secret"})
    assert "squall.zookeeper.auth" in str(refused.value)
    assert "no-colon-secret" not in str(refused.value)
