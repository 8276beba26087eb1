"""Where a run's keys come from, and what Spark's own security settings ask of squall.

* The **link secret** is made by the driver for each run (``LinkKeys.generate``) and shipped to the workers
  only inside the Spark task closure, which Spark's RPC encryption covers when it is on.
* The **checkpoint key** signs (or encrypts) what squall writes to ``squall.checkpoint.dir``. It must outlive a
  run, since a restarted driver reads what the last one wrote, so it is taken from, in order:
  ``squall.checkpoint.key`` (a string; ``${ENV}`` works there), the environment variable
  ``SQUALL_CHECKPOINT_KEY``, or the file ``squall.checkpoint.key.file`` (default ``~/.squall/checkpoint.key``),
  made with 32 random bytes, readable by its owner only, the first time it is needed. The file lives outside
  the checkpoint directory on purpose: whoever can write there must not be able to read the key.
* Links are encrypted when ``squall.links.encrypt`` is true, or when it is unset and Spark encrypts its own RPC
  (``spark.network.crypto.enabled``, ``spark.ssl.enabled`` or ``spark.ssl.rpc.enabled``). What squall writes
  to disk is encrypted when ``squall.checkpoint.encrypt`` is true, or when it is unset and
  ``spark.io.encryption.enabled`` is on. Setting either to false while Spark's matching setting is on is
  refused: the run would carry in clear what its operator asked Spark to protect.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall.model.config import (
    SQUALL_CHECKPOINT_ENCRYPT,
    SQUALL_CHECKPOINT_KEY,
    SQUALL_CHECKPOINT_KEY_FILE,
    SQUALL_LINKS_ENCRYPT,
)
from squall.model.errors import InvalidConfigError
from squall.security.handshake import LinkKeys
from squall.security.sealing import BlobSealer

log = logging.getLogger("squall")

CHECKPOINT_KEY_ENV = "SQUALL_CHECKPOINT_KEY"
DEFAULT_KEY_FILE = "~/.squall/checkpoint.key"

SPARK_LINK_ENCRYPTION = ("spark.network.crypto.enabled", "spark.ssl.enabled", "spark.ssl.rpc.enabled")
SPARK_IO_ENCRYPTION = "spark.io.encryption.enabled"


@dataclass(frozen=True, slots=True)
class RunKeys:
    """What a run's workers need to authenticate their links and seal their files; shipped in the Spark task
    closure, never over a squall link. Its ``repr`` shows no key."""

    links: LinkKeys
    checkpoint: bytes
    encrypt_checkpoints: bool = False

    def __repr__(self) -> str:
        return f"RunKeys(links={self.links!r}, encrypt_checkpoints={self.encrypt_checkpoints})"

    def sealer(self) -> BlobSealer:
        return BlobSealer(self.checkpoint, self.encrypt_checkpoints)


def _on(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def _follow(setting: Any, spark_conf: Mapping[str, Any], spark_keys: tuple[str, ...], key: str) -> bool:
    spark_on = [k for k in spark_keys if _on(spark_conf.get(k, "false"))]
    if setting is False and spark_on:
        raise InvalidConfigError(
            f"{spark_on[0]} is on but {key} is false: squall would carry in clear text what Spark is asked to"
            f" protect; set {key} to true (or leave it unset to follow Spark)"
        )
    return bool(setting) or bool(spark_on)


def link_encryption(conf: Mapping[str, Any], spark_conf: Mapping[str, Any]) -> bool:
    """Whether the run's links are encrypted; raises ``InvalidConfigError`` when squall's setting contradicts
    Spark's."""
    return _follow(conf.get(SQUALL_LINKS_ENCRYPT), spark_conf, SPARK_LINK_ENCRYPTION, SQUALL_LINKS_ENCRYPT)


def checkpoint_encryption(conf: Mapping[str, Any], spark_conf: Mapping[str, Any]) -> bool:
    return _follow(conf.get(SQUALL_CHECKPOINT_ENCRYPT), spark_conf, (SPARK_IO_ENCRYPTION,), SQUALL_CHECKPOINT_ENCRYPT)


def checkpoint_key(conf: Mapping[str, Any]) -> bytes:
    """The checkpoint key, 32 bytes, from the config, the environment or the key file (made if missing). A key
    given as text goes through scrypt, so that a guessable one costs whoever tries guesses against a sealed file."""
    given = conf.get(SQUALL_CHECKPOINT_KEY) or os.environ.get(CHECKPOINT_KEY_ENV)
    if given:
        return _stretched(str(given))
    path = os.path.expanduser(conf.get(SQUALL_CHECKPOINT_KEY_FILE) or DEFAULT_KEY_FILE)
    try:
        with open(path, "rb") as source:
            key = source.read()
            mode = os.fstat(source.fileno()).st_mode
    except FileNotFoundError:
        _make_key_file(path)
        return checkpoint_key(conf)
    if len(key) < 16:
        raise InvalidConfigError(f"{SQUALL_CHECKPOINT_KEY_FILE} {path}: a key needs at least 16 bytes")
    if mode & (stat.S_IWGRP | stat.S_IWOTH | stat.S_IRGRP | stat.S_IROTH):
        log.warning("the checkpoint key %s can be read or written by others than its owner: chmod 600 it", path)
    return key


@functools.lru_cache(maxsize=8)
def _stretched(text: str) -> bytes:
    return hashlib.scrypt(text.encode(), salt=b"squall checkpoint key", n=1 << 14, r=8, p=1, dklen=32)


def _make_key_file(path: str) -> None:
    """32 random bytes in ``path``, readable by its owner only; written whole under another name and linked in,
    so a process that finds the file finds all of it, and of two that race one wins."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    temporary = os.path.join(directory, f".checkpoint-key-{os.getpid()}-{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(secrets.token_bytes(32))
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first: its key is the one
            os.link(temporary, path)
    finally:
        os.remove(temporary)


def run_keys(conf: Mapping[str, Any], spark_conf: Mapping[str, Any]) -> RunKeys:
    """A new run's keys: a fresh link secret, the checkpoint key, and whether each is used to encrypt."""
    return RunKeys(
        LinkKeys.generate(link_encryption(conf, spark_conf)),
        checkpoint_key(conf),
        checkpoint_encryption(conf, spark_conf),
    )
