"""ASGI middleware for vLLM's OpenAI server: each request picks a recipe (``--middleware`` of vLLM).

A recipe is named by ``model`` or by ``geosteer_recipe`` (a name or an inline object, ``serve.inline``); the
body goes on with ``model`` = the base model and the recipe in ``vllm_xargs``. Bad requests get a one-line
4xx. ``GET /v1/models`` lists the recipes; ``/v1/geosteer/recipes`` changes them behind
``GEOSTEER_ADMIN_TOKEN``. Routes come from ``GEOSTEER_SERVE_ROUTES`` (set by ``geosteer serve``).
"""

from __future__ import annotations

import hmac
import json
import os
import time

from geosteer.errors import GeosteerError
from geosteer_vllm import admission, capture
from geosteer_vllm.batch import RECIPE_FIELD, SPEC_FIELD
from geosteer_vllm.plan import NAME, NAME_RULE

ROUTES_ENV = "GEOSTEER_SERVE_ROUTES"
ADMIN_TOKEN_ENV = "GEOSTEER_ADMIN_TOKEN"
FIELD = RECIPE_FIELD
GENERATE = ("/v1/completions", "/v1/chat/completions", "/v1/responses")
ADMIN = "/v1/geosteer/recipes"
MAX_BODY = 8 << 20  # bytes of a request body the router reads


class RouteError(Exception):
    def __init__(self, status: int, message: str, param: str | None) -> None:
        super().__init__(message)
        self.status, self.param = status, param


def _given(doc: dict, xargs: dict | None) -> object:
    """The recipe a request gives: its ``geosteer_recipe`` field or the one in ``vllm_xargs`` (null = absent)."""
    top, inner = doc.get(FIELD), (xargs or {}).get(FIELD)
    if top is not None and inner is not None and top != inner:
        raise RouteError(400, f"{FIELD} and vllm_xargs.{FIELD} differ; give one of them", FIELD)
    return top if top is not None else inner


def route(doc: dict, base: str, recipes: list[str], runtime: dict | None = None) -> dict:
    """The request body vLLM gets: ``model`` = base, the recipe (if any) in ``vllm_xargs`` as a start recipe's
    name or an admitted recipe's canonical text (``serve.admission``); everything else a client put under the
    geosteer keys is dropped. ``runtime``: recipes added while the server runs ({name: recipe object}).
    Raises RouteError."""
    runtime = runtime or {}
    names = [*recipes, *runtime]
    valid = ", ".join([base, *names])
    model, xargs = doc.get("model"), doc.get("vllm_xargs")
    if xargs is not None and not isinstance(xargs, dict):
        raise RouteError(400, "vllm_xargs must be an object", "vllm_xargs")
    if SPEC_FIELD in (xargs or {}) or SPEC_FIELD in doc:
        raise RouteError(400, f"{SPEC_FIELD} is set by the server; give {FIELD} (a recipe name or an object of "
                         "recipe keys)", SPEC_FIELD)
    if capture.FIELD in (xargs or {}):
        raise RouteError(400, f"give {capture.FIELD} as a request field, not in vllm_xargs", capture.FIELD)
    given = _given(doc, xargs)
    if model is not None and not isinstance(model, str):
        raise RouteError(400, f"model must be a string; valid: {valid}", "model")
    if model in names:
        if given is not None and given != model:
            raise RouteError(400, f"model '{model}' is a recipe but {FIELD} says {str(given)[:80]!r}; give one "
                             "of them", FIELD)
        given = model
    elif model not in (None, base):
        raise RouteError(404, f"unknown model {model[:80]!r}; valid: {valid}", "model")
    extra = {k: v for k, v in (xargs or {}).items() if k not in (FIELD, SPEC_FIELD)}
    extra.update(_recipe_args(given, recipes, runtime))
    if doc.get(capture.FIELD) is not None:  # vllm_xargs holds strings and numbers: the object as JSON text
        extra[capture.FIELD] = json.dumps(_capture_args(doc), separators=(",", ":"))
    out = {k: v for k, v in doc.items() if k not in (FIELD, "vllm_xargs", capture.FIELD)}
    out["model"] = base
    if extra:
        out["vllm_xargs"] = extra
    return out


def _recipe_args(given: object, recipes: list[str], runtime: dict) -> dict:
    """The ``extra_args`` entries for ``given`` (a name, an object of recipe keys, or None)."""
    if given is None or given == "":
        return {}
    try:
        if isinstance(given, str):
            if given in recipes:
                return {FIELD: given}
            if given in runtime:
                return {SPEC_FIELD: admission.admit(runtime[given])}
            raise RouteError(404, f"unknown recipe {given[:80]!r}; valid: "
                             f"{', '.join([*recipes, *runtime]) or 'none'}", FIELD)
        if isinstance(given, dict):
            return {SPEC_FIELD: admission.admit(given)}
    except GeosteerError as e:
        raise RouteError(400, str(e), FIELD) from None
    raise RouteError(400, f"{FIELD} must be a recipe name or an object of recipe keys; valid names: "
                     f"{', '.join([*recipes, *runtime]) or 'none'}", FIELD)


def _capture_args(doc: dict) -> dict:
    """The checked capture of a request, with its token (``serve.capture``)."""
    if doc.get("stream"):
        raise RouteError(400, f"{capture.FIELD} needs a non-streamed request (stream: false)", capture.FIELD)
    if doc.get("n") not in (None, 1) or doc.get("best_of") not in (None, 1):
        raise RouteError(400, f"{capture.FIELD} needs one sequence per request (n: 1)", capture.FIELD)
    try:
        return admission.issue_capture(doc[capture.FIELD])
    except GeosteerError as e:
        raise RouteError(400, str(e), capture.FIELD) from None


def with_activations(body: bytes, cap: dict) -> bytes:
    """A completion response with the request's captured activations added (``geosteer_activations``)."""
    doc = json.loads(body)
    usage = doc.get("usage") or {}
    n = int(usage.get("prompt_tokens") or 0)
    if cap["positions"] == "all":
        n += max(int(usage.get("completion_tokens") or 0) - 1, 0)
    try:
        doc[capture.RESULT] = admission.collect_capture(cap, n)
    except GeosteerError as e:
        doc[capture.RESULT] = None
        doc["geosteer_capture_error"] = str(e)
    return json.dumps(doc).encode()


def models_list(base: str, recipes: list[str]) -> dict:
    now = int(time.time())
    return {"object": "list", "data": [
        {"id": name, "object": "model", "created": now, "owned_by": "geosteer", "root": base,
         "parent": None if name == base else base} for name in [base, *recipes]]}


class RecipeRouter:
    """The middleware (``app.add_middleware(RecipeRouter)``); see the module docstring."""

    def __init__(self, app, routes: dict | None = None, admin_token: str | None = None) -> None:
        self.app = app
        routes = routes if routes is not None else json.loads(os.environ.get(ROUTES_ENV) or "{}")
        self.base = routes.get("base") or ""
        self.recipes = list(routes.get("recipes") or [])
        self.runtime: dict[str, dict] = {}
        self.token = admin_token if admin_token is not None else os.environ.get(ADMIN_TOKEN_ENV) or None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"].rstrip("/"), scope["method"]
        if path == "/v1/models" and method == "GET":
            return await _json(send, 200, models_list(self.base, [*self.recipes, *self.runtime]))
        if path == ADMIN or path.startswith(ADMIN + "/"):
            status, doc = await self._admin(scope, receive, path, method)
            return await _json(send, status, doc)
        if path not in GENERATE or method != "POST":
            return await self.app(scope, receive, send)
        try:
            doc = _parse(await _body(receive))
            if doc.get(capture.FIELD) is not None and path == "/v1/responses":
                raise RouteError(400, f"{capture.FIELD} is served on /v1/completions and /v1/chat/completions",
                                 capture.FIELD)
            routed = route(doc, self.base, self.recipes, self.runtime)
            body = json.dumps(routed).encode()
        except RouteError as e:
            return await _json(send, e.status, _error(e.status, str(e), e.param))
        cap = (routed.get("vllm_xargs") or {}).get(capture.FIELD)
        if cap is not None:
            send = _Collect(send, json.loads(cap))
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app({**scope, "headers": headers}, replay, send)

    async def _admin(self, scope, receive, path: str, method: str) -> tuple[int, dict]:
        """``GET``/``POST``/``DELETE`` of run-time recipes, behind the operator's bearer token."""
        if self.token is None:
            return 404, _error(404, "run-time recipes are off (start the server with --admin-token)", None)
        auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        if not hmac.compare_digest(auth.encode(), f"Bearer {self.token}".encode()):
            return 401, _error(401, "run-time recipes need the operator's token (Authorization: Bearer ...)", None)
        try:
            if method == "GET" and path == ADMIN:
                return 200, {"recipes": self.recipes, "runtime": self.runtime}
            if method == "DELETE" and path != ADMIN:
                name = path[len(ADMIN) + 1:]
                if name not in self.runtime:
                    raise RouteError(404, f"no run-time recipe {name[:80]!r}; valid: "
                                     f"{', '.join(self.runtime) or 'none'}", "name")
                del self.runtime[name]
                return 200, {"deleted": name}
            if method == "POST" and path == ADMIN:
                return 201, self._add(_parse(await _body(receive)))
        except RouteError as e:
            return e.status, _error(e.status, str(e), e.param)
        return 405, _error(405, f"{method} {path}: valid: GET/POST {ADMIN}, DELETE {ADMIN}/NAME", None)

    def _add(self, doc: dict) -> dict:
        name, recipe = doc.get("name"), doc.get("recipe")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise RouteError(400, f"name must be a recipe name: {NAME_RULE} (got {str(name)[:40]!r})", "name")
        if name == self.base or name in self.recipes:
            raise RouteError(409, f"'{name}' names the base model or a recipe loaded at start; valid new names: "
                             f"anything but {', '.join([self.base, *self.recipes])}", "name")
        try:
            admission.admit(recipe)
        except GeosteerError as e:
            raise RouteError(400, str(e), "recipe") from None
        self.runtime[name] = recipe
        return {"name": name, "recipe": recipe}


class _Collect:
    """An ASGI ``send`` that holds a captured request's response and adds its activations."""

    def __init__(self, send, cap: dict) -> None:
        self.send, self.cap, self.start, self.chunks = send, cap, None, []

    async def __call__(self, msg: dict) -> None:
        if msg["type"] == "http.response.start":
            self.start = msg
            return
        if msg["type"] != "http.response.body":
            return await self.send(msg)
        self.chunks.append(msg.get("body", b""))
        if msg.get("more_body"):
            return
        body = b"".join(self.chunks)
        if self.start is not None and self.start["status"] == 200:
            body = with_activations(body, self.cap)
        else:
            admission.collect_capture_quietly(self.cap)
        headers = [(k, v) for k, v in (self.start or {}).get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self.send({**(self.start or {"type": "http.response.start", "status": 200}), "headers": headers})
        await self.send({"type": "http.response.body", "body": body})


def _parse(body: bytes) -> dict:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # also UnicodeDecodeError, and integers past Python's digit limit
        doc = None
    if not isinstance(doc, dict):
        raise RouteError(400, "the request body must be a JSON object", None)
    return doc


def _error(status: int, message: str, param: str | None) -> dict:
    kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
            409: "ConflictError", 413: "RequestTooLargeError"}.get(status, "Error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


async def _body(receive) -> bytes:
    chunks, size = [], 0
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        size += len(chunks[-1])
        if size > MAX_BODY:
            raise RouteError(413, f"request body over {MAX_BODY} bytes", None)
        if not msg.get("more_body"):
            return b"".join(chunks)


async def _json(send, status: int, doc: dict) -> None:
    data = json.dumps(doc).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
