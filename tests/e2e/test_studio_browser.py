"""End-to-end in headless Chromium (Debian ``chromium``, driven by Playwright; no browser download).

The test starts and stops the studio itself (uvicorn in a thread) on a tiny model with random surfaces,
then: open the page, choose the strongest surface, invert it, see the continuation change, save, undo,
load the saved artifact and see the edit persisted; a screenshot is taken. A second test opens a
``geosteer report`` file from disk with every non-file request blocked and checks the plots render.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

CHROMIUM = os.environ.get("GEOSTEER_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.skipif(not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)),
                       reason=f"Chromium not found at {CHROMIUM} (apt-get install chromium)"),
]
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install "
                                     "-e '.[dev]')")

PROMPT = "The theory of relativity states that"
STRONG = (1, 2, 5)  # layer, head, dim of the surface made strongest


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        profile = tempfile.mkdtemp(prefix="geosteer-chromium-")
        ctx = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True,
                                                   args=ARGS, viewport={"width": 1500, "height": 1000})
        try:
            yield ctx
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    import geosteer
    import geosteer.manifold as M
    from geosteer.io_utils import write_records
    from geosteer.studio.server import create_app, serve_in_thread
    from geosteer.studio.session import Session

    model, tok = geosteer.load_model("tiny-llama")
    bank = M.install(model, grid_size=4, grid_range=(-3.0, 3.0))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * 0.3)
        bank.coefficients[STRONG] = 3.0 + torch.randn(7, 7, generator=g) * 0.5
    root = tmp_path_factory.mktemp("e2e")
    write_records(root / "results" / "dyn.json", [{"layer": i, "C": 0.5 * i} for i in range(3)], {})
    session = Session(model, tok, bank, root / "ws", model_name="tiny-llama", default_prompt=PROMPT)
    url, stop = serve_in_thread(create_app(session, [root / "results"]))
    try:
        yield dict(url=url, session=session, root=root, model=model)
    finally:
        stop()


def _poll(page, fn: str, arg=None, timeout: float = 60.0):
    """Wait until ``fn(arg)`` is truthy in the page. Polls ``page.evaluate`` (which the page's CSP does not
    govern) instead of ``wait_for_function`` (whose string predicates need 'unsafe-eval')."""
    import time

    deadline = time.time() + timeout
    while not page.evaluate(fn, arg):
        if time.time() > deadline:
            raise playwright_api.TimeoutError(f"timed out waiting for {fn}")
        page.wait_for_timeout(50)


def _wait_status(page, text: str):
    _poll(page, "t => document.getElementById('status').textContent.includes(t) || "
                "document.getElementById('status').className === 'error'", text)
    st = page.inner_text("#status")
    assert text in st, f"studio status: {st}"


def test_invert_save_reload(browser, studio, tmp_path):
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(studio["url"] + "/")
    try:
        _poll(page, "() => window.__geosteer && window.__geosteer.ready")
    except playwright_api.TimeoutError:
        pytest.fail(f"studio page not ready after 60 s; status {page.inner_text('#status')!r}, "
                    f"page errors {errors}")
    assert page.evaluate("window.__geosteer.firstPaint") is not None
    assert page.locator("#heatmap .main-svg").count() > 0
    assert page.locator("#terrain .gl-container").count() > 0

    # choose the strongest surface from the ranked list
    first = page.locator("#ranked li").first
    assert first.inner_text().startswith("L1 H2 D5")
    first.click()
    _poll(page, "s => window.__geosteer.surface && window.__geosteer.surface.dim === s", STRONG[2])
    original = studio["session"].bank.coefficients.detach()[STRONG].clone()
    before_text = page.inner_text("#cont-after")

    # invert it: the continuation changes, before/after both shown, KL > 0
    page.select_option("#scope", "surface")
    page.click("#op-invert")
    _wait_status(page, "applied: invert surface L1 H2 D5")
    assert page.inner_text("#changed") == "yes"
    after_text = page.inner_text("#cont-after")
    assert after_text != before_text and page.inner_text("#cont-before") == before_text
    assert float(page.inner_text("#kl")) > 0
    assert page.locator("#top-after tr").count() == 10
    assert "invert surface L1 H2 D5" in page.inner_text("#history")
    shot = tmp_path / "studio.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    if os.environ.get("GEOSTEER_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["GEOSTEER_SCREENSHOT_DIR"]) / "studio-e2e.png")

    # save, undo (back to the original), then load the saved artifact: the edit is back
    page.fill("#save-name", "e2e-inverted")
    page.click("#save")
    _wait_status(page, "saved 'e2e-inverted'")
    assert (studio["root"] / "ws" / "e2e-inverted" / "geosteer_config.json").is_file()
    page.click("#undo")
    _wait_status(page, "undone")
    assert page.inner_text("#changed") == "no"
    coeffs = page.evaluate("window.__geosteer.surface.coeffs")
    torch.testing.assert_close(torch.tensor(coeffs), original, rtol=0, atol=1e-6)
    page.select_option("#artifacts", "e2e-inverted")
    page.click("#load")
    _wait_status(page, "loaded 'e2e-inverted'")
    assert page.inner_text("#artifact-name") == "e2e-inverted"
    coeffs = page.evaluate("window.__geosteer.surface.coeffs")
    torch.testing.assert_close(torch.tensor(coeffs), -original, rtol=0, atol=1e-6)
    page.select_option("#reference", "none")
    page.click("#run")
    _wait_status(page, "ready")
    assert page.inner_text("#cont-after") == after_text
    assert not errors, errors

    # the study page for the result file renders its figure
    with page.expect_popup() as pop:
        page.click("#results a")
    res = pop.value
    res.wait_for_selector(".plotly-graph-div .main-svg", timeout=30_000)
    assert "dyn: C vs layer" in res.content()
    page.close()


def test_report_opens_offline_from_disk(browser, tmp_path):
    from geosteer.io_utils import write_records
    from geosteer.viz.report import build_report

    write_records(tmp_path / "sweep.json", [{"layer": i, "scale": s, "delta_ppl": i * s}
                                            for i in range(4) for s in (0.5, 1.0)], {})
    out = tmp_path / "report.html"
    build_report([tmp_path / "sweep.json"], out)
    page = browser.new_page()
    remote = []

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            remote.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(out.as_uri())
    page.wait_for_selector(".plotly-graph-div .main-svg", timeout=30_000)
    assert page.locator(".plotly-graph-div").count() == 1
    assert page.locator(".plotly-graph-div .scatterlayer .trace").count() == 2
    assert remote == []
    page.close()


def test_first_paint_canvas_matches_the_surface(browser, studio):
    """The pre-plotly canvas shows the boot surface: each pixel is the colour scale at that S value
    (checked against a Python interpolation of the same scale), rows drawn bottom (low q) to top."""
    import numpy as np

    page = browser.new_page()
    page.goto(studio["url"] + "/")
    _poll(page, "() => window.__geosteer && window.__geosteer.ready")
    assert page.evaluate("window.__geosteer.plotlyPaint") >= page.evaluate("window.__geosteer.firstPaint")
    got = page.evaluate("""async () => {
        const boot = await (await fetch('/api/boot')).json();
        const fig = boot.surface.figures.heatmap;
        quickHeatmap(fig);
        const cv = document.getElementById('quick-heatmap');
        const px = Array.from(cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data);
        return {px, w: cv.width, h: cv.height, z: Array.from(matrix(fig.data[0].z), r => Array.from(r)),
                scale: fig.data[0].colorscale, lo: fig.data[0].zmin, hi: fig.data[0].zmax,
                layer: boot.surface.layer, head: boot.surface.head, dim: boot.surface.dim};
    }""")
    assert (got["layer"], got["head"], got["dim"]) == STRONG
    z = np.array(got["z"])
    view = studio["session"].surface(*STRONG, None, 48, False)
    assert z.shape == (got["h"], got["w"]) == (48, 48)
    ts = [t for t, _ in got["scale"]]
    rgb = np.array([[float(v) for v in c[c.index("(") + 1:-1].split(",")] for _, c in got["scale"]])
    t = np.clip((z - got["lo"]) / (got["hi"] - got["lo"]), 0, 1)
    want = np.stack([np.interp(t, ts, rgb[:, ch]) for ch in range(3)], -1)[::-1]  # top row = highest q
    px = np.array(got["px"], dtype=float).reshape(48, 48, 4)
    assert np.abs(px[..., :3] - want).max() <= 1.0 and (px[..., 3] == 255).all()
    assert view["norm"] > 0
    page.close()


def test_foreign_page_cannot_drive_the_studio(browser, studio, caplog):
    """A page from another origin (http://localhost:<another port>, a plain local HTTP server: another
    origin and, for the browser, another site than the studio's 127.0.0.1) sends the classic
    CSRF requests to the studio: a text/plain "simple" POST (no preflight) and a JSON POST (preflighted).
    Both are refused and nothing changes: no artifact saved, same version; the studio page cannot be
    framed either."""
    from geosteer.studio.session import coeff_digest

    caplog.set_level("WARNING", logger="geosteer.studio")
    s = studio["session"]
    before = (s.version, coeff_digest(s.bank.coefficients), sorted(p.name for p in s.workspace.iterdir()))
    page = browser.new_page()
    evil = ("<html><body><iframe id='f' src='" + studio["url"] + "/'></iframe><script>"
            "window.results = [];"
            "const url = '" + studio["url"] + "';"
            "fetch(url + '/api/save', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'},"
            " body: JSON.stringify({name: 'pwned', overwrite: true})}).then(r => results.push('plain:' + r.type),"
            " e => results.push('plain-error'));"
            "fetch(url + '/api/edit', {method: 'POST', headers: {'Content-Type': 'application/json'},"
            " body: JSON.stringify({op: 'zero', scope: 'layer', layer: 1})}).then(r => results.push('json:' +"
            " r.status), e => results.push('json-error'));"
            "</script></body></html>")
    import http.server
    import threading

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(evil.encode())

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        page.goto(f"http://localhost:{srv.server_address[1]}/")
        _poll(page, "() => window.results.length === 2", timeout=30)
    finally:
        srv.shutdown()
    page.wait_for_timeout(300)
    after = (s.version, coeff_digest(s.bank.coefficients), sorted(p.name for p in s.workspace.iterdir()))
    assert after == before and not (s.workspace / "pwned").exists()
    # the simple POST did reach the studio and was refused there by the guard (not only by the browser)
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert any("/api/save" in m and "cross-site" in m for m in refused), refused
    # the JSON request never got a readable answer (preflight refused / no CORS), and the frame stayed empty
    assert "json-error" in page.evaluate("window.results")
    frame = page.frame_locator("#f")
    assert frame.locator("#ranked").count() == 0
    page.close()



def _open_studio(browser, studio):
    page = browser.new_page()
    page.goto(studio["url"] + "/")
    _poll(page, "() => window.__geosteer && window.__geosteer.ready")
    return page


def test_wall_buttons_named_as_the_library(browser, studio):
    """The two wall tools render with the library's names (grid-wall: control points at −1; wall: the exact
    region wall) and no button is a bare "Wall"."""
    page = _open_studio(browser, studio)
    grid, exact = page.locator("#op-grid-wall"), page.locator("#op-wall")
    assert grid.is_visible() and exact.is_visible()
    assert grid.inner_text() == "Grid wall (C=−1)" and grid.get_attribute("title").startswith("grid-wall:")
    assert exact.inner_text() == "Exact wall" and exact.get_attribute("title").startswith("wall: an exact region")
    assert "Wall" not in [t.strip() for t in page.locator("button").all_inner_texts()]
    page.close()


def test_exact_wall_tool_reaches_the_model(browser, studio):
    """Clicking the exact wall adds a wall the API reports and changes the model's next-token distribution
    the API returns; undo puts both back exactly."""
    page = _open_studio(browser, studio)
    page.locator("#ranked li").first.click()
    _poll(page, "s => window.__geosteer.surface && window.__geosteer.surface.dim === s", STRONG[2])
    page.select_option("#scope", "surface")
    opts = {"prompt": PROMPT, "max_new_tokens": 4, "reference": "none"}
    effect = "o => api('POST', '/api/effect', o)"
    walls = "async () => (await api('GET', '/api/info')).walls"
    before, n0 = page.evaluate(effect, opts), len(page.evaluate(walls))
    page.click("#op-wall")  # empty q/k ranges: the whole line of this surface's channel
    _wait_status(page, "applied: wall")
    added = page.evaluate(walls)
    assert len(added) == n0 + 1 and len(studio["session"].bank.walls) == n0 + 1
    layer, head, dim = STRONG
    assert f"layer={layer}" in added[-1] and f"head={head}" in added[-1] and f"dim={dim}" in added[-1]
    try:
        walled = page.evaluate(effect, opts)
        assert walled["after"]["top"] != before["after"]["top"]  # the model itself changed, not just the page
    finally:
        page.click("#undo")
        _wait_status(page, "undone")
    assert len(page.evaluate(walls)) == n0
    assert page.evaluate(effect, opts)["after"]["top"] == before["after"]["top"]
    page.close()
