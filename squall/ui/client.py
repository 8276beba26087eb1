"""What ``squall list/kill/deactivate/activate`` say to a running ``squall run``: its REST API, in JSON.

The token for mutating requests is given (``token``, or the environment variable ``SQUALL_UI_TOKEN``), or read
from the file a squall run on this machine wrote for its own user (``server.token_path``), found by the URL's
host and port. A token file is used only for a URL that names the address its server binds: the same host (or,
for a loopback server, ``localhost``, ``127.0.0.1`` or ``::1``); a server bound to every address also answers
to this machine's own name. A URL for any other host gets no token from a file: this machine's tokens never
leave it.

With no URL, the commands find the web UIs this user runs on this machine, whatever port each took, through the
files they announce themselves in (``discovery``); with none found, they try ``DEFAULT_URL``.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from squall.model.errors import SquallError
from squall.security import tokens
from squall.ui import discovery
from squall.ui.server import SERVICE

DEFAULT_URL = "http://127.0.0.1:8080"
TOKEN_ENV = "SQUALL_UI_TOKEN"


def token_file_for(url: str) -> Path | None:
    """The token file a squall run on this machine wrote for the server at ``url``, if there is one."""
    parts = urllib.parse.urlsplit(url)
    return tokens.token_file(SERVICE, parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))


class UIClient:
    """``token``: the server's token for the mutating requests; by default ``$SQUALL_UI_TOKEN``, else the token
    file a squall run on this machine wrote for ``url``'s host and port."""

    def __init__(self, url: str = DEFAULT_URL, timeout: float = 30.0, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.given_token = token or os.environ.get(TOKEN_ENV) or None

    def _token(self) -> str:
        if self.given_token:
            return self.given_token
        path = token_file_for(self.url)
        if path is None:
            parts = urllib.parse.urlsplit(self.url)
            raise SquallError(
                f"no token for {self.url}: this machine's squall runs left no token file for "
                f"{parts.hostname}:{parts.port or 80} in {tokens.token_dir(SERVICE)}, and a token is only sent to "
                f"the host and port it was made for. For a squall run elsewhere, give its token: --token TOKEN, or "
                f"{TOKEN_ENV}=TOKEN (it is in ~/.squall/ui/<host>_<port>.token on the machine that runs it)"
            )
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise SquallError(
                f"no token for {self.url} in {path}: a mutating request needs the token squall run wrote there"
                f" (run it as the same user on the same machine): {exc.strerror}"
            ) from None

    def _request(self, method: str, path: str, token: str | None = None, timeout: float | None = None) -> Any:
        request = urllib.request.Request(f"{self.url}{path}", method=method)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with _opener.open(request, timeout=timeout or self.timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            try:
                why = json.load(exc).get("error", exc.reason)
            except (ValueError, AttributeError):
                why = exc.reason
            raise SquallError(f"{method} {self.url}{path}: {exc.code} {why}") from None
        except urllib.error.URLError as exc:
            raise SquallError(f"cannot reach squall at {self.url}: {exc.reason}") from None

    def topologies(self) -> list[dict[str, Any]]:
        return self._request("GET", "/api/v1/topology/summary")["topologies"]

    def topology(self, name: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/topology/{urllib.parse.quote(name, safe='')}")

    def control(self, name: str, action: str, wait: float | None = None) -> dict[str, Any]:
        path = f"/api/v1/topology/{urllib.parse.quote(name, safe='')}/{action}"
        if wait is not None:
            path += f"?wait={wait}"
        return self._request("POST", path, self._token(), timeout=self.timeout + (wait or 0))


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: the token goes to the URL given, never to one a server names."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def local_urls() -> list[str]:
    """The URLs of the web UIs this user runs on this machine (``discovery``); ``[DEFAULT_URL]`` if none."""
    return [found.url for found in discovery.running_uis()] or [DEFAULT_URL]


def url_serving(name: str) -> str:
    """The URL of this machine's web UI that serves topology ``name``: the one among ``local_urls``."""
    urls = local_urls()
    if urls == [DEFAULT_URL]:
        return DEFAULT_URL
    serving = []
    for url in urls:
        try:
            if any(t["name"] == name for t in UIClient(url, timeout=10).topologies()):
                serving.append(url)
        except SquallError:  # not answering: stopping, or not a squall run any more
            continue
    if len(serving) == 1:
        return serving[0]
    if not serving:
        raise SquallError(
            f"no squall run of this user on this machine serves a topology named {name!r}: {', '.join(urls)} do not"
        )
    raise SquallError(f"{', '.join(serving)} each serve a topology named {name!r}: choose one with --url")
