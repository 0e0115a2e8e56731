"""The studio's request guard: two ASGI middlewares in front of every route (docs/studio.md, "Security model").

:class:`HostCheck` (Starlette's ``TrustedHostMiddleware``) answers only the names the studio serves (421,
DNS rebinding); :class:`Guard` then refuses cross-site state changes and model-running GETs
(:data:`COMPUTE_PATHS`) without JSON, the served origin and the per-process token (403), caps those GETs
per client (429), caps bodies, also chunked (413), and sets the nosniff/frame/referrer/CSP headers.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
from collections.abc import Sequence

from starlette.middleware.trustedhost import TrustedHostMiddleware

log = logging.getLogger("geosteer.studio")
TOKEN_HEADER = "x-geosteer-token"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
COMPUTE_PATHS = ("/api/rank", "/api/surface")  # GETs that can run the model: token + same origin, capped
PER_CLIENT = 8  # compute GETs in flight per client address
STRICT_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
           (b"referrer-policy", b"no-referrer"), (b"cross-origin-opener-policy", b"same-origin"),
           (b"cross-origin-resource-policy", b"same-origin")]


def new_token() -> str:
    return secrets.token_urlsafe(32)


def new_nonce() -> str:
    return secrets.token_urlsafe(18)


def page_csp(nonce: str) -> str:
    """CSP of the studio page and the result pages: scripts only from the app itself or inline with this
    response's nonce (no 'unsafe-eval': the page, plotly.js and its WebGL terrain run without it, checked
    in headless Chromium by tests/e2e/test_studio_browser.py); plotly.js needs inline styles (it writes
    its own <style>/style attributes) and data: images (the mode bar). Nothing may frame the page;
    fetches go to the app only."""
    return (f"default-src 'self'; script-src 'self' 'nonce-{nonce}'; "
            "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
            "connect-src 'self'; worker-src 'self' blob:; object-src 'none'; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'")


def _json(status: int, message: str, extra: list | None = None):
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"content-security-policy", STRICT_CSP.encode()), *HEADERS, *(extra or [])]
    return {"type": "http.response.start", "status": status, "headers": headers}, \
        {"type": "http.response.body", "body": body}


_HOST_OK = "geosteer.host_ok"  # scope flag: TrustedHostMiddleware let the request through


class HostCheck(TrustedHostMiddleware):
    """Starlette's ``TrustedHostMiddleware`` (no www-redirect) with the studio's answer to a refused Host:
    421 and the one-line JSON error with the security headers, instead of Starlette's plain-text 400.
    ``hosts``: the served names (``"127.0.0.1"``, ``"localhost"``, ``"[::1]"``, ...; ``"*"`` allows any)."""

    def __init__(self, app, *, hosts: Sequence[str]):
        async def passed(scope, receive, send):
            scope[_HOST_OK] = True
            await app(scope, receive, send)

        super().__init__(passed, allowed_hosts=list(hosts), www_redirect=False)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)
        refused = False

        async def send_or_refuse(msg):
            nonlocal refused
            if scope.get(_HOST_OK):
                return await send(msg)
            if not refused:  # Starlette's refusal (never reached the app): answer ours instead
                refused = True
                host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
                start, body = _json(421, f"host '{host[:100]}' not allowed")
                await send(start)
                await send(body)

        await super().__call__(scope, receive, send_or_refuse)


class Guard:
    """ASGI middleware: CSRF checks, body cap and security headers (see the module docstring)."""

    def __init__(self, app, *, token: str, limit: int, per_client: int = PER_CLIENT):
        self.app, self.token, self.limit, self.per_client = app, token, limit, per_client
        self._in_flight: dict[str, int] = {}  # compute GETs per client address (one event loop: no lock)

    def csrf_problem(self, method: str, headers: dict[bytes, bytes], path: str = "") -> str | None:
        """Why a state-changing (or model-running) request is refused, or None when it may go on."""
        compute = method in ("GET", "HEAD") and path in COMPUTE_PATHS
        if method in SAFE_METHODS and not compute:
            return None
        site = headers.get(b"sec-fetch-site", b"").decode("latin-1").lower()
        if site and site not in ("same-origin", "none"):
            return f"cross-site request refused (Sec-Fetch-Site: {site})"
        origin = headers.get(b"origin")
        if origin is not None:
            host = headers.get(b"host", b"").decode("latin-1").lower()
            if origin.decode("latin-1").lower() not in (f"http://{host}", f"https://{host}"):
                return f"request from another origin refused (Origin: {origin.decode('latin-1')[:100]})"
        ctype = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
        if ctype != "application/json" and not compute:
            return f"Content-Type must be application/json (got {ctype or 'none'!r})"
        sent = headers.get(TOKEN_HEADER.encode(), b"")
        if not sent:
            return "missing X-Geosteer-Token header (the studio page sends it; it is in /api/boot)"
        if not hmac.compare_digest(sent, self.token.encode()):
            return "wrong X-Geosteer-Token (the studio was restarted? reload the page)"
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers: dict[bytes, bytes] = {}
        for k, v in scope.get("headers") or []:
            headers.setdefault(k.lower(), v)

        async def reply(status, message, extra=None):
            start, body = _json(status, message, extra)
            await send(start)
            await send(body)

        method, path = scope.get("method", "GET").upper(), scope.get("path", "")
        problem = self.csrf_problem(method, headers, path)
        if problem:
            log.warning("studio: refused %s %s: %s", scope.get("method"), scope.get("path"), problem)
            return await reply(403, problem)
        if method in ("GET", "HEAD") and path in COMPUTE_PATHS:
            return await self._capped(scope, receive, send, reply)
        too_big = f"request body too large (limit {self.limit} bytes)"
        cl = headers.get(b"content-length")
        if cl is not None:
            try:
                if int(cl) > self.limit or int(cl) < 0:
                    return await reply(413 if int(cl) > self.limit else 400,
                                       too_big if int(cl) > self.limit else "bad Content-Length header")
            except ValueError:
                return await reply(400, "bad Content-Length header")
        # read the whole body here (announced or chunked), up to the limit
        chunks, seen, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                return await reply(413, too_big)
            chunks.append(chunk)
            more = msg.get("more_body", False)
        body, sent_body = b"".join(chunks), False

        async def replay():
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, self._with_headers(send))

    async def _capped(self, scope, receive, send, reply):
        """Run a compute GET unless its client already has ``per_client`` of them in flight (then 429)."""
        client = (scope.get("client") or ("?",))[0]
        if self._in_flight.get(client, 0) >= self.per_client:
            return await reply(429, f"too many analysis requests at once from this client (limit "
                                    f"{self.per_client}); retry in a moment", [(b"retry-after", b"1")])
        self._in_flight[client] = self._in_flight.get(client, 0) + 1
        try:
            return await self.app(scope, receive, self._with_headers(send))
        finally:
            self._in_flight[client] -= 1
            if not self._in_flight[client]:
                del self._in_flight[client]

    @staticmethod
    def _with_headers(send):
        async def send_with_headers(msg):
            if msg["type"] == "http.response.start":
                have = {k.lower() for k, _ in msg.get("headers", [])}
                extra = [h for h in HEADERS if h[0] not in have]
                if b"content-security-policy" not in have:
                    extra.append((b"content-security-policy", STRICT_CSP.encode()))
                msg = {**msg, "headers": [*msg.get("headers", []), *extra]}
            await send(msg)

        return send_with_headers
