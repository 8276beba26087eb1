"""Tokens of squall's local servers (the web UI, the DRPC server): where each keeps its token, and which token a
client may send to which address.

A server writes a fresh token at start to ``~/.squall/<service>/<host>_<port>.token``, readable by its user only,
named by the host it binds and its port, so that a client sends a token only to the address it was made for: the
same host (or, for a loopback server, ``localhost``, ``127.0.0.1`` or ``::1``); a server bound to every address
also answers to this machine's own names. A URL for any other host gets no token from a file.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from urllib.parse import quote

from squall.model.errors import SquallError

WILDCARD = "0.0.0.0"  # the name a server bound to every address (0.0.0.0, ::) keeps its token under
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def token_dir(service: str) -> Path:
    return Path.home() / ".squall" / service


def token_path(service: str, host: str, port: int) -> Path:
    """Where ``service``'s server bound to ``host``:``port`` keeps its token."""
    name = host.strip("[]").lower()
    if name in ("", "::", WILDCARD):
        name = WILDCARD
    return token_dir(service) / f"{quote(name, safe='.-')}_{port}.token"


def write_token(path: Path, token: str) -> None:
    """``token`` to ``path``, owner-only, replacing what was there at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    temporary = path.with_suffix(f".tmp-{os.getpid()}")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(token)
    os.replace(temporary, path)


def forget_token(path: Path, token: str) -> None:
    """Remove ``path`` if it still holds ``token`` (another server may have taken the port since)."""
    try:
        if path.read_text() == token:
            path.unlink()
    except OSError:
        pass


def _this_machine() -> set[str]:
    """This machine's own names and the addresses they resolve to here (``/etc/hosts``)."""
    names = {socket.gethostname().lower()}
    try:
        canonical, aliases, addresses = socket.gethostbyname_ex(socket.gethostname())
        names |= {canonical.lower(), *(a.lower() for a in aliases), *addresses}
    except OSError:
        pass
    return names


def token_hosts(host: str) -> list[str]:
    """The bound hosts whose token file may serve a URL naming ``host``, most specific first."""
    host = host.strip("[]").lower()
    hosts = [host]
    if host in LOOPBACK_NAMES:
        hosts += [name for name in LOOPBACK_NAMES if name != host]
    if host in LOOPBACK_NAMES or host in _this_machine():
        hosts.append(WILDCARD)  # a server bound to every address answers there too
    return hosts


def token_file(service: str, host: str, port: int) -> Path | None:
    """The token file a server of ``service`` on this machine wrote for ``host``:``port``, if there is one."""
    for name in token_hosts(host or ""):
        path = token_path(service, name, port)
        if path.is_file():
            return path
    return None


def listen(host: str, port: int, what: str, hint: str) -> socket.socket:
    """A listening socket on ``host``:``port``, or ``SquallError`` naming ``what`` and, for a port in use,
    ``hint``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, so that asyncio turns Nagle off on each connection: else every response waits ~40 ms
    # for the client's delayed ack between its headers and its body
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SquallError(f"{what} cannot listen on {host}:{port}: the port is in use; {hint}") from None
        raise SquallError(f"{what} cannot listen on {host}:{port}: {exc}") from None
    sock.listen(128)
    return sock
