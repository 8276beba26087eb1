"""Topology configuration: Storm's keys and defaults, plus squall's own ``squall.*`` keys.

Config is a plain dict. Keys squall does not know are passed through to the
components untouched, as Storm does, except under ``squall.``, which is ours.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from squall.model.errors import InvalidConfigError
from squall.model.urls import MASK, is_secret_name, redact

TOPOLOGY_ACKER_EXECUTORS = "topology.acker.executors"
TOPOLOGY_MESSAGE_TIMEOUT_SECS = "topology.message.timeout.secs"
TOPOLOGY_MAX_SPOUT_PENDING = "topology.max.spout.pending"
TOPOLOGY_MAX_TASK_PARALLELISM = "topology.max.task.parallelism"  # a component caps its own parallelism
TOPOLOGY_SPOUT_MAX_BATCH_SIZE = "topology.spout.max.batch.size"  # a plain spout's next_tuple calls a Trident batch
TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS = "topology.enable.message.timeouts"
TOPOLOGY_TICK_TUPLE_FREQ_SECS = "topology.tick.tuple.freq.secs"
TOPOLOGY_DEBUG = "topology.debug"
TOPOLOGY_NAME = "topology.name"  # set by the runtime: the name the topology was submitted under
# True: shuffle groupings deal tuples evenly, whatever the workers' loads (Storm's key; squall/spark/load.py)
TOPOLOGY_DISABLE_LOADAWARE_MESSAGING = "topology.disable.loadaware.messaging"
TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS = "topology.state.checkpoint.interval.ms"  # stateful bolts' checkpoints
TOPOLOGY_STATE_PROVIDER = "topology.state.provider"  # where they go: "file" (squall.checkpoint.dir) or "redis"
SQUALL_SPARK_MASTER = "squall.spark.master"
SQUALL_SPARK_CONF = "squall.spark.conf"  # {spark key: value} passed to the SparkConf
SQUALL_SPARK_UI = "squall.spark.ui"  # Spark's own web UI
# Where bolt state is checkpointed: any Hadoop-compatible URL (file:, hdfs:, s3a:) or a local path
SQUALL_CHECKPOINT_DIR = "squall.checkpoint.dir"
SQUALL_WAVE_SPOUT_BATCH = "squall.wave.spout.batch"  # at most this many emits per spout task per wave
SQUALL_WAVE_TARGET_MS = "squall.wave.target.ms"  # waves size themselves to take about this long
SQUALL_WAVE_MAX_INFLIGHT = "squall.wave.max.inflight"  # waves running at once
# The bytes a worker's inbox may hold (tuples received and not yet executed): waves shrink to keep it under
SQUALL_WORKER_INBOX_MAX_BYTES = "squall.worker.inbox.max.bytes"
SQUALL_WORKERS = "squall.workers"  # long-lived worker tasks hosting the bolt tasks (None: one per core, at most)
# How often the workers snapshot their bolt tasks' state when spouts run on the workers (LocalCluster, squall run)
SQUALL_SNAPSHOT_INTERVAL_MS = "squall.snapshot.interval.ms"
SQUALL_WAVE_MAX_FAILURES = "squall.wave.max.failures"  # waves in a row whose job fails before the topology stops
# No report this long, with a wave in flight and every worker free to say what it waits for: the workers start again
# from the last complete snapshot, as after a lost worker; at half of it the driver logs what each worker waits for
# (0: no restart; it only warns, every minute)
SQUALL_WAVE_STALL_SECS = "squall.wave.stall.secs"
# The same uncaught error from one task this many times in a row, with no progress in between, stops the topology
# (None: never; docs/operations.md, "When a run fails")
SQUALL_MAX_REPEATED_ERRORS = "squall.max.repeated.errors"
# How long a lost worker may wait for a free core before the run starts again on the cores the cluster has
SQUALL_WORKER_REPLACE_TIMEOUT_SECS = "squall.worker.replace.timeout.secs"
# The cyclic garbage collector's first threshold in the Python workers, which then start with what they hold
# frozen out of it (None: Python's own settings, untouched)
SQUALL_WORKER_GC_THRESHOLD = "squall.worker.gc.threshold"
# How long a Python worker's thread may hold the GIL while another waits for it (sys.setswitchinterval): a frame
# read off a link waits up to this long for the thread that runs the bolts
SQUALL_WORKER_SWITCH_INTERVAL_MS = "squall.worker.switch.interval.ms"
SQUALL_IDLE_SLEEP_SECS = "squall.idle.sleep.secs"  # LocalCluster's pause when a wave had nothing to do
SQUALL_IDLE_MAX_SLEEP_SECS = "squall.idle.max.sleep.secs"  # the pause once idle a second, nothing pending
SQUALL_WAVE_DRY_PAUSE_MS = "squall.wave.dry.pause.ms"  # LocalCluster's pause after a wave whose spouts ran dry
# A wave whose spouts had less than its calls allowed stays open this long, its spouts called again at idle moments
# (0: never open): squall/spark/open_wave.py
SQUALL_WAVE_OPEN_MS = "squall.wave.open.ms"
SQUALL_WAVE_OPEN_CALL_MS = "squall.wave.open.call.ms"  # how often the spouts of an open wave are called
# An open wave ends when its spouts emit nothing this long (at least twice squall.wave.open.call.ms)
SQUALL_WAVE_OPEN_DRY_MS = "squall.wave.open.dry.ms"
# A wave's burst leaves in parts of this many emits per spout task, so its bolts start before the burst ends (0: whole)
SQUALL_WAVE_SPOUT_SLICE = "squall.wave.spout.slice"
# Where transactional progress is kept: a SQLite file (a path, or sqlite:///path) or zookeeper://host:port/root
SQUALL_UI_PORT = "squall.ui.port"  # the web UI, REST API and /metrics (None: not served; 0: any free port)
SQUALL_UI_HOST = "squall.ui.host"
SQUALL_TRANSACTIONAL_STORE = "squall.transactional.store"
# Storm's DRPC keys: the DRPC servers a topology's DRPC streams take requests from, and their port
DRPC_SERVERS = "drpc.servers"
DRPC_PORT = "drpc.port"
DRPC_REQUEST_TIMEOUT_SECS = "drpc.request.timeout.secs"  # a request unanswered this long fails
SQUALL_DRPC_TOKEN = "squall.drpc.token"  # the DRPC servers' token (None: the token file this machine's server wrote)
# Storm's: a batch begins at most this often (None: as soon as one may; a Trident topology's default is 50 ms)
TOPOLOGY_TRIDENT_BATCH_EMIT_INTERVAL_MILLIS = "topology.trident.batch.emit.interval.millis"
# Connection URLs that connectors use when they are not given one
SQUALL_REDIS_URL = "squall.redis.url"  # redis://127.0.0.1:6379/0
SQUALL_AMQP_URL = "squall.amqp.url"  # amqp://guest:guest@127.0.0.1:5672/%2F
SQUALL_POSTGRESQL_URL = "squall.postgresql.url"  # postgresql://user@127.0.0.1:5432/db
SQUALL_KAFKA_BOOTSTRAP_SERVERS = "squall.kafka.bootstrap.servers"  # 127.0.0.1:9092[,host:port...]
# librdkafka settings for every Kafka client squall's Kafka components make (security.protocol, sasl.*, ssl.*...),
# under each component's own consumer_config / producer_config
SQUALL_KAFKA_CLIENT_CONFIG = "squall.kafka.client.config"
# The ZooKeeper coordinator store: digest credentials "user:password" (the znodes it creates are then readable and
# writable by that user alone), and TLS (PEM files)
SQUALL_ZOOKEEPER_AUTH = "squall.zookeeper.auth"
SQUALL_ZOOKEEPER_SSL = "squall.zookeeper.ssl"
SQUALL_ZOOKEEPER_SSL_CA = "squall.zookeeper.ssl.ca"
SQUALL_ZOOKEEPER_SSL_CERTFILE = "squall.zookeeper.ssl.certfile"
SQUALL_ZOOKEEPER_SSL_KEYFILE = "squall.zookeeper.ssl.keyfile"
SQUALL_ZOOKEEPER_SSL_KEYFILE_PASSWORD = "squall.zookeeper.ssl.keyfile.password"
SQUALL_ZOOKEEPER_SSL_VERIFY = "squall.zookeeper.ssl.verify"
SQUALL_RUN_ID = "squall.run.id"  # set by the runtime: this submission's id, new each time a topology is submitted
# Security (squall/security): links authenticate always; these say what is encrypted and what keys sign
SQUALL_LINKS_ENCRYPT = "squall.links.encrypt"  # None: encrypt when Spark encrypts its RPC
SQUALL_LINKS_HANDSHAKE_TIMEOUT_SECS = "squall.links.handshake.timeout.secs"  # a connection proves the secret in time
# A listener (the hub, a worker's) holds at most this many connections that have not proved the secret yet
SQUALL_LINKS_MAX_CONNECTIONS = "squall.links.max.connections"
SQUALL_CHECKPOINT_KEY = "squall.checkpoint.key"  # signs what squall writes (None: SQUALL_CHECKPOINT_KEY, or the file)
SQUALL_CHECKPOINT_KEY_FILE = "squall.checkpoint.key.file"  # None: ~/.squall/checkpoint.key
SQUALL_CHECKPOINT_ENCRYPT = "squall.checkpoint.encrypt"  # None: encrypt when spark.io.encryption.enabled is on

DEFAULTS: dict[str, Any] = {
    TOPOLOGY_ACKER_EXECUTORS: None,  # one per worker, as Storm's default since 1.0
    TOPOLOGY_MESSAGE_TIMEOUT_SECS: 30,
    TOPOLOGY_MAX_SPOUT_PENDING: None,
    TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS: True,
    TOPOLOGY_TICK_TUPLE_FREQ_SECS: None,
    TOPOLOGY_DEBUG: False,
    TOPOLOGY_DISABLE_LOADAWARE_MESSAGING: False,
    TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS: 1000,
    TOPOLOGY_STATE_PROVIDER: "file",
    SQUALL_SPARK_MASTER: "local[*]",
    SQUALL_SPARK_CONF: {},
    SQUALL_SPARK_UI: False,
    SQUALL_CHECKPOINT_DIR: None,
    SQUALL_WAVE_SPOUT_BATCH: 20_000,
    SQUALL_WAVE_TARGET_MS: 200,
    SQUALL_WAVE_MAX_INFLIGHT: 2,
    SQUALL_WORKER_INBOX_MAX_BYTES: 128 * 1024 * 1024,
    SQUALL_WORKERS: None,
    SQUALL_SNAPSHOT_INTERVAL_MS: 1000,
    SQUALL_WAVE_MAX_FAILURES: 5,
    SQUALL_WAVE_STALL_SECS: 60.0,
    SQUALL_MAX_REPEATED_ERRORS: 100,
    SQUALL_WORKER_REPLACE_TIMEOUT_SECS: 10.0,
    SQUALL_WORKER_GC_THRESHOLD: 50_000,  # None: Python's own collector settings
    SQUALL_WORKER_SWITCH_INTERVAL_MS: 5.0,
    SQUALL_IDLE_SLEEP_SECS: 0.05,
    SQUALL_IDLE_MAX_SLEEP_SECS: 0.25,
    SQUALL_WAVE_DRY_PAUSE_MS: 2.0,
    SQUALL_WAVE_OPEN_MS: 50.0,
    SQUALL_WAVE_OPEN_CALL_MS: 4.0,
    SQUALL_WAVE_OPEN_DRY_MS: 10.0,
    SQUALL_WAVE_SPOUT_SLICE: 2048,
    SQUALL_UI_PORT: None,
    SQUALL_UI_HOST: "127.0.0.1",
    SQUALL_TRANSACTIONAL_STORE: ".squall-state/transactional.sqlite",
    DRPC_SERVERS: None,
    DRPC_PORT: 3772,
    DRPC_REQUEST_TIMEOUT_SECS: 600,
    SQUALL_DRPC_TOKEN: None,
    TOPOLOGY_TRIDENT_BATCH_EMIT_INTERVAL_MILLIS: None,
    SQUALL_REDIS_URL: None,
    SQUALL_AMQP_URL: None,
    SQUALL_POSTGRESQL_URL: None,
    SQUALL_KAFKA_BOOTSTRAP_SERVERS: None,
    SQUALL_KAFKA_CLIENT_CONFIG: {},
    SQUALL_ZOOKEEPER_AUTH: None,
    SQUALL_ZOOKEEPER_SSL: False,
    SQUALL_ZOOKEEPER_SSL_CA: None,
    SQUALL_ZOOKEEPER_SSL_CERTFILE: None,
    SQUALL_ZOOKEEPER_SSL_KEYFILE: None,
    SQUALL_ZOOKEEPER_SSL_KEYFILE_PASSWORD: None,
    SQUALL_ZOOKEEPER_SSL_VERIFY: True,
    TOPOLOGY_NAME: None,
    SQUALL_RUN_ID: None,
    SQUALL_LINKS_ENCRYPT: None,
    SQUALL_LINKS_HANDSHAKE_TIMEOUT_SECS: 10.0,
    SQUALL_LINKS_MAX_CONNECTIONS: 256,
    SQUALL_CHECKPOINT_KEY: None,
    SQUALL_CHECKPOINT_KEY_FILE: None,
    SQUALL_CHECKPOINT_ENCRYPT: None,
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and v == v  # rejects NaN


def _int_at_least(low: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if _is_int(v) and v >= low else f"an int >= {low}"

    return check


def _positive_number(v: Any) -> str | None:
    return None if _is_number(v) and 0 < v < float("inf") else "a number > 0"


def _non_negative_number(v: Any) -> str | None:
    return None if _is_number(v) and 0 <= v < float("inf") else "a number >= 0"


def _optional(check: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    def optional(v: Any) -> str | None:
        if v is None:
            return None
        problem = check(v)
        return problem and f"None or {problem}"

    return optional


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if v in choices else "one of " + ", ".join(repr(c) for c in choices)

    return check


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "a bool (true or false)"


def _non_empty_str(v: Any) -> str | None:
    return None if isinstance(v, str) and v else "a non-empty string"


def _url(*schemes: str) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if isinstance(v, str):
            scheme, sep, rest = v.partition("://")
            if sep and scheme in schemes and rest:
                return None
        return "a URL starting with " + " or ".join(f"{s}://" for s in schemes)

    return check


def _port(v: Any) -> str | None:
    return None if _is_int(v) and 0 <= v <= 65535 else "a port number, 0 to 65535 (0: any free port)"


def _path_or_url(v: Any) -> str | None:
    return None if isinstance(v, os.PathLike) or (isinstance(v, str) and v) else "a path or a URL (file:, hdfs:, s3a:)"


def _spark_conf(v: Any) -> str | None:
    if isinstance(v, Mapping) and all(
        isinstance(k, str) and k and isinstance(x, (str, int, float, bool)) for k, x in v.items()
    ):
        return None
    return "a dict of Spark config keys to str, int, float or bool values"


def _client_config(v: Any) -> str | None:
    if isinstance(v, Mapping) and all(
        isinstance(k, str) and k and isinstance(x, (str, int, float, bool)) for k, x in v.items()
    ):
        return None
    return "a dict of librdkafka config keys to str, int, float or bool values"


def _user_password(v: Any) -> str | None:
    return None if isinstance(v, str) and ":" in v and v.partition(":")[0] else "'user:password'"


def _hosts(v: Any) -> str | None:
    if isinstance(v, (list, tuple)) and v and all(isinstance(h, str) and h for h in v):
        return None
    return "a list of host names"


def _store(v: Any) -> str | None:
    if isinstance(v, str) and v:
        scheme, sep, _ = v.partition("://")
        if not sep or scheme in ("sqlite", "zookeeper"):
            return None
    return "a SQLite path, sqlite:///path or zookeeper://host:port/root"


VALIDATORS: dict[str, Callable[[Any], str | None]] = {
    TOPOLOGY_ACKER_EXECUTORS: _optional(_int_at_least(0)),
    TOPOLOGY_MESSAGE_TIMEOUT_SECS: _positive_number,
    TOPOLOGY_MAX_SPOUT_PENDING: _optional(_int_at_least(1)),
    TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS: _bool,
    TOPOLOGY_TICK_TUPLE_FREQ_SECS: _optional(_positive_number),
    TOPOLOGY_DEBUG: _bool,
    TOPOLOGY_DISABLE_LOADAWARE_MESSAGING: _bool,
    TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS: _positive_number,
    TOPOLOGY_STATE_PROVIDER: _one_of("file", "redis"),
    SQUALL_SPARK_MASTER: _non_empty_str,
    SQUALL_SPARK_CONF: _spark_conf,
    SQUALL_SPARK_UI: _bool,
    SQUALL_CHECKPOINT_DIR: _optional(_path_or_url),
    SQUALL_WAVE_SPOUT_BATCH: _int_at_least(1),
    SQUALL_WAVE_TARGET_MS: _positive_number,
    SQUALL_WAVE_MAX_INFLIGHT: _int_at_least(1),
    SQUALL_WORKER_INBOX_MAX_BYTES: _int_at_least(1024),
    SQUALL_WORKERS: _optional(_int_at_least(1)),
    SQUALL_SNAPSHOT_INTERVAL_MS: _positive_number,
    SQUALL_WAVE_MAX_FAILURES: _int_at_least(1),
    SQUALL_WAVE_STALL_SECS: _non_negative_number,
    SQUALL_MAX_REPEATED_ERRORS: _optional(_int_at_least(1)),
    SQUALL_WORKER_REPLACE_TIMEOUT_SECS: _positive_number,
    SQUALL_WORKER_GC_THRESHOLD: _optional(_int_at_least(1)),
    SQUALL_WORKER_SWITCH_INTERVAL_MS: _positive_number,
    SQUALL_IDLE_SLEEP_SECS: _positive_number,
    SQUALL_IDLE_MAX_SLEEP_SECS: _positive_number,
    SQUALL_WAVE_DRY_PAUSE_MS: _non_negative_number,
    SQUALL_WAVE_OPEN_MS: _non_negative_number,
    SQUALL_WAVE_OPEN_CALL_MS: _positive_number,
    SQUALL_WAVE_OPEN_DRY_MS: _positive_number,
    SQUALL_WAVE_SPOUT_SLICE: _int_at_least(0),
    SQUALL_UI_PORT: _optional(_port),
    SQUALL_UI_HOST: _non_empty_str,
    SQUALL_TRANSACTIONAL_STORE: _store,
    DRPC_SERVERS: _optional(_hosts),
    DRPC_PORT: _port,
    DRPC_REQUEST_TIMEOUT_SECS: _positive_number,
    SQUALL_DRPC_TOKEN: _optional(_non_empty_str),
    TOPOLOGY_TRIDENT_BATCH_EMIT_INTERVAL_MILLIS: _optional(_int_at_least(0)),
    SQUALL_REDIS_URL: _optional(_url("redis", "rediss", "unix")),
    SQUALL_AMQP_URL: _optional(_url("amqp", "amqps")),
    SQUALL_POSTGRESQL_URL: _optional(_url("postgresql", "postgres")),
    SQUALL_KAFKA_BOOTSTRAP_SERVERS: _optional(_non_empty_str),
    SQUALL_KAFKA_CLIENT_CONFIG: _client_config,
    SQUALL_ZOOKEEPER_AUTH: _optional(_user_password),
    SQUALL_ZOOKEEPER_SSL: _bool,
    SQUALL_ZOOKEEPER_SSL_CA: _optional(_non_empty_str),
    SQUALL_ZOOKEEPER_SSL_CERTFILE: _optional(_non_empty_str),
    SQUALL_ZOOKEEPER_SSL_KEYFILE: _optional(_non_empty_str),
    SQUALL_ZOOKEEPER_SSL_KEYFILE_PASSWORD: _optional(_non_empty_str),
    SQUALL_ZOOKEEPER_SSL_VERIFY: _bool,
    TOPOLOGY_NAME: _optional(_non_empty_str),
    SQUALL_RUN_ID: _optional(_non_empty_str),
    SQUALL_LINKS_ENCRYPT: _optional(_bool),
    SQUALL_LINKS_HANDSHAKE_TIMEOUT_SECS: _positive_number,
    SQUALL_LINKS_MAX_CONNECTIONS: _int_at_least(1),
    SQUALL_CHECKPOINT_KEY: _optional(_non_empty_str),
    SQUALL_CHECKPOINT_KEY_FILE: _optional(_non_empty_str),
    SQUALL_CHECKPOINT_ENCRYPT: _optional(_bool),
}


def check_config(conf: Mapping[str, Any] | None, where: str = "topology config") -> None:
    """Raise ``InvalidConfigError`` naming the first bad key of ``conf``."""
    if conf is None:
        return
    if not isinstance(conf, Mapping):
        raise InvalidConfigError(f"{where} must be a dict, got {type(conf).__name__}")
    for key, value in conf.items():
        if not isinstance(key, str):
            raise InvalidConfigError(f"{where}: config keys must be strings, got {key!r}")
        validator = VALIDATORS.get(key)
        if validator is None:
            if key.startswith("squall."):
                known = sorted(k for k in VALIDATORS if k.startswith("squall."))
                raise InvalidConfigError(f"{where}: unknown squall config key {key!r}; known: {known}")
            continue
        problem = validator(value)
        if problem:
            shown = MASK if is_secret_name(key) else redact(value) if isinstance(value, str) else value
            raise InvalidConfigError(f"{where}: {key!r} must be {problem}, got {shown!r}")


def resolve_config(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults overlaid with each layer in turn, every layer's ``${NAME}`` references expanded from the
    environment (``expand_env``) and the layer checked first."""
    merged = dict(DEFAULTS)
    for layer in layers:
        if isinstance(layer, Mapping):
            layer = expand_env(layer)
        check_config(layer)
        if layer:
            merged.update(layer)
    return merged


# ${NAME} is the environment variable NAME; $${NAME} is the text ${NAME}
_REFERENCE = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Values an expansion produced that still hold a $: never expanded again (a secret may contain "${")
_EXPANDED: set[str] = set()


def expand_env(conf: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``conf`` with every ``${NAME}`` in its string values (nested dicts and lists too) replaced by the
    environment variable ``NAME``, so that a secret need not be written in a file or on a command line
    (``--conf sasl.password=${KAFKA_PASSWORD}``). ``$${NAME}`` stands for the text ``${NAME}``. A value is
    expanded once: what a variable holds is taken as it is. ``InvalidConfigError`` names the key and the
    variable when the variable is not set."""
    env = os.environ if environ is None else environ
    return {key: _expand(key, value, env) for key, value in conf.items()}


def _expand(key: str, value: Any, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        if "$" not in value or value in _EXPANDED:
            return value

        def substitute(match: re.Match) -> str:
            escaped, name = match.groups()
            if escaped:
                return "${" + name + "}"
            if name not in env:
                raise InvalidConfigError(
                    f"config {key!r} refers to ${{{name}}}, and the environment variable {name} is not set"
                )
            return env[name]

        expanded = _REFERENCE.sub(substitute, value)
        if "$" in expanded and expanded != value:
            _EXPANDED.add(expanded)
        return expanded
    if isinstance(value, Mapping):
        return {k: _expand(f"{key}.{k}" if isinstance(k, str) else key, v, env) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_expand(key, v, env) for v in value)
    return value
