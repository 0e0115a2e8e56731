"""The studio's FastAPI app: a static page + a small JSON API over one ``Session``.

Security bars: the CLI binds 127.0.0.1 by default; :class:`geosteer.studio.security.HostCheck` (Starlette's
``TrustedHostMiddleware``) answers only Host headers the studio serves (DNS-rebinding guard, 421);
:class:`geosteer.studio.security.Guard` refuses state-changing requests that are not JSON,
come from another site/origin or lack the per-process token (CSRF: 403), caps bodies (413, also chunked)
and sets nosniff/frame/CSP headers. Every JSON body is parsed by us (``read_json``: malformed JSON, NaN,
Infinity and deep nesting are a 400 with a one-line message) and then validated by its pydantic model
(:mod:`geosteer.studio.bodies`: strict types, unknown fields refused, also a one-line 400); user errors
are 400/404/409 ``{"error": ...}``, a full generation queue is 503 with Retry-After; anything unexpected
is a 500 ``{"error": "internal error ..."}`` without a traceback (logged
server-side). Paths from requests are plain names resolved inside the workspace (artifacts) or the results
folders (pages). Requests that change state are validated whole before anything changes.

Concurrency: reads (info, norm ranking, figures, static files, pages) only take the session's short state
lock; model passes run on the session's worker thread (:mod:`geosteer.studio.worker`) and are awaited as
futures, so waiting generations hold no thread of the server's pool.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from html import escape
from pathlib import Path

try:
    from anyio import CapacityLimiter, to_thread
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, Response
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ModuleNotFoundError as _e:  # without the optional extra: one line naming it
    from geosteer.extras import missing

    raise missing(_e) from None

from geosteer.errors import GeosteerError
from geosteer.studio.bodies import LoadBody, SaveBody, UndoBody, parse
from geosteer.studio.security import Guard, HostCheck, new_nonce, new_token, page_csp
from geosteer.studio.session import Session
from geosteer.studio.worker import QueueFull

STATIC = Path(__file__).resolve().parent / "static"
MAX_BODY = 64 * 1024
log = logging.getLogger("geosteer.studio")


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _no_constant(name: str):
    raise BadRequest(400, f"malformed JSON body: {name} is not a number JSON allows")


async def read_json(request: Request) -> dict:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        msg = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise BadRequest(400, f"malformed JSON body: {msg}") from None
    except RecursionError:
        raise BadRequest(400, "malformed JSON body: nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest(400, "JSON body must be an object")
    return body


def _int(v, name: str, default=None):
    if v is None or v == "":
        if default is None:
            raise ValueError(f"{name} is required")
        return default
    if isinstance(v, bool):
        raise ValueError(f"{name} must be an integer (got {v!r})")
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer (got {str(v)[:40]!r})") from None


def one_line(e: BaseException) -> str:
    """The first line of an error message, at most 300 characters (responses never carry tracebacks)."""
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def create_app(session: Session, results_dirs: list[Path] | None = None,
               allowed_hosts: list[str] | None = None,
               max_body: int = MAX_BODY) -> FastAPI:
    """The app for ``session``; ``results_dirs`` are read-only roots for the study pages.

    ``app.state.token`` is the CSRF token every POST must send as ``X-Geosteer-Token`` (the page has it).
    """
    from geosteer.studio.pages import ResultPages

    app = FastAPI(title="geosteer studio", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.session = session
    app.state.token = token = new_token()
    pages = ResultPages([Path(p) for p in (results_dirs or [])] + [session.workspace / "results"])
    app.add_middleware(Guard, token=token, limit=max_body)
    if allowed_hosts is not None:  # added last = runs first: the Host check before anything else
        app.add_middleware(HostCheck, hosts=sorted({h.lower() for h in allowed_hosts}))
    disk = CapacityLimiter(2)  # saves/loads wait here as coroutines, not in the shared thread pool

    def err(status: int, e: BaseException | str, headers: dict | None = None) -> JSONResponse:
        msg = e if isinstance(e, str) else one_line(e)
        return JSONResponse({"error": msg}, status, headers=headers)

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
        return err(400, e)

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
        log.exception("studio: unexpected error on %s", request.url.path)
        return err(500, f"internal error ({type(e).__name__}); see the server log")

    def html_page(html: str) -> HTMLResponse:
        nonce = new_nonce()
        html = html.replace("<script", f"<script nonce=\"{nonce}\"")
        return HTMLResponse(html, headers={"Content-Security-Policy": page_csp(nonce),
                                           "Cache-Control": "no-store"})

    # ---- static ------------------------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse)
    def index():
        html = (STATIC / "index.html").read_text(encoding="utf-8")
        return html_page(html.replace("{{token}}", escape(token, quote=True)))

    @app.get("/static/{name}")
    def static(name: str):
        if name == "plotly.js":
            from plotly.offline import get_plotlyjs

            return Response(get_plotlyjs(), media_type="text/javascript",
                            headers={"Cache-Control": "max-age=86400"})
        files = {p.name: p for p in STATIC.iterdir() if p.is_file() and p.suffix in (".js", ".css")}
        if name not in files:
            return err(404, f"no static file '{name[:100]}'")
        kind = {".js": "text/javascript", ".css": "text/css"}[files[name].suffix]
        return Response(files[name].read_bytes(), media_type=kind)

    # ---- API: reads (never wait for the model unless they need a pass, and then before generations) ----
    @app.get("/api/info")
    def info():
        d = session.info()
        d["results"] = pages.list()
        return d

    @app.get("/api/boot")
    def boot(top: str | None = None):
        """Everything the page's first paint needs in one request (fetched while plotly.js loads): the
        info, the norm ranking and the top surface's figures without token dots (no model pass), and the
        CSRF token (readable by the page only: no other origin can read this answer)."""
        d = info()
        rows = session.rank("norm", None, _int(top, "top", 30), None)
        first = rows[0] if rows else None
        surf = session.surface(first["layer"], first["head"], first["dim"], None, 48, False) if first else None
        return {"info": d, "rank": {"by": "norm", "rows": rows}, "surface": surf, "token": token}

    @app.get("/api/rank")
    async def rank(by: str = "norm", layer: str | None = None, top: str | None = None,
                   prompt: str | None = None):
        lay = None if layer in (None, "", "all") else _int(layer, "layer")
        n = _int(top, "top", 20)
        session.check_rank(by, n)
        if by == "sensitivity":
            await asyncio.wrap_future(session.submit_sensitivity(prompt))  # cached for the call below
        return {"by": by, "rows": await run_in_threadpool(session.rank, by, lay, n, prompt)}

    @app.get("/api/surface")
    async def surface(layer: str | None = None, head: str | None = None, dim: str | None = None,
                      prompt: str | None = None, n: str | None = None, tokens: str = "1"):
        if tokens not in ("0", "1"):
            raise ValueError(f"tokens must be 0 or 1 (got {tokens[:20]!r})")
        args = (_int(layer, "layer"), _int(head, "head"), _int(dim, "dim"), prompt, _int(n, "n", 48))
        if tokens == "1":
            await asyncio.wrap_future(session.submit_qk(prompt))  # cached for the call below
        return await run_in_threadpool(session.surface, *args, tokens == "1")

    # ---- API: changes (validated whole before anything changes) -------------------------------------------
    @app.post("/api/effect")
    async def effect(request: Request):
        body = await read_json(request)
        return await asyncio.wrap_future(await run_in_threadpool(session.submit_effect, body))

    @app.post("/api/edit")
    async def edit(request: Request):
        body = await read_json(request)
        effect_opts = body.pop("effect", None)
        t0 = time.perf_counter()
        spec, version, fut = await run_in_threadpool(session.edit, body, effect_opts)
        out = {"edit": spec.describe(), "version": version}
        if fut is not None:
            out["effect"] = await asyncio.wrap_future(fut)
        out["seconds"] = round(time.perf_counter() - t0, 4)
        return out

    @app.post("/api/undo")
    async def undo(request: Request):
        parse(UndoBody, await read_json(request), "JSON body must be an object")
        undone = await run_in_threadpool(session.undo)
        return {"undone": undone, "version": session.version}

    @app.post("/api/save")
    async def save(request: Request):
        body = parse(SaveBody, await read_json(request), "JSON body must be an object")
        return await to_thread.run_sync(session.save, body.name, body.overwrite, limiter=disk)

    @app.post("/api/load")
    async def load(request: Request):
        body = parse(LoadBody, await read_json(request), "JSON body must be an object")
        return await to_thread.run_sync(session.load, body.name, limiter=disk)

    @app.get("/results", response_class=HTMLResponse)
    def results_index():
        return html_page(pages.index_html())

    @app.get("/results/{rel:path}", response_class=HTMLResponse)
    def result_page(rel: str):
        return html_page(pages.page_html(rel))

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
