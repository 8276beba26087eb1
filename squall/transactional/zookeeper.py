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

Security, for a ZooKeeper that is shared: with digest credentials (``auth_data``,
``zookeeper://user:password@host:port/root``, or config ``squall.zookeeper.auth``) the
client authenticates, and every znode the store creates carries the ACL
``digest:user:<hash>`` with all permissions (kazoo's ``make_digest_acl``): a client
without those credentials can neither read nor change them. TLS (``use_ssl``, ``ca``,
``certfile``, ``keyfile``, ``keyfile_password``, ``verify_certs``) is kazoo's, with PEM
files; ``open_zookeeper_store`` takes each from the URL's query or from config.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

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
from kazoo.security import ACL, make_digest_acl

from squall.model import config as cfg
from squall.model.errors import BrokerUnavailable, InvalidConfigError
from squall.model.urls import redact
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


AuthData = Sequence[tuple[str, str]]  # kazoo's: (scheme, credential) pairs, as ("digest", "user:password")

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
# The URL's query parameters, and the store's keyword each sets
_URL_OPTIONS = {
    "ssl": "use_ssl",
    "use_ssl": "use_ssl",
    "ca": "ca",
    "certfile": "certfile",
    "keyfile": "keyfile",
    "keyfile_password": "keyfile_password",
    "verify": "verify_certs",
    "verify_certs": "verify_certs",
}
_BOOLEAN_OPTIONS = ("use_ssl", "verify_certs")


def _digest_pair(auth_data: AuthData | str | None) -> tuple[str, str] | None:
    """``(user, password)`` of the digest credentials, if any."""
    if isinstance(auth_data, str):
        auth_data = [("digest", auth_data)]
    for scheme, credential in auth_data or ():
        if scheme == "digest":
            user, colon, password = credential.partition(":")
            if not colon or not user:
                raise ValueError("ZooKeeper digest credentials must be 'user:password'")
            return user, password
    return None


@dataclass(frozen=True)
class ZooKeeperLocation:
    """What a ``zookeeper://`` URL names: the host list (without userinfo), the root, and the connection's
    options (``auth_data``, TLS), ready for ``ZooKeeperCoordinatorStore(hosts, root, topology_id, **options)``.
    ``repr`` hides the password."""

    hosts: str
    root: str
    options: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        shown = {k: ("***" if k in ("auth_data", "keyfile_password") else v) for k, v in self.options.items()}
        return f"ZooKeeperLocation(hosts={self.hosts!r}, root={self.root!r}, options={shown!r})"


def parse_zookeeper_url(url: str) -> ZooKeeperLocation:
    """``zookeeper://[user:password@]host:port[,host:port...][/root][?ssl=true&ca=PATH&certfile=PATH&keyfile=PATH
    &keyfile_password=PW&verify=false]``. The user and password may be percent-encoded; the root defaults to
    ``/squall``."""
    scheme, sep, rest = url.partition("://")
    if scheme != "zookeeper" or not sep:
        raise ValueError(f"expected zookeeper://[user:password@]host:port[,host:port]/root, got {redact(url)!r}")
    rest, _, query = rest.partition("?")
    rest = rest.partition("#")[0]
    netloc, slash, path = rest.partition("/")
    options: dict[str, Any] = {}
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if not colon or not user:
            raise ValueError(f"zookeeper:// credentials must be user:password@, got {redact(url)!r}")
        options["auth_data"] = [("digest", f"{unquote(user)}:{unquote(password)}")]
    if not netloc:
        raise ValueError(f"expected zookeeper://[user:password@]host:port[,host:port]/root, got {redact(url)!r}")
    for name, value in parse_qsl(query, keep_blank_values=True):
        option = _URL_OPTIONS.get(name)
        if option is None:
            known = ", ".join(sorted(_URL_OPTIONS))
            raise ValueError(f"zookeeper:// URL: unknown parameter {name!r} (known: {known}) in {redact(url)!r}")
        if option in _BOOLEAN_OPTIONS:
            if value.lower() not in _TRUE + _FALSE:
                raise ValueError(f"zookeeper:// URL: {name} must be true or false, got {value!r}")
            options[option] = value.lower() in _TRUE
        else:
            options[option] = value
    return ZooKeeperLocation(netloc, ("/" + path).rstrip("/") if slash and path.strip("/") else DEFAULT_ROOT, options)


class ZooKeeperCoordinatorStore(CoordinatorStore):
    """A coordinator store in ZooKeeper at ``hosts`` (``host:port[,host:port...]``), under ``root/topology_id``.

    ``auth_data``: kazoo's ``[(scheme, credential)]``, or a ``"user:password"`` string for ZooKeeper's
    digest scheme. With digest credentials, the znodes the store creates carry ``acl`` (by default
    ``make_digest_acl(user, password, all=True)``: that user alone may read or change them); without,
    ZooKeeper's open ACL. ``use_ssl``, ``ca``, ``certfile``, ``keyfile``, ``keyfile_password`` and
    ``verify_certs`` are kazoo's TLS settings (PEM files).

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
        *,
        auth_data: AuthData | str | None = None,
        acl: Sequence[ACL] | None = None,
        use_ssl: bool = False,
        ca: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        keyfile_password: str | None = None,
        verify_certs: bool = True,
    ) -> None:
        root = "/" + root.strip("/") if root.strip("/") else ""
        if not topology_id or not _valid_key(topology_id) or "/" in topology_id:
            raise ValueError(f"topology_id must be a non-empty znode name without '/', got {topology_id!r}")
        if root and not _valid_key(root[1:]):
            raise ValueError(f"root must be a ZooKeeper path like /squall, got {root!r}")
        self.hosts, self.root, self.topology_id = hosts, root or "/", topology_id
        self.base = f"{root}/{topology_id}"
        if isinstance(auth_data, str):
            auth_data = [("digest", auth_data)]
        digest = _digest_pair(auth_data)
        if acl is None and digest is not None:
            acl = [make_digest_acl(*digest, all=True)]
        self.acl = list(acl) if acl else None
        # Reconnect for as long as the store is open; each operation is retried `retries` times with backoff,
        # so a brief loss of the server is waited out rather than failing the run.
        self._client = KazooClient(
            hosts=hosts,
            timeout=session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
            command_retry=KazooRetry(max_tries=retries, delay=0.1, backoff=2, max_delay=2.0),
            auth_data=list(auth_data) if auth_data else None,
            default_acl=self.acl,  # on every znode created: the levels above the keys, and the keys
            use_ssl=use_ssl,
            ca=ca,
            certfile=certfile,
            keyfile=keyfile,
            keyfile_password=keyfile_password,
            verify_certs=verify_certs,
        )
        try:
            self._client.start(timeout=timeout)  # stops and closes the client itself on a timeout
        except KazooTimeoutError as exc:
            tls = " over TLS" if use_ssl else ""
            raise BrokerUnavailable(
                f"cannot reach ZooKeeper at {hosts}{tls}: no connection within {timeout:g}s ({exc})"
            ) from None
        except Exception as exc:  # credentials refused (AuthFailedError), a TLS file that cannot be read...
            with contextlib.suppress(Exception):  # the error that matters is the one raised below
                self._client.stop()
                self._client.close()
            raise BrokerUnavailable(f"cannot connect to ZooKeeper at {hosts}: {type(exc).__name__}: {exc}") from None
        self._local = threading.local()  # each thread's transaction buffer (None outside one)

    @classmethod
    def from_url(cls, url: str, topology_id: str, **kwargs: Any) -> ZooKeeperCoordinatorStore:
        """A store for ``zookeeper://[user:password@]host:port[,host:port]/root/path[?ssl=true&ca=...]``
        (``parse_zookeeper_url``); the root defaults to ``/squall``. ``kwargs`` fill in what the URL leaves
        out."""
        location = parse_zookeeper_url(url)
        return cls(location.hosts, location.root, topology_id, **{**kwargs, **location.options})

    @classmethod
    def from_config(cls, url: str, topology_id: str, conf: Mapping[str, Any]) -> ZooKeeperCoordinatorStore:
        """A store for ``url`` with the ``squall.zookeeper.*`` config keys as defaults for what the URL leaves
        out (credentials, TLS)."""
        defaults: dict[str, Any] = {}
        for key, option in (
            (cfg.SQUALL_ZOOKEEPER_AUTH, "auth_data"),
            (cfg.SQUALL_ZOOKEEPER_SSL, "use_ssl"),
            (cfg.SQUALL_ZOOKEEPER_SSL_CA, "ca"),
            (cfg.SQUALL_ZOOKEEPER_SSL_CERTFILE, "certfile"),
            (cfg.SQUALL_ZOOKEEPER_SSL_KEYFILE, "keyfile"),
            (cfg.SQUALL_ZOOKEEPER_SSL_KEYFILE_PASSWORD, "keyfile_password"),
            (cfg.SQUALL_ZOOKEEPER_SSL_VERIFY, "verify_certs"),
        ):
            if conf.get(key) is not None:
                defaults[option] = conf[key]
        try:
            return cls.from_url(url, topology_id, **defaults)
        except ValueError as exc:
            raise InvalidConfigError(f"{cfg.SQUALL_TRANSACTIONAL_STORE}: {exc}") from None

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
