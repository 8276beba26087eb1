"""What every connector shares: connection URLs, the error for a broker that is down, retries."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from squall.model.errors import BrokerUnavailable, InvalidConfigError
from squall.model.urls import redact

__all__ = ["RETRY_DELAYS", "BrokerUnavailable", "redact", "url_from", "with_retries"]

log = logging.getLogger("squall.connectors")

T = TypeVar("T")

RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0)  # seconds between tries after a lost connection


def url_from(explicit: str | None, conf: Mapping[str, Any], key: str, component: str) -> str:
    """The connector's URL: the one it was given, else config ``key``; an error naming both if neither."""
    url = explicit or conf.get(key)
    if not url:
        raise InvalidConfigError(f"{component}: no URL given, and config {key!r} is not set")
    return url


def with_retries(what: str, call: Callable[[], T], lost: tuple[type[BaseException], ...]) -> T:
    """Run ``call``, retrying the ``lost``-connection errors with backoff; re-raise after the last try."""
    for delay in (*RETRY_DELAYS, None):
        try:
            return call()
        except lost as exc:
            if delay is None:
                raise
            log.warning("%s: %s; retrying in %.2fs", what, exc, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")
