"""Studio API on a tiny model with random surfaces: effects, edits, undo, save/load, pages, security."""

from __future__ import annotations

import base64
import json
import socket
import sys

import numpy as np
import pytest
import torch
from scipy.special import rel_entr

import geosteer.manifold as M
from geosteer.eval.generation import generate
from geosteer.io_utils import write_records
from geosteer.kernels.bspline import bspline_basis_reference
from geosteer.studio.session import coeff_digest
from tests.studio.conftest import installed_bank

PROMPT = "The theory of relativity states that"


@pytest.fixture(scope="module")
def env(studio_env):
    env = studio_env("studio", seed=0, results=("results",), keep=False, max_new_tokens_cap=32,
                     hosts=("testserver", "127.0.0.1", "localhost"))
    root = env["root"]
    write_records(root / "results" / "decomp.json", [{"layer": i, "parallel_ratio": 0.1 * i} for i in range(3)],
                  {"study": "decomposition"})
    (root / "secret.json").write_text(json.dumps({"rows": [{"layer": 1, "x": 2}, {"layer": 2, "x": 3}]}))
    return env


def _arr(v):
    """A plotly JSON array (plain list, or plotly 6+'s base64 typed array) as numpy."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        return a.reshape([int(x) for x in str(v["shape"]).split(",")]) if "shape" in v else a
    return np.asarray(v)


def _logp(model, tok, prompt):
    ids = tok(prompt, return_tensors="pt").input_ids  # as the tokenizer encodes it (its own BOS convention)
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=ids).logits[0, -1].double(), -1).numpy()


def test_page_and_static(env):
    c = env["client"]
    r = c.get("/")
    assert r.status_code == 200 and "geosteer studio" in r.text and "/static/app.js" in r.text
    js = c.get("/static/plotly.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000
    assert c.get("/static/app.js").status_code == 200
    assert c.get("/static/nope.js").status_code == 404


def test_info_describes_the_bank(env):
    d = env["client"].get("/api/info").json()
    assert d["layers"] == [0, 1, 2] and d["heads"] == 4 and d["dims"] == 16 and d["K"] == 7
    assert d["ranges"]["1"] == [-3.0, 3.0] and d["max_new_tokens_cap"] == 32
    assert [r["id"] for r in d["results"]] == ["0/decomp.json"]


def test_surface_heights_match_an_independent_spline(env):
    s = env["session"]
    d = env["client"].get("/api/surface", params={"layer": 1, "head": 2, "dim": 5, "prompt": PROMPT,
                                                  "n": 16}).json()
    c = s.bank.coefficients[1, 2, 5].detach().double().numpy()
    # token dots: S at each token's self-pair, by scipy's B-spline basis (independent of the bank)
    q = np.array([t["q"] for t in d["tokens"]])
    k = np.array([t["k"] for t in d["tokens"]])
    bq, bk = bspline_basis_reference(q, 4, -3, 3), bspline_basis_reference(k, 4, -3, 3)
    ref = np.einsum("ta,ab,tb->t", bq, c, bk)
    np.testing.assert_allclose([t["s"] for t in d["tokens"]], ref, atol=1e-5)
    # the prompt as the tokenizer encodes it (SmolLM2's tokenizer puts no BOS first)
    want = s.tok.convert_ids_to_tokens(s.tok(PROMPT)["input_ids"])[:2]
    assert [t["token"] for t in d["tokens"]][:2] == [x.replace("Ġ", " ") for x in want] == ["The", " theory"]
    # the heatmap grid: z[i, j] = S(q_i, k_j), rows along the query axis
    hm = d["figures"]["heatmap"]["data"][0]
    qs, ks = _arr(hm["y"]), _arr(hm["x"])
    z_ref = bspline_basis_reference(qs, 4, -3, 3) @ c @ bspline_basis_reference(ks, 4, -3, 3).T
    np.testing.assert_allclose(_arr(hm["z"]), z_ref, atol=1e-5)
    assert np.asarray(d["coeffs"]).shape == (7, 7)
    # without tokens (the page's first paint): same surface, no dots, no model pass needed
    d0 = env["client"].get("/api/surface", params={"layer": 1, "head": 2, "dim": 5, "n": 16, "tokens": 0}).json()
    assert d0["tokens"] == [] and len(d0["figures"]["heatmap"]["data"]) == 1
    np.testing.assert_array_equal(_arr(d0["figures"]["heatmap"]["data"][0]["z"]), _arr(hm["z"]))


def test_edit_changes_continuation_and_kl_is_independent(env):
    c, s, model, tok = env["client"], env["session"], env["model"], env["tok"]
    ref = _logp(model, tok, PROMPT)
    r = c.post("/api/edit", json={"op": "invert", "scope": "layer", "layer": 0,
                                  "effect": {"prompt": PROMPT, "max_new_tokens": 12, "reference": "loaded"}})
    assert r.status_code == 200, r.text
    e = r.json()["effect"]
    assert e["changed"] and e["before"]["text"] != e["after"]["text"]
    assert len(e["after"]["token_ids"]) == 12 and len(e["after"]["top"]) == 10
    now = _logp(model, tok, PROMPT)
    assert e["after"]["token_ids"] == generate(model, tok, PROMPT, 12).token_ids
    assert e["kl"] == pytest.approx(float(rel_entr(np.exp(ref), np.exp(now)).sum()), rel=1e-4, abs=1e-7)
    assert e["after"]["top"][0]["p"] == pytest.approx(float(np.exp(now.max())), rel=1e-4)
    # undo restores the coefficients exactly and the "now" state equals the loaded one again
    assert c.post("/api/undo", json={}).json()["undone"] == "invert layer L0"
    assert torch.equal(s.bank.coefficients.detach(), s.loaded_coeffs)
    e2 = c.post("/api/effect", json={"prompt": PROMPT, "max_new_tokens": 12}).json()
    assert not e2["changed"] and e2["kl"] == 0.0
    assert c.post("/api/undo", json={}).json()["undone"] is None


def test_control_point_edit_and_history(env):
    c, s = env["client"], env["session"]
    r = c.post("/api/edit", json={"op": "set", "layer": 2, "head": 1, "dim": 3, "row": 4, "col": 2,
                                  "value": 0.75})
    assert r.status_code == 200 and "effect" not in r.json()
    assert float(s.bank.coefficients.detach()[2, 1, 3, 4, 2]) == 0.75
    assert c.get("/api/info").json()["history"] == ["set 0.75 surface L2 H1 D3 rows 4–4 cols 2–2"]
    c.post("/api/undo", json={})


def test_save_load_roundtrip(env):
    c, s, ws = env["client"], env["session"], env["ws"]
    r = c.post("/api/edit", json={"op": "grid-wall", "scope": "head", "layer": 1, "head": 0, "rows": [0, 2]})
    assert r.status_code == 200, r.text
    edited = s.bank.coefficients.detach().clone()
    d = c.post("/api/save", json={"name": "walled"}).json()
    assert d["digest"] == coeff_digest(edited)
    loaded = M.load(ws / "walled", model=env["model"])
    assert torch.equal(loaded.coefficients.detach(), edited)
    assert loaded.history[-1]["op"] == "grid-wall"  # the studio's wall is the control-point wall
    assert c.post("/api/save", json={"name": "walled"}).status_code == 409
    assert c.post("/api/save", json={"name": "walled", "overwrite": True}).status_code == 200
    c.post("/api/undo", json={})
    assert not torch.equal(s.bank.coefficients.detach(), edited)
    r = c.post("/api/load", json={"name": "walled"})
    assert r.status_code == 200 and r.json()["digest"] == d["digest"]
    assert torch.equal(s.bank.coefficients.detach(), edited)
    assert c.get("/api/info").json()["artifact"] == "walled"
    assert c.post("/api/load", json={"name": "nope"}).json()["error"].startswith("no artifact 'nope'")


def test_result_pages(env):
    c = env["client"]
    r = c.get("/results/0/decomp.json")
    assert r.status_code == 200 and "decomposition: parallel_ratio vs layer" in r.text
    assert "/static/plotly.js" in r.text
    assert "0/decomp.json" in c.get("/results").text


@pytest.mark.parametrize("path", ["/results/0/../secret.json", "/results/0/%2e%2e/secret.json",
                                  "/results/0/..%2fsecret.json", "/results/1/secret.json",
                                  "/results/0//etc/passwd", "/results/0/%2fetc%2fpasswd",
                                  "/static/..%2fserver.py", "/static/%2e%2e%2f%2e%2e%2fcli.py"])
def test_no_reads_outside_roots(env, path):
    r = env["client"].get(path)
    assert r.status_code in (400, 404) and "error" in r.json()
    assert "Traceback" not in r.text and '"x"' not in r.text


@pytest.mark.parametrize("name", ["../escape", "/tmp/escape", "..", "a/../../b", "%2e%2e", ".hidden",
                                  "x" * 100, "", None, 5])
def test_no_writes_or_loads_outside_workspace(env, name):
    c, root = env["client"], env["root"]
    before = sorted(p.name for p in root.iterdir())
    r = c.post("/api/save", json={"name": name})
    assert r.status_code == 400 and "artifact name" in r.json()["error"]
    assert c.post("/api/load", json={"name": name}).status_code == 400
    assert sorted(p.name for p in root.iterdir()) == before


@pytest.mark.parametrize("body,status,msg", [
    (b"{not json", 400, "malformed JSON"),
    (b"[1, 2]", 400, "must be an object"),
    (b"\xff\xfe", 400, "malformed JSON"),
    (json.dumps({"op": "invert", "layer": "zero"}).encode(), 400, "layer must be an integer (got 'zero')"),
    (json.dumps({"op": "invert", "layer": 99}).encode(), 400, "layer must be one of"),
    (json.dumps({"op": "invert", "layer": 0, "head": 0, "dim": 0,
                 "effect": {"max_new_tokens": 10_000}}).encode(),
     400, "max_new_tokens must be an integer in 1–32"),
    (json.dumps({"op": "invert", "layer": 0, "head": 0, "dim": 0, "effect": [1]}).encode(), 400,
     "effect must be an object"),
    (b"x" * 70_000, 413, "too large"),
])
def test_bad_requests_get_4xx_with_message(env, body, status, msg):
    r = env["client"].post("/api/edit", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status and msg in r.json()["error"]
    assert "Traceback" not in r.text
    env["session"].undo()  # in case an edit slipped through


@pytest.mark.parametrize("path,params,msg", [
    ("/api/surface", {"layer": "a", "head": 0, "dim": 0}, "layer must be an integer"),
    ("/api/surface", {"layer": 9, "head": 0, "dim": 0}, "layer 9 has no surfaces"),
    ("/api/surface", {"layer": 0, "head": 0, "dim": 99}, "dim 99 out of range"),
    ("/api/surface", {"layer": 0, "head": 0, "dim": 0, "tokens": "yes"}, "tokens must be 0 or 1"),
    ("/api/rank", {"by": "magic"}, "by must be"),
    ("/api/rank", {"top": 10_000}, "top must be"),
])
def test_bad_queries(env, path, params, msg):
    r = env["client"].get(path, params=params)
    assert r.status_code == 400 and msg in r.json()["error"]


def test_effect_caps_and_prompt_limits(env):
    c = env["client"]
    assert "1–32" in c.post("/api/effect", json={"max_new_tokens": 33}).json()["error"]
    assert "at most 256" in c.post("/api/effect", json={"prompt": "word " * 400}).json()["error"]
    assert "reference must be" in c.post("/api/effect", json={"reference": "x"}).json()["error"]
    assert "unknown field" in c.post("/api/effect", json={"path": "/etc"}).json()["error"]


def test_foreign_host_refused_and_internal_errors_hide_traceback(env, monkeypatch):
    c = env["client"]
    assert c.get("/api/info", headers={"Host": "evil.example:8765"}).status_code == 421

    def boom(*a, **k):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(env["session"], "rank", boom)
    r = c.get("/api/rank")
    assert r.status_code == 500 and r.json() == {"error": "internal error (RuntimeError); see the server log"}


def test_sensitivity_is_the_first_order_zeroing_effect(env):
    """|<dlogp/dC, C>| against the actual change of log p(top) when each surface is zeroed."""
    from geosteer.studio.bankio import sensitivity

    model, tok = env["model"], env["tok"]
    bank = installed_bank(model, seed=1, scale=0.02)  # replaces the session's bank on the model for now
    scores = sensitivity(model, tok, bank, PROMPT)
    base = _logp(model, tok, PROMPT)
    top = int(base.argmax())
    flat = scores.reshape(-1)
    for i in torch.topk(flat, 3).indices.tolist() + [int(flat.argmin())]:
        slot, rest = divmod(i, 4 * 16)
        h, d = divmod(rest, 16)
        saved = bank.coefficients[slot, h, d].detach().clone()
        with torch.no_grad():
            bank.coefficients[slot, h, d] = 0
        actual = abs(_logp(model, tok, PROMPT)[top] - base[top])
        with torch.no_grad():
            bank.coefficients[slot, h, d] = saved
        assert float(flat[i]) == pytest.approx(actual, rel=0.1, abs=1e-6)
    M.install(model, bank=env["session"].bank)


@pytest.mark.parametrize("host,warn", [(None, False), ("0.0.0.0", True)])
def test_cli_binds_loopback_by_default_and_warns_otherwise(tmp_path, monkeypatch, capsys, host, warn):
    import uvicorn

    from geosteer import cli

    seen = {}

    def serve(self, sockets=None):  # the CLI binds its socket first, then serves on it: record, do not serve
        seen.update(host=self.config.host, port=self.config.port, app=self.config.app,
                    bound=[s.getsockname()[1] for s in sockets or []])
        for s in sockets or []:
            s.close()

    monkeypatch.setattr(uvicorn.Server, "run", serve)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    argv = ["geosteer", "studio", "--model", "tiny-llama", "--workspace", str(tmp_path / "ws"), "--port", str(port)]
    monkeypatch.setattr(sys, "argv", argv + (["--host", host] if host else []))
    cli.main()
    M.uninstall(seen["app"].state.session.model)
    err = capsys.readouterr().err
    assert seen["host"] == (host or "127.0.0.1") and seen["port"] == port and seen["bound"] == [port]
    assert ("warning: binding 0.0.0.0" in err) == warn
    assert (tmp_path / "ws").is_dir()


def test_cli_rejects_bad_options(monkeypatch, capsys):
    from geosteer import cli

    monkeypatch.setattr(sys, "argv", ["geosteer", "studio", "--port", "70000"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2 and "--port must be in 1–65535" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["port in use", "bad host", "unbindable host", "missing results"])
def test_studio_refuses_its_address_before_the_model_loads(monkeypatch, capsys, tmp_path, case):
    import socket

    from tests.cli_helpers import refused_before_load

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = str(taken.getsockname()[1])
    args = {"port in use": ["--port", port], "bad host": ["--host", "not a host!"],
            "unbindable host": ["--host", "192.0.2.1"],  # TEST-NET-1: no interface of this machine has it
            "missing results": ["--results", str(tmp_path / "nope")]}[case]
    try:
        err = refused_before_load(monkeypatch, capsys, "studio", "-m", "tiny-llama", "--workspace",
                                  str(tmp_path / "ws"), *args)
    finally:
        taken.close()
    needle = {"port in use": f"cannot listen on 127.0.0.1:{port}", "bad host": "neither an IP address nor a host",
              "unbindable host": "cannot listen on 192.0.2.1", "missing results": "--results folder not found"}[case]
    assert needle in err and not (tmp_path / "ws").exists()
