"""Causal prefix, anchor and editing diagnostics (paper App. C.5, Fig. 13).

- **Prefix / Volterra sensitivity** (:func:`prefix_spread`): one fixed suffix after N different prefixes;
  per layer, the spread of the last-token residual direction u = unit(resid_post) over the N contexts. Both
  statistics are reported: ``pairwise_deg`` = mean over pairs i < j of ∠(u_i, u_j) and ``to_mean_deg`` =
  mean over i of ∠(u_i, unit(Σ u)). Control (``control_deg``): the same statistic when the suffix varies too
  (N unrelated corpus contexts), i.e. the spread of last-token directions with nothing held fixed.
- **Anchors** (:func:`anchor_scores`, :func:`anchor_study`): the anchor score of a prefix token is the
  tangential FFN update norm ‖P_u Φ‖ at that token, u = unit(mlp_in) (the state the FFN reads, as in
  :mod:`geosteer.dynamics.variants`) and Φ the block's real FFN update, summed over ``score_layers``
  (``score="raw"``) or with each layer's term divided by ‖mlp_in‖ (``score="relative"``: the angle the
  FFN turns the token by, to first order). BOS and the suffix are never candidates. The top-k prefix tokens
  are replaced, and, paired, k uniformly random prefix positions get the *same* replacement tokens (drawn
  per seed from the corpus unigram stream, resampled where equal to the original); the downstream shift is
  ∠(u_last, u_last') per layer.
- **Editing specificity** (:func:`edit_study`): at layer ℓ an edit adds a vector to the FFN output at the
  prompt's last position (``kind="ffn_out"``) or adds δ to one column of the down projection
  (``kind="down_col"``, the most active neuron j at the last position: Φ gains a_j(x)·δ at *every* position).
  The direction is the target token's unembedding row (``direction="unembed"``) or that row minus the mean
  row (``"centered"``); random baselines use Gaussian directions of the same norm
  (``numpy.random.default_rng(seed)``, the paper's convention). With Δz the change of the last-position
  logits, specificity = (Δz_t − mean_{v≠t} Δz_v) / std_{v≠t} Δz_v (shift-invariant, like the softmax);
  ``target_move`` = Δz_t − mean_{v≠t} Δz_v, ``drift`` = std_{v≠t} Δz_v, and the next-token KL(base‖edit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from geosteer.dynamics import sphere
from geosteer.errors import GeosteerError
from geosteer.hooks import HookSet, add_hook
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import input_device

EDIT_KINDS = ("ffn_out", "down_col")
DIRECTIONS = ("unembed", "centered")
SCORES = ("raw", "relative")


def check_positive(value: int, name: str) -> int:
    if isinstance(value, bool) or int(value) != value or value <= 0:
        raise GeosteerError(f"{name} must be >= 1 (got {value})")
    return int(value)


def _angles_deg(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.rad2deg(torch.arccos(sphere.cosine(a.double(), b.double()).clamp(-1.0, 1.0)))


def spread(u: torch.Tensor) -> dict[str, float]:
    """Angular spread of N directions (N, d): mean pairwise angle and mean angle to the mean direction (deg)."""
    n = u.shape[0]
    if n < 2:
        raise GeosteerError(f"the angular spread needs at least 2 contexts (got {n})")
    u = sphere.unit(u.double())
    cos = (u @ u.T).clamp(-1.0, 1.0)
    iu = torch.triu_indices(n, n, 1)
    pair = torch.rad2deg(torch.arccos(cos[iu[0], iu[1]])).mean().item()
    mean = sphere.unit(u.sum(0, keepdim=True))
    to_mean = _angles_deg(u, mean.expand_as(u)).mean().item()
    return {"pairwise_deg": pair, "to_mean_deg": to_mean}


@torch.no_grad()
def last_token_states(model: nn.Module, ids: torch.Tensor, interventions: Sequence = ()) -> torch.Tensor:
    """(layers, batch, d) block outputs (``resid_post``) at the last position, float64 on CPU."""

    an = anatomy(model)
    out: dict[int, torch.Tensor] = {}
    hooks = HookSet()
    try:
        for layer in range(an.n_layers):
            add_hook(model, "resid_post", layer, lambda x, ctx: out.__setitem__(ctx.layer, x[:, -1].double().cpu()),
                     hooks)
        with steer(model, *interventions):
            model(ids.to(input_device(model)))
    finally:
        hooks.remove()
    return torch.stack([out[i] for i in range(an.n_layers)])


def _states_by_length(model: nn.Module, seqs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Last-token states of sequences of possibly different lengths (equal lengths batched), (L, N, d)."""
    res: list[torch.Tensor | None] = [None] * len(seqs)
    by_len: dict[int, list[int]] = {}
    for i, s in enumerate(seqs):
        by_len.setdefault(len(s), []).append(i)
    for idx in by_len.values():
        st = last_token_states(model, torch.stack([seqs[i] for i in idx]))
        for j, i in enumerate(idx):
            res[i] = st[:, j]
    return torch.stack(res, dim=1)  # type: ignore[arg-type]


def contexts(prefixes: Sequence[torch.Tensor], suffix: torch.Tensor, bos: int | None) -> list[torch.Tensor]:
    """[BOS] + prefix + suffix for each prefix (1-D long tensors)."""
    if len(prefixes) == 0 or any(len(p) == 0 for p in prefixes):
        raise GeosteerError("every prefix needs at least one token (got an empty prefix list or prefix)")
    if len(suffix) == 0:
        raise GeosteerError("the suffix needs at least one token")
    head = [torch.tensor([bos])] if bos is not None else []
    return [torch.cat([*head, p.long(), suffix.long()]) for p in prefixes]


def prefix_spread(model: nn.Module, prefixes: Sequence[torch.Tensor], suffix: torch.Tensor, bos: int | None,
                  control: Sequence[torch.Tensor] | None = None) -> list[dict]:
    """Per layer: the spread of the last-token direction over the prefixes (and of ``control`` contexts)."""
    st = _states_by_length(model, contexts(prefixes, suffix, bos))
    ctl = _states_by_length(model, list(control)) if control else None
    rows = []
    for layer in range(st.shape[0]):
        row = {"layer": layer, "n": st.shape[1], **spread(st[layer])}
        if ctl is not None:
            c = spread(ctl[layer])
            row.update(control_pairwise_deg=c["pairwise_deg"], control_to_mean_deg=c["to_mean_deg"])
        rows.append(row)
    return rows


@torch.no_grad()
def anchor_scores(model: nn.Module, ids: torch.Tensor, score_layers: Sequence[int] | None = None,
                  score: str = "raw") -> torch.Tensor:
    """(batch, seq) anchor score: Σ_ℓ ‖P_u Φ_ℓ‖ (``raw``) or Σ_ℓ ‖P_u Φ_ℓ‖/‖mlp_in‖ (``relative``)."""

    if score not in SCORES:
        raise GeosteerError(f"unknown anchor score '{score}'; valid: {', '.join(SCORES)}")
    layers = anatomy(model).check_layers(score_layers)
    total = torch.zeros(ids.shape, dtype=torch.float64)
    hooks = HookSet()

    def fn(phi: torch.Tensor, ctx) -> None:
        nonlocal total
        x = ctx.state["mlp_in"].double()
        t = sphere.tangential(sphere.unit(x), phi.double()).norm(dim=-1)
        if score == "relative":
            t = t / x.norm(dim=-1).clamp_min(sphere.EPS)
        total = total + t.cpu()

    try:
        for layer in layers:
            add_hook(model, "mlp_out", layer, fn, hooks)
        model(ids.to(input_device(model)))
    finally:
        hooks.remove()
    return total


def _replacements(rng: np.random.Generator, pool: np.ndarray, original: np.ndarray) -> np.ndarray:
    """One pool token per original token, resampled (bounded) where it equals the original."""
    rep = pool[rng.integers(0, len(pool), size=len(original))]
    for _ in range(100):
        same = rep == original
        if not same.any():
            break
        rep[same] = pool[rng.integers(0, len(pool), size=int(same.sum()))]
    return rep


def anchor_study(model: nn.Module, prefixes: Sequence[torch.Tensor], suffix: torch.Tensor, bos: int | None,
                 k: int, seeds: Sequence[int], pool: torch.Tensor, score_layers: Sequence[int] | None = None,
                 score: str = "raw", exclude_anchors: bool = False) -> tuple[list[dict], list[dict], list[dict]]:
    """Anchor vs random replacement of k prefix tokens: per (prefix, seed, layer) shifts, a per-layer paired
    summary, and per (prefix, seed) the replaced positions (0-based within the prefix) and replacement tokens.

    Prefixes must share one length (they are batched). ``pool``: token ids replacements are drawn from.
    ``exclude_anchors``: random positions avoid the anchor positions (default False: uniform over the prefix).
    """
    check_positive(k, "k")
    if not seeds:
        raise GeosteerError("give at least one seed")
    lens = {len(p) for p in prefixes}
    if len(lens) != 1:
        raise GeosteerError(f"anchor prefixes must share one length (got lengths {sorted(lens)})")
    plen = lens.pop()
    if k > plen - (k if exclude_anchors else 0):
        raise GeosteerError(f"k = {k} is too large for prefixes of {plen} tokens")
    ids = torch.stack(contexts(prefixes, suffix, bos))
    off = 1 if bos is not None else 0
    sc = anchor_scores(model, ids, score_layers, score)[:, off:off + plen]
    anchors = sc.topk(k, dim=1).indices.sort(dim=1).values  # (N, k) positions within the prefix
    base = last_token_states(model, ids)
    pool_np = pool.cpu().numpy().astype(np.int64)
    records, positions = [], []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        edited = {"anchor": ids.clone(), "random": ids.clone()}
        rand_pos = []
        for i in range(ids.shape[0]):
            cand = np.setdiff1d(np.arange(plen), anchors[i].numpy()) if exclude_anchors else np.arange(plen)
            rp = np.sort(rng.choice(cand, size=k, replace=False))
            rand_pos.append(rp)
            ap = anchors[i].numpy()
            rep = _replacements(rng, pool_np, ids[i, off + ap].numpy())
            rep_r = rep.copy()
            clash = rep_r == ids[i, off + rp].numpy()
            if clash.any():  # same draws where possible; redraw only where a draw equals the original there
                rep_r[clash] = _replacements(rng, pool_np, ids[i, off + rp].numpy()[clash])
            edited["anchor"][i, off + ap] = torch.from_numpy(rep)
            edited["random"][i, off + rp] = torch.from_numpy(rep_r)
        shifts = {c: _angles_deg(base, last_token_states(model, e)) for c, e in edited.items()}  # (L, N)
        for i in range(ids.shape[0]):
            for layer in range(base.shape[0]):
                records.append({"prefix": i, "seed": seed, "layer": layer,
                                "anchor_deg": shifts["anchor"][layer, i].item(),
                                "random_deg": shifts["random"][layer, i].item()})
            positions.append({"prefix": i, "seed": seed, "anchor_positions": anchors[i].tolist(),
                              "random_positions": rand_pos[i].tolist(),
                              "anchor_tokens": edited["anchor"][i, off + anchors[i]].tolist(),
                              "random_tokens": edited["random"][i, off + rand_pos[i]].tolist()})
    return records, _paired_summary(records, base.shape[0]), positions


def _paired_summary(records: list[dict], n_layers: int) -> list[dict]:
    out = []
    for layer in range(n_layers):
        a = np.array([r["anchor_deg"] for r in records if r["layer"] == layer])
        b = np.array([r["random_deg"] for r in records if r["layer"] == layer])
        d = a - b
        out.append({"layer": layer, "n_pairs": len(d), "anchor_deg": float(a.mean()),
                    "random_deg": float(b.mean()), "diff_deg": float(d.mean()),
                    "diff_se": float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else math.nan,
                    "anchor_wins": float((d > 0).mean())})
    return out
