"""The recipe router in front of vLLM's OpenAI server (an ASGI middleware; runs without vLLM)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import torch

from geosteer_vllm.router import RecipeRouter

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


@pytest.mark.parametrize("doc,status,words", [
    # a null recipe field beside an unknown recipe in vllm_xargs once slipped through to the engine
    ({"model": "smollm2", "geosteer_recipe": None, "vllm_xargs": {"geosteer_recipe": "nope"}}, 404,
     "unknown recipe 'nope'; valid: calm, bold"),
    ({"model": "smollm2", "geosteer_recipe": "calm", "vllm_xargs": {"geosteer_recipe": "bold"}}, 400, "differ"),
    ({"model": "smollm2", "vllm_xargs": {"geosteer_spec": "{}"}}, 400, "geosteer_spec is set by the server"),
    ({"model": "smollm2", "geosteer_recipe": {"scale_par": 2}}, 400, "recipes by name only"),
])
def test_every_route_into_the_engine_is_checked(doc, status, words):
    for path in ("/v1/completions", "/v1/chat/completions", "/v1/responses"):
        r, seen = _post(doc, path)
        assert r.status_code == status and not seen, r.text
        assert words in r.json()["error"]["message"]


def test_what_reaches_vllm_holds_only_the_checked_recipe():
    r, seen = _post({"model": "smollm2", "geosteer_recipe": None, "vllm_xargs": {"geosteer_recipe": "calm"}})
    assert r.status_code == 200 and seen[0]["vllm_xargs"] == {"geosteer_recipe": "calm"}
    r, seen = _post({"model": "smollm2", "geosteer_recipe": "", "vllm_xargs": {"k": 2}})
    assert r.status_code == 200 and seen[0]["vllm_xargs"] == {"k": 2}


# ---- inline recipes and run-time recipes (serve.admission configured on tiny-llama's weightless copy) ----

@pytest.fixture()
def inline(tmp_path):
    from geosteer.models.loading import load_model
    from geosteer.vectors.apply import SteeringVectors
    from geosteer_vllm import admission
    from geosteer_vllm.inline import Policy
    from geosteer_vllm.plan import meta_model

    model, _ = load_model("tiny-llama")
    meta = meta_model(model.config)
    meta.config._geosteer_name = "tiny-llama"
    root = tmp_path / "root"
    vec = SteeringVectors({1: torch.randn(model.config.hidden_size)}, base_model="tiny-llama",
                          d_model=model.config.hidden_size, n_layers=model.config.num_hidden_layers)
    calm = vec.save(root / "calm")
    outside = vec.save(tmp_path / "outside")
    (root / "link").symlink_to(outside)
    admission.configure({}, meta, Policy({"calm": str(calm)}, [str(root)]))
    yield {"root": root, "calm": str(calm), "outside": str(outside)}
    admission.configure({})


def test_inline_recipes_reach_vllm_as_their_canonical_text(inline):
    from geosteer_vllm import admission

    for vectors in ("calm", "calm/", inline["calm"]):
        doc = {"model": "smollm2", "geosteer_recipe": {"vectors": vectors.rstrip("/") if vectors == "calm/" else
                                                       vectors, "vector_scale": 4, "scale_site": "attn_out",
                                                       "scale_par": 0.5}}
        r, seen = _post(doc)
        assert r.status_code == 200, r.text
        canon = seen[0]["vllm_xargs"]["geosteer_spec"]
        assert json.loads(canon) == {"scale_par": 0.5, "scale_site": "attn_out", "vector_scale": 4.0,
                                     "vectors": inline["calm"]}
        assert admission.check(seen[0]["vllm_xargs"]).layers  # admitted: the input processor lets it in


@pytest.mark.parametrize("recipe,words", [
    ({"vectors": "../outside"}, "not an artifact this server may load"),
    ({"vectors": "link"}, "not an artifact this server may load"),
    ({"vectors": "/etc"}, "not an artifact this server may load"),
    ({"vectors": "org/name"}, "not an artifact this server may load"),
    ({"surfacez": "calm"}, "unknown recipe key 'surfacez'; valid keys:"),
    ({"scale_par": [1]}, "a recipe value is a string or a number"),
    ({"scale_par": "x"}, "scale_par must be a number"),
    ({"scale_par": 0.5, "scale_site": "value_full"}, "served from recipes named at start"),
    ({f"k{i}": 1 for i in range(100)}, "at most 64 keys"),
    (["vectors"], "must be a recipe name or an object"),
])
def test_bad_inline_recipes_are_400_and_load_nothing(inline, recipe, words):
    from geosteer_vllm import admission

    before = dict(admission._ADMITTED)
    r, seen = _post({"model": "smollm2", "geosteer_recipe": recipe})
    assert r.status_code == 400 and not seen, r.text
    assert words in r.json()["error"]["message"]
    assert admission._ADMITTED == before


def _admin(method, path="/v1/geosteer/recipes", doc=None, token="s3cret", app_token="s3cret"):
    async def go():
        app = RecipeRouter(lambda *a: None, routes=ROUTES, admin_token=app_token)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
        headers = {"authorization": f"Bearer {token}"} if token else {}
        async with client:
            out = [await client.request(method, path, json=doc, headers=headers)]
            if method == "POST" and out[0].status_code == 201:  # the recipe serves at once
                out.append(await client.get("/v1/models"))
                out.append(await client.request("DELETE", f"{path}/{doc['name']}", headers=headers))
                out.append(await client.get("/v1/models"))
        return out

    return asyncio.run(go())


def test_run_time_recipes_behind_the_token(inline):
    r, models, deleted, after = _admin("POST", doc={"name": "soft", "recipe": {"vectors": "calm",
                                                                                "vector_scale": 2}})
    assert r.status_code == 201 and deleted.status_code == 200
    assert [m["id"] for m in models.json()["data"]] == ["smollm2", "calm", "bold", "soft"]
    assert [m["id"] for m in after.json()["data"]] == ["smollm2", "calm", "bold"]
    for kw, status in ((dict(token=None), 401), (dict(token="wrong"), 401), (dict(app_token=None), 404)):
        (r,) = _admin("POST", doc={"name": "x", "recipe": {"scale_par": 2}}, **kw)
        assert r.status_code == status
    for doc, status in (({"name": "calm", "recipe": {"scale_par": 2}}, 409),
                        ({"name": "x", "recipe": {"vectors": "../outside"}}, 400), ({"name": "a/b"}, 400)):
        (r,) = _admin("POST", doc=doc)
        assert r.status_code == status, r.text
    (r,) = _admin("DELETE", path="/v1/geosteer/recipes/none")
    assert r.status_code == 404


def test_a_capture_comes_back_in_the_response_and_bad_ones_are_400(tmp_path):
    from geosteer_vllm import admission, capture

    admission.set_capture(str(tmp_path), 3, 4)

    async def engine(scope, receive, send):  # stands in for vLLM: writes the capture as the steered layers do
        doc = json.loads((await receive())["body"])
        cap = json.loads(doc["vllm_xargs"]["geosteer_capture"])  # JSON text: vLLM's vllm_xargs schema
        for layer in cap["layers"]:
            for pos in range(5):  # 3 prompt tokens, 2 generated: 4 run, and a position past them
                capture.record(str(tmp_path), cap["token"], layer, torch.tensor([pos]), torch.full((1, 4), pos + 0.5))
        body = json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1")]})
        await send({"type": "http.response.body", "body": body})

    async def go(doc):
        app = RecipeRouter(engine, routes=ROUTES)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
            return await client.post("/v1/completions", json=doc)

    try:
        for positions, n in (("prompt", 3), ("all", 4)):
            r = asyncio.run(go({"prompt": "x", "geosteer_capture": {"point": "mlp_out", "layers": [2, 0],
                                                                     "positions": positions}}))
            acts = r.json()["geosteer_activations"]
            assert r.status_code == 200 and sorted(acts) == ["0", "2"]
            assert acts["2"] == [[p + 0.5] * 4 for p in range(n)]
        assert not list(tmp_path.iterdir())  # the files are removed once read
        for cap, words in (({"point": "nope", "layers": [0]}, "unknown point"), ({"layers": [3]}, "0-2"),
                           ({"layers": [0, 0]}, "distinct"), ({"layers": [0], "positions": "some"}, "positions"),
                           ({"layers": [True]}, "layers"), ([0], "must be an object")):
            r = asyncio.run(go({"prompt": "x", "geosteer_capture": cap}))
            assert r.status_code == 400 and words in r.json()["error"]["message"], r.text
        r = asyncio.run(go({"prompt": "x", "stream": True, "geosteer_capture": {"layers": [0]}}))
        assert r.status_code == 400 and "non-streamed" in r.json()["error"]["message"]
        r = asyncio.run(go({"prompt": "x", "vllm_xargs": {"geosteer_capture": {"layers": [0], "token": "a" * 32}}}))
        assert r.status_code == 400 and "not in vllm_xargs" in r.json()["error"]["message"]
    finally:
        admission._STATE["capture"] = None
