"""The main job runs end to end (tiny model, random surfaces), prints numbers a naive recomputation gives, and
writes its report."""

import pytest
import torch

from geosteer import manifold
from geosteer.demo import run_demo


def test_shipped_surfaces_are_package_data_equal_to_the_checkout_copy():
    import hashlib
    from pathlib import Path

    from geosteer.demo import SHIPPED_SURFACES, shipped_surfaces

    assert shipped_surfaces("smollm2") == SHIPPED_SURFACES
    assert shipped_surfaces("HuggingFaceTB/SmolLM2-135M-Instruct") == SHIPPED_SURFACES  # the Hub id too
    assert shipped_surfaces("tiny-llama") is None and shipped_surfaces("gemma3-270m") is None
    import geosteer

    assert Path(geosteer.__file__).parent in SHIPPED_SURFACES.parents  # inside the package: in the wheel
    checkout = Path(__file__).resolve().parents[2] / "artifacts" / "smollm2-surfaces-fluent"
    for name in ("geosteer_config.json", "surfaces.safetensors"):
        assert hashlib.sha256((SHIPPED_SURFACES / name).read_bytes()).digest() == \
            hashlib.sha256((checkout / name).read_bytes()).digest(), name


def test_demo_without_surfaces_says_so_and_writes_no_report(tmp_path, capsys):
    summary = run_demo("tiny-llama", tokens=300, max_new_tokens=2, out_dir=tmp_path / "demo")
    out = " ".join(capsys.readouterr().out.split())
    assert "no trained surfaces: the shipped surfaces are for smollm2, not tiny-llama" in out
    assert "--surfaces" in out and summary["surfaces"] is None
    assert not (tmp_path / "demo").exists()


def _table_rows(out: str, title_start: str) -> dict[str, list[float]]:
    """The numeric cells of each row of the printed rich table whose title starts with ``title_start``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(title_start))
    rows = {}
    for line in lines[start + 1:]:
        cells = [c.strip() for c in line.strip().strip("│┃").split("│")]
        if line.strip().startswith("└"):
            break
        if len(cells) >= 2 and cells[0] in ("stock", "surfaces"):
            rows[cells[0]] = [float(c) for c in cells[1:]]
    return rows


def _naive_ppl(model, tok, text: str, n_tokens: int, context: int = 512, stride: int = 256) -> float:
    """Each token t >= 1 predicted from the window that first covers it: start = the smallest multiple of
    ``stride`` with start + context > t (the HF strided recipe), one plain forward per window."""
    import math

    ids = tok(text).input_ids[:n_tokens]
    nll, starts = 0.0, {}
    for t in range(1, len(ids)):
        s = 0 if t < context else ((t - context) // stride + 1) * stride
        if s not in starts:
            with torch.no_grad():
                starts[s] = torch.log_softmax(model(torch.tensor([ids[s:s + context]])).logits[0].double(), -1)
        nll -= starts[s][t - s - 1, ids[t]].item()
    return math.exp(nll / (len(ids) - 1))


def _fluency(lp: float, ref: float, rep: float) -> float:
    """min(1, exp(lp - ref)) * (1 - rep); 0 for an empty continuation, no log-prob penalty where the stock model
    said nothing."""
    import math

    if math.isnan(lp):
        return 0.0
    return min(1.0, math.exp(min(lp - (lp if math.isnan(ref) else ref), 0.0))) * (1 - rep)


def test_demo_end_to_end_prints_perplexity_and_text_quality_equal_to_a_naive_recomputation(tmp_path, capsys,
                                                                                            tiny_model, monkeypatch):
    """The demo runs end to end with surfaces and writes its report; its printed table (held-out ppl, repeated
    4-grams, fluency score; stock and surfaces) equals a strided perplexity recomputed window by window and a
    greedy loop one token at a time, scored by hand."""
    import math

    import numpy as np

    import geosteer.bench.text_quality as tq
    import geosteer.demo
    from geosteer.data.corpus import split_text
    from geosteer.interventions import steer
    from tests.bench.test_text_quality import _naive
    from tests.conftest import random_bank

    prompts = tq.everyday_prompts()[:5]  # the demo's own prompts, fewer and shorter: the naive loop is slow
    monkeypatch.setattr(tq, "everyday_prompts", lambda: prompts)
    monkeypatch.setattr(geosteer.demo, "QUALITY_TOKENS", 16)
    model, tok = tiny_model("llama")
    bank = random_bank(model, seed=3, scale=0.8, grid_size=4, layers=[1, 2])
    art = manifold.save(bank, tmp_path / "surf")
    summary = run_demo("tiny-llama", tokens=700, max_new_tokens=2, surfaces=art, out_dir=tmp_path / "demo")
    printed = _table_rows(capsys.readouterr().out, "lower perplexity, and text as good?")
    assert set(printed) == {"stock", "surfaces"}

    def stock_logprob(ids: list[int]) -> float:
        x = torch.tensor([[tok.bos_token_id, *ids]])
        with torch.no_grad():
            lp = torch.log_softmax(model(x).logits[0, :-1].double(), -1)
        return float(lp[torch.arange(len(ids)), x[0, 1:]].mean())

    ref_lp = None
    for name, ivs in (("stock", []), ("surfaces", [bank])):
        with steer(model, *ivs):
            ppl = _naive_ppl(model, tok, split_text("heldout"), 700)
        conts = [_naive(model, tok, p, 16, *ivs) for p in prompts]
        lps = [stock_logprob(ids) if ids else math.nan for ids, _ in conts]
        ref_lp = ref_lp or lps
        flu = [_fluency(lp, r, rep) for (_, rep), lp, r in zip(conts, lps, ref_lp, strict=True)]
        expected = [ppl, float(np.mean([rep for _, rep in conts])), float(np.mean(flu))]
        assert summary[f"ppl_{name}"] == pytest.approx(ppl, rel=1e-5)
        assert summary[f"repeated_4gram_share_{name}"] == pytest.approx(expected[1], abs=1e-12)
        assert summary[f"fluency_score_{name}"] == pytest.approx(expected[2], abs=1e-6)
        for shown, want in zip(printed[name], expected, strict=True):  # printed to 3 decimals
            assert shown == pytest.approx(want, abs=5e-4 + 1e-6 * abs(want)), name
    assert printed["surfaces"][0] != printed["stock"][0]
    assert summary["sensitive_layer"] in (1, 2)
    html = (tmp_path / "demo" / "report.html").read_text()
    assert "plotly" in html.lower() and len(html) > 100_000  # plotly.js inlined: opens offline
