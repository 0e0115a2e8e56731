"""Finite but huge numbers never decode silently: an artifact whose forward overflows is refused at load, and
every generation path refuses non-finite logits before choosing a token (never token 0 five times)."""

from __future__ import annotations

import pytest
import torch

from geosteer import manifold
from geosteer.errors import GeosteerError
from geosteer.eval.generation import generate, generate_seeds, greedy_with_draft, prompt_ids
from geosteer.interventions import steer
from geosteer.overflow import NonFiniteLogits, check_forward_finite, check_logits, logits_ok
from tests.cli_helpers import one_line_exit_2, run_cli


@pytest.fixture(scope="module")
def llama(tiny_model):
    return tiny_model("llama")


@pytest.fixture(scope="module")
def huge(llama):
    """Surfaces whose coefficients are all 3e38: finite, but the attention output overflows."""
    model, _ = llama
    bank = manifold.install(model, grid_size=2, layers=[0])  # one layer is enough, and cheap
    manifold.uninstall(model)
    with torch.no_grad():
        bank.coefficients.fill_(3e38)
    return bank


def test_logits_rule():
    ok = torch.tensor([[0.0, -1.0, float("-inf")]])  # -inf: a masked token (top-k), allowed
    assert logits_ok(ok)
    for bad in ([0.0, float("nan")], [0.0, float("inf")], [float("-inf"), float("-inf")], [0.0, 0.0]):
        assert not logits_ok(torch.tensor([bad]))
        with pytest.raises(NonFiniteLogits, match="non-finite logits"):
            check_logits(torch.tensor([bad]))


def test_huge_coefficients_really_overflow(llama, huge):
    """The premise, checked with a plain forward: the stock logits are finite and vary; the steered ones are
    NaN, or all zero (the overflowed residual through the final RMSNorm) — both decode as token 0."""
    model, tok = llama
    ids = prompt_ids(tok, "The cat sat")
    with torch.no_grad():
        stock = model(input_ids=ids).logits
        with steer(model, huge):
            steered = model(input_ids=ids).logits
    assert torch.isfinite(stock).all() and (stock.amax(-1) > stock.amin(-1)).all()
    assert torch.isnan(steered).any() or (steered == 0).all(-1).any()
    assert not logits_ok(steered)


def test_every_generation_path_refuses_non_finite_logits(llama, huge):
    model, tok = llama
    with steer(model, huge):
        with pytest.raises(NonFiniteLogits):
            generate(model, tok, "The cat sat", max_new_tokens=5)
        with pytest.raises(NonFiniteLogits):
            greedy_with_draft(model, tok, prompt_ids(tok, "The cat sat"), 5)
        with pytest.raises(NonFiniteLogits):
            generate_seeds(model, tok, "The cat sat", [0, 1], max_new_tokens=3)
    stock = generate(model, tok, "The cat sat", max_new_tokens=5)  # the check passes finite logits through
    ids = prompt_ids(tok, "The cat sat")
    out = model.generate(ids, max_new_tokens=5, do_sample=False, attention_mask=torch.ones_like(ids),
                         pad_token_id=tok.pad_token_id)
    assert stock.token_ids == out[0, ids.shape[1]:].tolist()


def test_load_refuses_an_artifact_whose_forward_overflows(llama, huge, tmp_path):
    model, _ = llama
    folder = manifold.save(huge, tmp_path / "huge")
    with pytest.raises(GeosteerError, match="overflow the model's forward") as ei:
        manifold.load(folder, model=model)
    assert len(str(ei.value).splitlines()) == 1
    assert float(manifold.load(folder).coefficients.detach().abs().max()) == pytest.approx(3e38, rel=1e-6)
    zero = manifold.install(model, grid_size=4)  # zero surfaces: the stock model, accepted
    manifold.uninstall(model)
    check_forward_finite(model, zero, "zero surfaces")


def test_cli_generate_with_huge_surfaces_is_one_line(monkeypatch, capsys, huge, tmp_path):
    folder = manifold.save(huge, tmp_path / "huge")
    code, out, err = run_cli(monkeypatch, capsys, "generate", "-m", "tiny-llama", "-p", "The cat sat",
                             "--max-new-tokens", "5", "--json", "--surfaces", str(folder))
    one_line_exit_2(code, err)
    assert "overflow" in err and out == ""
