"""What ``squall list/kill/deactivate/activate`` say to a running ``squall run``: its REST API, in JSON.

The token for mutating requests is read from the file the server wrote for its own user
(``server.token_path``), found from the URL's host and port.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from squall.model.errors import SquallError
from squall.ui.server import token_path

DEFAULT_URL = "http://127.0.0.1:8080"


class UIClient:
    def __init__(self, url: str = DEFAULT_URL, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _token(self) -> str:
        path = token_path(urllib.parse.urlsplit(self.url).port or 80)
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
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
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
