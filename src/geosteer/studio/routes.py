"""The studio's routes, one ``APIRouter`` per noun: the page and its static files, the surfaces (reads that
may need a model pass), edits (validated whole before anything changes), artifacts (save/load in the
workspace) and the results pages. :func:`geosteer.studio.server.create_app` includes them in this order."""

from __future__ import annotations

import asyncio
import time
from html import escape
from pathlib import Path

from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from geosteer.studio.bodies import LoadBody, SaveBody, UndoBody, parse
from geosteer.studio.http import error_response, html_page, query_int, read_json
from geosteer.studio.session import Session

STATIC = Path(__file__).resolve().parent / "static"


def page_router(token: str) -> APIRouter:
    """``/`` (the page, with the CSRF token) and ``/static/{name}`` (its scripts and styles, plotly.js)."""
    router = APIRouter()

    @router.get("/", response_class=HTMLResponse)
    def index():
        html = (STATIC / "index.html").read_text(encoding="utf-8")
        return html_page(html.replace("{{token}}", escape(token, quote=True)))

    @router.get("/static/{name}")
    def static(name: str):
        if name == "plotly.js":
            from plotly.offline import get_plotlyjs

            return Response(get_plotlyjs(), media_type="text/javascript",
                            headers={"Cache-Control": "max-age=86400"})
        files = {p.name: p for p in STATIC.iterdir() if p.is_file() and p.suffix in (".js", ".css")}
        if name not in files:
            return error_response(404, f"no static file '{name[:100]}'")
        kind = {".js": "text/javascript", ".css": "text/css"}[files[name].suffix]
        return Response(files[name].read_bytes(), media_type=kind)

    return router


def surfaces_router(session: Session, pages, token: str) -> APIRouter:
    """Reads: ``/api/info``, ``/api/boot``, ``/api/rank``, ``/api/surface`` (never wait for the model unless
    they need a pass, and then before generations)."""
    router = APIRouter(prefix="/api")

    @router.get("/info")
    def info():
        d = session.info()
        d["results"] = pages.list()
        return d

    @router.get("/boot")
    def boot(top: str | None = None):
        """Everything the page's first paint needs in one request (fetched while plotly.js loads): the
        info, the norm ranking and the top surface's figures without token dots (no model pass), and the
        CSRF token (readable by the page only: no other origin can read this answer)."""
        d = info()
        rows = session.rank("norm", None, query_int(top, "top", 30), None)
        first = rows[0] if rows else None
        surf = session.surface(first["layer"], first["head"], first["dim"], None, 48, False) if first else None
        return {"info": d, "rank": {"by": "norm", "rows": rows}, "surface": surf, "token": token}

    @router.get("/rank")
    async def rank(by: str = "norm", layer: str | None = None, top: str | None = None,
                   prompt: str | None = None):
        lay = None if layer in (None, "", "all") else query_int(layer, "layer")
        n = query_int(top, "top", 20)
        session.check_rank(by, n)
        if by == "sensitivity":
            await asyncio.wrap_future(session.submit_sensitivity(prompt))  # cached for the call below
        return {"by": by, "rows": await run_in_threadpool(session.rank, by, lay, n, prompt)}

    @router.get("/surface")
    async def surface(layer: str | None = None, head: str | None = None, dim: str | None = None,
                      prompt: str | None = None, n: str | None = None, tokens: str = "1"):
        if tokens not in ("0", "1"):
            raise ValueError(f"tokens must be 0 or 1 (got {tokens[:20]!r})")
        args = (query_int(layer, "layer"), query_int(head, "head"), query_int(dim, "dim"), prompt,
                query_int(n, "n", 48))
        if tokens == "1":
            await asyncio.wrap_future(session.submit_qk(prompt))  # cached for the call below
        return await run_in_threadpool(session.surface, *args, tokens == "1")

    return router


def edits_router(session: Session) -> APIRouter:
    """Changes: ``/api/effect`` (what an edit would do), ``/api/edit``, ``/api/undo``."""
    router = APIRouter(prefix="/api")

    @router.post("/effect")
    async def effect(request: Request):
        body = await read_json(request)
        return await asyncio.wrap_future(await run_in_threadpool(session.submit_effect, body))

    @router.post("/edit")
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

    @router.post("/undo")
    async def undo(request: Request):
        parse(UndoBody, await read_json(request), "JSON body must be an object")
        undone = await run_in_threadpool(session.undo)
        return {"undone": undone, "version": session.version}

    return router


def artifacts_router(session: Session) -> APIRouter:
    """``/api/save`` and ``/api/load``: surfaces folders in the workspace (two at a time; the others wait as
    coroutines, not in the shared thread pool)."""
    router = APIRouter(prefix="/api")
    disk = CapacityLimiter(2)

    @router.post("/save")
    async def save(request: Request):
        body = parse(SaveBody, await read_json(request), "JSON body must be an object")
        return await to_thread.run_sync(session.save, body.name, body.overwrite, limiter=disk)

    @router.post("/load")
    async def load(request: Request):
        body = parse(LoadBody, await read_json(request), "JSON body must be an object")
        return await to_thread.run_sync(session.load, body.name, limiter=disk)

    return router


def results_router(pages) -> APIRouter:
    """``/results`` (the index) and ``/results/{rel}`` (one study page, read-only)."""
    router = APIRouter(prefix="/results")

    @router.get("", response_class=HTMLResponse)
    def results_index():
        return html_page(pages.index_html())

    @router.get("/{rel:path}", response_class=HTMLResponse)
    def result_page(rel: str):
        return html_page(pages.page_html(rel))

    return router
