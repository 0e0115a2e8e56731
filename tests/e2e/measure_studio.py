"""Measure the studio's bars on a real model in headless Chromium (not a test: timings are not asserted).

    .venv/bin/python tests/e2e/measure_studio.py --model smollm2 --threads 2 \
        --out docs/results/studio/timing.json --screenshot docs/studio.png

Starts the studio (uvicorn in a thread), opens the page cold right after the model load (first paint =
the surface heatmap drawn on a canvas from the boot data, ms since navigation start; then the interactive
plotly heatmap once plotly.js has loaded), then does edits through the page and reads the round trip
edit → new 20-token greedy continuation shown (browser clock), and the same via the JSON API. Surfaces: an
artifact (``--surfaces``) or random coefficients (std ``--scale``, seed 0) on ``--layers``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import torch

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
EDITS = [("surface", "invert"), ("layer", "invert"), ("head", "zero"), ("surface", "grid-wall"),
         ("layer", "scale"), ("head", "invert")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--surfaces", type=Path)
    ap.add_argument("--layers", default="all", help="'all' or first-last for random surfaces")
    ap.add_argument("--scale", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--screenshot", type=Path)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    load_start = os.getloadavg()

    import geosteer
    import geosteer.manifold as M
    from geosteer.io_utils import write_records
    from geosteer.studio.server import create_app, serve_in_thread
    from geosteer.studio.session import Session

    t0 = time.perf_counter()
    model, tok = geosteer.load_model(a.model)
    if a.surfaces:
        bank = M.install(model, bank=M.load(a.surfaces, model=model))
    else:
        if a.layers == "all":
            layers = None
        else:
            first, last = map(int, a.layers.split("-"))
            layers = list(range(first, last + 1))
        bank = M.install(model, layers=layers)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * a.scale)
    load_s = time.perf_counter() - t0
    ws = Path(tempfile.mkdtemp(prefix="studio-measure-"))
    session = Session(model, tok, bank, ws, model_name=a.model)
    app = create_app(session, [Path("docs/results")])
    url, stop = serve_in_thread(app)
    rows = []
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(tempfile.mkdtemp(), executable_path="/usr/bin/chromium",
                                                   headless=True, args=ARGS, bypass_csp=True,
                                                   viewport={"width": 1500, "height": 1050})
        for visit in ("cold", "warm"):
            page = ctx.new_page()
            page.goto(url + "/")
            page.wait_for_function("window.__geosteer && window.__geosteer.ready", timeout=600_000)
            fp = page.evaluate("window.__geosteer.firstPaint")
            rows.append({"what": "first_paint", "visit": visit, "ms": round(fp, 1)})
            rows.append({"what": "interactive_plot_paint", "visit": visit,
                         "ms": round(page.evaluate("window.__geosteer.plotlyPaint"), 1)})
            rows.append({"what": "page_ready_incl_first_generation", "visit": visit,
                         "ms": round(page.evaluate("performance.now()"), 1)})
            if visit == "cold":
                page.close()
        page.fill("#max-new", str(a.tokens))
        for i, (scope, op) in enumerate(EDITS):
            page.select_option("#scope", scope)
            page.click(f"#op-{op}")
            page.wait_for_function("() => document.getElementById('status').textContent.startsWith('applied')"
                                   " || document.getElementById('status').className === 'error'",
                                   timeout=600_000)
            txt = page.inner_text("#timing")
            secs = float(txt.split()[-2])
            rows.append({"what": "edit_round_trip_browser", "edit": f"{op} {scope}", "tokens": a.tokens,
                         "ms": round(secs * 1000, 1), "changed": page.inner_text("#changed") == "yes"})
            if i == 0 and a.screenshot:
                a.screenshot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(a.screenshot))
            page.evaluate("() => { document.getElementById('status').textContent = '' }")
        ctx.close()
    info = httpx.get(url + "/api/info", timeout=60).json()
    lay = info["layers"][len(info["layers"]) // 2]
    with httpx.Client(base_url=url, timeout=600, headers={"X-Geosteer-Token": app.state.token}) as c:
        for op in ("invert", "invert", "zero"):
            t, cpu = time.perf_counter(), time.process_time()
            r = c.post("/api/edit", json={"op": op, "scope": "layer", "layer": lay, "effect": {
                "max_new_tokens": a.tokens, "reference": "loaded"}})
            r.raise_for_status()
            rows.append({"what": "edit_round_trip_api", "edit": f"{op} layer {lay}", "tokens": a.tokens,
                         "ms": round((time.perf_counter() - t) * 1000, 1),
                         "cpu_ms": round((time.process_time() - cpu) * 1000, 1)})
    stop()
    # the same machine's speed at that moment: a plain greedy generation, without and with the surfaces
    from geosteer.eval.generation import generate

    for rep in range(3):
        for attached in (False, True):
            if not attached:
                M.uninstall(model)
            t, cpu = time.perf_counter(), time.process_time()
            generate(model, tok, session.default_prompt, a.tokens)
            rows.append({"what": "generate_only", "surfaces": attached, "tokens": a.tokens, "rep": rep,
                         "ms": round((time.perf_counter() - t) * 1000, 1),
                         "cpu_ms": round((time.process_time() - cpu) * 1000, 1)})
            if not attached:
                M.install(model, bank=session.bank)
    trips = [r["ms"] for r in rows if r["what"].startswith("edit_round_trip")]
    api_cpu = [r["cpu_ms"] for r in rows if r["what"] == "edit_round_trip_api"]
    meta = {"model": a.model, "surfaces": str(a.surfaces) if a.surfaces else f"random std {a.scale} seed 0",
            "bank_layers": info["layers"], "torch_threads": a.threads, "model_load_s": round(load_s, 2),
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
            "edit_round_trip_ms_median": statistics.median(trips),
            "edit_round_trip_ms_max": max(trips), "edit_round_trip_api_cpu_ms_max": max(api_cpu)}
    for r in rows:
        print(r)
    print(meta)
    if a.out:
        write_records(a.out, rows, meta)


if __name__ == "__main__":
    main()
