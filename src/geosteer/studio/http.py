"""The studio's request and response helpers: JSON bodies parsed by us (one-line 400s), integer query
parameters, ``{"error": ...}`` answers and HTML pages with a per-response script nonce."""

from __future__ import annotations

import json

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse

from geosteer.studio.security import new_nonce, page_csp


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _no_constant(name: str):
    raise BadRequest(400, f"malformed JSON body: {name} is not a number JSON allows")


async def read_json(request: Request) -> dict:
    """The request's JSON object (``{}`` for an empty body); malformed JSON, NaN/Infinity, deep nesting or a
    non-object is a :class:`BadRequest` 400 with one line."""
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


def query_int(v, name: str, default=None):
    """An integer query parameter (``default`` when absent; required when ``default`` is None)."""
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


def error_response(status: int, e: BaseException | str, headers: dict | None = None) -> JSONResponse:
    """``{"error": <one line>}`` with ``status``."""
    msg = e if isinstance(e, str) else one_line(e)
    return JSONResponse({"error": msg}, status, headers=headers)


def html_page(html: str) -> HTMLResponse:
    """An HTML page whose scripts carry a fresh nonce that its Content-Security-Policy allows (not cached)."""
    nonce = new_nonce()
    html = html.replace("<script", f"<script nonce=\"{nonce}\"")
    return HTMLResponse(html, headers={"Content-Security-Policy": page_csp(nonce), "Cache-Control": "no-store"})
