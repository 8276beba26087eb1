"""Where a transactional topology's coordinator keeps its state: ``open_coordinator_store`` picks the store a
location names (SQLite, the embedded default, or ZooKeeper)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall.transactional.store import CoordinatorStore, SqliteCoordinatorStore


def open_coordinator_store(location: str, topology_id: str, conf: Mapping[str, Any] | None = None) -> CoordinatorStore:
    """The store at ``location`` (config ``squall.transactional.store``): a SQLite path or
    ``sqlite:///path`` (the embedded default), or ``zookeeper://[user:password@]host:port[,host:port]/root``,
    whose credentials and TLS settings may also come from ``conf``'s ``squall.zookeeper.*`` keys."""
    if location.startswith("zookeeper://"):
        from squall.transactional.zookeeper import ZooKeeperCoordinatorStore  # kazoo, imported when used

        return ZooKeeperCoordinatorStore.from_config(location, topology_id, conf or {})
    path = Path(location.removeprefix("sqlite://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteCoordinatorStore(path, topology_id)
