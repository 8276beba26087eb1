"""How ``squall list`` finds the web UIs this user runs on this machine, whatever port each took.

Each UI server, at start, writes ``<host>_<port>.json`` (``{"url": ..., "pid": ...}``) to a directory only its
user can read: ``$XDG_RUNTIME_DIR/squall/ui`` when the session has a runtime directory, else ``~/.squall/ui``
(beside the tokens); it removes the file when it stops. A reader drops a file whose process is gone (a run
that was killed). The file holds no token: a client finds the token by the URL's host and port, as always.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from squall.security import tokens

RUNTIME_ENV = "XDG_RUNTIME_DIR"
SUFFIX = ".json"


def discovery_dir() -> Path:
    runtime = os.environ.get(RUNTIME_ENV)
    return Path(runtime) / "squall" / "ui" if runtime else tokens.token_dir("ui")


@dataclass(frozen=True)
class Announcement:
    """A running UI's discovery file and what it holds."""

    path: Path
    url: str
    pid: int

    @property
    def text(self) -> str:
        return json.dumps({"url": self.url, "pid": self.pid})


def announce(url: str, host: str, port: int) -> Announcement:
    """Write the discovery file of this process's UI at ``url`` (bound to ``host``:``port``), owner-only."""
    name = tokens.token_path("ui", host, port).stem  # the token's naming: <host>_<port>
    made = Announcement(discovery_dir() / f"{name}{SUFFIX}", url, os.getpid())
    tokens.write_token(made.path, made.text)
    return made


def withdraw(made: Announcement) -> None:
    """Remove the discovery file if it is still this one (another UI may have taken the port since)."""
    tokens.forget_token(made.path, made.text)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # some other user's process has that pid now
        return True
    return True


def running_uis() -> list[Announcement]:
    """The UIs this user runs on this machine, by URL; the files of processes that are gone are removed."""
    found = []
    directory = discovery_dir()
    for path in sorted(directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []:
        try:
            held = json.loads(path.read_text())
            made = Announcement(path, str(held["url"]), int(held["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not one of ours
        if _alive(made.pid):
            found.append(made)
        else:
            path.unlink(missing_ok=True)
    return sorted(found, key=lambda a: a.url)
