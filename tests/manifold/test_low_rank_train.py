"""Rank-r surfaces trained directly (C = U Wᵀ): neutral start, chain-rule gradients, rank of the artifact,
exact resume and the run record."""

from __future__ import annotations

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.manifold import install, load, uninstall
from geosteer.manifold.low_rank_train import check_rank, factorise, merge_factors, trained_parameters
from geosteer.manifold.train import train_surfaces
from geosteer.train import TrainConfig


def _cfg(**kw):
    d = dict(lr=5e-2, steps=4, batch_size=2, seq_len=24, checkpoint_every=2, log_every=100,
             eval_before_after=False)
    d.update(kw)
    return TrainConfig(**d)


def test_fresh_factors_are_the_stock_model_and_gradients_follow_the_chain_rule(tiny):
    model, _ = tiny
    ids = torch.randint(0, model.config.vocab_size, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        stock = model(ids).logits
    bank = factorise(install(model, grid_size=4, grid_range=(-2, 2), layers=[0, 1]), rank=2, seed=3)
    try:
        with torch.no_grad():
            assert torch.equal(model(ids).logits, stock)
        u, w = bank.parametrizations.coefficients.original0, bank.parametrizations.coefficients.original1
        with torch.no_grad():
            u.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
        model(ids).logits.square().mean().backward()
        gu, gw = u.grad.clone(), w.grad.clone()
        c_plain = (u @ w.transpose(-1, -2)).detach()
        uw = (u.detach().clone(), w.detach().clone())
    finally:
        uninstall(model)
    plain = install(model, grid_size=4, grid_range=(-2, 2), layers=[0, 1])  # C as a leaf
    try:
        with torch.no_grad():
            plain.coefficients.copy_(c_plain)
        plain.coefficients.requires_grad_(True)
        model(ids).logits.square().mean().backward()
        g = plain.coefficients.grad  # dL/dU = G W, dL/dW = Gᵀ U
        u0, w0 = uw
        assert torch.allclose(gu, g @ w0, rtol=1e-4, atol=1e-7 * float(g.abs().max()))
        assert torch.allclose(gw, g.transpose(-1, -2) @ u0, rtol=1e-4, atol=1e-7 * float(g.abs().max()))
    finally:
        uninstall(model)


def test_rank_r_run_saves_rank_r_surfaces_and_resumes_exactly(tiny, text_file, tmp_path):
    model, tok = tiny
    kw = dict(grid_size=4, grid_range=(-2, 2), layers=[0, 2], text=text_file, progress=False, log=None, rank=2)
    full, _ = train_surfaces(model, tok, tmp_path / "full", cfg=_cfg(), **kw)
    ref = full.coefficients.detach().clone()
    uninstall(model)
    assert ref.abs().sum() > 0
    assert int(torch.linalg.matrix_rank(ref.double(), rtol=1e-6).max()) == 2  # K = 7, rank 2
    art = load(tmp_path / "full")
    assert torch.equal(art.coefficients, ref)
    tr = art.meta["training"]
    per_surface = 2 * 2 * 7
    assert tr["rank"] == 2 and tr["parameter_overhead"]["surface_params"] == per_surface * ref[..., 0, 0].numel()
    _, r1 = train_surfaces(model, tok, tmp_path / "cut", cfg=_cfg(), stop_at=3, **kw)
    uninstall(model)
    resumed, r2 = train_surfaces(model, tok, tmp_path / "cut", cfg=_cfg(), resume=True, **kw)
    uninstall(model)
    assert r1.stopped_early and r2.resumed_from == 2
    assert torch.equal(resumed.coefficients.detach(), ref)
    for other in ({"rank": 3}, {"rank": None}):
        with pytest.raises(GeosteerError, match="rank") as ei:
            train_surfaces(model, tok, tmp_path / "cut", cfg=_cfg(), resume=True, **{**kw, **other})
        uninstall(model)
        assert len(str(ei.value).splitlines()) == 1


def test_merge_leaves_plain_frozen_coefficients_and_counts_parameters(tiny):
    model, _ = tiny
    bank = factorise(install(model, grid_size=4, layers=[1]), rank=1)
    try:
        n = bank.coefficients[..., 0, 0].numel()
        assert trained_parameters(bank) == 2 * 1 * 7 * n
        merge_factors(bank)
        assert [name for name, _ in bank.named_parameters()] == ["coefficients"]
        assert not bank.coefficients.requires_grad and trained_parameters(bank) == 49 * n
    finally:
        uninstall(model)


@pytest.mark.parametrize("rank", [0, 7, 2.5, True])
def test_rank_outside_one_to_k_minus_one_is_refused(rank):
    with pytest.raises(GeosteerError, match="--rank must be an integer from 1 to 6"):
        check_rank(rank, 4)
