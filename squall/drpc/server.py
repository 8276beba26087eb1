"""``squall drpc``: a DRPC server, with Storm's DRPC HTTP API for callers and an invocations API for topologies.

Callers (``DRPCClient``, curl):

* ``POST /drpc/<function>`` with the args as the body, ``GET /drpc/<function>/<args>`` or ``GET /drpc/<function>``
  (args ""): 200 with the result's text (the JSON list of result tuples, for a Trident topology), or 500 with
  ``{"error": ..., "type": "FAILED_REQUEST"}`` when the request failed or timed out.

Topologies (their drivers, through ``drpc.servers`` and ``drpc.port``):

* ``POST /invocations/fetch`` with ``{"functions": [...], "max": n, "wait_ms": ms}``: up to ``n`` waiting requests
  as ``[[id, function, args], ...]``, after waiting up to ``wait_ms`` for the first;
* ``POST /invocations/result/<id>`` with the result's text, ``POST /invocations/fail/<id>`` with why.

Every route needs the server's token (``Authorization: Bearer <token>``), which it writes at start to
``~/.squall/drpc/<host>_<port>.token``, readable by its user only. It binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from squall.drpc.core import DEFAULT_TIMEOUT_SECS, DRPC, DRPCExecutionException
from squall.security import tokens

log = logging.getLogger("squall.drpc")

SERVICE = "drpc"  # its tokens are under ~/.squall/drpc
DEFAULT_PORT = 3772  # Storm's drpc.port
MAX_FETCH_WAIT_SECS = 30.0
CALLER_THREADS = 256  # callers waiting at once; more wait for a thread
POLL_THREADS = 32  # topologies' long polls at once


class DRPCServer:
    """A DRPC server on ``host``:``port`` (0: any free port), in threads of this process, until ``close()``."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, timeout_secs: float = DEFAULT_TIMEOUT_SECS
    ) -> None:
        self.drpc = DRPC(timeout_secs)
        # Waiting callers and the topologies' long polls each hold a thread: pools of their own, so that callers
        # never leave a poll without one (asyncio's shared pool has a few threads a core)
        self._callers = ThreadPoolExecutor(CALLER_THREADS, thread_name_prefix="squall-drpc-call")
        self._polls = ThreadPoolExecutor(POLL_THREADS, thread_name_prefix="squall-drpc-fetch")
        self._socket = tokens.listen(host, port, "the DRPC server", "choose another (squall drpc --port N)")
        self.host, self.port = host, self._socket.getsockname()[1]
        self.token = secrets.token_urlsafe(32)
        self.token_file = tokens.token_path(SERVICE, self.host, self.port)
        tokens.write_token(self.token_file, self.token)
        config = uvicorn.Config(self._app(), log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="squall-drpc", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._socket]))

    def __enter__(self) -> DRPCServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Fails every request still waiting ("Server Shutting Down"), then stops serving."""
        self.drpc.close()
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
        self._callers.shutdown(wait=False, cancel_futures=True)
        self._polls.shutdown(wait=False, cancel_futures=True)
        tokens.forget_token(self.token_file, self.token)

    def _authorized(self, request: Request) -> bool:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), self.token.encode())

    def _app(self) -> Starlette:
        drpc = self.drpc

        def guarded(endpoint):
            async def call(request: Request) -> Response:
                if not self._authorized(request):
                    return JSONResponse({"error": "a valid token is needed (Authorization: Bearer ...)"}, 401)
                return await endpoint(request)

            return call

        async def execute(request: Request) -> Response:
            function = request.path_params["function"]
            if request.method == "POST":
                args = (await request.body()).decode("utf-8", errors="replace")
            else:
                args = request.path_params.get("args", "")
            try:
                result = await asyncio.get_running_loop().run_in_executor(self._callers, drpc.execute, function, args)
            except DRPCExecutionException as exc:
                return JSONResponse({"error": str(exc), "type": "FAILED_REQUEST"}, 500)
            return PlainTextResponse(result)

        async def fetch(request: Request) -> Response:
            try:
                asked = json.loads(await request.body())
                functions = [str(f) for f in asked["functions"]]
                most = int(asked.get("max", 16))
                wait = min(float(asked.get("wait_ms", 1000)) / 1000, MAX_FETCH_WAIT_SECS)
            except (ValueError, KeyError, TypeError) as exc:
                return JSONResponse(
                    {"error": f"a fetch takes {{'functions': [...], 'max': n, 'wait_ms': ms}}: {exc}"}, 400
                )
            taken = await asyncio.get_running_loop().run_in_executor(self._polls, drpc.fetch, functions, most, wait)
            return JSONResponse([list(t) for t in taken])

        async def result(request: Request) -> Response:
            drpc.result(request.path_params["id"], (await request.body()).decode("utf-8", errors="replace"))
            return JSONResponse({"ok": True})

        async def fail(request: Request) -> Response:
            why = (await request.body()).decode("utf-8", errors="replace") or "Request failed"
            drpc.fail(request.path_params["id"], why)
            return JSONResponse({"ok": True})

        return Starlette(
            routes=[
                Route("/drpc/{function}", guarded(execute), methods=["GET", "POST"]),
                Route("/drpc/{function}/{args:path}", guarded(execute), methods=["GET"]),
                Route("/invocations/fetch", guarded(fetch), methods=["POST"]),
                Route("/invocations/result/{id:int}", guarded(result), methods=["POST"]),
                Route("/invocations/fail/{id:int}", guarded(fail), methods=["POST"]),
            ]
        )
