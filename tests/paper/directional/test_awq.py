"""AWQ (``geosteer_paper.directional.awq``): the scale search and the clip search against brute-force loops
written from the paper's definitions, the ⊥-weighted objective against numpy, the block capture against a
normal forward (tiny models only)."""

import numpy as np
import pytest
import torch
from torch import nn

from geosteer.models.anatomy import anatomy
from geosteer_paper.directional.awq import input_groups, perp_weighted_error, search_clip, search_scale
from geosteer_paper.directional.block_capture import capture_block, module_output
from geosteer_paper.directional.quant_grid import quantize_rtn


def _np_perp_weighted(out, ref, w):
    e, r = out.astype(np.float64) - ref.astype(np.float64), ref.astype(np.float64)
    coef = (e * r).sum(-1, keepdims=True) / (r * r).sum(-1, keepdims=True)
    perp = e - coef * r
    return ((e * e).sum(-1) + (w - 1) * (perp * perp).sum(-1)).mean() / e.shape[-1]


def test_perp_weighted_error_matches_numpy_and_is_the_mse_at_weight_one():
    g = torch.Generator().manual_seed(0)
    out, ref = torch.randn(3, 5, 16, generator=g), torch.randn(3, 5, 16, generator=g)
    for w in (1.0, 4.0):
        assert float(perp_weighted_error(out, ref, w)) == pytest.approx(_np_perp_weighted(out.numpy(), ref.numpy(), w),
                                                                        rel=1e-5)
    assert float(perp_weighted_error(out, ref, 1.0)) == pytest.approx(float(((out - ref) ** 2).mean()), rel=1e-6)


@pytest.mark.parametrize("perp_weight", [1.0, 8.0])
def test_scale_search_equals_brute_force_over_the_grid(perp_weight):
    g = torch.Generator().manual_seed(1)
    lin = nn.Linear(32, 8, bias=False)
    lin.weight.data = torch.randn(8, 32, generator=g)
    w0 = lin.weight.data.clone()
    x = torch.randn(2, 40, 32, generator=g) * torch.linspace(0.05, 6.0, 32)  # a few salient channels
    calls = [((x[0],), {}), ((x[1],), {})]
    alpha, s, hist = search_scale(lin, [lin], x.reshape(-1, 32).abs().mean(0), calls, bits=3, group=8,
                                  perp_weight=perp_weight)
    assert torch.equal(lin.weight.data, w0)  # restored
    xs, wn = x.numpy().astype(np.float64), w0.numpy().astype(np.float64)
    mean_abs = np.abs(xs.reshape(-1, 32)).mean(0)
    brute = []
    for k in range(20):
        sc = np.maximum(mean_abs ** (k / 20), 1e-4)
        sc = sc / np.sqrt(sc.max() * sc.min())
        st = torch.tensor(sc, dtype=torch.float32)
        wq = (quantize_rtn(w0 * st, 3, 8) / st).numpy().astype(np.float64)
        brute.append(np.mean([_np_perp_weighted(xb @ wq.T, xb @ wn.T, perp_weight) for xb in xs]))
    assert np.allclose(hist, brute, rtol=1e-4)
    assert alpha == int(np.argmin(brute)) / 20
    assert min(hist) <= hist[0]  # α = 0 is plain round-to-nearest


def test_clip_search_equals_a_brute_force_loop_per_row_and_group():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(4, 16, generator=g)
    x = torch.randn(40, 16, generator=g)
    got = search_clip(w, x, bits=3, group=8)
    for r in range(4):
        for k in range(2):
            wg, xg = w[r, k * 8:(k + 1) * 8], x[:, k * 8:(k + 1) * 8]
            errs, bounds = [], []
            for i in range(10):
                b = wg.abs().max() * (1 - i / 20)
                q = quantize_rtn(wg.clamp(-b, b)[None], 3, 8)[0]
                errs.append(float(((xg @ q - xg @ wg) ** 2).mean()))
                bounds.append(float(b))
            assert float(got[r, k, 0]) == pytest.approx(bounds[int(np.argmin(errs))], rel=1e-6)
    assert (got[..., 0] < w.reshape(4, 2, 8).abs().amax(-1)).sum() >= 2  # some groups are clipped


def test_capture_replays_the_attention_call_and_groups_linears_by_input(tiny_model):
    m, _ = tiny_model("llama")
    ids = [torch.randint(5, 900, (1, 12), generator=torch.Generator().manual_seed(3))]
    view = anatomy(m).blocks[1]
    seen = []
    h = view.attn.register_forward_hook(lambda mod, a, out: seen.append(out[0].float()))
    with torch.no_grad():
        m(input_ids=ids[0], use_cache=False)
    h.remove()
    cap = capture_block(m, 1, ids)
    with torch.no_grad():
        assert torch.allclose(module_output(view.attn, cap.attn_calls[0]), seen[0], atol=1e-6, rtol=0)
    assert sorted(sorted(grp) for grp in input_groups(cap)) == sorted([
        ["self_attn.k_proj", "self_attn.q_proj", "self_attn.v_proj"], ["self_attn.o_proj"],
        ["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]])
