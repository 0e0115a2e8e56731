"""The studio's FastAPI app: a static page + a small JSON API over one ``Session``.

Security bars: the CLI binds 127.0.0.1 by default and the app only answers requests whose Host header is
one it serves (DNS-rebinding guard); request bodies are capped (413); every JSON body is parsed by us, so
malformed JSON is a 400 with a one-line message; user errors are 400/404/409 ``{"error": ...}``; anything
unexpected is a 500 ``{"error": "internal error ..."}`` without a traceback (logged server-side). Paths
from requests are plain names resolved inside the workspace (artifacts) or the results folders (pages).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from geosteer.errors import GeosteerError
from geosteer.studio.session import Session

STATIC = Path(__file__).resolve().parent / "static"
MAX_BODY = 64 * 1024
log = logging.getLogger("geosteer.studio")


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class BodyLimit:
    """ASGI middleware: refuse bodies over ``limit`` bytes (by Content-Length, and while streaming)."""

    def __init__(self, app, limit: int = MAX_BODY):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        cl = headers.get(b"content-length")
        too_big = JSONResponse({"error": f"request body too large (limit {self.limit} bytes)"}, 413)
        try:
            if cl is not None and int(cl) > self.limit:
                return await too_big(scope, receive, send)
        except ValueError:
            return await JSONResponse({"error": "bad Content-Length header"}, 400)(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise BadRequest(413, f"request body too large (limit {self.limit} bytes)")
            return msg

        return await self.app(scope, limited, send)


async def read_json(request: Request) -> dict:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        msg = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise BadRequest(400, f"malformed JSON body: {msg}") from None
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
        raise ValueError(f"{name} must be an integer (got {v!r})") from None


def create_app(session: Session, results_dirs: list[Path] | None = None,
               allowed_hosts: list[str] | None = None,
               max_body: int = MAX_BODY) -> FastAPI:
    """The app for ``session``; ``results_dirs`` are read-only roots for the study pages."""
    from geosteer.studio.pages import ResultPages

    app = FastAPI(title="geosteer studio", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.session = session
    pages = ResultPages([Path(p) for p in (results_dirs or [])] + [session.workspace / "results"])
    hosts = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if hosts is not None:
            host = (request.headers.get("host") or "").lower()
            name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
            if name not in hosts:
                return JSONResponse({"error": f"host '{host}' not allowed"}, 421)
        try:
            return await call_next(request)
        except BadRequest as e:
            return JSONResponse({"error": str(e)}, e.status)

    app.add_middleware(BodyLimit, limit=max_body)

    @app.exception_handler(BadRequest)
    async def _bad(request, e: BadRequest):
        return JSONResponse({"error": str(e)}, e.status)

    @app.exception_handler(FileExistsError)
    async def _exists(request, e):
        return JSONResponse({"error": str(e)}, 409)

    @app.exception_handler(GeosteerError)
    async def _user(request, e):
        return JSONResponse({"error": str(e)}, 400)

    @app.exception_handler(ValueError)
    async def _value(request, e):
        return JSONResponse({"error": str(e)}, 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, e):
        return JSONResponse({"error": str(e.detail)}, e.status_code)

    @app.exception_handler(Exception)
    async def _internal(request, e):
        log.exception("studio: unexpected error on %s", request.url.path)
        return JSONResponse({"error": f"internal error ({type(e).__name__}); see the server log"}, 500)

    # ---- static ------------------------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse)
    def index():
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))

    @app.get("/static/{name}")
    def static(name: str):
        if name == "plotly.js":
            from plotly.offline import get_plotlyjs

            return Response(get_plotlyjs(), media_type="text/javascript",
                            headers={"Cache-Control": "max-age=86400"})
        files = {p.name: p for p in STATIC.iterdir() if p.is_file()}
        if name not in files:
            return JSONResponse({"error": f"no static file '{name}'"}, 404)
        kind = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}.get(files[name].suffix,
                                                                                     "text/plain")
        return Response(files[name].read_bytes(), media_type=kind)

    # ---- API -----------------------------------------------------------------------------------------------
    @app.get("/api/info")
    def info():
        d = session.info()
        d["results"] = pages.list()
        return d

    @app.get("/api/boot")
    def boot(top: str | None = None):
        """Everything the page's first paint needs in one request (fetched while plotly.js loads): the
        info, the norm ranking and the top surface's figures without token dots (no model pass)."""
        d = info()
        rows = session.rank("norm", None, _int(top, "top", 30), None)
        first = rows[0] if rows else None
        surf = session.surface(first["layer"], first["head"], first["dim"], None, 48, False) if first else None
        return {"info": d, "rank": {"by": "norm", "rows": rows}, "surface": surf}

    @app.get("/api/rank")
    def rank(by: str = "norm", layer: str | None = None, top: str | None = None, prompt: str | None = None):
        lay = None if layer in (None, "", "all") else _int(layer, "layer")
        return {"by": by, "rows": session.rank(by, lay, _int(top, "top", 20), prompt)}

    @app.get("/api/surface")
    def surface(layer: str | None = None, head: str | None = None, dim: str | None = None,
                prompt: str | None = None, n: str | None = None, tokens: str = "1"):
        if tokens not in ("0", "1"):
            raise ValueError(f"tokens must be 0 or 1 (got {tokens!r})")
        return session.surface(_int(layer, "layer"), _int(head, "head"), _int(dim, "dim"), prompt,
                               _int(n, "n", 48), tokens == "1")

    @app.post("/api/effect")
    async def effect(request: Request):
        body = await read_json(request)
        _only(body, {"prompt", "max_new_tokens", "reference"})
        return await _run(session.effect, body.get("prompt"), body.get("max_new_tokens", 20),
                          body.get("reference", "loaded"))

    @app.post("/api/edit")
    async def edit(request: Request):
        body = await read_json(request)
        effect_opts = body.pop("effect", None)
        t0 = time.perf_counter()
        spec = await _run(session.edit, body)
        out = {"edit": spec.describe(), "version": session.version}
        if effect_opts is not None:
            if not isinstance(effect_opts, dict):
                raise ValueError("effect must be an object {prompt, max_new_tokens, reference}")
            _only(effect_opts, {"prompt", "max_new_tokens", "reference"})
            out["effect"] = await _run(session.effect, effect_opts.get("prompt"),
                                       effect_opts.get("max_new_tokens", 20),
                                       effect_opts.get("reference", "loaded"))
        out["seconds"] = round(time.perf_counter() - t0, 4)
        return out

    @app.post("/api/undo")
    async def undo(request: Request):
        await read_json(request)
        undone = await _run(session.undo)
        return {"undone": undone, "version": session.version}

    @app.post("/api/save")
    async def save(request: Request):
        body = await read_json(request)
        _only(body, {"name", "overwrite"})
        overwrite = body.get("overwrite", False)
        if not isinstance(overwrite, bool):
            raise ValueError("overwrite must be true or false")
        return await _run(session.save, body.get("name"), overwrite)

    @app.post("/api/load")
    async def load(request: Request):
        body = await read_json(request)
        _only(body, {"name"})
        return await _run(session.load, body.get("name"))

    @app.get("/results", response_class=HTMLResponse)
    def results_index():
        return HTMLResponse(pages.index_html())

    @app.get("/results/{rel:path}", response_class=HTMLResponse)
    def result_page(rel: str):
        return HTMLResponse(pages.page_html(rel))

    return app


def _only(body: dict, allowed: set) -> None:
    extra = set(body) - allowed
    if extra:
        raise ValueError(f"unknown field(s) {sorted(extra)}; valid: {sorted(allowed)}")


async def _run(fn, *args):
    """Run blocking model work in the thread pool (the session's lock serialises model access)."""
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(fn, *args)


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
