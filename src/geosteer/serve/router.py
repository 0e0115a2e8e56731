"""ASGI middleware for vLLM's OpenAI server: each request picks a recipe (``--middleware`` of vLLM).

A request names its recipe by the OpenAI ``model`` field (the recipe's name, as vLLM does for LoRA
adapters) or, with the base model's name, by a ``geosteer_recipe`` field (``extra_body``; also read from
``vllm_xargs``). The body goes on to vLLM with ``model`` = the base model and the recipe in ``vllm_xargs``
(vLLM copies those into ``SamplingParams.extra_args``, where the steered layers read it). Unknown names,
a recipe field that is not a string and a ``model`` that contradicts it are answered 4xx with one JSON
error naming the valid ids, before anything reaches the engine. ``GET /v1/models`` lists the base model and
every recipe. The routes come from the ``GEOSTEER_SERVE_ROUTES`` environment variable (set by
``geosteer serve``): ``{"base": name, "recipes": [names]}``.
"""

from __future__ import annotations

import json
import os
import time

ROUTES_ENV = "GEOSTEER_SERVE_ROUTES"
FIELD = "geosteer_recipe"
GENERATE = ("/v1/completions", "/v1/chat/completions")


class RouteError(Exception):
    def __init__(self, status: int, message: str, param: str) -> None:
        super().__init__(message)
        self.status, self.param = status, param


def route(doc: dict, base: str, recipes: list[str]) -> dict:
    """The request body vLLM gets: ``model`` = base, the recipe (if any) in ``vllm_xargs``. Raises RouteError."""
    valid = ", ".join([base, *recipes])
    model = doc.get("model")
    xargs = doc.get("vllm_xargs")
    if xargs is not None and not isinstance(xargs, dict):
        raise RouteError(400, "vllm_xargs must be an object", "vllm_xargs")
    named = doc.get(FIELD, (xargs or {}).get(FIELD))
    if named is not None and not isinstance(named, str):
        raise RouteError(400, f"{FIELD} must be a recipe name (a string); valid: {', '.join(recipes) or 'none'}",
                         FIELD)
    if model is not None and not isinstance(model, str):
        raise RouteError(400, f"model must be a string; valid: {valid}", "model")
    if model in recipes:
        if named not in (None, model):
            raise RouteError(400, f"model '{model}' is a recipe but {FIELD} says '{named}'; give one of them",
                             FIELD)
        recipe = model
    elif model in (None, base):
        recipe = named or None
        if recipe is not None and recipe not in recipes:
            raise RouteError(404, f"unknown recipe '{recipe}'; valid: {', '.join(recipes) or 'none'}", FIELD)
    else:
        raise RouteError(404, f"unknown model '{model}'; valid: {valid}", "model")
    out = {k: v for k, v in doc.items() if k != FIELD}
    out["model"] = base
    if recipe is not None:
        out["vllm_xargs"] = {**(xargs or {}), FIELD: recipe}
    return out


def models_list(base: str, recipes: list[str]) -> dict:
    now = int(time.time())
    return {"object": "list", "data": [
        {"id": name, "object": "model", "created": now, "owned_by": "geosteer", "root": base,
         "parent": None if name == base else base} for name in [base, *recipes]]}


class RecipeRouter:
    """The middleware (``app.add_middleware(RecipeRouter)``); see the module docstring."""

    def __init__(self, app, routes: dict | None = None) -> None:
        self.app = app
        routes = routes if routes is not None else json.loads(os.environ.get(ROUTES_ENV) or "{}")
        self.base = routes.get("base") or ""
        self.recipes = list(routes.get("recipes") or [])

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"].rstrip("/"), scope["method"]
        if path == "/v1/models" and method == "GET":
            return await _json(send, 200, models_list(self.base, self.recipes))
        if path not in GENERATE or method != "POST":
            return await self.app(scope, receive, send)
        body = await _body(receive)
        try:
            doc = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            doc = None
        if not isinstance(doc, dict):
            return await _json(send, 400, _error(400, "the request body must be a JSON object", None))
        try:
            body = json.dumps(route(doc, self.base, self.recipes)).encode()
        except RouteError as e:
            return await _json(send, e.status, _error(e.status, str(e), e.param))
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


def _error(status: int, message: str, param: str | None) -> dict:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "Error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


async def _body(receive) -> bytes:
    chunks = []
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            return b"".join(chunks)


async def _json(send, status: int, doc: dict) -> None:
    data = json.dumps(doc).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
