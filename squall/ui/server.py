"""The driver's web UI, REST API and Prometheus metrics, on Starlette and uvicorn, in a thread of their own.

Read-only endpoints are open; the mutating ones (kill, deactivate, activate)
need the token the server writes, at start, to a file only its user can read,
named by the host it binds and its port (``token_path``): ``Authorization:
Bearer <token>``. The server binds to 127.0.0.1 unless told otherwise, and announces its URL to this user's
``squall list`` (``discovery``).

A thread samples every topology's counters once a second (and each request samples again), keeping Storm's
windows and the charts' points (``history``).

    GET  /                                          the page
    GET  /api/v1/topology/summary                   every topology's summary
    GET  /api/v1/topology/{name}                    a topology: spouts, bolts, windows, streams, workers, ...
    GET  /api/v1/topology/{name}/component/{id}     a component, its windows, streams and tasks
    GET  /api/v1/topology/{name}/series             the charts' points, the last 10 minutes
    GET  /api/v1/topology/{name}/events             server-sent events of the topology, for the page
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
import time
from collections.abc import Callable
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
from squall.ui import discovery
from squall.ui.figures import (
    chart_gauges,
    chart_point,
    component_detail,
    cumulative_figures,
    system_components,
    topology_detail,
    topology_summary,
)
from squall.ui.history import RunHistory
from squall.ui.metrics import exposition

log = logging.getLogger("squall.ui")

EVENT_SECS = 1.0  # the page's figures are pushed this often
SAMPLE_SECS = 1.0  # the windows and charts sample the counters this often
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
    in use, rather than failing. ``clock`` gives the time the windows and charts are kept on."""

    def __init__(
        self,
        cluster: Any,
        host: str = "127.0.0.1",
        port: int = 8080,
        fallback: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self._histories: dict[str, tuple[Any, RunHistory]] = {}  # name -> (its run, its history)
        self._histories_lock = threading.Lock()
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
        self._stop_sampling = threading.Event()
        self._sampler = threading.Thread(target=self._sample_every, name="squall-ui-sampler", daemon=True)
        self._sampler.start()
        self.announcement = discovery.announce(self.url, self.host, self.port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _serve(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._socket]))

    def close(self) -> None:
        self._closing = True  # ends the event streams
        discovery.withdraw(self.announcement)
        self._stop_sampling.set()
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sampler.join(timeout=10)
        self._socket.close()
        tokens.forget_token(self.token_file, self.token)

    # -- windows and charts ------------------------------------------------------------
    def _sample_every(self) -> None:
        while not self._stop_sampling.wait(SAMPLE_SECS):
            for name, (run, _) in self._runs().items():
                try:
                    self.history(name, run)
                except Exception:  # a run being torn down: its next sample, if any, is whole
                    log.debug("sampling %s failed", name, exc_info=True)

    def history(self, name: str, run: Any) -> RunHistory:
        """``run``'s history, sampled now: a run submitted again under the same name starts a new one."""
        with self._histories_lock:
            held = self._histories.get(name)
            if held is None or held[0] is not run:
                held = self._histories[name] = (run, RunHistory(chart_point))
            for gone in [n for n in self._histories if n not in self.cluster.runs]:
                del self._histories[gone]
        history = held[1]
        history.sample(self.clock(), cumulative_figures(run), chart_gauges(run))
        return history

    def windows(self, name: str, run: Any) -> dict[str, Any]:
        return self.history(name, run).windows(self.clock())

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
            detail = await run_in_threadpool(lambda: topology_detail(name, run, failed, self.windows(name, run)))
            return JSONResponse(detail)

        async def component(request: Request) -> Response:
            name, cid = request.path_params["name"], request.path_params["component"]
            run, _ = self._run(name)
            if cid not in run.topology.components and cid not in system_components(run):
                raise _NotFound(f"topology {name!r} has no component {cid!r}")
            detail = await run_in_threadpool(lambda: component_detail(name, run, cid, self.windows(name, run)))
            return JSONResponse(detail)

        async def series(request: Request) -> Response:
            name = request.path_params["name"]
            run, _ = self._run(name)
            return JSONResponse({"topology": name, "points": self.history(name, run).points_after()})

        async def events(request: Request) -> Response:
            """Server-sent events: a topology's figures every EVENT_SECS, for the page, each with the charts'
            points it has not sent before (``series``)."""
            name = request.path_params["name"]
            self._run(name)

            def figures(run: Any, failed: bool, after: float | None) -> dict[str, Any]:
                history = self.history(name, run)
                detail = topology_detail(name, run, failed, history.windows(self.clock()))
                detail["series"] = history.points_after(after)
                return detail

            async def stream():
                after = None
                while not self._closing and not await request.is_disconnected():
                    found = self._runs().get(name)
                    if found is None:
                        yield "event: gone\ndata: {}\n\n"
                        return
                    detail = await run_in_threadpool(figures, *found, after)
                    if detail["series"]:
                        after = detail["series"][-1]["time"]
                    yield f"data: {json.dumps(detail)}\n\n"
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
                Route("/api/v1/topology/{name}/series", series),
                Route("/api/v1/topology/{name}/{action}", control, methods=["POST"]),
                Route("/metrics", metrics),
            ],
            exception_handlers={_NotFound: not_found},
        )


class _NotFound(LookupError):
    pass
