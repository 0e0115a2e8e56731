"""The recipe router in front of vLLM's OpenAI server (an ASGI middleware; runs without vLLM)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from geosteer.serve.router import RecipeRouter

ROUTES = {"base": "smollm2", "recipes": ["calm", "bold"]}


def _client():
    seen = []

    async def downstream(scope, receive, send):  # stands in for vLLM: echoes the body it got
        msg = await receive()
        seen.append(json.loads(msg["body"]))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": msg["body"]})

    app = RecipeRouter(downstream, routes=ROUTES)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"), seen


def _post(doc, path="/v1/completions", raw=None):
    async def go():
        client, seen = _client()
        async with client:
            r = await client.post(path, content=raw if raw is not None else json.dumps(doc),
                                  headers={"content-type": "application/json"})
        return r, seen

    return asyncio.run(go())


@pytest.mark.parametrize("doc,recipe", [
    ({"model": "calm", "prompt": "x"}, "calm"),
    ({"model": "smollm2", "prompt": "x", "geosteer_recipe": "bold"}, "bold"),
    ({"model": "smollm2", "prompt": "x", "vllm_xargs": {"geosteer_recipe": "bold", "k": 1}}, "bold"),
    ({"model": "smollm2", "prompt": "x"}, None),
])
def test_requests_reach_vllm_with_their_recipe(doc, recipe):
    r, seen = _post(doc)
    assert r.status_code == 200
    (got,) = seen
    assert got["model"] == "smollm2" and "geosteer_recipe" not in got
    assert (got.get("vllm_xargs") or {}).get("geosteer_recipe") == recipe
    if "vllm_xargs" in doc:
        assert got["vllm_xargs"]["k"] == 1


@pytest.mark.parametrize("doc,status,words", [
    ({"model": "nope", "prompt": "x"}, 404, "unknown model 'nope'; valid: smollm2, calm, bold"),
    ({"model": "smollm2", "geosteer_recipe": "nope"}, 404, "unknown recipe 'nope'; valid: calm, bold"),
    ({"model": "smollm2", "geosteer_recipe": 3}, 400, "must be a recipe name"),
    ({"model": "calm", "geosteer_recipe": "bold"}, 400, "give one of them"),
    ({"model": ["calm"]}, 400, "model must be a string"),
])
def test_bad_requests_are_4xx_naming_the_valid_ids(doc, status, words):
    for path in ("/v1/completions", "/v1/chat/completions"):
        r, seen = _post(doc, path)
        assert r.status_code == status and not seen
        assert words in r.json()["error"]["message"]


def test_body_that_is_not_a_json_object_is_400():
    r, seen = _post(None, raw=b"[1, 2")
    assert r.status_code == 400 and not seen


def test_models_lists_the_base_model_and_every_recipe():
    async def go():
        client, _ = _client()
        async with client:
            return await client.get("/v1/models")

    ids = [m["id"] for m in asyncio.run(go()).json()["data"]]
    assert ids == ["smollm2", "calm", "bold"]
