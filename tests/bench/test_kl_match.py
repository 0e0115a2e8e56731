"""Strengths matched on control KL (geosteer.bench.kl_match): hand cases and a brute-force scan on a tiny model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from geosteer.bench.kl_match import bisect_strength, level_key, match_levels


class Counted:
    """kl = f(s), recording every call."""

    def __init__(self, f):
        self.f, self.calls = f, []

    def __call__(self, s):
        self.calls.append(s)
        return self.f(s)


def quadratic(s):
    return 0.01 * s * s


def test_known_inverse_step_by_step():
    # target 0.2 (s* = sqrt(20) = 4.472): 1 -> 0.01, 2 -> 0.04, 4 -> 0.16, 8 -> 0.64 brackets [4, 8];
    # 6 -> 0.36, 5 -> 0.25, 4.5 -> 0.2025, within 5% of 0.2
    kl = Counted(quadratic)
    out = bisect_strength(kl, 0.2)
    assert kl.calls == [1.0, 2.0, 4.0, 8.0, 6.0, 5.0, 4.5]
    assert out["evals"] == [(s, quadratic(s)) for s in kl.calls]
    assert (out["strength"], out["kl"], out["target"]) == (4.5, pytest.approx(0.2025), 0.2)
    assert out["reached"] and out["converged"]
    tight = bisect_strength(quadratic, 0.2, tol=1e-6, max_evals=60)
    assert tight["strength"] == pytest.approx(math.sqrt(20), rel=1e-6)
    assert 0 not in [s for s, _ in tight["evals"]]  # the stock model is never evaluated


def test_returns_the_closest_point_not_the_last():
    # six evaluations: 1, 2, 4, 8, 6, 5; |0.16 - 0.2| = 0.04 beats |0.25 - 0.2| = 0.05 (the last)
    out = bisect_strength(quadratic, 0.2, max_evals=6)
    assert [s for s, _ in out["evals"]] == [1.0, 2.0, 4.0, 8.0, 6.0, 5.0]
    assert out["strength"] == 4.0 and out["reached"] and not out["converged"]


def test_noisy_curve_picks_the_closest_evaluated_point():
    noise = {6.0: -0.17}  # a dip at 6: kl(6) = 0.19, closest to 0.2 although bisection moves on
    out = bisect_strength(lambda s: quadratic(s) + noise.get(s, 0.0), 0.2, tol=1e-3, max_evals=10)
    assert out["strength"] == 6.0 and out["kl"] == pytest.approx(0.19)


def test_already_above_at_s_start():
    # target 1e-4 (s* = 0.1): 1 -> 1e-2, 0.5, 0.25, 0.125 -> 1.5625e-4 above, 0.0625 -> 3.906e-5 below;
    # 0.09375 -> 8.79e-5 (lo), 0.109375 -> 1.196e-4 (hi), 0.1015625 -> 1.0315e-4, within 5%
    kl = Counted(quadratic)
    out = bisect_strength(kl, 1e-4)
    assert kl.calls == [1.0, 0.5, 0.25, 0.125, 0.0625, 0.09375, 0.109375, 0.1015625]
    assert out["strength"] == 0.1015625 and out["reached"] and out["converged"]


def test_above_even_at_the_floor_stops_within_the_budget():
    kl = Counted(lambda s: 1.0)  # a jump right after 0
    out = bisect_strength(kl, 0.2, max_evals=20)
    assert len(kl.calls) == 20 and min(kl.calls) < 1 / 1024
    assert out["reached"] and not out["converged"] and out["strength"] == min(kl.calls)


def test_unreachable_target_returns_s_max():
    kl = Counted(lambda s: 0.001 * s)  # 0.064 at s_max = 64
    out = bisect_strength(kl, 0.2)
    assert kl.calls == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    assert (out["strength"], out["kl"], out["reached"], out["converged"]) == (64.0, pytest.approx(0.064), False,
                                                                              False)
    short = bisect_strength(lambda s: 0.001 * s, 0.2, s_max=10.0)  # the last doubling is clipped to s_max
    assert [s for s, _ in short["evals"]] == [1.0, 2.0, 4.0, 8.0, 10.0] and short["strength"] == 10.0
    near = bisect_strength(lambda s: 0.199 * s / 64, 0.2)  # within tol just below the target at s_max
    assert near["reached"] and near["converged"] and near["strength"] == 64.0


def test_memo_is_shared_and_no_strength_is_evaluated_twice():
    kl = Counted(quadratic)
    out = match_levels(kl, [0.05, 0.2])
    assert list(out) == ["0.05", "0.2"]
    # 0.05: 1, 2, 4, then 3, 2.5, 2.25 (0.050625); 0.2 reuses 1, 2, 4 and adds 8, 6, 5, 4.5
    assert kl.calls == [1.0, 2.0, 4.0, 3.0, 2.5, 2.25, 8.0, 6.0, 5.0, 4.5]
    assert len(set(kl.calls)) == len(kl.calls)
    assert out["0.05"]["strength"] == 2.25 and out["0.2"]["strength"] == 4.5
    assert [s for s, _ in out["0.2"]["evals"]] == [1.0, 2.0, 4.0, 8.0, 6.0, 5.0, 4.5]
    memo: dict[float, float] = {}
    kl2 = Counted(quadratic)
    bisect_strength(kl2, 0.2, memo=memo)
    again = bisect_strength(kl2, 0.2, memo=memo)
    assert len(kl2.calls) == 7 and again["strength"] == 4.5
    assert (level_key(0.05), level_key(0.2), level_key(0.5)) == ("0.05", "0.2", "0.5")
    with pytest.raises(ValueError, match="twice"):
        match_levels(quadratic, [0.2, 0.20])
    with pytest.raises(ValueError):
        bisect_strength(quadratic, 0.0)


class TinySteer:
    """A tiny random Llama steered by s * v added to the residual stream after layer 0; KL(P_stock || P_s) of the
    next-token distribution, averaged over a few random prompts. Many strengths run as one batch."""

    def __init__(self):
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2)
        self.model = LlamaForCausalLM(cfg).eval().double()  # initializer_range: peaked enough for KL 0.2
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 64, (4, 6), generator=g)
        v = torch.randn(32, generator=g, dtype=torch.float64)
        self.v = v / v.norm()
        self.base = self._logp([0.0])[0]

    def _logp(self, strengths) -> torch.Tensor:
        k, b = len(strengths), self.ids.shape[0]
        scale = torch.tensor(strengths, dtype=torch.float64).repeat_interleave(b)[:, None, None]

        def hook(module, args, output):
            if isinstance(output, tuple):  # older decoder layers return (hidden_states, ...)
                return (output[0] + scale * self.v,) + tuple(output[1:])
            return output + scale * self.v

        handle = self.model.model.layers[0].register_forward_hook(hook)
        try:
            with torch.no_grad():
                logits = self.model(input_ids=self.ids.repeat(k, 1)).logits[:, -1]
        finally:
            handle.remove()
        return torch.log_softmax(logits, dim=-1).view(k, b, -1)

    def kl_many(self, strengths) -> np.ndarray:
        lp = self._logp(list(strengths))
        return (self.base.exp() * (self.base - lp)).sum(-1).mean(-1).numpy()

    def __call__(self, s: float) -> float:
        return float(self.kl_many([s])[0])


@pytest.fixture(scope="module")
def tiny():
    steer = TinySteer()
    grid = np.linspace(0.0, 16.0, 2001)
    scan = np.concatenate([steer.kl_many(grid[i:i + 250]) for i in range(0, grid.size, 250)])
    return steer, grid, scan


def crossing(grid, scan, target):
    """The scan's first crossing of ``target``, linearly interpolated between its two grid points."""
    i = int(np.argmax(scan >= target))
    assert i > 0 and scan[i] >= target
    return grid[i - 1] + (target - scan[i - 1]) / (scan[i] - scan[i - 1]) * (grid[i] - grid[i - 1])


@pytest.mark.parametrize("target", [0.05, 0.2])
def test_bisection_matches_a_brute_force_scan(tiny, target):
    steer, grid, scan = tiny
    assert scan[0] == pytest.approx(0.0, abs=1e-12)
    assert np.all(np.diff(scan) >= -1e-12), "the tiny model's KL curve should be non-decreasing on the scan"
    step = grid[1] - grid[0]
    s_cross = crossing(grid, scan, target)
    tight = bisect_strength(steer, target, s_max=16.0, tol=1e-5, max_evals=60)
    assert tight["converged"] and abs(tight["strength"] - s_cross) <= step
    out = bisect_strength(steer, target, s_max=16.0)  # the default 5% tolerance
    assert out["reached"] and abs(out["kl"] - target) <= 0.05 * target
    lo, hi = crossing(grid, scan, 0.95 * target), crossing(grid, scan, 1.05 * target)
    assert lo - step <= out["strength"] <= hi + step
    assert out["kl"] == pytest.approx(float(np.interp(out["strength"], grid, scan)), rel=1e-2)


def test_tiny_model_unreachable_target(tiny):
    steer, grid, scan = tiny
    out = bisect_strength(steer, 10 * float(scan.max()), s_max=16.0)
    assert not out["reached"] and out["strength"] == 16.0 and out["kl"] == pytest.approx(scan[-1])
