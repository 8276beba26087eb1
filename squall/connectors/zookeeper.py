"""A coordinator store in ZooKeeper, for a cluster that already runs one.

Like Storm, which keeps a transactional topology's current txid and each batch's
metadata in ZooKeeper, every key of a ``CoordinatorStore`` is a znode under
``{root}/{topology_id}/`` holding the value as JSON (never pickle): for example
``/squall/<id>/last_committed``, ``/squall/<id>/next_txid`` and
``/squall/<id>/meta/<txid>``. A ``/`` in a key is a level in the tree; the
levels in between hold no data and are not keys.

``transaction()`` buffers its writes and applies them as one ZooKeeper multi, so
another client sees all of them or none. Lost connections are retried with
backoff (``KazooRetry``). SQLite (``SqliteCoordinatorStore``) stays the embedded
default; use this store when the coordinator's state should live in the
cluster's ZooKeeper. A value must fit in a znode (1 MB by default).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from squall.connectors.common import BrokerUnavailable
from squall.transactional.store import CoordinatorStore, encode_value, txid_of

DEFAULT_ROOT = "/squall"

_DELETE = None  # a buffered deletion, in a transaction's buffer of key -> JSON bytes
_CONFLICTS = (NodeExistsError, NoNodeError, NotEmptyError, BadVersionError)  # the tree changed under a multi
_ROLLED_BACK = (RolledBackError, RuntimeInconsistency)
_REPLANS = 5


def _order(key: str) -> tuple:
    # SqliteCoordinatorStore's ORDER BY txid, key: keys without a txid (NULL) first
    txid = txid_of(key)
    return (0, 0, key) if txid is None else (1, txid, key)


def _valid_key(key: str) -> bool:
    levels = key.split("/")
    return bool(key) and "\0" not in key and all(level and level not in (".", "..") for level in levels)


class ZooKeeperCoordinatorStore(CoordinatorStore):
    """A coordinator store in ZooKeeper at ``hosts`` (``host:port[,host:port...]``), under ``root/topology_id``.

    ``timeout`` is how long to wait for the first connection; ``retries`` how many
    times an operation is tried while the connection is lost. ``session_timeout``
    is short because the store keeps no ephemeral nodes or watches (an expired
    session costs nothing) and because kazoo waits that long on a handshake:
    ZooKeeper drops one that arrives while it is still starting, and the client
    must try again within ``timeout``.
    """

    def __init__(
        self,
        hosts: str,
        root: str,
        topology_id: str,
        timeout: float = 10.0,
        retries: int = 10,
        session_timeout: float = 6.0,
    ) -> None:
        root = "/" + root.strip("/") if root.strip("/") else ""
        if not topology_id or not _valid_key(topology_id) or "/" in topology_id:
            raise ValueError(f"topology_id must be a non-empty znode name without '/', got {topology_id!r}")
        if root and not _valid_key(root[1:]):
            raise ValueError(f"root must be a ZooKeeper path like /squall, got {root!r}")
        self.hosts, self.root, self.topology_id = hosts, root or "/", topology_id
        self.base = f"{root}/{topology_id}"
        # Reconnect for as long as the store is open; each operation is retried `retries` times with backoff,
        # so a brief loss of the server is waited out rather than failing the run.
        self._client = KazooClient(
            hosts=hosts,
            timeout=session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
            command_retry=KazooRetry(max_tries=retries, delay=0.1, backoff=2, max_delay=2.0),
        )
        try:
            self._client.start(timeout=timeout)  # stops and closes the client itself on a timeout
        except KazooTimeoutError as exc:
            raise BrokerUnavailable(
                f"cannot reach ZooKeeper at {hosts}: no connection within {timeout:g}s ({exc})"
            ) from None
        self._local = threading.local()  # each thread's transaction buffer (None outside one)

    @classmethod
    def from_url(cls, url: str, topology_id: str, **kwargs: Any) -> ZooKeeperCoordinatorStore:
        """A store for ``zookeeper://host:port[,host:port]/root/path``; the root defaults to ``/squall``."""
        parts = urlsplit(url)
        if parts.scheme != "zookeeper" or not parts.netloc:
            raise ValueError(f"expected zookeeper://host:port[,host:port]/root, got {url!r}")
        return cls(parts.netloc, parts.path.rstrip("/") or DEFAULT_ROOT, topology_id, **kwargs)

    # -- paths -----------------------------------------------------------------
    def _path(self, key: str) -> str:
        if not _valid_key(key):
            raise ValueError(f"coordinator key {key!r} is not a valid ZooKeeper path below {self.base}")
        return f"{self.base}/{key}"

    @property
    def _buffer(self) -> dict[str, bytes | None] | None:
        return getattr(self._local, "buffer", None)

    # -- reads (a transaction's own writes included) ---------------------------
    def get(self, key: str, default: Any = None) -> Any:
        buffer = self._buffer
        if buffer is not None and key in buffer:
            data = buffer[key]
        else:
            try:
                data, _ = self._client.retry(self._client.get, self._path(key))
            except NoNodeError:
                data = None
        return default if not data else json.loads(data)  # b"": a level in between, not a key

    def keys(self, prefix: str = "") -> list[str]:
        found = set(self._stored_keys(prefix))
        for key, data in (self._buffer or {}).items():
            if key.startswith(prefix):
                (found.discard if data is _DELETE else found.add)(key)
        return sorted(found, key=_order)

    def _stored_keys(self, prefix: str) -> list[str]:
        # Start at the deepest level the prefix names in full ("meta/" -> meta), then take the whole subtree.
        head, _, tail = prefix.rpartition("/")
        if head and not _valid_key(head):
            return []
        found: list[str] = []

        def walk(level: str, first: bool) -> None:
            try:
                children = self._client.retry(self._client.get_children, f"{self.base}/{level}".rstrip("/"))
            except NoNodeError:
                return
            for child in children:
                if first and not child.startswith(tail):
                    continue
                key = f"{level}/{child}" if level else child
                stat = self._client.retry(self._client.exists, f"{self.base}/{key}")
                if stat is None:
                    continue  # deleted meanwhile
                if stat.dataLength:
                    found.append(key)
                if stat.numChildren:
                    walk(key, False)

        walk(head, True)
        return found

    # -- writes ------------------------------------------------------------------
    def put(self, key: str, value: Any) -> None:
        self._path(key)  # a bad key fails here, not at commit
        self._write({key: encode_value(key, value).encode()})

    def delete_below(self, prefix: str, txid: int) -> None:
        doomed = [key for key in self.keys(prefix) if (n := txid_of(key)) is not None and n < txid]
        self._write(dict.fromkeys(doomed, _DELETE))

    def _write(self, changes: dict[str, bytes | None]) -> None:
        buffer = self._buffer
        if buffer is not None:
            buffer.update(changes)  # the same key twice: the last write wins
        else:
            self._commit(changes)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Writes inside are applied together as one ZooKeeper multi at the end; an exception discards them.

        A nested ``transaction()`` joins the outer one. Reads inside see the buffered writes.
        """
        if self._buffer is not None:
            yield
            return
        self._local.buffer = {}
        try:
            yield
            changes = self._local.buffer
        finally:
            self._local.buffer = None
        self._commit(changes)

    def _commit(self, changes: dict[str, bytes | None]) -> None:
        if not changes:
            return
        # A lost connection retries the whole plan-and-commit: it is idempotent, as the plan is made from
        # what ZooKeeper holds then (a multi that did land turns into set_data of the same values).
        self._client.retry(self._commit_once, changes)

    def _commit_once(self, changes: dict[str, bytes | None]) -> None:
        for _ in range(_REPLANS):
            # the empty levels above a new node are not keys, so they are made outside the multi
            for parent in {self._path(k).rpartition("/")[0] for k, data in changes.items() if data is not _DELETE}:
                self._client.ensure_path(parent)
            multi = self._client.transaction()
            for key, data in changes.items():
                path = self._path(key)
                stat = self._client.exists(path)
                if data is not _DELETE:
                    if stat is None:
                        multi.create(path, data)
                    else:
                        multi.set_data(path, data)
                elif stat is not None:
                    # a key that is also a level above other keys keeps its node, emptied
                    below = stat.numChildren or any(k.startswith(key + "/") and changes[k] for k in changes)
                    if below:
                        multi.set_data(path, b"")
                    else:
                        multi.delete(path)
            if not multi.operations:
                return
            # the op that failed carries its error; the others come back rolled back
            errors = [r for r in multi.commit() if isinstance(r, Exception) and not isinstance(r, _ROLLED_BACK)]
            if not errors:
                return
            if not isinstance(errors[0], _CONFLICTS):
                raise errors[0]
        raise RuntimeError(f"ZooKeeper multi under {self.base} kept conflicting with concurrent changes: {errors}")

    def close(self) -> None:
        self._client.stop()
        self._client.close()

    def __enter__(self) -> ZooKeeperCoordinatorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
