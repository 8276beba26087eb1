"""Connection URLs in messages: never show a password."""

from __future__ import annotations


def redact(url: str) -> str:
    """``url`` with its password masked: ``amqp://user:***@host/``.

    Everything between ``user:`` and the last ``@`` of the authority is masked,
    so a password with unescaped ``/``, ``#`` or ``@`` in it is hidden too.
    """
    if "@" not in url:
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:  # not a URL we can read: hide all that precedes the host
        return "***@" + url.rpartition("@")[2]
    userinfo, _, host = rest.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}:***@{host}" if colon else url
