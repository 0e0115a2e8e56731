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
    assert abs(summary["fluency_score_stock"] - (1 - summary["repeated_4gram_share_stock"])) < 1e-12  # own reference
    assert 0 <= summary["repeated_4gram_share_surfaces"] <= 1 and 0 <= summary["fluency_score_surfaces"] <= 1
    assert summary["sensitive_layer"] in (0, 1, 2)
    html = (tmp_path / "demo" / "report.html").read_text()
    assert "plotly" in html.lower() and len(html) > 100_000  # plotly.js inlined: opens offline


def test_shipped_surfaces_are_package_data_equal_to_the_checkout_copy():
    import hashlib
    from pathlib import Path

    from geosteer.demo import SHIPPED_SURFACES, shipped_surfaces

    assert shipped_surfaces("smollm2") == SHIPPED_SURFACES
    assert shipped_surfaces("HuggingFaceTB/SmolLM2-135M-Instruct") == SHIPPED_SURFACES  # the Hub id too
    assert shipped_surfaces("tiny-llama") is None and shipped_surfaces("gemma3-270m") is None
    import geosteer

    assert Path(geosteer.__file__).parent in SHIPPED_SURFACES.parents  # inside the package: in the wheel
    checkout = Path(__file__).resolve().parents[2] / "artifacts" / "smollm2-surfaces-all"
    for name in ("geosteer_config.json", "surfaces.safetensors"):
        assert hashlib.sha256((SHIPPED_SURFACES / name).read_bytes()).digest() == \
            hashlib.sha256((checkout / name).read_bytes()).digest(), name


def test_demo_without_surfaces_says_so_and_writes_no_report(tmp_path, capsys):
    summary = run_demo("tiny-llama", tokens=300, max_new_tokens=2, out_dir=tmp_path / "demo")
    out = " ".join(capsys.readouterr().out.split())
    assert "no trained surfaces: the shipped surfaces are for smollm2, not tiny-llama" in out
    assert "--surfaces" in out and summary["surfaces"] is None
    assert not (tmp_path / "demo").exists()
