"""The main job runs end to end (tiny model, random surfaces) and writes its report."""

import torch

from geosteer import load_model, manifold
from geosteer.demo import run_demo


def test_demo_end_to_end_with_surfaces(tmp_path):
    model, _ = load_model("tiny-llama")
    bank = manifold.install(model, layers=[0, 1, 2])
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=torch.Generator().manual_seed(0)))
    art = manifold.save(bank, tmp_path / "surf")
    manifold.uninstall(model)
    summary = run_demo("tiny-llama", tokens=300, max_new_tokens=4, surfaces=art, out_dir=tmp_path / "demo")
    assert summary["ppl_surfaces"] != summary["ppl_stock"]
    assert summary["sensitive_layer"] in (0, 1, 2)
    html = (tmp_path / "demo" / "report.html").read_text()
    assert "plotly" in html.lower() and len(html) > 100_000  # plotly.js inlined: opens offline
