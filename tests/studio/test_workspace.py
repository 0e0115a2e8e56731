"""Files the studio reads cannot stall or break it: workspace configs that are FIFOs, devices or nested too
deep, result files the reader cannot take, a workspace moved away, a full disk on save, the body limit's
edge, and a bad ``--set`` value refused before the model loads."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from geosteer.formats import CONFIG_NAME
from tests.cli.test_disk_full import fill_disk
from tests.cli_helpers import refused_before_load


def _answer(client, method: str, url: str, **kw):
    """The response, or fail when none came within 30 s (a read that blocks)."""
    box: list = []
    t = threading.Thread(target=lambda: box.append(getattr(client, method)(url, **kw)), daemon=True)
    t.start()
    t.join(30)
    assert box, f"{method.upper()} {url} did not answer within 30 s"
    return box[0]


def _one_line_error(r, status: int) -> str:
    assert r.status_code == status, r.text
    msg = r.json()["error"]
    assert "\n" not in msg and "Traceback" not in msg
    return msg


@pytest.fixture(scope="module")
def env(studio_env):
    return studio_env("workspace", seed=1, results=("res",))


@pytest.fixture
def planted(env):
    """Workspace folders made by a test, removed after it."""
    made = []

    def plant(name: str):
        d = env["ws"] / name
        d.mkdir()
        made.append(d)
        return d / CONFIG_NAME

    yield plant
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "deep", "folder"])
def test_a_config_that_is_no_regular_readable_file_is_listed_broken_never_read(env, planted, kind):
    cfg = planted(f"bad-{kind}")
    if kind == "fifo":
        os.mkfifo(cfg)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", cfg)
    elif kind == "deep":
        cfg.write_text("[" * 100_000 + "]" * 100_000)
    else:
        cfg.mkdir()
    c = env["client"]
    for url in ("/api/info", "/api/boot"):
        r = _answer(c, "get", url)
        assert r.status_code == 200, r.text
        info = r.json() if url == "/api/info" else r.json()["info"]
        assert f"bad-{kind}" not in info["artifacts"] and "kept" in info["artifacts"]
        broken = {b["name"]: b["error"] for b in info["broken"]}
        assert f"bad-{kind}" in broken and "\n" not in broken[f"bad-{kind}"]
    msg = _one_line_error(_answer(c, "post", "/api/load", json={"name": f"bad-{kind}"}), 400)
    assert "no artifact" in msg


def _results(env):
    d = env["root"] / "res"
    d.mkdir(exist_ok=True)
    return d


def test_a_results_file_nested_too_deep_is_not_listed_and_its_page_is_422(env):
    (_results(env) / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    try:
        r = _answer(env["client"], "get", "/api/info")
        assert r.status_code == 200 and all(x["name"] != "deep.json" for x in r.json()["results"])
        msg = _one_line_error(_answer(env["client"], "get", "/results/0/deep.json"), 422)
        assert "deep.json" in msg and "nested" in msg
    finally:
        (_results(env) / "deep.json").unlink()


@pytest.mark.parametrize("samples", ["lots", 7, [1, 2], {"arc": "x"}, {"arc": {"effective": None}}])
def test_an_lm_eval_file_with_odd_sample_counts_still_shows(env, samples):
    doc = {"results": {"arc": {"acc,none": 0.5, "acc_stderr,none": 0.1}}, "config": {"model": "hf"},
           "n-samples": samples}
    path = _results(env) / "results_2026.json"
    path.write_text(json.dumps(doc))
    try:
        r = _answer(env["client"], "get", "/api/info")
        assert r.status_code == 200 and any(x["name"] == path.name for x in r.json()["results"])
        page = _answer(env["client"], "get", f"/results/0/{path.name}")
        assert page.status_code == 200 and "arc" in page.text
    finally:
        path.unlink()


def test_whatever_a_reader_raises_on_a_file_is_a_one_line_422(env, monkeypatch):
    """The class, not the examples: content that makes the report reader raise (a reader bug included) is
    the file's problem, answered 422 in one line; the listing skips such files."""
    from geosteer.viz import report, results

    path = _results(env) / "ok.json"
    path.write_text(json.dumps({"meta": {}, "rows": [{"layer": 0, "x": 1.0}]}))
    try:
        for exc in (TypeError("unhashable"), KeyError("rows"), AttributeError("get"), RecursionError()):
            def boom(*a, exc=exc, **k):
                raise exc

            monkeypatch.setattr(report, "sections_for", boom)
            _one_line_error(_answer(env["client"], "get", "/results/0/ok.json"), 422)
            monkeypatch.setattr(results, "load_tidy", boom)
            r = _answer(env["client"], "get", "/api/info")
            assert r.status_code == 200 and r.json()["results"] == []
            monkeypatch.undo()
    finally:
        path.unlink()


def test_the_workspace_moved_away_while_running(studio_env):
    e = studio_env("moved")
    c, ws = e["client"], e["ws"]
    shutil.move(ws, e["root"] / "elsewhere")
    for url in ("/api/info", "/api/boot"):
        r = c.get(url)
        assert r.status_code == 200, r.text
        info = r.json() if url == "/api/info" else r.json()["info"]
        assert info["artifacts"] == [] and info["broken"] == []
    assert "no artifact" in _one_line_error(c.post("/api/load", json={"name": "kept"}), 400)
    r = c.post("/api/save", json={"name": "again"})  # a save makes the workspace again
    assert r.status_code == 200 and (ws / "again" / CONFIG_NAME).is_file()
    assert (e["root"] / "elsewhere" / "kept" / CONFIG_NAME).is_file()  # the moved one untouched


def test_a_save_on_a_full_disk_is_507_and_keeps_what_was_there(studio_env, monkeypatch):
    e = studio_env("full")
    c, ws = e["client"], e["ws"]
    before = {p.relative_to(ws): p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    assert before
    fill_disk(monkeypatch, ws)
    for body in ({"name": "kept", "overwrite": True}, {"name": "fresh"}):
        msg = _one_line_error(c.post("/api/save", json=body), 507)
        assert "no space left" in msg.lower() or "space" in msg
    monkeypatch.undo()
    after = {p.relative_to(ws): p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    assert after == before and sorted(p.name for p in ws.iterdir()) == ["kept"]


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_of_exactly_the_limit_is_accepted_one_byte_more_is_413(env, chunked):
    from geosteer.studio.server import MAX_BODY

    assert MAX_BODY == 64 * 1024
    c = env["client"]
    for size, want in ((MAX_BODY, 400), (MAX_BODY + 1, 413)):
        pad = size - len(json.dumps({"name": "k", "x": ""}))
        raw = json.dumps({"name": "k", "x": "a" * pad}).encode()
        assert len(raw) == size
        content = (raw[i:i + 4096] for i in range(0, size, 4096)) if chunked else raw
        r = c.post("/api/save", content=content, headers={"Content-Type": "application/json"})
        msg = _one_line_error(r, want)
        assert ("unknown field" in msg) if want == 400 else ("limit 65536 bytes" in msg)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "true", "1e999"])
def test_studio_set_with_a_non_finite_number_is_refused_before_the_model_loads(monkeypatch, capsys, tmp_path, value):
    line = refused_before_load(monkeypatch, capsys, "studio", "-m", "tiny-llama", "--set", f"scale_par={value}",
                               "--workspace", str(tmp_path / "ws"), "--port", "1")
    assert "scale_par" in line
