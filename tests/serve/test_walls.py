"""Exact walls as value channels (``geosteer_vllm.walls``) against a naive per-(head, dim) loop; no vLLM."""

from __future__ import annotations

import math

import pytest
import torch

from geosteer.kernels.bspline import bspline_basis
from geosteer.manifold.walls import Wall, compile_layer
from geosteer_vllm.walls import apply_walls, wall_op, wall_values

L, H, HKV, D, GRID, LO, HI = 12, 4, 2, 16, 4, -2.0, 2.0
INF = math.inf
WALLS = [
    Wall(layer=1, heads=(0,), dims=(3,), q=(-0.3, INF), k=(-INF, 0.2)),
    Wall(layer=1, pairs=((0, 3),), q=(-1.0, 0.5), k=(0.8, INF)),  # overlaps the first on (0, 3)
    Wall(layer=1, heads=(3,), dims=(2,)),  # the whole (head, dim)
    Wall(layer=1, heads=(1,), q=(0.0, INF), k=(0.0, INF)),  # every dim of head 1 (KV head 0, as head 0)
]


def _naive(q, k, v, coeff, walls):
    """o_id = Σ_j a_ij v_jd (1 + S_hd(q_id, k_jd)) (1 − 1_R(q_id, k_jd)), causal, one (head, dim) at a time."""
    out = torch.zeros(L, H, D, dtype=torch.float64)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    for h in range(H):
        g = h // (H // HKV)
        a = torch.softmax((q[:, h] @ k[:, g].T / math.sqrt(D)).masked_fill(~causal, -INF), -1)
        for d in range(D):
            gain = torch.ones(L, L, dtype=torch.float64)
            if coeff is not None:
                bq, bk = bspline_basis(q[:, h, d], GRID, LO, HI), bspline_basis(k[:, g, d], GRID, LO, HI)
                gain = gain + bq @ coeff[h, d] @ bk.T
            blocked = torch.zeros(L, L, dtype=torch.bool)
            for w in walls:
                if (h, d) in w.resolved_pairs(H, D):
                    qin = (q[:, h, d] >= w.q[0]) & (q[:, h, d] <= w.q[1])
                    kin = (k[:, g, d] >= w.k[0]) & (k[:, g, d] <= w.k[1])
                    blocked |= qin[:, None] & kin[None, :]
            out[:, h, d] = (a * gain * ~blocked) @ v[:, g, d]
    return out


def _served(q, k, v, coeff, walls, unwalled):
    """The channels through plain causal attention (what paged attention computes), then the epilogue."""
    op = wall_op(compile_layer(walls, H, D), coeff, GRID, LO, HI, H // HKV)
    ch = wall_values(op, k, v, D)  # (L, HKV, C, D)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    logits = torch.einsum("ihd,jhd->hij", q, k.repeat_interleave(H // HKV, 1)) / math.sqrt(D)
    a = torch.softmax(logits.masked_fill(~causal, -INF), -1)  # (H, L, L)
    ow = torch.einsum("hij,jhcd->ihcd", a, ch.repeat_interleave(H // HKV, 1))  # per query head
    ow = ow.reshape(L, HKV, H // HKV, -1, D).transpose(2, 3)  # (L, HKV, C, rep, D)
    return apply_walls(op, unwalled.float(), ow, q).double()


@pytest.mark.parametrize("with_surfaces", [True, False])
def test_walls_as_channels_match_the_naive_walled_attention(with_surfaces):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(L, n, D, generator=gen) for n in (H, HKV, HKV))
    coeff = torch.randn(H, D, GRID + 3, GRID + 3, generator=gen) if with_surfaces else None
    c64 = None if coeff is None else coeff.double()
    q64, k64, v64 = q.double(), k.double(), v.double()
    unwalled, ref = _naive(q64, k64, v64, c64, []), _naive(q64, k64, v64, c64, WALLS)
    got = _served(q, k, v, coeff, WALLS, unwalled)
    changed = (ref - unwalled).abs() > 1e-3
    assert changed[:, 0, 3].any() and changed[:, 1].any() and changed[:, 3, 2].any()  # every wall blocks
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=0)
    assert (got[:, 3, 2] == 0).all()  # a fully walled (head, dim) is exactly 0, not a float residue
    untouched = torch.ones(H, D, dtype=torch.bool)
    untouched[0, 3] = untouched[1] = untouched[3, 2] = False
    assert torch.equal(got[:, untouched], unwalled.float().double()[:, untouched])  # others bit for bit


def test_each_set_of_overlapping_walls_gets_its_own_slot():
    op = wall_op(compile_layer(WALLS[:2], H, D), None, GRID, LO, HI, H // HKV)
    # q-ranges [-0.3, inf) and [-1, 0.5] on one pair: q in the first only, in both, in the second only
    assert op.slot_pair.tolist() == [0, 0, 0]
    assert sorted(int(c) for c in (op.slot_of[0] >= 0).nonzero().flatten()) == [1, 2, 3]
    assert op.width == 3 * op.per_slot


def test_more_overlapping_walls_than_served_slots_are_refused_in_one_line():
    from geosteer.errors import GeosteerError
    from geosteer_vllm.walls import MAX_OVERLAP

    many = [Wall(layer=1, heads=(0,), dims=(3,), q=(-1.0 + 0.01 * i, INF), k=(-INF, 0.1 * i))
            for i in range(MAX_OVERLAP + 1)]
    with pytest.raises(GeosteerError, match=f"{MAX_OVERLAP + 1} walls on one \\(head, dim\\)") as ei:
        wall_op(compile_layer(many, H, D), None, GRID, LO, HI, H // HKV)
    assert len(str(ei.value).splitlines()) == 1


def _rank_served(q, k, v, op, rep):
    """:func:`_served`'s channels and epilogue for one rank's heads (``q`` (L, h, D), ``k``/``v`` its KV heads)."""
    hkv = k.shape[1]
    ch = wall_values(op, k, v, D)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    a = torch.softmax((torch.einsum("ihd,jhd->hij", q, k.repeat_interleave(rep, 1)) / math.sqrt(D))
                      .masked_fill(~causal, -INF), -1)
    plain = torch.einsum("hij,jhd->ihd", a, v.repeat_interleave(rep, 1))  # walls only: the stock output
    ow = torch.einsum("hij,jhcd->ihcd", a, ch.repeat_interleave(rep, 1)).reshape(L, hkv, rep, -1, D).transpose(2, 3)
    return apply_walls(op, plain, ow, q).double(), ch.shape[2]


@pytest.mark.parametrize("tp", [2, 4])
def test_walls_split_over_tensor_parallel_ranks_match_the_naive_walled_attention(tp):
    """Each rank serves the walls of its own heads (and the KV heads they read, one replicated KV head per rank
    at tp 4), every rank with the same number of channels (vLLM's KV-cache layout is the same on every rank,
    also where a rank has no walls); together they are the naive walled attention of all heads."""
    from geosteer.served import LayerOps
    from geosteer_vllm.tensor_parallel import shard_layer

    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(L, n, D, generator=gen) for n in (H, HKV, HKV))
    walls = [*WALLS[:3], Wall(layer=1, pairs=((0, 5), (0, 9)), k=(0.0, INF))]  # heads 0 and 3 only
    whole = wall_op(compile_layer(walls, H, D), None, GRID, LO, HI, H // HKV)
    ref = _naive(q.double(), k.double(), v.double(), None, walls)
    per, rep = H // tp, H // HKV
    parts, widths = [], set()
    for rank in range(tp):
        (op,) = shard_layer(LayerOps(attention=[whole]), rank, tp, H).attention
        heads = list(range(rank * per, (rank + 1) * per))
        kv = sorted({hh // rep for hh in heads})
        out, channels = _rank_served(q[:, heads], k[:, kv], v[:, kv], op, min(rep, per))
        parts.append(out)
        widths.add((op.width, channels))
    assert len(widths) == 1  # one channel count on every rank
    torch.testing.assert_close(torch.cat(parts, dim=1), ref, atol=2e-5, rtol=0)
