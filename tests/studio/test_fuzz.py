"""Fuzz the studio API (issue 11): random JSON bodies to every POST endpoint and random query strings to
every GET endpoint, in-process (starlette TestClient, no network), bounded in count and time. Bars: never a
5xx, every 4xx is a one-line JSON error without a traceback, and a 4xx changes nothing (version, history,
coefficients, artifact name, files in the workspace)."""

from __future__ import annotations

import json
import random
import time

import pytest

from geosteer.studio.session import coeff_digest

N_REQUESTS = 400
MAX_SECONDS = 25.0
FIELDS = ["op", "scope", "layer", "head", "dim", "factor", "value", "rows", "cols", "row", "col", "effect",
          "prompt", "max_new_tokens", "reference", "name", "overwrite", "by", "top", "n", "tokens", "x"]
WORDS = ["invert", "zero", "scale", "set", "wall", "surface", "head", "layer", "loaded", "previous", "none",
         "kept", "../kept", "norm", "sensitivity", "all", "", " ", "\ud800", "\x00", "é", "NaN", "1e9", "-1",
         "0", "3", "word " * 300, "a" * 70, "/etc/passwd", "%2e%2e", ".hidden"]


def rand_value(rnd: random.Random, depth: int = 0):
    kind = rnd.choice(["int", "int", "float", "str", "str", "bool", "none", "list", "dict"][: 9 if depth < 3 else 7])
    if kind == "int":
        return rnd.choice([0, 1, 2, 3, 4, 6, 7, -1, 15, 16, 31, 32, 10**6, -(10**20), 2**63])
    if kind == "float":
        return rnd.choice([0.5, -1.0, 2.0, 1e3, 1e308, -0.0, 3.7, 1e-300])
    if kind == "str":
        return rnd.choice(WORDS)
    if kind == "bool":
        return rnd.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [rand_value(rnd, depth + 1) for _ in range(rnd.randrange(4))]
    return rand_body(rnd, depth + 1)


def rand_body(rnd: random.Random, depth: int = 0) -> dict:
    return {rnd.choice(FIELDS): rand_value(rnd, depth) for _ in range(rnd.randrange(6))}


@pytest.fixture(scope="module")
def env(studio_env):
    return studio_env("fuzz", seed=1, scale=0.3, max_new_tokens_cap=4)


def snapshot(env) -> tuple:
    s = env["session"]
    files = sorted((str(p.relative_to(env["ws"])), p.stat().st_mtime_ns) for p in env["ws"].rglob("*"))
    return (s.version, [r.spec.describe() for r in s.history], coeff_digest(s.bank.coefficients),
            s.artifact_name, files)


def test_random_requests_never_500_and_4xx_change_nothing(env):
    rnd = random.Random(1234)
    c = env["client"]
    posts = ["/api/edit", "/api/effect", "/api/save", "/api/load", "/api/undo"]
    gets = ["/api/rank", "/api/surface", "/api/boot", "/api/info"]
    seen: dict[int, int] = {}
    t0 = time.perf_counter()
    n = 0
    while n < N_REQUESTS and time.perf_counter() - t0 < MAX_SECONDS:
        n += 1
        before = snapshot(env)
        if rnd.random() < 0.7:
            path = rnd.choice(posts)
            roll = rnd.random()
            if roll < 0.8:
                body = json.dumps(rand_body(rnd)).encode()  # ASCII: lone surrogates stay escaped
            elif roll < 0.9:
                body = json.dumps(rand_value(rnd)).encode()
            else:
                body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 40)))
            r = c.post(path, content=body, headers={"Content-Type": "application/json"})
        else:
            path = rnd.choice(gets)
            params = {rnd.choice(FIELDS): str(rand_value(rnd))[:300] for _ in range(rnd.randrange(5))}
            r = c.get(path, params=params)
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        assert r.status_code < 500, (path, r.status_code, r.text[:300])
        if r.status_code >= 400:
            d = r.json()
            assert set(d) == {"error"} and "\n" not in d["error"] and "Traceback" not in r.text, r.text
            assert snapshot(env) == before, (path, r.status_code, d["error"])
    print(f"\nfuzz: {n} requests in {time.perf_counter() - t0:.1f} s, statuses {dict(sorted(seen.items()))}")
    assert n >= 100, f"only {n} requests in {MAX_SECONDS} s"
    assert seen.get(200, 0) > 0 and sum(v for k, v in seen.items() if k >= 400) > n // 3, seen
