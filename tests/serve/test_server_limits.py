"""Live servers under hostile and documented requests: nothing one request carries takes the server down.

Two ``geosteer serve`` processes on 127.0.0.1: a tiny Llama steered inside vLLM's compiled graph, and SmolLM2
eager with ``--max-capture 100000``. Each gets every recipe number out of range (inline and as a run-time
recipe), then numbers at the edge of the range, then a normal request: the server must still answer. The eager
one also serves the documented capture requests (copied from docs/serving.md, completions and chat), refuses a
capture past its limit with the limit's own message, and removes its capture folder after SIGTERM.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import httpx  # noqa: E402
import torch  # noqa: E402

from tests.serve.helpers import start_server, stop_server, tiny_folder  # noqa: E402

TOKEN = "operator-token"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "serving.md"
OUT_OF_RANGE = (1e300, "1e300", 1e39, "-1e39")
LAYER_KEYS = {"vector_layers": {"vectors": "vec"}, "scale_layers": {"scale_site": "attn_out", "scale_par": 2},
              "mlp_layers": {"mlp_variant": "zero"}, "gain_layers": {"alpha_mlp": 2},
              "parallel_layers": {}}


def _number_keys() -> list[str]:
    from geosteer.methods import recipe_keys

    return [k for k, (_, key) in recipe_keys().items() if key.kind == "number"]


def _vectors(folder: Path, base: str, d: int, n: int) -> str:
    from geosteer.vectors.apply import SteeringVectors

    gen = torch.Generator().manual_seed(0)
    return str(SteeringVectors({1: 0.5 * torch.randn(d, generator=gen)}, point="resid_post", base_model=base,
                               d_model=d, n_layers=n).save(folder))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    root = tmp_path_factory.mktemp("compiled")
    model = tiny_folder("llama", root / "model")
    vec = _vectors(root / "vec", "tiny-llama", 128, 3)
    url, proc = start_server(["-m", model, "--artifact", f"vec={vec}", "--admin-token", TOKEN, "--",
                              "--max-model-len", "128"], root / "server.log")
    try:
        yield {"url": url, "base": Path(model).name, "log": root / "server.log"}
    finally:
        stop_server(proc)


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    root = tmp_path_factory.mktemp("eager")
    vec = _vectors(root / "vec", "smollm2", 576, 30)
    tmp = root / "tmp"
    tmp.mkdir()
    url, proc = start_server(["-m", "smollm2", "--artifact", f"vec={vec}", "--admin-token", TOKEN,
                              "--max-capture", "100000", "--", "--max-model-len", "256"], root / "server.log",
                             env={"TMPDIR": str(tmp)})
    state = {"url": url, "base": "smollm2", "log": root / "server.log", "proc": proc, "tmp": tmp}
    try:
        yield state
    finally:
        if proc.poll() is None:
            stop_server(proc)


def _complete(url: str, base: str, **fields) -> httpx.Response:
    body = {"model": base, "prompt": "The river flowed", "max_tokens": 4, "temperature": 0.0, **fields}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=300)


def _hostile(server: dict) -> None:
    """Every recipe number out of range, inline and as a run-time recipe: a 400 naming the key, nothing
    stored; then numbers at the edge of the range (a 200, or a 400 saying why, never a 5xx)."""
    url, base = server["url"], server["base"]
    admin = {"authorization": f"Bearer {TOKEN}"}
    for key in _number_keys():
        extra = {"vectors": "vec"} if key.startswith("vector") else {}
        for value in OUT_OF_RANGE:
            r = _complete(url, base, geosteer_recipe={**extra, key: value})
            assert r.status_code == 400 and key in r.json()["error"]["message"], (key, value, r.text)
            r = httpx.post(f"{url}/v1/geosteer/recipes", json={"name": "mine", "recipe": {**extra, key: value}},
                           headers=admin, timeout=60)
            assert r.status_code == 400 and key in r.json()["error"]["message"], (key, value, r.text)
    for key, extra in LAYER_KEYS.items():
        for value in ("99999999999999999999", 1e300, "0-99"):
            r = _complete(url, base, geosteer_recipe={**extra, key: value})
            assert r.status_code == 400, (key, value, r.text)
    for value in (2**31, "1e300", 1e300, -1):
        r = _complete(url, base, geosteer_recipe={"vectors": "vec", "vector_from": value})
        assert r.status_code == 400 and "vector_from" in r.json()["error"]["message"], r.text
    models = httpx.get(f"{url}/v1/models", timeout=60).json()["data"]
    assert "mine" not in [m["id"] for m in models]
    edge = [{"alpha_mlp": 3.4e38}, {"vectors": "vec", "vector_scale": -3.4e38}, {"beta_attn": 3e38},
            {"scale_site": "attn_out", "scale_par": 3.4e38, "scale_perp": -3.4e38},
            {"vectors": "vec", "vector_from": 2**31 - 1}]
    for recipe in edge:
        for temperature in (0.0, 1.0):
            r = _complete(url, base, geosteer_recipe=recipe, temperature=temperature)
            assert r.status_code < 500, (recipe, r.text)
    r = httpx.post(f"{url}/v1/geosteer/recipes", json={"name": "edge", "recipe": edge[0]}, headers=admin, timeout=60)
    assert r.status_code == 201, r.text
    assert _complete(url, "edge", temperature=1.0).status_code < 500


def _still_answers(server: dict) -> None:
    time.sleep(6)  # an engine failure took the server down within 5 s
    url = server["url"]
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    for recipe in (None, {"vectors": "vec", "vector_scale": 2, "vector_from": 1}):
        r = _complete(url, server["base"], geosteer_recipe=recipe, max_tokens=3, logprobs=1)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text
        lps = r.json()["choices"][0]["logprobs"]["token_logprobs"]  # no NaN left behind in reused KV blocks
        assert all(math.isfinite(x) and x > -100 for x in lps), lps
    assert "EngineCore encountered" not in server["log"].read_text()


def test_the_compiled_server_refuses_every_number_out_of_range_and_goes_on(compiled):
    assert "steering inside vLLM's compiled graph" in compiled["log"].read_text()
    _hostile(compiled)
    _still_answers(compiled)


def test_the_eager_server_refuses_every_number_out_of_range_and_goes_on(eager):
    assert "steering eager" in eager["log"].read_text()
    _hostile(eager)
    _still_answers(eager)


def _documented_captures() -> list[dict]:
    """The JSON requests of docs/serving.md's "Reading activations", as written there."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("### Reading activations", 1)[1].split("\n#", 1)[0]
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, flags=re.S)]


def test_the_documented_capture_requests_return_activations(eager):
    docs = _documented_captures()
    assert {("prompt" in d, "messages" in d) for d in docs} == {(True, False), (False, True)}
    for doc in docs:
        path = "/v1/completions" if "prompt" in doc else "/v1/chat/completions"
        r = httpx.post(f"{eager['url']}{path}", json=doc, timeout=300)
        assert r.status_code == 200, r.text
        out = r.json()
        acts, n = out["geosteer_activations"], out["usage"]["prompt_tokens"]
        assert sorted(acts, key=int) == [str(x) for x in doc["geosteer_capture"]["layers"]]
        for rows in acts.values():
            assert len(rows) == n and {len(row) for row in rows} == {576}
            t = torch.tensor(rows)
            assert bool(torch.isfinite(t).all()), (t.isnan().sum(), t.abs().max(dim=1))


def test_a_capture_past_the_limit_is_400_with_the_limits_message(eager):
    for path, doc in (("/v1/completions", {"prompt": "The river flowed"}),
                      ("/v1/chat/completions", {"messages": [{"role": "user", "content": "The river flowed"}]})):
        body = {**doc, "max_tokens": 8, "geosteer_capture": {"point": "resid_post", "layers": list(range(30)),
                                                             "positions": "all"}}
        r = httpx.post(f"{eager['url']}{path}", json=body, timeout=300)
        assert r.status_code == 400 and "over this server's limit of 100000" in r.json()["error"]["message"], r.text
    _still_answers(eager)


def test_the_capture_folder_is_removed_after_sigterm(eager):
    folders = list(eager["tmp"].glob("geosteer-capture-*"))
    assert len(folders) == 1 and not list(folders[0].iterdir())  # read captures are removed at once
    stop_server(eager["proc"])
    assert not folders[0].exists()
