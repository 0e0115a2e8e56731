"""What one request or one start argument may carry, checked before the engine (no engine runs here).

Every recipe number within what the kernels take (inline, run-time and ``--set`` alike); a capture in the
form vLLM's OpenAI schema accepts (``vllm_xargs`` holds strings and numbers); run-time recipe names; file
names the system cannot look up; ``--artifact`` folders checked at start; the capture folder removed at exit;
and the last guards inside the engine's step, which keep one request's failure from stopping the engine.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer_vllm import admission
from geosteer_vllm.inline import Policy
from geosteer_vllm.router import RecipeRouter, route
from tests.cli_helpers import one_line_exit_2, run_cli

ROUTES = {"base": "m", "recipes": []}
TOO_BIG = (1e300, "1e300", 3.5e38, -1e39, "-3.5e38", 10**400)


def _number_keys() -> list[str]:
    from geosteer.methods import recipe_keys

    return [k for k, (_, key) in recipe_keys().items() if key.kind == "number"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Llama model folder (3 layers, width 128), its weightless copy and a steering-vectors artifact."""
    from transformers import AutoConfig

    from geosteer.vectors.apply import SteeringVectors
    from geosteer_vllm.plan import meta_model
    from tests.serve.helpers import tiny_folder

    root = tmp_path_factory.mktemp("limits")
    folder = tiny_folder("llama", root / "model")
    meta = meta_model(AutoConfig.from_pretrained(folder))
    meta.config._geosteer_name = folder
    d, n = meta.config.hidden_size, meta.config.num_hidden_layers

    def vectors(name: str, width: int = d, base: str = "tiny-llama") -> str:
        sv = SteeringVectors({1: torch.ones(width)}, point="resid_post", base_model=base, d_model=width, n_layers=n)
        return str(sv.save(root / name))

    return {"folder": folder, "meta": meta, "root": root, "vec": vectors("vec"),
            "other": vectors("other", base="smollm2"), "wide": vectors("wide", width=2 * d)}


@pytest.fixture
def inline(tiny):
    admission.configure({}, tiny["meta"], Policy({"vec": tiny["vec"]}, [str(tiny["root"])]))
    yield
    admission.configure({})


@pytest.mark.parametrize("key", _number_keys())
def test_every_recipe_number_out_of_range_is_400_naming_the_key_and_range(key, inline):
    extra = {"vectors": "vec"} if key.startswith("vector") else {}
    for value in TOO_BIG:
        doc = {**extra, key: value}
        with pytest.raises(GeosteerError) as e:
            admission.admit(doc)
        msg = str(e.value)
        assert f"{key} must be a finite number in " in msg and " to " in msg and "\n" not in msg, msg
        r, seen = _post(doc)
        assert r.status_code == 400 and not seen and key in r.json()["error"]["message"], r.text
    try:  # in range: no bound refuses it (a method may still want its folder key)
        admission.admit({**extra, key: 2})
    except GeosteerError as e:
        assert "must be a finite number" not in str(e)


def test_token_index_and_layers_are_bounded(inline):
    for value, words in ((2**31, "vector_from must be a finite number in 0 to 2147483647"), (-1, "0 to 2147483647"),
                         (2.5, "token index"), ("1e300", "vector_from")):
        with pytest.raises(GeosteerError, match=words):
            admission.admit({"vectors": "vec", "vector_from": value})
    for key in ("vector_layers", "scale_layers", "mlp_layers", "gain_layers", "parallel_layers"):
        extra = {"vectors": "vec"} if key == "vector_layers" else {"scale_site": "attn_out", "scale_par": 2} \
            if key == "scale_layers" else {"mlp_variant": "zero"} if key == "mlp_layers" else {"alpha_mlp": 2}
        for value in (3, "99999999999999999999", 1e300, "0-99"):
            with pytest.raises(GeosteerError):
                admission.admit({**extra, key: value})


@pytest.mark.parametrize("setting", ["vector_from=1e300", "alpha_mlp=1e300", "vector_scale=1e308",
                                     "scale_par=-1e39", "beta_attn=1e39", "scale_perp=1e300",
                                     "vectors=" + "a" * 300])
def test_set_refuses_the_same_numbers_in_one_line(setting, monkeypatch, capsys):
    from geosteer.models import loading

    def built(*a, **k):
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr(loading, "load_model", built)
    code, _, err = run_cli(monkeypatch, capsys, "generate", "-m", "tiny-llama", "-p", "Hi", "--set", setting)
    one_line_exit_2(code, err)
    assert setting.split("=")[0] in err


def _post(doc: dict, path: str = "/v1/completions", raw: bytes | None = None):
    seen = []

    async def downstream(scope, receive, send):
        seen.append(json.loads((await receive())["body"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def go():
        app = RecipeRouter(downstream, routes=ROUTES)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
            body = raw if raw is not None else json.dumps({"prompt": "x", "geosteer_recipe": doc})
            return await client.post(path, content=body, headers={"content-type": "application/json"})

    return asyncio.run(go()), seen


def test_an_artifact_name_longer_than_a_file_name_is_the_unknown_artifact_400(inline):
    for name in ("a" * 300, "a/" * 200 + "b", "é" * 200):
        with pytest.raises(GeosteerError, match="not an artifact this server may load"):
            admission.admit({"vectors": name})
        r, _ = _post({"vectors": name})
        assert r.status_code == 400 and "not an artifact" in r.json()["error"]["message"], r.text


def test_a_body_with_an_integer_past_pythons_digit_limit_is_400():
    r, seen = _post({}, raw=b'{"prompt": "x", "max_tokens": ' + b"9" * 5000 + b"}")
    assert r.status_code == 400 and not seen


def test_a_capture_travels_in_the_form_vllms_openai_schema_takes(tmp_path):
    """The routed body validates against vLLM's own request models (completions and chat), and the input
    processor's check reads the capture back and reaches its per-request limit."""
    pytest.importorskip("vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from geosteer_vllm import capture

    admission.set_capture(str(tmp_path), 30, 576)
    try:
        cap = {"point": "resid_post", "layers": [3, 12], "positions": "prompt"}
        for model, doc in ((CompletionRequest, {"prompt": "The river flowed", "max_tokens": 8}),
                           (ChatCompletionRequest, {"messages": [{"role": "user", "content": "Hi"}]})):
            routed = route({**doc, "geosteer_capture": cap}, "m", [])
            req = model.model_validate(routed)
            extra = req.to_sampling_params(8, {}).extra_args
            got = capture.admit(extra[capture.FIELD], 4, 8, 576, 100000)
            assert {k: got[k] for k in cap} == cap and len(got["token"]) == 32
            with pytest.raises(GeosteerError, match="2 layers x 4 tokens x 576 values = 4608 values, over this "
                                                    "server's limit of 1000"):
                capture.admit(extra[capture.FIELD], 4, 8, 576, 1000)
        for forged in ("{", "[]", json.dumps({**cap, "token": "0" * 32}), "x" * 5000):
            with pytest.raises(GeosteerError, match="the server issues its token"):
                capture.admit(forged, 4, 8, 576, 100000)
    finally:
        admission._STATE["capture"] = None


def test_run_time_recipe_names_must_be_safe_ids():
    async def go(doc):
        app = RecipeRouter(lambda *a: None, routes=ROUTES, admin_token="t")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
            r = await client.post("/v1/geosteer/recipes", json=doc, headers={"authorization": "Bearer t"})
            return r, (await client.get("/v1/models")).json()

    admission.configure({}, None)
    for name in ("a\x00b", "a\nb", "a b", "", "-x", ".", "a" * 129, "a/b", "é", 3):
        r, models = asyncio.run(go({"name": name, "recipe": {}}))
        assert r.status_code == 400, (name, r.text)
        assert "letters, digits, '.', '_' or '-'" in r.json()["error"]["message"]
        assert [m["id"] for m in models["data"]] == ["m"]


def test_a_landmine_recipe_is_not_stored(inline):
    async def go(doc):
        app = RecipeRouter(lambda *a: None, routes=ROUTES, admin_token="t")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
            r = await client.post("/v1/geosteer/recipes", json=doc, headers={"authorization": "Bearer t"})
            return r, (await client.get("/v1/models")).json()

    for recipe in ({"vectors": "vec", "vector_from": 1e300}, {"alpha_mlp": 1e300}, {"vector_scale": "1e308"}):
        r, models = asyncio.run(go({"name": "x", "recipe": recipe}))
        assert r.status_code == 400 and [m["id"] for m in models["data"]] == ["m"], r.text
    r, models = asyncio.run(go({"name": "ok-1.x", "recipe": {"alpha_mlp": 2}}))
    assert r.status_code == 201 and [m["id"] for m in models["data"]] == ["m", "ok-1.x"]


def test_artifacts_are_checked_at_start(tiny, tmp_path):
    from safetensors.torch import save_file

    from geosteer_vllm.engine import engine_args

    bad = tmp_path / "nan"
    bad.mkdir()
    for f in Path(tiny["vec"]).iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    save_file({"1": torch.full((128,), float("nan"))}, str(bad / "vectors.safetensors"))
    user = tmp_path / "notes"
    user.mkdir()
    cases = {str(user): "not an artifact a folder key takes", tiny["other"]: "made for base model 'smollm2'",
             tiny["wide"]: "do not fit this model", str(bad): "checksum differs",
             str(tmp_path / "nowhere"): "not an artifact"}
    for folder, words in cases.items():
        with pytest.raises(GeosteerError, match=words):
            engine_args(tiny["folder"], inline=Policy({"v": folder}))
    engine_args(tiny["folder"], inline=Policy({"v": tiny["vec"]}))


def test_serve_refuses_a_bad_artifact_in_one_line(tiny, tmp_path, monkeypatch, capsys):
    pytest.importorskip("vllm")
    from geosteer_vllm import cli

    def started(argv):
        raise AssertionError("vLLM was started with a bad --artifact")

    monkeypatch.setattr(cli, "_run_vllm", started)
    code, _, err = run_cli(monkeypatch, capsys, "serve", "-m", tiny["folder"], "--artifact", f"v={tmp_path}")
    one_line_exit_2(code, err)
    assert "--artifact v=" in err


def test_the_capture_folder_is_removed_when_the_process_exits():
    code = ("import os, signal; from geosteer_vllm.capture import capture_dir; d = capture_dir(); print(d, flush=True)"
            "; open(os.path.join(d, 'x.bin'), 'w').close()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    folder = Path(out.stdout.strip())
    assert folder.name.startswith("geosteer-capture-") and not folder.exists()


def test_a_recipe_that_fails_in_the_step_leaves_its_rows_and_the_engine_goes_on(caplog):
    from geosteer_vllm import batch, graph
    from geosteer_vllm.plan import RecipePlan

    def boom(canon):
        raise ValueError("value cannot be converted to type float without overflow")

    batch.set_recipes([], boom)
    try:
        assert batch.plan_or_stock("req-1", {"geosteer_spec": '{"alpha_mlp":2}'}) is None
        assert "request req-1" in caplog.text and "overflow" in caplog.text
    finally:
        batch.set_recipes([])

    class Form:  # a form whose numbers a float32 table cannot hold
        s_par, s_perp, ref, delta, vector, scale, ablate, norm_match, replace = 1e300, 1.0, None, 0, None, 0, 0, 0, 0
        from_token, phase, skip_first = 0, "all", False

    class Edit:
        form = Form()

    from geosteer.served import LayerOps

    plan = RecipePlan("bad", "inline", {0: LayerOps(attn_out=[Edit()])})
    rows = graph.Rows(8, [], 2, "cpu")
    rows.tables[0] = graph.LayerTables({"attn_out": 1}, rows.size, 4, torch.float32, "cpu")
    rows.fill([(None, 2, 2), (plan, 3, 3)])
    assert rows.rows[:5].tolist() == [0] * 5 and not rows.inline
    assert not rows.tables[0].attn_out__active.any()


def test_an_edit_that_fails_in_the_step_leaves_its_rows_and_the_others_are_steered(caplog):
    pytest.importorskip("vllm")
    from geosteer.served import LayerOps, Tokens
    from geosteer_vllm import batch, layers
    from geosteer_vllm.plan import RecipePlan

    def boom(t, state, tokens):
        return t * (tokens.positions >= 10**300)  # what an unbounded vector_from did: an overflow in torch

    bad, good = (RecipePlan(name, "inline", {0: LayerOps(attn_out=[fn])})
                 for name, fn in (("bad", boom), ("good", lambda t, state, tokens: t + 1)))
    batch.set_rows([(bad, 2, 2), (good, 2, 2)])
    try:
        t = torch.zeros(4, 3)
        ops = {r: (rows, batch.ops(r, 0)) for r, rows in batch.groups(4).items()}
        out = layers._apply("attn_out", t, {}, Tokens(torch.arange(4), torch.full((4,), 2)), ops)
    finally:
        batch.set_rows([])
    assert out[:2].eq(0).all() and out[2:].eq(1).all()
    assert "recipe 'bad' at attn_out failed inside the engine's step" in caplog.text


def test_a_recipe_that_overflows_the_model_hands_on_finite_values():
    """An edit whose numbers overflow float32 leaves its rows finite (NaN as 0, within ±LIMIT), on the eager
    path and in the compiled path's tables; other rows keep their values bit for bit."""
    pytest.importorskip("vllm")
    from geosteer.served import Form, LayerOps, Tokens
    from geosteer_vllm import batch, graph, layers
    from geosteer_vllm.plan import RecipePlan

    def gain(t, state, tokens):
        return t * 3.4e38 * 10  # inf; inf - inf below is NaN

    def nan(t, state, tokens):
        return t * 3.4e38 * 10 - t * 3.4e38 * 10

    t = torch.randn(6, 4)
    plans = [RecipePlan(n, "inline", {0: LayerOps(mlp_out=[fn])}) for n, fn in (("gain", gain), ("nan", nan))]
    batch.set_rows([(plans[0], 2, 2), (plans[1], 2, 2), (None, 2, 2)])
    try:
        ops = {r: (rows, batch.ops(r, 0)) for r, rows in batch.groups(6).items()}
        out = layers._apply("mlp_out", t, {}, Tokens(torch.arange(6), torch.full((6,), 2)), ops)
    finally:
        batch.set_rows([])
    assert torch.isfinite(out).all() and out.abs().max() <= batch.LIMIT
    assert out[2:4].eq(0).all() and torch.equal(out[4:], t[4:])

    tab = graph.LayerTables({"mlp_out": 1}, 3, 4, torch.float32, "cpu")
    tab.write(1, "mlp_out", 0, Form(vector=torch.ones(4), scale=3.4e38))
    y = tab.run("mlp_out", t, {"resid_pre": t, "mlp_in": t}, torch.tensor([1, 1, 0, 0, 0, 0]), torch.arange(6),
                torch.ones(6, dtype=torch.bool))
    assert torch.isfinite(y).all() and torch.equal(y[2:], t[2:])


def test_a_value_the_system_cannot_look_up_is_a_400_not_a_500(tiny, inline):
    from transformers import AutoModelForCausalLM

    from tests.serve.helpers import random_surfaces

    if not (tiny["root"] / "surf").is_dir():
        random_surfaces(AutoModelForCausalLM.from_pretrained(tiny["folder"]), tiny["root"] / "surf")
    doc = {"surfaces": "surf", "edits": "a" * 300}  # read as a file name first: too long to look up
    with pytest.raises(GeosteerError, match="this recipe cannot be built: .*File name too long"):
        admission.admit(doc)
    r, seen = _post(doc)
    assert r.status_code == 400 and not seen, r.text
