"""``geosteer serve`` end to end: the OpenAI server on 127.0.0.1 with one recipe (bounded requests)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import httpx  # noqa: E402

from tests.serve.helpers import hf_greedy, prompt_ids  # noqa: E402

NEW = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from geosteer.recipe import InterventionSpec, save_recipe

    folder = save_recipe(tmp_path_factory.mktemp("r") / "bold", InterventionSpec(
        scale_site="attn_out", scale_par=2.0, scale_perp=0.5, alpha_mlp=1.3), base_model="smollm2")
    port = _free_port()
    exe = Path(sys.executable).parent / "geosteer"
    log = open(tmp_path_factory.mktemp("log") / "server.log", "w")  # noqa: SIM115 - closed below
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.Popen([str(exe), "serve", "-m", "smollm2", "--recipe", f"bold={folder}", "--port", str(port),
                             "--", "--max-model-len", "256"], stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # engine start: minutes on a busy 2-core machine
            if proc.poll() is not None:
                raise AssertionError(f"server exited {proc.returncode}: {Path(log.name).read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            raise AssertionError("server did not come up in 600 s")
        yield url, str(folder)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_models_and_bad_names(server):
    url, _ = server
    assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == ["smollm2", "bold"]
    r = httpx.post(f"{url}/v1/completions", json={"model": "nope", "prompt": "Hi", "max_tokens": 2})
    assert r.status_code == 404 and "valid: smollm2, bold" in r.json()["error"]["message"]


def test_each_request_gets_its_recipe(server):
    from geosteer.models.loading import load_model
    from geosteer_vllm.plan import spec_of

    url, folder = server
    model, tok = load_model("smollm2")
    (ids,) = prompt_ids(tok, 1)
    stock, _ = hf_greedy(model, [ids], NEW)
    bold, _ = hf_greedy(model, [ids], NEW, spec_of(folder)[0].build(model))
    assert stock != bold  # the recipe changes this continuation

    def complete(**fields):
        body = {"prompt": ids, "max_tokens": NEW, "temperature": 0.0, "ignore_eos": True,
                "return_token_ids": True, **fields}
        r = httpx.post(f"{url}/v1/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["token_ids"]

    assert complete(model="bold") == bold[0]
    assert complete(model="smollm2", geosteer_recipe="bold") == bold[0]
    assert complete(model="smollm2") == stock[0]


def test_hostile_requests_are_4xx_and_the_server_stays_up(server):
    url, _ = server
    bad = [
        ("/v1/completions", {"model": "smollm2", "prompt": "Hi", "max_tokens": 2, "geosteer_recipe": None,
                             "vllm_xargs": {"geosteer_recipe": "nope"}}, 404),
        ("/v1/responses", {"model": "smollm2", "input": "Hi", "max_output_tokens": 2,
                           "vllm_xargs": {"geosteer_recipe": "nope"}}, 404),
        ("/v1/completions", {"model": "smollm2", "prompt": "Hi", "max_tokens": 2,
                             "vllm_xargs": {"geosteer_spec": '{"scale_par": 2.0}'}}, 400),
        ("/v1/completions", {"model": "smollm2", "prompt": "Hi", "max_tokens": 2,
                             "geosteer_recipe": {"vectors": "../../etc"}}, 400),
        ("/v1/completions", {"model": "smollm2", "prompt": "Hi", "max_tokens": 2,
                             "geosteer_recipe": {"scale_par": {"x": 1}}}, 400),
        ("/v1/completions", {"model": "smollm2", "prompt": "Hi", "max_tokens": 2,
                             "geosteer_capture": {"layers": [0]}}, 400),  # captures are off here
    ]
    for path, body, status in bad:
        r = httpx.post(f"{url}{path}", json=body, timeout=60)
        assert r.status_code == status, (path, body, r.text)
    r = httpx.post(f"{url}/v1/geosteer/recipes", json={"name": "x", "recipe": {}}, timeout=60)
    assert r.status_code == 404  # no --admin-token: run-time recipes are off
    time.sleep(6)  # an engine failure took the server down within 5 s
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    r = httpx.post(f"{url}/v1/completions", json={"model": "bold", "prompt": "Hi", "max_tokens": 2}, timeout=300)
    assert r.status_code == 200, r.text
