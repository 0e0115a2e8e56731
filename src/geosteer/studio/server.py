"""The studio's FastAPI app: a static page and a small JSON API over one ``Session``.

Requests pass :mod:`geosteer.studio.security` first; bodies are parsed by :func:`read_json` and validated
by :mod:`geosteer.studio.bodies`. User errors are 400/404/409 ``{"error": ...}``, a full queue 503 with
Retry-After, anything else a 500 without a traceback. Model passes run on the session's worker
(:mod:`geosteer.studio.worker`); reads only take the short state lock (docs/studio.md).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

try:
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ModuleNotFoundError as _e:  # without the optional extra: one line naming it
    from geosteer.extras import missing

    raise missing(_e) from None

from geosteer.errors import DiskFull, GeosteerError, disk_full_line, is_disk_full
from geosteer.studio import routes
from geosteer.studio.http import BadRequest, error_response, one_line, read_json  # noqa: F401 - re-exported
from geosteer.studio.security import Guard, HostCheck, new_token
from geosteer.studio.session import Session
from geosteer.studio.worker import QueueFull

STATIC = routes.STATIC
MAX_BODY = 64 * 1024
log = logging.getLogger("geosteer.studio")


def _add_error_handlers(app: FastAPI) -> None:
    """User errors 400/404/409 ``{"error": ...}``, a full queue 503 + Retry-After, a full disk 507 (one line;
    the atomic writers keep what was there), anything else a 500 without a traceback (logged)."""
    err = error_response

    @app.exception_handler(BadRequest)
    async def _bad(request, e: BadRequest):
        return err(e.status, e)

    @app.exception_handler(QueueFull)
    async def _full(request, e: QueueFull):
        return err(503, e, {"Retry-After": str(e.retry_after)})

    @app.exception_handler(FileExistsError)
    async def _exists(request, e):
        return err(409, e)

    @app.exception_handler(GeosteerError)
    async def _user(request, e):
        return err(507 if isinstance(e, DiskFull) else 400, e)

    @app.exception_handler(ValueError)  # includes UnicodeError
    async def _value(request, e):
        return err(400, e)

    @app.exception_handler(RequestValidationError)
    async def _validation(request, e):
        return err(400, "invalid request parameters")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, e):
        return err(e.status_code, str(e.detail))

    @app.exception_handler(Exception)
    async def _internal(request, e):
        if is_disk_full(e):  # a save on a full disk: what was there is kept (the writer is atomic)
            log.warning("studio: %s", disk_full_line(e))
            return err(507, disk_full_line(e))
        log.exception("studio: unexpected error on %s", request.url.path)
        return err(500, f"internal error ({type(e).__name__}); see the server log")


def create_app(session: Session, results_dirs: list[Path] | None = None,
               allowed_hosts: list[str] | None = None,
               max_body: int = MAX_BODY) -> FastAPI:
    """The app for ``session``; ``results_dirs`` are read-only roots for the study pages.

    ``app.state.token`` is the CSRF token every POST must send as ``X-Geosteer-Token`` (the page has it).
    The routes: :mod:`geosteer.studio.routes` (one router per noun).
    """
    from geosteer.studio.pages import ResultPages

    app = FastAPI(title="geosteer studio", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.session = session
    app.state.token = token = new_token()
    pages = ResultPages([Path(p) for p in (results_dirs or [])] + [session.workspace / "results"])
    app.add_middleware(Guard, token=token, limit=max_body)
    if allowed_hosts is not None:  # added last = runs first: the Host check before anything else
        app.add_middleware(HostCheck, hosts=sorted({h.lower() for h in allowed_hosts}))
    _add_error_handlers(app)
    for router in (routes.page_router(token), routes.surfaces_router(session, pages, token),
                   routes.edits_router(session), routes.artifacts_router(session), routes.results_router(pages)):
        app.include_router(router)
    return app


def serve_in_thread(app, host: str = "127.0.0.1"):
    """Start ``app`` with uvicorn on a free port in a daemon thread; returns ``(base_url, stop)``.

    For tests and notebooks. ``stop()`` asks the server to exit and joins the thread.
    """
    import socket
    import threading

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("studio server did not start")
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

    return f"http://{host}:{port}", stop
