"""Studio hardening probes (issue 11): CSRF, headers, whole-request validation, the generation queue,
body and prompt edge cases, the workspace option. Every refused request must answer a 4xx with a one-line
JSON error AND leave the state as it was (version, history, coefficients, artifact, files on disk)."""

from __future__ import annotations

import json
import re
import sys
import threading
import time

import pytest
import torch
from starlette.testclient import TestClient

from geosteer.studio.server import create_app
from geosteer.studio.session import coeff_digest
from geosteer.studio.worker import ModelWorker, QueueFull

PROMPT = "The theory of relativity states that"
POSTS = ["/api/edit", "/api/effect", "/api/save", "/api/load", "/api/undo"]
VALID = {"/api/edit": {"op": "zero", "scope": "layer", "layer": 1},
         "/api/effect": {"max_new_tokens": 2},
         "/api/save": {"name": "kept", "overwrite": True},
         "/api/load": {"name": "kept"},
         "/api/undo": {}}


@pytest.fixture(scope="module")
def env(studio_env):
    return studio_env("hard", seed=0, max_new_tokens_cap=8, max_queue=2,
                      hosts=("testserver", "127.0.0.1", "localhost"))


def snapshot(env) -> tuple:
    """Everything a refused request must leave alone: session state and every file in the workspace."""
    s = env["session"]
    files = sorted((str(p.relative_to(env["ws"])), p.stat().st_mtime_ns, p.stat().st_size)
                   for p in env["ws"].rglob("*"))
    return (s.version, [r.spec.describe() for r in s.history], coeff_digest(s.bank.coefficients),
            s.artifact_name, len(s.bank.history), files)


def one_line_error(r) -> str:
    d = r.json()
    assert set(d) == {"error"} and "\n" not in d["error"] and "Traceback" not in r.text, r.text
    return d["error"]


# ---- CSRF --------------------------------------------------------------------------------------------------
CSRF_CASES = {
    "text/plain": ({"Content-Type": "text/plain"}, True, "Content-Type must be application/json"),
    "form": ({"Content-Type": "application/x-www-form-urlencoded"}, True, "Content-Type must be"),
    "no content type": ({}, True, "Content-Type must be"),
    "foreign origin": ({"Content-Type": "application/json", "Origin": "http://evil.com"}, True,
                       "another origin"),
    "null origin": ({"Content-Type": "application/json", "Origin": "null"}, True, "another origin"),
    "other port": ({"Content-Type": "application/json", "Origin": "http://testserver:9999"}, True,
                   "another origin"),
    "cross-site": ({"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, True, "cross-site"),
    "same-site": ({"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}, True, "cross-site"),
    "missing token": ({"Content-Type": "application/json"}, False, "missing X-Geosteer-Token"),
    "wrong token": ({"Content-Type": "application/json", "X-Geosteer-Token": "x" * 43}, False,
                    "wrong X-Geosteer-Token"),
}


@pytest.mark.parametrize("path", POSTS)
@pytest.mark.parametrize("case", list(CSRF_CASES))
def test_csrf_refused_and_nothing_changes(env, path, case):
    headers, with_token, msg = CSRF_CASES[case]
    if with_token:
        headers = {**headers, "X-Geosteer-Token": env["token"]}
    raw = TestClient(env["app"], raise_server_exceptions=False)  # no default token
    before = snapshot(env)
    r = raw.post(path, content=json.dumps(VALID[path]).encode(), headers=headers)
    assert r.status_code == 403 and msg in one_line_error(r)
    assert snapshot(env) == before


def test_same_origin_request_with_token_passes(env):
    c = env["client"]
    r = c.post("/api/effect", json={"max_new_tokens": 2}, headers={"Origin": "http://testserver",
                                                                     "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 200, r.text
    assert c.post("/api/effect", json={"max_new_tokens": 2},
                  headers={"Content-Type": "application/json; charset=utf-8"}).status_code == 200


def test_page_carries_token_nonce_and_security_headers(env):
    c = env["client"]
    r = c.get("/")
    token = re.search(r'<meta name="geosteer-token" content="([^"]+)">', r.text).group(1)
    assert token == env["token"] == c.get("/api/boot").json()["token"]
    csp = r.headers["content-security-policy"]
    nonce = re.search(r"'nonce-([^']+)'", csp).group(1)
    scripts = re.findall(r"<script[^>]*>", r.text)
    assert scripts and all(f'nonce="{nonce}"' in t for t in scripts)
    assert "frame-ancestors 'none'" in csp and "unsafe-eval" not in csp and "connect-src 'self'" in csp
    assert c.get("/").headers["content-security-policy"] != csp  # a fresh nonce per response
    for path in ("/", "/api/info", "/static/app.js", "/api/nope", "/results"):
        h = c.get(path).headers
        assert h["x-frame-options"] == "DENY" and h["x-content-type-options"] == "nosniff", path
        assert h["referrer-policy"] == "no-referrer" and "frame-ancestors 'none'" in h["content-security-policy"]
    assert "default-src 'none'" in c.get("/api/info").headers["content-security-policy"]


# ---- whole-request validation (issue item 6) ----------------------------------------------------------------
BAD_EFFECTS = [([1], "effect must be an object"), ({"reference": "x"}, "reference must be"),
               ({"max_new_tokens": 10_000}, "max_new_tokens must be"), ({"path": "/etc"}, "unknown field"),
               ({"prompt": "\ud800"}, "lone surrogate"), ({"prompt": "  "}, "non-empty"),
               ({"prompt": "word " * 400}, "at most 256"), ("x", "effect must be an object")]


@pytest.mark.parametrize("effect,msg", BAD_EFFECTS)
def test_edit_with_bad_effect_changes_nothing(env, effect, msg):
    before = snapshot(env)
    body = json.dumps({"op": "invert", "scope": "layer", "layer": 0, "effect": effect})  # ASCII: \ud800 as is
    r = env["client"].post("/api/edit", content=body.encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and msg in one_line_error(r)
    assert snapshot(env) == before


@pytest.mark.parametrize("body,msg", [
    (b'{"op": "set", "layer": 0, "head": 0, "dim": 0, "row": 1, "col": 1, "value": NaN}', "not a number"),
    (b'{"op": "scale", "layer": 0, "head": 0, "dim": 0, "factor": Infinity}', "not a number"),
    (b'{"op": "scale", "layer": 0, "head": 0, "dim": 0, "factor": 1e999}', "|factor|"),
    (b"[" * 30_000 + b"]" * 30_000, "nested too deeply"),
    (b'{"op": "zero", "layer": 0, "head": 0, "dim": 0, "bogus": 1}', "unknown edit field"),
    (b'{"op": "zero", "layer": true, "head": 0, "dim": 0}', "layer must be an integer"),  # true is not 1
    (b'{"op": "zero", "layer": 0, "head": 0, "dim": 0.0}', "dim must be an integer"),
])
def test_bad_edit_bodies(env, body, msg):
    before = snapshot(env)
    r = env["client"].post("/api/edit", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and msg in one_line_error(r)
    assert snapshot(env) == before


def test_lone_surrogate_prompt_is_400(env):
    c = env["client"]
    r = c.post("/api/effect", content=b'{"prompt": "bad \\ud800 text"}', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "lone surrogate" in one_line_error(r)
    # a surrogate's bytes in a query string are decoded with replacement characters: a valid prompt
    r = c.get("/api/surface?layer=0&head=0&dim=0&tokens=0&prompt=%ED%B2%80x")
    assert r.status_code == 200, r.text


def test_chunked_body_over_the_limit_is_413_and_under_it_works(env):
    c = env["client"]
    before = snapshot(env)

    def chunks(n):
        for _ in range(n):
            yield b" " * 1000

    r = c.post("/api/save", content=chunks(70), headers={"Content-Type": "application/json"})
    assert r.request.headers.get("transfer-encoding") == "chunked" and "content-length" not in r.request.headers
    assert r.status_code == 413 and "too large" in one_line_error(r)
    assert snapshot(env) == before

    def small():
        yield b'{"max_new_tokens": '
        yield b"2}"

    assert c.post("/api/effect", content=small(), headers={"Content-Type": "application/json"}).status_code == 200


# ---- the generation queue (issue item 8) -------------------------------------------------------------------
@pytest.mark.serial
def test_full_queue_is_503_with_retry_after_and_reads_do_not_wait(env):
    s, c = env["session"], env["client"]
    gate = threading.Event()
    blockers = [s.worker.run("generate", lambda: gate.wait(30)) for _ in range(2)]  # limit is 2
    try:
        before = snapshot(env)
        r = c.post("/api/effect", json={"prompt": "a fresh prompt", "max_new_tokens": 3})
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1 and "busy" in one_line_error(r)
        r = c.post("/api/edit", json={"op": "zero", "scope": "layer", "layer": 2,
                                      "effect": {"prompt": "another prompt", "max_new_tokens": 3}})
        assert r.status_code == 503 and snapshot(env) == before  # the edit was not applied
        t0 = time.perf_counter()
        info = c.get("/api/info").json()
        assert info["queue"]["generate"] == 2 and info["queue"]["limit"] == 2
        assert c.get("/api/rank", params={"by": "norm"}).status_code == 200
        assert c.get("/api/surface", params={"layer": 1, "head": 0, "dim": 0, "tokens": 0}).status_code == 200
        assert c.get("/static/app.js").status_code == 200 and c.get("/results").status_code == 200
        # an edit without an effect needs no model pass: applied at once
        assert c.post("/api/edit", json={"op": "zero", "layer": 2, "head": 0, "dim": 0}).status_code == 200
        assert c.post("/api/undo", json={}).status_code == 200
        assert time.perf_counter() - t0 < 5
    finally:
        gate.set()
    for f in blockers:
        f.result(timeout=30)
    assert c.get("/api/info").json()["queue"]["generate"] == 0


def test_worker_runs_analysis_before_queued_generations_and_survives_errors():
    w = ModelWorker(max_queue=5, max_analysis=5)
    gate, order = threading.Event(), []
    first = w.run("generate", lambda: gate.wait(30))
    gens = [w.run("generate", lambda i=i: order.append(f"g{i}")) for i in range(3)]
    ana = w.run("analysis", lambda: order.append("a"))
    boom = w.run("analysis", lambda: 1 / 0)
    with pytest.raises(QueueFull):
        [w.reserve("generate") for _ in range(2)]  # 4 pending + 1 fits, the next one not
    gate.set()
    for f in [first, *gens, ana]:
        f.result(timeout=30)
    with pytest.raises(ZeroDivisionError):
        boom.result(timeout=30)
    assert order == ["a", "g0", "g1", "g2"]
    w2 = ModelWorker(max_queue=1)
    t = w2.reserve("generate")
    with pytest.raises(QueueFull):
        w2.reserve("generate")
    t.cancel()
    assert w2.run("generate", lambda: 7).result(timeout=30) == 7


def test_effect_is_computed_on_the_state_it_was_asked_for(env):
    """A generation queued before an edit reports (and computes) the state of when it was asked."""
    s, c = env["session"], env["client"]
    gate = threading.Event()
    blocker = s.worker.run("analysis", lambda: gate.wait(30))
    try:
        fut = s.submit_effect({"prompt": "Paris is", "max_new_tokens": 4, "reference": "none"})
        v0 = s.version
        assert c.post("/api/edit", json={"op": "scale", "scope": "layer", "layer": 1, "factor": 3.0}).status_code \
            == 200
    finally:
        gate.set()
    blocker.result(timeout=30)
    e = fut.result(timeout=60)
    assert e["version"] == v0 != s.version
    c.post("/api/undo", json={})
    assert s.version == v0
    assert s.effect("Paris is", 4, "none")["after"]["token_ids"] == e["after"]["token_ids"]


# ---- CLI ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sub", ["", "/inner"])
def test_cli_workspace_that_is_a_file(tmp_path, monkeypatch, capsys, sub):
    import uvicorn

    from geosteer import cli

    f = tmp_path / "afile"
    f.write_text("keep me")
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("server started"))
    monkeypatch.setattr(sys, "argv", ["geosteer", "studio", "--model", "tiny-llama", "--workspace", f"{f}{sub}"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith("error: --workspace") and "\n" not in err and "a file" in err
    assert f.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_edit_that_would_overflow_is_refused_whole(env):
    """Scaling by 1000 again and again: the edit that would overflow float32 is refused and undone exactly."""
    c, s = env["client"], env["session"]
    start, applied = s.version, 0
    for _ in range(30):
        before = snapshot(env)
        r = c.post("/api/edit", json={"op": "scale", "layer": 0, "head": 1, "dim": 2, "factor": 1000})
        if r.status_code == 400:
            assert re.search("non-finite|overflow", one_line_error(r)) and snapshot(env) == before
            break
        assert r.status_code == 200
        applied += 1
    else:
        pytest.fail("30 scalings by 1000 never overflowed")
    assert applied >= 5 and torch.isfinite(s.bank.coefficients).all()
    for _ in range(applied):
        c.post("/api/undo", json={})
    assert s.version == start


def test_loading_a_non_finite_artifact_is_refused_and_changes_nothing(env):
    """A NaN planted in a workspace artifact (checksum updated, so only the value check can catch it)."""
    import hashlib
    import shutil

    from safetensors.torch import load_file, save_file

    bad = env["ws"] / "nan-planted"
    shutil.copytree(env["ws"] / "kept", bad)
    tensors = load_file(str(bad / "surfaces.safetensors"))
    tensors["coefficients"][1, 2, 3, 0, 0] = float("nan")
    save_file(tensors, str(bad / "surfaces.safetensors"))
    cfg = json.loads((bad / "geosteer_config.json").read_text())
    cfg["sha256"] = hashlib.sha256((bad / "surfaces.safetensors").read_bytes()).hexdigest()
    (bad / "geosteer_config.json").write_text(json.dumps(cfg))
    try:
        before = snapshot(env)
        r = env["client"].post("/api/load", json={"name": "nan-planted"})
        assert r.status_code == 400 and re.search("finite|NaN|nan", one_line_error(r)), r.text
        assert snapshot(env) == before
        assert env["client"].post("/api/effect", json={"max_new_tokens": 2}).status_code == 200
    finally:
        shutil.rmtree(bad)


def test_live_server_chunked_body_and_csrf(env):
    """The same probes through a real uvicorn server (HTTP/1.1 chunked framing parsed by uvicorn)."""
    import httpx

    from geosteer.studio.server import serve_in_thread

    url, stop = serve_in_thread(env["app"])
    try:
        before = snapshot(env)
        with httpx.Client(base_url=url, timeout=60) as c:
            r = c.post("/api/save", content=(b" " * 1000 for _ in range(70)),
                       headers={"Content-Type": "application/json", "X-Geosteer-Token": env["token"]})
            assert r.status_code == 413 and "too large" in one_line_error(r)
            r = c.post("/api/save", content=b'{"name": "kept", "overwrite": true}',
                       headers={"Content-Type": "text/plain", "Origin": "http://evil.com"})
            assert r.status_code == 403 and one_line_error(r)
            assert c.get("/api/info").status_code == 200
        assert snapshot(env) == before
    finally:
        stop()


# ---- Host check (Starlette's TrustedHostMiddleware, answered 421) -----------------------------------------
@pytest.mark.parametrize("host,ok", [
    ("testserver", True), ("127.0.0.1:8765", True), ("LOCALHOST", True), ("localhost:1", True),
    ("evil.example", False), ("evil.example:8765", False), ("127.0.0.1.evil.com", False), ("x.localhost", False),
    ("127.0.0.1:abc", False), ("evil@127.0.0.1", False), ("127.0.0.1/x", False), ("127.0.0.1 :80", False),
])
def test_host_check(env, host, ok):
    c = env["client"]
    r = c.get("/api/info", headers={"Host": host})
    if ok:
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 421 and "not allowed" in one_line_error(r)
    assert r.headers["x-frame-options"] == "DENY" and "default-src 'none'" in r.headers["content-security-policy"]
    before = snapshot(env)  # a state-changing request from a foreign Host: 421 first, nothing changes
    r = c.post("/api/edit", json=VALID["/api/edit"], headers={"Host": host})
    assert r.status_code == 421 and snapshot(env) == before


def test_host_check_ipv6_and_bind_all(env):
    import geosteer.cli  # noqa: F401 - first: it registers geosteer.studio.cli
    from geosteer.studio.cli import allowed_hosts

    app = create_app(env["session"], [], allowed_hosts=allowed_hosts("::1"))
    c = TestClient(app, raise_server_exceptions=False)
    assert c.get("/api/info", headers={"Host": "[::1]:8765"}).status_code == 200
    for bad in ("[::1]evil", "[::2]:8765", "::1"):
        assert c.get("/api/info", headers={"Host": bad}).status_code == 421, bad
    assert allowed_hosts("2001:db8::5")[-1] == "[2001:db8::5]" and allowed_hosts("0.0.0.0") is None
    app = create_app(env["session"], [], allowed_hosts=allowed_hosts("0.0.0.0"))  # --host 0.0.0.0: any name
    assert TestClient(app).get("/api/info", headers={"Host": "any.name:1"}).status_code == 200


# ---- GETs that run the model: token + same origin, per-client cap ------------------------------------------
COMPUTE_GETS = ["/api/rank?by=sensitivity&prompt=flood%201", "/api/surface?layer=1&head=0&dim=0",
                "/api/rank?by=norm"]


@pytest.mark.parametrize("url", COMPUTE_GETS)
@pytest.mark.parametrize("headers,needle", [
    ({}, "missing X-Geosteer-Token"),
    ({"X-Geosteer-Token": "x" * 43}, "wrong X-Geosteer-Token"),
    ({"TOKEN": 1, "Origin": "http://evil.com"}, "another origin"),
    ({"TOKEN": 1, "Sec-Fetch-Site": "cross-site"}, "cross-site"),
])
def test_compute_gets_need_the_token_and_the_same_origin(env, url, headers, needle):
    if headers.pop("TOKEN", None):
        headers["X-Geosteer-Token"] = env["token"]
    raw = TestClient(env["app"], raise_server_exceptions=False)
    depth, before = env["session"].worker.completed, snapshot(env)
    r = raw.get(url, headers=headers)
    assert r.status_code == 403 and needle in one_line_error(r)
    assert env["session"].worker.completed == depth and snapshot(env) == before  # no model pass was queued


def test_compute_gets_with_the_token_and_plain_reads_without_it_pass(env):
    raw = TestClient(env["app"], raise_server_exceptions=False)
    for url in COMPUTE_GETS:
        assert raw.get(url, headers={"X-Geosteer-Token": env["token"], "Sec-Fetch-Site": "same-origin"}).status_code \
            == 200, url
    for url in ("/api/info", "/api/boot", "/"):  # no model pass: readable as before (the page boots from them)
        assert raw.get(url).status_code == 200, url


def test_compute_gets_are_capped_per_client():
    import asyncio

    from geosteer.studio.security import Guard

    release = asyncio.Event()

    async def slow_app(scope, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = Guard(slow_app, token="t", limit=1000, per_client=3)

    async def get(client: str, path: str = "/api/rank") -> int:
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(msg):
            sent.append(msg)

        scope = {"type": "http", "method": "GET", "path": path, "client": (client, 5000),
                 "headers": [(b"host", b"testserver"), (b"x-geosteer-token", b"t")]}
        await guard(scope, receive, send)
        start = sent[0]
        if start["status"] == 429:
            assert (b"retry-after", b"1") in start["headers"] and b"limit 3" in sent[1]["body"]
        return start["status"]

    async def main():
        held = [asyncio.create_task(get("127.0.0.1")) for _ in range(3)]
        await asyncio.sleep(0.01)
        over = await get("127.0.0.1", "/api/surface")  # a 4th from the same client: refused at once
        other = asyncio.create_task(get("10.0.0.2"))  # another client has its own budget
        await asyncio.sleep(0.01)
        release.set()
        return over, [await t for t in held], await other, await get("127.0.0.1")

    over, held, other, after = asyncio.run(main())
    assert over == 429 and held == [200, 200, 200] and other == 200 and after == 200
