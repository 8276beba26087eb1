"""Open a keyed state store by URL, so that a committer can be pointed at any of them by config.

* a path, or ``sqlite:///path``: ``SqliteKeyedState`` (the embedded default)
* ``redis://host:port/db``: ``RedisKeyedState``, the keys in one hash
* ``postgresql://user@host:port/db``: ``PostgresKeyedState``, the keys in one table

All three keep ``TransactionalValue`` or ``OpaqueValue`` semantics and apply a
batch's updates atomically.
"""

from __future__ import annotations

from squall.model.urls import redact
from squall.transactional.state import KeyedState, SqliteKeyedState


def open_keyed_state(url: str, name: str, opaque: bool = False) -> KeyedState:
    """The keyed state called ``name`` (a table, or a Redis hash) in the store at ``url``."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme in ("", "sqlite"):
        return SqliteKeyedState(url.removeprefix("sqlite://"), name, opaque=opaque)
    if scheme in ("redis", "rediss", "unix"):
        from squall.connectors.redis_log import RedisKeyedState

        return RedisKeyedState(url, name, opaque=opaque)
    if scheme in ("postgresql", "postgres"):
        from squall.connectors.postgres import PostgresKeyedState

        return PostgresKeyedState(url, name, opaque=opaque)
    raise ValueError(
        f"no keyed state store for {scheme}:// URLs (in {redact(url)!r}); use a path, redis:// or postgresql://"
    )
