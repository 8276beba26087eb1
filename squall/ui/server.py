"""The driver's web UI, REST API and Prometheus metrics, on Starlette and uvicorn, in a thread of their own.

Read-only endpoints are open; the mutating ones (kill, deactivate, activate)
need the token the server writes, at start, to a file only its user can read,
named by the host it binds and its port (``token_path``): ``Authorization:
Bearer <token>``. The server binds to 127.0.0.1 unless told otherwise.

    GET  /                                          the page
    GET  /api/v1/topology/summary                   every topology's summary
    GET  /api/v1/topology/{name}                    a topology: spouts, bolts, graph, errors
    GET  /api/v1/topology/{name}/component/{id}     a component and its tasks
    POST /api/v1/topology/{name}/kill?wait=SECS     Storm's ``kill -w``
    POST /api/v1/topology/{name}/deactivate         pause the spouts
    POST /api/v1/topology/{name}/activate           resume them
    GET  /metrics                                   Prometheus' text format
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import secrets
import socket
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from squall.model.errors import SquallError
from squall.security import tokens
from squall.ui.figures import component_detail, system_components, topology_detail, topology_summary
from squall.ui.metrics import exposition

log = logging.getLogger("squall.ui")

EVENT_SECS = 1.0  # the page's figures are pushed this often
LOOPBACK = ("127.0.0.1", "localhost", "::1")
SERVICE = "ui"  # its tokens are under ~/.squall/ui
WILDCARD = tokens.WILDCARD


def token_path(host: str, port: int) -> Path:
    """Where the web UI bound to ``host``:``port`` keeps its token: ``~/.squall/ui/<host>_<port>.token``,
    owner-only (``squall.security.tokens``)."""
    return tokens.token_path(SERVICE, host, port)


def _bind(host: str, port: int) -> socket.socket:
    hint = "choose another (squall run --ui-port N, or squall.ui.port), or 0 for any free port"
    return tokens.listen(host, port, "the web UI", hint)


class UIServer:
    """Serves ``cluster``'s topologies. ``port`` 0 takes any free port; ``fallback`` takes one when ``port`` is
    in use, rather than failing."""

    def __init__(self, cluster: Any, host: str = "127.0.0.1", port: int = 8080, fallback: bool = False) -> None:
        self.cluster = cluster
        try:
            self._socket = _bind(host, port)
        except SquallError:
            if not fallback or port == 0:
                raise
            log.warning("port %d is in use; the web UI takes a free port", port)
            self._socket = _bind(host, 0)
        self.host, self.port = host, self._socket.getsockname()[1]
        self.token = secrets.token_urlsafe(32)
        self.token_file = token_path(self.host, self.port)
        tokens.write_token(self.token_file, self.token)
        self._closing = False
        config = uvicorn.Config(
            self._app(), log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="squall-ui", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _serve(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._socket]))

    def close(self) -> None:
        self._closing = True  # ends the event streams
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
        tokens.forget_token(self.token_file, self.token)

    # -- the app ---------------------------------------------------------------------
    def _runs(self) -> dict[str, tuple[Any, bool]]:
        """``{name: (run, failed)}`` of every topology the cluster runs (one a failure stopped is failed)."""
        return {name: (run, name in self.cluster.failures) for name, run in list(self.cluster.runs.items())}

    def _run(self, name: str) -> tuple[Any, bool]:
        found = self._runs().get(name)
        if found is None:
            raise _NotFound(f"no topology named {name!r}")
        return found

    def _authorized(self, request: Request) -> bool:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), self.token.encode())

    def _app(self) -> Starlette:
        async def page(request: Request) -> Response:
            return HTMLResponse(resources.files("squall.ui").joinpath("page.html").read_text())

        async def summary(request: Request) -> Response:
            runs = self._runs()
            return JSONResponse({"topologies": [topology_summary(n, r, f) for n, (r, f) in sorted(runs.items())]})

        async def topology(request: Request) -> Response:
            name = request.path_params["name"]
            run, failed = self._run(name)
            return JSONResponse(topology_detail(name, run, failed))

        async def component(request: Request) -> Response:
            name, cid = request.path_params["name"], request.path_params["component"]
            run, _ = self._run(name)
            if cid not in run.topology.components and cid not in system_components(run):
                raise _NotFound(f"topology {name!r} has no component {cid!r}")
            return JSONResponse(component_detail(name, run, cid))

        async def events(request: Request) -> Response:
            """Server-sent events: a topology's figures every EVENT_SECS, for the page."""
            name = request.path_params["name"]
            self._run(name)

            async def stream():
                while not self._closing and not await request.is_disconnected():
                    found = self._runs().get(name)
                    if found is None:
                        yield "event: gone\ndata: {}\n\n"
                        return
                    yield f"data: {json.dumps(topology_detail(name, *found))}\n\n"
                    await asyncio.sleep(EVENT_SECS)

            return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

        async def control(request: Request) -> Response:
            if not self._authorized(request):
                return JSONResponse({"error": "a valid token is needed (Authorization: Bearer ...)"}, status_code=401)
            name, action = request.path_params["name"], request.path_params["action"]
            self._run(name)
            if action == "kill":
                try:
                    wait = float(request.query_params.get("wait", "0"))
                except ValueError:
                    wait = -1.0
                if not (math.isfinite(wait) and wait >= 0):
                    return JSONResponse({"error": "wait must be a number of seconds, >= 0"}, status_code=400)
                try:
                    await run_in_threadpool(self.cluster.kill_topology, name, wait)
                except SquallError as exc:  # killed meanwhile, by another request or by squall run itself
                    raise _NotFound(str(exc)) from None
            elif action in ("activate", "deactivate"):
                try:
                    self.cluster.set_active(name, action == "activate")
                except SquallError as exc:
                    return JSONResponse({"error": str(exc)}, status_code=400)
            else:
                raise _NotFound(f"no action {action!r}; known: kill, deactivate, activate")
            return JSONResponse({"topology": name, "action": action, "status": "done"})

        async def metrics(request: Request) -> Response:
            body = await run_in_threadpool(exposition, self._runs)
            return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

        async def not_found(request: Request, exc: Exception) -> Response:
            return JSONResponse({"error": str(exc)}, status_code=404)

        middleware = []
        if self.host in LOOPBACK:  # a page elsewhere that rebinds its name to 127.0.0.1 gets nothing
            middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost", "[::1]"]))
        return Starlette(
            middleware=middleware,
            routes=[
                Route("/", page),
                Route("/api/v1/topology/summary", summary),
                Route("/api/v1/topology/{name}", topology),
                Route("/api/v1/topology/{name}/component/{component}", component),
                Route("/api/v1/topology/{name}/events", events),
                Route("/api/v1/topology/{name}/{action}", control, methods=["POST"]),
                Route("/metrics", metrics),
            ],
            exception_handlers={_NotFound: not_found},
        )


class _NotFound(LookupError):
    pass
